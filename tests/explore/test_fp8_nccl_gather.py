"""Transformer Engine's NCCL sequence-parallel all-gathers of FP8 linear inputs
(``te_sp_fp8_gather``, :func:`stage_explore.analytical.fp8_gather.nccl_fp8_gathered`): without
userbuffers (megatron-core with ``tp_comm_overlap`` off) TE still quantizes the local shard and
gathers the FP8 data — the forward inputs, the output gradients and the saved inputs re-gathered
for wgrad — except MXFP8's output gradients, gathered with both usages (no fewer bytes than
16-bit); the casts of the gathered inputs run on the local shard, and the Chakra trace's bytes
follow the same rule."""

from __future__ import annotations

from typing import Any

from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_gather import fp8_gather_bytes, nccl_fp8_gathered
from stage_explore.analytical.fp8_wire import fp8_wire
from stage_explore.system import load_system
from stage_explore.system.model import System
from tests.explore.analytical_point import bound_point, layer_tp_gathers

AG = CollectiveKind.ALL_GATHER
H100 = load_system("h100-80gb")
B200 = load_system("b200")
MODEL = get_flavor("llama3-8b").with_overrides(layers=2, vocab=32000, seq_len=2048)
NCCL = {"tp_comm_overlap": False}


def _parallel(**kwargs: Any) -> ParallelConfig:
    return ParallelConfig(tp=4, dp=2, sp=True, zero=1, global_batch=16, **kwargs)


def _gathers(parallel: ParallelConfig, system: System, **overrides: Any) -> dict[Any, int]:
    """``(phase, tensor) → comm_bytes`` of the layer's tensor-parallel all-gathers as the
    megatron-core backend's phase programs run them under ``overrides``."""
    backend = AnalyticalBackend(framework="megatron-core", overrides=overrides)
    gathers = layer_tp_gathers(backend, MODEL, parallel, system)
    return {(phase, instr.outputs[0][0]): instr.comm_bytes for phase, instr in gathers}


def test_per_tensor_recipes_gather_fp8_without_userbuffers() -> None:
    bf16 = _gathers(_parallel(), H100, **NCCL)
    assert len(bf16) == 6
    for recipe in ("delayed", "tensorwise"):
        fp8 = _gathers(_parallel(precision="fp8", fp8_recipe=recipe), H100, **NCCL)
        assert fp8.keys() == bf16.keys()
        for key, size in bf16.items():
            assert fp8[key] * 2 == size, (recipe, key)
    # a profile whose linear layers are not TE's gathers 16-bit
    off = _gathers(
        _parallel(precision="fp8", fp8_recipe="delayed"), H100, **NCCL, te_sp_fp8_gather=False
    )
    assert off == bf16


def test_mxfp8_output_gradients_stay_16_bit_without_userbuffers() -> None:
    bf16 = _gathers(_parallel(), B200, **NCCL)
    mx = _gathers(_parallel(precision="fp8", fp8_recipe="mxfp8"), B200, **NCCL)
    for (phase, name), size in bf16.items():
        if name.startswith("d."):
            assert mx[phase, name] == size, name
        else:
            assert mx[phase, name] == fp8_gather_bytes(size, "mxfp8") < size, name


def test_nccl_fp8_gathered_drops_only_mxfp8_gradients() -> None:
    gathered = {("fwd", "ln1"), ("bwd", "d.attn.proj"), ("bwd", "ln1")}
    assert nccl_fp8_gathered(gathered, "delayed") == gathered
    assert nccl_fp8_gathered(gathered, "mxfp8") == {("fwd", "ln1"), ("bwd", "ln1")}


def test_the_trace_sends_the_same_fp8_bytes() -> None:
    parallel = _parallel(precision="fp8", fp8_recipe="delayed")
    backend = AnalyticalBackend(framework="megatron-core", overrides=NCCL)
    lowered = lower(MODEL, parallel)
    wired = fp8_wire(lowered, backend)
    sizes = {
        (i.phase, i.outputs[0][0]): i.comm_bytes
        for i in (*wired.blocks["layer"].fwd, *wired.blocks["layer"].bwd)
        if i.collective is AG and i.axes == ("tp",)
    }
    assert sizes == _gathers(parallel, H100, **NCCL)
    assert wired is not lowered


def test_the_gathered_inputs_are_cast_on_the_local_shard() -> None:
    parallel = _parallel(precision="fp8", fp8_recipe="tensorwise")
    shards = []
    for overrides in (NCCL, {}, {**NCCL, "te_sp_fp8_gather": False}):
        backend = AnalyticalBackend(framework="megatron-core", overrides=overrides)
        point = bound_point(backend, MODEL, parallel, H100)
        shards.append(dict(backend._compute_timer(point, "layer").cast_shards))  # type: ignore[attr-defined]
    nccl, userbuffers, plain = shards
    assert nccl == userbuffers and set(nccl.values()) == {4} and len(nccl) == 6
    assert plain == {}
