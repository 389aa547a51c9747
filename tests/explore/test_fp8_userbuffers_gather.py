"""Transformer Engine's userbuffers all-gathers of FP8 linear inputs
(:mod:`stage_explore.analytical.fp8_gather`): under FP8 with megatron-core's ``tp_comm_overlap``
a decoder layer's six tensor-parallel all-gathers (the QKV and FC1 inputs forward, the two
output gradients for dgrad and the two re-gathered inputs for wgrad) move 1-byte data (plus
E8M0 scales under MXFP8), the casts of those inputs run on the local shard, and the analytical
phase programs and the trace mode see the same bytes."""

from __future__ import annotations

from typing import Any

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_gather import fp8_gather_bytes
from stage_explore.analytical.fp8_roles import gemm_role
from stage_explore.analytical.trace_mode import trace_step
from stage_explore.system import load_system
from tests.explore.analytical_point import bound_point, layer_tp_gathers

AG = CollectiveKind.ALL_GATHER
H100 = load_system("h100-80gb")
B200 = load_system("b200")
MODEL = get_flavor("llama3-8b").with_overrides(layers=2, vocab=32000, seq_len=2048)
TP = 4


def _parallel(**kwargs: Any) -> ParallelConfig:
    return ParallelConfig(tp=TP, dp=2, sp=True, zero=1, global_batch=16, **kwargs)


def _layer_gathers(
    parallel: ParallelConfig, system: Any = H100, **overrides: Any
) -> dict[tuple[str, str], int]:
    """``(phase, tensor) → comm_bytes`` of the layer's tensor-parallel all-gathers as the
    backend's phase programs run them."""
    backend = AnalyticalBackend(framework="megatron-core", overrides=overrides)
    gathers = layer_tp_gathers(backend, MODEL, parallel, system)
    return {(phase, instr.outputs[0][0]): instr.comm_bytes for phase, instr in gathers}


def test_the_six_layer_gathers_move_fp8_bytes() -> None:
    bf16 = _layer_gathers(_parallel())
    fp8 = _layer_gathers(_parallel(precision="fp8", fp8_recipe="delayed"))
    assert len(bf16) == 6 and fp8.keys() == bf16.keys()
    assert {key for key in bf16 if key[0] == "fwd"} == {("fwd", "ln1"), ("fwd", "ln2")}
    for key, size in bf16.items():
        assert fp8[key] * 2 == size, key
    current = _layer_gathers(_parallel(precision="fp8", fp8_recipe="tensorwise"))
    assert current == fp8


def test_mxfp8_gathers_carry_their_scales_and_blockwise_stays_16_bit() -> None:
    bf16 = _layer_gathers(_parallel(), B200)
    mx = _layer_gathers(_parallel(precision="fp8", fp8_recipe="mxfp8"), B200)
    for key, size in bf16.items():
        elements = size // 2
        assert mx[key] == elements + elements // 32 == fp8_gather_bytes(size, "mxfp8")
    blockwise = _layer_gathers(_parallel(precision="fp8", fp8_recipe="blockwise"), B200)
    assert blockwise == bf16  # Float8BlockQuantizer: unsupported by userbuffers' all-gather


def test_only_fp8_linear_gathers_and_only_fp8_gemm_inputs() -> None:
    bf16 = _layer_gathers(_parallel())
    fp8 = dict(precision="fp8", fp8_recipe="delayed")
    no_te = dict(tp_comm_overlap=False, te_sp_fp8_gather=False)  # NCCL gathers, not TE's
    plain = _layer_gathers(_parallel(), **no_te)
    assert _layer_gathers(_parallel(**fp8), **no_te) == plain
    fprop_only = _layer_gathers(_parallel(**fp8, fp8_gemms=("fprop",)))
    for (phase, name), size in fprop_only.items():
        assert size * (2 if phase == "fwd" else 1) == bf16[phase, name], (phase, name)


def test_casts_run_on_the_local_shard() -> None:
    """The FP8 GEMMs reading a userbuffers-gathered operand are faster by their cast's
    (1 − 1/tp) share than with 16-bit gathers; the others are timed as before. Current
    scaling: under delayed scaling the gathered forward inputs are written by the norm kernel,
    with or without userbuffers (:mod:`~stage_explore.analytical.fp8_casts`)."""
    parallel = _parallel(precision="fp8", fp8_recipe="tensorwise")
    times = []
    for overlap in (True, False):  # off: 16-bit NCCL gathers (a profile without TE's)
        overrides = {"tp_comm_overlap": overlap, "te_sp_fp8_gather": overlap}
        backend = AnalyticalBackend(framework="megatron-core", overrides=overrides)
        point = bound_point(backend, MODEL, parallel, H100)
        timer = backend._compute_timer(point, "layer")
        block = point.blocks["layer"]
        weights = frozenset(w.name for w in block.weights)
        instrs = backend._timed_instrs(block, weights)
        times.append({(i.phase, i.name): timer(i) for i in instrs if i.kind == "einsum"})
        if overlap:
            shards = dict(timer.cast_shards)  # type: ignore[attr-defined]
            readers = {
                (i.phase, i.name)
                for i in instrs
                if gemm_role(i, weights) is not None
                and any((i.phase, n) in shards for n, _ in i.inputs)
            }
    assert set(shards.values()) == {TP} and len(shards) == 6
    on, off = times
    assert readers
    for key in on:
        if key in readers and key[0] == "fwd" and off[key] > 0:  # (fused away: 0)
            assert on[key] < off[key], key
        elif key not in readers:
            assert on[key] == pytest.approx(off[key], rel=1e-12), key


def test_the_trace_mode_emits_the_fp8_bytes() -> None:
    parallel = _parallel(precision="fp8", fp8_recipe="delayed")
    fp8 = set(_layer_gathers(parallel).values())
    bf16 = set(_layer_gathers(_parallel()).values())
    counts = []
    for overlap in (True, False):  # off: 16-bit NCCL gathers (a profile without TE's)
        overrides = {"tp_comm_overlap": overlap, "te_sp_fp8_gather": overlap}
        backend = AnalyticalBackend(framework="megatron-core", overrides=overrides)
        traced = trace_step(backend, MODEL, parallel, H100, record_nodes=True)
        sizes = [
            item.node.comm_bytes
            for template in traced.templates
            for item in template
            if item.node.collective is AG
        ]
        counts.append(sum(size in fp8 - bf16 for size in sizes))
    assert counts[0] > 0 and counts[1] == 0
