// A real VS Code (code-server) in a real browser (headless Chromium), with the built
// .vsix installed and the real server behind it: open a Python file, type, wait for the
// inline suggestion's ghost text, take a screenshot, show the next candidate (Alt+]) and
// the first again (Alt+[), accept it with Tab and read the file back from disk; show the
// prompt behind it (completer: Why This Suggestion); turn the language's suggestions off
// and on again (completer: Toggle Suggestions for This Language). Then the next edit: in
// EDIT_FILE, type the start of an edit, wait for the suggestion's decorations, move away,
// Tab back to it, Tab to apply it, undo it, and Escape the next one; read the statistics. Then in FILE, open the suggest widget on the
// start of a word and Tab its item. Then point a setting at a missing model
// and wait for the error notification. Writes result.json, vscode-inline-suggestion.png,
// vscode-candidates.png, vscode-accepted.png, vscode-why.png, vscode-next-edit.png,
// vscode-suggest-widget.png, vscode-load-error.png and code-server.log
// to ARTIFACTS. Run by tests/editors/test_vscode.py, which prepares the workspace and checks the
// result.
//
// Environment: CODE_SERVER (its out/node/entry.js), VSIX, COMPLETER (the executable),
// WORKSPACE (holds FILE and EDIT_FILE), FILE, TYPED (text typed at the file's end),
// EDIT_FILE, EDIT_AT (line:character, 0-based, where EDIT_TYPED is typed), EDIT_TYPED,
// ARTIFACTS, CHROMIUM (default /usr/bin/chromium), SERVER_OPTIONS (JSON settings under
// completer.), WORKSPACE_NOTICE (optional: a notification the workspace's own settings
// cause, waited for).
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";
import {
  cursor, env, fileChange, hideInlineSuggestion, log, logged, minutes, openFile, prepareProfile, saved, startCodeServer,
  statistics, waitForDecorations, waitForLogged, waitForModels,
} from "./codeServer.mjs";

const workspace = env("WORKSPACE");
const file = env("FILE");
const typed = env("TYPED");
const editFile = env("EDIT_FILE");
const [editLine, editCharacter] = env("EDIT_AT").split(":").map(Number);
const editTyped = env("EDIT_TYPED");
const artifacts = env("ARTIFACTS");

const MISSING_MODEL = "/nonexistent/model.gguf";
// Typed for the suggest widget: the start of a word FILE holds (standard_deviation).
const WIDGET_TYPED = "standard_d";

// In EDIT_FILE: type the start of an edit at EDIT_AT, wait for the suggested next edit and its
// decorations, move to the end, Tab (back to the edit), Tab (apply it), undo; then Escape
// dismisses the suggestion the undone text gets, if the model makes one.
async function nextEdit(page, profile) {
  const path = join(workspace, editFile);
  await openFile(page, editFile);
  await page.keyboard.press("Control+Home");
  for (let i = 0; i < editLine; i++) await page.keyboard.press("ArrowDown");
  for (let i = 0; i < editCharacter; i++) await page.keyboard.press("ArrowRight");
  const shownBefore = logged(profile, "shown").length;
  const original = readFileSync(path, "utf8");
  const lines = original.split("\n");
  lines[editLine] = lines[editLine].slice(0, editCharacter) + editTyped + lines[editLine].slice(editCharacter);
  await page.keyboard.type(editTyped, { delay: 30 });
  // Saved once typing stops (files.autoSaveDelay), or in parts where a key comes late.
  const typedText = await saved(path, (text) => text === lines.join("\n"));
  await waitForLogged(profile, "shown", shownBefore + 1, minutes(2));
  const onScreen = await waitForDecorations(page, true);
  const suggestion = JSON.parse(logged(profile, "shown").at(-1));
  log(`next edit on screen: ${JSON.stringify(onScreen)}`);
  await hideInlineSuggestion(page);
  await page.waitForTimeout(300);
  await page.screenshot({ path: join(artifacts, "vscode-next-edit.png") });

  await page.keyboard.press("Control+End");
  await page.waitForTimeout(500); // the status bar and the extension hear of the move
  const away = await cursor(page);
  await page.keyboard.press("Tab");
  let jumped = away;
  for (const start = Date.now(); jumped === away && Date.now() - start < 10_000;) {
    await page.waitForTimeout(100);
    jumped = await cursor(page);
  }
  await page.waitForTimeout(500); // the selection reaches the extension, which sets its context key
  const afterJump = readFileSync(path, "utf8");
  await hideInlineSuggestion(page);
  await page.keyboard.press("Tab");
  const applied = await fileChange(path, afterJump);
  await waitForLogged(profile, "accepted", 1, 30_000);
  await page.keyboard.press("Control+z");
  const undone = await fileChange(path, applied);
  log(`applied, then undone: ${JSON.stringify({ applied, undone })}`);

  const dismissed = await dismissNext(page, profile);
  return {
    typed_text: typedText, suggestion, decorations: onScreen, cursor_away: away,
    cursor_after_jump: jumped, after_jump: afterJump, applied, undone, dismissed,
  };
}

// The undone text gets a suggestion of its own (smol makes one on it, most times): Escape
// takes it off the screen. The number dismissed, and whether the decorations went with it.
async function dismissNext(page, profile) {
  const shown = logged(profile, "shown").length;
  try {
    await waitForLogged(profile, "shown", shown + 1, 60_000);
  } catch {
    log("no next edit after the undo: nothing to dismiss");
    return { count: 0, decorations_after: null };
  }
  await waitForDecorations(page, true);
  await hideInlineSuggestion(page);
  await page.keyboard.press("Escape");
  await waitForLogged(profile, "dismissed", 1, 30_000);
  return { count: 1, decorations_after: await waitForDecorations(page, false) };
}

// VS Code's own Alt+] and Alt+[ (Show Next / Previous Inline Suggestion) over the server's
// candidates: the next one on screen (pictured), then the first again. What each showed.
async function cycle(page, ghostText, first) {
  const until = async (wanted, timeout) => {
    for (const start = Date.now(); Date.now() - start < timeout;) {
      const now = await ghostText();
      if (now.length && wanted(now)) return now;
      await page.waitForTimeout(100);
    }
    return null;
  };
  await page.keyboard.press("Alt+BracketRight");
  const next = await until((now) => JSON.stringify(now) !== JSON.stringify(first), 10_000);
  if (next) {
    await page.waitForTimeout(300);
    await page.screenshot({ path: join(artifacts, "vscode-candidates.png") });
  }
  await page.keyboard.press("Alt+BracketLeft");
  const back = await until((now) => JSON.stringify(now) === JSON.stringify(first), 10_000);
  log(`candidates: ${JSON.stringify({ next, back })}`);
  return { next, back };
}

async function runCommand(page, title) {
  await page.keyboard.press("Control+Shift+P");
  await page.keyboard.type(`completer: ${title}`);
  await page.waitForSelector(`.quick-input-list .monaco-list-row[aria-label*="${title}"]`);
  await page.keyboard.press("Enter");
  await page.locator(".quick-input-widget").first().waitFor({ state: "hidden", timeout: 10_000 });
}

// Focus back in the active editor, at the end of its text.
async function toEditorEnd(page) {
  await page.click(".editor-group-container.active .monaco-editor .view-lines");
  await page.keyboard.press("Control+End");
}

// completer: Why This Suggestion, after a completion in FILE: its view opens beside FILE's
// editor, saying which file it is about, then the prompt, which holds FILE's first line.
// Closed again, FILE's editor is the active one. The view's lines on screen, as text.
async function whyThisSuggestion(page) {
  await runCommand(page, "Why This Suggestion");
  const firstLine = readFileSync(join(workspace, file), "utf8").split("\n")[0];
  const view = page.locator(".editor-group-container.active .monaco-editor")
    .filter({ hasText: `# Why this suggestion: ${file}` }).filter({ hasText: firstLine });
  await view.first().waitFor({ timeout: 30_000 });
  await page.locator(`.tab.active[data-resource-name="${file}.why.md"]`).first().waitFor({ timeout: 10_000 });
  const lines = await view.first().locator(".view-line").evaluateAll((nodes) => nodes
    .sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top))
    .map((node) => node.textContent.replace(/\u00a0/g, " ")));
  await page.screenshot({ path: join(artifacts, "vscode-why.png") });
  await page.locator(`.tab[data-resource-name="${file}.why.md"] .tab-actions .action-label`).first().click();
  await page.waitForSelector(`.editor-group-container.active .tab.active[data-resource-name="${file}"]`, { timeout: 10_000 });
  log(`why this suggestion: ${JSON.stringify(lines)}`);
  return lines;
}

// completer: Toggle Suggestions for This Language, in the active Python editor: off,
// nothing shows after typing; on again, a suggestion shows.
async function pauseLanguage(page, ghost) {
  const toggle = async (state) => {
    await runCommand(page, "Toggle Suggestions for This Language");
    const toast = page.locator(".notification-toast").filter({ hasText: `suggestions ${state} for python` });
    await toast.first().waitFor({ timeout: 10_000 });
    await toEditorEnd(page);
  };
  await toggle("off");
  await page.keyboard.press("Enter");
  await page.keyboard.type("total = ", { delay: 30 });
  await page.waitForTimeout(3000); // past the debounce and a completion's time
  const shownWhileOff = await ghost.count();
  await toggle("on");
  await page.keyboard.type("s", { delay: 30 });
  const shownWhenOn = await ghost.first().waitFor({ timeout: minutes(1) }).then(() => true, () => false);
  await page.keyboard.press("Escape");
  return { shown_while_off: shownWhileOff, shown_when_on: shownWhenOn };
}

// The suggest widget stays VS Code's own (the extension adds no item to it): on a new line
// of FILE, the start of a word the file holds, Ctrl+Space opens the widget (over the inline
// suggestion, if one shows), Tab takes the widget's focused item. The widget's items, the
// focused one's label and the line Tab left.
async function suggestWidget(page) {
  const path = join(workspace, file);
  await page.click(`.tab[data-resource-name="${file}"]`); // open since the start
  await page.waitForSelector(`.tab.active[data-resource-name="${file}"]`, { timeout: 30_000 });
  await toEditorEnd(page);
  await page.keyboard.press("Enter");
  await page.keyboard.type(WIDGET_TYPED, { delay: 30 });
  await page.waitForTimeout(1000); // an inline suggestion's time, so that the widget opens over it
  await page.keyboard.press("Control+Space");
  const rows = page.locator(".suggest-widget.visible .monaco-list-row");
  await rows.first().waitFor({ timeout: 30_000 });
  const labels = (row) => row.locator(".label-name").allTextContents();
  const items = await rows.evaluateAll((nodes) => nodes.map((node) => node.getAttribute("aria-label")));
  const [focused] = await labels(page.locator(".suggest-widget.visible .monaco-list-row.focused"));
  // Saved while the widget opened (files.autoSaveDelay), or in parts where a key came late.
  const typed = await saved(path, (text) => text.endsWith(WIDGET_TYPED));
  await page.screenshot({ path: join(artifacts, "vscode-suggest-widget.png") });
  await page.keyboard.press("Tab");
  const line = (await fileChange(path, typed)).split("\n").at(-1);
  log(`suggest widget: ${JSON.stringify({ items, focused, line })}`);
  return { items, focused, line };
}

async function drive(url, profile) {
  const browser = await chromium.launch({ executablePath: env("CHROMIUM", "/usr/bin/chromium"), args: ["--no-sandbox"] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  try {
    await page.goto(`${url}/?folder=${encodeURIComponent(workspace)}`);
    await page.waitForSelector(".monaco-workbench", { timeout: minutes(2) });
    log("workbench up");

    await openFile(page, file);

    // The workspace's own settings (a bad value of one it may set) reached the server.
    let workspaceNotice = null;
    if (process.env.WORKSPACE_NOTICE) {
      const toast = page.locator(".notification-toast").filter({ hasText: process.env.WORKSPACE_NOTICE });
      await toast.first().waitFor({ timeout: 30_000 });
      workspaceNotice = (await toast.first().locator(".notification-list-item-message").textContent()).replace(/\u00a0/g, " ");
      log(`workspace setting's notice: ${workspaceNotice}`);
    }

    await waitForModels(page);

    await page.keyboard.press("Control+End");
    await page.keyboard.type(typed, { delay: 30 });
    const ghost = page.locator(".monaco-editor .ghost-text-decoration, .monaco-editor .ghost-text");
    await ghost.first().waitFor({ timeout: minutes(2) });
    await page.waitForTimeout(500); // let the suggestion's lines finish rendering for the picture
    const ghostText = async () => (await ghost.allTextContents()).map((text) => text.replace(/\u00a0/g, " "));
    const shown = await ghostText();
    await page.screenshot({ path: join(artifacts, "vscode-inline-suggestion.png") });
    log(`suggestion on screen: ${JSON.stringify(shown)}`);
    const candidates = await cycle(page, ghostText, shown);

    const before = readFileSync(join(workspace, file), "utf8");
    await page.keyboard.press("Tab");
    const after = await fileChange(join(workspace, file), before);
    // The status bar polls completer/stats: it shows figures once a completion ran.
    const figures = page.locator(".statusbar-item:has(.codicon-sparkle)").filter({ hasText: /tok\/s/ });
    await figures.first().waitFor({ timeout: 30_000 });
    const status = await figures.first().textContent();
    await page.screenshot({ path: join(artifacts, "vscode-accepted.png") });
    const why = await whyThisSuggestion(page);
    // (Before the next edit: what is typed here is in the edit history its prompt holds.)
    const paused = await pauseLanguage(page, ghost);
    log(`paused: ${JSON.stringify(paused)}`);

    const next_edit = await nextEdit(page, profile);
    next_edit.statistics = await statistics(page);
    next_edit.shown_total = logged(profile, "shown").length;
    log(`next edit: ${JSON.stringify(next_edit.statistics)}`);
    const suggest_widget = await suggestWidget(page); // after the next edit: its prompt holds what is typed

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
    return { shown, candidates, before, after, status, why, paused, notification, workspace_notice: workspaceNotice,
      next_edit, suggest_widget };
  } catch (error) {
    await page.screenshot({ path: join(artifacts, "vscode-failure.png") }).catch(() => {});
    throw error;
  } finally {
    await browser.close();
  }
}

mkdirSync(artifacts, { recursive: true });
const profile = prepareProfile({}, JSON.parse(env("SERVER_OPTIONS", "{}")));
const server = await startCodeServer(profile, workspace);
try {
  const result = await drive(server.url, profile);
  writeFileSync(join(artifacts, "result.json"), JSON.stringify(result, null, 2));
  log("done");
} finally {
  writeFileSync(join(artifacts, "code-server.log"), server.output());
  process.kill(-server.child.pid, "SIGTERM"); // code-server and its extension host, with the language server
}
