"""The GGUF models already on this machine: Ollama's, LM Studio's, the Hugging Face hub
cache's, llama.cpp's cache's and completer's own cache's.

Each store is read as its tool lays it out (each reader says how, and from which source
that was checked). Everything here only reads: files are opened for reading, no folder
is made, nothing is written, copied or linked, and no link is followed out of its store,
but for a hub snapshot's link into its own repository folder (its blobs). A model is
named `store:name` (`ollama:qwen2.5-coder:1.5b-base`); a file or manifest that cannot be
used becomes one line of Scan.skipped that names it and says why.
"""

import difflib
import errno
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from completer.models.errors import ModelError
from completer.models.gguf_file import ModelFacts, NotAModel, first_shard, model_facts
from completer.models.paths import HUB_FOLDER, LLAMA_BUILDS_FOLDER, cache_dir, hub_cache_dir

STORES = ("ollama", "lmstudio", "hf", "llama.cpp", "cache")
LIST_COMMAND = "completer models list"

# Ollama's defaults, left out of the names it shows (types/model/name.go).
OLLAMA_HOST = "registry.ollama.ai"
OLLAMA_NAMESPACE = "library"
OLLAMA_TAG = "latest"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_DIGEST = re.compile(r"sha256[:-][0-9a-fA-F]{64}")  # manifest/paths.go BlobsPath accepts only these
# What a manifest path's host, namespace, model and tag may be (isValidPart in
# types/model/name.go); Ollama passes over other files there (a .DS_Store), and so do we.
OLLAMA_PARTS = (re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,349}"), re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,79}"),
                re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}"), re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}"))

HUB_REPO_PREFIX = "models--"  # the hub cache's folder for repository owner/name is models--owner--name

# Folders below a store walked at most: the deepest layout is a hub repository's own
# folders in a snapshot; a tree deeper than this is one line, not a crash.
MAX_FOLDER_DEPTH = 32


@dataclass(frozen=True)
class FoundModel:
    name: str  # how a user names it: "ollama:qwen2.5-coder:1.5b-base", "hf:owner/repo/file.gguf"
    store: str  # one of STORES
    path: Path  # the real file, links resolved; a split model's first shard as its store names it
    facts: ModelFacts


@dataclass(frozen=True)
class Scan:
    found: list[FoundModel]  # one per file, by store (in STORES order) then name
    skipped: list[str]  # one line per file or manifest that could not be used: which, and why


@dataclass(frozen=True)
class _Entry:
    """A file a store names, not read yet."""

    name: str
    store: str
    path: Path  # resolved
    named: Path  # as the store names it: a split model's other shards are found beside this name


def _entry(name: str, store: str, file: Path) -> _Entry:
    return _Entry(name, store, _real(file), file)


# What a store's reader yields: its entries, and a line for each thing it cannot use.
_Listed = _Entry | str


def store_roots(environ: Mapping[str, str], home: Path, platform: str = sys.platform) -> list[tuple[str, Path]]:
    """Where each store keeps its models, in STORES order; a store may have several."""
    return [
        ("ollama", _from_environ(environ, [("OLLAMA_MODELS", "")], home / ".ollama" / "models")),
        ("lmstudio", home / ".lmstudio" / "models"),
        ("lmstudio", home / ".cache" / "lm-studio" / "models"),  # older LM Studio releases
        ("hf", _hf_hub_root(environ, home)),
        ("hf", hub_cache_dir(environ, home)),
        ("llama.cpp", _llama_cpp_root(environ, home, platform)),
        ("cache", cache_dir(environ, home)),
    ]


def _from_environ(environ: Mapping[str, str], choices: list[tuple[str, str]], default: Path) -> Path:
    """The first variable of `choices` that is set, joined with its sub-path; else `default`."""
    for variable, below in choices:
        if environ.get(variable):
            return Path(environ[variable]).expanduser() / below
    return default


def _hf_hub_root(environ: Mapping[str, str], home: Path) -> Path:
    """huggingface_hub's cache (its constants.py): HUGGINGFACE_HUB_CACHE is the older name of HF_HUB_CACHE."""
    choices = [("HF_HUB_CACHE", ""), ("HUGGINGFACE_HUB_CACHE", ""), ("HF_HOME", "hub"),
               ("XDG_CACHE_HOME", "huggingface/hub")]
    return _from_environ(environ, choices, home / ".cache" / "huggingface" / "hub")


def _llama_cpp_root(environ: Mapping[str, str], home: Path, platform: str) -> Path:
    """llama.cpp's cache (common/common.cpp, fs_get_cache_directory)."""
    if platform == "darwin":
        return _from_environ(environ, [("LLAMA_CACHE", "")], home / "Library" / "Caches" / "llama.cpp")
    if platform == "win32":
        return _from_environ(environ, [("LLAMA_CACHE", ""), ("LOCALAPPDATA", "llama.cpp")],
                             home / "AppData" / "Local" / "llama.cpp")
    return _from_environ(environ, [("LLAMA_CACHE", ""), ("XDG_CACHE_HOME", "llama.cpp")],
                         home / ".cache" / "llama.cpp")


def scan(environ: Mapping[str, str] = os.environ, home: Path | None = None) -> Scan:
    """Every store's models with their facts, and a line for each file that could not be used."""
    listed = list(_listed(environ, home or Path.home()))
    entries = sorted((e for e in listed if isinstance(e, _Entry)), key=lambda e: (STORES.index(e.store), e.name))
    unique, hidden = _unique(_without_later_shards(entries))
    models = [_found_model(entry) for entry in unique]
    found = [model for model in models if isinstance(model, FoundModel)]
    # The links of a loop each say the same line.
    skipped = list(dict.fromkeys(line for line in [*listed, *hidden, *models] if isinstance(line, str)))
    return Scan(found, skipped)


def _without_later_shards(entries: list[_Entry]) -> list[_Entry]:
    """The entries but for a split model's shards after the first, where the first is one
    too: they are read with it."""
    named = {entry.named for entry in entries}
    return [entry for entry in entries if first_shard(entry.named) not in named]


def _unique(entries: list[_Entry]) -> tuple[list[_Entry], list[str]]:
    """Each file once (two stores' roots may be one folder, two Ollama tags one blob: the
    first name wins), and each name once, with a line for each file a name hides."""
    unique, hidden, names = [], [], {}
    paths = set()
    for entry in entries:
        if entry.path in paths:
            continue
        if entry.name in names:
            hidden.append(f"{entry.name} ({entry.path}): the same name as {names[entry.name]}, which is used")
            continue
        paths.add(entry.path)
        names[entry.name] = entry.path
        unique.append(entry)
    return unique, hidden


def _found_model(entry: _Entry) -> FoundModel | str:
    """The entry with its facts, or the line saying why it is not a usable model."""
    try:
        return _read_model(entry)
    except NotAModel as problem:
        return f"{entry.name} ({entry.path}): {problem.reason}"


def _read_model(entry: _Entry) -> FoundModel:
    """The entry with its facts, or NotAModel. llama.cpp finds a split model's other shards
    by the first one's name, which its path keeps (a hub blob's name is its digest)."""
    facts = model_facts(entry.named)
    return FoundModel(entry.name, entry.store, entry.named if facts.shards > 1 else entry.path, facts)


def locate(name: str, environ: Mapping[str, str] = os.environ, home: Path | None = None) -> Path:
    """The file a store name names (`ollama:qwen2.5-coder:1.5b-base`), or a one-line ModelError."""
    store, _, wanted = name.partition(":")
    entries = [e for e in _listed(environ, home or Path.home()) if isinstance(e, _Entry)]
    match = next((e for e in entries if e.store == store and _same_name(store, wanted, e.name)), None)
    if match is None:
        raise ModelError(_unknown_name_message(name, [e.name for e in entries]))
    try:
        return _read_model(match).path
    except NotAModel as problem:
        raise ModelError(f"{name} is {match.path}, which cannot be used: {problem.reason}. "
                         f"Run `{LIST_COMMAND}` to see the models that can.") from None


def is_store_name(text: str) -> bool:
    """Whether text names a model in a store (`ollama:...`) rather than a file."""
    return text.startswith(tuple(f"{store}:" for store in STORES))


def _same_name(store: str, wanted: str, name: str) -> bool:
    """Whether `wanted` (no store prefix) names the entry called `name`. Ollama names are
    case-insensitive and may leave out the default host, namespace and tag."""
    name = name.partition(":")[2]
    if store == "ollama":
        return [p.casefold() for p in ollama_parts(wanted)] == [p.casefold() for p in ollama_parts(name)]
    return wanted == name


def _unknown_name_message(name: str, names: list[str]) -> str:
    if not names:
        return (f"no model named {name}: no models were found in Ollama, LM Studio, the Hugging Face cache, "
                f"llama.cpp's cache or completer's cache. Run `{LIST_COMMAND}` to see where they were looked for.")
    closest = difflib.get_close_matches(name, names, n=3, cutoff=0)
    return f"no model named {name}; the closest: {', '.join(closest)}. Run `{LIST_COMMAND}` to see them all."


def _listed(environ: Mapping[str, str], home: Path) -> Iterator[_Listed]:
    """Every store's entries and lines, store by store; a missing store is nothing."""
    for store, root in store_roots(environ, home):
        is_store = _looked_at(root, Path.is_dir)
        if isinstance(is_store, str):
            yield is_store
        elif is_store:
            yield from _READERS[store](_real(root))


# Walking a store: every reader lists folders through _listing, which looks at each entry
# (so that Path's tests of it raise nothing after), and _at_depth and _files_below.

def _real(path: Path) -> Path:
    """The path, links resolved. Unlike Path.resolve, it raises no RuntimeError on a loop
    (Python 3.11 and 3.12): a loop is left unresolved, and _listing makes it a line."""
    return Path(os.path.realpath(path))


def _looked_at(path: Path, test: Callable[[Path], bool]) -> bool | str:
    """test(path) (Path.is_dir, Path.is_file), or the line saying why the path cannot be
    looked at: those tests raise on a folder that can be listed but not entered."""
    try:
        return test(path)
    except OSError as error:
        return f"{path}: cannot be read ({error.strerror})"


def _listing(folder: Path, root: Path) -> Iterator[Path | str]:
    """A folder's entries by name; a link that leads out of the store (`root`) or into a
    loop, an entry that cannot be looked at, and a folder that cannot be entered are a line."""
    is_folder = _looked_at(folder, Path.is_dir)
    if isinstance(is_folder, str):
        yield is_folder
    if is_folder is not True:
        return
    try:
        names = sorted(os.listdir(folder))
        for name in names:
            os.lstat(folder / name)  # listed is not entered: a folder without x (`chmod -R 644`)
    except OSError as error:
        verb = "entered" if error.errno == errno.EACCES else "read"
        yield f"{folder}: cannot be {verb} ({error.strerror})"
        return
    for name in names:
        entry = folder / name
        yield _link_problem(entry, root) or entry


def _link_problem(entry: Path, root: Path) -> str | None:
    """Why an entry is not to be followed: it leads out of the store or into a loop, or
    what it leads to cannot be looked at. None for a link to a missing file."""
    try:
        entry.stat()
    except OSError as error:
        if error.errno == errno.ELOOP:
            return f"{_loop(entry) or entry}: links in a loop, not followed"
        if error.errno not in (errno.ENOENT, errno.ENOTDIR):
            return f"{entry}: cannot be read ({error.strerror})"
    real = _real(entry)
    return None if real.is_relative_to(root) else f"{entry}: a link out of the store (to {real}), not followed"


def _loop(link: Path) -> str | None:
    """The loop a link leads into, `a -> b -> a` from the first path by name, so that each
    of its links says the same; None when it is no loop of links alone."""
    chain: list[Path] = []
    while link not in chain:
        try:
            target = os.readlink(link)
        except OSError:  # not a link: a loop through folders, or a chain too long
            return None
        chain.append(link)
        link = Path(os.path.normpath(link.parent / target))
    loop = chain[chain.index(link):]
    start = loop.index(min(loop))
    return " -> ".join(str(path) for path in [*loop[start:], *loop[:start], loop[start]])


def _at_depth(folder: Path, root: Path, depth: int) -> Iterator[Path | str]:
    """The entries `depth` folders down (1: the folder's own), and the lines of _listing."""
    for entry in _listing(folder, root):
        if isinstance(entry, str) or depth == 1:
            yield entry
        elif entry.is_dir():
            yield from _at_depth(entry, root, depth - 1)


def _files_below(folder: Path, root: Path, leave_out: frozenset[Path] = frozenset(),
                 depth: int = MAX_FOLDER_DEPTH) -> Iterator[Path | str]:
    """Every file below a folder (a link to a missing file included), and the lines of _listing.
    A link to a folder is not walked: the folder it leads to is in the store and walked as itself."""
    for entry in _listing(folder, root):
        if isinstance(entry, str) or not entry.is_dir():
            yield entry
        elif entry.is_symlink() or entry in leave_out:
            continue
        elif depth == 0:
            yield f"{entry}: more than {MAX_FOLDER_DEPTH} folders deep below the store, not read"
        else:
            yield from _files_below(entry, root, leave_out, depth - 1)


def _is_gguf(path: Path) -> bool:
    return path.suffix.lower() == ".gguf"


# One reader a store layout.

def _ollama_entries(root: Path) -> Iterator[_Listed]:
    """Ollama (manifest/paths.go, manifest/manifest.go, types/model/name.go): one manifest
    a name at manifests/<host>/<namespace>/<model>/<tag>, the GGUF at blobs/sha256-<hex>."""
    manifests = root / "manifests"
    for manifest in _at_depth(manifests, root, 4):
        if isinstance(manifest, str):
            yield manifest
        elif all(map(re.fullmatch, OLLAMA_PARTS, manifest.relative_to(manifests).parts)):
            yield _ollama_entry(root, manifest)


def _ollama_entry(root: Path, manifest: Path) -> _Listed:
    """The blob a manifest names, or why it cannot be used."""
    name = "ollama:" + ollama_name(*manifest.relative_to(root / "manifests").parts)
    where = f"{name} ({manifest})"
    layer = _ollama_model_layer(manifest)
    if isinstance(layer, str):
        return f"{where}: {layer}"
    digest = layer.get("digest")
    if not isinstance(digest, str) or not OLLAMA_DIGEST.fullmatch(digest):
        return f"{where}: manifest names no valid blob digest ({digest!r})"
    blob = root / "blobs" / digest.replace(":", "-")
    is_file = _looked_at(blob, Path.is_file)
    if isinstance(is_file, str):
        return f"{where}: {is_file}"
    if not is_file:
        return f"{where}: manifest names blob {blob.name}, which is missing"
    if not _real(blob).is_relative_to(root):
        return f"{where}: blob {blob.name} is a link out of the store (to {_real(blob)}), not followed"
    size, expected = blob.stat().st_size, layer.get("size")
    if isinstance(expected, int) and size != expected:
        truncated = "truncated: " if size < expected else ""
        return f"{where}: {truncated}blob {blob.name} has {size} bytes, the manifest says {expected}"
    return _entry(name, "ollama", blob)


def _ollama_model_layer(manifest: Path) -> dict | str:
    """The manifest's model layer, or why it has none. Ollama takes the last one
    (server/images.go, GetModel)."""
    if not manifest.is_file():
        return "not a manifest file"
    try:
        document = json.loads(manifest.read_bytes())
    except OSError as error:
        return f"manifest cannot be read ({error.strerror})"
    except ValueError:
        return "manifest is not JSON"
    layers = document.get("layers") if isinstance(document, dict) else None
    if not isinstance(layers, list):
        return "manifest has no list of layers"
    models = [layer for layer in layers if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_LAYER]
    return models[-1] if models else f"manifest has no model layer ({OLLAMA_MODEL_LAYER})"


def ollama_name(host: str, namespace: str, model: str, tag: str) -> str:
    """The name Ollama shows for a manifest path's parts (DisplayShortest in
    types/model/name.go): the default host and namespace left out."""
    if host.casefold() != OLLAMA_HOST:
        return f"{host}/{namespace}/{model}:{tag}"
    if namespace.casefold() != OLLAMA_NAMESPACE:
        return f"{namespace}/{model}:{tag}"
    return f"{model}:{tag}"


def ollama_parts(name: str) -> tuple[str, str, str, str]:
    """(host, namespace, model, tag) of an Ollama name, defaults filled in, as ParseName
    in types/model/name.go reads it: "qwen2.5-coder" is registry.ollama.ai/library/qwen2.5-coder:latest."""
    tag = OLLAMA_TAG
    if name.rfind(":") > name.rfind("/"):  # a host's port is before a "/", a tag after the last
        name, tag = name.rsplit(":", 1)
    rest, has_namespace, model = name.rpartition("/")
    if not has_namespace:
        return OLLAMA_HOST, OLLAMA_NAMESPACE, model, tag
    host, has_host, namespace = rest.rpartition("/")
    return (host.split("://")[-1] if has_host else OLLAMA_HOST), namespace, model, tag


def _lmstudio_entries(root: Path) -> Iterator[_Listed]:
    """LM Studio (lmstudio.ai/docs/advanced/sideload): models/<publisher>/<repo>/<file>.gguf,
    no deeper and no shallower (it ignores files elsewhere)."""
    for repo in _at_depth(root, root, 2):
        if isinstance(repo, str):
            yield repo
        elif repo.is_dir():
            yield from _lmstudio_repo(root, repo)


def _lmstudio_repo(root: Path, repo: Path) -> Iterator[_Listed]:
    listed = list(_listing(repo, root))
    lines = [line for line in listed if isinstance(line, str)]
    files = [f for f in listed if isinstance(f, Path) and f.is_file() and _is_gguf(f)]
    yield from lines
    if not files and not lines:
        yield f"{repo}: no .gguf file in this LM Studio folder (other formats, such as MLX, are not read)"
    for file in files:
        yield _entry(f"lmstudio:{file.relative_to(root).as_posix()}", "lmstudio", file)


def _hub_entries(root: Path, store: str) -> Iterator[_Listed]:
    """The huggingface-hub cache (huggingface_hub's file_download.py; the pinned llama.cpp's
    common/hf-cache.cpp writes the same): models--<owner>--<repo>/snapshots/<revision>/<path>,
    each snapshot file a link into the repository's blobs/ (a plain file where links fail)."""
    for entry in _listing(root, root):
        if isinstance(entry, str):
            yield entry
        elif _is_hub_repo(entry):
            yield from _hub_repo(entry, store)


def _is_hub_repo(folder: Path) -> bool:
    return folder.name.startswith(HUB_REPO_PREFIX) and folder.is_dir()


def _hub_repo(repo: Path, store: str) -> Iterator[_Listed]:
    """A repository's .gguf files, each from the newest revision that holds it."""
    repo_id = repo.name.removeprefix(HUB_REPO_PREFIX).replace("--", "/")
    newest: dict[str, Path] = {}
    for item in _snapshot_files(_real(repo)):
        if isinstance(item, str):
            yield item
            continue
        relative, file = item
        if relative not in newest or file.lstat().st_mtime > newest[relative].lstat().st_mtime:
            newest[relative] = file
    for relative, file in sorted(newest.items()):
        if file.is_file():
            yield _entry(f"{store}:{repo_id}/{relative}", store, file)
        elif file.is_symlink():
            yield f"{file}: a link to {_real(file)}, which is missing"
        else:
            yield f"{file}: not a regular file"


def _snapshot_files(repo: Path) -> Iterator[tuple[str, Path] | str]:
    """(path in the repository, file) of every revision's .gguf files; links may lead only
    into the repository's own folder (its blobs)."""
    for revision in _listing(repo / "snapshots", repo):
        if isinstance(revision, str):
            yield revision
            continue
        for file in _files_below(revision, repo):
            if isinstance(file, str):
                yield file
            elif _is_gguf(file):
                yield file.relative_to(revision).as_posix(), file


def _llama_cpp_entries(root: Path) -> Iterator[_Listed]:
    """llama.cpp's cache (common/arg.cpp, common/download.cpp, common/hf-cache.cpp): files
    downloaded by URL or from Docker Hub lie in it flat (<repo with _ for />_<tag>.gguf), as
    older releases' -hf downloads did (<owner>_<repo>_<file>.gguf); this release's -hf
    downloads go to a hub layout, in it when $LLAMA_CACHE is set."""
    for entry in _listing(root, root):
        if isinstance(entry, str):
            yield entry
        elif _is_hub_repo(entry):
            yield from _hub_repo(entry, "llama.cpp")
        elif entry.is_file() and _is_gguf(entry):
            yield _entry(f"llama.cpp:{entry.name}", "llama.cpp", entry)


def _cache_entries(root: Path) -> Iterator[_Listed]:
    """completer's own cache: derived, distilled and other files anywhere below it, but for
    its hub folder (read as the store "hf") and its llama.cpp builds (no models)."""
    leave_out = frozenset({root / HUB_FOLDER, root / LLAMA_BUILDS_FOLDER})
    for file in _files_below(root, root, leave_out):
        if isinstance(file, str):
            yield file
        elif _is_gguf(file):
            yield _entry(f"cache:{file.relative_to(root).as_posix()}", "cache", file)


_READERS: dict[str, Callable[[Path], Iterator[_Listed]]] = {
    "ollama": _ollama_entries,
    "lmstudio": _lmstudio_entries,
    "hf": lambda root: _hub_entries(root, "hf"),
    "llama.cpp": _llama_cpp_entries,
    "cache": _cache_entries,
}
