// The VS Code side of completer: starts `completer serve --stdio` for the enabled
// languages, keeps its options in step with the settings, and shows its statistics and
// why a suggestion came (the prompt behind it).
// Inline completions themselves are vscode-languageclient's (registered by default); next-edit
// suggestions are nextEditController's.
import * as vscode from "vscode";
import { DidChangeConfigurationNotification, LanguageClient, State } from "vscode-languageclient/node";
import { NextEditController } from "./nextEditController";
import {
  CLIENT_OPTIONS,
  DID_SHOW_COMPLETION,
  PROMPT,
  type PromptAnswer,
  SERVER_NAME,
  SETTINGS_SECTION,
  SEVERAL_EDITS_OPTION,
  STATS,
  type Stats,
  WARM,
} from "./protocol";
import {
  type Launch,
  launch,
  machineValues,
  pullArgs,
  RESTART_SETTINGS,
  serveArgs,
  serverOptions,
  type ServerOptions,
  withRenamedSettings,
} from "./settings";
import { type ServerState, statsLines, statusView } from "./status";
import { whyView } from "./why";

let extension: Extension | undefined;

export function activate(context: vscode.ExtensionContext): void {
  extension = new Extension(context);
  void extension.update();
}

export async function deactivate(): Promise<void> {
  await extension?.stop();
}

function settings(): vscode.WorkspaceConfiguration {
  return vscode.workspace.getConfiguration(SETTINGS_SECTION);
}

// The user's own value of a setting (user settings, local or remote), never a workspace's
// or a folder's: for what chooses the program launched, where code and keys go and which
// model files load. Their "scope": "machine" makes VS Code ignore a workspace's value
// already; this holds even where it would not.
function userValue<T>(name: string): T | undefined {
  return settings().inspect<T>(name)?.globalValue;
}

// The schemes of the documents the server is sent, in the enabled languages.
const SCHEMES = ["file", "untitled"];

function served(document: vscode.TextDocument): boolean {
  const languages = settings().get<string[]>("languages", []);
  return languages.includes(document.languageId) && SCHEMES.includes(document.uri.scheme);
}

function program(): Launch {
  return launch(userValue<string>("command") ?? "completer", userValue<string>("pythonPath") ?? "");
}

// The views of completer.whyThisSuggestion: read-only documents (a provider's documents
// are, and closing one asks nothing), one per completed document, replaced when asked again.
const WHY_SCHEME = "completer-why";

class WhyDocuments implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly texts = new Map<string, string>(); // uri -> the view's text
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  private readonly closing = vscode.workspace.onDidCloseTextDocument((closed) => this.texts.delete(closed.uri.toString()));
  readonly onDidChange = this.changed.event;

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.texts.get(uri.toString()) ?? "";
  }

  // Show `text`, the view of `document` (its path in the workspace), beside the editor.
  async show(document: string, text: string): Promise<void> {
    const uri = vscode.Uri.from({ scheme: WHY_SCHEME, path: `/${document.replace(/^\/+/, "")}.why.md` });
    this.texts.set(uri.toString(), text);
    this.changed.fire(uri);
    // Markdown by its name's ".md" (setTextDocumentLanguage would close it, dropping its text).
    const view = await vscode.workspace.openTextDocument(uri);
    await vscode.window.showTextDocument(view, { viewColumn: vscode.ViewColumn.Beside, preview: true });
  }

  dispose(): void {
    this.closing.dispose();
    this.changed.dispose();
  }
}

class Extension {
  private client: LanguageClient | undefined;
  private state: ServerState = { kind: "idle" };
  private readonly status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  private readonly output = vscode.window.createOutputChannel(SERVER_NAME, { log: true });
  private poll: ReturnType<typeof setInterval> | undefined;
  // Languages whose suggestions the user turned off (completer.toggleLanguage), for this
  // session: nothing is asked for their documents, and the server keeps running.
  private readonly paused = new Set<string>();
  private readonly nextEdits = new NextEditController(
    () => this.client,
    (document) => served(document) && !this.paused.has(document.languageId),
    this.output,
  );
  private readonly whyDocuments = new WhyDocuments();

  constructor(private readonly context: vscode.ExtensionContext) {
    context.subscriptions.push(
      this.status,
      this.output,
      this.nextEdits,
      this.whyDocuments,
      vscode.workspace.registerTextDocumentContentProvider(WHY_SCHEME, this.whyDocuments),
      vscode.commands.registerCommand("completer.enable", () => settings().update("enable", true, true)),
      vscode.commands.registerCommand("completer.disable", () => settings().update("enable", false, true)),
      vscode.commands.registerCommand("completer.showStats", () => this.showStats()),
      vscode.commands.registerCommand("completer.restartServer", () => this.restart()),
      vscode.commands.registerCommand("completer.pullModels", () => this.pullModels()),
      vscode.commands.registerCommand("completer.nextEdit", () => this.nextEdits.suggestNow()),
      vscode.commands.registerCommand("completer.jumpToNextEdit", () => this.nextEdits.jump()),
      vscode.commands.registerCommand("completer.acceptNextEdit", () => this.nextEdits.accept()),
      vscode.commands.registerCommand("completer.dismissNextEdit", () => this.nextEdits.dismiss()),
      vscode.commands.registerCommand("completer.toggleLanguage", () => this.toggleLanguage()),
      vscode.commands.registerCommand("completer.whyThisSuggestion", () => this.whyThisSuggestion()),
      vscode.workspace.onDidOpenTextDocument(() => void this.update()),
      vscode.workspace.onDidChangeConfiguration((event) => void this.configurationChanged(event)),
      vscode.window.onDidChangeActiveTextEditor((editor) => void this.warm(editor)),
    );
    this.status.command = "completer.showStats";
    this.status.show();
  }

  // Start the server when enabled and a document in an enabled language is open.
  async update(): Promise<void> {
    if (!settings().get<boolean>("enable", true)) {
      await this.stop();
      return this.show({ kind: "disabled" });
    }
    const languages = settings().get<string[]>("languages", []);
    const wanted = vscode.workspace.textDocuments.some((document) => languages.includes(document.languageId));
    if (this.client || !wanted) return this.show(this.client ? this.state : { kind: "idle" });
    await this.start(languages);
  }

  private async start(languages: string[]): Promise<void> {
    const how = program();
    const args = serveArgs(how, machineValues(userValue));
    const client = new LanguageClient(
      SERVER_NAME,
      SERVER_NAME,
      { command: how.command, args },
      {
        documentSelector: languages.flatMap((language) => SCHEMES.map((scheme) => ({ language, scheme }))),
        // The next-edit controller shows and applies every edit of an answer: the server
        // need not join them into one, as it does for Copilot's clients.
        initializationOptions: { ...this.serverOptions(), [CLIENT_OPTIONS]: { [SEVERAL_EDITS_OPTION]: true } },
        outputChannel: this.output,
        middleware: {
          // The server's completion item is for editors without inline suggestions: here it
          // would repeat the ghost text in the suggest widget, in its first place, where Tab
          // and Enter take it. The widget stays VS Code's own.
          provideCompletionItem: () => undefined,
          // VS Code's stable API does not say when it shows an inline item, so the first
          // item returned, which VS Code shows first, is reported as shown.
          provideInlineCompletionItems: async (document, position, context, token, next) => {
            if (this.paused.has(document.languageId)) return null;
            const version = document.version;
            const result = await next(document, position, context, token);
            const items = Array.isArray(result) ? result : result?.items;
            if (items?.length) this.logAnswer(document, version, position, items);
            const command = items?.[0]?.command;
            if (command) {
              const { title, arguments: args } = command;
              void client.sendNotification(DID_SHOW_COMPLETION, {
                item: { command: { title, command: command.command, arguments: args } },
              });
            }
            return result;
          },
        },
      },
    );
    this.client = client;
    this.show({ kind: "starting" });
    // After a crash the client restarts the server a few times, then gives up.
    client.onDidChangeState((change) => {
      if (this.client !== client) return;
      if (change.newState === State.Stopped) {
        this.show({ kind: "stopped", reason: "the server exited; see the completer output, then restart it" });
      } else if (change.newState === State.Running) {
        this.show({ kind: "running", stats: undefined });
      }
    });
    try {
      await client.start();
    } catch (error) {
      this.client = undefined;
      const reason = `could not run \`${how.command} ${args.join(" ")}\`: ${String(error)}`;
      this.show({ kind: "stopped", reason });
      void vscode.window.showErrorMessage(
        `completer: ${reason}. Install completer, or set completer.command in your user settings to its full ` +
          "path (or completer.pythonPath to an interpreter that has it).",
      );
      return;
    }
    const seconds = settings().get<number>("statusIntervalSeconds", 2);
    this.poll = setInterval(() => void this.refresh(), Math.max(0.5, seconds) * 1000);
    void this.refresh();
    void this.warm(vscode.window.activeTextEditor);
  }

  // The user is at the cursor of a document just opened or made active: the server
  // evaluates the prompt there ahead of the first suggestion.
  private async warm(editor: vscode.TextEditor | undefined): Promise<void> {
    const client = this.client;
    const languages = settings().get<string[]>("languages", []);
    if (!editor || !client?.isRunning() || !languages.includes(editor.document.languageId)) return;
    const position = editor.selection.active;
    await client.sendNotification(WARM, {
      textDocument: { uri: editor.document.uri.toString() },
      position: { line: position.line, character: position.character },
    });
  }

  async stop(): Promise<void> {
    this.nextEdits.clear();
    clearInterval(this.poll);
    this.poll = undefined;
    const client = this.client;
    this.client = undefined;
    if (client?.isRunning()) await client.stop();
  }

  private async restart(): Promise<void> {
    await this.stop();
    this.state = { kind: "idle" };
    await this.update();
  }

  private serverOptions(): ServerOptions {
    const values: Record<string, unknown> = {};
    const declared = this.context.extension.packageJSON.contributes.configuration.properties as Record<string, unknown>;
    for (const key of Object.keys(declared)) {
      const name = key.slice(SETTINGS_SECTION.length + 1);
      values[name] = settings().get(name);
    }
    const explicitlySet = (name: string): boolean => {
      const set = settings().inspect(name);
      return [set?.globalValue, set?.workspaceValue, set?.workspaceFolderValue].some((value) => value !== undefined);
    };
    return serverOptions(withRenamedSettings(values, explicitlySet));
  }

  private async configurationChanged(event: vscode.ConfigurationChangeEvent): Promise<void> {
    if (!event.affectsConfiguration(SETTINGS_SECTION)) return;
    if (RESTART_SETTINGS.some((name) => event.affectsConfiguration(`${SETTINGS_SECTION}.${name}`))) {
      return this.restart();
    }
    // Model changes make the server reload; the rest apply to the next request.
    await this.client?.sendNotification(DidChangeConfigurationNotification.type, {
      settings: { [SETTINGS_SECTION]: this.serverOptions() },
    });
  }

  private async refresh(): Promise<Stats | undefined> {
    const client = this.client;
    if (!client?.isRunning()) return undefined;
    try {
      const stats = await client.sendRequest<Stats>(STATS, {});
      if (this.client === client) this.show({ kind: "running", stats });
      return stats;
    } catch {
      return undefined; // stopping, or busy: the next poll asks again
    }
  }

  private show(state: ServerState): void {
    this.state = state;
    const view = statusView(state);
    this.status.text = view.text;
    this.status.tooltip = view.tooltip;
    this.status.accessibilityInformation = { label: view.label };
    this.status.backgroundColor = view.error ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
    this.status.command = state.kind === "disabled" ? "completer.enable" : "completer.showStats";
  }

  private async showStats(): Promise<void> {
    const stats = await this.refresh();
    // All the figures, the dialog's and the rest: for the user who wonders, and read by the e2e tests.
    if (stats) this.output.info(`statistics: ${JSON.stringify(stats)}`);
    const view = statusView(this.state);
    if (!stats || !stats.ready) {
      void vscode.window.showInformationMessage(view.tooltip);
      return;
    }
    void vscode.window.showInformationMessage("completer statistics", { modal: true, detail: statsLines(stats).join("\n") });
  }

  // The server's inline completions for `version` of the document, at `position`, as text and
  // range: for the user who wonders, and read by the e2e tests.
  private logAnswer(
    document: vscode.TextDocument,
    version: number,
    position: vscode.Position,
    items: vscode.InlineCompletionItem[],
  ): void {
    const at = (where: vscode.Position) => ({ line: where.line, character: where.character });
    const answer = {
      uri: document.uri.toString(),
      version,
      position: at(position),
      items: items.map((item) => ({
        text: typeof item.insertText === "string" ? item.insertText : item.insertText.value,
        range: item.range && { start: at(item.range.start), end: at(item.range.end) },
      })),
    };
    this.output.info(`inline completion: ${JSON.stringify(answer)}`);
  }

  // Suggestions off, or on again, for the active editor's language, until VS Code closes.
  private toggleLanguage(): void {
    const language = vscode.window.activeTextEditor?.document.languageId;
    if (!language) {
      void vscode.window.showInformationMessage("completer: open a file to turn its language's suggestions off or on");
      return;
    }
    const off = !this.paused.delete(language);
    if (off) {
      this.paused.add(language);
      this.nextEdits.clear();
      void vscode.commands.executeCommand("editor.action.inlineSuggest.hide");
    }
    void vscode.window.showInformationMessage(`completer: suggestions ${off ? "off" : "on"} for ${language} (this session)`);
  }

  // What the prompt of the active document's last decoded completion showed, and why.
  private async whyThisSuggestion(): Promise<void> {
    const document = vscode.window.activeTextEditor?.document;
    const client = this.client;
    if (!document || !client?.isRunning()) {
      const why = document ? "the server is not running" : "open a file to see why its last suggestion came";
      void vscode.window.showInformationMessage(`completer: ${why}`);
      return;
    }
    const answer = await client.sendRequest<PromptAnswer | null>(PROMPT, { uri: document.uri.toString() });
    if (!answer) {
      void vscode.window.showInformationMessage("completer: no completion has been decoded in this document yet");
      return;
    }
    const path = vscode.workspace.asRelativePath(document.uri);
    await this.whyDocuments.show(path, whyView(path, answer));
  }

  private pullModels(): void {
    const how = program();
    const preset = settings().get<string>("models.preset", "");
    const terminal = vscode.window.createTerminal({
      name: "completer: pull models",
      shellPath: how.command,
      shellArgs: pullArgs(how, preset),
    });
    terminal.show();
  }
}
