// From VS Code settings to what the server is started with. Pure: no vscode import, so
// unit tests run without an editor.

// Groups of the server's option tree (completer/config.py). Settings under
// `completer.<group>.<optionName>` are sent as `<group>.<option_name>`.
export const SERVER_GROUPS = ["models", "generation", "prompt", "drafting", "cache", "server"] as const;

export type ServerOptions = Record<string, Record<string, unknown>>;

export function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (letter) => "_" + letter.toLowerCase());
}

// `values` maps setting keys below `completer.` (e.g. "generation.maxTokens") to values.
// Keys outside the server's groups (the extension's own settings) are left out.
export function serverOptions(values: Record<string, unknown>): ServerOptions {
  const options: ServerOptions = {};
  for (const [key, value] of Object.entries(values)) {
    const parts = key.split(".");
    const group = parts[0];
    if (parts.length !== 2 || !(SERVER_GROUPS as readonly string[]).includes(group)) continue;
    (options[group] ??= {})[snakeCase(parts[1])] = value;
  }
  return options;
}

export interface Launch {
  command: string;
  prefix: string[]; // arguments before the subcommand: ["-m", "completer"] for an interpreter
}

// The server runs as `<command> serve --stdio`, or `<python> -m completer serve --stdio`.
export function launch(command: string, pythonPath: string): Launch {
  const python = pythonPath.trim();
  if (python) return { command: python, prefix: ["-m", "completer"] };
  return { command: command.trim() || "completer", prefix: [] };
}

export function serveArgs(how: Launch): string[] {
  return [...how.prefix, "serve", "--stdio"];
}

export function pullArgs(how: Launch, preset: string): string[] {
  return [...how.prefix, "models", "pull", preset];
}

// Settings whose change needs a new server process (or none); the rest reach the running
// server as workspace/didChangeConfiguration.
export const RESTART_SETTINGS = ["enable", "languages", "command", "pythonPath"] as const;
