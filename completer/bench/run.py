"""Running the modes side by side on holes.

    the repositories' definitions index built first (--with-context definitions), as
    an editor's Completer builds its workspace's
    for each hole, modes in an order rotated per hole (machine drift hits all alike):
        prompt = the session's prompt for the file with the hole's truth taken out (the
                 same for every mode; no healing, which the peer cannot do), with the
                 definitions of other files the code before the cursor calls (never the
                 hole's own file's: the index read it with the truth in it); prefilled
                 outside the timing
        time `max_tokens` new tokens, no early stop, so every mode makes the same work
        shown = the post-processed text, compared with the hole's truth (its first line
                for line holes, all of it for blocks), and the hole's cross-file
                identifiers it writes
        identical to target's tokens? where not (at T=0), the gap between the two
        tokens that parted, in target's own logits there, says whether it is a near
        tie (numerics) or not; with --exact (one token per target decode) every
        difference is a bug

Every engine is built by completer.loading from the run's Config, as the editor's is
(models.threads, the GPU fit). The peers (completer.bench.peers) get the same target
file, prompts, token budget, temperature and threads. A peer that fails to start, or
stops answering, is marked failed with its reason, and the run goes on without it; a
hole a peer answered but cannot be timed on fairly is left out of its row, and a line
under the table says why.
"""

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np

from completer.bench import MODES, NO_INDEX, PEER, PEERS
from completer.bench.holes import Hole
from completer.bench.metrics import cross_file_written
from completer.bench.peers import LlamaServer, PeerFailed, PromptLookupPeer, Untimed
from completer.config import Config
from completer.decoders.local import LocalDecoder
from completer.editor.inline import PromptContext
from completer.editor.postprocess import CursorContext, postprocess
from completer.engine.drafts import CopyDrafter
from completer.engine.generation import Engine, GenerationRequest, generate
from completer.engine.speculative import Sampling, first_parting, parting_gap
from completer.engine.workspace_index import NO_MATCH, IndexStats, Match, saved_index_path
from completer.errors import PositionError
from completer.loading import Pair, completer_over, engine_for
from completer.models.llama import LlamaContext, LlamaModel
from completer.requests import CompletionRequest, cursor_offset
from completer.workspace import Workspace

# 128 lines before the cursor: prompts of about 1,000-1,500 tokens, so that each hole's
# prefill (done once per mode family, and again by the peer) stays a small part of a
# bench on a CPU (docs/bench.md, "The README's headline", has its time on one).
PREFIX_LINES = 128
# The most likely tokens of a row whose logits the tie bound watches: a greedy flip is
# between the top token and one close to it.
TIE_CONTENDERS = 8


@dataclass(frozen=True)
class Settings:
    """What a run is asked for. `config`: the options every engine and prompt is made
    with, as an editor's completer would have them (models.preset, context_tokens and
    threads; generation.max_tokens and temperature; drafting.index_mb and tree_branches),
    its defaults the Config's."""

    config: Config = field(default_factory=Config)
    modes: tuple[str, ...] = MODES
    # The target decodes a verify batch one token per llama_decode, as plain steps do:
    # greedy output must then equal target's exactly, and no difference is a near tie.
    exact: bool = False
    # Above 0: the modes that look up n-grams draft by copying target's own greedy tokens
    # with one in every round(1 / (1 - copy_target)) changed, so what is accepted is set by
    # the run, not by the models (random weights, say). Target runs first on each hole;
    # peers draft as they would.
    copy_target: float = 0.0


def with_every_nth_changed(tokens: list[int], n: int, offset: int = 0) -> list[int]:
    """`tokens` with every n-th one (from `offset`) replaced by its neighbour: a copy that
    the target keeps up to each changed token and rejects there."""
    return [token if (i - offset) % n else tokens[(i + 1) % len(tokens)] for i, token in enumerate(tokens)]


class AlignedCopy(CopyDrafter):
    """Copy drafting from a copy of the output itself, some tokens changed: the output so
    far is known to stand at its own length in the copy, so the proposal is the copy from
    there. (Placed by matching its end, as CopyDrafter does, a copy of a random model's
    text, which repeats tokens, was placed wrong in one draft of five.)"""

    def lookup(self, tokens: list[int], k: int) -> Match:
        written = len(tokens) - self.start
        return self._from(written, written, k) if k > 0 and written < len(self.original) else NO_MATCH


def target_copy(tokens: list[int], rate: float, prompt_length: int) -> AlignedCopy:
    """What a --copy-target run drafts from: `tokens` with one in every
    round(1 / (1 - rate)) changed (none at rate 1)."""
    return AlignedCopy(tokens if rate >= 1 else with_every_nth_changed(tokens, max(1, round(1 / (1 - rate)))),
                       prompt_length)


def llama_threads(engine: Engine) -> list[int]:
    """The threads llama.cpp runs each of the engine's contexts with (the target's, then
    the draft's), read back from llama.cpp: models.threads, where it reached them."""
    return [sequence.context.n_threads for sequence in engine.sequences]


class HolePrompt(NamedTuple):
    """A hole's prompt, and what judging a completion there needs."""

    tokens: list[int]
    cursor: CursorContext
    request: CompletionRequest  # the file with the truth taken out, the cursor where it was
    context: PromptContext  # the other files the prompt shows

    def record(self, hole: Hole, shown: str) -> dict:
        """The hole's part of a mode's record: the context files shown, the hole's
        cross-file identifiers and those of them `shown` writes."""
        text, cursor = self.request.text, self.request.cursor
        written = cross_file_written(hole.cross_file, text[:cursor], shown, text[cursor:], hole.kind, hole.language)
        return {"context": [file.path for file in self.context.files()], "cross_file": list(hole.cross_file),
                "cross_file_written": written}


def hidden_truth(hole: Hole) -> tuple[CompletionRequest, str]:
    """The request at the hole, its truth taken out of the file, and the cursor's line before it."""
    where = f"the hole at {hole.file} line {hole.line + 1} column {hole.column + 1}"
    try:
        text = hole.path.read_text(encoding="utf-8", errors="replace")
        offset = cursor_offset(text, hole.line, hole.column)
    except (OSError, PositionError) as error:
        raise ValueError(f"{where}: {error}; pick new holes") from None
    if not text.startswith(hole.truth, offset):
        raise ValueError(f"{where}: the file changed since its holes were picked; pick new ones")
    hidden = text[:offset] + text[offset + len(hole.truth):]
    # Its path whole, as an editor's is: the workspace's checks, and the definitions index's
    # lookup that leaves out the hole's own file (read from the disk with the truth in it),
    # take it as it is; the prompt's header names it relative to the workspace.
    request = CompletionRequest(str(hole.path), str(hole.path), hidden, offset, hole.language)
    return request, hidden[hidden.rfind("\n", 0, offset) + 1 : offset]


class Bench:
    """The engines over the models, and what a run needs to price rounds and check ties."""

    def __init__(self, pair: Pair, settings: Settings, distilled: LlamaModel | None = None,
                 llama_server: Path | None = None, roots: list[Path] = ()):
        """Every engine is built over `pair` (loaded once) by completer.loading, as the
        editor's is. `roots`: the repositories the holes are in, indexed for n-gram lookup
        as an editor's workspace folders would be (each hole's own file hidden: the
        editor has its text, the hole)."""
        self.settings = settings
        config = replace(settings.config, prompt=replace(settings.config.prompt, prefix_lines=PREFIX_LINES))
        self.engine, self.pair = engine_for(pair, config, settings.exact)
        self.model = self.pair.target
        decoder = LocalDecoder(self.engine)
        # Its prompts, as the editor gets them over the holes' repositories as its workspace.
        self.completer = completer_over(decoder, config, roots)
        self.completer.repository.build()  # with context.definitions_tokens (--with-context definitions)
        self.prompt_model = decoder.connect()
        self.index = decoder.index  # n-gram lookup drafts from it
        self.index_stats = IndexStats()
        if config.drafting.index_mb > 0 and roots:
            saved = saved_index_path(self.model.path, list(roots))
            self.index_stats = self.index.build(Workspace(list(roots)), self.model.tokenize, saved=saved)
        # Mode suffix (":distilled", ":no-index") -> the engine it runs on.
        self.engines = {"": self.engine}
        if distilled is not None:
            self.engines["distilled"], _ = engine_for(replace(self.pair, draft=distilled), config, settings.exact)
            if config.drafting.index_mb > 0:  # the index the preset draft's modes look up in
                self.engines["distilled"].ngram.use_index(self.index)
        if NO_INDEX in settings.modes:  # its own tuner: what it learns is without the index
            self.engines["no-index"], _ = engine_for(self.pair, config, settings.exact, costs=self.engine.costs)
        # Engine ("main": the preset draft's modes) -> its contexts' threads, as llama.cpp runs them.
        self.threads = {name or "main": llama_threads(engine) for name, engine in self.engines.items()}
        self.batched: LlamaContext | None = None  # scores plain decoding's tokens in one batch (tie_bounds)
        self.peers: dict[str, LlamaServer | PromptLookupPeer] = {}  # mode -> its running peer
        self.failed: dict[str, str] = {}  # mode -> why its peer failed
        try:
            for mode in (m for m in settings.modes if m in PEERS):
                self._start_peer(mode, llama_server)
        except BaseException:  # Ctrl-C while one starts: stop those already running
            self.close()
            raise

    def _start_peer(self, mode: str, llama_server: Path | None) -> None:
        """The peer on our target (and draft), context size and threads."""
        target, context_tokens = self.model, self.settings.config.models.context_tokens
        threads = self.threads["main"][0]
        try:
            self.peers[mode] = (
                PromptLookupPeer(str(target.path), context_tokens, threads, target.is_end_of_generation)
                if mode == PEER else
                LlamaServer(llama_server, mode, target, self.pair.draft, context_tokens, threads))
        except PeerFailed as error:
            self.failed[mode] = str(error)

    def close(self) -> None:
        """Stop the peers' processes."""
        for peer in self.peers.values():
            peer.close()
        self.peers.clear()

    def prompt(self, hole: Hole) -> HolePrompt:
        """The prompt for the file with the hole's truth taken out."""
        request, line_before = hidden_truth(hole)
        fitted = self.completer.inline.prompt(request, self.prompt_model)
        return HolePrompt(fitted.prompt, CursorContext(line_before, fitted.suffix), request, fitted.context)

    def run_hole(self, index: int, hole: Hole) -> list[dict]:
        """Every mode on one hole: one record per mode."""
        self.index.hide(str(hole.path))
        try:
            return self._run_modes(index, hole)
        finally:
            self.index.show(str(hole.path))

    def _run_modes(self, index: int, hole: Hole) -> list[dict]:
        asked = self.prompt(hole)
        prompt = asked.tokens
        modes = list(self.settings.modes)
        order = modes[index % len(modes):] + modes[: index % len(modes)]
        copied = self.settings.copy_target
        if copied:
            order = ["target"] + [mode for mode in order if mode != "target"]  # its tokens are copied
        records, chosen = {}, {}  # per mode; chosen: its tokens and the end token that stopped it
        for mode in order:
            copy_from = (target_copy(records["target"]["tokens"], copied, len(prompt)) if copied and mode != "target"
                         else None)
            records[mode], chosen[mode] = self._run_mode(mode, index, hole, prompt, copy_from)
            records[mode]["shown"] = shown = postprocess(self.model.detokenize(records[mode]["tokens"]), asked.cursor)
            records[mode] |= asked.record(hole, shown)
        self.judge_differences(records, chosen, prompt, self.settings.config.generation.max_tokens)
        return [records[mode] for mode in modes]

    def judge_differences(self, records: dict[str, dict], chosen: dict[str, list[int]], prompt: list[int],
                          max_tokens: int) -> None:
        """Mark each record identical to target's tokens or not; at T=0, where a mode's
        tokens parted from target's, the gap there in target's logits, and whether it is
        a near tie. `chosen`: each mode's tokens with the end token that stopped it."""
        greedy = self.settings.config.generation.temperature <= 0
        target_logits = None  # behind target's tokens and end token [n, V], once a mode parted from them
        for mode, record in records.items():
            if "failed" in record or "untimed" in record:
                continue
            record["identical"] = "target" in records and record["tokens"] == records["target"]["tokens"]
            if greedy and "target" in records and not record["identical"]:
                if target_logits is None:  # plain decoding again, untimed: the same tokens, with their rows
                    self.engine.prefill(prompt)
                    plain = generate(self.engine, GenerationRequest(prompt=prompt, max_tokens=max_tokens, mode="target",
                                                                    keep_logits=True))
                    target_logits, bounds = plain.logits, self.tie_bounds(prompt, plain.tokens, plain.logits)
                record["parting_gap"] = gap = parting_gap(target_logits, chosen[mode])
                at = first_parting(target_logits.argmax(axis=1), chosen[mode])
                record["tie_bound"] = bound = float(bounds[at]) if at is not None else None
                record["near_tie"] = not self.settings.exact and gap is not None and gap <= bound

    def tie_bounds(self, prompt: list[int], tokens: list[int], stepped: np.ndarray) -> np.ndarray:
        """Per row of plain decoding's steps (`stepped` [rows, V], behind `tokens`), the
        largest parting gap batching can explain there on this model: twice the largest
        distance between a logit of the step and the same logit with those tokens scored
        in one batch after the prompt, as a verify batch scores them, among the row's
        TIE_CONTENDERS most likely tokens (those a flip can be between; far down a 262k
        vocabulary logits move by several, and would excuse anything). Two logits each
        moved by at most d swap only across a gap under 2d; a wrong acceptance rule parts
        where the gap is larger. [rows]"""
        if self.batched is None:
            self.batched = LlamaContext(self.model, n_ctx=self.settings.config.models.context_tokens,
                                        n_threads=self.threads["main"][0])
        self.batched.truncate(0)
        self.batched.eval(prompt[:-1], 0)
        rows = len(stepped)  # tokens, and the end token's row when one stopped them
        batched = self.batched.eval(prompt[-1:] + tokens[:rows - 1], len(prompt) - 1, logits_at=list(range(rows)))
        contenders = np.argpartition(-stepped, TIE_CONTENDERS, axis=1)[:, :TIE_CONTENDERS]  # [rows, TIE_CONTENDERS]
        return 2 * np.take_along_axis(np.abs(batched - stepped), contenders, axis=1).max(axis=1)

    def _run_mode(self, mode: str, index: int, hole: Hole, prompt: list[int],
                  copy_from: CopyDrafter | None) -> tuple[dict, list[int]]:
        base = {"hole": index, "kind": hole.kind, "language": hole.language, "mode": mode, "truth": hole.truth,
                "prompt_tokens": len(prompt)}
        return self.run_mode(base, prompt, self.settings.config.generation.max_tokens, hole.file, copy_from=copy_from)

    def run_mode(self, base: dict, prompt: list[int], max_tokens: int, document: str, stop: tuple[str, ...] = (),
                 copy_from: list[int] | CopyDrafter | None = None) -> tuple[dict, list[int]]:
        """The record of `base["mode"]` on hole `base["hole"]` (`base` and the figures),
        and its tokens with the end token that stopped it (a peer's come without it). No
        mode keeps logits rows while timed: the editor's path copies none at temperature 0."""
        mode, index = base["mode"], base["hole"]
        generation = self.settings.config.generation
        if mode in PEERS:
            try:
                if mode in self.failed:
                    raise PeerFailed(self.failed[mode])
                result = self.peers[mode].generate(prompt, max_tokens, generation.temperature, index)
            except PeerFailed as error:
                self.failed[mode] = str(error)
                if mode in self.peers:
                    self.peers.pop(mode).close()
                return {**base, "tokens": [], "failed": str(error)}, []
            except Untimed as error:  # this hole only
                return {**base, "tokens": [], "untimed": str(error)}, []
            return {**base, "tokens": result.tokens, "ms": result.ms, "wall_ms": result.wall_ms,
                    "drafted": result.drafted, "accepted": result.accepted}, result.tokens
        provider, _, draft = mode.partition(":")
        engine = self.engines[draft]
        engine.prefill(prompt)  # outside the timing
        decode_before, logits_before = engine.llama_ms()
        result = generate(engine, GenerationRequest(
            prompt=prompt, max_tokens=max_tokens, stop=stop, sampling=Sampling(generation.temperature, seed=index),
            mode=provider, document=document, language=base["language"], copy_from=copy_from))
        decode_after, logits_after = engine.llama_ms()
        s = result.stats
        return {**base, "tokens": result.tokens, "ms": s.total_ms, "decode_ms": decode_after - decode_before,
                "logits_ms": logits_after - logits_before, "passes": s.target_passes, "drafted": s.drafted,
                "accepted": s.accepted, "spec_rounds": s.speculative_rounds,
                "spec_tokens": s.tokens_in_speculative_rounds, "predicted": s.predicted_tokens,
                "branch_points": s.branch_points, "branch_hits": s.branch_hits, "tree_rounds": s.tree_rounds,
                "branch_rows": s.branch_rows, "branches_taken": s.branches_taken,
                "rounds": [list(r) for r in s.rounds]}, \
            result.tokens + ([result.end_token] if result.end_token is not None else [])
