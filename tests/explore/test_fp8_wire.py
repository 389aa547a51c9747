"""The bytes an FP8 run sends, in the lowered programs (:mod:`stage_explore.analytical.fp8_wire`):
the tensor-parallel all-gathers a profile sends in FP8 and Megatron's FP8 parameter gathers carry
the analytical backend's own byte counts; everything else stays as lowered (16-bit), and a
profile that sends nothing in FP8 leaves the programs as they are."""

from __future__ import annotations

from typing import Any

from stage_core.lower.program import ProgramSet, lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_wire import PARAM_ALL_GATHER, fp8_wire
from stage_explore.system import load_system
from stage_explore.system.model import System
from tests.explore.analytical_point import bound_point, layer_tp_gathers

AG, RS = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
H100 = load_system("h100-80gb")
B200 = load_system("b200")
MODEL = get_flavor("llama3-8b").with_overrides(layers=2, vocab=32000, seq_len=1024)


def _parallel(**kwargs: Any) -> ParallelConfig:
    return ParallelConfig(tp=4, dp=2, sp=True, zero=1, global_batch=8, **kwargs)


def _collectives(programs: ProgramSet, kind: str) -> dict[tuple[str, str, str], int]:
    """``(phase, collective, tensor) → comm_bytes`` of a block's own collectives."""
    block = programs.blocks[kind]
    return {
        (i.phase, str(i.collective), i.outputs[0][0] if i.outputs else i.name): i.comm_bytes
        for i in (*block.fwd, *block.bwd)
        if i.collective is not None
    }


def _backend_gathers(
    backend: AnalyticalBackend, parallel: ParallelConfig, system: System
) -> dict[Any, int]:
    """The layer's tensor-parallel all-gathers as the backend's phase programs run them (the
    bytes of a gather its overlap splits into a head and a tail summed)."""
    found: dict[Any, int] = {}
    for _, instr in layer_tp_gathers(backend, MODEL, parallel, system):
        key = (instr.phase, str(AG), instr.outputs[0][0])
        found[key] = found.get(key, 0) + instr.comm_bytes
    return found


def test_the_tp_gathers_carry_the_backends_fp8_bytes() -> None:
    core = AnalyticalBackend(framework="megatron-core")
    bf16 = _collectives(lower(MODEL, _parallel()), "layer")
    for recipe, scales, system in (("delayed", 0, H100), ("mxfp8", 1, B200)):
        parallel = _parallel(precision="fp8", fp8_recipe=recipe)
        programs = lower(MODEL, parallel)
        wired = _collectives(fp8_wire(programs, core), "layer")
        expected = _backend_gathers(core, parallel, system)
        assert len(expected) == 6  # QKV and FC1 inputs, two output gradients, two re-gathers
        assert {k: v for k, v in wired.items() if k in expected} == expected
        for key, size in bf16.items():
            if key in expected:  # 1 byte per element, plus one E8M0 byte per 32 under mxfp8
                elements = size // 2
                assert wired[key] == elements + scales * -(-elements // 32), (recipe, key)
            else:  # reduce-scatters, all-reduces and other gathers stay 16-bit
                assert wired[key] == size, (recipe, key)
        assert any(key[1] == str(RS) for key in bf16)
        assert _collectives(programs, "layer") == bf16  # the lowering itself is untouched


def test_profiles_and_recipes_that_send_16_bits_leave_the_programs_alone() -> None:
    core = AnalyticalBackend(framework="megatron-core")
    for backend, parallel in (
        (AnalyticalBackend(), _parallel(precision="fp8")),  # megatron-lm-2021: no userbuffers
        (core, _parallel()),  # bf16
        (core, _parallel(precision="fp8", fp8_recipe="blockwise")),  # userbuffers refuse it
        (core, ParallelConfig(tp=4, dp=2, zero=1, global_batch=8, precision="fp8")),  # no sp
    ):
        programs = lower(MODEL, parallel)
        assert fp8_wire(programs, backend) is programs, (backend.framework.name, parallel)
    torchtitan = AnalyticalBackend(framework="torchtitan")
    tensorwise = lower(MODEL, _parallel(precision="fp8", fp8_recipe="tensorwise"))
    assert fp8_wire(tensorwise, torchtitan) is not tensorwise  # torchao's Float8 TP
    rowwise = lower(MODEL, _parallel(precision="fp8", fp8_recipe="rowwise"))
    assert fp8_wire(rowwise, torchtitan) is rowwise  # "all-gather happens in high precision"


def test_fp8_parameters_gather_at_the_backends_bytes() -> None:
    """Megatron's --fp8-param-gather: each chunk's parameter all-gather is the sum of the
    backend's gather bytes of its blocks (``_block_sync``); gradients stay as lowered."""
    backend = AnalyticalBackend(framework="megatron-core", overrides={"fp8_param_gather": True})
    parallel = _parallel(precision="fp8", pp=2)
    programs = lower(MODEL, parallel)
    wired = fp8_wire(programs, backend)
    point = bound_point(backend, MODEL, parallel, H100)
    kinds = {id(block): kind for kind, block in point.blocks.items()}
    lowered = {id(block): kind for kind, block in programs.blocks.items()}
    assert set(kinds.values()) == set(lowered.values())
    for before, after in zip(programs.stages, wired.stages, strict=True):
        gathers = [op for op in after.sync if op.name == PARAM_ALL_GATHER]
        assert gathers
        for op in gathers:
            chunk = before.chunks[op.chunk]
            expected = sum(
                backend._block_sync(point, lowered[id(block)])[1].get(op.axes, 0)
                for block in chunk.blocks
            )
            assert op.comm_bytes == expected
        for old, new in zip(before.sync, after.sync, strict=True):
            if old.name == PARAM_ALL_GATHER:
                assert new.comm_bytes < old.comm_bytes
            else:
                assert new == old  # gradient reductions stay 16/32-bit
    off = AnalyticalBackend(framework="megatron-core")
    assert [s.sync for s in fp8_wire(programs, off).stages] == [s.sync for s in programs.stages]
