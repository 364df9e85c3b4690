// From VS Code settings to what the server is started with. Pure: no vscode import, so
// unit tests run without an editor.

// Groups of the server's option tree (completer/config.py). Settings under
// `completer.<group>.<optionName>` are sent as `<group>.<option_name>`.
export const SERVER_GROUPS = ["models", "generation", "prompt", "context", "drafting", "cache", "lsp", "edits"] as const;

export type ServerOptions = Record<string, Record<string, unknown>>;

// The server's machine-level options (completer/config.py: where code and keys go, which
// model files load, which files are never read) as settings, each with the server's flag
// for it. A workspace must not choose them: they are `"scope": "machine"` in package.json,
// read from the user's own settings only, and reach the server only as these flags, never
// in initializationOptions or didChangeConfiguration (where the server refuses them).
// tests/editors/test_vscode.py keeps this table equal to the server's.
export const MACHINE_FLAGS: Readonly<Record<string, string>> = {
  "models.target": "--target",
  "models.draft": "--draft",
  "models.decoder": "--decoder",
  "models.serverUrl": "--server-url",
  "models.apiKeyEnv": "--api-key-env",
  "models.rpcServers": "--rpc",
  "context.exclude": "--exclude",
};

// The extension's own settings that choose the program launched: machine scope too.
export const PROGRAM_SETTINGS = ["command", "pythonPath"] as const;

// Settings the server knows under a new name (completer/config.py's RENAMED, which
// tests/editors/test_vscode.py keeps this equal to): old name -> new name.
export const RENAMED: Readonly<Record<string, string>> = {
  "prompt.contextTokens": "prompt.crossFileTokens",
  "models.backend": "models.decoder",
  "server.debounceMs": "lsp.debounceMs",
  "server.prefetch": "lsp.prefetch",
};

// The machine-level settings, under their names and their old ones (a machine-level
// setting's old name is machine-scoped too): never sent over LSP, where the server takes
// neither name, and a change restarts the server.
export const MACHINE_SETTINGS: readonly string[] = [
  ...Object.keys(MACHINE_FLAGS),
  ...Object.keys(RENAMED).filter((old) => Object.hasOwn(MACHINE_FLAGS, RENAMED[old] as string)),
];

// The user's values of MACHINE_FLAGS' settings, for serveArgs, from `userValue` (the user's
// own settings): a setting left unset takes the value of its old name, which then goes
// as the new name's flag. VS Code marks the old name deprecated where the user set it.
export function machineValues(userValue: (name: string) => unknown): Record<string, unknown> {
  const oldNames = new Map(Object.entries(RENAMED).map(([old, now]) => [now, old]));
  return Object.fromEntries(
    Object.keys(MACHINE_FLAGS).map((name) => {
      const old = oldNames.get(name);
      return [name, userValue(name) ?? (old === undefined ? undefined : userValue(old))];
    }),
  );
}

// `values` as they should reach the server: an old name the user set is sent, and its new
// name's default is not, so that the server takes the old one with a warning naming the
// new one rather than refusing two values that differ; an old name left unset (null) is
// not sent. `explicitlySet(name)` says whether the user set a setting anywhere.
export function withRenamedSettings(
  values: Record<string, unknown>,
  explicitlySet: (name: string) => boolean,
): Record<string, unknown> {
  const sent = { ...values };
  for (const [old, now] of Object.entries(RENAMED)) {
    if (sent[old] == null) delete sent[old];
    else if (!explicitlySet(now)) delete sent[now];
  }
  return sent;
}

export function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (letter) => "_" + letter.toLowerCase());
}

// `values` maps setting keys below `completer.` (e.g. "generation.maxTokens") to values.
// Keys outside the server's groups (the extension's own settings) and the machine-level
// ones (see MACHINE_SETTINGS) are left out. An old name (RENAMED) goes under its old
// group, which may be a group no more (`server`): the server reads it as its new name,
// with a warning.
export function serverOptions(values: Record<string, unknown>): ServerOptions {
  const options: ServerOptions = {};
  for (const [key, value] of Object.entries(values)) {
    const parts = key.split(".");
    const group = parts[0];
    const known = (SERVER_GROUPS as readonly string[]).includes(group) || Object.hasOwn(RENAMED, key);
    if (parts.length !== 2 || !known || MACHINE_SETTINGS.includes(key)) continue;
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

// `machine` maps MACHINE_FLAGS' settings to the user's values (undefined: not set); each
// one set becomes its flag.
export function serveArgs(how: Launch, machine: Record<string, unknown> = {}): string[] {
  const flags = Object.entries(MACHINE_FLAGS).flatMap(([key, flag]) => {
    const value = machine[key];
    return value === undefined || value === null || value === "" ? [] : [flag, String(value)];
  });
  return [...how.prefix, "serve", "--stdio", ...flags];
}

export function pullArgs(how: Launch, preset: string): string[] {
  return [...how.prefix, "models", "pull", preset];
}

// Settings whose change needs a new server process (or none): the program, its flags; the
// rest reach the running server as workspace/didChangeConfiguration.
export const RESTART_SETTINGS: readonly string[] = [
  "enable",
  "languages",
  ...PROGRAM_SETTINGS,
  ...MACHINE_SETTINGS,
];
