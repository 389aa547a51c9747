"""PyTorch context-parallel attention as TorchTitan ran it (``cp_merge_fp32``,
:mod:`stage_explore.analytical.context_parallel`): its element-wise traffic and its key/value
communication, against closed forms computed here."""

from __future__ import annotations

from typing import Any

import pytest

from stage_core.lower.bind import Instr
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_core.trace import CollectiveKind
from stage_explore.analytical.attention_grid import call_grids
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.context_parallel import cp_comm_timer, cp_merge_bytes, kv_repeat
from stage_explore.analytical.kernels import KernelTimer, attention_efficiency
from stage_explore.analytical.te_context_parallel import te_ring_time_factor
from stage_explore.system import load_system

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=8192)
H, KV = 4096, 8 * 128
REPEAT = 32 // 8  # query heads per key/value head (Llama 3 8B)


def _parallel(cp: int, recompute: Recompute = Recompute.FULL, dp: int = 2) -> ParallelConfig:
    return ParallelConfig(dp=dp, cp=cp, zero=3, recompute=recompute, global_batch=2 * dp)


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_element_wise_bytes_follow_torch_s_kernels(cp: int) -> None:
    layer = lower(LLAMA, _parallel(cp)).blocks["layer"]
    attention = [i for i in (*layer.fwd, *layer.bwd) if i.kind == "attention"]
    local = 8192 // cp  # queries of one rank (one sequence per micro-batch)
    out = local * H
    kv = 2 * local * KV * REPEAT  # the rank's keys and values, repeated to the query heads
    assert kv == 2 * out
    for instr in attention:
        assert kv_repeat(instr, cp) == REPEAT
        if instr.phase in ("fwd", "recompute"):
            merges = out * (6 + 38 * (cp - 1) + 6)
            copies = kv * (4 + 4 * (cp - 1))  # contiguous(), the send buffers but the last
            assert cp_merge_bytes(instr, cp) == merges + copies
            assert cp_merge_bytes(instr, cp, repeat=False) == merges + copies // REPEAT
        else:  # dq accumulated in fp32; dk, dv accumulated and passed around the ring
            per_kv = 4 + 4 + 4 * (cp - 1) + 10 + 13 * (cp - 1) + 8 * cp + 6
            assert cp_merge_bytes(instr, cp) == out * (4 + 10 * cp + 6) + kv * per_kv
    assert {i.phase for i in attention} == {"fwd", "recompute", "bwd"}
    assert all(cp_merge_bytes(i, 1) == 0 for i in attention)
    assert all(cp_merge_bytes(i, cp) == 0 for i in layer.fwd if i.kind != "attention")


def test_the_merges_add_their_memory_time_to_the_compute() -> None:
    system = load_system("h100-80gb")
    parallel = _parallel(4)
    on = AnalyticalBackend(framework="torchtitan").evaluate(LLAMA, parallel, system)
    off = AnalyticalBackend(framework="torchtitan", overrides={"cp_merge_fp32": False}).evaluate(
        LLAMA, parallel, system
    )
    accelerator = system.accelerator
    bandwidth = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    layer = lower(LLAMA, parallel).blocks["layer"]
    per_layer = sum(cp_merge_bytes(i, 4) for i in (*layer.fwd, *layer.bwd)) / bandwidth
    # and each SDPA call sees a chunk of S/cp keys, not the gathered S, the chunks after the
    # first at the kernel's non-causal rate (s21 cp)
    kernels, peak = accelerator.kernels, accelerator.peak("bf16")
    assert kernels is not None
    assert te_ring_time_factor(4, kernels.noncausal_ratio("fa2")) < 1.0
    for instr in (*layer.fwd, *layer.bwd):
        if instr.kind == "attention":
            backward = instr.phase == "bwd"
            flops = instr.flops * (5 / 4 if backward else 1)
            # each rank's 2,048 rows: the ring's step grids (s24 attngrid) against one call
            # of them on the gathered 8,192 keys
            first, later = call_grids(kernels, "fa2", instr, 2048, 2048, 128, True, 2, 4)
            steps = te_ring_time_factor(4, kernels.noncausal_ratio("fa2"), first, later)
            gathered, _ = call_grids(kernels, "fa2", instr, 2048, 8192, 128, True, 2, 1)
            for keys, sign in ((8192 // 4, steps), (8192, -1.0 / gathered)):
                efficiency = attention_efficiency(kernels, keys, 128, True, backward, "fa2")
                per_layer += sign * flops / (peak * efficiency)
    micro_batches = 4 // 2  # global batch over dp, micro-batch 1
    expected = LLAMA.layers * micro_batches * per_layer
    assert on.breakdown["compute"] - off.breakdown["compute"] == pytest.approx(expected)
    assert on.step_time_s > off.step_time_s


def test_without_context_parallelism_nothing_changes() -> None:
    system = load_system("h100-80gb")
    parallel = _parallel(1, Recompute.SELECTIVE)
    times = [
        AnalyticalBackend(framework="torchtitan", overrides={"cp_merge_fp32": flag})
        .evaluate(LLAMA, parallel, system)
        .step_time_s
        for flag in (False, True)
    ]
    assert times[0] == times[1]


def _comm(name: str, phase: str, kind: CollectiveKind, size: int) -> Instr:
    return Instr(
        name=name, phase=phase, kind="comm", collective=kind, axes=("cp",), comm_bytes=size
    )


@pytest.mark.parametrize("cp", [2, 8])
@pytest.mark.parametrize("attention_s", [1e-3, 0.5])
def test_the_gather_hides_behind_the_first_chunk_and_the_ring_behind_the_others(
    cp: int, attention_s: float
) -> None:
    layer = lower(LLAMA, _parallel(cp)).blocks["layer"]
    forward = next(i for i in layer.fwd if i.kind == "attention")
    backward = next(i for i in layer.bwd if i.kind == "attention" and i.phase == "bwd")
    local = 8192 // cp * KV * 2  # bytes of the rank's un-repeated keys (or values)
    gathers = [_comm(f"all_gather:{t}", "fwd", CollectiveKind.ALL_GATHER, local) for t in "kv"]
    scatters = [
        _comm(f"reduce_scatter:d.{t}", "bwd", CollectiveKind.REDUCE_SCATTER, local * cp)
        for t in "kv"
    ]
    other = Instr(name="tp", phase="fwd", kind="comm", collective=CollectiveKind.ALL_GATHER,
                  axes=("tp",), comm_bytes=local)  # fmt: skip
    rate = 100e9  # bytes per second of the synthetic links

    def comm_s(instr: Instr) -> float:
        return instr.comm_bytes / rate

    def message_s(size: int) -> float:
        return 1e-5 + size / rate

    timer = cp_comm_timer(
        (*gathers, forward, other, backward, *scatters),
        cp,
        comm_s,
        lambda instr: attention_s,
        message_s,
    )
    gathered_s = 2 * local * REPEAT / rate  # keys and values repeated to the query heads
    exposed = max(0.0, gathered_s - attention_s / cp)
    assert sum(timer(g) for g in gathers) == pytest.approx(exposed)
    message = message_s(2 * local * REPEAT * 2)  # the fp32 key and value gradients, repeated
    ring = message + (cp - 1) * max(0.0, message - attention_s / cp)
    assert sum(timer(s) for s in scatters) == pytest.approx(ring)
    # the backward returns every gradient after the ring's last message: the first
    # reduce-scatter waits for the whole ring, the others with it
    assert timer(scatters[0]) == pytest.approx(ring) and timer(scatters[1]) == 0.0
    assert timer(other) == comm_s(other)
    assert cp_comm_timer((*gathers, forward), 1, comm_s, lambda i: 1.0, message_s) is comm_s


def test_cross_node_context_parallelism_pays_for_the_repeated_keys() -> None:
    """cp spanning hosts (tp fills each host): torch's gathers and gradient ring of repeated
    keys and values cost more than the generator's grouped-query collectives."""
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=32768)
    parallel = ParallelConfig(tp=8, cp=2, zero=3, sp=True, recompute=Recompute.FULL, global_batch=1)
    system = load_system("h100-80gb")
    on = AnalyticalBackend(framework="torchtitan").evaluate(model, parallel, system)
    off = AnalyticalBackend(framework="torchtitan", overrides={"cp_merge_fp32": False}).evaluate(
        model, parallel, system
    )
    # the fp32 ring of repeated key/value gradients outlasts the grouped-query reduce-scatters
    assert on.breakdown["exposed_reduce_scatter"] > off.breakdown["exposed_reduce_scatter"]
    assert on.step_time_s > off.step_time_s  # two backends: the option is in what is memoised


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_torch_s_ring_kernels_see_a_chunk_of_the_keys(
    cp: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's context_parallel gathers the keys but calls SDPA once per chunk: the slowest
    (last) rank's kernels see S/cp keys, causal (step 0) or half of them (later steps), as a
    load-balanced ring's; without cp_merge_fp32 the generator's one kernel sees all S."""
    seen: list[int] = []

    def record(*args: Any, **kwargs: Any) -> KernelTimer:
        seen.append(kwargs["keys"])
        return KernelTimer(*args, **kwargs)

    monkeypatch.setattr("stage_explore.analytical.costing_compute.KernelTimer", record)
    system = load_system("h100-80gb")
    AnalyticalBackend(framework="torchtitan").evaluate(LLAMA, _parallel(cp), system)
    assert seen and set(seen) == {8192 // cp}
    seen.clear()
    off = AnalyticalBackend(framework="torchtitan", overrides={"cp_merge_fp32": False})
    off.evaluate(LLAMA, _parallel(cp), system)
    assert seen and set(seen) == {8192}


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_compiled_ring_fuses_its_element_wise_kernels(cp: int) -> None:
    """Traced into a compiled graph (``cp_traced_ring``), the merges are one fused kernel per
    later chunk and the rotater's unsent buffers are dead code (closed forms from the module
    docstring), less traffic than the eager kernels'."""
    layer = lower(LLAMA, _parallel(cp)).blocks["layer"]
    local = 8192 // cp
    out = local * H
    kv = 2 * local * KV * REPEAT
    for instr in (*layer.fwd, *layer.bwd):
        if instr.kind != "attention":
            assert cp_merge_bytes(instr, cp, compiled=True) == 0
            continue
        if instr.phase in ("fwd", "recompute"):
            expected = out * (10 * (cp - 1) - 4) + kv * 8
        else:
            expected = out * (10 * cp - 6) + kv * (8 + 6 + 9 * (cp - 1) + 6)
        assert cp_merge_bytes(instr, cp, compiled=True) == expected
        assert expected < cp_merge_bytes(instr, cp)
        assert cp_merge_bytes(instr, 1, compiled=True) == 0


@pytest.mark.parametrize("cp", [2, 8])
def test_traced_collectives_are_exposed_in_full(cp: int) -> None:
    """Compiled, each functional collective is waited for where it is issued: the gather costs
    its whole time however long the first chunk, the gradient ring ``cp`` messages."""
    layer = lower(LLAMA, _parallel(cp)).blocks["layer"]
    forward = next(i for i in layer.fwd if i.kind == "attention")
    backward = next(i for i in layer.bwd if i.kind == "attention" and i.phase == "bwd")
    local = 8192 // cp * KV * 2
    gathers = [_comm(f"all_gather:{t}", "fwd", CollectiveKind.ALL_GATHER, local) for t in "kv"]
    scatters = [
        _comm(f"reduce_scatter:d.{t}", "bwd", CollectiveKind.REDUCE_SCATTER, local * cp)
        for t in "kv"
    ]
    rate = 100e9

    def comm_s(instr: Instr) -> float:
        return instr.comm_bytes / rate

    def message_s(size: int) -> float:
        return 1e-5 + size / rate

    instrs = (*gathers, forward, backward, *scatters)
    traced = cp_comm_timer(instrs, cp, comm_s, lambda i: 10.0, message_s, traced=True)
    eager = cp_comm_timer(instrs, cp, comm_s, lambda i: 10.0, message_s)
    gathered_s = 2 * local * REPEAT / rate
    assert sum(traced(g) for g in gathers) == pytest.approx(gathered_s)
    assert sum(eager(g) for g in gathers) == 0.0  # hidden behind a long first chunk
    message = message_s(2 * local * REPEAT * 2)
    assert sum(traced(s) for s in scatters) == pytest.approx(cp * message)
    assert sum(eager(s) for s in scatters) == pytest.approx(message)


def test_the_traced_ring_applies_to_compiled_runs_only() -> None:
    """``cp_traced_ring`` changes a compiled (``fused_elementwise``) torchtitan run across
    hosts — exposed collectives — and leaves an eager run as it was."""
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=32768)
    parallel = ParallelConfig(tp=8, cp=2, zero=3, sp=True, recompute=Recompute.FULL, global_batch=1)
    system = load_system("h100-80gb")

    def evaluate(**overrides: bool) -> Any:
        backend = AnalyticalBackend(framework="torchtitan", overrides=overrides)
        return backend.evaluate(model, parallel, system)

    eager_on, eager_off = evaluate(), evaluate(cp_traced_ring=False)
    assert eager_on.step_time_s == eager_off.step_time_s
    compiled_on = evaluate(fused_elementwise=True)
    compiled_off = evaluate(fused_elementwise=True, cp_traced_ring=False)
    exposed = ("exposed_all_gather", "exposed_reduce_scatter")
    assert sum(compiled_on.breakdown.get(k, 0.0) for k in exposed) > sum(
        compiled_off.breakdown.get(k, 0.0) for k in exposed
    )
    assert compiled_on.breakdown["compute"] < compiled_off.breakdown["compute"]  # fused merges
