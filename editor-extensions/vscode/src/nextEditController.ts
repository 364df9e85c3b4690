// Next-edit suggestions in the editor: after a pause in typing (or on completer.nextEdit)
// ask the server for the edits the user will make next, show them as decorations, and let
// Tab jump to them and apply them, Escape dismiss them. Stable VS Code API only: the
// decorations stand in for the proposed inline-edit API, keybindings on the context keys
// below for its Tab handling.
import * as vscode from "vscode";
import { ExecuteCommandRequest, type LanguageClient } from "vscode-languageclient/node";
import {
  DID_SHOW_INLINE_EDIT,
  INLINE_EDIT,
  INLINE_EDIT_CAPABILITY,
  type InlineEditParams,
  type InlineEditResult,
  type Position,
  type Range,
  REJECT_EDIT_COMMAND,
  SETTINGS_SECTION,
} from "./protocol";
import { editView, isAtCursor, isCurrent, jumpTarget, type Suggestion, suggestionFrom } from "./nextEdit";

// Context keys package.json's keybindings test: Tab and Escape are ours only while one is shown.
const VISIBLE = "completer.nextEditVisible";
const AT_CURSOR = "completer.nextEditAtCursor";

interface Shown {
  editor: vscode.TextEditor;
  suggestion: Suggestion;
  atCursor: boolean;
}

export class NextEditController implements vscode.Disposable {
  private shown: Shown | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private asking: vscode.CancellationTokenSource | undefined; // the request in flight
  private readonly removed = vscode.window.createTextEditorDecorationType({
    backgroundColor: new vscode.ThemeColor("diffEditor.removedTextBackground"),
    textDecoration: "line-through",
  });
  private readonly inserted = vscode.window.createTextEditorDecorationType({
    after: {
      color: new vscode.ThemeColor("editorGhostText.foreground"),
      backgroundColor: new vscode.ThemeColor("diffEditor.insertedTextBackground"),
      fontStyle: "italic",
    },
  });
  // The lines an edit touches: where its diff hovers, and a mark in the scroll bar that finds
  // an edit away from the cursor.
  private readonly touched = vscode.window.createTextEditorDecorationType({
    isWholeLine: true,
    overviewRulerColor: new vscode.ThemeColor("editorOverviewRuler.modifiedForeground"),
    overviewRulerLane: vscode.OverviewRulerLane.Right,
  });
  private readonly listeners: vscode.Disposable[];

  constructor(
    private readonly client: () => LanguageClient | undefined,
    private readonly served: (document: vscode.TextDocument) => boolean, // the server has it open
    private readonly output: vscode.LogOutputChannel,
  ) {
    this.listeners = [
      vscode.workspace.onDidChangeTextDocument((event) => this.documentChanged(event)),
      vscode.window.onDidChangeTextEditorSelection((event) => this.selectionChanged(event)),
      vscode.window.onDidChangeActiveTextEditor(() => this.clear()),
    ];
  }

  dispose(): void {
    this.clear();
    clearTimeout(this.timer);
    for (const disposable of [...this.listeners, this.removed, this.inserted, this.touched]) disposable.dispose();
  }

  // completer.nextEdit: ask now, at the active editor's cursor, whatever completer.nextEdits says.
  async suggestNow(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (!editor || !this.served(editor.document)) return;
    if (!this.capable()) {
      void vscode.window.showInformationMessage("completer: the server does not suggest next edits (or is not running).");
      return;
    }
    await this.ask(editor);
  }

  // Tab away from the suggestion: the cursor goes to its first edit. From there Tab applies it
  // (a second Tab faster than the context key's update applies it too).
  async jump(): Promise<void> {
    const shown = this.shown;
    if (!shown) return;
    if (isAtCursor(shown.suggestion, shown.editor.selection.active)) return this.accept();
    const target = toVscodePosition(jumpTarget(shown.suggestion));
    shown.editor.selection = new vscode.Selection(target, target);
    shown.editor.revealRange(new vscode.Range(target, target), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
  }

  // Tab at the suggestion: all its edits in one editor.edit, so one undo step takes them back;
  // then the server counts it accepted.
  async accept(): Promise<void> {
    const shown = this.shown;
    if (!shown) return;
    this.clear();
    const { editor, suggestion } = shown;
    if (!isCurrent(suggestion, editor.document.uri.toString(), editor.document.version)) return;
    const applied = await editor.edit((builder) => {
      for (const edit of suggestion.edits) builder.replace(toVscodeRange(edit.range), edit.text);
    });
    if (!applied) return;
    this.output.info(`next edit accepted: ${suggestion.uri} version ${suggestion.version}`);
    await this.execute(suggestion.command.command, suggestion.command.arguments);
  }

  // Escape: the suggestion goes, and the server counts it dismissed.
  async dismiss(): Promise<void> {
    const shown = this.shown;
    if (!shown) return;
    this.clear();
    this.output.info(`next edit dismissed: ${shown.suggestion.uri} version ${shown.suggestion.version}`);
    await this.execute(REJECT_EDIT_COMMAND, shown.suggestion.command.arguments);
  }

  // Any change makes the suggestion stale; a change in the active editor asks for a new one
  // once typing pauses.
  private documentChanged(event: vscode.TextDocumentChangeEvent): void {
    if (event.contentChanges.length === 0) return; // only the dirty state changed
    if (this.shown?.editor.document === event.document) this.clear();
    const editor = vscode.window.activeTextEditor;
    if (editor?.document !== event.document) return;
    this.cancelAsking();
    clearTimeout(this.timer);
    if (this.automatic() && this.served(event.document)) {
      this.timer = setTimeout(() => void this.ask(editor), this.delayMs());
    }
  }

  private selectionChanged(event: vscode.TextEditorSelectionChangeEvent): void {
    const shown = this.shown;
    if (shown?.editor !== event.textEditor) return;
    const atCursor = isAtCursor(shown.suggestion, event.textEditor.selection.active);
    if (atCursor === shown.atCursor) return;
    shown.atCursor = atCursor;
    void vscode.commands.executeCommand("setContext", AT_CURSOR, atCursor);
  }

  private settings(): vscode.WorkspaceConfiguration {
    return vscode.workspace.getConfiguration(SETTINGS_SECTION);
  }

  private automatic(): boolean {
    return this.settings().get<boolean>("nextEdits", true) && this.capable();
  }

  private delayMs(): number {
    return Math.max(0, this.settings().get<number>("nextEditDelayMs", 800));
  }

  private capable(): boolean {
    const client = this.client();
    return Boolean(client?.isRunning() && client.initializeResult?.capabilities.experimental?.[INLINE_EDIT_CAPABILITY]);
  }

  // The edits for the document as it is now, at the cursor; shown only if the document is
  // still at that version when they arrive, in the same editor.
  private async ask(editor: vscode.TextEditor): Promise<void> {
    const client = this.client();
    if (!client?.isRunning() || vscode.window.activeTextEditor !== editor) return;
    this.cancelAsking();
    const asking = new vscode.CancellationTokenSource();
    this.asking = asking;
    const document = editor.document;
    const uri = document.uri.toString();
    const version = document.version;
    const { line, character } = editor.selection.active;
    const params: InlineEditParams = { textDocument: { uri, version }, position: { line, character } };
    let result: InlineEditResult | undefined;
    try {
      result = await client.sendRequest<InlineEditResult>(INLINE_EDIT, params, asking.token);
    } catch (error) {
      if (!asking.token.isCancellationRequested) this.output.warn(`next edit: ${String(error)}`);
      return;
    } finally {
      if (this.asking === asking) this.asking = undefined;
      asking.dispose();
    }
    const suggestion = suggestionFrom(result, uri, version);
    if (!suggestion || vscode.window.activeTextEditor !== editor || !isCurrent(suggestion, uri, document.version)) return;
    this.show(editor, suggestion);
    await client.sendNotification(DID_SHOW_INLINE_EDIT, { item: { command: suggestion.command } });
  }

  private show(editor: vscode.TextEditor, suggestion: Suggestion): void {
    this.clear();
    const removed: vscode.DecorationOptions[] = [];
    const inserted: vscode.DecorationOptions[] = [];
    const touched: vscode.DecorationOptions[] = [];
    for (const edit of suggestion.edits) {
      const view = editView(edit, linesOf(editor.document, edit.range));
      if (view.removed) removed.push({ range: toVscodeRange(view.removed) });
      if (view.ghost) {
        const at = toVscodePosition(view.ghost.at);
        inserted.push({ range: new vscode.Range(at, at), renderOptions: { after: { contentText: view.ghost.text } } });
      }
      const hover = new vscode.MarkdownString("completer: next edit (Tab: go to it, apply it; Escape: dismiss)");
      hover.appendCodeblock(view.diff.join("\n"), "diff");
      touched.push({ range: new vscode.Range(view.lines.first, 0, view.lines.last, 0), hoverMessage: hover });
    }
    editor.setDecorations(this.removed, removed);
    editor.setDecorations(this.inserted, inserted);
    editor.setDecorations(this.touched, touched);
    const atCursor = isAtCursor(suggestion, editor.selection.active);
    this.shown = { editor, suggestion, atCursor };
    void vscode.commands.executeCommand("setContext", VISIBLE, true);
    void vscode.commands.executeCommand("setContext", AT_CURSOR, atCursor);
    // The edits as the server sent them: for the user who wonders, and read by the e2e test.
    const edits = suggestion.edits.map(({ text, range }) => ({ text, range }));
    this.output.info(`next edit shown: ${JSON.stringify({ uri: suggestion.uri, version: suggestion.version, edits })}`);
  }

  // Takes the suggestion off the screen, without telling the server: it was typed over or
  // left, neither accepted nor dismissed.
  clear(): void {
    const shown = this.shown;
    if (!shown) return;
    this.shown = undefined;
    for (const type of [this.removed, this.inserted, this.touched]) shown.editor.setDecorations(type, []);
    void vscode.commands.executeCommand("setContext", VISIBLE, false);
    void vscode.commands.executeCommand("setContext", AT_CURSOR, false);
  }

  private cancelAsking(): void {
    this.asking?.cancel();
    this.asking = undefined;
  }

  private async execute(command: string, args: unknown[]): Promise<void> {
    const client = this.client();
    if (!client?.isRunning()) return;
    try {
      await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args });
    } catch (error) {
      this.output.warn(`${command}: ${String(error)}`);
    }
  }
}

// The document's lines from the range's first to its last, as they are now.
function linesOf(document: vscode.TextDocument, range: Range): string[] {
  const lines = [];
  for (let line = range.start.line; line <= range.end.line; line++) lines.push(document.lineAt(line).text);
  return lines;
}

// VS Code's positions are LSP's: the client offers the server UTF-16 only.
function toVscodePosition(position: Position): vscode.Position {
  return new vscode.Position(position.line, position.character);
}

function toVscodeRange(range: Range): vscode.Range {
  return new vscode.Range(toVscodePosition(range.start), toVscodePosition(range.end));
}
