import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { launch, pullArgs, serveArgs, serverOptions, snakeCase } from "../src/settings";

const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
const declared: Record<string, { default: unknown }> = manifest.contributes.configuration.properties;

describe("serverOptions", () => {
  it("nests group settings under their group, in the server's snake_case", () => {
    expect(
      serverOptions({
        "models.preset": "smol",
        "models.targetGpuLayers": "auto",
        "generation.maxTokens": 16,
        "generation.timeBudgetMs": 0,
        "server.debounceMs": 50,
      }),
    ).toEqual({
      models: { preset: "smol", target_gpu_layers: "auto" },
      generation: { max_tokens: 16, time_budget_ms: 0 },
      server: { debounce_ms: 50 },
    });
  });

  it("leaves out the extension's own settings and unknown groups", () => {
    expect(serverOptions({ enable: true, languages: ["python"], command: "completer", "editor.fontSize": 3 })).toEqual({});
  });

  it("sends null model paths as null, so the preset's files are used", () => {
    expect(serverOptions({ "models.target": null, "models.draft": null })).toEqual({
      models: { target: null, draft: null },
    });
  });

  it("maps every declared server setting of package.json, with its default", () => {
    const defaults = Object.fromEntries(
      Object.entries(declared).map(([key, schema]) => [key.slice("completer.".length), schema.default]),
    );
    const options = serverOptions(defaults);
    const sent = Object.values(options).reduce((count, group) => count + Object.keys(group).length, 0);
    const serverKeys = Object.keys(defaults).filter((key) => key.includes("."));
    expect(sent).toBe(serverKeys.length);
    expect(options.generation?.max_tokens).toBe(declared["completer.generation.maxTokens"]?.default);
  });

  it("turns camelCase into snake_case", () => {
    expect(snakeCase("targetGpuLayers")).toBe("target_gpu_layers");
    expect(snakeCase("preset")).toBe("preset");
  });
});

describe("launch", () => {
  it("runs the completer command by default", () => {
    const how = launch("completer", "");
    expect([how.command, ...serveArgs(how)]).toEqual(["completer", "serve", "--stdio"]);
    expect([how.command, ...pullArgs(how, "smol")]).toEqual(["completer", "models", "pull", "smol"]);
  });

  it("runs the module through a Python interpreter when one is set", () => {
    const how = launch("completer", " /venv/bin/python ");
    expect([how.command, ...serveArgs(how)]).toEqual(["/venv/bin/python", "-m", "completer", "serve", "--stdio"]);
  });

  it("falls back to completer for a blank command", () => {
    expect(launch("  ", "").command).toBe("completer");
  });
});
