// completer's custom protocol, as lsp/protocol.py defines it; a test keeps the two equal.

export const SERVER_NAME = "completer";

// Request, no params: the statistics below.
export const STATS = "completer/stats";

// Request, params { uri }: why the document's last decoded completion came, for the "why
// this suggestion" view: PromptAnswer; null when the document had no completion decoded yet.
export const PROMPT = "completer/prompt";

// Notification, params { textDocument: { uri }, position }: the user is at this position
// of an open document (opened or made active); the server evaluates the prompt there
// ahead of the first request.
export const WARM = "completer/warm";

// Command each completion item carries; VS Code runs it when the user accepts the item.
export const ACCEPT_COMMAND = "completer.accept";

// Notifications in Copilot's shapes: params { item: <an item returned> }, the editor shows
// it; the same with acceptedLength, the user took the first acceptedLength UTF-16 units of
// its text. VS Code's stable API reports no partial acceptance, so only the first is sent.
export const DID_SHOW_COMPLETION = "textDocument/didShowCompletion";

// Request, Copilot's next-edit request: params InlineEditParams; result InlineEditResult,
// the edits the user will make next around the position, in order, for that version of
// the document; none when the model suggests none or the document changed meanwhile.
export const INLINE_EDIT = "textDocument/copilotInlineEdit";

// Notification, params { item: { command: <an edit's command> } }: the client shows an edit.
export const DID_SHOW_INLINE_EDIT = "textDocument/didShowInlineEdit";

// Commands (workspace/executeCommand) for a suggestion's edits, arguments [suggestion id,
// document version]: the user accepted the suggestion (each edit carries this one), or
// dismissed it.
export const ACCEPT_EDIT_COMMAND = "completer.acceptEdit";
export const REJECT_EDIT_COMMAND = "completer.rejectEdit";

// The key under the server's `experimental` capabilities that says INLINE_EDIT is answered.
export const INLINE_EDIT_CAPABILITY = "copilotInlineEdit";

// initializationOptions beside the server's option groups: { client: { several_edits: true } }
// says the client shows and applies every edit of an INLINE_EDIT answer; without it the
// server answers one edit spanning them, as Copilot's server does for its clients.
export const CLIENT_OPTIONS = "client";
export const SEVERAL_EDITS_OPTION = "several_edits";

// Where workspace/didChangeConfiguration's settings nest the server options.
export const SETTINGS_SECTION = "completer";

// LSP positions: 0-based lines, UTF-16 characters.
export interface Position {
  line: number;
  character: number;
}

export interface Range {
  start: Position;
  end: Position;
}

export interface InlineEditParams {
  textDocument: { uri: string; version: number };
  position: Position;
}

export interface InlineEditCommand {
  title: string;
  command: string; // ACCEPT_EDIT_COMMAND
  arguments: unknown[]; // [suggestion id, document version]
}

export interface InlineEdit {
  text: string; // replaces `range`
  range: Range;
  textDocument: { uri: string; version: number };
  command: InlineEditCommand;
}

export interface InlineEditResult {
  edits: InlineEdit[];
}

// The completer/prompt result: the prompt as the model read it (control tokens spelt out),
// and the other files it showed, in its order, each saying why it is there.
export interface PromptSection {
  path: string; // "shop/transport.py"
  why: string; // "Transport.fetch line 10: same name"
}

export interface PromptAnswer {
  prompt: string;
  sections: PromptSection[];
}

// The completer/stats result.
export interface Stats {
  ready: boolean;
  error: string;
  decoder: string;
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
  suggestions_seen: number;
  suggestions_partially_accepted: number;
  accepted_chars: number;
  checked_chars_30s: number;
  retained_chars_30s: number;
  checked_chars_120s: number;
  retained_chars_120s: number;
  sessions: number;
  saved_kv_mb: number;
  drafting_documents: number;
  tuned_documents: number;
  warmed_tokens: number;
  index_files: number;
  index_tokens: number;
  index_mb: number;
  definitions_files: number;
  definitions: number;
  definitions_mb: number;
  definitions_build_ms: number;
  edit_requests: number;
  edits_suggested: number;
  edits_shown: number;
  edits_accepted: number;
  edits_rejected: number;
  prefetches: number;
  prefetch_hits: number;
  saturated: boolean;
  adaptive_debounce_ms: number;
}
