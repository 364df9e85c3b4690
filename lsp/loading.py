"""Loading the models in a thread after `initialized`, reported with $/progress."""

import logging
from typing import TYPE_CHECKING

from lsprotocol import types

from completer.config import Config
from completer.loading import ModelError, load_completer

if TYPE_CHECKING:
    from completer.lsp.server import CompleterServer

log = logging.getLogger("completer.lsp")


class LoadProgress:
    """$/progress for one load, when the client accepts server-made progress tokens."""

    def __init__(self, ls: "CompleterServer", load: int):
        self.ls = ls
        self.token = f"completer-load-{load}"
        window = ls.client_capabilities.window if ls.client_capabilities else None
        self.enabled = bool(window and window.work_done_progress)
        if self.enabled:
            ls.from_thread(ls.work_done_progress.create, self.token)
            ls.from_thread(ls.work_done_progress.begin, self.token,
                           types.WorkDoneProgressBegin(title="completer: loading models", percentage=0))

    def report(self, message: str, percentage: int) -> None:
        log.info(message)
        if self.enabled:
            self.ls.from_thread(self.ls.work_done_progress.report, self.token,
                                types.WorkDoneProgressReport(message=message, percentage=percentage))

    def end(self, message: str) -> None:
        if self.enabled:
            self.ls.from_thread(self.ls.work_done_progress.end, self.token, types.WorkDoneProgressEnd(message=message))


def load_models(ls: "CompleterServer", config: Config, load: int) -> None:
    """Load the completer (downloading the files if needed), then serve; on failure, say
    once what is wrong and what to run, and keep serving empty answers."""
    progress = LoadProgress(ls, load)
    try:
        loaded = load_completer(config, ls.roots, report=progress.report)
    except ModelError as error:
        failed(ls, load, progress, str(error))
        return
    except Exception as error:  # a bug or a llama.cpp failure: still one message, and keep serving
        log.exception("loading the models failed")
        failed(ls, load, progress, f"could not load the models: {error}")
        return
    for fallback in loaded.pair.gpu_fallbacks:  # out of GPU memory: fewer layers there, and the user told why
        ls.from_thread(ls.tell, types.MessageType.Warning, fallback, True)
    ls.from_thread(ready, ls, load, loaded.completer, loaded.pair.names, progress)


def ready(ls: "CompleterServer", load: int, completer, names: tuple[str, str], progress: LoadProgress) -> None:
    if load != ls.loads:
        return
    ls.completer, ls.model_names = completer, names
    ls.draft_failure_shown = False
    progress.end("ready")
    ls.tell(types.MessageType.Info, f"ready: target {names[0]}" + (f", draft {names[1]}" if names[1] else ""))


def failed(ls: "CompleterServer", load: int, progress: LoadProgress, message: str) -> None:
    def report() -> None:
        if load != ls.loads:
            return
        ls.load_error = message
        progress.end("failed")
        ls.tell(types.MessageType.Error, message, show=True)

    ls.from_thread(report)
