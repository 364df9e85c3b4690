"""A sequence in a llama.cpp KV cache, and the tokens it holds."""

from models.backend import LlamaContext


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix. List slices compare in C, so a binary
    search over them beats a Python loop on the thousands of tokens of a prompt."""
    low, high = 0, min(len(a), len(b))
    if a[:high] == b[:high]:
        return high
    while low < high:  # a[:low] == b[:low] and a[:high+1] != b[:high+1]
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class KVSequence:
    """One sequence of a context. `tokens` is exactly what its KV cache holds."""

    def __init__(self, context: LlamaContext, seq: int = 0):
        self.context = context
        self.seq = seq
        self.tokens: list[int] = []
        self.evaluated = 0  # tokens run through the model since creation: what caching saves
        context.truncate(0, seq)

    def truncate(self, n: int) -> None:
        if n < len(self.tokens):
            self.context.truncate(n, self.seq)
            del self.tokens[n:]

    def extend(self, tokens: list[int], logits_at: tuple[int, ...] | list[int] = ()):
        """Evaluate `tokens` after what the cache holds; logits of the chosen indices."""
        logits = self.context.eval(tokens, len(self.tokens), self.seq, logits_at)
        self.tokens.extend(tokens)
        self.evaluated += len(tokens)
        return logits

    def save(self) -> tuple[list[int], bytes]:
        """The tokens and their KV state, to put back later with restore()."""
        return list(self.tokens), self.context.save_seq(self.seq) if self.tokens else b""

    def restore(self, saved: tuple[list[int], bytes]) -> None:
        tokens, state = saved
        if tokens:
            self.context.restore_seq(state, self.seq)
        else:
            self.context.truncate(0, self.seq)
        self.tokens = list(tokens)

    def sync(self, tokens: list[int]) -> None:
        """Hold exactly `tokens`: cut at the first difference, evaluate the rest."""
        self.truncate(common_prefix_length(self.tokens, tokens))
        if len(tokens) > len(self.tokens):
            self.extend(tokens[len(self.tokens):])
