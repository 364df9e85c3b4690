"""The custom protocol of completer's language server: names and shapes shared by the
server, the editor extensions' tests and `completer bench`. Imports nothing from the
engine, so a client can use it without loading models."""

SERVER_NAME = "completer"

# Request, no params: the statistics below, as a JSON object.
STATS = "completer/stats"
# Command (workspace/executeCommand) each completion item carries: the editor runs it
# when the user accepts the item. Arguments: [item id].
ACCEPT_COMMAND = "completer.accept"

# Keys of the completer/stats result.
STATS_KEYS = (
    "ready",  # models loaded and serving
    "error",  # why the models did not load, with what to run; "" when they did or are loading
    "target",  # model file names; "" until loaded
    "draft",
    "requests",  # completion requests answered
    "forward_cache_hits",  # of those, answered from the completion shown, with no model call
    "superseded",  # of those, cancelled by a newer request or $/cancelRequest
    "cache_hit_rate",  # prompt tokens found in the KV caches / prompt tokens
    "draft_acceptance_rate",  # drafted tokens the target accepted / drafted tokens
    "tokens_per_second",  # generated tokens / time in generation, prompt evaluation included
    "suggestions_shown",  # items returned with text
    "suggestions_accepted",  # items whose accept command ran
    "suggestion_acceptance_rate",
)

# Where `settings` of workspace/didChangeConfiguration may nest the options.
SETTINGS_SECTION = "completer"
