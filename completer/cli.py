"""The `completer` command. Each subcommand's docstring is its --help."""

import functools
import json
import logging
import os
import sys
from dataclasses import Field, fields, replace
from importlib.metadata import version
from pathlib import Path

import click
from click.core import ParameterSource
from rich.console import Console

from completer import tables
from completer.bench import LLAMA_SERVER_PEERS
from completer.bench import MODES as BENCH_MODES
from completer.bench import PICKS, WITH_CONTEXT
from completer.config import (CHOICES, LLAMA_SERVER, RENAMED_FLAGS, SERVER_DECODERS, CacheOptions, Config,
                              ContextOptions, DraftingOptions, GenerationOptions, ModelOptions, NextEditOptions,
                              machine_options)
from completer.models.distill_settings import INITS, LOSSES, PRECISIONS, QUANTIZE_TYPES, TEACHERS, DistillSettings
from completer.models.errors import ModelError
from completer.models.llama_build import BUILD_COMMAND
from completer.models.paths import cache_dir
from completer.models.presets import PRESETS, NoDraft, Preset

console = Console()
errors = Console(stderr=True)
PRESET_COLUMNS = ("preset", "target", "draft", "cached", "why")
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print the table's data as JSON, for scripts.")


def _reports_model_errors(command):
    """Print a ModelError as one line that says what to run, and exit 1: no traceback."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except ModelError as error:
            errors.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
            sys.exit(1)

    return wrapper


class _GpuLayers(click.ParamType):
    name = "layers"

    def convert(self, value, param, ctx) -> int | str:
        if value == "auto" or isinstance(value, int):
            return value
        try:
            return int(value)
        except ValueError:
            self.fail(f"{value!r}: use a number of layers or auto", param, ctx)


def _flag_type(group: str, item: Field) -> click.ParamType:
    """The click type of an option of the Config tree, from its type and choices."""
    if f"{group}.{item.name}" in CHOICES:
        return click.Choice(CHOICES[f"{group}.{item.name}"])
    if item.type == int | str:  # a layer count or "auto"
        return _GpuLayers()
    if item.type == str | None:  # a file
        return click.Path(dir_okay=False)
    return {int: click.IntRange(min=0), float: click.FloatRange(min=0)}.get(item.type, click.STRING)


def _config_flags(group: str, only: tuple[str, ...] | None = None):
    """The Config group's options that have a CLI flag (config.py names it), as click
    options with the option's default and reason; the command receives the group's
    dataclass as `group` (fields without a flag, or not in `only`, at their defaults).
    A flag's old name (RENAMED_FLAGS) is taken too, hidden, with a warning."""
    kind = next(item.default_factory for item in fields(Config) if item.name == group)
    chosen = [item for item in fields(kind) if item.metadata["flag"] and (only is None or item.name in only)]
    old_flags = {item.name: old for item in chosen for old, new in RENAMED_FLAGS.items() if new == item.metadata["flag"]}

    def decorate(command):
        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            values = {item.name: kwargs.pop(item.name) for item in chosen}
            for name, old in old_flags.items():
                values[name] = _under_old_flag(old, kwargs.pop(f"old_{name}"), name, values[name])
            return command(*args, **{group: kind(**values)}, **kwargs)

        for item in reversed(chosen):
            wrapper = click.option(item.metadata["flag"], item.name, default=item.default, show_default=True,
                                   type=_flag_type(group, item), help=item.metadata["doc"][0].upper()
                                   + item.metadata["doc"][1:] + ".")(wrapper)
            if item.name in old_flags:
                wrapper = click.option(old_flags[item.name], f"old_{item.name}", hidden=True,
                                       type=_flag_type(group, item))(wrapper)
        return wrapper

    return decorate


def _under_old_flag(old: str, value, name: str, current):
    """The value of option `name` given (`current`), or its old flag's `value` with a
    warning naming the new flag; both given, a usage error."""
    if value is None:
        return current
    new = RENAMED_FLAGS[old]
    if click.get_current_context().get_parameter_source(name) is ParameterSource.COMMANDLINE:
        raise click.UsageError(f"{old} and {new} are one option, under its old name and its new one: give {new} alone")
    errors.print(f"warning: {old} is deprecated: its value is read as {new}, its new name", highlight=False,
                 soft_wrap=True)
    return value


@click.group()
@click.version_option(version("completer"), prog_name="completer")
@click.option("-v", "--verbose", is_flag=True, help="Log llama.cpp and the engine to stderr.")
def main(verbose: bool) -> None:
    """Local code completion with lossless speculative decoding."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")


@main.group()
def models() -> None:
    """List, download and inspect models."""


def _file_state(preset: Preset) -> tuple[str, str]:
    """(target state, draft state) as 'cached', 'missing', or what would happen on first use."""
    from completer.models.resolve import cached_path

    try:
        target = cached_path(preset.target)
    except ModelError:
        return "missing package", "-"
    if isinstance(preset.draft, NoDraft):
        return ("cached" if target else "missing"), "none"
    draft = cached_path(preset.draft, target) if target else None
    return ("cached" if target else "missing"), ("cached" if draft else "missing")


def _cache_state(preset: Preset) -> str:
    target_state, draft_state = _file_state(preset)
    return f"target {target_state}, draft {draft_state}"


# What `models list` shows of each model found on this machine.
FOUND_COLUMNS = ("model", "architecture", "parameters", "quantization", "size", "context", "FIM", "kind",
                 "vocabulary", "file")


def _found_row(model) -> tuple[str, ...]:
    facts = model.facts
    return (model.name, facts.architecture, f"{facts.parameters / 1e6:,.0f}M", facts.quantization,
            f"{facts.size_bytes / 2**20:,.0f} MiB", f"{facts.context_length:,}", "yes" if facts.has_fim else "no",
            "instruct" if facts.is_chat else "base", f"{facts.vocabulary_id} ({facts.n_tokens:,} tokens)",
            str(model.path))


@models.command("list")
@JSON_OPTION
def models_list(as_json: bool) -> None:
    """Presets, their files and whether those are in the cache; then every GGUF model
    already on this machine (Ollama, LM Studio, the Hugging Face cache, llama.cpp's cache,
    completer's cache), by the name --target and --draft take. Stores are only read."""
    from completer.models.stores import scan

    presets = [(preset.name, preset.target.describe(), preset.draft.describe(), _cache_state(preset), preset.why)
               for preset in PRESETS.values()]
    found = scan()
    found_rows = [_found_row(model) for model in found.found]
    if as_json:
        click.echo(json.dumps({"presets": tables.json_data(PRESET_COLUMNS, presets),
                               "found": tables.json_data(FOUND_COLUMNS, found_rows), "skipped": found.skipped},
                              indent=1))
        return
    tables.show(console, PRESET_COLUMNS, presets)
    click.echo(f"cache: {cache_dir()}")
    if found_rows:
        tables.show(console, FOUND_COLUMNS, found_rows, title="found on this machine (--target NAME, --draft NAME)")
    else:
        click.echo("found on this machine: none (Ollama, LM Studio, the Hugging Face cache and llama.cpp's cache "
                   "were looked in)")
    for line in found.skipped:
        errors.print(f"skipped: {line}", markup=False, highlight=False, soft_wrap=True)


@models.command("pull")
@click.argument("preset")
@_reports_model_errors
def models_pull(preset: str) -> None:
    """Download (or derive) a preset's target and draft into the cache."""
    from completer.models.resolve import resolve

    files = resolve(Preset.from_name(preset))
    click.echo(f"target: {files.target}\ndraft:  {files.draft}")


def _describe_file(path: Path) -> list[tuple[str, str]]:
    """(field, value) rows about a GGUF file."""
    from completer.models.llama import LlamaModel
    from completer.models.gguf_file import check_gguf
    from completer.models.pairing import suitability_notes

    header = check_gguf(path)
    model = LlamaModel(path, n_gpu_layers=0, vocab_only=True)
    special = model.special
    rows = [("architecture", header.architecture), ("name", header.name or "-"), ("file type", header.file_type),
            ("size", f"{header.size_bytes / 2**20:.1f} MiB"), ("layers", str(header.layers)),
            ("embedding", str(header.n_embd)), ("trained context", str(header.context_length)),
            ("vocabulary", f"{model.n_vocab} tokens ({header.tokenizer_model})")]
    fim = ", ".join(
        f"{name}={getattr(special, name)}"
        for name in ("fim_prefix", "fim_suffix", "fim_middle", "fim_pad", "fim_repo", "file_separator")
        if getattr(special, name) is not None
    )
    rows += [("FIM tokens", fim if special.has_fim else f"none (prefix-only prompts){'; ' + fim if fim else ''}"),
             ("end tokens", f"eos={special.eos} eot={special.eot}"), *_memory_rows(path, model.memory)]
    rows += [("note", note) for note in suitability_notes(path.name, path, special.has_fim)]
    model.close()
    return rows


def _memory_rows(path: Path, memory: str) -> list[tuple[str, str]]:
    """The model's attention, how the engine cuts what it holds (a rejected draft, an
    edit), and what its KV cache takes at the default context."""
    from completer.engine.generation import ROLLBACK_TOKENS
    from completer.models.llama import HYBRID, RECURRENT, ROLLBACK_ARCHITECTURES
    from completer.models.gguf_file import model_facts

    facts = model_facts(path)
    n_ctx = ModelOptions().context_tokens
    attention = "full"
    cuts = "anywhere: attention cells are dropped from the cut on"
    if facts.sliding_window:
        # The engine's contexts keep a full-size cache on the window layers too (swa_full
        # in models/llama.py): a cut anywhere stays exact, at that memory.
        attention = (f"sliding window of {facts.sliding_window:,} tokens on some layers; their cache is kept "
                     "full-size, so a cut anywhere (a rejected draft, an edit) stays exact")
    rows = []
    if memory in (HYBRID, RECURRENT):
        attention = ("hybrid: recurrent layers and attention layers" if memory == HYBRID
                     else "recurrent: no attention, a state that sums up the text")
        checkpoints = ("checkpoints of the recurrent state (cache.checkpoint_mb), and the tokens after one "
                       "evaluated again")
        cuts = (f"with GPU layers, a rejected draft of up to {ROLLBACK_TOKENS - 1} tokens: llama.cpp's rollback; "
                f"every other cut (all on the CPU, where the rollback costs more than it saves): {checkpoints}"
                if facts.architecture in ROLLBACK_ARCHITECTURES
                else f"{checkpoints} (llama.cpp has no rollback for {facts.architecture})")
        rows = [("trees, candidates", "off: llama.cpp cannot share part of a recurrent state between sequences")]
    kv_mib = facts.kv_bytes_per_token * n_ctx / 2**20
    return [("attention", attention), ("cuts", cuts), *rows,
            ("KV cache", f"{facts.kv_bytes_per_token / 1024:.1f} KiB a token, {kv_mib:,.0f} MiB at {n_ctx:,} tokens "
                         "(models.context_tokens), per context")]


@models.command("info")
@click.argument("path_or_preset")
@click.option("--time", "measure", is_flag=True, help="Also load the weights and time prefill and one decode step.")
@click.option("--threads", default=0, help="CPU threads for --time; 0 = all cores.")
@_reports_model_errors
def models_info(path_or_preset: str, measure: bool, threads: int) -> None:
    """Architecture, layers, vocabulary, FIM tokens, attention and KV memory of a GGUF file,
    a model `completer models list` found (its name), or a preset's pair."""
    from completer.models.resolve import model_path, resolve

    if path_or_preset in PRESETS:
        files = resolve(Preset.from_name(path_or_preset))
        paths = [path for path in (files.target, files.draft) if path is not None]
    else:
        paths = [model_path(path_or_preset)]
    for path in paths:
        tables.show(console, None, _describe_file(path), title=str(path))
        if measure:
            from completer.models.timing import time_model

            timing = time_model(path, threads=threads)
            console.print(
                f"load {timing.load_ms:.0f} ms · prefill {timing.prefill_tokens_per_s:.0f} tok/s "
                f"({timing.prompt_tokens} tokens) · one decode step {timing.decode_ms:.2f} ms "
                f"(median of {timing.steps})", soft_wrap=True
            )


@main.command()
@click.option("--preset", default=ModelOptions().preset, show_default=True, help="Preset whose target teaches.")
@click.option("--target", "target_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Target GGUF file, instead of the preset's.")
@click.option("--data", "data_paths", multiple=True, required=True,
              type=click.Path(exists=True, path_type=Path),
              help="Repository, folder or file to learn from (repeatable). .gitignore, vendored and generated "
                   "files are skipped.")
@click.option("--layers", default=DistillSettings.layers, show_default=True, type=click.IntRange(min=1),
              help="Blocks in the draft.")
@click.option("--init", type=click.Choice(INITS), default=DistillSettings.init, show_default=True,
              help="What the draft starts as: the target's first L-1 blocks and its last one, or its first L.")
@click.option("--minutes", type=click.FloatRange(min=0, min_open=True), help="Training time budget.")
@click.option("--steps", type=click.IntRange(min=1), help="Optimizer steps (with --minutes: whichever ends first).")
@click.option("--loss", type=click.Choice(LOSSES), default=DistillSettings.loss, show_default=True,
              help="tv: total variation, 1 - acceptance; kl: forward KL.")
@click.option("--top-token-weight", type=click.FloatRange(min=0), default=DistillSettings.top_token_weight,
              show_default=True, help="Weight of the target's most likely token's cross-entropy, added to the loss: "
                                      "at temperature 0 only that token is accepted.")
@click.option("--quantize", type=click.Choice(list(QUANTIZE_TYPES)), default=DistillSettings.quantize,
              show_default=True, help="Type of the exported draft's block weights.")
@click.option("--teacher", type=click.Choice(TEACHERS), default=DistillSettings.teacher, show_default=True,
              help="torch: the target in torch, batched (fast); llama.cpp: the target as served. Held-out figures "
                   "always come from llama.cpp.")
@click.option("--precision", type=click.Choice(PRECISIONS), default=DistillSettings.precision, show_default=True,
              help="Matrix products in bfloat16 or float32; auto: bfloat16 where the hardware has it (AMX, "
                   "AVX512-BF16, GPUs).")
@click.option("--seed", default=DistillSettings.seed, show_default=True)
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the draft here instead of the cache (then it is not `--draft distilled`).")
@_reports_model_errors
def distill(preset: str, target_path: Path | None, data_paths: tuple[Path, ...], layers: int, init: str,
            minutes: float | None, steps: int | None, loss: str, top_token_weight: float, quantize: str, teacher: str,
            precision: str, seed: int, out_path: Path | None) -> None:
    """Train a draft on your code so the target accepts more of what it drafts.

    The draft starts as blocks of the target (--init) and learns the target's
    next-token distribution on the source files under --data (a tenth of the files held
    out to measure acceptance). Needs torch: pip install 'completer[distill]'. Ctrl-C
    stops training early and still exports what was learnt."""
    if minutes is None and steps is None:
        raise click.UsageError("say when to stop: --minutes M or --steps N")
    try:
        import torch
    except ImportError:
        raise click.ClickException("distillation needs torch: pip install torch==2.13.0 (the CPU wheel), "
                                   "or pip install 'completer[distill]'") from None
    from completer.bench.holes import LANGUAGES
    from completer.models.llama import LlamaModel
    from completer.models.distill import (Distiller, LlamaCppTeacher, TorchTeacher, build_corpus, corpus_files,
                                          export_draft, llama_cpp_agreement, load_student, uses_bfloat16)
    from completer.models.paths import distilled_draft_path
    from completer.models.resolve import resolve

    settings = DistillSettings(layers=layers, init=init, minutes=minutes, steps=steps, loss=loss,
                               top_token_weight=top_token_weight, quantize=quantize, teacher=teacher,
                               precision=precision, seed=seed)
    target = resolve(Preset.from_name(preset), target_path, with_draft=False).target
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    teacher_model = LlamaModel(target, "auto")
    files = corpus_files(list(data_paths), LANGUAGES)
    corpus = build_corpus(files, teacher_model.tokenize, settings)
    number_format = "bfloat16" if uses_bfloat16(precision, device) else "float32"
    errors.print(f"{target.name} ({teacher}) teaches a {layers}-block draft ({init.replace('-', ' ')} blocks) on "
                 f"{device} in {number_format}: "
                 f"{len(corpus.train)} windows of {settings.window} tokens from {corpus.train_files} files, "
                 f"{len(corpus.held_out)} held out from {corpus.held_out_files}", highlight=False)
    served = LlamaCppTeacher(teacher_model, settings)
    trainer = TorchTeacher(target, settings, device) if teacher == "torch" else served
    distiller = Distiller(load_student(target, settings, device), trainer, corpus, settings, device, judge=served)
    total = steps if minutes is None else minutes * 60
    unit = "steps" if minutes is None else "s"
    result = _run_distiller(distiller, total)
    destination = out_path or distilled_draft_path(target)
    export_draft(target, distiller.student, quantize, destination)
    before, after = result.before, result.after
    click.echo(f"{'stopped early: ' if result.interrupted else ''}{result.steps} steps, {result.tokens:,} tokens "
               f"in {result.seconds / 60:.1f} min ({unit} budget {total:g})")
    click.echo(f"held-out acceptance at T=0: {before.greedy_acceptance:.3f} -> {after.greedy_acceptance:.3f}; "
               f"sampled (1 - TV): {before.acceptance:.3f} -> {after.acceptance:.3f}")
    # The file is what will draft: measured again through llama.cpp, after quantization.
    exported = llama_cpp_agreement(teacher_model, destination, distiller.evaluated)
    click.echo(f"held-out acceptance at T=0 of the exported {quantize} file, through llama.cpp: {exported:.3f}")
    click.echo(f"draft: {destination}")
    if out_path is None:
        click.echo("use it: --draft distilled (models.draft = \"distilled\" in an editor); `completer bench "
                   f"--preset {preset}` now runs draft:distilled and hybrid:distilled beside draft and hybrid")


def _run_distiller(distiller, total: float):
    """Train, with a progress bar on stderr (a line every 25 steps when stderr is a log
    file, not a terminal); `total` is the budget in the bar's unit (steps or seconds)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), TextColumn("{task.fields[line]}"))
    with Progress(*columns, console=errors) as progress:
        task = progress.add_task("distilling", total=total, line="measuring the held-out files")

        def show(report, loss_value: float, done: float) -> None:
            held_out = report.history[-1][1]
            line = (f"step {report.steps} · {report.tokens:,} tokens · loss {loss_value:.3f} · held-out "
                    f"acceptance {held_out.greedy_acceptance:.2f} at T=0, {held_out.acceptance:.2f} sampled "
                    f"(step {report.history[-1][0]})")
            progress.update(task, completed=done * total, line=line)
            if not errors.is_terminal and (report.steps == 1 or report.steps % 25 == 0):
                errors.print(line, highlight=False)

        return distiller.run(show)


@main.command("build")
@click.option("--jobs", type=click.IntRange(min=1), help="Compiler processes.  [default: every core]")
@_reports_model_errors
def build_llama_cpp(jobs: int | None) -> None:
    """Build llama.cpp for this machine's accelerator and CPU (COMPLETER_GPU chooses) from
    the source the installed llama-cpp-python ships, once: the library completer loads,
    llama-server (bench's peer, a team server) and ggml-rpc-server (an RPC device), into
    the cache, and link the bindings to it. `make demo` runs it; run it again after
    changing COMPLETER_GPU. Needs cmake, a C++ compiler and PyPI; prints the build's
    folder."""
    from completer.models.llama_build import build

    with errors.status("building llama.cpp") as status:
        folder, compiled = build(lambda message: status.update(message) if errors.is_terminal else
                                 errors.print(message, highlight=False), jobs)
    click.echo(f"{'built' if compiled else 'cached'}: {folder}")


def _llama_server_state() -> str:
    from completer.models.llama_build import LlamaBuildError, find

    try:
        found = find()
    except LlamaBuildError as error:
        return str(error)
    return str(found) if found else f"none (`{BUILD_COMMAND}` builds one for bench's peers)"


def _build_rows() -> list[tuple[str, str]]:
    """The one llama.cpp build the bindings load: its folder and the flags it was made with."""
    from completer.models.llama_build import ARGS_FILE, linked_build

    folder = linked_build()
    if folder is None:
        return [("llama.cpp build folder", f"none: llama-cpp-python loads a library of its own build "
                 f"(`{BUILD_COMMAND}` builds the one the bindings, llama-server and ggml-rpc-server share)")]
    args = folder / ARGS_FILE
    return [("llama.cpp build folder", str(folder)),
            ("llama.cpp build flags", args.read_text().strip() if args.is_file() else "not recorded")]


def _doctor_rows(rpc_servers: str) -> list[tuple[str, str]]:
    from completer.models.accelerator import BuildChoiceError
    from completer.models.accelerator import choose as choose_accelerator
    from completer.models.llama import default_threads, system_info
    from completer.models.devices import add_rpc_servers, backends, devices

    build = system_info()
    rows = [("completer", version("completer")), ("llama-cpp-python", version("llama_cpp_python")),
            *_build_rows(), ("llama.cpp build", build), ("llama.cpp backends", ", ".join(backends()))]
    if "AMX_INT8 = 1" in build:
        rows.append(("warning", "this llama.cpp build uses AMX, which some virtual machines advertise but fault "
                     "on (SIGILL at the first completion). If that happens, build llama.cpp without it: "
                     f"`{BUILD_COMMAND}`"))
    try:
        warnings = add_rpc_servers(rpc_servers)
        if warnings:
            rows.append(("RPC servers", "; ".join(warnings)))
    except (ModelError, ValueError) as error:
        rows.append(("RPC servers", str(error)))
    seen = devices()
    rows += [(f"device {device.name}", device.summary()) for device in seen]
    offload = [device.name for device in seen if device.offloads]
    rows.append(("GPU offload", f"yes: layers go to {', '.join(offload)}" if offload else
                 "no: no GPU or RPC device, all layers on the CPU"))
    try:
        machine = choose_accelerator()
    except BuildChoiceError as error:
        rows.append(("accelerator", str(error)))
    else:
        rows.append(("accelerator", f"{machine.accelerator}: {machine.reason}"))
        local = [device for device in seen if device.offloads and device.backend != "RPC"]
        if not local and machine.accelerator != "cpu":
            rows.append(("rebuild for the GPU", f"this build cannot use the {machine.accelerator} device: "
                         f"COMPLETER_GPU={machine.accelerator} {BUILD_COMMAND}"))
    rows += [("threads", f"{default_threads()} (cores this process may use)"),
             ("cache directory", str(cache_dir())),
             ("KV cache budget", f"{CacheOptions().budget_mb:.0f} MB for documents not being completed "
              "(cache.budget_mb)"),
             ("llama-server", _llama_server_state())]
    return rows + [(f"preset {preset.name}", _cache_state(preset)) for preset in PRESETS.values()]


def _definitions_row() -> tuple[str, str]:
    """The definitions index of the repository around the current directory, built as the
    language server builds it: its size against context.definitions_mb and its time."""
    from completer.engine.definitions import LANGUAGES
    from completer.engine.definitions_index import DefinitionsIndex
    from completer.workspace import Workspace

    options = ContextOptions()
    root = _repository_root()
    index = DefinitionsIndex(Workspace([root]), options.exclude_patterns, int(options.definitions_mb * 2**20))
    stats = index.build()
    left_out = f"; {stats.left_out} files over the bound left out" if stats.left_out else ""
    return (f"definitions index ({root})",
            f"{stats.definitions:,} definitions in {stats.files:,} files, {stats.bytes / 2**20:.1f} MB of "
            f"{options.definitions_mb:.0f} (context.definitions_mb), built in {stats.build_ms / 1000:.1f} s"
            f"{left_out}; languages: {', '.join(sorted(set(LANGUAGES.values())))}")


def _server_row(models: ModelOptions) -> tuple[str, str]:
    """The configured server: reachable, its model, slots, FIM family and the speculative
    settings it reports; or why it cannot be used."""
    from completer.errors import ServerError
    from completer.loading import server_api

    try:
        api = server_api(models, os.environ)
        return f"server ({models.decoder})", f"{api.url}: {api.connect().summary(api.speculation())}"
    except ServerError as error:
        return f"server ({models.decoder})", f"cannot be used: {error}"


def _target_rows(models: ModelOptions) -> list[tuple[str, str]]:
    """The target the options name (with --target, that file; else the preset's, if in
    the cache: doctor downloads nothing): its file, attention and KV memory, and what
    it is good for as a completer."""
    from completer.models.llama import LlamaModel
    from completer.models.pairing import suitability_notes
    from completer.models.resolve import resolve

    try:
        files = resolve(Preset.from_name(models.preset), models.target, download=False, with_draft=False)
        model = LlamaModel(files.target, n_gpu_layers=0, vocab_only=True)
    except ModelError as error:
        return [("target", str(error))]
    has_fim, memory = model.special.has_fim, model.memory
    model.close()
    notes = suitability_notes(files.names[0], files.target, has_fim)
    return [("target", str(files.target)), *_memory_rows(files.target, memory),
            ("target notes", "; ".join(notes) or "none: a base model with FIM tokens")]


@main.command()
@JSON_OPTION
@_config_flags("models", only=("rpc_servers", "decoder", "server_url", "preset", "target"))
def doctor(as_json: bool, models: ModelOptions) -> None:
    """llama.cpp build, GPU offload, threads, cache directory and each preset's state, the
    definitions index of the repository here (its size and build time), the target
    (--preset or --target; from the cache only): its attention, KV memory and what it is
    good for, and the devices llama.cpp sees (with --rpc, RPC servers' too);
    with --decoder and --server-url, the server: its model, slots and speculative
    settings."""

    rows = _doctor_rows(models.rpc_servers) + [_definitions_row()]
    if models.decoder in SERVER_DECODERS:
        rows.insert(0, _server_row(models))
    else:
        rows += _target_rows(models)
    tables.show(console, None, rows, as_json=as_json)


# Seconds `complete` reads the definitions of FILE's work tree for, at most: one completion
# should not wait minutes on a large repository.
COMPLETE_INDEX_S = 10.0


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--line", type=click.IntRange(min=1), required=True, help="Cursor line, 1-based as editors show it.")
@click.option("--col", type=click.IntRange(min=1), required=True, help="Cursor column, 1-based, in characters.")
@_config_flags("generation", only=("max_tokens", "draft_mode", "temperature", "time_budget_ms"))
@click.option("--stats", is_flag=True, help="Also print token counts, timings and acceptance to stderr.")
@click.option("--show-prompt", is_flag=True, help="Also print to stderr the prompt the model saw, control tokens "
              "included, after its sections: each other file it shows and why (a definition the code at the cursor "
              "calls, and how it was found).")
@_config_flags("models")
@_reports_model_errors
def complete(file: Path, line: int, col: int, generation: GenerationOptions, stats: bool, show_prompt: bool,
             models: ModelOptions) -> None:
    """Print a completion of FILE at the cursor, decoded speculatively. FILE's git work tree
    (else its folder) is the workspace: the prompt shows the definitions the code at the
    cursor calls from its other files."""
    from completer.errors import PositionError
    from completer.loading import load_completer
    from completer.models.sources import work_tree_top
    from completer.requests import CompletionRequest, Source, cursor_offset

    config = replace(Config(), models=models, generation=generation)
    text = file.read_text(encoding="utf-8", errors="replace")
    try:
        cursor = cursor_offset(text, line - 1, col - 1)
    except PositionError:
        raise click.BadParameter(f"{file} has no line {line} column {col} (it has {len(text.splitlines())} "
                                 "lines, counted from 1)", param_hint="--line/--col") from None
    root = work_tree_top(file) or file.resolve().parent
    loaded = load_completer(config, [root])
    for warning in loaded.warnings:
        errors.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
    if not loaded.completer.repository.build(within_s=COMPLETE_INDEX_S):
        errors.print(f"note: the definitions index read the most recently modified files of {root} for "
                     f"{COMPLETE_INDEX_S:.0f} s, not all of them: a definition in another is not in the prompt (the "
                     "language server reads them all, in the background)", markup=False, highlight=False,
                     soft_wrap=True)
    # Its path whole, as an editor's is: imports are resolved from it ("imported", not "same name").
    path = str(file.resolve())
    request = CompletionRequest(path, path, text, cursor, file.suffix.lstrip("."))
    completion = loaded.completer.complete(request)
    if completion.source == Source.SERVER_DOWN:
        raise click.ClickException(completion.warning)
    click.echo(completion.text)
    if show_prompt:
        sections = [f"  {section.path}: {section.why}" for section in completion.context]
        errors.print("\n".join(["prompt sections (other files, as the prompt shows them):", *sections,
                                f"  {file}: the file being completed", "prompt:",
                                loaded.completer.prompt_text(completion.prompt)]),
                     markup=False, highlight=False, soft_wrap=True)
    for note in loaded.notes:
        errors.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    if stats:
        _print_completion_stats(completion, loaded, generation.draft_mode)


def _print_completion_stats(completion, loaded, draft_mode: str) -> None:
    """complete --stats: token counts, timings and acceptance, the server's or the engine's."""
    from completer.bench.report import model_files

    if completion.result is None:  # no prompt fits, a refusal: the warning said why
        errors.print(f"nothing decoded ({completion.source}); {completion.warning}", highlight=False, soft_wrap=True)
        return
    if loaded.pair is None:
        remote = completion.result
        timings = remote.timings
        errors.print(
            f"{remote.tokens_cached + remote.tokens_evaluated} prompt tokens ({remote.tokens_evaluated} "
            f"evaluated by the server); {timings.get('predicted_n', 0)} tokens, "
            f"{timings.get('predicted_per_second', 0):.1f} tok/s on the server, "
            f"{timings.get('draft_n_accepted', 0)}/{timings.get('draft_n', 0)} drafted tokens accepted; "
            f"stop: {completion.stop_reason}; {loaded.names[0]} at {loaded.decoder.url}",
            highlight=False, soft_wrap=True)
        return
    s = completion.result.stats
    errors.print(
        f"{completion.prompt_tokens} prompt tokens; {s.tokens} tokens in {s.total_ms:.0f} ms "
        f"({s.tokens_per_second:.1f} tok/s, mode {draft_mode}, {s.target_passes} target passes, "
        f"{s.accepted}/{s.drafted} drafted "
        f"tokens accepted; stop: {completion.stop_reason}; {model_files(loaded.pair.files)}, "
        f"load {loaded.pair.target.load_ms:.0f} ms)",
        highlight=False,
        soft_wrap=True,
    )


@main.command()
@click.option("--stdio", "transport", flag_value="stdio", default=True, help="Speak LSP on stdin/stdout (default).")
@click.option("--tcp", "transport", flag_value="tcp", help="Listen on 127.0.0.1 instead (one client).")
@click.option("--port", default=2087, show_default=True, type=click.IntRange(1, 65535), help="Port for --tcp.")
@_config_flags("models", only=tuple(name.removeprefix("models.") for name in machine_options()
                                   if name.startswith("models.")))
@_config_flags("context", only=("exclude",))
def serve(transport: str, port: int, models: ModelOptions, context: ContextOptions) -> None:
    """Run the language server; editors start it as `completer serve --stdio`.

    Options come from the client's initializationOptions and didChangeConfiguration
    (the names of docs/options.md's table), but for the machine-level ones (where
    code and keys go, which model files load): a workspace's settings reach the server
    that way, so those come from these flags only. Logs go to stderr and
    window/logMessage."""
    logging.getLogger("completer").setLevel(logging.INFO)
    from completer.lsp.server import ResyncingInput, keep_large_buffers_off_the_heap, server

    server.config = Config(models=models, context=context)
    keep_large_buffers_off_the_heap()
    if transport == "tcp":
        server.start_tcp("127.0.0.1", port)  # loopback only: nothing leaves the machine
    else:
        server.start_io(stdin=ResyncingInput(sys.stdin.buffer))


def _repository_root() -> Path:
    """The git work tree around the current directory, else the current directory (found
    without running git: a repository's config can make git run its programs)."""
    from completer.models.sources import work_tree_top

    return work_tree_top(Path.cwd()) or Path.cwd()


# bench's options for our own engines, which a server's bench cannot take.
SERVER_BENCH_REFUSES = ("modes", "llama_server_path", "profile", "plot_path", "typing", "exact", "copy_target")
# bench's options that a next-edit bench cannot take.
EDIT_BENCH_REFUSES = ("max_tokens", "plot_path", "typing", "baseline_url", "copy_target", "pick", "with_context")


def _show_bench_table(summary: dict, title: str, as_json: bool, edits: bool = False) -> None:
    """The summary per mode: as JSON, as the wide table on a terminal, or as plain rows with every value whole."""
    from completer.bench import report

    columns = report.EDIT_COLUMNS if edits else report.COLUMNS
    if as_json:
        click.echo(json.dumps(report.json_rows(summary, columns), indent=1))
        return
    if console.is_terminal:
        # A console narrower than the table would fold every cell.
        Console(width=max(console.width, report.TABLE_WIDTH)).print(report.table(summary, title, columns))
    else:
        click.echo(f"{title}\n{tables.plain_rows(report.headers(columns), report.rows(summary, columns))}")
    console.print(report.EDIT_FOOTNOTE if edits else report.FOOTNOTE, soft_wrap=True)


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--modes", help="Comma-separated modes; target, the baseline, is always run. When `completer distill` "
              "has trained a draft for the target, draft:distilled and hybrid:distilled run beside draft and hybrid.  "
              f"[default: {','.join(BENCH_MODES)}, and {','.join(LLAMA_SERVER_PEERS)} when there is a llama-server]")
@click.option("--llama-server", "llama_server_path", type=click.Path(path_type=Path),
              help=f"The llama-server to run the peers with (default: $COMPLETER_LLAMA_SERVER, else the one "
                   f"`{BUILD_COMMAND}` made).")
@click.option("--profile", is_flag=True, help="Also split each of our modes' generation time per target pass: "
              "llama_decode, copying logits out of llama.cpp, and the rest (numpy, the tuner, Python).")
@click.option("--n", "count", type=click.IntRange(min=1), help="Holes.  [default: 40; 6 with --quick]")
@click.option("--seed", default=1, show_default=True, help="Seed for picking holes.")
@click.option("--max-tokens", type=click.IntRange(min=1), help="Tokens each mode generates per hole (no early "
              "stop: the same work for all).  [default: 48; 24 with --quick]")
@click.option("--temperature", default=0.0, show_default=True, type=click.FloatRange(min=0))
@click.option("--holes", "holes_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Replay the holes of an earlier run's JSON instead of picking new ones.")
@click.option("--pick", type=click.Choice(PICKS), default="random", show_default=True,
              help="How holes are picked: random, or cross-file (after CrossCodeEval): of the random candidates, by "
              "the same seed, those whose real text writes an identifier that another file of the repository defines "
              "and the hole's own file does not.")
@click.option("--with-context", type=click.Choice(WITH_CONTEXT), default="definitions",
              show_default=True, help="What the prompts show of other files: definitions (the product's default: "
              "those the code before the cursor calls, from the repository's definitions index, never the hole's own "
              "file's), or none. ring is the open files' chunks alone, without definitions: the bench opens no files, "
              "so it runs as none.")
@click.option("--report", "report_path", default="completer-bench.json", show_default=True,
              type=click.Path(path_type=Path), help="Where to write, as JSON, every per-hole record, the machine and "
              "the settings.")
@click.option("--json", "as_json", is_flag=True, help="Print the table's data as JSON (the notes go to stderr).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw speedup per mode and acceptance per hole kind (needs the plot extra).")
@click.option("--typing", is_flag=True, help="Also replay typing: keystroke to completion, cached against cold.")
@click.option("--quick", is_flag=True, help="6 holes of 24 tokens: a first look in a few minutes.")
@click.option("--exact", is_flag=True, help="The target scores a verify batch one token per decode, as plain steps "
              "do: greedy speculation must then equal target token for token (no near ties), and runs slower.")
@click.option("--copy-target", type=click.FloatRange(0, 1, min_open=True), metavar="FRACTION",
              help="Our modes that look up n-grams (ngram, hybrid, auto) draft by copying target's own greedy tokens, "
              "FRACTION of them right (one in round(1 / (1 - FRACTION)) changed: 0.8, every 5th), so what is accepted "
              "is set by the run, not by the models (a random-weight model's text is in no prompt). Measures what "
              "rejections cost on the target; with --exact, the copy stays in step with the output.")
@click.option("--baseline-url", help="With --decoder llama-server: a server of the same model without "
              "speculation, the `target` row the server's speedup is over.")
@click.option("--edits", "edit_holes", is_flag=True, help="Measure next-edit suggestions: edits cut from the "
              "repositories' git history (a commit's changes to a file in two or more places within the editable "
              "region: all but one made, one left to predict), each mode writing the region again.")
@_config_flags("models")
@_config_flags("drafting", only=("index_mb", "tree_branches"))
@_config_flags("edits", only=("format",))
@_reports_model_errors
def bench(paths: tuple[Path, ...], modes: str | None, llama_server_path: Path | None, profile: bool,
          count: int | None, seed: int, max_tokens: int | None, temperature: float, holes_file: Path | None,
          pick: str, with_context: str, report_path: Path, as_json: bool, plot_path: Path | None, typing: bool,
          quick: bool, exact: bool, copy_target: float | None, baseline_url: str | None, edit_holes: bool,
          models: ModelOptions, drafting: DraftingOptions, edits: NextEditOptions) -> None:
    """Measure what speculation and caching buy on your code: every mode side by side.

    PATHS are repositories or folders (default: the current repository). Holes are
    spread over their source files by language; .gitignore, generated, vendored and
    binary files are skipped. With --decoder llama-server --server-url URL, the same
    holes and table on that server. With --edits, next edits from the repositories'
    git history instead (read without running git)."""
    from completer.bench.command import (BenchPlan, BenchRefused, Terminal, bench_edits, bench_local, bench_server,
                                         holes_to_run)
    from completer.bench.peers import PeerFailed

    max_tokens = max_tokens or (24 if quick else 48)
    count = count or (6 if quick else 40)
    roots = list(paths) or [_repository_root()]
    # With --json, stdout holds the JSON alone: the notes go to stderr.
    terminal = Terminal(errors, errors if as_json else console, functools.partial(_show_bench_table, as_json=as_json))
    plan = BenchPlan(roots=roots, modes=modes, llama_server_path=llama_server_path, profile=profile, seed=seed,
                     temperature=temperature, report_path=report_path, exact=exact, models=models, drafting=drafting)
    try:
        if edit_holes:
            _refuse_given(EDIT_BENCH_REFUSES, "not with --edits: a rewrite's budget is its region's, and the bench "
                          "has no typing replay, figure, baseline server, cross-file picking or context choice for "
                          "next edits")
            if models.decoder in SERVER_DECODERS:
                raise click.UsageError("--edits measures the local engines and llama-server beside them, not a team "
                                       "server")
            bench_edits(terminal, replace(plan, count=count, holes_file=holes_file, edits=edits))
            return
        _refuse_given(("format",), "only with --edits")
        if holes_file:
            _refuse_given(("pick",), "not with --holes: the holes come as the report picked them, their cross-file "
                          "identifiers with them")
        holes = holes_to_run(roots, holes_file, count, seed, pick)
        if models.decoder in SERVER_DECODERS:
            if models.decoder != LLAMA_SERVER:
                raise click.UsageError("bench measures a server through llama-server's own API (its tokens and "
                                       "timings): --decoder llama-server")
            _refuse_given(SERVER_BENCH_REFUSES, "not with --decoder llama-server, which times the server's own "
                          "decoding alone (its row, and target with --baseline-url): no local modes, peers, typing "
                          "replay, exact verification, profile or figure")
            bench_server(terminal, models, baseline_url, holes, max_tokens, temperature, report_path, with_context)
            return
        _refuse_given(("baseline_url",), "only with --decoder llama-server, whose rows it adds to")
        bench_local(terminal, replace(plan, max_tokens=max_tokens, plot_path=plot_path, typing=typing,
                                      copy_target=copy_target or 0.0, with_context=with_context), holes)
    except BenchRefused as error:
        if error.option:
            raise click.BadParameter(str(error), param_hint=error.option) from None
        raise click.UsageError(str(error)) from None
    except PeerFailed as error:  # the team server did not answer, or stopped
        raise click.ClickException(str(error)) from None


def _refuse_given(names: tuple[str, ...], why: str) -> None:
    """A usage error naming each of the command's options `names` given on the command
    line, which cannot apply: `why`."""
    context = click.get_current_context()
    given = [param.opts[0] for param in context.command.params
             if param.name in names and context.get_parameter_source(param.name) is ParameterSource.COMMANDLINE]
    if given:
        raise click.UsageError(f"{', '.join(given)}: {why}", context)
