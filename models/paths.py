"""Where model files live: the user's cache directory, never the repository."""

import os
from pathlib import Path

CACHE_ENV = "COMPLETER_CACHE_DIR"


def cache_dir() -> Path:
    """$COMPLETER_CACHE_DIR, else $XDG_CACHE_HOME/completer, else ~/.cache/completer."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "completer"


def hub_cache_dir() -> Path:
    """huggingface-hub's own cache layout, kept inside ours so one folder holds every model."""
    return cache_dir() / "hub"


def derived_cache_dir() -> Path:
    """Files the project makes from other files: requantized targets, derived drafts."""
    return cache_dir() / "derived"


def distilled_draft_path(target: Path) -> Path:
    """Where `completer distill` puts the draft it trained for `target`; `--draft
    distilled` (models.draft = "distilled") loads it."""
    return cache_dir() / "distilled" / f"{target.stem}.draft.gguf"
