"""Where model files live: the user's cache directory, never the repository."""

import os
from collections.abc import Mapping
from pathlib import Path

CACHE_ENV = "COMPLETER_CACHE_DIR"
HUB_FOLDER = "hub"
LLAMA_BUILDS_FOLDER = "llama.cpp"  # models/llama_build.py builds llama.cpp there


def cache_dir(environ: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """$COMPLETER_CACHE_DIR, else $XDG_CACHE_HOME/completer, else ~/.cache/completer.

    `environ` and `home` default to this process's; models/stores.py passes its own, so
    that what a scan finds depends only on what it is given."""
    environ = os.environ if environ is None else environ
    explicit = environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else (home or Path.home()) / ".cache"
    return base / "completer"


def hub_cache_dir(environ: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """huggingface-hub's own cache layout, kept inside ours so one folder holds every model."""
    return cache_dir(environ, home) / HUB_FOLDER


def derived_cache_dir() -> Path:
    """Files the project makes from other files: requantized targets, derived drafts."""
    return cache_dir() / "derived"


def distilled_draft_path(target: Path) -> Path:
    """Where `completer distill` puts the draft it trained for `target`; `--draft
    distilled` (models.draft = "distilled") loads it."""
    return cache_dir() / "distilled" / f"{target.stem}.draft.gguf"
