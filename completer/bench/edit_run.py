"""`completer bench --edits`: every mode side by side on next edits cut from git history.

    for each edit hole (completer.bench.edit_holes):
        prompt = the next-edit prompt the editor's request makes: the editable region
                 around the cursor, the text around it and the user's edits as history,
                 in the preset's format (edits.format), fitted to the context
        target = plain decoding of the rewrite until the format's stop string: n tokens,
                 timed; the rewrite is the suggestion the editor would get
        every other mode then makes exactly those n tokens (no stop string, the same
        work), copy drafting from the region and the user's edits where the mode looks
        up; the peers too
        the suggestion of each mode is judged against the truth: exact (its edits make
        the commit's file), no edit (the region written again unchanged), or not a
        rewrite (no stop string within the budget, or the region emptied: not shown)
The prompt is evaluated before the timing, as the inline bench's is: the times are the
suggestion's latency with the prompt in the cache (warm caches).
"""

from completer.bench import report
from completer.bench.edit_holes import EditHole
from completer.bench.run import Bench
from completer.editor.editing import edit_format_name
from completer.editor.next_edit import (FORMATS, EditFitting, apply_edits, edits_between, engine_stops,
                                        fit_edit_prompt, suggested_rewrite)
from completer.engine.tuning import CostModel

# The modes an edit bench runs by default: ours that make a rewrite (auto:no-index is auto
# here, with no workspace index), and llama-server plain and with its n-gram speculation.
EDIT_MODES = ("target", "ngram", "draft", "hybrid", "auto")
EDIT_PEERS = ("peer:llama-server", "peer:llama-server:ngram-mod", "peer:llama-server:ngram-simple")


class EditBench(Bench):
    """The engines and peers of the inline bench, asked for next edits."""

    def run_hole(self, index: int, hole: EditHole) -> list[dict]:
        config = self.completer.config
        edit_format = FORMATS[edit_format_name(config)]
        document = hole.document
        fitted = fit_edit_prompt(document, hole.cursor, hole.file, EditFitting(
            lines_above=config.edits.lines_above, lines_below=config.edits.lines_below,
            context_lines=config.edits.context_lines, edit_format=edit_format, room=self.engine.context_tokens - 1,
            count=lambda text: len(self.model.tokenize(text)), events=hole.history()))
        if fitted is None:
            raise ValueError(f"{hole.file} at {hole.commit[:12]}: the region does not fit the context")
        prompt, _ = self.completer.decoder.encode(list(fitted.prompt.segments))
        copy = self.model.tokenize(fitted.copy_from)
        truth = apply_edits(document, [hole.truth_edit])
        base = {"hole": index, "kind": "edit", "language": hole.language, "truth": truth[fitted.region.start:
                len(truth) - (len(document) - fitted.region.end)], "prompt_tokens": len(prompt)}
        records, chosen = {}, {}
        records["target"], chosen["target"] = self.run_mode({**base, "mode": "target"}, prompt, fitted.answer_tokens,
                                                            hole.file, tuple(engine_stops(fitted.prompt.ends,
                                                                                          fitted.region.text)))
        made = len(records["target"]["tokens"])
        others = [mode for mode in self.settings.modes if mode != "target"]
        turn = index % len(others) if others else 0  # the order rotates per hole: drift hits every mode alike
        for mode in others[turn:] + others[:turn]:
            records[mode], chosen[mode] = self.run_mode({**base, "mode": mode}, prompt, made, hole.file,
                                                        copy_from=copy)
        for mode, record in records.items():
            ended = len(chosen[mode]) > len(record["tokens"])  # the end token that stopped it came with its tokens
            rewrite = suggested_rewrite(edit_format, self.model.detokenize(record["tokens"]), False, ended,
                                        fitted.prompt.ends, fitted.region.text) if "failed" not in record else None
            edits = edits_between(fitted.region, rewrite) if rewrite is not None else None
            record["shown"] = rewrite
            record["no_edit"] = edits == []
            record["exact"] = edits is not None and apply_edits(document, edits) == truth
        self.judge_differences(records, chosen, prompt, made)
        return [records[mode] for mode in self.settings.modes]


def summarize_edits(records: list[dict], modes: tuple[str, ...], costs: CostModel) -> dict:
    """The inline bench's summary per mode, with a suggestion judged whole: exact (its
    edits make the commit's file), and how often it was no edit."""
    summary = report.summarize([{**r, "shown": r["shown"] or ""} for r in records], modes, costs)
    for mode, entry in summary.items():
        rows = [r for r in records if r["mode"] == mode and "failed" not in r]
        entry["exact_match"] = sum(r["exact"] for r in rows) / len(rows) if rows and not entry["failed"] else None
        entry["no_edit_rate"] = sum(r["no_edit"] for r in rows) / len(rows) if rows and not entry["failed"] else None
        entry["edit_similarity"] = None
    return summary


def providers_line(records: list[dict], mode: str = "auto") -> str | None:
    """What each draft provider did in `mode`'s rounds: rounds, drafted tokens a round,
    acceptance, tokens a target pass; None when the mode did not run."""
    rounds: dict[str, list[int]] = {}  # provider -> [rounds, drafted, made]
    for record in (r for r in records if r["mode"] == mode):
        for provider, k, _, _, made in (round_ for round_ in record.get("rounds", ()) if round_[0]):
            sums = rounds.setdefault(provider, [0, 0, 0])
            for i, value in enumerate((1, k, made)):
                sums[i] += value
    if not rounds:
        return None
    parts = [f"{provider} {n} rounds, {drafted / n:.1f} drafted a round, acceptance {(made - n) / drafted:.2f}, "
             f"{made / n:.2f} tokens a pass" for provider, (n, drafted, made) in sorted(rounds.items())]
    return f"{mode}'s draft providers: " + "; ".join(parts)
