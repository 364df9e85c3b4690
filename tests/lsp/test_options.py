"""initializationOptions and settings -> Config: bad values keep defaults and say why."""

import re
from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from completer.config import (DECODERS, DEFAULT_EXCLUDE, EDIT_FORMATS, FIM_FAMILIES, MIN_PROMPT_TOKENS, RANGES,
                              RENAMED, SERVER_DECODERS, Config, ContextOptions, GenerationOptions, PromptOptions,
                              config_from_dict, machine_options, problems, settings_schema)
from completer.decoders.clients import LlamaServerClient
from completer.editor.next_edit import FORMATS
from completer.engine.generation import MAX_TREE_BRANCHES
from completer.loading import SERVER_APIS, load_completer, needs_reload
from completer.lsp.server import without_machine_options
from completer.models.errors import ModelError
from completer.prompt import TEMPLATES
from conftest import run_completer

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
    assert "generation.max_tokens = -3 is not a whole number from 1 to 2147483647: keeping 64" in problems[0]
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


OPTION_NAMES = st.sampled_from([(group.name, item.name) for group in fields(Config)
                                 for item in fields(group.default_factory)]
                                + [tuple(old.split(".")) for old in RENAMED]) | st.tuples(
    st.sampled_from([group.name for group in fields(Config)]), st.text(max_size=12))
# Some JSON for every option: most values are wrong for it, a few happen to be right.
SOME_OPTIONS = st.dictionaries(OPTION_NAMES, JSON, max_size=6).map(
    lambda chosen: {group: {key: value for (g, key), value in chosen.items() if g == group}
                    for group, _ in chosen})


@given(JSON | SOME_OPTIONS)
def test_any_json_gives_a_valid_config_and_each_value_not_taken_is_named(data):
    config, problems = config_from_dict(data)
    assert isinstance(config.generation.max_tokens, int) and config.generation.max_tokens >= 0
    assert config.generation.draft_mode in ("auto", "ngram", "draft", "hybrid", "target")
    if not isinstance(data, dict):
        assert (problems == []) == (data is None)
        return
    groups = {group.name for group in fields(Config)}
    for group, values in data.items():
        if not isinstance(values, dict):
            assert any(repr(group) in problem or problem.startswith(f"{group} ") for problem in problems)
            continue
        for key, value in values.items():
            if group not in groups and f"{group}.{key}" not in RENAMED:
                assert any(repr(group) in problem for problem in problems)
                continue
            new_group, _, new_key = RENAMED.get(f"{group}.{key}", f"{group}.{key}").partition(".")  # an old name's new
            options = getattr(config, new_group)
            taken = hasattr(options, new_key) and getattr(options, new_key) == value
            unset = f"{group}.{key}" in RENAMED and value is None  # VS Code's old setting, not set
            named = (f"{group}.{key}", f"{group}.{key!r}")
            assert taken or unset or any(name in problem for problem in problems for name in named), \
                (group, key, problems)


def test_the_vs_code_extension_sends_every_option_group():
    source = (Path(__file__).resolve().parents[2] / "editor-extensions/vscode/src/settings.ts").read_text()
    groups = re.search(r"SERVER_GROUPS = \[(.*?)\]", source).group(1)
    assert re.findall(r'"(\w+)"', groups) == [group.name for group in fields(Config)]


def test_a_value_out_of_its_range_keeps_the_old_one_and_says_the_range():
    config, problems = config_from_dict({"generation": {"top_p": 1.5, "temperature": -0.1, "time_budget_ms": 600_001},
                                         "drafting": {"tree_branches": 5, "probe_every": 0},
                                         "prompt": {"chunk_lines": 0}, "lsp": {"debounce_ms": 10**9}})
    assert config == Config()
    assert problems == [
        "generation.top_p = 1.5 is not a number from 0 to 1: keeping 1.0",
        "generation.temperature = -0.1 is not 0 or a number from 0.001 to 10: keeping 0.0",
        "generation.time_budget_ms = 600001 is not a number from 0 to 600000: keeping 1000.0",
        "drafting.tree_branches = 5 is not a whole number from 0 to 4: keeping 2",
        "drafting.probe_every = 0 is not a whole number from 1 to 2147483647: keeping 32",
        "prompt.chunk_lines = 0 is not a whole number from 3 to 2147483647: keeping 64",
        "lsp.debounce_ms = 1000000000 is not a number from 0 to 10000: keeping 0.0",
    ]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 10**400, -(10**400), 2**31])
def test_json_numbers_python_reads_but_no_option_takes_are_refused_not_raised(value):
    """Python's json reads NaN, Infinity and 400-digit integers; float() of such an int
    raises OverflowError, which would end the handler instead of keeping the old value."""
    config, problems = config_from_dict({"generation": {"max_tokens": value}, "cache": {"budget_mb": value}})
    assert config == Config()
    assert [problem.split(" = ")[0] for problem in problems] == ["generation.max_tokens", "cache.budget_mb"]
    assert problems[0].endswith("keeping 64") and problems[1].endswith("keeping 1024.0")


def test_a_long_hostile_value_is_not_echoed_whole():
    _, problems = config_from_dict({"generation": {"draft_mode": "x" * 1_000_000}, "x" * 100_000: 1})
    assert len(problems) == 2 and all(len(problem) < 400 for problem in problems)
    assert problems[0].startswith("generation.draft_mode = 'xxx") and "(1000002 characters)" in problems[0]


def test_max_tokens_that_leave_no_room_for_a_prompt_are_refused_naming_both_options():
    """generation.max_tokens 4096 in the default 4096-token context leaves no room for any
    prompt, and fitting one into none would loop forever while holding the engine."""
    config, problems = config_from_dict({"generation": {"max_tokens": 4096}})
    assert config == Config()
    assert problems == ["generation.max_tokens 4096 leaves 0 tokens of models.context_tokens 4096 for the prompt, "
                        f"which needs {MIN_PROMPT_TOKENS}: keeping generation.max_tokens 64"]
    # Both changed together, and they fit: taken.
    config, problems = config_from_dict({"generation": {"max_tokens": 4096}, "models": {"context_tokens": 8192}})
    assert problems == [] and (config.generation.max_tokens, config.models.context_tokens) == (4096, 8192)
    # Only the option that changed goes back: here the context, which the answer no longer fits in.
    config, problems = config_from_dict({"models": {"context_tokens": 4096}}, config)
    assert (config.generation.max_tokens, config.models.context_tokens) == (4096, 8192)
    assert problems[0].endswith("keeping models.context_tokens 8192") and "generation.max_tokens 4096" in problems[0]


def test_each_rule_between_options_names_them_and_keeps_what_changed_before():
    cases = {
        ("prompt", "cross_file_tokens", 4000): "prompt.cross_file_tokens 4000 of other files' chunks leave less "
                                               "than 256 tokens for the file's own lines in models.context_tokens "
                                               "4096 less generation.max_tokens 64: keeping "
                                               "prompt.cross_file_tokens 1024",
        ("drafting", "ngram_max_match", 2): "drafting.ngram_max_match 2 is below drafting.ngram_min_match 3",
        ("drafting", "hybrid_min_match", 65): "drafting.hybrid_min_match 65 is above drafting.ngram_max_match 64",
        ("drafting", "probe_max", 16): "drafting.probe_max 16 is below drafting.probe_every 32",
        ("models", "server_connect_timeout_s", 40.0): "models.server_connect_timeout_s 40.0 is above "
                                                      "models.server_timeout_s 30.0",
    }
    for (group, key, value), message in cases.items():
        config, problems = config_from_dict({group: {key: value}})
        assert config == Config() and len(problems) == 1 and problems[0].startswith(message), problems


def test_a_base_that_breaks_a_rule_takes_the_defaults_of_that_rules_options():
    """A Config made in code (flags) may break a rule; options that did not change cannot
    be kept, so they take their defaults, which break none."""
    broken = Config(generation=GenerationOptions(max_tokens=5000))
    assert problems(broken) == ["generation.max_tokens 5000 leaves 0 tokens of models.context_tokens 4096 for the "
                                f"prompt, which needs {MIN_PROMPT_TOKENS}"]
    config, found = config_from_dict({"prompt": {"heal": False}}, broken)
    assert config.generation.max_tokens == 64 and config.prompt.heal is False
    assert found[0].endswith("using the default generation.max_tokens 64")
    assert problems(Config()) == []


def test_a_temperature_above_zero_is_at_least_a_thousandth():
    config, problems = config_from_dict({"generation": {"temperature": 5e-324}})
    assert config.generation.temperature == 0.0 and "0 or a number from 0.001 to 10" in problems[0]
    assert config_from_dict({"generation": {"temperature": 0.001}})[0].generation.temperature == 0.001


def test_the_cross_file_budget_under_its_old_name_is_taken_with_a_warning_naming_the_new_one():
    config, problems = config_from_dict({"prompt": {"context_tokens": 512}})
    assert config == Config(prompt=PromptOptions(cross_file_tokens=512))
    assert problems == ["prompt.context_tokens is deprecated: its value is read as prompt.cross_file_tokens, its "
                        "new name; rename it where it is set"]
    # Under both names with one value: taken, with the same warning.
    config, problems = config_from_dict({"prompt": {"context_tokens": 512, "cross_file_tokens": 512}})
    assert config.prompt.cross_file_tokens == 512 and problems[0].startswith("prompt.context_tokens is deprecated")
    # A bad value under the old name is refused as the new name's would be.
    config, problems = config_from_dict({"prompt": {"context_tokens": -1}})
    assert config == Config() and problems[1].startswith("prompt.cross_file_tokens = -1 is not a whole number")


def test_the_cross_file_budget_under_its_new_name_is_taken_silently_and_kv_size_keeps_its_name():
    config, problems = config_from_dict({"prompt": {"cross_file_tokens": 512}, "models": {"context_tokens": 8192}})
    assert problems == [] and (config.prompt.cross_file_tokens, config.models.context_tokens) == (512, 8192)


def test_the_old_and_the_new_name_with_different_values_are_refused_keeping_what_was():
    base = config_from_dict({"prompt": {"cross_file_tokens": 256}})[0]
    config, problems = config_from_dict({"prompt": {"context_tokens": 512, "cross_file_tokens": 768}}, base)
    assert config == base
    assert problems == ["prompt.context_tokens = 512 and prompt.cross_file_tokens = 768 are one option, under its "
                        "old name and its new one, given two values: set prompt.cross_file_tokens alone; keeping 256"]


def test_an_old_name_is_a_vs_code_setting_that_is_unset_by_default_and_says_what_replaces_it():
    """VS Code sends every declared setting, so the old one's default must be no value."""
    schema = settings_schema()
    assert schema["prompt.contextTokens"]["default"] is None
    assert schema["prompt.contextTokens"]["deprecationMessage"] == "Renamed: use completer.prompt.crossFileTokens."
    assert config_from_dict({"prompt": {"context_tokens": None, "cross_file_tokens": 100}}) == (
        Config(prompt=PromptOptions(cross_file_tokens=100)), [])


def test_the_language_servers_options_under_their_old_group_are_taken_with_a_warning_naming_the_new_one():
    """`server.*` became `lsp.*`, apart from the decoding server's `models.server_*`."""
    config, problems = config_from_dict({"server": {"prefetch": False, "debounce_ms": 20}})
    assert (config.lsp.prefetch, config.lsp.debounce_ms) == (False, 20.0)
    assert problems == [f"server.{key} is deprecated: its value is read as lsp.{key}, its new name; rename it where it "
                        "is set" for key in ("debounce_ms", "prefetch")]
    config, problems = config_from_dict({"server": {"prefetch": False}, "lsp": {"prefetch": True}})
    assert config.lsp.prefetch is True and problems == [
        "server.prefetch = False and lsp.prefetch = True are one option, under its old name and its new one, given two "
        "values: set lsp.prefetch alone; keeping True"]
    assert config_from_dict({"server": {"prefetch": False, "port": 1}})[1][-1].startswith("unknown option group 'server'")


def test_the_decoder_under_its_old_name_is_machine_level_too():
    """models.backend became models.decoder. Over LSP (config_from_dict) neither is taken:
    the language server refuses the new name before, and the old one here."""
    config, problems = config_from_dict({"models": {"backend": "llama-server", "server_url": "http://127.0.0.1:9"}})
    assert config.models.decoder == "local" and problems == [
        "models.backend is the old name of models.decoder, a machine-level option, which only the server's flag sets "
        "(`completer serve --stdio --decoder ...`): not taken here"]
    assert config_from_dict({"models": {"backend": None}}) == (Config(), [])  # VS Code's old setting, unset


def test_every_option_is_frozen_so_a_change_makes_a_new_config():
    """A Config is shared (the server's, the completer's, the loaded engine's): a change
    in place would reach them all unseen, where dataclasses.replace makes a new one."""
    config = Config()
    with pytest.raises(FrozenInstanceError):
        config.prompt = PromptOptions()
    for group in fields(Config):
        options = getattr(config, group.name)
        with pytest.raises(FrozenInstanceError):
            setattr(options, fields(options)[0].name, None)


def test_a_server_client_given_no_deadlines_takes_the_options_defaults():
    client = LlamaServerClient("http://127.0.0.1:1")
    defaults = Config().models
    assert (client.connect_timeout_s, client.total_timeout_s) == (defaults.server_connect_timeout_s,
                                                                   defaults.server_timeout_s)


def test_the_tree_branches_bound_is_the_engines():
    assert RANGES["drafting.tree_branches"] == (0, MAX_TREE_BRANCHES)


# Numbers at and around every range's ends, and beyond what any option takes.
EXTREME = st.sampled_from([0, -1, 1, 2, 3, 4, 5, 255, 256, 257, 258, 4095, 4096, 4097, 10_000, 131_072, 131_073,
                           2**31 - 1, 2**31, 2**63, 10**30, 0.5, 1.0, 1.5, 1e-300, 1e300, float("nan"), float("inf"),
                           -float("inf")])
EVERY_OPTION = st.dictionaries(OPTION_NAMES, EXTREME | JSON, max_size=8).map(
    lambda chosen: {group: {key: value for (g, key), value in chosen.items() if g == group}
                    for group, _ in chosen})


@given(EVERY_OPTION, EVERY_OPTION)
def test_whatever_options_come_the_config_has_no_problem(first, second):
    """Options arrive one settings change after another: each Config made is whole."""
    config, _ = config_from_dict(first)
    assert problems(config) == []
    config, _ = config_from_dict(second, config)
    assert problems(config) == []


def test_a_config_made_from_flags_that_cannot_work_is_a_load_error_before_anything_loads():
    config = Config(generation=GenerationOptions(max_tokens=4096))
    with pytest.raises(ModelError, match="options that cannot work: generation.max_tokens 4096 leaves 0 tokens of "
                                         "models.context_tokens 4096"):
        load_completer(config)


def test_the_options_that_choose_a_host_a_secret_or_a_file_are_machine_level_each_with_a_flag():
    assert set(machine_options()) == {"models.decoder", "models.server_url", "models.api_key_env",
                                      "models.rpc_servers", "models.target", "models.draft", "context.exclude"}
    schema = settings_schema()
    assert {key for key, item in schema.items() if item.get("scope") == "machine"} == {
        "models.decoder", "models.serverUrl", "models.apiKeyEnv", "models.rpcServers", "models.target", "models.draft",
        "context.exclude",
        "models.backend"}  # models.decoder's old name: a workspace may not choose it under that name either


def test_a_workspace_s_settings_cannot_narrow_the_files_never_read():
    """A checked-in .vscode/settings.json (or initializationOptions) that empties
    context.exclude, or swaps it for a pattern that matches nothing: refused, the flag's
    list (by default DEFAULT_EXCLUDE) kept; the group's other options are taken."""
    for hostile in ("", "nothing-matches-this", ",".join(DEFAULT_EXCLUDE[1:])):
        data, refused = without_machine_options({"context": {"exclude": hostile, "definitions_tokens": 0}}, Config())
        assert refused == ["context.exclude"]
        config, messages = config_from_dict(data, Config())
        assert messages == [] and config.context.definitions_tokens == 0
        assert config.context.exclude_patterns == DEFAULT_EXCLUDE
    flags = Config(context=ContextOptions(exclude="*.secret"))  # the user's own, from `serve --exclude`
    assert without_machine_options({"context": {"exclude": ""}}, flags)[1] == ["context.exclude"]
    assert without_machine_options({"context": {"exclude": "*.secret"}}, flags)[1] == []  # sent back unchanged


def test_the_server_takes_every_machine_level_option_as_a_flag():
    """The only way to set them there: `completer serve --stdio --server-url URL ...`."""
    shown = run_completer("serve", "--help").stdout
    for flag in machine_options().values():
        assert re.search(rf"^\s+{flag} ", shown, re.MULTILINE), flag


def test_the_options_name_what_the_code_formats_and_where_it_decodes():
    """config names the FIM families, next-edit formats and backends without importing
    the code behind them: each list is what that code has."""
    assert FIM_FAMILIES == tuple(template.family for template in TEMPLATES)
    assert EDIT_FORMATS == tuple(FORMATS)
    assert set(SERVER_APIS) == set(SERVER_DECODERS) == set(DECODERS) - {"local"}
