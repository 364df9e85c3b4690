// A real VS Code (code-server) in a real browser (headless Chromium), with the built
// .vsix installed and the real server behind it: open a Python file, type, wait for the
// inline suggestion's ghost text, take a screenshot, accept it with Tab and read the
// file back from disk. Writes result.json, vscode-inline-suggestion.png,
// vscode-accepted.png, vscode-load-error.png and code-server.log to ARTIFACTS. Then
// points a setting at a missing model and waits for the error notification.
// Run by tests/test_vscode.py, which prepares the workspace and checks the result.
//
// Environment: CODE_SERVER (its out/node/entry.js), VSIX, COMPLETER (the executable),
// WORKSPACE (holds FILE), FILE, TYPED (text typed at the file's end), ARTIFACTS,
// CHROMIUM (default /usr/bin/chromium), SERVER_OPTIONS (JSON settings under completer.),
// WORKSPACE_NOTICE (optional: a notification the workspace's own settings cause, waited for).
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const env = (name, fallback) => {
  const value = process.env[name] ?? fallback;
  if (value === undefined) throw new Error(`set ${name}`);
  return value;
};
const codeServer = env("CODE_SERVER");
const workspace = env("WORKSPACE");
const file = env("FILE");
const typed = env("TYPED");
const artifacts = env("ARTIFACTS");
const minutes = (n) => n * 60_000;
// No extension marketplace (the discard port): code-server asks nothing of other machines.
const offline = { ...process.env, EXTENSIONS_GALLERY: JSON.stringify({ serviceUrl: "http://127.0.0.1:9/gallery" }) };

function log(message) {
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
function prepareProfile() {
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
    ...Object.fromEntries(
      Object.entries(JSON.parse(env("SERVER_OPTIONS", "{}"))).map(([key, value]) => [`completer.${key}`, value]),
    ),
  };
  const entries = Object.entries(settings);
  const user = Object.fromEntries(entries.filter(([key]) => !machineScoped(key)));
  const machine = Object.fromEntries(entries.filter(([key]) => machineScoped(key)));
  writeFileSync(join(userData, "User", "settings.json"), JSON.stringify(user, null, 2));
  writeFileSync(join(userData, "Machine", "settings.json"), JSON.stringify(machine, null, 2));
  const install = spawnSync(
    process.execPath,
    [codeServer, "--user-data-dir", userData, "--extensions-dir", extensions, "--install-extension", env("VSIX")],
    { encoding: "utf8", env: offline },
  );
  if (install.status !== 0) throw new Error(`--install-extension failed:\n${install.stdout}\n${install.stderr}`);
  log(install.stdout.trim().split("\n").pop());
  return { userData, extensions };
}

async function startCodeServer(profile) {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [codeServer, "--auth", "none", "--bind-addr", `127.0.0.1:${port}`, "--disable-telemetry",
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

const MISSING_MODEL = "/nonexistent/model.gguf";

async function drive(url, profile) {
  const browser = await chromium.launch({ executablePath: env("CHROMIUM", "/usr/bin/chromium"), args: ["--no-sandbox"] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  try {
    await page.goto(`${url}/?folder=${encodeURIComponent(workspace)}`);
    await page.waitForSelector(".monaco-workbench", { timeout: minutes(2) });
    log("workbench up");

    await page.keyboard.press("Control+P");
    await page.keyboard.type(file);
    await page.waitForSelector(`.quick-input-list .monaco-list-row[aria-label*="${file}"]`, { timeout: 30_000 });
    await page.keyboard.press("Enter");
    await page.waitForSelector(`.tab[data-resource-name="${file}"]`, { timeout: 30_000 });
    await page.click(".monaco-editor .view-lines");
    log(`${file} open`);

    // The workspace's own settings (a bad value of one it may set) reached the server.
    let workspaceNotice = null;
    if (process.env.WORKSPACE_NOTICE) {
      const toast = page.locator(".notification-toast").filter({ hasText: process.env.WORKSPACE_NOTICE });
      await toast.first().waitFor({ timeout: 30_000 });
      workspaceNotice = (await toast.first().locator(".notification-list-item-message").textContent()).replace(/\u00a0/g, " ");
      log(`workspace setting's notice: ${workspaceNotice}`);
    }

    // The status bar item says "ready" (to a screen reader) once the models are loaded. Its
    // sparkle alone does not tell: it shows before the server starts too.
    await page.waitForSelector('.statusbar-item [aria-label^="completer: ready"], .statusbar-item[aria-label^="completer: ready"]',
      { state: "attached", timeout: minutes(5) });
    log("models loaded");

    await page.keyboard.press("Control+End");
    await page.keyboard.type(typed, { delay: 30 });
    const ghost = page.locator(".monaco-editor .ghost-text-decoration, .monaco-editor .ghost-text");
    await ghost.first().waitFor({ timeout: minutes(2) });
    await page.waitForTimeout(500); // let the suggestion's lines finish rendering for the picture
    const shown = (await ghost.allTextContents()).map((text) => text.replace(/\u00a0/g, " "));
    await page.screenshot({ path: join(artifacts, "vscode-inline-suggestion.png") });
    log(`suggestion on screen: ${JSON.stringify(shown)}`);

    const before = readFileSync(join(workspace, file), "utf8");
    await page.keyboard.press("Tab");
    let after = before;
    for (const start = Date.now(); after === before && Date.now() - start < 30_000;) {
      await page.waitForTimeout(200);
      after = readFileSync(join(workspace, file), "utf8");
    }
    // The status bar polls completer/stats: it shows figures once a completion ran.
    const figures = page.locator(".statusbar-item:has(.codicon-sparkle)").filter({ hasText: /tok\/s/ });
    await figures.first().waitFor({ timeout: 30_000 });
    const status = await figures.first().textContent();
    await page.screenshot({ path: join(artifacts, "vscode-accepted.png") });

    // A settings change reaches the server: a model path that does not exist (machine-level:
    // the server restarts with it as its --target flag) makes the load fail, which must
    // surface as a notification. Edited as a user would, in the remote machine's
    // settings.json editor (on one line: no auto-indent).
    const settings = JSON.parse(readFileSync(join(profile.userData, "Machine", "settings.json"), "utf8"));
    await page.keyboard.press("Control+Shift+P");
    await page.keyboard.type("Preferences: Open Remote Settings (JSON)");
    await page.waitForSelector('.quick-input-list .monaco-list-row[aria-label*="Open Remote Settings (JSON)"]');
    await page.keyboard.press("Enter");
    // (VS Code 1.139 opens it in a modal editor, older ones in a tab.)
    const settingsEditor = page.locator(".monaco-editor").filter({ hasText: '"completer.command"' });
    await settingsEditor.first().waitFor({ timeout: 30_000 });
    await page.keyboard.press("Control+A");
    await page.keyboard.press("Delete");
    await page.keyboard.type(JSON.stringify({ ...settings, "completer.models.target": MISSING_MODEL }));
    await page.keyboard.press("Control+S");
    const toast = page.locator(".notification-toast").filter({ hasText: MISSING_MODEL });
    await toast.first().waitFor({ timeout: minutes(1) });
    const notification = (await toast.first().locator(".notification-list-item-message").textContent()).replace(/\u00a0/g, " ");
    await page.locator(".statusbar-item:has(.codicon-error)").first().waitFor({ timeout: 30_000 });
    await page.screenshot({ path: join(artifacts, "vscode-load-error.png") });
    return { shown, before, after, status, notification, workspace_notice: workspaceNotice };
  } catch (error) {
    await page.screenshot({ path: join(artifacts, "vscode-failure.png") }).catch(() => {});
    throw error;
  } finally {
    await browser.close();
  }
}

mkdirSync(artifacts, { recursive: true });
const profile = prepareProfile();
const server = await startCodeServer(profile);
try {
  const result = await drive(server.url, profile);
  writeFileSync(join(artifacts, "result.json"), JSON.stringify(result, null, 2));
  log("done");
} finally {
  writeFileSync(join(artifacts, "code-server.log"), server.output());
  process.kill(-server.child.pid, "SIGTERM"); // code-server and its extension host, with the language server
}
