"""Building a completer from a Config, in one place: the language server, `completer
complete`, `completer bench` and the benchmarks all load through here.

    load_pair       RPC servers added as devices; preset and paths -> files (downloaded,
                    converted or derived into the cache when needed, one vocabulary
                    checked) -> llama.cpp models
    load_completer  the pair, the engine (its KV caches made to fit the GPU, its verify
                    cost measured when it speculates) and the Completer over the
                    workspace roots; or, with a server backend, the RemoteCompleter
    needs_reload    which option changes the loaded engine cannot take without loading
"""

import gc
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from completer.config import Config, ModelOptions, problems
from completer.context import Workspace
from completer.engine import Engine
from completer.models.backend import ContextError, LlamaModel
from completer.models.devices import add_rpc_servers, offload_devices
from completer.models.errors import ModelError
from completer.models.gguf_file import check_same_vocabulary
from completer.models.paths import distilled_draft_path
from completer.models.presets import Preset
from completer.models.resolve import ModelFiles, resolve
from completer.remote import ServerError
from completer.remote_session import RemoteCompleter, backend_for
from completer.session import Completer

# ModelError is what every loading failure raises, with what to run.
__all__ = ["Loaded", "ModelError", "Pair", "load_completer", "load_distilled", "load_pair", "needs_reload"]

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
        """The target's and the draft's file names ("" without a draft)."""
        return self.files.target.name, self.files.draft.name if self.files.draft else ""

    @property
    def warnings(self) -> list[str]:
        """What the user should be told about where the models run: an RPC server off
        this machine, or a GPU that could not hold the layers asked for (slower than asked)."""
        fallbacks = [model.gpu_fallback for model in (self.target, self.draft) if model is not None]
        return self.rpc_warnings + [fallback for fallback in fallbacks if fallback]

    def with_fewer_gpu_layers(self, model: LlamaModel, n_ctx: int) -> "Pair":
        """The pair with `model` (its target or draft) loaded again with fewer GPU layers."""
        if model is self.target:
            return replace(self, target=model.with_fewer_gpu_layers(n_ctx))
        return replace(self, draft=model.with_fewer_gpu_layers(n_ctx))


@dataclass
class Loaded:
    completer: Completer | RemoteCompleter
    pair: Pair | None  # None: a server decodes
    server_warning: str = ""  # why the server could not be used at load (the completer tries again)

    @property
    def names(self) -> tuple[str, str]:
        """The target's and the draft's file names; a server's model and "" for a server."""
        if self.pair is not None:
            return self.pair.names
        model = self.completer.link.model
        return (model.name if model else "", "")

    @property
    def warnings(self) -> list[str]:
        return self.pair.warnings if self.pair is not None else [w for w in (self.server_warning,) if w]


def load_pair(options: ModelOptions, with_draft: bool = True, report: Report = _silent) -> Pair:
    """The preset's (or the options' own) target and draft, loaded; without `with_draft`,
    the target alone, and no draft is fetched. Raises ModelError saying what to run."""
    try:
        rpc_warnings = add_rpc_servers(options.rpc_servers)
    except ValueError as error:  # a malformed list: models.rpc_servers is what to fix
        raise ModelError(f"models.rpc_servers: {error}") from None
    report(f"finding the {options.preset} files (downloading them if needed)", 5)
    files = resolve(Preset.from_name(options.preset), options.target, options.draft, with_draft=with_draft)
    report(f"loading {files.target.name}", 40)
    devices = offload_devices(options.rpc_servers)  # not an RPC server dropped from the settings since
    target = LlamaModel(files.target, options.target_gpu_layers, devices=devices)
    draft = None
    if files.draft is not None:
        report(f"loading {files.draft.name}", 60)
        draft = LlamaModel(files.draft, options.draft_gpu_layers, devices=devices)
    return Pair(files, target, draft, rpc_warnings)


def load_distilled(pair: Pair, options: ModelOptions) -> LlamaModel | None:
    """The draft `completer distill` trained for the pair's target, when there is one and
    the options did not name a draft of their own."""
    path = distilled_draft_path(pair.files.target)
    if options.draft is not None or not path.is_file():
        return None
    check_same_vocabulary(pair.files.target, path)
    return LlamaModel(path, options.draft_gpu_layers)


def load_completer(config: Config, roots: Sequence[Path] = (), report: Report = _silent) -> Loaded:
    """Resolve and load the pair, measure what a verify pass costs, and build the
    Completer that serves requests over the workspace `roots`; for a server backend,
    the RemoteCompleter, connected when the server answers (else it tries again as
    requests come). Options that cannot work (config.problems: a Config made from flags)
    are a ModelError naming them, before anything loads."""
    if found := problems(config):
        raise ModelError("options that cannot work: " + "; ".join(found))
    if config.models.backend != "local":
        try:
            backend = backend_for(config.models, os.environ)
        except ServerError as error:
            raise ModelError(str(error)) from None
        report(f"connecting to {backend.url}", 50)
        remote = RemoteCompleter(backend, config, Workspace(list(roots)))
        remote.connect()
        return Loaded(remote, None, remote.link.error)
    speculative = config.generation.speculates
    pair = load_pair(config.models, with_draft=speculative, report=report)
    report("measuring the cost of a verify pass", 75)
    engine, pair = _engine_that_fits(pair, config)
    return Loaded(Completer(engine, config, Workspace(list(roots))), pair)


def _engine_that_fits(pair: Pair, config: Config) -> tuple[Engine, Pair]:
    """The engine over the pair. Where a model's KV cache does not fit on the GPU beside
    its layers (llama.cpp cannot make the context), that model is loaded again with
    fewer layers there, until the cache fits or none are left; the pair then holds it."""
    calibrate_s = CALIBRATION_S if config.generation.speculates else 0.0
    while True:
        try:
            return Engine(pair.target, pair.draft, n_ctx=config.models.context_tokens, threads=config.models.threads,
                          calibrate_s=calibrate_s, drafting=config.drafting), pair
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
