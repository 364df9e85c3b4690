"""Loading the models in a thread after `initialized`, reported with $/progress: values
in, values out; the server keeps what loaded."""

import logging
from collections.abc import Callable
from pathlib import Path

from lsprotocol import types
from pygls.progress import Progress

from completer.config import Config
from completer.loading import Loaded, ModelError, load_completer

log = logging.getLogger("completer.lsp")


class LoadProgress:
    """$/progress for one load; with `progress` None (a client that does not accept
    server-made progress tokens), the log only. `from_thread` hands each message to the
    event loop."""

    def __init__(self, progress: Progress | None, from_thread: Callable[..., None], load: int):
        self.progress, self.from_thread = progress, from_thread
        self.token = f"completer-load-{load}"
        if progress is not None:
            from_thread(progress.create, self.token)
            from_thread(progress.begin, self.token,
                        types.WorkDoneProgressBegin(title="completer: loading models", percentage=0))

    def report(self, message: str, percentage: int) -> None:
        log.info(message)
        if self.progress is not None:
            self.from_thread(self.progress.report, self.token,
                             types.WorkDoneProgressReport(message=message, percentage=percentage))

    def end(self, message: str) -> None:
        if self.progress is not None:
            self.from_thread(self.progress.end, self.token, types.WorkDoneProgressEnd(message=message))


def load_models(config: Config, roots: list[Path], progress: LoadProgress) -> tuple[Loaded | None, str]:
    """(the completer, downloading the files if needed, and "") or (None, one message
    saying what is wrong and what to run)."""
    try:
        return load_completer(config, roots, report=progress.report), ""
    except ModelError as error:
        return None, str(error)
    except Exception as error:  # a bug or a llama.cpp failure: still one message, and keep serving
        log.exception("loading the models failed")
        return None, f"could not load the models: {error}"
