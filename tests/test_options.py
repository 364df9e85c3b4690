"""initializationOptions and settings -> Config: bad values keep defaults and say why."""

from hypothesis import given
from hypothesis import strategies as st

from completer.config import Config, config_from_dict

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


@given(JSON)
def test_any_json_gives_a_valid_config(data):
    config, problems = config_from_dict(data)
    assert isinstance(config.generation.max_tokens, int) and config.generation.max_tokens >= 0
    assert config.generation.draft_mode in ("auto", "ngram", "draft", "hybrid", "target")
    assert isinstance(problems, list)
