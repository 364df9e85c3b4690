"""Downloads from the Hugging Face Hub (or the mirror in $HF_ENDPOINT) into our cache."""

import hashlib
import os
import warnings
from pathlib import Path
from urllib.parse import quote

from huggingface_hub import hf_hub_download, try_to_load_from_cache
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled
from rich.console import Console
from tqdm import TqdmExperimentalWarning
from tqdm.rich import tqdm as RichTqdm

from completer.models.errors import ModelError
from completer.models.paths import cache_dir, hub_cache_dir
from completer.models.presets import HubFile


class _RichProgress(RichTqdm):
    """huggingface-hub drives a tqdm-style bar; tqdm.rich draws it with rich, like the
    rest of our output, on stderr: stdout carries only results (and, in `serve`, LSP)."""

    def __init__(self, *args, **kwargs):
        kwargs["options"] = {"console": Console(stderr=True)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TqdmExperimentalWarning)
            super().__init__(*args, **kwargs)


# Marks of downloads whose files are not yet checked against their presets' records.
UNVERIFIED_FOLDER = "unverified"


def _unverified_mark(file: HubFile) -> Path:
    """The mark a download of `file` leaves until its file is checked: made before the
    download starts and removed once the check passes. huggingface-hub puts the whole file
    under its name before the check (seconds of hashing for a large model), so a check cut
    short by Ctrl-C or a kill, or another process finding the file meanwhile, meets the mark
    and does not trust the file. One flat name per repository, revision and file."""
    return cache_dir() / UNVERIFIED_FOLDER / quote(f"{file.repo}/{file.revision}/{file.filename}", safe="")


def cached_hub_file(file: HubFile) -> Path | None:
    """The file's path in the cache, without touching the network; None when absent or not
    yet checked (download_hub_file checks it again)."""
    if _unverified_mark(file).exists():
        return None
    found = try_to_load_from_cache(file.repo, file.filename, cache_dir=hub_cache_dir(), revision=file.revision)
    return Path(found) if isinstance(found, str) else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _mismatch(file: HubFile, path: Path) -> str | None:
    """How the downloaded file differs from what its preset records; None when it agrees
    (or records nothing)."""
    size = path.stat().st_size
    if file.size is not None and size != file.size:
        return f"is {size} bytes, not the {file.size} recorded for it"
    # Only after the size, which costs a stat where the hash reads gigabytes.
    if file.sha256 is not None and (digest := _sha256(path)) != file.sha256:
        return f"has sha256 {digest}, not the {file.sha256} recorded for it"
    return None


def _remove_from_cache(pointer: Path) -> None:
    """Remove a downloaded file: its snapshot entry and, where that is a symlink, the blob
    in this repository's folder it points to (unlinked, never followed further: a blob
    may itself link into huggingface-hub's shared store, which is not ours to delete).
    Without either, the next download fetches the file again instead of finding it."""
    blob = pointer.parent / os.readlink(pointer) if pointer.is_symlink() else None
    pointer.unlink(missing_ok=True)
    if blob is not None:
        blob.unlink(missing_ok=True)


def download_hub_file(file: HubFile, progress: bool = True) -> Path:
    """Download (or resume) one file into the cache and return its path.

    huggingface-hub writes to an .incomplete file and renames it when the download
    is whole, so an interrupted download never leaves a broken model in the cache; a
    whole file that is not the one the preset records is removed again and refused. Until
    the check passes the file is marked unverified, so that no cache lookup trusts it.
    """
    mark = _unverified_mark(file)
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.touch()
    try:
        path = Path(
            hf_hub_download(
                file.repo,
                file.filename,
                revision=file.revision,
                cache_dir=hub_cache_dir(),
                # Read now, not at import as huggingface-hub does, so a mirror set later counts.
                endpoint=os.environ.get("HF_ENDPOINT") or None,
                tqdm_class=_RichProgress if progress else None,
            )
        )
    except (HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled, OSError) as error:
        raise ModelError(
            f"could not download {file.describe()} (revision {file.revision}) from the Hugging Face Hub: {error}. "
            "Check the network (or set HF_ENDPOINT to a mirror) and run `completer models pull PRESET`, "
            "or pass the file's local path."
        ) from None
    mismatch = _mismatch(file, path)
    if mismatch is not None:
        _remove_from_cache(path)
        raise ModelError(
            f"{file.describe()} downloaded at revision {file.revision} {mismatch}: refused, and removed from "
            "the cache. The Hub (or the mirror in HF_ENDPOINT) served another file than the preset names; "
            "pass the right file's local path instead."
        )
    mark.unlink(missing_ok=True)
    return path
