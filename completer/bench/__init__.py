"""`completer bench`: holes in a repository, every mode side by side, a report.

The mode names live here, apart from the engine, so the CLI can list them without
loading llama.cpp."""

PEER = "peer:llama-cpp-python"
# `auto` without the workspace index (drafting from the document alone), beside `auto`:
# what the index buys, in the same run.
NO_INDEX = "auto:no-index"
MODES = ("target", "ngram", "draft", "hybrid", "auto", NO_INDEX, PEER)
# Modes still taken under an old name, old -> new, with a warning. "local" names the
# decoder in this process (models.decoder), not a mode without the index.
RENAMED_MODES = {"auto:local": NO_INDEX}
# llama-server's configurations (completer.bench.peers says which is which): they run
# when a llama-server is found (`completer build` makes one).
LLAMA_SERVER = "peer:llama-server"
LLAMA_SERVER_PEERS = (LLAMA_SERVER, f"{LLAMA_SERVER}:draft", f"{LLAMA_SERVER}:draft-fim",
                      f"{LLAMA_SERVER}:ngram-mod", f"{LLAMA_SERVER}:ngram-simple")
PEERS = (PEER, *LLAMA_SERVER_PEERS)
# With a draft `completer distill` trained for the target, these run beside the modes
# above with it instead of the preset's draft: undistilled and distilled side by side.
DISTILLED_MODES = ("draft:distilled", "hybrid:distilled")
# The modes that draft with the draft model alone: a target named without a draft runs
# none of them (auto's n-gram, workspace and copy drafting need no model).
DRAFT_MODEL_MODES = ("draft", "hybrid", f"{LLAMA_SERVER}:draft", f"{LLAMA_SERVER}:draft-fim")
# --pick: how inline holes are picked (completer.bench.holes says how).
PICKS = ("random", "cross-file")
# --with-context: the other files an inline prompt shows. The bench opens no documents, so
# the open files' ring (prompt.cross_file_tokens) holds nothing: `ring` runs as `none`.
WITH_CONTEXT = ("none", "ring", "definitions")


def modes_to_run(asked: tuple[str, ...], distilled: bool, indexed: bool = True) -> tuple[str, ...]:
    """The distilled draft's modes run beside the preset draft's they match; without a
    distilled draft, none of them. Without the workspace index, auto:no-index is auto."""
    chosen = asked if indexed else tuple(m for m in asked if m != NO_INDEX)
    if not distilled:
        return tuple(m for m in chosen if m not in DISTILLED_MODES)
    return tuple(dict.fromkeys(chosen + tuple(m for m in DISTILLED_MODES if m.partition(":")[0] in chosen)))
