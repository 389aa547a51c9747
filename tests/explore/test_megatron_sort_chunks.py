"""Megatron-Core's all-to-all dispatcher's chunk sorts (``analytical/megatron_dispatch.py``,
framework option ``moe_sort_chunks``): which ops carry them, their bytes, and when a run has
them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from stage_core.lower.bind import Instr
from stage_core.lower.program import bind_all, make_workload
from stage_core.parallel import MoeDispatcher, ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.megatron_dispatch import (
    SORT_CHUNKS_OPS,
    fp8_padding_bytes,
    sort_chunks_bytes,
)
from tests.explore.moe_helpers import EP8, GPTOSS, H100, gptoss_timer, megatron_step


def test_each_sort_moves_the_routed_tokens_once_each_way() -> None:
    layer = bind_all(make_workload(GPTOSS, EP8))["moe_layer"]
    # 1,024 tokens per rank, top-4, hidden 2,880, 16-bit: the permuted tokens
    routed = 1024 * GPTOSS.top_k * GPTOSS.hidden * 2
    found = {}
    for instr in (*layer.fwd, *layer.bwd):
        moved = sort_chunks_bytes(instr)
        if instr.name in SORT_CHUNKS_OPS:
            found[instr.name] = moved
        else:
            assert moved == 0, instr.name
    assert found == {name: 2 * routed for name in SORT_CHUNKS_OPS}


@pytest.mark.parametrize(
    ("field", "moved_bytes", "precision"),
    [("sort_chunks", sort_chunks_bytes, "bf16"), ("fp8_padding", fp8_padding_bytes, "fp8")],
)
def test_the_timer_adds_them_at_the_achieved_bandwidth(
    field: str, moved_bytes: Callable[[Instr], int], precision: str
) -> None:
    """The chunk sorts and the FP8 row padding's copies (``KernelTimer.sort_chunks`` /
    ``fp8_padding``) each add their bytes at the achieved HBM bandwidth, nothing else."""
    layer = bind_all(make_workload(GPTOSS, replace(EP8, precision=precision)))["moe_layer"]
    plain = gptoss_timer(precision)
    variant = replace(plain, **{field: True})
    rate = H100.accelerator.memory_bandwidth_bytes_per_s * H100.accelerator.efficiency.memory
    moved_any = False
    for instr in (*layer.fwd, *layer.bwd):
        extra = moved_bytes(instr) / rate
        moved_any = moved_any or extra > 0
        assert variant(instr) == pytest.approx(plain(instr) + extra, rel=1e-12, abs=1e-15)
    assert moved_any


def test_when_a_run_sorts() -> None:
    """Megatron-Core's profile sorts; the step is slower than without the option. No sort with
    DeepEP's flex dispatcher, the allgather dispatcher or one expert per rank."""
    assert FRAMEWORKS["megatron-core"].moe_sort_chunks
    assert not FRAMEWORKS["automodel"].moe_sort_chunks
    off = {"moe_sort_chunks": False}
    assert megatron_step({}, EP8) > megatron_step(off, EP8)
    deepep = {"moe_deepep": True}
    assert megatron_step(deepep, EP8) == megatron_step({**deepep, **off}, EP8)
    allgather = replace(EP8, moe_dispatcher=MoeDispatcher.ALLGATHER)
    assert megatron_step({}, allgather) == megatron_step(off, allgather)
    one_each = ParallelConfig(dp=32, ep=32, zero=1, micro_batch=1, global_batch=32)
    assert GPTOSS.num_experts // one_each.ep == 1
    assert megatron_step({}, one_each) == megatron_step(off, one_each)


#: tp 2 with sequence parallelism: the experts tensor-parallel over tp (etp = tp, Megatron-Core's
#: default), 4 ranks per expert-parallel group, 8 local experts.
EXPERT_TP2 = ParallelConfig(tp=2, sp=True, dp=4, ep=4, zero=1, micro_batch=1, global_batch=4)


def test_the_sorted_tokens_are_the_gathered_ones() -> None:
    """Under etp > 1 the dispatcher all-gathers the received tokens over the experts' tp group
    before the sort: the gathered tensor is etp times the dispatch op's permuted tokens, which
    is what ``sort_chunks_bytes(instr, etp)`` moves."""
    assert EXPERT_TP2.expert_tp == 2
    layer = bind_all(make_workload(GPTOSS, EXPERT_TP2))["moe_layer"]
    by_name = {instr.name: instr for instr in layer.fwd}
    dispatch, gather = by_name["moe.dispatch"], by_name["all_gather:moe.tokens"]
    permuted = max(size for _, size in dispatch.outputs)
    gathered = max(size for _, size in gather.outputs)
    assert gathered == EXPERT_TP2.expert_tp * permuted
    assert sort_chunks_bytes(dispatch, EXPERT_TP2.expert_tp) == 2 * gathered
    assert fp8_padding_bytes(dispatch, 2) == sort_chunks_bytes(dispatch, 2)
    with pytest.raises(ValueError, match="gathered"):
        sort_chunks_bytes(dispatch, 0)


def test_the_timer_moves_the_gathered_tokens() -> None:
    """``KernelTimer.routed_gather`` multiplies the sorts' bytes and nothing else."""
    layer = bind_all(make_workload(GPTOSS, EXPERT_TP2))["moe_layer"]
    plain = gptoss_timer(sort_chunks=True)
    gathered = replace(plain, routed_gather=2)
    rate = H100.accelerator.memory_bandwidth_bytes_per_s * H100.accelerator.efficiency.memory
    for instr in (*layer.fwd, *layer.bwd):
        extra = sort_chunks_bytes(instr) / rate  # the second rank's share
        assert gathered(instr) == pytest.approx(plain(instr) + extra, rel=1e-12, abs=1e-15)


def test_a_run_sorts_the_gathered_tokens() -> None:
    """The backend's sorts under etp = tp = 2 cost what the gathered tokens' bytes say: the
    step difference with and without the option is twice the ungathered sorts' bytes."""
    layer = bind_all(make_workload(GPTOSS, EXPERT_TP2))["moe_layer"]
    rate = H100.accelerator.memory_bandwidth_bytes_per_s * H100.accelerator.efficiency.memory
    sorts_s = sum(sort_chunks_bytes(i, 2) for i in (*layer.fwd, *layer.bwd)) / rate
    added_s = megatron_step({}, EXPERT_TP2) - megatron_step({"moe_sort_chunks": False}, EXPERT_TP2)
    assert added_s == pytest.approx(GPTOSS.layers * sorts_s, rel=0.02)


def test_torchtitan_default_expert_parallelism_sorts() -> None:
    """torchtitan's ``ExpertParallel`` (``_permute`` / ``_unpermute`` around the local
    experts) is on in its profile: the step is slower than without the option, and under
    DeepEP (``moe_deepep``: its own permute of the received tokens) it is not."""
    assert FRAMEWORKS["torchtitan"].moe_sort_chunks

    def step(overrides: dict[str, object]) -> float:
        backend = AnalyticalBackend(framework="torchtitan", overrides=overrides)
        return backend.evaluate(GPTOSS, EP8, H100).step_time_s

    off = {"moe_sort_chunks": False}
    assert step({}) > step(off)
    deepep = {"moe_deepep": True}
    assert step(deepep) == step({**deepep, **off})
