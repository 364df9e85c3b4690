// completer's custom protocol, as lsp/protocol.py defines it; a test keeps the two equal.

export const SERVER_NAME = "completer";

// Request, no params: the statistics below.
export const STATS = "completer/stats";

// Notification, params { textDocument: { uri }, position }: the user is at this position
// of an open document (opened or made active); the server evaluates the prompt there
// ahead of the first request.
export const WARM = "completer/warm";

// Command each completion item carries; VS Code runs it when the user accepts the item.
export const ACCEPT_COMMAND = "completer.accept";

// Where workspace/didChangeConfiguration's settings nest the server options.
export const SETTINGS_SECTION = "completer";

// The completer/stats result.
export interface Stats {
  ready: boolean;
  error: string;
  backend: string;
  target: string;
  draft: string;
  draft_failure: string;
  server_error: string;
  requests: number;
  forward_cache_hits: number;
  superseded: number;
  cache_hit_rate: number;
  draft_acceptance_rate: number;
  tokens_per_second: number;
  suggestions_shown: number;
  suggestions_accepted: number;
  suggestion_acceptance_rate: number;
  sessions: number;
  saved_kv_mb: number;
  warmed_tokens: number;
  index_files: number;
  index_tokens: number;
  index_mb: number;
  edit_requests: number;
  edits_suggested: number;
  edits_shown: number;
  edits_accepted: number;
  edits_rejected: number;
}
