"""Downloads from the Hugging Face Hub (or the mirror in $HF_ENDPOINT) into our cache."""

import os
import warnings
from pathlib import Path

from huggingface_hub import hf_hub_download, try_to_load_from_cache
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled
from rich.console import Console
from tqdm import TqdmExperimentalWarning
from tqdm.rich import tqdm as RichTqdm

from completer.models.errors import ModelError
from completer.models.paths import hub_cache_dir
from completer.models.presets import HubFile


class _RichProgress(RichTqdm):
    """huggingface-hub drives a tqdm-style bar; tqdm.rich draws it with rich, like the
    rest of our output, on stderr: stdout carries only results (and, in `serve`, LSP)."""

    def __init__(self, *args, **kwargs):
        kwargs["options"] = {"console": Console(stderr=True)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TqdmExperimentalWarning)
            super().__init__(*args, **kwargs)


def cached_hub_file(file: HubFile) -> Path | None:
    """The file's path in the cache, without touching the network; None when absent."""
    found = try_to_load_from_cache(file.repo, file.filename, cache_dir=hub_cache_dir())
    return Path(found) if isinstance(found, str) else None


def download_hub_file(file: HubFile, progress: bool = True) -> Path:
    """Download (or resume) one file into the cache and return its path.

    huggingface-hub writes to an .incomplete file and renames it when the download
    is whole, so an interrupted download never leaves a broken model in the cache.
    """
    try:
        return Path(
            hf_hub_download(
                file.repo,
                file.filename,
                cache_dir=hub_cache_dir(),
                # Read now, not at import as huggingface-hub does, so a mirror set later counts.
                endpoint=os.environ.get("HF_ENDPOINT") or None,
                tqdm_class=_RichProgress if progress else None,
            )
        )
    except (HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled, OSError) as error:
        raise ModelError(
            f"could not download {file.describe()} from the Hugging Face Hub: {error}. "
            "Check the network (or set HF_ENDPOINT to a mirror) and run `completer models pull PRESET`, "
            "or pass the file's local path."
        ) from None
