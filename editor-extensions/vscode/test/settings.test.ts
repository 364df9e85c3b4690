import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import {
  launch,
  MACHINE_SETTINGS,
  machineValues,
  PROGRAM_SETTINGS,
  pullArgs,
  RESTART_SETTINGS,
  serveArgs,
  RENAMED,
  serverOptions,
  snakeCase,
  withRenamedSettings,
} from "../src/settings";

const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
const declared: Record<string, { default: unknown; scope?: string }> = manifest.contributes.configuration.properties;

describe("serverOptions", () => {
  it("nests group settings under their group, in the server's snake_case", () => {
    expect(
      serverOptions({
        "models.preset": "smol",
        "models.targetGpuLayers": "auto",
        "generation.maxTokens": 16,
        "generation.timeBudgetMs": 0,
        "lsp.debounceMs": 50,
      }),
    ).toEqual({
      models: { preset: "smol", target_gpu_layers: "auto" },
      generation: { max_tokens: 16, time_budget_ms: 0 },
      lsp: { debounce_ms: 50 },
    });
  });

  it("sends an old name under its old group, for the server to read as the new one with a warning", () => {
    expect(serverOptions({ "server.prefetch": false, "server.debounceMs": 50, "server.port": 1 })).toEqual({
      server: { prefetch: false, debounce_ms: 50 },
    });
  });

  it("leaves out the extension's own settings and unknown groups", () => {
    expect(serverOptions({ enable: true, languages: ["python"], command: "completer", "editor.fontSize": 3 })).toEqual({});
  });

  it("leaves out the machine-level settings, whatever their value: they go as flags", () => {
    expect(
      serverOptions({
        "models.preset": "smol",
        "models.serverUrl": "https://elsewhere",
        "models.decoder": "openai",
        "models.backend": "llama-server",
        "models.apiKeyEnv": "GITHUB_TOKEN",
        "models.rpcServers": "10.0.0.9:50052",
        "models.target": null,
        "models.draft": "/tmp/draft.gguf",
      }),
    ).toEqual({ models: { preset: "smol" } });
  });

  it("maps every declared server setting of package.json, with its default", () => {
    const defaults = Object.fromEntries(
      Object.entries(declared).map(([key, schema]) => [key.slice("completer.".length), schema.default]),
    );
    const options = serverOptions(defaults);
    const sent = Object.values(options).reduce((count, group) => count + Object.keys(group).length, 0);
    const serverKeys = Object.keys(defaults).filter((key) => key.includes(".") && !MACHINE_SETTINGS.includes(key));
    expect(sent).toBe(serverKeys.length);
    expect(options.generation?.max_tokens).toBe(declared["completer.generation.maxTokens"]?.default);
  });

  it("turns camelCase into snake_case", () => {
    expect(snakeCase("targetGpuLayers")).toBe("target_gpu_layers");
    expect(snakeCase("preset")).toBe("preset");
  });
});

describe("machine-level settings", () => {
  it("are exactly the settings of machine scope in package.json", () => {
    const machine = Object.keys(declared)
      .filter((key) => declared[key]?.scope === "machine")
      .map((key) => key.slice("completer.".length));
    expect(machine.sort()).toEqual([...PROGRAM_SETTINGS, ...MACHINE_SETTINGS].sort());
    expect(MACHINE_SETTINGS).toContain("models.backend"); // models.decoder's old name
  });

  it("become the server's flags when set, and nothing when not", () => {
    const how = launch("completer", "");
    const values = { "models.serverUrl": "http://127.0.0.1:8012", "models.decoder": "llama-server",
      "models.apiKeyEnv": "COMPLETER_API_KEY", "models.target": undefined, "models.draft": null, "models.rpcServers": "" };
    expect(serveArgs(how, values)).toEqual(["serve", "--stdio", "--decoder", "llama-server", "--server-url",
      "http://127.0.0.1:8012", "--api-key-env", "COMPLETER_API_KEY"]);
    expect(serveArgs(how, {})).toEqual(["serve", "--stdio"]);
  });

  it("take an old name's value when the new one is unset, as the new one's flag", () => {
    const user = (set: Record<string, unknown>) => (name: string) => set[name];
    const how = launch("completer", "");
    const old = machineValues(user({ "models.backend": "openai", "models.serverUrl": "http://127.0.0.1:8012" }));
    expect(serveArgs(how, old)).toEqual(["serve", "--stdio", "--decoder", "openai", "--server-url",
      "http://127.0.0.1:8012"]);
    const both = machineValues(user({ "models.backend": "openai", "models.decoder": "llama-server" }));
    expect(serveArgs(how, both)).toEqual(["serve", "--stdio", "--decoder", "llama-server"]);
    expect(serveArgs(how, machineValues(user({})))).toEqual(["serve", "--stdio"]);
  });

  it("restart the server when they change, under their old names too", () => {
    for (const name of [...PROGRAM_SETTINGS, ...MACHINE_SETTINGS]) expect(RESTART_SETTINGS).toContain(name);
    expect(RESTART_SETTINGS).toContain("models.backend");
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

describe("withRenamedSettings", () => {
  const defaults = { "prompt.crossFileTokens": 1024, "prompt.contextTokens": null, "prompt.chunks": 16 };

  it("sends an old name the user set, without its new name's default", () => {
    const sent = withRenamedSettings({ ...defaults, "prompt.contextTokens": 2000 }, () => false);
    expect(sent).toEqual({ "prompt.contextTokens": 2000, "prompt.chunks": 16 });
  });

  it("sends both when the user set both, for the server to refuse if they differ", () => {
    const sent = withRenamedSettings({ ...defaults, "prompt.contextTokens": 2000 }, () => true);
    expect(sent).toEqual({ "prompt.crossFileTokens": 1024, "prompt.contextTokens": 2000, "prompt.chunks": 16 });
  });

  it("leaves an old name out when it is unset", () => {
    expect(withRenamedSettings(defaults, () => false)).toEqual({ "prompt.crossFileTokens": 1024, "prompt.chunks": 16 });
  });

  it("names each old setting as declared, deprecated, with its new one declared too", () => {
    for (const [old, now] of Object.entries(RENAMED)) {
      expect(declared[`completer.${old}`]).toHaveProperty("deprecationMessage");
      expect(declared[`completer.${now}`]).toBeDefined();
    }
  });
});
