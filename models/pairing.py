"""A target's draft chosen among the models found on this machine (`--draft auto`), and
what a target is good for as a completer: the lines a user is told at load and in
`completer doctor`."""

from pathlib import Path

from completer.models.errors import ModelError
from completer.models.gguf_file import MAX_VOCAB_SIZE_DIFFERENCE, check_same_vocabulary, model_facts, read_gguf
from completer.models.stores import FoundModel, scan


def pick_draft(target: Path) -> FoundModel:
    """The smallest model found on this machine, smaller than `target`, whose vocabulary
    is the target's (as check_same_vocabulary decides); ModelError saying what to pass
    when there is none."""
    wanted = model_facts(target)
    found = scan().found
    smaller = sorted((model for model in found
                      if model.facts.size_bytes < wanted.size_bytes
                      and model.facts.tokenizer_model == wanted.tokenizer_model
                      and abs(model.facts.n_tokens - wanted.n_tokens) <= MAX_VOCAB_SIZE_DIFFERENCE
                      and model.path.resolve() != target.resolve()),
                     key=lambda model: (model.facts.size_bytes, model.name))
    for model in smaller:
        try:
            check_same_vocabulary(target, model.path)
        except ModelError:
            continue
        return model
    raise ModelError(f"--draft auto: none of the {len(found)} models found on this machine is smaller than "
                     f"{target.name} and shares its vocabulary ({wanted.tokenizer_model}, {wanted.n_tokens} tokens; "
                     "`completer models list` shows them): pass --draft PATH, or leave the draft out (n-gram, "
                     "workspace and copy drafting need no model)")


def suitability_notes(name: str, path: Path, has_fim: bool) -> list[str]:
    """One line for a target without FIM tokens, one for a chat/instruct model (`name`,
    the file at `path`): each completes, less well than a base model trained for
    fill-in-the-middle."""
    notes = []
    if not has_fim:
        notes.append(f"{name} has no FIM tokens: its prompts hold only the text before the cursor, none "
                     "after it; a base model trained for fill-in-the-middle (the qwen2.5-coder presets) completes "
                     "better")
    if read_gguf(path).get("tokenizer.chat_template"):
        notes.append(f"{name} is a chat/instruct model (it has a chat template): it was tuned to answer, not "
                     "to continue code; a base model of its family completes better")
    return notes
