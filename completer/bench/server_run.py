"""`completer bench --decoder llama-server`: the same holes and table on a team server.

    for each hole:
        prompt = what the editor would send for the file with the hole's truth taken
                 out (the Completer's prompt, in the server's own tokens)
        each row, in an order rotated per hole: the prompt but its last token
                 evaluated outside the timing, then the last token and
                 `max_tokens` tokens with no early stop; the server's own
                 timings, drafts and acceptance
        shown = the post-processed text, compared with the hole's truth
    rows: `server` (as it is configured: its own speculation); with --baseline-url,
          `target`, the same model served without speculation, which the speedups
          are over. Without one, no speedup is shown: llama-server takes no request
          that turns its speculation off.
"""

from completer.bench.holes import Hole
from completer.bench.metrics import summarize_timed
from completer.bench.peers import ServerPeer, Untimed
from completer.bench.run import HolePrompt, hidden_truth
from completer.decoders.decoder import DecoderModel
from completer.editor.completer import Completer
from completer.editor.postprocess import CursorContext, postprocess

SERVER = "server"
BASELINE = "target"


class TeamServer(ServerPeer):
    def __init__(self, url: str):
        self.url = url


class ServerBench:
    def __init__(self, completer: Completer, model: DecoderModel, rows: dict[str, ServerPeer], max_tokens: int,
                 temperature: float):
        self.completer, self.model, self.rows = completer, model, rows
        self.max_tokens, self.temperature = max_tokens, temperature

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(self.rows)

    def prompt(self, hole: Hole) -> HolePrompt:
        request, line_before = hidden_truth(hole)
        fitted = self.completer.inline.prompt(request, self.model)
        return HolePrompt(fitted.prompt, CursorContext(line_before, fitted.suffix), request, fitted.context)

    def run_hole(self, index: int, hole: Hole) -> list[dict]:
        asked = self.prompt(hole)
        prompt = asked.tokens
        modes = list(self.modes)
        records = {}
        for mode in modes[index % len(modes):] + modes[: index % len(modes)]:
            base = {"hole": index, "kind": hole.kind, "language": hole.language, "mode": mode, "truth": hole.truth,
                    "prompt_tokens": len(prompt)}
            # A server that stops answering ends the run (PeerFailed): there is nothing to compare without it.
            try:
                result = self.rows[mode].generate(prompt, self.max_tokens, self.temperature, index)
            except Untimed as error:  # this hole is left out of the row
                records[mode] = {**base, "tokens": [], "untimed": str(error), "shown": ""}
                continue
            shown = postprocess(self.rows[mode].detokenize(result.tokens), asked.cursor)
            records[mode] = {**base, "tokens": result.tokens, "ms": result.ms, "wall_ms": result.wall_ms,
                             "drafted": result.drafted, "accepted": result.accepted, "shown": shown,
                             **asked.record(hole, shown)}
        baseline = records.get(BASELINE, records[SERVER])
        for record in records.values():
            record["identical"] = record["tokens"] == baseline["tokens"]
        return [records[mode] for mode in modes]


def summarize(records: list[dict], modes: tuple[str, ...]) -> dict:
    """The table's summary per row, against the baseline's where there is one."""
    by_mode = {mode: sorted((r for r in records if r["mode"] == mode), key=lambda r: r["hole"]) for mode in modes}
    baseline = by_mode.get(BASELINE, by_mode[SERVER])
    summary = {mode: summarize_timed(baseline, rows, None, speculative=False) for mode, rows in by_mode.items()}
    for entry in summary.values():  # without the model's logits here, a difference cannot be judged a near tie
        entry["near_tie_flips"] = entry["other_differences"] = None
    if BASELINE not in by_mode:  # a ratio to itself says nothing
        summary[SERVER]["speedup_vs_target"] = summary[SERVER]["median_speedup_vs_target"] = None
    return summary
