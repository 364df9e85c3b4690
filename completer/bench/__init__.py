"""`completer bench`: holes in a repository, every mode side by side, a report.

The mode names live here, apart from the engine, so the CLI can list them without
loading llama.cpp."""

PEER = "peer:llama-cpp-python"
MODES = ("target", "ngram", "draft", "hybrid", "auto", PEER)
# With a draft `completer distill` trained for the target, these run beside the modes
# above with it instead of the preset's draft: undistilled and distilled side by side.
DISTILLED_MODES = ("draft:distilled", "hybrid:distilled")
