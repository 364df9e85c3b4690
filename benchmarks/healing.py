"""How often the rest of a word comes out right, with and without token healing.

    python -m benchmarks.healing [--file textwrap.py] [--preset smol]

Algorithm:
    for every 7th line from line 41 to 300 of the file that has a word of 5+ letters:
        cursor = 2 characters into the line's first such word; prompt = 60 lines
        before it, under the path comment (prefix-only)
        greedy 8 tokens from the plain prompt, and from the healed prompt
    count completions that start with the rest of the word
"""

import argparse
import re
import sysconfig
from pathlib import Path

from completer.config import Config, GenerationOptions, ModelOptions
from completer.engine.generation import GenerationRequest, generate
from completer.engine.healing import TokenPrefixes, heal
from completer.loading import load_engine
from completer.prompt import path_header


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", default="textwrap.py")
    parser.add_argument("--preset", default="smol")
    args = parser.parse_args()
    lines = (Path(sysconfig.get_paths()["stdlib"]) / args.file).read_text().splitlines(keepends=True)
    # Plain decoding alone: no draft is loaded, no verify cost measured.
    config = Config(models=ModelOptions(preset=args.preset, context_tokens=2048),
                    generation=GenerationOptions(draft_mode="target"))
    engine, pair = load_engine(config)
    model = pair.target
    prefixes = TokenPrefixes(model, model.n_vocab)
    cursors = plain = healed = 0
    for number in range(40, min(300, len(lines)), 7):
        word = re.search(r"[A-Za-z_]{5,}", lines[number])
        if not word:
            continue
        cut = word.start() + 2
        rest = lines[number][cut : word.end()]
        prompt = model.tokenize(path_header(args.file) + "".join(lines[max(0, number - 60) : number])
                                + lines[number][:cut])
        plain_text = generate(engine, GenerationRequest(prompt=prompt, max_tokens=8, mode="target")).text
        healed_prompt, healing = heal(prompt, model, prefixes)
        healed_text = generate(engine, GenerationRequest(prompt=healed_prompt, max_tokens=8, mode="target",
                                                         healing=healing)).text
        cursors += 1
        plain += plain_text.startswith(rest)
        healed += healed_text.startswith(rest)
        print(f"line {number + 1}: {lines[number][:cut].strip()!r} + {rest!r}: "
              f"plain {plain_text[:20]!r}, healed {healed_text[:20]!r}")
    print(f"{cursors} cursors inside a word: the rest of the word right {plain} times plain, {healed} times healed")


if __name__ == "__main__":
    main()
