"""Building a completer from a Config, in one place: the language server, `completer
complete`, `completer bench` and the benchmarks all load through here.

    load_pair       RPC servers added as devices; preset and paths -> files (downloaded,
                    converted or derived into the cache when needed, one vocabulary
                    checked) -> llama.cpp models
    load_completer  the decoder models.decoder names: the pair and the engine
                    (its KV caches made to fit the GPU, its verify cost measured when it
                    speculates), or a server's client; and the Completer over it and
                    the workspace roots
    completer_over  the Completer over a decoder already made: every Completer is made
                    here (load_completer's, the bench's, the benchmarks')
    load_engine     the pair and the engine over it, without a completer (the benchmarks)
    engine_for      another engine over a pair already loaded: its KV caches made to fit
                    the GPU, its threads models.threads (every engine is built here)
    needs_reload    which option changes the loaded engine cannot take without loading
    hub_downloads   the Hub files loading the options would download (none when cached)
"""

import gc
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from completer.config import DECODERS, LLAMA_SERVER, LOCAL, OPENAI, Config, ModelOptions, problems
from completer.decoders.local import LocalDecoder
from completer.decoders.server import ServerAPI, LlamaServerAPI, OpenAIAPI, ServerDecoder
from completer.editor.completer import Completer
from completer.engine.generation import Engine
from completer.engine.tuning import CostModel
from completer.errors import ServerError
from completer.models.llama import ContextError, LlamaModel
from completer.models.devices import Device, add_rpc_servers, offload_devices
from completer.models.errors import ModelError
from completer.models.gguf_file import GGUFHeader, check_gguf, check_same_vocabulary
from completer.models.pairing import suitability_notes
from completer.models.paths import distilled_draft_path
from completer.models.presets import HubFile, Preset
from completer.models.resolve import ModelFiles, cached_path, resolve
from completer.workspace import Workspace

# ModelError is what every loading failure raises, with what to run.
__all__ = ["Loaded", "ModelError", "Pair", "engine_for", "hub_downloads", "load_completer", "load_distilled",
           "load_engine", "load_pair", "needs_reload", "server_api"]

# (what is happening, percent done): $/progress in the server, nothing elsewhere.
Report = Callable[[str, int], None]
# Measuring the target's pass per batch size takes this long; the tuner needs it to
# choose k, and plain decoding does not.
CALIBRATION_S = 1.0


def _silent(message: str, percentage: int) -> None:
    pass


@dataclass
class Pair:
    """The loaded models and the files they came from."""

    files: ModelFiles
    target: LlamaModel
    draft: LlamaModel | None
    rpc_warnings: list[str] = field(default_factory=list)  # RPC servers off this machine

    @property
    def names(self) -> tuple[str, str]:
        """The target's and the draft's names: a found model's, else the file's ("" without a draft)."""
        return self.files.names

    @property
    def warnings(self) -> list[str]:
        """What the user should be told about where the models run: an RPC server off
        this machine, or a GPU that could not hold the layers asked for (slower than asked)."""
        fallbacks = [model.gpu_fallback for model in (self.target, self.draft) if model is not None]
        return self.rpc_warnings + [fallback for fallback in fallbacks if fallback]

    @property
    def notes(self) -> list[str]:
        """What the log says of the models: how the draft was chosen (`--draft auto`), and
        a target without FIM tokens or tuned for chat (it serves, less well)."""
        has_fim = self.target.special.has_fim
        return [*self.files.notes, *suitability_notes(self.names[0], self.files.target, has_fim)]

    def with_fewer_gpu_layers(self, model: LlamaModel, n_ctx: int) -> "Pair":
        """The pair with `model` (its target or draft) loaded again with fewer GPU layers."""
        if model is self.target:
            return replace(self, target=model.with_fewer_gpu_layers(n_ctx))
        return replace(self, draft=model.with_fewer_gpu_layers(n_ctx))


@dataclass
class Loaded:
    completer: Completer
    decoder: LocalDecoder | ServerDecoder  # the completer's
    pair: Pair | None  # None: a server decodes
    server_warning: str = ""  # why the server could not be used at load (the completer tries again)

    @property
    def names(self) -> tuple[str, str]:
        """The target's and the draft's names; a server's model and "" for a server."""
        if self.pair is not None:
            return self.pair.names
        model = self.decoder.server_model()
        return (model.name if model else "", "")

    @property
    def warnings(self) -> list[str]:
        return self.pair.warnings if self.pair is not None else [w for w in (self.server_warning,) if w]

    @property
    def notes(self) -> list[str]:
        return self.pair.notes if self.pair is not None else []

    def ready_message(self) -> str:
        """What the user is told once the completer serves: its models, or its server's."""
        target, draft = self.names
        if self.pair is not None:
            return f"ready: target {target}" + (f", draft {draft}" if draft else "")
        return f"ready: {self.decoder.url}" + (f" ({target})" if target else ", which does not answer yet")


def load_pair(options: ModelOptions, with_draft: bool = True, report: Report = _silent,
              needs_draft: bool = False) -> Pair:
    """The preset's (or the options' own) target and draft, loaded; without `with_draft`,
    the target alone, and no draft is fetched; `needs_draft`: a draft mode that drafts
    with the model alone, refused before loading when there is none (a target of one's
    own named without a draft). Raises ModelError saying what to run."""
    try:
        rpc_warnings = add_rpc_servers(options.rpc_servers)
    except ValueError as error:  # a malformed list: models.rpc_servers is what to fix
        raise ModelError(f"models.rpc_servers: {error}") from None
    report(f"finding the {options.target or options.preset} files (downloading them if needed)", 5)
    files = resolve(Preset.from_name(options.preset), options.target, options.draft, with_draft=with_draft)
    if needs_draft and files.draft is None:
        raise ModelError(f"this draft mode drafts with a draft model, and {files.names[0]} has none here: pass "
                         "--draft PATH (a GGUF sharing its vocabulary), or --draft auto (the smallest such model on "
                         "this machine), or use --mode auto or ngram (n-gram, workspace and copy drafting, no model "
                         "needed)")
    report(f"loading {files.target.name}", 40)
    devices = offload_devices(options.rpc_servers)  # not an RPC server dropped from the settings since
    target_header = files.target_header or check_gguf(files.target)
    draft_header = files.draft_header or (check_gguf(files.draft) if files.draft is not None else None)
    for header in (target_header, draft_header):
        if header is not None:
            check_fits_memory(header, devices)
    target = LlamaModel(files.target, options.target_gpu_layers, devices=devices, header=target_header)
    draft = None
    if files.draft is not None:
        report(f"loading {files.draft.name}", 60)
        draft = LlamaModel(files.draft, options.draft_gpu_layers, devices=devices, header=draft_header)
    return Pair(files, target, draft, rpc_warnings)


def check_fits_memory(header: GGUFHeader, devices: list[Device]) -> None:
    """Refuse a model file (its check_gguf header) larger than this machine's memory and
    its offload devices' together: llama.cpp maps the file, so it would load, then read
    the disk at every token. A split model weighs all its shards (the header's path is
    the first's)."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") + sum(device.total_bytes for device in devices)
    size = header.size_bytes
    if size > memory:
        raise ModelError(f"{header.path} is {size / 2**30:.1f} GiB, more than this machine's memory and devices hold "
                         f"({memory / 2**30:.1f} GiB): it would be read from the disk at every token. Use a smaller "
                         "quantization of it (Q4_K_M is about half of Q8_0), or a smaller model.")


def load_distilled(pair: Pair, options: ModelOptions) -> LlamaModel | None:
    """The draft `completer distill` trained for the pair's target, when there is one and
    the options did not name a draft of their own."""
    path = distilled_draft_path(pair.files.target)
    if options.draft is not None or not path.is_file():
        return None
    check_same_vocabulary(pair.files.target, path)
    return LlamaModel(path, options.draft_gpu_layers)


def load_completer(config: Config, roots: Sequence[Path] = (), report: Report = _silent) -> Loaded:
    """The decoder models.decoder names, and the Completer that serves requests over the
    workspace `roots` with it: the local pair loaded (its verify pass measured), or a
    server's client, connected when the server answers (else it tries again as requests
    come). Options that cannot work (config.problems: a Config made from flags) are a
    ModelError naming them, before anything loads."""
    if found := problems(config):
        raise ModelError("options that cannot work: " + "; ".join(found))
    if config.models.decoder not in DECODERS:
        raise ModelError(f"models.decoder {config.models.decoder!r} is none of {', '.join(DECODERS)}")
    decoder, pair = (_load_local if config.models.decoder == LOCAL else _load_server)(config, report)
    return Loaded(completer_over(decoder, config, roots), decoder, pair, "" if pair is not None else decoder.warning)


def completer_over(decoder: LocalDecoder | ServerDecoder, config: Config, roots: Sequence[Path] = ()) -> Completer:
    """The Completer that serves requests with `decoder` by `config`, over the workspace
    `roots`: every Completer is made here (load_completer's, the bench's, the benchmarks'
    over decoders of their own)."""
    return Completer(decoder, config, Workspace(list(roots)))


def _load_local(config: Config, report: Report) -> tuple[LocalDecoder, Pair]:
    engine, pair = load_engine(config, report)
    return LocalDecoder(engine), pair


def load_engine(config: Config, report: Report = _silent) -> tuple[Engine, Pair]:
    """The pair config.models names (its draft only when config.generation speculates)
    and the engine over it (engine_for), with the pair as the engine holds it."""
    pair = load_pair(config.models, with_draft=config.generation.speculates, report=report,
                     needs_draft=config.generation.needs_draft_model)
    report("measuring the cost of a verify pass", 75)
    return engine_for(pair, config)


def _load_server(config: Config, report: Report) -> tuple[ServerDecoder, None]:
    try:
        api = server_api(config.models, os.environ)
    except ServerError as error:
        raise ModelError(str(error)) from None
    report(f"connecting to {api.url}", 50)
    decoder = ServerDecoder(api)
    decoder.server_model()  # connected now if the server answers
    return decoder, None


# The servers' APIs, by models.decoder.
SERVER_APIS: dict[str, type[LlamaServerAPI] | type[OpenAIAPI]] = {
    LLAMA_SERVER: LlamaServerAPI, OPENAI: OpenAIAPI}


def server_api(options: ModelOptions, environ: Mapping[str, str]) -> ServerAPI:
    """The configured server's client; ServerError for settings that cannot work."""
    if options.decoder not in SERVER_APIS:
        raise ServerError(f"models.decoder {options.decoder} is not a server's: one of {', '.join(SERVER_APIS)}")
    if not options.server_url:
        raise ServerError(f"models.decoder {options.decoder} needs models.server_url (http://host:port)")
    api_key = ""
    if options.api_key_env:
        api_key = environ.get(options.api_key_env, "")
        if not api_key:
            raise ServerError(f"models.api_key_env names {options.api_key_env}, which is not set in the "
                              "environment completer runs in")
    return SERVER_APIS[options.decoder].from_options(options, api_key)


def engine_for(pair: Pair, config: Config, exact: bool = False, costs: CostModel | None = None) -> tuple[Engine, Pair]:
    """The engine over the pair, with config.models' context size and threads and
    config.drafting; its verify cost measured when config.generation speculates, unless
    `costs` (another engine's) are given; `exact`: one token per target decode (Engine).
    Where a model's KV cache does not fit on the GPU beside its layers (llama.cpp cannot
    make the context), that model is loaded again with fewer layers there, until the
    cache fits or none are left; the pair returned then holds it."""
    calibrate_s = CALIBRATION_S if config.generation.speculates else 0.0
    while True:
        try:
            return Engine(pair.target, pair.draft, n_ctx=config.models.context_tokens, threads=config.models.threads,
                          calibrate_s=calibrate_s, exact=exact, costs=costs, drafting=config.drafting), pair
        except ContextError as error:
            if error.model.gpu_layers == 0:
                raise
            failed, n_ctx = error.model, error.n_ctx
        # Out of the except block, the half-made engine's contexts can go, and with them
        # their device memory; collected now, before the model is loaded again.
        gc.collect()
        pair = pair.with_fewer_gpu_layers(failed, n_ctx)


def needs_reload(loaded: Config, new: Config) -> bool:
    """Whether going from `loaded` to `new` needs the models loaded again: everything
    load_completer built the engine from (the model options, and whether it speculates:
    only then is the draft loaded and the verify cost measured). Other options apply
    from the next request on."""
    return loaded.models != new.models or loaded.generation.speculates != new.generation.speculates


def hub_downloads(options: ModelOptions, with_draft: bool) -> list[HubFile]:
    """The preset's Hub files that load_pair would download, as resolve picks them: none
    when the options name a target of their own, the draft only `with_draft` and unless
    the options name one; those already in the cache left out. Looks at the disk only."""
    if options.target or options.decoder != LOCAL:
        return []
    preset = Preset.from_name(options.preset)
    sources = [preset.target, *([preset.draft] if with_draft and not options.draft else [])]
    return [source for source in sources if isinstance(source, HubFile) and cached_path(source) is None]
