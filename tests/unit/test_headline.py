"""The headline's table writer (benchmarks/headline.py), on measurements made up by hand:
losses read as losses, the machine and the commit are named, a failed configuration is
said to have failed. The benchmark itself is not run here (it takes tens of minutes)."""

import re

from hypothesis import given
from hypothesis import strategies as st

from benchmarks.headline import FULL, Measured, commit_label, faster, markdown, simd_flags

AVX512_AMX = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw amx_tile\n"
AVX2 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx f16c avx2 fma\n"
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n"
SERVER = "peer:llama-server"


def entry(tokens_per_s: float, speedup: float = 1.0, median: float = 1.0) -> dict:
    return {"holes": 40, "failed": None, "tokens_per_s": tokens_per_s, "speedup_vs_target": speedup,
            "median_speedup_vs_target": median}


def measured(summary: dict, cpuinfo: str = AVX2, commit: str = "abc1234", warm_ms: float = 12385.0,
             cold_ms: float = 15928.0) -> Measured:
    machine = {"cpu": "AMD EPYC", "cores": 2, "threads": [2], "gpu_offload": False, "simd": simd_flags(cpuinfo),
               "platform": "Linux-6.18-x86_64", "llama_cpp_python": "0.3.36"}
    typing_replay = {"keystrokes": 96, "cached_model_p50_ms": 259.0, "cached_model_p95_ms": 920.0,
                     "cold_p50_ms": 2955.0, "cold_p95_ms": 3205.0}
    return Measured("2026-12-03", machine, commit, "smol", FULL, False, summary,
                    {"files": 1556, "tokens": 8829614}, typing_replay, {"cold": [cold_ms], "warm": [warm_ms]})


def summary(auto: float = 47.5, local: float = 53.3, target: float = 42.0, plain: float = 44.2,
            ngram_mod: float = 50.0, ngram_simple: float = 43.9) -> dict:
    return {"target": entry(target), "auto": entry(auto, auto / target, 1.04), "auto:no-index": entry(local),
            SERVER: entry(plain), f"{SERVER}:ngram-mod": entry(ngram_mod),
            f"{SERVER}:ngram-simple": entry(ngram_simple)}


def row(text: str, starts: str) -> str:
    """The figure cell of the table row whose first cell starts with `starts`."""
    rows = [line for line in text.splitlines() if line.startswith(f"| {starts}")]
    assert len(rows) == 1, text
    return rows[0].split(" | ")[1]


@given(st.floats(min_value=0.01, max_value=100))
def test_a_ratio_says_whether_it_is_a_loss(ratio):
    text = faster(ratio)
    shown = float(text.split("x")[0])
    word = "even" if shown == 1 else "faster" if shown > 1 else "slower"
    assert text == f"{ratio:.2f}x ({word})"


def test_auto_slower_than_llama_server_reads_as_slower():
    text = markdown(measured(summary(auto=47.5, target=42.0, plain=44.2, ngram_mod=50.0)))
    assert row(text, "`auto` against llama-server's fastest configuration here, `peer:llama-server:ngram-mod`") \
        == "0.95x (slower) its tokens/s"
    assert row(text, "our plain decoding") == "0.95x (slower) its tokens/s"
    assert row(text, "`auto` against plain decoding") == "1.13x (faster); median 1.04x (faster)"
    assert row(text, "the workspace index (1,556 files, 8,829,614 tokens)") == "0.89x (slower)"


def test_latencies_are_written_as_speeds_and_a_slower_warming_as_slower():
    text = markdown(measured(summary(), warm_ms=16000.0, cold_ms=15000.0))
    assert row(text, "typing (96 keystrokes)") \
        == "259 / 920 ms against 2955 / 3205 ms: 11.41x (faster) / 3.48x (faster)"
    assert row(text, "first completion at line 1,500 of a 2,000-line file") \
        == "16000 ms against 15000 ms: 0.94x (slower)"


def test_a_failed_configuration_is_named_and_the_fastest_is_of_those_that_ran():
    figures = summary(plain=44.2, ngram_mod=90.0, ngram_simple=43.9)
    figures[f"{SERVER}:ngram-mod"] = {**dict.fromkeys(figures["target"]), "holes": 3,
                                      "failed": "llama-server exited at start (exit 1): bad flag"}
    text = markdown(measured(figures))
    assert row(text, f"`{SERVER}:ngram-mod`") == "failed after 3 holes: llama-server exited at start (exit 1): bad flag"
    fastest = [line for line in text.splitlines() if "fastest" in line]
    assert fastest[0].startswith(f"| `auto` against llama-server's fastest configuration here, `{SERVER}` (of "
                                 f"`{SERVER}`, `{SERVER}:ngram-simple`)")


def test_the_intro_names_the_date_the_cpu_its_simd_flags_and_the_commit():
    text = markdown(measured(summary(), cpuinfo=AVX512_AMX, commit=commit_label("abc1234", " M README.md\n")))
    intro = text.split("\n\n")[0]
    assert "Measured 2026-12-03 by `python -m benchmarks.headline` at commit abc1234+changes" in intro
    assert "AMD EPYC, 2 cores (amx_tile, avx2, avx512bw, avx512f), llama.cpp on 2 threads, no GPU offload" in intro
    assert "40 holes of the standard library, 48 tokens each" in intro
    assert "(avx2, no avx512, no amx)" in markdown(measured(summary(), cpuinfo=AVX2))
    assert "(SIMD flags unknown: no /proc/cpuinfo flags)" in markdown(measured(summary(), cpuinfo=ARM))
    assert commit_label("abc1234", "") == "abc1234"


speeds = st.floats(min_value=1.0, max_value=500.0)


@given(speeds, speeds, speeds, speeds, speeds, speeds, st.floats(min_value=1, max_value=60000))
def test_every_row_has_three_cells_and_every_ratio_its_direction(auto, local, target, plain, mod, simple, warm_ms):
    text = markdown(measured(summary(auto, local, target, plain, mod, simple), warm_ms=warm_ms))
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 6 and all(line.count("|") == 4 for line in table)
    for number, word in re.findall(r"(\d+\.\d\d)x \((\w+)\)", text):
        assert word == ("even" if float(number) == 1 else "faster" if float(number) > 1 else "slower")
