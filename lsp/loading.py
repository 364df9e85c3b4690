"""Loading the models in a thread after `initialized`, reported with $/progress: values
in, values out; the server keeps what loaded. A preset the editor's settings name loads
only once its files are here or the user allowed their download (Downloads)."""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from lsprotocol import types
from pygls.progress import Progress

from completer.config import Config
from completer.loading import Loaded, ModelError, hub_downloads, load_completer
from completer.models.presets import HubFile, Preset

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


# The action of the question asked before a preset named in the editor's settings downloads.
DOWNLOAD = "Download"


@dataclass
class Downloads:
    """Which presets named in the editor's settings may download. Those settings may be a
    workspace's (VS Code merges .vscode/settings.json in, Neovim may run a project-local
    config), and a preset can be tens of GB: the server's own preset (its flags') may, and
    each other one once the user said Download to the question asked about it, once."""

    allowed: set[str] = field(default_factory=set)
    asked: set[str] = field(default_factory=set)
    wanted: str = ""  # the preset the editor's settings named last

    def held_back(self, config: Config, current: Config) -> tuple[Config, list[HubFile]]:
        """`config` with its preset back at `current`'s where loading it would download files
        the user has not allowed, and those files ([]: nothing held back)."""
        preset = self.wanted = config.models.preset
        if preset == current.models.preset or preset in self.allowed:
            return config, []
        files = hub_downloads(config.models, config.generation.speculates)
        if not files:
            return config, []
        return replace(config, models=replace(config.models, preset=current.models.preset)), files


def download_question(preset: Preset, files: list[HubFile], keeping: str) -> str:
    """What the user is asked before `preset`, named in the editor's settings, downloads `files`."""
    sizes = [file.size for file in files]
    size = f"{sum(sizes) / 1e9:.1f} GB" if None not in sizes else "size not recorded"
    return (f"completer: models.preset {preset.name} from the editor's settings is not on this machine: loading it "
            f"downloads {' and '.join(file.describe() for file in files)} ({size}; {preset.why}). A workspace's "
            f"settings may name it, so it waits for your word: keeping {keeping}. {DOWNLOAD} it now, or run "
            f"`completer models pull {preset.name}` (it then loads when the server starts again).")
