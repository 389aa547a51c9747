"""The inferred reader on rows a held-out set is likely to hold (7 Dec 2026, s29 readers2).

Synthetic rows (tests, not validation rows) pin: Llama 3.2 and the dense Qwen3 from their
published configs with tied embeddings where the config ties them (Primus's Megatron configs
untie Llama's), Qwen2 / Qwen2.5 1.5B tied, DeepSeek-V2-Lite / DeepSeekMoE 16B / Nemotron-4 15B
named alone, torchtitan's local_batch_size default for an empty micro_batch, and the phrasings
of GPU, precision, layout, sequence, batch and per-GPU batch cells: accepted when unambiguous,
refused in one line naming the value when not."""

from __future__ import annotations

from functools import partial

import pytest

from stage_explore.validation.infer_open_models import find_open_model
from tests.explore.infer_helpers import (
    megatron_row,
    published_dims,
    synthetic_case,
    synthetic_model,
    synthetic_parallel,
    synthetic_refusal,
)

#: A Megatron-LM row of 8 GPUs, all data parallel, Llama 3.1 8B.
BASE = megatron_row("READERS2-TEST", seq_len="4096")


_case = partial(synthetic_case, BASE, "readers2.csv")
_model = partial(synthetic_model, BASE, "readers2.csv")
_parallel = partial(synthetic_parallel, BASE, "readers2.csv")
_refused = partial(synthetic_refusal, BASE, "readers2.csv")


@pytest.mark.parametrize(
    ("model", "dims"),
    [
        # (layers, hidden, ffn, heads, kv_heads, head_dim, vocab, tied, qk_norm)
        ("Llama 3.2 1B", (16, 2048, 8192, 32, 8, 64, 128256, True, False)),
        ("meta-llama/Llama-3.2-3B-Instruct", (28, 3072, 8192, 24, 8, 128, 128256, True, False)),
        ("Qwen3-0.6B", (28, 1024, 3072, 16, 8, 128, 151936, True, True)),
        ("Qwen3 1.7B", (28, 2048, 6144, 16, 8, 128, 151936, True, True)),
        ("Qwen3-4B-Base", (36, 2560, 9728, 32, 8, 128, 151936, True, True)),
        ("Qwen3 8B", (36, 4096, 12288, 32, 8, 128, 151936, False, True)),
        ("Qwen3-14B", (40, 5120, 17408, 40, 8, 128, 151936, False, True)),
        ("Qwen3 32B", (64, 5120, 25600, 64, 8, 128, 151936, False, True)),
        ("Qwen2.5-1.5B", (28, 1536, 8960, 12, 2, 128, 151936, True, False)),
        ("01-ai/Yi-6B", (32, 4096, 11008, 32, 4, 128, 64000, False, False)),
    ],
)
def test_a_named_model_takes_its_published_config(
    model: str, dims: tuple[int, int, int, int, int, int, int, bool, bool]
) -> None:
    spec = _model(model=model)
    assert (*published_dims(spec), spec.qk_norm) == dims


def test_primus_unties_llama_3_2_as_its_megatron_configs_do() -> None:
    """Primus's llama_base.yaml sets untie_embeddings_and_output_weights: true."""
    case = _case(model="Llama 3.2 1B", source="AMD-AGI/Primus convergence test")
    assert case.model is not None and not case.model.tied_embeddings
    assert any("untie_embeddings_and_output_weights: true" in a for a in case.assumptions)
    assert _model(model="Llama 3.2 1B", source="NeMo 2.0").tied_embeddings


def test_the_qwen3_moe_and_the_llama_3_2_vision_models_are_not_the_dense_entries() -> None:
    assert _case(model="Qwen3-30B-A3B").model is not None  # the qwen3-30b-a3b flavor
    assert _model(model="Qwen3 30B-A3B").num_experts == 128
    for text in ("qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3 moe 30b", "llama 3.2 11b vision"):
        assert find_open_model(text)[1] is None
    assert "model 'Llama 3.2 90B'" in _refused(model="Llama 3.2 90B")


@pytest.mark.parametrize(
    ("model", "got"),
    [
        # (layers, hidden, experts, top-k, first dense layers)
        ("DeepSeek-V2-Lite", (27, 2048, 64, 6, 1)),
        ("DeepSeekMoE 16B", (28, 2048, 64, 6, 1)),
        ("Nemotron-4 15B", (32, 6144, 0, 0, 0)),
    ],
)
def test_flavor_families_named_alone(model: str, got: tuple[int, int, int, int, int]) -> None:
    spec = _model(model=model)
    assert (spec.layers, spec.hidden, spec.num_experts, spec.top_k, spec.first_k_dense) == got
    if model.startswith("Nemotron"):
        assert (spec.ffn, spec.heads, spec.kv_heads, spec.vocab) == (24576, 48, 8, 256000)
        assert spec.activation.value == "squared-relu"


def test_deepseek_v2_and_other_unknown_families_are_refused_in_one_line() -> None:
    # Falcon 40B and OLMo 2 13B have entries since s29 readers3 (test_infer_readers3.py);
    # DeepSeek-V2, Granite 3.0 8B and OLMo 2 7B since s30 readers4 (test_infer_readers4.py),
    # DeepSeek-V2.5 since s30 readers5 (test_infer_readers5.py)
    for model in ("MiniCPM 2B", "Granite 3.3 8B", "OLMo 3 7B"):
        assert f"model {model!r}" in _refused(model=model)


def test_torchtitan_without_micro_batch_runs_one_step_of_global_over_dp() -> None:
    """torchtitan's global_batch_size default -1 is local_batch_size x dp: one accumulation
    step (job_config.py, train.py); before, Megatron's --micro-batch-size default 1 was read."""
    parallel = _parallel(source="torchtitan", micro_batch="", global_batch_seqs="64")
    assert (parallel.micro_batch, parallel.global_batch, parallel.dp) == (8, 64, 8)
    said = " ".join(_case(source="torchtitan", micro_batch="", global_batch_seqs="64").assumptions)
    assert "micro-batch 8 = global_batch_seqs 64 / dp 8, one gradient-accumulation step" in said
    reason = _refused(source="torchtitan", micro_batch="", global_batch_seqs="12")
    assert "global_batch_seqs 12 is not a multiple of dp 8" in reason
    assert _parallel(micro_batch="").micro_batch == 1  # Megatron's --micro-batch-size default
    # with pipeline parallelism torchtitan's schedule reading (infer_torch) holds, as before
    piped = _case(source="torchtitan", micro_batch="", pp="2", dp="4")
    assert not any("one gradient-accumulation step" in a for a in piped.assumptions)


@pytest.mark.parametrize(
    ("gpu", "system"),
    [("H100 SXM5 80GB", "h100-80gb"), ("HGX B200", "b200"), ("GB200 NVL72", "gb200-nvl72"),
     ("MI300X OAM", "mi300x"), ("A100-SXM4-40GB", "a100-40gb"), ("A100-SXM4-80GB", "a100-80gb"),
     ("H200 SXM 141GB", "h200"), ("NVIDIA H100 SXM", "h100-80gb")],
)  # fmt: skip
def test_gpu_phrasings(gpu: str, system: str) -> None:
    case = _case(gpu=gpu)
    assert case.model is not None, case.reason
    assert case.system == system


@pytest.mark.parametrize("gpu", ["MI250X", "L40S", "H100 PCIe"])
def test_a_gpu_with_no_preset_is_refused_naming_it(gpu: str) -> None:
    assert f"gpu {gpu!r}" in _refused(gpu=gpu)


@pytest.mark.parametrize(
    ("cell", "read"),
    [("BF16 AMP", ("bf16", "")), ("FP8 (delayed)", ("fp8", "delayed")),
     ("MXFP8", ("fp8", "mxfp8")), ("NVFP4", ("fp4", "")),
     ("FP8 current scaling", ("fp8", "tensorwise")), ("FP8 blockwise", ("fp8", "blockwise"))],
)  # fmt: skip
def test_precision_phrasings(cell: str, read: tuple[str, str]) -> None:
    parallel = _parallel(precision=cell)
    recipe = parallel.fp8_recipe.value if read[0] == "fp8" else ""
    assert (parallel.precision.value, recipe) == read


def test_an_unread_precision_is_refused_naming_it() -> None:
    assert "precision 'TF32'" in _refused(precision="TF32")


@pytest.mark.parametrize(
    ("cells", "layout"),
    [({"tp": "TP=2, PP=4", "pp": "", "dp": "1"}, (2, 4, 1)),
     ({"tp": "TP=2, PP=4", "pp": "4", "dp": "1"}, (2, 4, 1)),
     ({"tp": "TP 2 / PP 2 / DP 2", "pp": "", "dp": ""}, (2, 2, 2)),
     ({"tp": "tp2 pp4", "pp": "-", "dp": "1"}, (2, 4, 1)),
     ({"pp": "PP=2; TP=4", "tp": "", "dp": "1"}, (4, 2, 1))],
)  # fmt: skip
def test_a_layout_cell_naming_its_axes_is_read(
    cells: dict[str, str], layout: tuple[int, int, int]
) -> None:
    parallel = _parallel(**cells)
    assert (parallel.tp, parallel.pp, parallel.dp) == layout


@pytest.mark.parametrize(
    ("cells", "said"),
    [({"tp": "TP=2, PP=4", "pp": "2"}, "names pp 4, but the pp column says '2'"),
     ({"tp": "PP=4, DP=2"}, "is a layout naming pp, dp but not tp"),
     ({"tp": "TP=2, TP=4"}, "names tp twice (2 and 4)")],
)  # fmt: skip
def test_an_ambiguous_layout_cell_is_refused_in_one_line(cells: dict[str, str], said: str) -> None:
    assert said in _refused(**cells)


def test_sequence_batch_and_per_gpu_batch_phrasings() -> None:
    assert _parallel(seq_len="8k").seq_len in (None, 8192)
    assert _model(seq_len="8k").seq_len == 8192
    assert _parallel(global_batch_seqs="4,194,304 tokens").global_batch == 1024
    assert "rounded to millions" in _refused(global_batch_seqs="4M tokens")
    assert _parallel(micro_batch="2 per GPU").micro_batch == 2
    assert _parallel(micro_batch="4 sequences/GPU", global_batch_seqs="32").micro_batch == 4
    assert "micro_batch" in _refused(micro_batch="2 per node")
