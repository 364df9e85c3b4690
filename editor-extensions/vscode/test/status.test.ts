import { describe, expect, it } from "vitest";
import type { Stats } from "../src/protocol";
import { percent, statsLines, statusView } from "../src/status";

const stats: Stats = {
  ready: true,
  error: "",
  decoder: "local",
  target: "smollm2.gguf",
  draft: "smollm2-draft.gguf",
  draft_failure: "",
  server_error: "",
  requests: 12,
  forward_cache_hits: 5,
  superseded: 2,
  cache_hit_rate: 0.934,
  draft_acceptance_rate: 0.716,
  tokens_per_second: 41.26,
  suggestions_shown: 7,
  suggestions_accepted: 3,
  suggestion_acceptance_rate: 3 / 7,
  sessions: 2,
  saved_kv_mb: 12.5,
  drafting_documents: 1,
  tuned_documents: 2,
  warmed_tokens: 900,
  index_files: 1790,
  index_tokens: 8_400_000,
  index_mb: 64.2,
  definitions_files: 1790,
  definitions: 41210,
  definitions_mb: 21.4,
  definitions_build_ms: 3520,
  edit_requests: 0,
  edits_suggested: 0,
  edits_shown: 4,
  edits_accepted: 1,
  edits_rejected: 2,
  suggestions_seen: 7,
  suggestions_partially_accepted: 1,
  accepted_chars: 120,
  checked_chars_30s: 100,
  retained_chars_30s: 93,
  checked_chars_120s: 0,
  retained_chars_120s: 0,
  prefetches: 4,
  prefetch_hits: 3,
  saturated: false,
  adaptive_debounce_ms: 0,
};

describe("statusView", () => {
  it("says when a shared server is busy, and the debounce it asks for", () => {
    expect(statusView({ kind: "running", stats }).tooltip).not.toContain("server busy");
    const busy = statusView({ kind: "running", stats: { ...stats, saturated: true, adaptive_debounce_ms: 400 } });
    expect(busy.tooltip).toContain("server busy: prefetch paused, debounce 400 ms");
  });

  it("shows the draft acceptance rate and tokens/s once requests were served", () => {
    const view = statusView({ kind: "running", stats });
    expect(view.text).toBe("$(sparkle) 72% · 41 tok/s");
    expect(view.error).toBe(false);
    expect(view.tooltip).toContain("suggestions: 7 shown, 3 accepted (43%)");
    expect(view.tooltip).toContain("workspace index: 1790 files, 8400000 tokens, 64 MB");
    expect(view.tooltip).toContain("next edits: 4 shown, 1 accepted, 2 dismissed");
    expect(view.tooltip).toContain(
      "accepted: 120 characters; still there after 30 s: 93% of 100, after 2 min: not checked yet",
    );
    expect(view.tooltip).toContain("requests: 12 (5 from the suggestion shown, 3 computed ahead of an acceptance, 2 superseded)");
    expect(statsLines({ ...stats, index_files: 0 })).toContain("workspace index: none yet");
    expect(statsLines(stats)).toContain("definitions index: 41210 definitions in 1790 files, 21 MB, built in 3.5 s");
    expect(statsLines({ ...stats, definitions_files: 0 })).toContain("definitions index: none yet");
  });

  it("says ready without figures before the first request", () => {
    expect(statusView({ kind: "running", stats: { ...stats, requests: 0 } }).text).toBe("$(sparkle) completer");
  });

  it("spins while the models load", () => {
    const view = statusView({ kind: "running", stats: { ...stats, ready: false } });
    expect(view.text).toContain("sync~spin");
    expect(view.tooltip).toContain("loading");
    expect(statusView({ kind: "running", stats: undefined }).tooltip).toContain("loading");
  });

  it("shows a load error, with the server's fix, as an error", () => {
    const error = "no model file at /x.gguf: run `completer models pull smol`";
    const view = statusView({ kind: "running", stats: { ...stats, ready: false, error } });
    expect(view).toEqual({ text: "$(error) completer", tooltip: error, label: error, error: true });
  });

  it("shows a stopped server as an error with its reason", () => {
    const view = statusView({ kind: "stopped", reason: "spawn completer ENOENT" });
    expect(view.error).toBe(true);
    expect(view.tooltip).toContain("spawn completer ENOENT");
  });

  it("tells a screen reader the state without icons, and says ready only once the models are", () => {
    expect(statusView({ kind: "running", stats }).label).toBe("completer: ready, 72% · 41 tok/s");
    expect(statusView({ kind: "running", stats: { ...stats, requests: 0 } }).label).toBe("completer: ready");
    for (const state of [{ kind: "idle" }, { kind: "starting" }, { kind: "running", stats: undefined }] as const) {
      expect(statusView(state).label).not.toContain("ready");
    }
  });

  it("marks disabled and idle without error", () => {
    expect(statusView({ kind: "disabled" }).error).toBe(false);
    expect(statusView({ kind: "idle" }).error).toBe(false);
  });
});

describe("statsLines", () => {
  it("names a missing draft", () => {
    expect(statsLines({ ...stats, draft: "" })[0]).toBe("models: smollm2.gguf (no draft)");
  });

  it("says when the draft failed and the target completes alone", () => {
    const failure = "the draft model failed (llama_decode failed); completing with the target alone";
    expect(statsLines({ ...stats, draft_failure: failure })).toContain(failure);
  });

  it("names a server decoder's model and why the server cannot be used", () => {
    const down = "http://10.0.0.5:8080 did not answer /props: Connection refused";
    const lines = statsLines({ ...stats, decoder: "llama-server", target: "qwen7b.gguf", server_error: down });
    expect(lines[0]).toBe("server (llama-server): qwen7b.gguf");
    expect(lines).toContain(down);
  });

  it("rounds percentages", () => {
    expect(percent(0.005)).toBe("1%");
    expect(percent(0)).toBe("0%");
  });
});
