"""Named flavors: published dims and parameter totals, lookup and its errors."""

from __future__ import annotations

import re

import pytest

from stage_core.errors import ConfigError
from stage_core.models import Family, ModelSpec, get_flavor, list_flavors

# (flavor, published total, published active or None, relative tolerance, source)
# Published totals are rounded; the tolerance covers that rounding.
PUBLISHED_TOTALS = [
    # Brown et al. 2020, Table 2.1 (two significant digits, so 2%).
    ("gpt3-125m", 125e6, None, 0.02, "GPT-3 Table 2.1"),
    ("gpt3-350m", 350e6, None, 0.02, "GPT-3 Table 2.1"),
    ("gpt3-760m", 760e6, None, 0.02, "GPT-3 Table 2.1"),
    ("gpt3-1.3b", 1.3e9, None, 0.02, "GPT-3 Table 2.1"),
    ("gpt3-2.7b", 2.7e9, None, 0.02, "GPT-3 Table 2.1"),
    ("gpt3-6.7b", 6.7e9, None, 0.02, "GPT-3 Table 2.1"),
    ("gpt3-13b", 13e9, None, 0.02, "GPT-3 Table 2.1"),
    ("gpt3-175b", 175e9, None, 0.005, "GPT-3 Table 2.1"),
    # Counts shown on the Hugging Face model pages (summed over the released checkpoints).
    ("llama2-7b", 6.74e9, None, 0.005, "meta-llama/Llama-2-7b-hf"),
    ("llama2-13b", 13.0e9, None, 0.005, "meta-llama/Llama-2-13b-hf"),
    ("llama2-70b", 69.0e9, None, 0.005, "meta-llama/Llama-2-70b-hf"),
    ("llama3-8b", 8.03e9, None, 0.005, "meta-llama/Meta-Llama-3-8B"),
    ("llama3-70b", 70.6e9, None, 0.005, "meta-llama/Meta-Llama-3-70B"),
    ("llama3-405b", 406e9, None, 0.005, "meta-llama/Llama-3.1-405B"),
    # Mistral AI's announcements: 46.7B total / 12.9B active; 141B total / 39B active.
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.005, "Mixtral of experts (Mistral AI 2023)"),
    ("mixtral-8x22b", 141e9, 39e9, 0.005, "Cheaper, Better, Faster, Stronger (Mistral AI 2024)"),
    # Dai et al. 2024, Table 1: 16.4B total, 2.8B activated (two digits, so 2%).
    ("deepseek-moe-16b", 16.4e9, 2.8e9, 0.02, "DeepSeekMoE Section 5"),
    # Chowdhery et al. 2022, Table 1: 540.35B.
    ("palm-540b", 540.35e9, None, 0.001, "PaLM Table 1"),
    ("llama3.1-405b", 406e9, None, 0.005, "meta-llama/Llama-3.1-405B"),
    # The name's 340B (three digits, so 0.5%).
    ("nemotron-4-340b", 340e9, None, 0.005, "Nemotron-4 340B Technical Report"),
    # Model cards: "30.5B in total and 3.3B activated", "235B in total and 22B activated"
    # (the active counts have two digits, so 2%).
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02, "Qwen/Qwen3-30B-A3B model card"),
    ("qwen3-235b-a22b", 235e9, 22e9, 0.02, "Qwen/Qwen3-235B-A22B model card"),
]


@pytest.mark.parametrize(
    ("flavor", "total", "active", "tolerance", "source"),
    PUBLISHED_TOTALS,
    ids=[row[0] for row in PUBLISHED_TOTALS],
)
def test_params_near_published_totals(
    flavor: str, total: float, active: float | None, tolerance: float, source: str
) -> None:
    model = get_flavor(flavor)
    assert model.params() == pytest.approx(total, rel=tolerance), source
    if active is None:
        assert model.active_params() == model.params()
    else:
        assert model.active_params() == pytest.approx(active, rel=tolerance), source


# Every distinct model of stage_explore/data/published_runs.csv (ids, label, layers, hidden,
# ffn, heads), transcribed; all use vocabulary 51200 and sequence 2048.
MEGATRON_ROWS = [
    ("NAR21-T1-1", "GPT-1.7B", "megatron-gpt-1.7b", 24, 2304, 9216, 24),
    ("NAR21-T1-2", "GPT-3.6B", "megatron-gpt-3.6b", 30, 3072, 12288, 32),
    ("NAR21-T1-3", "GPT-7.5B", "megatron-gpt-7.5b", 36, 4096, 16384, 32),
    ("NAR21-T1-4", "GPT-18.4B", "megatron-gpt-18.4b", 40, 6144, 24576, 48),
    ("NAR21-T1-5", "GPT-39.1B", "megatron-gpt-39.1b", 48, 8192, 32768, 64),
    ("NAR21-T1-6", "GPT-76.1B", "megatron-gpt-76.1b", 60, 10240, 40960, 80),
    ("NAR21-T1-7", "GPT-145.6B", "megatron-gpt-145.6b", 80, 12288, 49152, 96),
    ("NAR21-T1-8", "GPT-310.1B", "megatron-gpt-310.1b", 96, 16384, 65536, 128),
    ("NAR21-T1-9", "GPT-529.6B", "megatron-gpt-530b", 105, 20480, 81920, 128),
    ("NAR21-T1-10", "GPT-1008.0B", "megatron-gpt-1t", 128, 25600, 102400, 160),
    ("KOR22-T5-22B-full", "GPT-22B", "megatron-gpt-22b", 48, 6144, 24576, 64),
    ("KOR22-T5-175B-full", "GPT-175B", "megatron-gpt-175b", 96, 12288, 49152, 96),
    ("KOR22-T5-530B-full", "GPT-530B", "megatron-gpt-530b", 105, 20480, 81920, 128),
    ("KOR22-T5-1T-full", "GPT-1T", "megatron-gpt-1t", 128, 25600, 102400, 160),
]


@pytest.mark.parametrize(
    ("row", "label", "flavor", "layers", "hidden", "ffn", "heads"),
    MEGATRON_ROWS,
    ids=[row[0] for row in MEGATRON_ROWS],
)
def test_megatron_flavors_have_the_csv_dims(
    row: str, label: str, flavor: str, layers: int, hidden: int, ffn: int, heads: int
) -> None:
    model = get_flavor(flavor)
    dims = (model.layers, model.hidden, model.ffn, model.heads, model.vocab, model.seq_len)
    assert dims == (layers, hidden, ffn, heads, 51200, 2048), row
    # Narayanan et al. 2021, Section 5.1: P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)),
    # which leaves out the final layer norm (2h).
    V, s = model.vocab, model.seq_len  # noqa: N806
    formula = 12 * layers * hidden**2 + 13 * layers * hidden + (V + s) * hidden
    assert model.params() == formula + 2 * hidden
    # The label is the count rounded to its last digit ("1T" to the trillion).
    number = re.fullmatch(r"GPT-([\d.]+)([BT])", label)
    assert number is not None
    value, unit = number.group(1), 1e9 if number.group(2) == "B" else 1e12
    half_unit = 0.5 * 10 ** -len(value.partition(".")[2]) * unit
    assert abs(model.params() - float(value) * unit) <= half_unit, label


def test_megatron_flavors_are_exactly_the_distinct_csv_models() -> None:
    megatron = {name for name in list_flavors() if name.startswith("megatron-")}
    assert megatron == {row[2] for row in MEGATRON_ROWS}


@pytest.mark.parametrize(
    ("flavor", "dims"),
    [
        ("llama3-70b", dict(layers=80, hidden=8192, ffn=28672, heads=64, kv_heads=8, vocab=128256)),
        ("llama3-405b", dict(layers=126, hidden=16384, ffn=53248, heads=128, kv_heads=8)),
        (
            "palm-540b",
            dict(layers=118, hidden=18432, heads=48, kv_heads=1, ffn=73728, vocab=256000),
        ),
        ("deepseek-moe-16b", dict(num_experts=64, top_k=6, num_shared_experts=2, expert_ffn=1408)),
        ("deepseek-moe-16b", dict(first_k_dense=1, ffn=10944, vocab=102400, layers=28, heads=16)),
        ("mixtral-8x7b", dict(num_experts=8, top_k=2, expert_ffn=14336, kv_heads=8, vocab=32000)),
        ("gpt3-175b", dict(layers=96, hidden=12288, heads=96, head_dim=128, vocab=50257)),
    ],
)
def test_selected_published_dims(flavor: str, dims: dict[str, int]) -> None:
    model = get_flavor(flavor)
    assert {key: getattr(model, key) for key in dims} == dims


@pytest.mark.parametrize("flavor", list_flavors())
def test_family_conventions(flavor: str) -> None:
    model = get_flavor(flavor)
    gpt = model.family is Family.GPT
    assert model.dropout == gpt, "GPT-3-style models train with dropout, the others without"
    assert model.bias == (gpt or model.family is Family.GPT_OSS)  # GPT-OSS: biased layers
    hybrid = bool(model.ssm_heads)  # Nemotron-H: no position encoding (Mamba layers carry it)
    assert model.position == ("learned" if gpt else "none" if hybrid else "rotary")
    if model.family is not Family.QWEN3:  # Qwen3 has dense and MoE flavors
        moe_families = (Family.MIXTRAL, Family.DEEPSEEK_MOE, Family.GPT_OSS)
        assert model.is_moe == (model.family in moe_families)
    assert model.name == flavor


def test_list_flavors_is_unique_and_contains_the_required_names() -> None:
    names = list_flavors()
    assert len(names) == len(set(names))
    required = {"gpt3-1.3b", "gpt3-175b", "llama2-70b", "llama3-8b", "mixtral-8x22b", "palm-540b"}
    assert required <= set(names)


def test_lookup_is_case_insensitive() -> None:
    assert get_flavor(" Llama3-70B ") is get_flavor("llama3-70b")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("llama3-7b", r"unknown model flavor 'llama3-7b'; close names: .*llama3-8b"),
        ("gpt3-175", r"unknown model flavor 'gpt3-175'; close names: gpt3-175b"),
        ("zzz", r"unknown model flavor 'zzz'; known: gpt3-125m, .*qwen3-235b-a22b, .*"),
    ],
)
def test_unknown_flavor_is_one_line_with_close_names(name: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as caught:
        get_flavor(name)
    assert "\n" not in str(caught.value)


def test_flavors_are_model_specs() -> None:
    assert all(isinstance(get_flavor(name), ModelSpec) for name in list_flavors())
