// A real VS Code for scripts: code-server with the built .vsix installed in a fresh profile,
// listening on loopback, and the helpers a script drives it with. Shared by run.mjs (the
// end-to-end test) and latency.mjs (the latency benchmark).
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const env = (name, fallback) => {
  const value = process.env[name] ?? fallback;
  if (value === undefined) throw new Error(`set ${name}`);
  return value;
};
export const minutes = (n) => n * 60_000;
// No extension marketplace (the discard port): code-server asks nothing of other machines.
const offline = { ...process.env, EXTENSIONS_GALLERY: JSON.stringify({ serviceUrl: "http://127.0.0.1:9/gallery" }) };

export function log(message) {
  process.stderr.write(`[e2e ${new Date().toISOString().slice(11, 19)}] ${message}\n`);
}

async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

// The extension's settings of machine scope (the program, where code and keys go).
const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
const machineScoped = (key) => manifest.contributes.configuration.properties[key]?.scope === "machine";

// The user's settings, split as VS Code reads them: code-server's window is a remote one,
// where a machine-scoped setting comes from the remote machine's settings alone
// (user-data/Machine/settings.json), the rest from the user's (user-data/User).
// `extra`: more settings, by full name; `serverOptions`: completer's, under completer.
export function prepareProfile(extra = {}, serverOptions = {}) {
  const home = mkdtempSync(join(tmpdir(), "completer-e2e-"));
  const userData = join(home, "user-data");
  const extensions = join(home, "extensions");
  mkdirSync(join(userData, "User"), { recursive: true });
  mkdirSync(join(userData, "Machine"), { recursive: true });
  const settings = {
    "security.workspace.trust.enabled": false, // the test's own folder: trusted
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": false,
    "chat.disableAIFeatures": true,
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "extensions.autoCheckUpdates": false,
    "extensions.autoUpdate": false,
    "extensions.ignoreRecommendations": true,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "editor.inlineSuggest.enabled": true,
    "editor.quickSuggestions": { other: false, comments: false, strings: false },
    "editor.autoClosingBrackets": "never",
    "editor.autoClosingQuotes": "never",
    "editor.suggestOnTriggerCharacters": false,
    "files.autoSave": "afterDelay",
    "files.autoSaveDelay": 200,
    "completer.command": env("COMPLETER"),
    ...extra,
    ...Object.fromEntries(Object.entries(serverOptions).map(([key, value]) => [`completer.${key}`, value])),
  };
  const entries = Object.entries(settings);
  const user = Object.fromEntries(entries.filter(([key]) => !machineScoped(key)));
  const machine = Object.fromEntries(entries.filter(([key]) => machineScoped(key)));
  writeFileSync(join(userData, "User", "settings.json"), JSON.stringify(user, null, 2));
  writeFileSync(join(userData, "Machine", "settings.json"), JSON.stringify(machine, null, 2));
  const install = spawnSync(
    process.execPath,
    [env("CODE_SERVER"), "--user-data-dir", userData, "--extensions-dir", extensions, "--install-extension",
      env("VSIX")],
    { encoding: "utf8", env: offline },
  );
  if (install.status !== 0) throw new Error(`--install-extension failed:\n${install.stdout}\n${install.stderr}`);
  log(install.stdout.trim().split("\n").pop());
  return { userData, extensions };
}

export async function startCodeServer(profile, workspace) {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [env("CODE_SERVER"), "--auth", "none", "--bind-addr", `127.0.0.1:${port}`, "--disable-telemetry",
      "--disable-update-check", "--disable-workspace-trust", "--user-data-dir", profile.userData,
      "--extensions-dir", profile.extensions, workspace],
    {
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
      env: offline,
    },
  );
  let output = "";
  child.stdout.on("data", (data) => (output += data));
  child.stderr.on("data", (data) => (output += data));
  const url = `http://127.0.0.1:${port}`;
  for (const start = Date.now(); Date.now() - start < minutes(2);) {
    if (child.exitCode !== null) throw new Error(`code-server exited:\n${output}`);
    try {
      if ((await fetch(`${url}/healthz`)).ok) return { child, url, output: () => output };
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  throw new Error(`code-server did not answer on ${url}:\n${output}`);
}

export async function openFile(page, name) {
  await page.keyboard.press("Control+P");
  await page.keyboard.type(name);
  await page.waitForSelector(`.quick-input-list .monaco-list-row[aria-label*="${name}"]`, { timeout: 30_000 });
  await page.keyboard.press("Enter");
  await page.waitForSelector(`.tab.active[data-resource-name="${name}"]`, { timeout: 30_000 });
  await page.click(".editor-group-container.active .monaco-editor .view-lines");
  log(`${name} open`);
}

// The status bar item says "ready" (to a screen reader) once the models are loaded. Its
// sparkle alone does not tell: it shows before the server starts too.
export async function waitForModels(page) {
  await page.waitForSelector('.statusbar-item [aria-label^="completer: ready"], .statusbar-item[aria-label^="completer: ready"]',
    { state: "attached", timeout: minutes(5) });
  log("models loaded");
}
