"""A model's ``core_attention`` chooses the attention core's kernels over its family's default:
Megatron-LM 2021's unfused scores/softmax/context for GPT, one fused causal kernel otherwise."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig


def _layer_kinds(core_attention: str) -> set[str]:
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=2, core_attention=core_attention)
    workload = make_workload(model, ParallelConfig(global_batch=1))
    return {instr.kind for instr in bind_all(workload)["layer"].fwd}


def test_gpt_family_default_is_the_unfused_core() -> None:
    kinds = _layer_kinds("")
    assert "attention" not in kinds
    assert _layer_kinds("unfused") == kinds


def test_fused_core_attention_on_a_gpt_model_is_one_causal_kernel() -> None:
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=2, core_attention="fused")
    workload = make_workload(model, ParallelConfig(global_batch=1))
    fwd = bind_all(workload)["layer"].fwd
    attention = [instr for instr in fwd if instr.kind == "attention"]
    assert len(attention) == 1
    assert workload.options.causal
    # causal: half of the 4·s²·h FLOPs of the full score and context matmuls
    s, h = model.seq_len, model.hidden
    assert attention[0].flops == 4 * s * s * h // 2


def test_bad_core_attention_is_a_one_line_error() -> None:
    with pytest.raises(ConfigError, match="`core_attention` must be 'fused', 'unfused' or ''"):
        get_flavor("megatron-gpt-1.7b").with_overrides(core_attention="flash")
