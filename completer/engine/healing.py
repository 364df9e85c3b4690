"""Token healing at the cursor.

A cursor inside a word (`text.tr|`) ends the prompt with a token the model rarely saw
there: in training, "translate" was one or two tokens, never "tr" + "anslate". The
unhealed prompt then derails (smol continues `text.tr` with `(self.tabsize`). Healing
backs up over the prompt's last token and constrains the first generated token to
start with that token's bytes, so the model re-chooses how the word is split:

    prompt  ... "text" ".tr"          ->  ... "text"       first token in {".tr", ".translate", ...}
    output                                     ".translate" -> shown "anslate"
"""

import bisect
from dataclasses import dataclass

import numpy as np

from completer.prompt import Vocabulary


class TokenPrefixes:
    """Every token's bytes, sorted, to find the tokens that start with given bytes."""

    def __init__(self, vocabulary: Vocabulary, n_vocab: int):
        pieces = [(vocabulary.token_bytes(token), token) for token in range(n_vocab)]
        pieces = [(piece, token) for piece, token in pieces if piece]  # control tokens have no bytes
        pieces.sort()
        self.pieces = [piece for piece, _ in pieces]
        self.tokens = np.array([token for _, token in pieces], dtype=np.int64)

    def starting_with(self, start: bytes) -> np.ndarray:
        """Ids of the tokens whose bytes start with `start` (sorted bytes make them one run)."""
        first = bisect.bisect_left(self.pieces, start)
        last = bisect.bisect_left(self.pieces, start + b"\xff" * 8, lo=first)
        return self.tokens[first:last]


@dataclass(frozen=True)
class Healing:
    """The bytes backed up over, and the tokens the first generated one may be."""

    text: str
    allowed: np.ndarray  # token ids


def heal(prompt: list[int], vocabulary: Vocabulary, prefixes: TokenPrefixes) -> tuple[list[int], Healing | None]:
    """The prompt without its last token, and the healing that constrains the first
    generated token; the prompt unchanged and None when that token cannot be the start
    of a longer one (a newline before a dedent, a closing bracket)."""
    if len(prompt) < 2:
        return prompt, None
    last = vocabulary.token_bytes(prompt[-1])
    try:
        text = last.decode("utf-8")
    except UnicodeDecodeError:  # part of a character: the output could not be cut after it
        return prompt, None
    allowed = prefixes.starting_with(last) if last else np.empty(0, dtype=np.int64)
    if len(allowed) < 2:  # only the token itself: nothing to re-choose
        return prompt, None
    return prompt[:-1], Healing(text, allowed)


def mask_to(logits: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Logits [V] with every token outside `allowed` at -inf."""
    masked = np.full_like(logits, -np.inf)
    masked[allowed] = logits[allowed]
    return masked
