"""MoE time mechanisms of DeepEP and NeMo AutoModel: DeepEP's internode all-to-all lasts as long
as its slowest level (its RDMA and NVLink stages run in one kernel), its SMs slow the compute it
overlaps, the automodel profile (Transformer Engine attention) and the FlexAttention kernel."""

from __future__ import annotations

from dataclasses import fields

import pytest

from stage_core.models.flavors import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical import costing_comm
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.collectives import alpha_beta_collective_s, call_overhead_s
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.overlap import DEEPEP_SMS, deepep_sm_share_s
from stage_explore.system import load_system
from stage_explore.system.model import NetworkDim, System

A2A = CollectiveKind.ALL_TO_ALL


def _level_s(dim: NetworkDim, ranks: int, size: float) -> float:
    """α–β all-to-all on one dim (collectives module docstring): (n−1)α + (n−1)/n·S/β, NCCL's
    per-call cost aside (paid once per call: ``call_overhead_s``)."""
    steps = (ranks - 1) * dim.latency_s
    volume = (ranks - 1) / ranks * size / dim.bandwidth_bytes_per_s
    return steps + volume


@pytest.mark.parametrize("fraction", [1.0, 0.5, 0.1])
def test_pipelined_all_to_all_lasts_its_slowest_level(fraction: float) -> None:
    system = load_system("h100-80gb")
    group = list(range(32))  # 4 nodes of 8: NVSwitch level of 8, InfiniBand level of 4
    size = 64 * 2**20
    inner = _level_s(system.network[0], 8, size)
    outer = _level_s(system.network[1], 4, size * fraction)
    serial = alpha_beta_collective_s(system, A2A, size, group, fraction, nccl=False)
    pipelined = alpha_beta_collective_s(
        system, A2A, size, group, fraction, pipelined=True, nccl=False
    )
    assert serial == pytest.approx(inner + outer, rel=1e-12)
    assert pipelined == pytest.approx(max(inner, outer), rel=1e-12)
    once = call_overhead_s(system.network, [0, 1])  # as an NCCL call: its fixed cost, once
    nccl = alpha_beta_collective_s(system, A2A, size, group, fraction)
    assert nccl == pytest.approx(once + inner + outer, rel=1e-12)
    one_node = list(range(8))  # a single level: nothing to pipeline
    assert alpha_beta_collective_s(
        system, A2A, size, one_node, pipelined=True, nccl=False
    ) == pytest.approx(_level_s(system.network[0], 8, size), rel=1e-12)


@pytest.mark.parametrize(("a2a", "compute"), [(1.0, 3.0), (3.0, 1.0), (0.0, 2.0)])
def test_deepep_sm_share_is_the_overlapped_work_on_its_sms(a2a: float, compute: float) -> None:
    assert deepep_sm_share_s(a2a, compute, 132) == pytest.approx(
        min(a2a, compute) * DEEPEP_SMS / 132
    )
    assert deepep_sm_share_s(a2a, compute, DEEPEP_SMS) == 0.0


def _breakdown(parallel: ParallelConfig, **options: bool) -> dict[str, float]:
    model = get_flavor("qwen3-30b-a3b").with_overrides(layers=4, seq_len=1024)
    backend = AnalyticalBackend(framework="megatron-core", overrides=options)
    result = backend.evaluate(model, parallel, load_system("h100-80gb"))
    return {"step": result.step_time_s, **result.breakdown}


ACROSS = ParallelConfig(dp=32, ep=32, micro_batch=1, global_batch=64)  # ep over 4 nodes


def test_deepep_beside_overlapped_compute_slows_it() -> None:
    """Under --overlap-moe-expert-parallel-comm DeepEP's kernels hold SMs the overlapped compute
    needs; without the overlap nothing runs beside them and compute is unchanged. (The NCCL
    runs leave out the all-to-all dispatcher's chunk sorts, which DeepEP's flex dispatcher does
    not run: tests/explore/test_megatron_sort_chunks.py.)"""
    on = _breakdown(ACROSS, moe_deepep=True, moe_comm_overlap=True)
    off = _breakdown(ACROSS, moe_deepep=False, moe_comm_overlap=True, moe_sort_chunks=False)
    assert on["compute"] > off["compute"]
    alone_on = _breakdown(ACROSS, moe_deepep=True, moe_comm_overlap=False)
    alone_off = _breakdown(ACROSS, moe_deepep=False, moe_comm_overlap=False, moe_sort_chunks=False)
    assert alone_on["compute"] == pytest.approx(alone_off["compute"], rel=1e-12)


def test_backend_times_deepep_all_to_alls_pipelined(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend asks for the pipelined time of DeepEP's expert all-to-alls: forcing the
    serial sum instead exposes more all-to-all time."""
    pipelined = _breakdown(ACROSS, moe_deepep=True)
    real = alpha_beta_collective_s

    def serial(
        system: System,
        kind: CollectiveKind,
        size: int,
        group: list[int],
        *rest: object,
        nccl: bool = True,
        level_rates: tuple[float | None, ...] = (),
    ) -> float:
        scale_out = rest[0] if rest else 1.0
        assert isinstance(scale_out, float)
        fractions = rest[2] if len(rest) > 2 else ()
        assert isinstance(fractions, tuple)
        return real(
            system, kind, size, group, scale_out, False, fractions, nccl=nccl,
            level_rates=level_rates,
        )  # fmt: skip

    monkeypatch.setattr(costing_comm, "alpha_beta_collective_s", serial)
    forced = _breakdown(ACROSS, moe_deepep=True)
    assert forced["exposed_all_to_all"] > pipelined["exposed_all_to_all"]


def test_automodel_profile_is_fsdp_with_transformer_engine_attention() -> None:
    automodel, fsdp = FRAMEWORKS["automodel"], FRAMEWORKS["fsdp"]
    differ = {f.name for f in fields(fsdp) if getattr(automodel, f.name) != getattr(fsdp, f.name)}
    # and torch pipelining's stage buffers (AutoPipeline; tests/explore/test_pipelining_buffers.py)
    assert differ == {
        "name",
        "description",
        "source",
        "attention_kernel",
        "pipelining_stage_buffers",
        "eager_modules",  # its DeepEP experts' eager biases (tests/explore/test_eager_automodel.py)
        "fused_fc1",  # its grouped experts' gate_and_up_projs (tests/explore/test_fused_fc1.py)
        "pp_unsharded_params",  # its PP stages held gathered (tests/explore/test_automodel_held.py)
        "pp_held_sync_per_schedule",  # synced per schedule (test_pp_unsharded_timing.py)
        "fsdp_no_sync_accumulation",  # defer_fsdp_grad_sync (tests/explore/test_fsdp_no_sync.py)
    }
    assert automodel.attention_kernel == "cudnn" and fsdp.attention_kernel == "fa2"
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=4096)
    parallel = ParallelConfig(dp=8, zero=3, micro_batch=1, global_batch=8)
    system = load_system("h100-80gb")
    te = AnalyticalBackend(framework="automodel").evaluate(model, parallel, system)
    fa2 = AnalyticalBackend(framework="fsdp").evaluate(model, parallel, system)
    assert te.breakdown["compute"] < fa2.breakdown["compute"]


def test_flex_attention_kernel_on_h100_is_a_share_of_fa3() -> None:
    """Dong et al. 2024 (arXiv 2412.05496): on H100 FlexAttention averages 85 % of FA3's forward
    and 76 % of its backward."""
    kernels = load_system("h100-80gb").accelerator.kernels
    assert kernels is not None
    forward, backward = kernels.attention("flex")
    assert forward == pytest.approx(0.85 * kernels.attention_forward, rel=1e-9)
    assert backward == pytest.approx(0.76 * kernels.attention_backward, rel=1e-9)
