"""The custom protocol of completer's language server: names and shapes shared by the
server, its tests and the benchmarks that drive it. Imports nothing from the engine,
so a client can use it without loading models."""

SERVER_NAME = "completer"

# Request, no params: the statistics below, as a JSON object.
STATS = "completer/stats"
# Request, params {"uri": ...}: the server's copy of an open document, {"text", "version"},
# or null when it is not open. For checking document sync from a client (or a test).
DOCUMENT = "completer/document"

# Request, params {"uri": ...}: why the document's last decoded completion came, for an
# editor's "why this suggestion" view: {"prompt": the prompt as the model saw it, control
# tokens spelt out, "sections": [{"path", "why"}, ...] the other files it showed, in its
# order (the definitions the code at the cursor calls, then open files' chunks)}; null when
# the document is not open or had no completion decoded yet.
PROMPT = "completer/prompt"

# Notification, params {"textDocument": {"uri": ...}, "position": {"line", "character"}}:
# the user is at this position of an open document (it was opened or became active) and
# may ask soon; the server evaluates that request's prompt ahead of it, giving way to any
# request. Editors send it when a document is opened or becomes active.
WARM = "completer/warm"

# Command (workspace/executeCommand) each completion item carries: the editor runs it
# when the user accepts the item. Arguments: [item id, the document version the
# completion was computed for].
ACCEPT_COMMAND = "completer.accept"

# Notifications in the shapes Copilot's language server takes: params {"item": <an item
# returned, whose command carries ACCEPT_COMMAND's arguments>}, the editor shows the item;
# and the same with "acceptedLength": the user took its first acceptedLength code units
# (the negotiated position encoding's) of its text, a word or a line at a time.
DID_SHOW_COMPLETION = "textDocument/didShowCompletion"
DID_PARTIALLY_ACCEPT_COMPLETION = "textDocument/didPartiallyAcceptCompletion"

# Request, Copilot's language server's next-edit request (so that clients written for
# it, such as copilot-lsp's next-edit module for Neovim, work here): params
# {"textDocument": {"uri", "version"}, "position": {"line", "character"}}; result
# {"edits": [{"text", "range", "textDocument": {"uri", "version"}, "command"}]}, the edits
# the user will make next around the position, in order, for that version of the
# document: none when the model suggests none, or when the document changed meanwhile.
INLINE_EDIT = "textDocument/copilotInlineEdit"
# Notification, params {"item": {"command": <an edit's command>}}: the client shows an edit.
DID_SHOW_INLINE_EDIT = "textDocument/didShowInlineEdit"
# Commands (workspace/executeCommand) for a suggestion's edits, arguments [suggestion id,
# document version]: the user accepted the suggestion (each edit carries this one), or
# dismissed it.
ACCEPT_EDIT_COMMAND = "completer.acceptEdit"
REJECT_EDIT_COMMAND = "completer.rejectEdit"
# The key under the server's `experimental` capabilities that says INLINE_EDIT is answered.
INLINE_EDIT_CAPABILITY = "copilotInlineEdit"
# Notification, Copilot's, params {"textDocument": {"uri"}}: the user switched to this open
# document. The server warms it as WARM does, at the position of the document's last request
# (its end before any).
DID_FOCUS = "textDocument/didFocus"

# initializationOptions beside the option groups of completer/config.py, saying what the
# client does rather than what the user chose: {"client": {"several_edits": true}}, the
# client shows and applies every edit of an INLINE_EDIT answer (completer's own plugins
# do). Without it an answer has one edit at most, spanning the whole change, as Copilot's
# language server answers: its clients show and apply an answer's first edit only.
CLIENT_OPTIONS = "client"
SEVERAL_EDITS_OPTION = "several_edits"
# What Copilot's clients send as initializationOptions (editorInfo, editorPluginInfo) and
# settings (nextEditSuggestions): no options of completer's, taken quietly.
COPILOT_OPTION_GROUPS = ("editorInfo", "editorPluginInfo", "nextEditSuggestions")

# Keys of the completer/stats result.
STATS_KEYS = (
    "ready",  # models loaded and serving
    "error",  # why the models did not load, with what to run; "" when they did or are loading
    "decoder",  # models.decoder: local, llama-server or openai
    "target",  # model file names (a server's model for a server decoder); "" until loaded
    "draft",
    "draft_failure",  # why the draft model was dropped mid-session (the target completes alone); "" if not
    "server_error",  # why the server decoder cannot be used now (it is tried again); "" while it answers
    "requests",  # completion requests answered
    "forward_cache_hits",  # of those, answered from the completion shown, with no model call
    "superseded",  # of those, cancelled by a newer request or $/cancelRequest
    # For a server decoder, these three are from the server's own timings.
    "cache_hit_rate",  # prompt tokens found in the KV caches / prompt tokens
    "draft_acceptance_rate",  # drafted tokens the target accepted / drafted tokens
    "tokens_per_second",  # generated tokens / time in generation, prompt evaluation included
    "suggestions_shown",  # items returned with text
    "suggestions_accepted",  # items whose accept command ran
    "suggestion_acceptance_rate",
    "suggestions_seen",  # items the editor said it showed (DID_SHOW_COMPLETION)
    "suggestions_partially_accepted",  # items taken in part (DID_PARTIALLY_ACCEPT_COMPLETION)
    "accepted_chars",  # characters accepted, whole items and parts
    # Of those, the ones checked 30 s and 2 min after their acceptance (in documents still
    # open), and of these, the ones still in the document then (lsp/acceptance.py).
    "checked_chars_30s",
    "retained_chars_30s",
    "checked_chars_120s",
    "retained_chars_120s",
    "sessions",  # documents with a completion session (open ones the server has completed in)
    "saved_kv_mb",  # KV caches saved for documents not being completed (cache.budget_mb bounds it)
    "drafting_documents",  # other open documents n-gram lookup drafts from (the local engine)
    "tuned_documents",  # documents the tuner keeps acceptance curves of (the local engine)
    "warmed_tokens",  # prompt tokens evaluated ahead of a request, after completer/warm
    "index_files",  # workspace files n-gram lookup drafts from; 0 until the index is built
    "index_tokens",
    "index_mb",  # the index's memory (drafting.index_mb bounds it)
    # The definitions index (what prompts show of other files' definitions): files and
    # definitions in it, its memory (context.definitions_mb bounds it) and its last build's time.
    "definitions_files",
    "definitions",
    "definitions_mb",
    "definitions_build_ms",
    "edit_requests",  # next-edit requests answered
    "edits_suggested",  # of those, answers with at least one edit
    "edits_shown",  # next edits the client said it showed (DID_SHOW_INLINE_EDIT)
    "edits_accepted",  # next edits whose ACCEPT_EDIT_COMMAND ran, or that the document's next change made once shown
    "edits_rejected",  # next edits whose REJECT_EDIT_COMMAND ran
    "prefetches",  # completions computed while the one they follow was shown (lsp.prefetch)
    "prefetch_hits",  # requests answered from one, with no model call
    # A shared server's load, from this editor's answers (completer/editor/load.py): whether
    # it is saturated (prefetch waits), and the debounce the answers' latency then asks for
    # (0 while it is not).
    "saturated",
    "adaptive_debounce_ms",
)

# Where `settings` of workspace/didChangeConfiguration may nest the options.
SETTINGS_SECTION = "completer"
