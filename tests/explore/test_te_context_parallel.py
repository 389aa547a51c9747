"""Transformer Engine's ring context-parallel attention (``te_cp_merge``, ``te_cp_overlap``): the
element-wise traffic of ``AttnFuncWithCP`` around its per-step kernels, against a step-by-step
walk of that code for the last cp rank; the ring exchanges it runs beside the steps' attention,
against a step-by-step walk of its send/receive and wait order; each option's effect on a timed
point."""

from __future__ import annotations

import pytest

from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import CpStyle, ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.te_context_parallel import (
    te_cp_merge_bytes,
    te_ring_comm_timer,
    te_ring_exposed_s,
)
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


# --- te_cp_overlap: the ring's exchanges beside the steps' attention ------------------------


def _ring(phase: str, cp: int) -> tuple[Instr, ...]:
    """A phase's ring exchange (``ring_steps`` messages, the lowering's count) and its
    attention, which waits for it."""
    steps = (cp - 1) * (1 if phase in ("fwd", "recompute") else 2)
    ring = Instr("ring:attn.core", phase, "ring", axes=("cp",), comm_bytes=1000, ring_steps=steps)
    attention = _forward() if phase != "bwd" else _backward()
    return ring, Instr(attention.name, phase, "attention", flops=1, deps=(0,),
                       inputs=attention.inputs, outputs=attention.outputs)  # fmt: skip


def _walk_exposed(phase: str, cp: int, message_s: float, step_s: float) -> float:
    """Step by step as AttnFuncWithCP runs: each step posts one exchange, runs its attention
    and the next step waits for both; what a step's exchange takes beyond its attention is
    exposed."""
    exposed = 0.0
    for step in range(cp):
        if phase in ("fwd", "recompute"):
            messages = 1 if step < cp - 1 else 0  # step i sends the K/V of step i + 1
        else:
            messages = 1 if step in (0, cp - 1) else 2  # K/V, K/V + dK/dV, dK/dV
        exposed += max(0.0, messages * message_s - step_s)
    return exposed


@pytest.mark.parametrize("phase", ["fwd", "recompute", "bwd"])
@pytest.mark.parametrize("cp", [2, 3, 4, 8])
@pytest.mark.parametrize("attention_s", [0.4, 2.0, 9.0])
def test_the_ring_is_charged_what_the_steps_do_not_hide(
    phase: str, cp: int, attention_s: float
) -> None:
    message_s = 0.5
    instrs = _ring(phase, cp)

    def serial(instr: Instr) -> float:  # the α–β ring: ring_steps messages one after another
        return instr.ring_steps * message_s

    timer = te_ring_comm_timer(instrs, cp, serial, lambda i: attention_s)
    expected = _walk_exposed(phase, cp, message_s, attention_s / cp)
    assert timer(instrs[0]) == pytest.approx(expected)
    assert timer(instrs[0]) == pytest.approx(
        te_ring_exposed_s(phase, cp, message_s, attention_s / cp)
    )
    assert timer(instrs[0]) <= serial(instrs[0])  # never more than the serial ring
    assert timer(instrs[1]) == serial(instrs[1])  # other instructions keep their timer


def test_a_fast_ring_is_hidden_and_a_slow_one_exposed() -> None:
    # forward: cp - 1 messages each behind a step; backward: middle steps carry two messages
    assert te_ring_exposed_s("fwd", 4, message_s=1.0, step_s=1.0) == 0.0
    assert te_ring_exposed_s("fwd", 4, message_s=3.0, step_s=1.0) == 3 * 2.0
    assert te_ring_exposed_s("bwd", 4, message_s=1.0, step_s=1.5) == 2 * 0.0 + 2 * 0.5
    assert te_ring_exposed_s("bwd", 2, message_s=1.0, step_s=0.0) == 2.0  # = the serial ring
    assert te_ring_exposed_s("bwd", 1, message_s=1.0, step_s=0.0) == 0.0


def _overlap_step_s(cp: int, on: bool) -> float:
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=65536)
    parallel = ParallelConfig(dp=1, cp=cp, cp_style=CpStyle.RING, global_batch=1, micro_batch=1)
    backend = AnalyticalBackend(framework="megatron-core", overrides={"te_cp_overlap": on})
    return backend.evaluate(model, parallel, load_system("h100-80gb")).step_time_s


def test_the_megatron_core_profile_overlaps_the_ring() -> None:
    assert get_framework("megatron-core").te_cp_overlap
    assert not get_framework("torchtitan").te_cp_overlap
    assert _overlap_step_s(4, True) < _overlap_step_s(4, False)  # options differ: results differ
    assert _overlap_step_s(1, True) == _overlap_step_s(1, False)  # no ring, nothing to hide
