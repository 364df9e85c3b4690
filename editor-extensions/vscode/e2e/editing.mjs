// Editing through a real VS Code (code-server in headless Chromium, the built .vsix, the
// real server), where what the editor holds is easy to get wrong: CRLF and mixed line
// breaks, tab indentation, emoji and CJK before the cursor, keys typed faster than the
// server answers, a pasted block, undo right after Tab, documents closed with requests in
// flight and a switch of documents while a next edit shows. Each step records what the
// screen showed (ghost text by line, where it starts and where the cursor is), what the
// file held on disk before and after, and the extension's log (the server's inline
// completions with the document version they were asked for, the next edits, the
// statistics); tests/editors/test_vscode_editing.py, which prepares the workspace, checks them.
// Writes editing.json (and editing-code-server.log, editing-failure.png on failure) to
// ARTIFACTS.
//
// Environment: CODE_SERVER, VSIX, COMPLETER, WORKSPACE, ARTIFACTS, CHROMIUM (default
// /usr/bin/chromium), SERVER_OPTIONS (JSON settings under completer.), EDITING (JSON: each
// step's files and what is typed; see the test).
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";
import {
  cursor, decorations, env, hideInlineSuggestion, log, logEntries, logged, minutes, openFile, prepareProfile, saved,
  startCodeServer, statistics, waitForDecorations, waitForLogged, waitForModels,
} from "./codeServer.mjs";

const workspace = env("WORKSPACE");
const artifacts = env("ARTIFACTS");
const steps = JSON.parse(env("EDITING"));
const TRIGGER = "Alt+Backslash"; // bound below to editor.action.inlineSuggest.trigger, which has no default key

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function poll(what, condition, timeout, every = 100) {
  for (const start = Date.now(); Date.now() - start < timeout;) {
    const value = await condition();
    if (value) return value;
    await pause(every);
  }
  throw new Error(`timed out waiting for ${what}`);
}

// The active editor's inline suggestion as shown: its text by screen line (the part on the
// cursor's line first, "" where it starts on the next line; whitespace as spaces, the
// lines the suggestion leaves empty left out), where its first part starts and where the
// cursor is (pixels from the page's left).
async function ghost(page) {
  return page.evaluate(() => {
    const editor = document.querySelector(".editor-group-container.active .monaco-editor");
    const spans = [...(editor?.querySelectorAll(".ghost-text, .ghost-text-decoration") ?? [])]
      .filter((span) => span.children.length === 0 && span.textContent);
    const cursor = editor?.querySelector(".cursors-layer .cursor")?.getBoundingClientRect();
    const rows = new Map();
    for (const span of spans) {
      const box = span.getBoundingClientRect();
      const top = Math.round(box.top);
      if (!rows.has(top)) rows.set(top, { left: box.left, text: "" });
      rows.get(top).text += span.textContent.replace(/\u00a0/g, " ");
    }
    const tops = [...rows.keys()].sort((a, b) => a - b);
    const onCursorLine = cursor !== undefined && tops.length > 0 && Math.abs(tops[0] - Math.round(cursor.top)) < 3;
    const lines = tops.map((top) => rows.get(top).text);
    return {
      lines: tops.length && !onCursorLine ? ["", ...lines] : lines,
      left: onCursorLine ? rows.get(tops[0]).left : null,
      cursor_left: cursor?.left ?? null,
    };
  });
}

// The inline suggestion once it shows and has held still for a moment (its lines render in turn).
async function waitForGhost(page, timeout = minutes(1)) {
  let last = "";
  return poll("an inline suggestion", async () => {
    const now = await ghost(page);
    const same = now.lines.length > 0 && JSON.stringify(now) === last;
    last = JSON.stringify(now);
    return same && now;
  }, timeout, 150);
}

const answers = (profile) => logEntries(profile, "inline completion").map((line) => JSON.parse(line));

// The active editor's text as the screen shows it (its lines in view, whitespace as spaces),
// without the inline suggestion.
async function screenText(page) {
  return page.evaluate(() => {
    const editor = document.querySelector(".editor-group-container.active .monaco-editor");
    const lines = [...(editor?.querySelectorAll(".view-lines .view-line") ?? [])].map((line) => ({
      top: parseFloat(line.style.top),
      text: [...line.querySelectorAll("span")]
        .filter((span) => span.children.length === 0 && !span.closest(".ghost-text, .ghost-text-decoration"))
        .map((span) => span.textContent.replace(/\u00a0/g, " ")).join(""),
    }));
    return lines.sort((a, b) => a.top - b.top).map((line) => line.text).join("\n");
  });
}

// The screen's text once it has changed from `from` (to `to`, if given) and held for a moment
// (the lines redraw in turn); as it is after 10 s if it does not.
async function screenChange(page, from, to) {
  let last;
  return poll("the screen to change", async () => {
    const now = await screenText(page);
    const done = now !== from && (to === undefined || now === to) && now === last;
    last = now;
    return done && now;
  }, 10_000, 20).catch(() => last);
}

// What was typed at the file's end, once saved (files.autoSave afterDelay).
const typedSaved = (path, from, typed) => saved(path, (text) => text !== from && text.endsWith(typed));

// Tab on the inline suggestion, once what was typed (the file is `typedText` on disk) is
// saved: the suggestion as shown right before, and the file after.
async function accept(page, path, typedText) {
  const shown = await ghost(page);
  await page.keyboard.press("Tab");
  return { shown, after: await saved(path, (text) => text !== typedText) };
}


async function eol(page) {
  return (await page.locator('[id="status.editor.eol"]').first().textContent()).trim();
}

// To `name`'s editor: its tab where it has one (quick open lists recent files first, and
// can take Enter before it filters them), else quick open.
async function toFile(page, name) {
  const tab = page.locator(`.tab[data-resource-name="${name}"]`);
  if (!(await tab.count())) return openFile(page, name);
  await tab.first().click();
  await page.waitForSelector(`.tab.active[data-resource-name="${name}"]`, { timeout: 30_000 });
  await page.click(".editor-group-container.active .monaco-editor .view-lines");
}

// Close the active editor; a dirty one is saved or, if VS Code asks, its changes dropped.
async function closeEditor(page, name) {
  await page.keyboard.press("Control+W");
  const tab = page.locator(`.tab[data-resource-name="${name}"]`);
  const dontSave = page.locator(".monaco-dialog-box button", { hasText: "Don't Save" });
  await poll(`${name} to close`, async () => {
    if (await dontSave.count()) await dontSave.first().click();
    return (await tab.count()) === 0;
  }, 10_000);
}

// The server's statistics, all of them, as completer: Show Statistics logs them.
async function serverStats(page, profile) {
  const before = logEntries(profile, "statistics").length;
  await statistics(page);
  const lines = await poll("the statistics in the log", () => {
    const now = logEntries(profile, "statistics");
    return now.length > before && now;
  }, 10_000);
  return JSON.parse(lines.at(-1));
}

// To `name`, cursor at its end, type, wait for the suggestion and Tab it. What showed, the
// file before and after, the log's answers since.
async function typeAndAccept(page, profile, name, typed) {
  const path = join(workspace, name);
  const before = readFileSync(path, "utf8");
  const asked = answers(profile).length;
  await toFile(page, name);
  await page.keyboard.press("Control+End");
  await page.keyboard.type(typed, { delay: 30 });
  await waitForGhost(page);
  const { shown, after } = await accept(page, path, await typedSaved(path, before, typed));
  log(`${name}: ${JSON.stringify({ shown: shown.lines, after: after.slice(-200) })}`);
  return { before, typed, shown, after, eol: await eol(page), answers: answers(profile).slice(asked) };
}

// CRLF and mixed line breaks: a multi-line suggestion, Tab; in the CRLF file a second one
// asked for at once (the server computed it while the first showed), Tab again, with the
// server's statistics before and after.
async function lineBreaks(page, profile) {
  const statsBefore = await serverStats(page, profile);
  const crlf = await typeAndAccept(page, profile, steps.crlf.file, steps.crlf.typed);
  const asked = answers(profile).length;
  await page.keyboard.press(TRIGGER);
  await waitForGhost(page);
  const second = await accept(page, join(workspace, steps.crlf.file), crlf.after);
  crlf.second = { ...second, answers: answers(profile).slice(asked) };
  crlf.stats = { before: statsBefore, after: await serverStats(page, profile) };
  await closeEditor(page, steps.crlf.file);
  const mixed = await typeAndAccept(page, profile, steps.mixed.file, steps.mixed.typed);
  await closeEditor(page, steps.mixed.file);
  return { crlf, mixed };
}

// Tab indentation: a multi-line suggestion; then on a new line (indented by VS Code) one
// that starts at the cursor, after the line's tabs.
async function tabs(page, profile) {
  const multiLine = await typeAndAccept(page, profile, steps.tabs.file, steps.tabs.typed);
  const indentation = (await page.locator('[id="status.editor.indentation"]').first().textContent()).trim();
  const path = join(workspace, steps.tabs.file);
  const asked = answers(profile).length;
  await page.keyboard.press("Enter");
  await page.keyboard.type(steps.tabs.next_line, { delay: 30 });
  await waitForGhost(page);
  const inLine = await accept(page, path, await typedSaved(path, multiLine.after, steps.tabs.next_line));
  await closeEditor(page, steps.tabs.file);
  return { multi_line: multiLine, indentation, in_line: { ...inLine, answers: answers(profile).slice(asked) } };
}

// A macro: bursts of keys typed with no delay, each once anything shows, and Tab the moment
// anything shows after the last (the suggestion for the text before it may still show).
async function macro(page, profile) {
  const { file, bursts } = steps.macro;
  const typed = bursts.join("");
  const path = join(workspace, file);
  const before = readFileSync(path, "utf8");
  const asked = answers(profile).length;
  await openFile(page, file);
  await page.keyboard.press("Control+End");
  const lines = before.split("\n");
  let column = lines.at(-1).length;
  for (const burst of bursts) {
    await page.keyboard.type(burst, { delay: 0 });
    column += burst.length;
    // Once the editor has taken every key (its status bar shows the cursor after them): until
    // then a suggestion for the text before the burst can still be on screen, about to go as
    // the keys land, and a Tab in that gap only indents.
    const keysTaken = `Ln ${lines.length}, Col ${column + 1}`;
    await poll("an inline suggestion", async () => (await cursor(page)) === keysTaken
      && (await ghost(page)).lines.length > 0, minutes(1), 20);
  }
  const shown = await ghost(page);
  await page.keyboard.press("Tab");
  const after = await saved(path, (text) => text.startsWith(before + typed) && text !== before + typed);
  log(`macro: ${JSON.stringify({ shown: shown.lines, after: after.slice(-200) })}`);
  await closeEditor(page, file);
  return { before, typed, shown, after, answers: answers(profile).slice(asked) };
}

// A block pasted (the clipboard, Ctrl+V) at the end of the file, then a character typed.
async function paste(page, profile) {
  const { file, block, typed } = steps.paste;
  await openFile(page, file);
  await page.evaluate((text) => navigator.clipboard.writeText(text), block);
  await page.keyboard.press("Control+End");
  const path = join(workspace, file);
  const original = readFileSync(path, "utf8");
  await page.keyboard.press("Control+V");
  const pasted = await typedSaved(path, original, block);
  const result = await typeAndAccept(page, profile, file, typed);
  await closeEditor(page, file);
  return { original, pasted, ...result };
}

// Tab, then Ctrl+Z at once; then whatever suggestion shows for the text the undo left.
async function undo(page, profile) {
  const { file, typed } = steps.undo;
  const path = join(workspace, file);
  const before = readFileSync(path, "utf8");
  const asked = answers(profile).length;
  await openFile(page, file);
  await page.keyboard.press("Control+End");
  await page.keyboard.type(typed, { delay: 30 });
  const shown = await waitForGhost(page);
  const typedText = await typedSaved(path, before, typed);
  await page.keyboard.press("Tab");
  const accepted = await screenChange(page, typedText);
  const undoneAt = answers(profile).length;
  await page.keyboard.press("Control+z");
  const undoneOnScreen = await screenChange(page, accepted, typedText);
  const undone = await saved(path, (text) => text === typedText);
  // Whatever shows again within a few seconds (a new request on the undone text, answered
  // from the server's caches at once): it must be the answer for that text.
  let again = { lines: [] };
  try {
    again = await waitForGhost(page, 5000);
  } catch {
    log("undo: no suggestion again");
  }
  log(`undo: ${JSON.stringify({ shown: shown.lines, accepted, undoneOnScreen, again: again.lines })}`);
  await page.keyboard.press("Escape");
  await closeEditor(page, file);
  const all = answers(profile);
  return {
    before, typed, shown, accepted, undone_on_screen: undoneOnScreen, undone, again,
    answers: all.slice(asked, undoneAt), answers_after: all.slice(undoneAt),
  };
}

// Type, then close the document: at once (close_ms null: the completion asked for or on its
// way), or close_ms after its suggestion shows (0: what follows its acceptance is computed
// then; past the extension's 800 ms pause: the next edit is, and nothing shows while it is,
// hence the time). Then, every document closed, the server's statistics once they count no
// session (or as they are after 20 s).
async function closing(page, profile) {
  for (const { file, close_ms: closeMs } of steps.closing.files) {
    await openFile(page, file);
    await page.keyboard.press("Control+End");
    await page.keyboard.type(steps.closing.typed, { delay: 0 });
    if (closeMs !== null) {
      await poll("an inline suggestion", async () => (await ghost(page)).lines.length > 0, minutes(1), 20);
      await pause(closeMs);
    }
    await closeEditor(page, file);
  }
  let stats;
  await poll("no sessions left", async () => (stats = await serverStats(page, profile)).sessions === 0, 20_000, 500)
    .catch(() => log(`sessions left: ${stats.sessions}`));
  return stats;
}

// A next edit in EDIT's file as run.mjs makes it; while its decorations show, to another file
// (no decorations there; Tab is VS Code's indent), and back.
async function switching(page, profile) {
  const { file, at: [line, character], typed, other } = steps.switching;
  const path = join(workspace, file);
  const otherPath = join(workspace, other);
  await openFile(page, file);
  await page.keyboard.press("Control+Home");
  for (let i = 0; i < line; i++) await page.keyboard.press("ArrowDown");
  for (let i = 0; i < character; i++) await page.keyboard.press("ArrowRight");
  const before = readFileSync(path, "utf8");
  const shownBefore = logged(profile, "shown").length;
  await page.keyboard.type(typed, { delay: 30 });
  const typedText = await saved(path, (text) => text !== before);
  await waitForLogged(profile, "shown", shownBefore + 1, minutes(2));
  const onScreen = await waitForDecorations(page, true);
  const shown = logged(profile, "shown").map((entry) => JSON.parse(entry));

  await openFile(page, other);
  const otherBefore = readFileSync(otherPath, "utf8");
  const inOther = await watchDecorations(page, 1500);
  await page.keyboard.press("Control+End");
  await page.keyboard.press("Tab");
  const otherAfter = await saved(otherPath, (text) => text !== otherBefore);
  await hideInlineSuggestion(page);

  await toFile(page, file);
  const back = await watchDecorations(page, 1500);
  const result = {
    before, typed_text: typedText, on_screen: onScreen, shown, in_other: inOther,
    other_before: otherBefore, other_after: otherAfter, file_after: readFileSync(path, "utf8"), back,
    shown_after: logged(profile, "shown").map((entry) => JSON.parse(entry)).slice(shown.length),
    accepted: logged(profile, "accepted").length,
  };
  log(`switching: ${JSON.stringify({ onScreen, inOther, back })}`);
  await closeEditor(page, file);
  await closeEditor(page, other);
  return result;
}

// Every decoration the active editor shows over `ms`.
async function watchDecorations(page, ms) {
  const seen = [];
  for (const start = Date.now(); Date.now() - start < ms;) {
    const now = await decorations(page);
    if (now.struck.length + now.ghost.length) seen.push(now);
    await pause(100);
  }
  return seen;
}

async function drive(url, profile) {
  const browser = await chromium.launch({
    executablePath: env("CHROMIUM", "/usr/bin/chromium"), args: ["--no-sandbox"],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: url });
  const page = await context.newPage();
  const result = {};
  try {
    await page.goto(`${url}/?folder=${encodeURIComponent(workspace)}`);
    await page.waitForSelector(".monaco-workbench", { timeout: minutes(2) });
    log("workbench up");
    await openFile(page, steps.crlf.file); // a Python file starts the server
    await waitForModels(page);
    await closeEditor(page, steps.crlf.file);

    // First: the next edit's prompt holds the edits made so far.
    result.switching = await switching(page, profile);
    result.line_breaks = await lineBreaks(page, profile);
    result.tabs = await tabs(page, profile);
    result.unicode = await typeAndAccept(page, profile, steps.unicode.file, steps.unicode.typed);
    await closeEditor(page, steps.unicode.file);
    result.macro = await macro(page, profile);
    result.paste = await paste(page, profile);
    result.undo = await undo(page, profile);
    result.stats = await closing(page, profile); // last: each step closed its files, this one the rest
    result.answers = answers(profile);
    return result;
  } catch (error) {
    await page.screenshot({ path: join(artifacts, "editing-failure.png") }).catch(() => {});
    throw error;
  } finally {
    await browser.close();
  }
}

mkdirSync(artifacts, { recursive: true });
const profile = prepareProfile({}, JSON.parse(env("SERVER_OPTIONS", "{}")));
writeFileSync(join(profile.userData, "User", "keybindings.json"), JSON.stringify([
  { key: "alt+\\", command: "editor.action.inlineSuggest.trigger", when: "editorTextFocus" },
]));
const server = await startCodeServer(profile, workspace);
try {
  const result = await drive(server.url, profile);
  writeFileSync(join(artifacts, "editing.json"), JSON.stringify(result, null, 2));
  log("done");
} finally {
  writeFileSync(join(artifacts, "editing-code-server.log"), server.output());
  process.kill(-server.child.pid, "SIGTERM"); // code-server and its extension host, with the language server
}
