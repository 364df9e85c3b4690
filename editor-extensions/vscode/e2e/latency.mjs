// Latency as VS Code shows it, for benchmarks/editor_latency.py: code-server in headless
// Chromium with the built .vsix and the real server. A scripted typing session in FILE
// (its text is PREFIX; TYPED is typed a character a key, INTERVALS ms apart, PAUSE_MS more
// after each line), then Tab to the next suggestion in each of HOLES (files in WORKSPACE:
// the last character typed, the suggestion read READ_MS, Tab). In the page, a capturing
// keydown listener times each key as the editor receives it, and a MutationObserver on
// the editor times every change to whether inline ghost text shows and what it says.
// Writes JSON to RESULT: { keys: [ms], ghosts: [{ at, text }], tabs: [{ key, ghosts }] }.
//
// Environment: CODE_SERVER, VSIX, COMPLETER, WORKSPACE, FILE, TYPED, INTERVALS (JSON),
// PAUSE_MS, HOLES (JSON: file names), HOLE_ENDS (JSON: file name -> the character typed
// at its end), READ_MS, SERVER_OPTIONS (JSON, under completer.),
// RESULT, CHROMIUM (default /usr/bin/chromium).
import { writeFileSync } from "node:fs";
import { chromium } from "playwright-core";
import { env, log, minutes, openFile, prepareProfile, startCodeServer, waitForModels } from "./codeServer.mjs";

const workspace = env("WORKSPACE");
const typed = env("TYPED");
const intervals = JSON.parse(env("INTERVALS"));
const pauseMs = Number(env("PAUSE_MS"));
const readMs = Number(env("READ_MS"));
// Each hole's file lacks its document's last character, which the session types there.
const lastCharacters = JSON.parse(env("HOLE_ENDS"));

// Typed text is the file's own: no indenting, closing, formatting or word suggestions of
// VS Code's in the way.
const PLAIN_TYPING = {
  "editor.autoIndent": "none",
  "editor.autoSurround": "never",
  "editor.formatOnType": false,
  "editor.wordBasedSuggestions": "off",
  "editor.acceptSuggestionOnEnter": "off",
};

// In the page: every key the editor gets, and every change of the ghost text shown.
function instrument() {
  window.latency = { keys: [], ghosts: [] };
  document.addEventListener("keydown", (event) => {
    if (event.key.length === 1 || event.key === "Enter" || event.key === "Tab") window.latency.keys.push(performance.now());
  }, true); // not the Shift that Playwright presses for a shifted character
  const ghostText = () => [...document.querySelectorAll(".monaco-editor .ghost-text-decoration, .monaco-editor .ghost-text")]
    .map((node) => node.textContent).join("");
  let last = "";
  new MutationObserver(() => {
    const now = ghostText();
    if (now !== last) {
      last = now;
      window.latency.ghosts.push({ at: performance.now(), text: now });
    }
  }).observe(document.body, { childList: true, subtree: true, characterData: true });
}

// Quick Open can take Enter before its list holds the file typed (names alike: hole1.py,
// hole10.py): try again.
async function openHole(page, name) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await openFile(page, name);
    } catch (error) {
      if (attempt === 3) throw error;
      await page.keyboard.press("Escape");
    }
  }
}

async function drive(url) {
  const browser = await chromium.launch({ executablePath: env("CHROMIUM", "/usr/bin/chromium"), args: ["--no-sandbox"] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  try {
    await page.goto(`${url}/?folder=${encodeURIComponent(workspace)}`);
    await page.waitForSelector(".monaco-workbench", { timeout: minutes(2) });
    await openFile(page, env("FILE"));
    await waitForModels(page);
    await page.evaluate(instrument);
    await page.keyboard.press("Control+End");
    for (const [i, char] of [...typed].entries()) {
      if (char === "\n") await page.keyboard.press("Enter");
      else await page.keyboard.type(char);
      await page.waitForTimeout(intervals[i] + (char === "\n" ? pauseMs : 0));
    }
    const session = await page.evaluate(() => window.latency);
    log(`typed ${session.keys.length} keys`);
    const tabs = [];
    for (const hole of JSON.parse(env("HOLES"))) {
      await openHole(page, hole);
      await page.keyboard.press("Control+End");
      await page.evaluate(() => { window.latency = { keys: [], ghosts: window.latency.ghosts.slice(-1) }; });
      await page.keyboard.type(lastCharacters[hole]); // typing asks for a suggestion, as a user's key does
      const ghost = page.locator(".monaco-editor .ghost-text-decoration, .monaco-editor .ghost-text");
      const shown = await ghost.first().waitFor({ timeout: 30_000 }).then(() => true, () => false);
      if (!shown) continue;
      await page.waitForTimeout(readMs);
      await page.evaluate(() => { window.latency.keys = []; window.latency.ghosts = []; });
      await page.keyboard.press("Tab");
      await page.waitForTimeout(5000); // the next suggestion, if one comes
      tabs.push(await page.evaluate(() => ({ key: window.latency.keys[0], ghosts: window.latency.ghosts })));
    }
    return { keys: session.keys, ghosts: session.ghosts, tabs };
  } finally {
    await browser.close();
  }
}

const profile = prepareProfile(PLAIN_TYPING, JSON.parse(env("SERVER_OPTIONS")));
const server = await startCodeServer(profile, workspace);
try {
  writeFileSync(env("RESULT"), JSON.stringify(await drive(server.url)));
  log("done");
} finally {
  process.kill(-server.child.pid, "SIGTERM");
}
