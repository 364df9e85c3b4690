// A real VS Code for scripts: code-server with the built .vsix installed in a fresh profile,
// listening on loopback, and the helpers a script drives it with. Shared by run.mjs and
// editing.mjs (the end-to-end tests) and latency.mjs (the latency benchmark).
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
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
  // Focused, not only listed: quick open lists recently opened files before it filters.
  await page.waitForSelector(`.quick-input-list .monaco-list-row.focused[aria-label*="${name}"]`, { timeout: 30_000 });
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

// The file's text once a save of it for which `done` holds is on disk (after `timeout`, the
// text as it is). VS Code saves in place: its disk provider opens the file "w", truncating
// it, then writes it, so a read in between finds it empty (or cut short): a text counts when
// it is not empty (no file here is saved empty) and two reads in a row find it.
export async function saved(path, done, timeout = 30_000) {
  let last;
  for (const start = Date.now(); ;) {
    const text = readFileSync(path, "utf8");
    if (text && text === last && done(text)) return text;
    if (Date.now() - start > timeout) return text;
    last = text;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

export const fileChange = (path, from, timeout) => saved(path, (text) => text !== from, timeout);

// The extension's log (its output channel, which VS Code writes to a file): the inline
// completions the server answered, the next edits it showed, accepted and dismissed, with the
// edits as the server sent them, and the statistics completer: Show Statistics read.
export function extensionLog(profile) {
  const logs = join(profile.userData, "logs");
  if (!existsSync(logs)) return "";
  return readdirSync(logs, { recursive: true })
    .filter((name) => name.endsWith(join("completer.completer", "completer.log")))
    .map((name) => readFileSync(join(logs, name), "utf8"))
    .join("");
}

// What the log says after "<what>: " on each line that has it, in order.
export function logEntries(profile, what) {
  const marker = `] ${what}: `;
  return extensionLog(profile).split("\n").filter((line) => line.includes(marker))
    .map((line) => line.slice(line.indexOf(marker) + marker.length));
}

export const logged = (profile, event) => logEntries(profile, `next edit ${event}`);

export async function waitForLogged(profile, event, count, timeout) {
  for (const start = Date.now(); Date.now() - start < timeout;) {
    const lines = logged(profile, event);
    if (lines.length >= count) return lines;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  throw new Error(
    `the extension did not log "next edit ${event}" ${count} times:\n${extensionLog(profile).slice(-4000)}`,
  );
}

// What the next edit's decorations show in the active editor: the struck-through text (the
// removed-text decoration) and the italic ghost text (the inserted text, which VS Code
// renders as a pseudo-element's content or as injected text).
export async function decorations(page) {
  return page.evaluate(() => {
    const spans = [...document.querySelectorAll(".editor-group-container.active .monaco-editor .view-lines span")]
      .filter((span) => !span.closest(".ghost-text-decoration, .ghost-text")); // VS Code's own inline suggestion
    const leaves = spans.filter((span) => span.children.length === 0);
    const struck = leaves.filter((span) => getComputedStyle(span).textDecorationLine.includes("line-through"));
    const ghost = leaves.filter((span) => getComputedStyle(span).fontStyle === "italic")
      .map((span) => span.textContent);
    for (const span of spans) {
      for (const pseudo of ["::before", "::after"]) {
        const style = getComputedStyle(span, pseudo);
        if (style.fontStyle === "italic" && style.content.startsWith('"')) ghost.push(JSON.parse(style.content));
      }
    }
    const clean = (text) => text.replace(/\u00a0/g, " ");
    return { struck: struck.map((span) => clean(span.textContent)), ghost: ghost.filter(Boolean).map(clean) };
  });
}

export async function waitForDecorations(page, shown, timeout = 30_000) {
  for (const start = Date.now(); Date.now() - start < timeout;) {
    const now = await decorations(page);
    if ((now.struck.length + now.ghost.length > 0) === shown) return now;
    await page.waitForTimeout(200);
  }
  throw new Error(`the next edit's decorations did not ${shown ? "show" : "go"}`);
}

// VS Code's inline suggestion takes Tab and Escape while it shows (the next edit's keybindings
// give way): Escape hides it, so that the next key goes to the next edit.
export async function hideInlineSuggestion(page) {
  const ghost = page.locator(".monaco-editor .ghost-text-decoration, .monaco-editor .ghost-text");
  while (await ghost.count()) {
    await page.keyboard.press("Escape");
    await page.waitForTimeout(200);
  }
}

export async function cursor(page) {
  return (await page.locator('[id="status.editor.selection"]').first().textContent()).trim();
}


// The statistics as the user reads them: completer: Show Statistics, a modal dialog.
export async function statistics(page) {
  await page.keyboard.press("Control+Shift+P");
  await page.keyboard.type("completer: Show Statistics");
  await page.waitForSelector('.quick-input-list .monaco-list-row[aria-label*="Show Statistics"]');
  await page.keyboard.press("Enter");
  const detail = page.locator(".monaco-dialog-box .dialog-message-detail");
  await detail.first().waitFor({ timeout: 30_000 });
  const text = await detail.first().innerText();
  await page.keyboard.press("Escape");
  await detail.first().waitFor({ state: "hidden", timeout: 10_000 });
  return text;
}
