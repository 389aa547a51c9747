"""The achieved HBM fraction of eager PyTorch's element-wise kernels
(``KernelModel.eager_memory``): the H100 and A100 figures are the cited benchmark's times over
the op list the eager table counts, eager-table instructions are timed at it (everything else
at ``efficiency.memory``), 0 falls back to ``efficiency.memory``, bad values are refused, and
an evaluation on systems differing only in it differs (no stale memo)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.eager import TORCHTITAN_RMSNORM, eager_instr_bytes, eager_op_bytes
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system import load_system
from stage_explore.system.accelerator import KernelModel
from stage_explore.system.loading import system_from_mapping
from stage_explore.system.model import System

H100 = load_system("h100-80gb")
A100 = load_system("a100-80gb")
MODEL = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=4096)

# linkedin/Liger-Kernel benchmark/data, provider "huggingface" (LlamaRMSNorm: the op list of
# eager.TORCHTITAN_RMSNORM), M = 2048 rows, bf16: hidden size -> (forward ms, backward ms), and
# the measured part's HBM peak (datasheets). H100 NVL: h100_all_benchmark_data.csv;
# A100-SXM4-80GB: all_benchmark_data.csv (2024-09-03); A100 80GB PCIe: a100_all_benchmark_data.csv
H100_NVL = (
    {8192: (0.32608, 0.80995), 16384: (0.60947, 1.58019), 32768: (1.21926, 3.02906)},
    3.9e12,
)
A100_SXM4 = (
    {8192: (0.51904, 1.35155), 16384: (0.98563, 2.56963), 32768: (1.91907, 5.01472)},
    2.039e12,
)
A100_PCIE = (
    {8192: (0.52326, 1.37626), 16384: (0.99226, 2.62451), 32768: (1.93331, 5.11898)},
    1.935e12,
)


def _kernels(system: System) -> KernelModel:
    kernels = system.accelerator.kernels
    assert kernels is not None
    return kernels


def _with_eager(system: System, fraction: float) -> System:
    kernels = replace(_kernels(system), eager_memory=fraction)
    return replace(system, accelerator=replace(system.accelerator, kernels=kernels))


def _mean_fraction(measured: dict[int, tuple[float, float]], peak: float) -> float:
    forward = TORCHTITAN_RMSNORM.bytes_per_element(backward=False)  # 36
    backward = TORCHTITAN_RMSNORM.bytes_per_element(backward=True)  # 92
    fractions = [
        2048 * hidden * per_element / (ms * 1e-3) / peak
        for hidden, times in measured.items()
        for per_element, ms in zip((forward, backward), times, strict=True)
    ]
    return sum(fractions) / len(fractions)


@pytest.mark.parametrize(("system", "data"), [(H100, H100_NVL), (A100, A100_SXM4)])
def test_the_presets_figure_is_the_benchmarks_bytes_over_its_time(
    system: System, data: tuple[dict[int, tuple[float, float]], float]
) -> None:
    assert _kernels(system).eager_memory == pytest.approx(_mean_fraction(*data), abs=0.005)
    # eager chains of kernels reach less of the bandwidth than the one-kernel figure
    assert _kernels(system).eager_memory < system.accelerator.efficiency.memory


def test_the_a100_pcie_run_moves_the_same_bytes_per_second_as_the_sxm4_run() -> None:
    pcie = _mean_fraction(*A100_PCIE) * A100_PCIE[1]
    sxm4 = _mean_fraction(*A100_SXM4) * A100_SXM4[1]
    assert pcie == pytest.approx(sxm4, rel=0.03)


def test_eager_table_instructions_run_at_it_and_the_rest_at_the_memory_fraction() -> None:
    layer = bind_all(make_workload(MODEL, ParallelConfig(global_batch=1)))["layer"]
    table = eager_op_bytes(MODEL, "torchtitan", fused=False)
    accelerator = H100.accelerator
    kernels = _kernels(H100)

    def timer(model: KernelModel) -> KernelTimer:
        return KernelTimer(
            accelerator, model, "bf16", frozenset(), MODEL.seq_len, 128, True, eager_bytes=table
        )

    peak = accelerator.memory_bandwidth_bytes_per_s
    (norm,) = [i for i in layer.fwd if i.name == "ln2"]
    moved = eager_instr_bytes(norm, table)
    assert moved is not None
    assert timer(kernels)(norm) == pytest.approx(moved / (peak * 0.50), rel=1e-12)
    fallback = replace(kernels, eager_memory=0.0)  # none stated: the memory fraction
    memory = accelerator.efficiency.memory
    assert timer(fallback)(norm) == pytest.approx(moved / (peak * memory), rel=1e-12)
    for instr in layer.fwd:  # an op the table does not name is timed as before
        if instr.flops == 0 and instr.collective is None and instr.name not in table:
            assert timer(kernels)(instr) == timer(fallback)(instr)


def test_the_figure_is_read_from_a_system_and_checked() -> None:
    assert _kernels(load_system("b200")).eager_memory == 0.0  # no Blackwell figure
    data = H100.to_dict()
    assert data["accelerator"]["kernels"]["eager_memory"] == 0.50
    assert system_from_mapping(data) == H100
    for bad in (1.5, -0.2):
        data["accelerator"]["kernels"]["eager_memory"] = bad
        with pytest.raises(ConfigError, match=f"eager_memory.*but got {bad}"):
            system_from_mapping(data)


def test_an_evaluation_on_systems_differing_only_in_it() -> None:
    """The eager torchtitan profile slows with a lower fraction; the same backend on both
    systems gives different results (no stale memo); Megatron-Core (fused kernels, no eager
    table) is untouched."""
    parallel = ParallelConfig(dp=8, zero=3, micro_batch=1, global_batch=8)
    other = _with_eager(H100, 0.78)
    eager = AnalyticalBackend(framework="torchtitan")
    slow = eager.evaluate(MODEL, parallel, H100).step_time_s
    fast = eager.evaluate(MODEL, parallel, other).step_time_s
    assert slow > fast
    megatron = AnalyticalBackend(framework="megatron-core")
    assert (
        megatron.evaluate(MODEL, parallel, H100).step_time_s
        == megatron.evaluate(MODEL, parallel, other).step_time_s
    )
