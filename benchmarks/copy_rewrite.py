"""Copy-heavy generation: functions written again after an instruction, every mode side by
side, the copy provider on and off: what copy drafting buys where the output is a copy.

    python -m benchmarks.copy_rewrite REPO [--n 12] [--tokens 160] [--preset smol]
                                           [--llama-server PATH]

    functions = n Python functions of 8-40 lines in REPO's source files, seeded
    prompt    = "Here is a function:\\n\\n{code}\\nThe same function, written again:\\n\\n"
    each mode makes `tokens` tokens (no stop, the same work); ours draft copies from the
    function's tokens (the copy provider, as a next edit drafts from its region), and
    `ngram (no copy)` is ngram without them; llama-server plain, ngram-mod and
    ngram-simple on the same prompts
The next-edit bench (`completer bench --edits`) measures the same decoding on the
rewrites a next-edit prompt gets, which the smol pair does not make as copies; this is
the copy itself, at the length a rewrite of a 20-line region has.
"""

import argparse
import ast
import random
from pathlib import Path

from completer import tables
from completer.bench import report
from completer.bench.edit_run import providers_line
from completer.bench.run import Bench, Settings
from completer.config import Config, GenerationOptions, ModelOptions
from completer.loading import load_pair
from completer.models.llama_build import find
from completer.models.sources import source_files

PROMPT = "Here is a function:\n\n{code}\nThe same function, written again:\n\n"
MODES = ("target", "ngram", "ngram (no copy)", "auto", "peer:llama-server", "peer:llama-server:ngram-mod",
         "peer:llama-server:ngram-simple")


def functions(root: Path, count: int, seed: int) -> list[str]:
    """`count` functions of 8-40 lines from the repository's Python files."""
    found = []
    for path in source_files(root, {"py"}).get("py", []):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.split("\n")
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and 8 <= node.end_lineno - node.lineno + 1 <= 40:
                found.append("\n".join(lines[node.lineno - 1:node.end_lineno]) + "\n")
    random.Random(seed).shuffle(found)
    return found[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repository", type=Path)
    parser.add_argument("--n", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=160)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--preset", default="smol")
    parser.add_argument("--llama-server", type=Path)
    args = parser.parse_args()
    llama_server = find(args.llama_server)
    modes = tuple(m for m in MODES if llama_server or not m.startswith("peer:"))
    runnable = tuple(dict.fromkeys(m.removesuffix(" (no copy)") for m in modes))
    config = Config(models=ModelOptions(preset=args.preset), generation=GenerationOptions(max_tokens=args.tokens))
    bench = Bench(load_pair(config.models), Settings(config, runnable), None, llama_server)
    records = []
    try:
        for index, code in enumerate(functions(args.repository.resolve(), args.n, args.seed)):
            prompt = bench.model.tokenize(PROMPT.format(code=code))
            copy = bench.model.tokenize(code)
            made, chosen = {}, {}
            order = modes[index % len(modes):] + modes[:index % len(modes)]
            for mode in sorted(order, key=lambda m: m != "target"):  # target first, the rest rotated
                base = {"hole": index, "kind": "rewrite", "language": "py", "mode": mode.removesuffix(" (no copy)"),
                        "truth": code, "prompt_tokens": len(prompt)}
                made[mode], chosen[mode] = bench.run_mode(base, prompt, args.tokens, f"function-{index}.py",
                                                          copy_from=None if mode.endswith("(no copy)") else copy)
                made[mode]["mode"], made[mode]["shown"] = mode, ""
            bench.judge_differences(made, chosen, prompt, args.tokens)
            records += made.values()
            print(f"function {index + 1}/{args.n}: {len(code.splitlines())} lines", flush=True)
    finally:
        bench.close()
    summary = report.summarize(records, modes, bench.engine.costs)
    columns = [c for c in report.EDIT_COLUMNS if c[1] not in ("exact_match", "no_edit_rate")]
    print(f"{args.n} functions of {args.repository} written again, {args.tokens} tokens each, T=0, preset "
          f"{args.preset}")
    print(tables.plain_rows(report.headers(columns), report.rows(summary, columns)))
    for line in (report.verdict(summary), providers_line(records, "auto"), providers_line(records, "ngram"),
                 providers_line(records, "ngram (no copy)")):
        if line:
            print(line)


if __name__ == "__main__":
    main()
