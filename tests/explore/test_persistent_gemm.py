"""Userbuffers bulk kernels beside persistent GEMMs (``KernelModel.persistent_gemm``,
:mod:`stage_explore.analytical.persistent_gemm`): the GEMM launched on every SM after a bulk
kernel ends at ``min(comm, gemm) + gemm``; the backward bulk all-gathers are paired with the
input-gradient GEMMs they run beside; the Hopper presets carry the flag, the others not; and an
evaluation pays it only where the recipe turns the bulk overlaps' SM margin off."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.overlap import apply_overlaps, overlap_rule
from stage_explore.analytical.persistent_gemm import bulk_gather_partners, persistent_bulk_s
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.system import load_system
from stage_explore.system.loading import system_from_mapping
from tests.explore.gemm_helpers import without_persistent_gemm

H100 = load_system("h100-80gb")
MODEL = get_flavor("llama3-70b").with_overrides(layers=2, seq_len=8192)
PARALLEL = ParallelConfig(tp=4, dp=2, sp=True, micro_batch=1, global_batch=4)


def test_the_gemm_ends_a_comm_time_late_until_the_comm_outlasts_it() -> None:
    # comm 1 beside gemm 3: the waiting blocks start at 1 and end at 4 (1 more)
    assert persistent_bulk_s(1.0, 3.0) == pytest.approx(1.0)
    # comm 3 beside gemm 2: the GEMM ends at 4, the comm at 3 (already exposed: 1) -> 1 more
    assert persistent_bulk_s(3.0, 2.0) == pytest.approx(1.0)
    # comm 5 beside gemm 2: the GEMM (4) ends before the comm (5), which is exposed already
    assert persistent_bulk_s(5.0, 2.0) == 0.0
    assert persistent_bulk_s(0.0, 2.0) == 0.0
    assert persistent_bulk_s(1.0, 0.0) == 0.0


def test_the_bulk_gathers_run_beside_their_layers_input_gradient_gemms() -> None:
    layer = bind_all(make_workload(MODEL, PARALLEL))["layer"]
    policy = TimingPolicy.from_profile(get_framework("megatron-core"))
    rule = overlap_rule(policy, tp=4, sp=True)
    assert rule is not None
    instrs, _ = apply_overlaps(layer.bwd, policy, rule)
    gathers, beside = bulk_gather_partners(instrs, rule)
    assert [g.name for g in gathers] == ["all_gather:ln2.tail", "all_gather:ln1.tail"]
    names = {g.name for g in beside}
    assert {"mlp.up.dln2", "mlp.gate.dln2", "q.dln1", "k.dln1", "v.dln1"} == names
    # not the output gradients' ring-exchange gathers, not the weight gradients
    assert not any(".dw" in name or "dmlp.w" in name for name in names)


def test_the_hopper_presets_carry_the_flag() -> None:
    for name in ("h100-80gb", "h200", "h800"):
        kernels = load_system(name).accelerator.kernels
        assert kernels is not None and kernels.persistent_gemm, name
    for name in ("a100-80gb", "b200", "gb200-nvl72", "mi300x"):
        kernels = load_system(name).accelerator.kernels
        assert kernels is not None and not kernels.persistent_gemm, name


def test_the_flag_is_read_from_a_system_and_checked() -> None:
    data = H100.to_dict()
    assert data["accelerator"]["kernels"]["persistent_gemm"] is True
    assert system_from_mapping(data) == H100
    data["accelerator"]["kernels"]["persistent_gemm"] = "yes"
    with pytest.raises(ConfigError, match="persistent_gemm"):
        system_from_mapping(data)


def test_an_evaluation_pays_it_without_the_bulk_sm_margin_only() -> None:
    without = without_persistent_gemm(H100)
    no_margin = AnalyticalBackend(framework="megatron-core", overrides={"ub_bulk_sm_margin": False})
    margin = AnalyticalBackend(framework="megatron-core")
    slow = no_margin.evaluate(MODEL, PARALLEL, H100).step_time_s
    fast = no_margin.evaluate(MODEL, PARALLEL, without).step_time_s
    assert slow > fast
    # TE's default (set_sm_margin on): the GEMM is launched on the SMs the bulk kernel leaves;
    # what the flag still costs there is the NCCL collectives' (test_nccl_persistent.py)
    nccl_only = (
        margin.evaluate(MODEL, PARALLEL, H100).step_time_s
        - margin.evaluate(MODEL, PARALLEL, without).step_time_s
    )
    assert slow - fast > nccl_only >= 0.0
    # no userbuffers without tensor parallelism: the margin option changes nothing
    tp1 = ParallelConfig(dp=8, micro_batch=1, global_batch=8)
    assert no_margin.evaluate(MODEL, tp1, H100).step_time_s == pytest.approx(
        margin.evaluate(MODEL, tp1, H100).step_time_s
    )
