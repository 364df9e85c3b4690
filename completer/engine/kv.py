"""A sequence in a llama.cpp KV cache, and the tokens it holds."""

import logging

from completer.models.backend import LlamaContext

log = logging.getLogger(__name__)


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
    """A context's sequence of tokens. `tokens` is exactly what its KV cache holds: every
    operation leaves llama.cpp's own length of the sequence equal to len(tokens), or
    empties both (the caller then evaluates its prompt again)."""

    def __init__(self, context: LlamaContext):
        self.context = context
        self.tokens: list[int] = []
        self.evaluated = 0  # tokens run through the model since creation: what caching saves
        context.truncate(0)

    @property
    def consistent(self) -> bool:
        """llama.cpp holds as many tokens for the sequence as the list says."""
        return self.context.length() == len(self.tokens)

    def reset(self, why: str) -> None:
        """Empty both the KV and the list, after `why` broke their agreement."""
        log.warning("KV cache of %s: %s; emptied it, its prompt will be evaluated again",
                    self.context.model.path.name, why)
        self.context.truncate(0)
        self.tokens = []

    def truncate(self, n: int) -> None:
        if n < len(self.tokens):
            self.context.truncate(n)
            del self.tokens[n:]

    def extend(self, tokens: list[int], logits_at: tuple[int, ...] | list[int] = (), argmax: bool = False):
        """Evaluate `tokens` after what the cache holds; logits of the chosen indices (with
        `argmax`, their largest logits' indices only). A failure (llama.cpp decodes in
        chunks: earlier ones may have gone in) cuts the KV back to the list before it is
        raised."""
        try:
            logits = self.context.eval(tokens, len(self.tokens), logits_at, argmax)
        except (RuntimeError, ValueError):
            self.context.truncate(len(self.tokens))
            if not self.consistent:
                self.reset("a failed evaluation left its KV unlike its token list")
            raise
        self.tokens.extend(tokens)
        self.evaluated += len(tokens)
        return logits

    def extend_tree(self, tokens: list[int], branches: list[tuple[int, list[int]]]):
        """Evaluate `tokens` after what the cache holds, and beside them the branches (at,
        tokens) that replace tokens[at:] (LlamaContext.eval_tree): the argmax of every
        row, of tokens and of each branch. Settle with take_branch or drop_branches."""
        try:
            best = self.context.eval_tree(tokens, len(self.tokens), branches)
        except (RuntimeError, ValueError):
            self.context.drop_branches()
            self.context.truncate(len(self.tokens))
            if not self.consistent:
                self.reset("a failed evaluation left its KV unlike its token list")
            raise
        self.tokens.extend(tokens)
        self.evaluated += len(tokens) + sum(len(branch) for _, branch in branches)
        return best

    def take_branch(self, index: int, at: int, kept: list[int]) -> None:
        """The tokens from `at` on become `kept`, the first tokens of the last
        extend_tree's branch `index` (0-based, in its list), whose cells hold them already."""
        # keep_branch numbers branches as their llama.cpp sequences: 0 is the text's.
        self.context.keep_branch(index + 1, at, len(kept))
        self.tokens[at:] = kept

    def drop_branches(self) -> None:
        """Free the last extend_tree's branches: the tokens stay as extend_tree left them."""
        self.context.drop_branches()

    def save(self) -> tuple[list[int], bytes]:
        """The tokens and their KV state, to put back later with restore(). A sequence
        whose KV disagrees with its list is saved empty: its state is not what the list says."""
        if not self.consistent:
            self.reset("its KV and token list disagree at a save")
        return list(self.tokens), self.context.save() if self.tokens else b""

    def restore(self, saved: tuple[list[int], bytes]) -> bool:
        """Hold a saved sequence again; False (and empty) when llama.cpp could not."""
        tokens, state = saved
        self.tokens = []
        if not tokens:
            self.context.truncate(0)
            return True
        try:
            self.context.restore(state)
        except RuntimeError as error:
            self.reset(f"restoring its saved state failed ({error})")
            return False
        self.tokens = list(tokens)
        if not self.consistent:
            self.reset(f"a restored state holds {self.context.length()} tokens, not {len(tokens)}")
            return False
        return True

    def sync(self, tokens: list[int]) -> None:
        """Hold exactly `tokens`: cut at the first difference, evaluate the rest."""
        if not self.consistent:
            self.reset(f"llama.cpp holds {self.context.length()} tokens, the list {len(self.tokens)}")
        self.truncate(common_prefix_length(self.tokens, tokens))
        if len(tokens) > len(self.tokens):
            self.extend(tokens[len(self.tokens):])
