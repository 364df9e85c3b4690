"""initializationOptions and settings -> Config: bad values keep defaults and say why."""

import re
from dataclasses import fields
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from completer.config import Config, config_from_dict
from completer.loading import needs_reload

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner,
                                                                                  max_size=3), max_leaves=8)


def test_good_values_apply_and_keep_the_other_defaults():
    config, problems = config_from_dict({"models": {"preset": "smol", "target_gpu_layers": 12},
                                         "generation": {"max_tokens": 32, "temperature": 0.2}})
    assert problems == []
    assert (config.models.preset, config.models.target_gpu_layers) == ("smol", 12)
    assert (config.generation.max_tokens, config.generation.temperature) == (32, 0.2)
    assert config.cache == Config().cache


def test_each_bad_value_keeps_its_default_and_names_the_option():
    config, problems = config_from_dict({"generation": {"max_tokens": -3, "draft_mode": "psychic"},
                                         "models": {"draft_gpu_layers": "many"}, "colour": {}})
    assert config == Config()
    assert len(problems) == 4
    assert "generation.max_tokens = -3 is not a non-negative int" in problems[0]
    assert "one of auto, ngram, draft, hybrid, target" in problems[1]
    assert 'models.draft_gpu_layers = \'many\' is not a number or "auto"' in problems[2]
    assert "unknown option group 'colour'" in problems[3]


def test_a_switch_is_only_true_or_false():
    config, problems = config_from_dict({"prompt": {"heal": False}})
    assert problems == [] and config.prompt.heal is False
    for value in (1, "no", None):
        config, problems = config_from_dict({"prompt": {"heal": value}})
        assert config.prompt.heal is True and "prompt.heal" in problems[0] and "true or false" in problems[0]


def test_a_reload_follows_what_the_loaded_engine_was_built_from():
    """Loading skips the draft and the cost calibration for `target`: leaving or entering
    it reloads; other generation options do not."""
    loaded = Config()

    def changed(data):
        return config_from_dict(data, loaded)[0]

    assert needs_reload(loaded, changed({"models": {"context_tokens": 2048}}))
    assert needs_reload(loaded, changed({"generation": {"draft_mode": "target"}}))
    plain = changed({"generation": {"draft_mode": "target"}})
    assert needs_reload(plain, changed({"generation": {"draft_mode": "hybrid"}}))
    assert not needs_reload(loaded, changed({"generation": {"draft_mode": "ngram", "max_tokens": 8}}))
    assert not needs_reload(loaded, changed({"prompt": {"heal": False}}))


@given(JSON)
def test_any_json_gives_a_valid_config(data):
    config, problems = config_from_dict(data)
    assert isinstance(config.generation.max_tokens, int) and config.generation.max_tokens >= 0
    assert config.generation.draft_mode in ("auto", "ngram", "draft", "hybrid", "target")
    assert isinstance(problems, list)


def test_the_vs_code_extension_sends_every_option_group():
    source = (Path(__file__).parent.parent / "editor-extensions/vscode/src/settings.ts").read_text()
    groups = re.search(r"SERVER_GROUPS = \[(.*?)\]", source).group(1)
    assert re.findall(r'"(\w+)"', groups) == [group.name for group in fields(Config)]
