"""Post-processing on real code shapes, and its invariants for any text."""

from hypothesis import given
from hypothesis import strategies as st

from completer.editor.postprocess import CursorContext, postprocess, stops_for

AFTER_DEF = CursorContext("    def area(self):", "\n\n    def perimeter(self):\n        return 4 * self.side\n")


def test_mid_line_gives_one_line_without_what_follows_the_cursor():
    context = CursorContext("    total = sum(", ")\n    return total\n")
    assert context.single_line and stops_for(context) == ("\n",)
    assert postprocess("values)\n    return total", context) == "values"


def test_at_a_line_end_the_completion_stays_in_the_indentation_scope():
    text = "\n        return self.side ** 2\n\n    def volume(self):\n        pass"
    assert postprocess(text, AFTER_DEF) == "\n        return self.side ** 2"


def test_a_completion_that_retypes_the_next_line_is_cut_before_it():
    context = CursorContext("    for item in items:", "\n        total += item\n    return total\n")
    text = "\n        if item is None:\n            continue\n        total += item\n        count += 1"
    assert postprocess(text, context) == "\n        if item is None:\n            continue"


def test_top_level_completion_ends_before_the_next_top_level_block():
    context = CursorContext("", "\n")
    text = "import os\nimport sys\n\n\ndef main():\n    pass"
    assert postprocess(text, context) == "import os\nimport sys"


def test_stop_strings_time_budget_and_trailing_whitespace():
    context = CursorContext("x = ", "\n")
    assert postprocess("compute()  # done   ", context, stop=("  #",)) == "compute()"
    assert postprocess("a = 1\nb = 2\nc = thi", CursorContext("", "\n"), timed_out=True) == "a = 1\nb = 2"
    assert postprocess("value   \n", context) == "value"


@given(st.text(alphabet=" \tab():=\n", max_size=60), st.text(alphabet=" \tab:\n", max_size=20),
       st.text(alphabet=" \tab):\n", max_size=40), st.booleans())
def test_the_result_is_always_a_prefix_of_the_generated_text(text, line_before, suffix, timed_out):
    line_before = line_before.split("\n")[-1]
    context = CursorContext(line_before, suffix)
    out = postprocess(text, context, timed_out=timed_out)
    assert text.startswith(out)
    assert out == out.rstrip()
    if context.single_line:
        assert "\n" not in out
    else:
        for line in out.split("\n")[1:]:
            assert not line.strip() or len(line) - len(line.lstrip(" \t")) >= context.indent
