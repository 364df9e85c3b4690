"""Loading the models in a thread after `initialized`, reported with $/progress."""

import logging
from typing import TYPE_CHECKING

from lsprotocol import types

from completer.config import Config
from models.errors import ModelError

if TYPE_CHECKING:
    from lsp.server import CompleterServer

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
    """Resolve (download or derive) and load the pair, then serve; on failure, say once
    what is wrong and what to run, and keep serving empty answers."""
    from completer.context import Workspace
    from completer.engine import Engine
    from completer.session import Completer
    from models.backend import LlamaModel
    from models.presets import Preset
    from models.resolve import resolve

    options = config.models
    speculative = config.generation.speculates
    progress = LoadProgress(ls, load)
    try:
        progress.report(f"finding the {options.preset} files (downloading them if needed)", 5)
        files = resolve(Preset.from_name(options.preset), options.target, options.draft, with_draft=speculative)
        progress.report(f"loading {files.target.name}", 40)
        target = LlamaModel(files.target, options.target_gpu_layers)
        draft = None
        if files.draft is not None:
            progress.report(f"loading {files.draft.name}", 60)
            draft = LlamaModel(files.draft, options.draft_gpu_layers)
        progress.report("measuring the cost of a verify pass", 75)
        engine = Engine(target, draft, n_ctx=options.context_tokens, threads=options.threads,
                        calibrate_s=1.0 if speculative else 0.0)
        completer = Completer(engine, config, Workspace(ls.roots))
    except ModelError as error:
        failed(ls, load, progress, str(error))
        return
    except Exception as error:  # a bug or a llama.cpp failure: still one message, and keep serving
        log.exception("loading the models failed")
        failed(ls, load, progress, f"could not load the models: {error}")
        return
    for model in filter(None, (target, draft)):
        if model.gpu_fallback:  # out of GPU memory: fewer layers there, and the user told why it is slower
            ls.from_thread(ls.tell, types.MessageType.Warning, model.gpu_fallback, True)
    names = (files.target.name, files.draft.name if files.draft else "")
    ls.from_thread(ready, ls, load, completer, names, progress)


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
