// What the status bar item says. Pure: the extension feeds it the server's state.
import type { Stats } from "./protocol";

export type ServerState =
  | { kind: "disabled" }
  | { kind: "idle" } // enabled, no document in an enabled language yet
  | { kind: "starting" }
  | { kind: "stopped"; reason: string } // the process could not start or died
  | { kind: "running"; stats: Stats | undefined }; // stats undefined until the first answer

export interface StatusView {
  text: string;
  tooltip: string;
  label: string; // what a screen reader says: the text's icons mean nothing to one
  error: boolean;
}

export function percent(rate: number): string {
  return `${Math.round(rate * 100)}%`;
}

// Of the accepted characters checked at some time after their acceptance, the share still there.
function retained(kept: number, checked: number): string {
  return checked ? `${percent(kept / checked)} of ${checked}` : "not checked yet";
}

export function statsLines(stats: Stats): string[] {
  return [
    stats.decoder === "local"
      ? `models: ${stats.target}${stats.draft ? ` + draft ${stats.draft}` : " (no draft)"}`
      : `server (${stats.decoder}): ${stats.target || "not connected"}`,
    ...(stats.draft_failure ? [stats.draft_failure] : []),
    ...(stats.server_error ? [stats.server_error] : []),
    `requests: ${stats.requests} (${stats.forward_cache_hits} from the suggestion shown, ` +
      `${stats.prefetch_hits} computed ahead of an acceptance, ${stats.superseded} superseded)`,
    ...(stats.saturated
      ? [`server busy: prefetch paused, debounce ${stats.adaptive_debounce_ms} ms (answers at half speed or less)`]
      : []),
    `draft acceptance: ${percent(stats.draft_acceptance_rate)}`,
    `speed: ${stats.tokens_per_second.toFixed(1)} tokens/s`,
    `KV cache hits: ${percent(stats.cache_hit_rate)} of prompt tokens (${stats.warmed_tokens} evaluated ahead)`,
    stats.index_files
      ? `workspace index: ${stats.index_files} files, ${stats.index_tokens} tokens, ${stats.index_mb.toFixed(0)} MB`
      : "workspace index: none yet",
    stats.definitions_files
      ? `definitions index: ${stats.definitions} definitions in ${stats.definitions_files} files, ` +
        `${stats.definitions_mb.toFixed(0)} MB, built in ${(stats.definitions_build_ms / 1000).toFixed(1)} s`
      : "definitions index: none yet",
    `suggestions: ${stats.suggestions_shown} shown, ${stats.suggestions_accepted} accepted ` +
      `(${percent(stats.suggestion_acceptance_rate)}), ${stats.suggestions_partially_accepted} taken in part`,
    `accepted: ${stats.accepted_chars} characters; still there after 30 s: ${retained(stats.retained_chars_30s, stats.checked_chars_30s)}, ` +
      `after 2 min: ${retained(stats.retained_chars_120s, stats.checked_chars_120s)}`,
    `next edits: ${stats.edits_shown} shown, ${stats.edits_accepted} accepted, ${stats.edits_rejected} dismissed`,
  ];
}

export function statusView(state: ServerState): StatusView {
  const view = statusWithoutLabel(state);
  return { ...view, label: view.tooltip.split("\n")[0] };
}

function statusWithoutLabel(state: ServerState): Omit<StatusView, "label"> {
  switch (state.kind) {
    case "disabled":
      return { text: "$(circle-slash) completer", tooltip: "completer is disabled: click to enable", error: false };
    case "idle":
      return { text: "$(sparkle) completer", tooltip: "completer starts with the first file in an enabled language", error: false };
    case "starting":
      return { text: "$(sync~spin) completer", tooltip: "completer: starting the server", error: false };
    case "stopped":
      return { text: "$(error) completer", tooltip: `completer stopped: ${state.reason}`, error: true };
    case "running": {
      const stats = state.stats;
      if (stats?.error) return { text: "$(error) completer", tooltip: stats.error, error: true };
      if (!stats?.ready) {
        return { text: "$(sync~spin) completer", tooltip: "completer: loading the models", error: false };
      }
      const figures = `${percent(stats.draft_acceptance_rate)} · ${stats.tokens_per_second.toFixed(0)} tok/s`;
      const text = stats.requests ? `$(sparkle) ${figures}` : "$(sparkle) completer";
      const ready = stats.requests ? `completer: ready, ${figures}` : "completer: ready";
      return { text, tooltip: [ready, ...statsLines(stats), "click for details"].join("\n"), error: false };
    }
  }
}
