"""Userbuffers bulk and pipelined overlaps with and without Transformer Engine's SM margin
(``ub_bulk_sm_margin``, ``ub_pipeline_sm_margin``): TE's default launches the weight-gradient
GEMMs beside a bulk kernel, and the GEMM chunks pipelined with a reduce-scatter, on
``sm - UB_COMM_SMS`` SMs; the NeMo recipe configs (bulk set_sm_margin off) and the TE of
mid-2024 (every default overlap without a margin) launch them on every SM and lose the
kernel's SMs only while it runs. Closed forms of both."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.overlap import (
    UB_COMM_SMS,
    overlap_block,
    overlap_rule,
    pipelined_chunks,
    pipelined_collectives,
    ub_bulk_share_s,
)
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.system import load_system
from stage_explore.system.model import System
from tests.explore.package_cases import package_cases

UNIT = 1000
OPTION = "ub_bulk_sm_margin"


def _gemm(name: str, seconds: float, inputs: tuple[str, str], output: str, phase: str) -> Instr:
    size = 4 * UNIT
    return Instr(
        name, phase, "einsum", flops=int(seconds * UNIT),
        inputs=((inputs[0], size), (inputs[1], size)), outputs=((output, size),),
    )  # fmt: skip


def _scatter(seconds: float, deps: tuple[int, ...], operand: str, phase: str) -> Instr:
    return Instr(
        f"reduce_scatter:{operand}", phase, "comm", collective=CollectiveKind.REDUCE_SCATTER,
        axes=("tp",), comm_bytes=int(seconds * UNIT), deps=deps, inputs=((operand, 1),),
        outputs=((operand, 1),),
    )  # fmt: skip


@pytest.mark.parametrize(("bulk_s", "gemm_s"), [(1.0, 3.0), (4.0, 2.0), (0.0, 2.0)])
def test_the_bulk_kernel_takes_its_sms_only_while_it_runs(bulk_s: float, gemm_s: float) -> None:
    sms = 132
    assert ub_bulk_share_s(bulk_s, gemm_s, sms) == pytest.approx(
        min(bulk_s, gemm_s) * UB_COMM_SMS / sms
    )
    assert ub_bulk_share_s(bulk_s, gemm_s, UB_COMM_SMS) == 0.0
    # below the margin's cost on the GEMMs: gemm_s * UB_COMM_SMS / (sms - UB_COMM_SMS)
    assert ub_bulk_share_s(bulk_s, gemm_s, sms) < gemm_s * UB_COMM_SMS / (sms - UB_COMM_SMS)


def test_pipelined_chunks_are_told_from_the_gemms_beside_a_bulk_kernel() -> None:
    rule = overlap_rule(TimingPolicy.from_profile(get_framework("megatron-core")), tp=8, sp=True)
    assert rule is not None
    forward = [_gemm("proj", 8.0, ("attn", "wo"), "proj.partial", "fwd"),
               _scatter(4.0, (0,), "proj.partial", "fwd")]  # fmt: skip
    _, shared = overlap_block(forward, rule)
    assert pipelined_chunks(shared) == shared and len(shared) > 1
    backward = [
        _gemm("q.dx", 2.0, ("d.q", "wq"), "d.x", "bwd"),
        _gemm("q.dw", 3.0, ("d.q", "x"), "d.wq", "bwd"),
        _scatter(5.0, (0,), "d.x", "bwd"),
    ]
    _, shared = overlap_block(backward, rule)
    assert [i.name for i in shared] == ["q.dw"]
    assert pipelined_chunks(shared) == frozenset()


def test_the_pipelined_reduce_scatter_chunks_are_the_collectives_kernels() -> None:
    rule = overlap_rule(TimingPolicy.from_profile(get_framework("megatron-core")), tp=8, sp=True)
    assert rule is not None
    forward = [_gemm("proj", 8.0, ("attn", "wo"), "proj.partial", "fwd"),
               _scatter(4.0, (0,), "proj.partial", "fwd")]  # fmt: skip
    instrs, shared = overlap_block(forward, rule)
    scatters = pipelined_collectives(instrs)
    assert len(scatters) == len(pipelined_chunks(shared)) > 1  # one kernel per GEMM chunk
    assert sum(i.comm_bytes for i in scatters) == forward[1].comm_bytes  # the bytes, cut
    backward = [_gemm("q.dw", 3.0, ("d.q", "x"), "d.wq", "bwd"),
                _scatter(5.0, (), "d.x", "bwd")]  # fmt: skip
    assert pipelined_collectives(backward) == ()  # unsplit collectives are not chunks


def _h100(persistent: bool) -> System:
    """The h100-80gb preset, its GEMMs persistent (the preset's) or placed as SMs free."""
    system = load_system("h100-80gb")
    kernels = system.accelerator.kernels
    assert kernels is not None
    kernels = replace(kernels, persistent_gemm=persistent)
    return replace(system, accelerator=replace(system.accelerator, kernels=kernels))


def _compute(
    tp: int, margin: bool, option: str = OPTION, persistent: bool = False
) -> tuple[float, float]:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=tp, dp=1, sp=tp > 1, global_batch=1, micro_batch=1)
    # ub_multicast off: the toy step is then bound by its GEMM chunks, not by the multicast
    # reduce-scatters (ub_multicast.py), so the margin's cost shows in the step time
    overrides = {option: margin, "ub_multicast": False}
    backend = AnalyticalBackend(framework="megatron-core", overrides=overrides)
    result = backend.evaluate(model, parallel, _h100(persistent))
    return result.step_time_s, result.breakdown["compute"]


def test_the_recipes_bulk_overlap_costs_less_than_the_margin() -> None:
    assert get_framework("megatron-core").ub_bulk_sm_margin  # TE's default; recipes: per row
    on_s, on_compute = _compute(4, True)
    off_s, off_compute = _compute(4, False)
    assert off_compute < on_compute and off_s < on_s  # options differ: results differ
    # no tensor parallelism, no userbuffers kernel: the option changes nothing
    assert _compute(1, True) == _compute(1, False)


def test_persistent_gemms_without_the_margin_wait_for_the_bulk_kernels() -> None:
    # Hopper's persistent GEMMs (persistent_gemm.py): on every SM they wait for the bulk
    # kernel's SMs, so the recipes' setting costs more than the margin there
    on_s, on_compute = _compute(4, True, persistent=True)
    off_s, off_compute = _compute(4, False, persistent=True)
    assert off_compute > on_compute and off_s > on_s
    # with the margin the bulk GEMMs do not wait; what the flag still costs is the NCCL
    # collectives' (Megatron's asynchronous tp ones here: test_nccl_persistent.py)
    plain_compute = _compute(4, True)[1]
    assert 0.0 <= on_compute - plain_compute < off_compute - on_compute


def test_pipelined_chunks_on_every_sm_cost_less_than_the_margin() -> None:
    option = "ub_pipeline_sm_margin"
    assert getattr(get_framework("megatron-core"), option)  # TE's default since #1067
    on_s, on_compute = _compute(4, True, option)
    off_s, off_compute = _compute(4, False, option)
    assert off_compute < on_compute and off_s < on_s  # options differ: results differ
    assert _compute(1, True, option) == _compute(1, False, option)  # no userbuffers kernel


@pytest.mark.parametrize("option", [OPTION, "ub_pipeline_sm_margin"])
def test_a_non_boolean_value_is_a_one_line_error(option: str) -> None:
    with pytest.raises(ConfigError, match=option):
        get_framework("megatron-core").with_overrides({option: "no"})


def test_megatron_core_r08_rows_run_the_te_defaults_of_mid_2024() -> None:
    """Megatron-LM r0.8 with --tp-comm-overlap and no config: TE's initialize_ub of mid-2024
    built every default overlap without an SM margin (setups.toml MCORE08)."""
    rows = [c for c in package_cases() if c.source == "MCORE08"]
    assert len(rows) == 9
    for case in rows:
        options = dict(case.framework_options)
        assert options == {"ub_bulk_sm_margin": False, "ub_pipeline_sm_margin": False}, case.id
