"""Hugging Face transformers' eager Llama (``eager_modules = "hf-llama"``) and the inference
that reads it, FSDP1's flat gradient and the Trainer's optimizer from a row's text: bytes per
element checked against closed forms written out here op by op, and what an evaluation of a
published YaFSDP baseline row changes."""

from __future__ import annotations

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.eager import (
    RESIDUAL_ADD,
    TORCHTITAN_RMSNORM,
    TORCHTITAN_SWIGLU,
    eager_op_bytes,
)
from stage_explore.analytical.eager_hf import HF_ROPE
from stage_explore.system import load_system
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_release import Defaults
from stage_explore.validation.infer_torch import hf_transformers_defaults
from stage_explore.validation.setups import data_dir

A100 = load_system("a100-80gb")
B = 2  # bytes of a bf16 element; a half of the head dim moves B / 2 per element of q
GQA = get_flavor("llama2-7b").with_overrides(
    layers=2, hidden=2048, heads=16, kv_heads=2, ffn=5504, seq_len=2048
)
LLAMA = get_flavor("llama2-7b")
MOE = get_flavor("mixtral-8x7b")
# q * cos, -x2 (half), cat, rotate_half(q) * sin, the sum
ROPE_FWD = (B + B) + (B // 2 + B // 2) + (B + B) + (B + B) + (2 * B + B)
# grad * sin, -grad (half), two slice_backward (zeros of q, the half copied in), grad * cos,
# the two InputBuffer adds
ROPE_BWD = (B + B) + (B // 2 + B // 2) + 2 * (B // 2 + B + B // 2) + (B + B) + 2 * (2 * B + B)
FILE = "published_runs_no_setup.csv"
ROW = "YAFSDP-FSDP-A100-LLAMA2-7B-N64-S8192"
TEXT = "Hugging Face transformers run_clm.py Llama, launched with accelerate's FSDP plugin"


def test_the_rotary_embedding_is_its_code_counted_op_by_op() -> None:
    assert HF_ROPE.bytes_per_element(backward=False) == ROPE_FWD == 20
    assert HF_ROPE.bytes_per_element(backward=True) == ROPE_BWD == 30


def test_the_table_holds_the_shared_modules_and_no_key_value_repeat() -> None:
    table = eager_op_bytes(GQA, "hf-llama", fused=False)
    assert table["ln1"] == TORCHTITAN_RMSNORM.bytes_per_element(backward=False)
    assert table["ln_f.backward"] == TORCHTITAN_RMSNORM.bytes_per_element(backward=True)
    assert table["mlp.act"] == TORCHTITAN_SWIGLU.bytes_per_element(backward=False)
    assert table["y"] == RESIDUAL_ADD.bytes_per_element(backward=False)
    # flash_attn_func reads the grouped heads: k's rotary embedding alone, as q's
    assert table["k.rope"] == table["q.rope"] == ROPE_FWD
    assert table["k.rope.backward"] == table["q.rope.backward"] == ROPE_BWD
    # torchtitan's table on the same model copies the repeated keys and values for SDPA
    assert eager_op_bytes(GQA, "torchtitan", fused=False)["k.rope"] > table["k.rope"]


def test_the_modules_slow_an_evaluation_and_only_the_elementwise_part() -> None:
    parallel = ParallelConfig(dp=8, zero=3, global_batch=8)
    generator = AnalyticalBackend(framework="fsdp").evaluate(LLAMA, parallel, A100)
    hf = AnalyticalBackend(framework="fsdp", overrides={"eager_modules": "hf-llama"})
    slower = hf.evaluate(LLAMA, parallel, A100)
    assert slower.breakdown["compute"] > generator.breakdown["compute"]
    assert slower.model_flops_per_step == generator.model_flops_per_step


@pytest.mark.parametrize(
    ("cell", "zero", "flat"),
    [
        ("PyTorch FSDP FULL_SHARD (FSDP1)", 3, True),
        ("FullyShardedDataParallel, FULL_SHARD", 3, True),
        ("FSDP1 SHARD_GRAD_OP", 2, False),
        ("FSDP2 (fully_shard), not FSDP1", 3, False),
        ("PyTorch FSDP FULL_SHARD", 3, False),
    ],
)
def test_the_flat_gradient_needs_fsdp1_named_at_zero3(cell: str, zero: int, flat: bool) -> None:
    out = Defaults()
    hf_transformers_defaults({"dp_sharding": cell}, zero, LLAMA, out)
    assert out.options.get("fsdp1_flat_grad", False) is flat, cell


def test_the_modules_and_optimizer_need_transformers_named_on_a_dense_llama() -> None:
    out = Defaults()
    hf_transformers_defaults({"source": TEXT}, 3, LLAMA, out)
    assert out.options == {"eager_modules": "hf-llama", "optimizer_foreach": True}
    assert len(out.notes) == 2
    for row, spec in (
        ({"source": "Hugging Face reference benchmark (MixtralForCausalLM)"}, MOE),
        ({"source": TEXT}, MOE),  # Mixtral's experts are not Llama's modules
        ({"source": "PyTorch FSDP, Llama 2 7B"}, LLAMA),  # no transformers named
    ):
        out = Defaults()
        hf_transformers_defaults(row, 3, spec, out)
        assert out.options == {} and out.notes == [], row


def test_the_published_yafsdp_baseline_row_reads_so() -> None:
    (row,) = [r for r in read_csv(data_dir() / FILE) if r["id"] == ROW]
    (case, *_) = row_cases(row, FILE, 1)
    assert case.parallel is not None, case.reason
    options = dict(case.framework_options)
    assert options["eager_modules"] == "hf-llama"
    assert options["fsdp1_flat_grad"] is True and options["optimizer_foreach"] is True
