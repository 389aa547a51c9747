"""The launch environment's ``CUDA_DEVICE_MAX_CONNECTIONS`` and Transformer Engine's pipelined
reduce-scatter (``cuda_device_max_connections``): with one hardware queue the GEMM chunks run in
issue order, each paying its own last wave; with several they run on TE's three compute streams
at once and fill each other's (:func:`~stage_explore.analytical.overlap.concurrent_chunks`)."""

from __future__ import annotations

import math

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.overlap import (
    UB_PIPELINE_SPLITS,
    concurrent_chunks,
    overlap_block,
    overlap_rule,
    pipelined_chunks,
)
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.system import load_system
from tests.explore.package_cases import package_cases

OPTION = "cuda_device_max_connections"
WAVE = 1000  # FLOPs one wave of the toy GPU finishes in one second


def _waves_s(instr: Instr) -> float:
    """A toy GEMM timer with wave quantization: whole waves of ``WAVE`` FLOPs, one second each."""
    return float(math.ceil(instr.flops / WAVE))


def _forward() -> list[Instr]:
    gemm = Instr(
        "proj", "fwd", "einsum", flops=2500,  # 2.5 waves whole; 625 FLOPs (1 wave) per chunk
        inputs=(("attn", 4000), ("wo", 4000)), outputs=(("proj.partial", 4000),),
    )  # fmt: skip
    scatter = Instr(
        "reduce_scatter:proj.partial", "fwd", "comm", collective=CollectiveKind.REDUCE_SCATTER,
        axes=("tp",), comm_bytes=4000, deps=(0,), inputs=(("proj.partial", 1),),
        outputs=(("proj.partial", 1),),
    )  # fmt: skip
    return [gemm, scatter]


def _chunks() -> tuple[Instr, frozenset[Instr]]:
    rule = overlap_rule(TimingPolicy.from_profile(get_framework("megatron-core")), tp=8, sp=True)
    assert rule is not None
    forward = _forward()
    _, shared = overlap_block(forward, rule)
    chunks = pipelined_chunks(shared)
    assert len(chunks) == UB_PIPELINE_SPLITS
    return forward[0], chunks


def test_one_queue_chunks_pay_their_own_waves_several_queues_share_the_whole_gemms() -> None:
    gemm, chunks = _chunks()
    in_order = sum(_waves_s(c) for c in chunks)
    assert in_order == UB_PIPELINE_SPLITS * 1.0  # each chunk's 625 FLOPs take a whole wave
    timed = concurrent_chunks(_waves_s, chunks)
    concurrent = sum(timed(c) for c in chunks)
    assert concurrent == pytest.approx(_waves_s(gemm))  # the whole GEMM's 3 waves
    assert concurrent < in_order
    for chunk in chunks:  # each chunk its FLOP share of the whole GEMM
        assert timed(chunk) == pytest.approx(_waves_s(gemm) * chunk.flops / gemm.flops)
    assert timed(gemm) == _waves_s(gemm)  # anything not a chunk: the timer's own answer
    assert concurrent_chunks(_waves_s, frozenset()) is _waves_s


def _compute(tp: int, connections: int, system: str = "b200") -> tuple[float, float]:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=tp, dp=1, sp=tp > 1, global_batch=1, micro_batch=1)
    backend = AnalyticalBackend(framework="megatron-core", overrides={OPTION: connections})
    result = backend.evaluate(model, parallel, load_system(system))
    return result.step_time_s, result.breakdown["compute"]


def test_many_connections_change_only_runs_with_userbuffers_pipelines() -> None:
    assert getattr(get_framework("megatron-core"), OPTION) == 1  # Megatron's Hopper assert
    one_s, one_compute = _compute(4, 1)
    many_s, many_compute = _compute(4, 32)
    assert many_compute < one_compute and many_s < one_s  # chunk tails filled
    assert _compute(4, 8) == _compute(4, 32)  # only "more than one queue" is modelled
    assert _compute(1, 1) == _compute(1, 32)  # no tensor parallelism, no userbuffers chunks


@pytest.mark.parametrize("value", [0, 33, True, "32"])
def test_a_connection_count_outside_cudas_range_is_a_one_line_error(value: object) -> None:
    with pytest.raises(ConfigError, match=OPTION):
        get_framework("megatron-core").with_overrides({OPTION: value})


def test_megatron_bridge_blackwell_tensor_parallel_rows_run_32_connections() -> None:
    """Megatron-Bridge's PerfEnvPlugin: 32 on sm100+ when tp/cp > 1 and dp/pp > 1; every
    Hopper megatron-core row keeps 1 (Megatron-LM asserts it for tp/cp > 1 before Blackwell)."""
    cases = package_cases()
    bridge = [c for c in cases
              if c.source in ("MBRIDGE-B200", "MBRIDGE-GB200", "MBRIDGE-GB300")
              and c.parallel is not None and c.parallel.tp > 1]  # fmt: skip
    assert len(bridge) == 16
    for case in bridge:
        assert dict(case.framework_options)[OPTION] == 32, case.id
    hopper = [c for c in cases if c.framework == "megatron-core" and "h100" in c.system]
    assert hopper
    assert all(OPTION not in dict(c.framework_options) for c in hopper)
