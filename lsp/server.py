"""The language server: thin handlers over the one completer.editor.completer.Completer.

    initialize         options -> Config (bad values: defaults and a showMessage); UTF-16
                       positions where offered, as clients written for Copilot count
    initialized        models load in a thread, reported with $/progress
    didOpen/didChange  lsp.documents keeps the text (LSP line breaks, negotiated encoding)
    completer/warm     the prompt at that position is evaluated ahead, giving way to requests;
    didFocus           Copilot's: the same, where the document's last request was
    inlineCompletion   -> Completer.complete in a worker thread; the newest request for a
                          document cancels the older one, $/cancelRequest cancels its own;
                          then, while the answer is shown, Completer.prefetch computes the
                          one after its acceptance
    completion         the same (no prefetch), as one completion item marked as AI
    didShowCompletion, didPartiallyAcceptCompletion, completer.accept
                       what of the items was shown and taken (lsp.acceptance), and how much
                       of it is still there 30 s and 2 min later
    copilotInlineEdit  -> Completer.next_edit in a worker thread, once the document's
                          completions being answered and their prefetch are done: the edits
                          the user will make next around the cursor (Copilot's request and
                          shape), for the document's version then: one edit spanning them
                          unless the client said it applies several (as Copilot's clients
                          apply the first); didShowInlineEdit and the edits' commands count
                          what was shown, accepted and dismissed, and so does a change that
                          makes the shown edits (Copilot's clients run no command)
    completer/stats    counters; completer.accept (each item's command) counts acceptance

Requests before the models are ready get an empty answer. A model that fails to load
is reported once, with what to run, and the server keeps answering.
"""

import asyncio
import ctypes
import itertools
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

from cattrs import ClassValidationError, transform_error
from lsprotocol import types
from pygls.capabilities import ServerCapabilitiesBuilder
from pygls.exceptions import (JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest, JsonRpcParseError,
                              JsonRpcServerNotInitialized)
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method
from pygls.uris import to_fs_path

from completer.config import Config, config_from_dict, machine_options
from completer.editor.completer import Completer
from completer.editor.documents import WARM
from completer.editor.next_edit import apply_edits, spanning_edit
from completer.loading import Loaded, needs_reload
from completer.lsp import protocol
from completer.lsp.acceptance import RETENTION_CHECKS_S, Acceptances, Accepted, EditAcceptances
from completer.lsp.completing import (Answer, after_acceptance, answer_for, complete, completion_items,
                                      document_position, edit_items, inline_edit_params, inline_items, next_edit,
                                      request_at)
from completer.lsp.documents import Document, as_lf, characters
from completer.lsp.loading import DOWNLOAD, Downloads, LoadProgress, download_question, load_models
from completer.models.presets import HubFile, Preset
from completer.errors import Unavailable
from completer.requests import CompleterStats

log = logging.getLogger("completer.lsp")


class CompleterProtocol(LanguageServerProtocol):
    """pygls's protocol, with open documents kept by the server (lsp.documents), not in
    pygls's workspace, which splits lines where LSP does not (form feeds, U+2028); and
    an answer for every request pygls 2.1 would leave unanswered (which hangs a client):
    one before `initialize` (-32002), one after `shutdown` (-32600), one whose params do
    not deserialize (-32602), and a body that is not JSON (-32700, id null).

    pygls has no public way to answer a request outside a handler, so `reject` calls its
    private `_send_response`; the rest overrides public methods. So pyproject.toml pins
    pygls exactly, and tests/lsp/test_lsp_protocol.py checks that version has all used here."""

    initialized = False
    shut_down = False  # ours, not pygls's private `_shutdown`: set once `shutdown` is handled

    def reject(self, msg_id: Any, error: JsonRpcException) -> None:
        """Answer a request with this error."""
        self._send_response(msg_id, error=error.to_response_error())

    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as error:
            if "id" in data and "method" in data:  # a request: it must get an answer
                cause = error.__cause__
                why = "; ".join(transform_error(cause)) if isinstance(cause, ClassValidationError) else str(cause)
                log.warning("%s with params that do not deserialize: %s", data["method"], why)
                self.reject(data["id"], JsonRpcInvalidParams(f"{data['method']}: invalid params: {why}"))
            return None

    def handle_message(self, message: Any) -> None:
        if message is None:  # answered in structure_message
            return
        method = getattr(message, "method", None)
        is_request = method is not None and getattr(message, "id", None) is not None
        if method == types.INITIALIZE:
            self.initialized = True
        elif not self.initialized and method not in (None, types.EXIT):
            if is_request:
                self.reject(message.id, JsonRpcServerNotInitialized(f"{method} before initialize"))
            return  # a notification before initialize is dropped, as the protocol says
        if self.shut_down and is_request and method != types.EXIT:
            self.reject(message.id, JsonRpcInvalidRequest(f"{method} after shutdown"))
            return
        super().handle_message(message)
        if method == types.SHUTDOWN:
            self.shut_down = True

    def _user_handler(self, method: str, params: Any):
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        """pygls's, with the position encoding chosen_encoding() chooses, and the next-edit
        request under `experimental`, which pygls's capabilities builder leaves out."""
        result = yield from super().lsp_initialize(params)
        result.capabilities.position_encoding = chosen_encoding(params.capabilities)
        result.capabilities.experimental = {protocol.INLINE_EDIT_CAPABILITY: True}
        return result

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        yield from self._user_handler(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        yield from self._user_handler(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        yield from self._user_handler(types.TEXT_DOCUMENT_DID_CLOSE, params)


class ResyncingInput:
    """stdin for pygls's reader, which finds a header only at the start of a line: after
    a message whose Content-Length was too short, the rest of its body sits before the
    next header on one line, and every later message would be lost. This hands pygls
    the line from the header on."""

    HEADER = b"Content-Length:"

    def __init__(self, stream):
        self.stream = stream

    def readline(self) -> bytes:
        line = self.stream.readline()
        start = line.find(self.HEADER)
        if start > 0:
            log.warning("dropped %d bytes before a header: a wrong Content-Length before", start)
            return line[start:]
        return line

    def read(self, n: int) -> bytes:
        return self.stream.read(n)


@dataclass
class Suggestions:
    """Items shown and accepted: how often the user takes what is offered."""

    shown: int = 0
    accepted: int = 0
    rejected: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.shown if self.shown else 0.0


class CompleterServer(LanguageServer):
    def __init__(self):
        super().__init__(protocol.SERVER_NAME, version("completer"), protocol_cls=CompleterProtocol)
        self.config = Config()
        self.encoding = "utf-16"
        self.several_edits = False  # the client applies every edit of a next edit's answer (protocol.CLIENT_OPTIONS)
        self.roots: list[Path] = []
        self.documents: dict[str, Document] = {}
        self.completer: Completer | None = None  # once the models are loaded
        self.model_names = ("", "")
        self.load_error: str | None = None
        self.warning_shown = ""  # the completer's warning the user was last told (a dropped draft, a server down)
        self.suggestions = Suggestions()
        self.edits = Suggestions()  # next edits
        self.edit_acceptances = EditAcceptances()  # which next edits were taken, by their command or by a change
        self.cursors: dict[str, types.Position] = {}  # open document -> the position of its last request
        self.acceptances = Acceptances()  # what of the suggestions was taken, and kept
        self.item_ids = itertools.count(1)
        # Inference runs here, off the event loop, one generation at a time (the local
        # decoder's turn); more workers let a superseded request return at once.
        self.workers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="completer")
        self.loop: asyncio.AbstractEventLoop | None = None  # pygls's, known from `initialize` on
        self.loads = 0  # model loads started: a load finishing after a newer one started is dropped
        self.downloads = Downloads()  # which presets named in the editor's settings may download
        # The last completer/warm that came while the models loaded (the file the editor
        # opened first, which started the server): it runs once they are ready.
        self.pending_warm: tuple[str, types.Position] | None = None
        # What a next edit for a document waits for (completions_done): the completion
        # requests being answered and the prefetches started (lsp.prefetch), by document.
        self.completing: dict[asyncio.Future, str] = {}
        self.prefetches: dict[asyncio.Future, str] = {}

    def report_server_error(self, error: Exception, source: Any) -> None:
        """A body pygls could not parse (not JSON, not UTF-8): answer with a parse error, as
        JSON-RPC says, instead of pygls's pop-up; anything else: pygls's way."""
        if isinstance(error, (json.JSONDecodeError, UnicodeDecodeError)):
            log.warning("a message that is not JSON: %s", error)
            self.protocol.reject(None, JsonRpcParseError(f"not JSON: {error}"))
            return
        super().report_server_error(error, source)

    # From worker threads, anything sent to the client goes through the event loop.
    def from_thread(self, function, *args) -> None:
        self.loop.call_soon_threadsafe(function, *args)

    def tell(self, kind: types.MessageType, message: str, show: bool = False) -> None:
        """Log to stderr and window/logMessage; with `show`, window/showMessage too."""
        log.log(logging.ERROR if kind == types.MessageType.Error else logging.INFO, message)
        self.window_log_message(types.LogMessageParams(kind, message))
        if show:
            self.window_show_message(types.ShowMessageParams(kind, f"completer: {message}"))

    def remember_cursor(self, uri: str, position: types.Position) -> None:
        """Where a request in an open document was made, for DID_FOCUS (did_close forgets it)."""
        if uri in self.documents:
            self.cursors[uri] = position

    def in_worker(self, function, *args) -> asyncio.Future:
        return self.loop.run_in_executor(self.workers, function, *args)

    async def completions_done(self, uri: str) -> None:
        """Until no completion for the document is being answered and no prefetch for it
        runs. A next edit waits for them: the engine serves one request at a time, and the
        editors ask for a next edit once typing pauses, while the completion for the last
        key is still on its way; a next edit taking the engine first would hold back that
        completion's prefetch, and so the completion shown after Tab."""
        while busy := [task for task, document in (*self.completing.items(), *self.prefetches.items())
                       if document == uri]:
            await asyncio.wait(busy)

    def offer(self, answer: Answer) -> list[int]:
        """New items' ids, one per candidate of `answer`, remembered for what the editor says of them."""
        items = []
        for text in answer.texts:
            items.append(next(self.item_ids))
            self.acceptances.offer(items[-1], answer.document.uri, answer.cursor, text)
        return items

    def check_later(self, accepted: Accepted | None) -> None:
        """Check at each of RETENTION_CHECKS_S how much of `accepted` is still there (None:
        nothing new was taken)."""
        if accepted is None:
            return
        for which, delay in enumerate(RETENTION_CHECKS_S):
            self.loop.call_later(delay, self.check_retention, accepted, which)

    def check_retention(self, accepted: Accepted, which: int) -> None:
        document = self.documents.get(accepted.uri)
        self.acceptances.check(accepted, which, document.text if document is not None else None)

    def accepts_progress(self) -> bool:
        """Whether the client accepts progress tokens the server makes."""
        window = self.client_capabilities.window if self.client_capabilities else None
        return bool(window and window.work_done_progress)

    def stats(self) -> dict[str, Any]:
        values = {
            "ready": self.completer is not None,
            "error": self.load_error or "",
            "decoder": self.config.models.decoder,
            "target": self.model_names[0],
            "draft": self.model_names[1],
            "suggestions_shown": self.suggestions.shown,
            "suggestions_accepted": self.suggestions.accepted,
            "suggestion_acceptance_rate": self.suggestions.acceptance_rate,
            "suggestions_seen": self.acceptances.seen,
            "suggestions_partially_accepted": self.acceptances.partially_accepted,
            "accepted_chars": self.acceptances.accepted_chars,
            **{f"{what}_chars_{seconds:.0f}s": getattr(retention, what)
               for seconds, retention in zip(RETENTION_CHECKS_S, self.acceptances.retention)
               for what in ("checked", "retained")},
            "edits_shown": self.edits.shown,
            "edits_accepted": self.edits.accepted,
            "edits_rejected": self.edits.rejected,
            **asdict(self.completer.stats() if self.completer else CompleterStats()),
        }
        assert set(values) == set(protocol.STATS_KEYS)
        return {key: values[key] for key in protocol.STATS_KEYS}


def keep_large_buffers_off_the_heap() -> None:
    """glibc raises its mmap threshold each time a large mmapped block is freed, so later
    KV snapshots (tens of MB each, saved and restored on every document switch) come
    from the heap, which keeps what is freed: a server switching documents all day only
    grows. A fixed 1 MB threshold keeps such blocks mmapped, given back when freed.
    Without glibc there is nothing to do."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_mmap_threshold = -3  # mallopt's M_MMAP_THRESHOLD
    libc.mallopt(m_mmap_threshold, 1 << 20)


server = CompleterServer()


def without_machine_options(data: Any, config: Config) -> tuple[Any, list[str]]:
    """`data` (options as config_from_dict takes them) less its machine-level options, and
    the names of those that would have changed `config`. Over LSP an option may come from
    a workspace's settings, and those must not choose where code and keys go or which
    model files load: the server takes these from its flags only (see config.option)."""
    if not isinstance(data, dict):
        return data, []
    kept = {group: dict(values) if isinstance(values, dict) else values for group, values in data.items()}
    refused = []
    for name in machine_options():
        group, key = name.split(".")
        values = kept.get(group)
        # The value the flags gave, sent back (an editor sending every setting), changes nothing.
        if isinstance(values, dict) and key in values and values.pop(key) != getattr(getattr(config, group), key):
            refused.append(name)
    return kept, refused


def refused_message(name: str) -> str:
    return (f"{name} from the editor's settings is refused: a workspace's settings may not choose where code "
            f"and keys go or which model files load. Set it where only you can: `completer serve --stdio "
            f"{machine_options()[name]} ...` (Neovim: the cmd of setup(); VS Code: your user settings)")


def chosen_encoding(capabilities: types.ClientCapabilities) -> str:
    """The position encoding: UTF-16 where the client offers it (or offers none, UTF-16
    being the protocol's default), else pygls's choice, the first offered that it knows.
    Clients written for Copilot's language server count in UTF-16 whatever is negotiated,
    and completer's own plugins count in what is, so UTF-16 serves both (Neovim offers
    UTF-8 first)."""
    offered = capabilities.general.position_encodings if capabilities.general else None
    if not offered or types.PositionEncodingKind.Utf16 in offered:
        return types.PositionEncodingKind.Utf16.value
    encoding = ServerCapabilitiesBuilder.choose_position_encoding(capabilities)
    return str(getattr(encoding, "value", encoding))


def options_of(data: Any) -> Any:
    """Options as config_from_dict takes them, from initializationOptions or settings: less
    what the client says of itself (protocol.CLIENT_OPTIONS, read at `initialize`) and
    what Copilot's clients send for Copilot's server (protocol.COPILOT_OPTION_GROUPS)."""
    if not isinstance(data, dict):
        return data
    return {group: values for group, values in data.items()
            if group not in (protocol.CLIENT_OPTIONS, *protocol.COPILOT_OPTION_GROUPS)}


def takes_several_edits(ls: CompleterServer, data: Any) -> bool:
    """Whether initializationOptions `data` say the client applies every edit of a next
    edit's answer (protocol.SEVERAL_EDITS_OPTION); a value not true or false is a warning."""
    client = data.get(protocol.CLIENT_OPTIONS) if isinstance(data, dict) else None
    several = client.get(protocol.SEVERAL_EDITS_OPTION, False) if isinstance(client, dict) else False
    if not isinstance(several, bool):
        ls.tell(types.MessageType.Warning, f"{protocol.CLIENT_OPTIONS}.{protocol.SEVERAL_EDITS_OPTION} must be "
                f"true or false, not {json.dumps(several)[:80]}: next edits come as one edit each", show=True)
        return False
    return several


def apply_options(ls: CompleterServer, data: Any) -> bool:
    """Options on top of the current ones, the machine-level ones refused with a warning;
    True when the models must be reloaded."""
    data, refused = without_machine_options(options_of(data), ls.config)
    for name in refused:
        ls.tell(types.MessageType.Warning, refused_message(name), show=True)
    config, problems = config_from_dict(data, ls.config)
    for problem in problems:
        ls.tell(types.MessageType.Warning, problem, show=True)
    config = without_unallowed_download(ls, config)
    reload = needs_reload(ls.config, config)
    ls.config = config
    if ls.completer is not None and not reload:
        ls.completer.configure(config)
    return reload


def without_unallowed_download(ls: CompleterServer, config: Config) -> Config:
    """`config`, its preset kept at the current one where the new one would download files
    the user has not allowed (Downloads); the user is asked once per preset."""
    config, files = ls.downloads.held_back(config, ls.config)
    if not files:
        return config
    preset = ls.downloads.wanted
    if preset in ls.downloads.asked:
        ls.tell(types.MessageType.Info, f"models.preset {preset} waits for your word to download: keeping "
                f"{config.models.preset}")
    else:
        ls.downloads.asked.add(preset)
        asyncio.ensure_future(ask_to_download(ls, preset, files, config.models.preset))
    return config


async def ask_to_download(ls: CompleterServer, preset: str, files: list[HubFile], keeping: str) -> None:
    """Ask the user (window/showMessageRequest) whether `preset` may download `files`; on
    Download, load it if the editor's settings still name it."""
    question = download_question(Preset.from_name(preset), files, keeping)
    log.info(question)
    try:
        answer = await ls.window_show_message_request_async(types.ShowMessageRequestParams(
            types.MessageType.Warning, question, [types.MessageActionItem(DOWNLOAD)]))
    except JsonRpcException as error:  # a client without the request: the log keeps the question
        log.warning("the question to download %s was not answered: %s", preset, error)
        return
    if answer is None or answer.title != DOWNLOAD:
        return
    ls.downloads.allowed.add(preset)
    if ls.downloads.wanted == preset and apply_options(ls, {"models": {"preset": preset}}):
        ls.tell(types.MessageType.Info, f"downloading {preset}, as you said")
        start_loading(ls)


@server.feature(types.INITIALIZE)
def initialize(ls: CompleterServer, params: types.InitializeParams) -> None:
    ls.loop = asyncio.get_running_loop()
    ls.encoding = chosen_encoding(params.capabilities)  # what CompleterProtocol.lsp_initialize announces
    folders = [folder.uri for folder in params.workspace_folders or []]
    if not folders and params.root_uri:
        folders = [params.root_uri]
    ls.roots = [Path(path) for uri in folders if uri and (path := to_fs_path(uri))]
    ls.downloads.allowed.add(ls.config.models.preset)  # the flags': the user's own machine chose it
    ls.several_edits = takes_several_edits(ls, params.initialization_options)
    apply_options(ls, params.initialization_options)


@server.feature(types.INITIALIZED)
def initialized(ls: CompleterServer, params: types.InitializedParams) -> None:
    start_loading(ls)


def start_loading(ls: CompleterServer) -> None:
    """Load the models in a thread; serve empty answers meanwhile. The completer being
    replaced stops its index build, which holds its model."""
    if ls.completer is not None:
        ls.completer.stop_indexing()
    ls.completer, ls.load_error = None, None
    ls.loads += 1
    load, config = ls.loads, ls.config
    progress = LoadProgress(ls.work_done_progress if ls.accepts_progress() else None, ls.from_thread, load)

    def run() -> None:
        loaded, error = load_models(config, ls.roots, progress)
        ls.from_thread(finish_loading, ls, load, loaded, error, progress)

    threading.Thread(target=run, name="completer-load", daemon=True).start()


def finish_loading(ls: CompleterServer, load: int, loaded: Loaded | None, error: str, progress: LoadProgress) -> None:
    """Serve what loaded, or say once what is wrong and keep serving empty answers; a
    load that a newer one superseded is dropped."""
    if load != ls.loads:
        return
    if loaded is None:
        ls.load_error = error
        progress.end("failed")
        ls.tell(types.MessageType.Error, error, show=True)
        return
    # An RPC server off the machine; out of GPU memory: fewer layers there; a server down.
    for warning in loaded.warnings:
        ls.tell(types.MessageType.Warning, warning, True)
    for note in loaded.notes:  # the log only: a chosen model that serves, less well than another would
        ls.tell(types.MessageType.Info, note)
    ls.completer, ls.model_names = loaded.completer, loaded.names
    ls.completer.index_workspace()
    ls.warning_shown = loaded.server_warning
    progress.end("ready")
    ls.tell(types.MessageType.Info, loaded.ready_message())
    if ls.pending_warm is not None:
        uri, position = ls.pending_warm
        ls.pending_warm = None
        asyncio.ensure_future(warm_at(ls, uri, position))


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
def did_change_configuration(ls: CompleterServer, params: types.DidChangeConfigurationParams) -> None:
    settings = params.settings
    if isinstance(settings, dict) and protocol.SETTINGS_SECTION in settings:
        settings = settings[protocol.SETTINGS_SECTION]
    if apply_options(ls, settings):
        ls.tell(types.MessageType.Info, "model options changed: loading the models again")
        start_loading(ls)


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: CompleterServer, params: types.DidOpenTextDocumentParams) -> None:
    item = params.text_document
    ls.documents[item.uri] = Document(item.uri, item.text, item.version, item.language_id)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: CompleterServer, params: types.DidChangeTextDocumentParams) -> None:
    document = ls.documents.get(params.text_document.uri)
    if document is None:
        ls.tell(types.MessageType.Warning, f"didChange for {params.text_document.uri}, which is not open: ignored")
        return
    for change in params.content_changes:
        replaced = document.apply(change, ls.encoding)
        if replaced is not None:
            ls.acceptances.changed(document.uri, *replaced, len(as_lf(change.text)))
    document.version = params.text_document.version
    if ls.edit_acceptances.changed(document.uri, document.text):
        ls.edits.accepted += 1
    if ls.completer is not None:
        ls.completer.document_changed(document.uri, document.text)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
async def did_save(ls: CompleterServer, params: types.DidSaveTextDocumentParams) -> None:
    document = ls.documents.get(params.text_document.uri)
    if ls.completer is not None and document is not None:
        await ls.in_worker(ls.completer.file_saved, to_fs_path(document.uri) or document.uri, document.text)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: CompleterServer, params: types.DidCloseTextDocumentParams) -> None:
    """Not a coroutine, and nothing in it waits for the engine, so the document is closed
    before the next message is handled (a reopen right after is a new opening): every
    request made in it stops, also one that starts later, and its caches go before the
    engine serves anyone again."""
    uri = params.text_document.uri
    document = ls.documents.pop(uri, None)
    ls.cursors.pop(uri, None)
    if document is not None:
        document.closed.set()
    if ls.completer is not None:
        ls.completer.close(uri)


async def answer_at(ls: CompleterServer, uri: str, position: types.Position) -> Answer | None:
    """The completion to show at `position`, or None: models not ready, superseded by a
    newer request, cancelled, nothing worth showing, or the document changed meanwhile."""
    document = ls.documents.get(uri)
    request = request_at(document, uri, position, ls.encoding)
    ls.remember_cursor(uri, position)
    if ls.completer is None:
        return None
    version = document.version
    answering = asyncio.current_task()
    ls.completing[answering] = uri
    try:
        completion = await complete(ls.completer, request, ls.completer.debounce_ms(), ls.in_worker)
    finally:
        del ls.completing[answering]
    if completion is None:
        return None
    if completion.prompt:  # decoded, not the rest of the one shown
        document.last_prompt = (completion.prompt, completion.context)
    if completion.warning != ls.warning_shown:  # once each: the stats keep saying it
        if completion.warning:
            ls.tell(types.MessageType.Warning, completion.warning, show=True)
        else:
            ls.tell(types.MessageType.Info, f"the server answers again (before: {ls.warning_shown})")
        ls.warning_shown = completion.warning
    # Where the cursor is, a character past its line's end being its end (request_at).
    answer = answer_for(document, version, request, document.position_at(request.cursor, ls.encoding), completion)
    if answer is not None:
        ls.suggestions.shown += 1
    return answer


@server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
async def inline_completion(ls: CompleterServer, params: types.InlineCompletionParams
                            ) -> types.InlineCompletionList | None:
    answer = await answer_at(ls, params.text_document.uri, params.position)
    if answer is None:
        return None
    prefetching = asyncio.ensure_future(prefetch_after(ls, answer))  # kept: the loop holds tasks weakly
    ls.prefetches[prefetching] = answer.document.uri
    prefetching.add_done_callback(ls.prefetches.pop)
    return inline_items(answer, ls.encoding, ls.offer(answer))


async def prefetch_after(ls: CompleterServer, answer: Answer) -> None:
    """While `answer` is shown, the completion that follows its acceptance (lsp.prefetch)."""
    accepted = after_acceptance(answer)
    if ls.completer is None or accepted is None or not ls.config.lsp.prefetch:
        return
    try:
        await ls.in_worker(ls.completer.prefetch, accepted, answer.cursor)
    except Exception:  # nothing waits on it: the request it was for decodes as it would have
        log.exception("computing the completion after the one shown in %s", answer.document.uri)


@server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=[".", "(", " "]))
async def completion(ls: CompleterServer, params: types.CompletionParams) -> types.CompletionList | None:
    answer = await answer_at(ls, params.text_document.uri, params.position)
    return completion_items(answer, ls.offer(answer)) if answer else None


@server.feature(protocol.INLINE_EDIT)
async def inline_edit(ls: CompleterServer, params: Any) -> dict[str, list]:
    uri, version, position = inline_edit_params(params)
    document = ls.documents.get(uri)
    request = request_at(document, uri, position, ls.encoding)
    ls.remember_cursor(uri, position)
    if ls.completer is None or version not in (None, document.version):
        return {"edits": []}
    version = document.version
    await ls.completions_done(uri)
    # Typed meanwhile: the request is for text that is gone; or the models are reloading.
    if document.version != version or ls.completer is None:
        return {"edits": []}
    edit = await next_edit(ls.completer, request, ls.in_worker)
    if len(edit.edits) > 1 and not ls.several_edits:
        edit = replace(edit, edits=[spanning_edit(request.text, edit.edits)])
    suggestion = next(ls.item_ids)
    answer = edit_items(document, version, request, edit, ls.encoding, suggestion)
    if answer["edits"]:
        ls.edit_acceptances.offer(suggestion, uri, apply_edits(request.text, edit.edits))
    return answer


@server.feature(protocol.DID_SHOW_INLINE_EDIT)
def did_show_inline_edit(ls: CompleterServer, params: Any) -> None:
    ls.edits.shown += 1
    suggestion = item_id(params)
    if suggestion is not None:
        ls.edit_acceptances.shown(suggestion)


@server.command(protocol.ACCEPT_EDIT_COMMAND)
def accept_edit(ls: CompleterServer, *arguments: Any) -> None:
    suggestion = arguments[0] if arguments and type(arguments[0]) is int else None  # [suggestion id, version]
    if ls.edit_acceptances.take(suggestion):
        ls.edits.accepted += 1


@server.command(protocol.REJECT_EDIT_COMMAND)
def reject_edit(ls: CompleterServer, *arguments: Any) -> None:
    ls.edits.rejected += 1


@server.feature(protocol.WARM)
async def warm(ls: CompleterServer, params: Any) -> None:
    found = document_position(params)
    if found is None:
        log.warning("%s takes {\"textDocument\": {\"uri\"}, \"position\": {\"line\", \"character\"}}, not %r",
                    protocol.WARM, params)
        return
    uri, _, position = found
    if uri in ls.documents:
        ls.remember_cursor(uri, position)
    await warm_at(ls, uri, position)


@server.feature(protocol.DID_FOCUS)
async def did_focus(ls: CompleterServer, params: Any) -> None:
    """The user switched to the document: warm it where its last request was, or at its end."""
    uri = getattr(getattr(params, "textDocument", None), "uri", None)
    document = ls.documents.get(uri) if isinstance(uri, str) else None
    if document is None:
        log.warning("%s takes {\"textDocument\": {\"uri\": <an open document>}}, not %r", protocol.DID_FOCUS, params)
        return
    cursor = ls.cursors.get(uri)
    # Lines deleted since may have left the position past the end: there, the end.
    offset = document.offset_at(cursor, ls.encoding) if cursor is not None else len(document.text)
    await warm_at(ls, uri, document.position_at(offset, ls.encoding))


async def warm_at(ls: CompleterServer, uri: str, position: types.Position) -> None:
    """Evaluate the prompt at `position` ahead of a request; while the models load, once
    they are ready."""
    if ls.completer is None:
        ls.pending_warm = (uri, position) if ls.load_error is None else None
        return
    try:
        request = request_at(ls.documents.get(uri), uri, position, ls.encoding)
    except JsonRpcInvalidParams as error:  # a notification has no answer to carry it
        log.warning("%s: %s", protocol.WARM, error.message)
        return
    # Taken here, where the editor's messages are read in order: a close read after it stops it.
    with ls.completer.request(request.document, WARM) as cancel:
        await ls.in_worker(ls.completer.warm, request, cancel)


@server.command(protocol.ACCEPT_COMMAND)
def accept(ls: CompleterServer, *arguments: Any) -> None:
    ls.suggestions.accepted += 1
    if arguments and isinstance(arguments[0], int):
        ls.check_later(ls.acceptances.take(arguments[0]))


@server.feature(protocol.DID_SHOW_COMPLETION)
def did_show_completion(ls: CompleterServer, params: Any) -> None:
    item = item_id(params)
    if item is not None:
        ls.acceptances.shown(item)


@server.feature(protocol.DID_PARTIALLY_ACCEPT_COMPLETION)
def did_partially_accept_completion(ls: CompleterServer, params: Any) -> None:
    item, length = item_id(params), getattr(params, "acceptedLength", None)
    offered = ls.acceptances.offered.get(item) if item is not None else None
    if offered is None or not isinstance(length, int) or isinstance(length, bool) or length < 1:
        log.warning("%s takes {\"item\": <an item this server returned>, \"acceptedLength\": n >= 1}, not %r",
                    protocol.DID_PARTIALLY_ACCEPT_COMPLETION, params)
        return
    ls.check_later(ls.acceptances.take(item, characters(offered.text, length, ls.encoding)))


def item_id(params: Any) -> int | None:
    """The id of the item a DID_SHOW_COMPLETION or DID_PARTIALLY_ACCEPT_COMPLETION is about:
    the first argument of its command."""
    arguments = getattr(getattr(getattr(params, "item", None), "command", None), "arguments", None)
    first = arguments[0] if isinstance(arguments, (list, tuple)) and arguments else None
    return first if isinstance(first, int) and not isinstance(first, bool) else None


@server.feature(protocol.STATS)
def stats(ls: CompleterServer, params: Any) -> dict[str, Any]:
    return ls.stats()


@server.feature(protocol.PROMPT)
async def prompt(ls: CompleterServer, params: Any) -> dict[str, Any] | None:
    uri = getattr(params, "uri", None)
    if not isinstance(uri, str):
        raise JsonRpcInvalidParams(f"{protocol.PROMPT} takes {{\"uri\": string}}")
    found = ls.documents.get(uri)
    if found is None or found.last_prompt is None or ls.completer is None:
        return None
    tokens, context = found.last_prompt
    try:
        text = await ls.in_worker(ls.completer.prompt_text, tokens)
    except Unavailable:  # a server decoder's server is down: its tokens cannot be spelt out now
        return None
    return {"prompt": text, "sections": [{"path": file.path, "why": file.why} for file in context]}


@server.feature(protocol.DOCUMENT)
def document(ls: CompleterServer, params: Any) -> dict[str, Any] | None:
    uri = getattr(params, "uri", None)
    if not isinstance(uri, str):
        raise JsonRpcInvalidParams(f"{protocol.DOCUMENT} takes {{\"uri\": string}}")
    found = ls.documents.get(uri)
    return {"text": found.editor_text, "version": found.version} if found else None
