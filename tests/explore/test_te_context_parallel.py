"""Transformer Engine's ring context-parallel attention (``te_cp_merge``): the element-wise
traffic of ``AttnFuncWithCP`` around its per-step kernels, against a step-by-step walk of that
code for the last cp rank, and the option's effect on a timed point."""

from __future__ import annotations

import pytest

from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import CpStyle, ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.te_context_parallel import te_cp_merge_bytes
from stage_explore.system import load_system

Q, K = 3000, 500  # query elements, key elements (= value elements: grouped-query attention)


def _forward() -> Instr:
    return Instr(
        "attn.core", "fwd", "attention", flops=1,
        inputs=(("q", 2 * Q), ("k", 2 * K), ("v", 2 * K)), outputs=(("o", 2 * Q),),
    )  # fmt: skip


def _backward() -> Instr:
    return Instr(
        "attn.core.backward", "bwd", "attention", flops=1,
        inputs=(("d.o", 2 * Q), ("q", 2 * Q), ("k", 2 * K), ("v", 2 * K)),
        outputs=(("d.q", 2 * Q), ("d.k", 2 * K), ("d.v", 2 * K)),
    )  # fmt: skip


def _walk_forward(cp: int) -> int:
    """The last rank's forward, step by step as AttnFuncWithCP runs it."""
    kv = 2 * K
    moved = 4 * kv  # torch.cat((k, v)): the first send buffer
    rank = cp - 1
    for step in range(1, cp):
        assert step <= rank  # the last rank takes the first half of every received chunk
        moved += 2 * kv  # kv_inputs[:, 0, ...].contiguous(): half of K and V, read and written
    moved += 2 * Q  # out = torch.empty_like(q).zero_()
    moved += cp * 6 * Q  # flash_attn_fwd_out_correction per step: out_per_step, out read; out
    return moved


def _walk_backward(cp: int) -> int:
    """The last rank's backward, step by step."""
    kv = 2 * K
    rank = cp - 1
    moved = 4 * kv  # p2p_comm_buffers[0][0].copy_(kv)
    for step in range(cp):
        moved += 4 * Q if step == cp - rank - 1 else 6 * Q  # dq.copy_ (rank cp-1) / dq.add_
        half = step != cp - 1  # steps before the last see half the keys and values
        moved += 4 * (kv // 2 if half else kv)  # torch.cat((dk_, dv_))
        if step == cp - 1:
            moved += 6 * kv  # dkv.add_(dkv_): the whole buffer (rank != 0)
        elif step == 0:
            moved += 4 * (kv // 2)  # dkv[:, 0, ...].copy_(dkv_)
        else:
            moved += 6 * (kv // 2)  # dkv[:, 0, ...].add_(dkv_)
    return moved


@pytest.mark.parametrize("cp", [2, 3, 4, 8])
def test_the_bytes_are_transformer_engines_steps(cp: int) -> None:
    assert te_cp_merge_bytes(_forward(), cp) == _walk_forward(cp)
    assert te_cp_merge_bytes(_backward(), cp) == _walk_backward(cp)


def test_nothing_without_context_parallelism_or_attention() -> None:
    assert te_cp_merge_bytes(_forward(), 1) == 0
    gemm = Instr("q", "fwd", "einsum", flops=8, inputs=(("x", 8), ("w", 8)), outputs=(("q", 8),))
    assert te_cp_merge_bytes(gemm, 4) == 0


def _step_s(cp: int, on: bool) -> float:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(dp=1, cp=cp, cp_style=CpStyle.RING, global_batch=1, micro_batch=1)
    backend = AnalyticalBackend(framework="megatron-core", overrides={"te_cp_merge": on})
    return backend.evaluate(model, parallel, load_system("h100-80gb")).step_time_s


def test_the_megatron_core_profile_times_the_merges_under_ring_context_parallelism() -> None:
    assert get_framework("megatron-core").te_cp_merge
    assert not get_framework("torchtitan").te_cp_merge  # torch's context_parallel instead
    assert _step_s(2, True) > _step_s(2, False)  # options differ: results differ
    assert _step_s(1, True) == _step_s(1, False)  # no context parallelism: nothing to merge
