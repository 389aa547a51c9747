"""A memory-bound kernel's fixed time (``KernelModel.memory_kernel_s``): the A100, GH100 and
B200 figures are the cited benchmarks' fits, each kernel of its own pays it once (a fused
element-wise chain once, eager-table ops not: their fraction was measured with it), GEMMs and
attention never; and the weight-gradient GEMM's accumulator traffic under
``--gradient-accumulation-fusion`` (:func:`~stage_explore.analytical.kernels.
wgrad_accumulate_bytes`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import fuse_elementwise
from stage_explore.analytical.eager import eager_op_bytes
from stage_explore.analytical.kernels import (
    KernelTimer,
    is_own_kernel,
    wgrad_accumulate_bytes,
)
from stage_explore.system import load_system
from stage_explore.system.accelerator import KernelModel
from stage_explore.system.loading import system_from_mapping
from stage_explore.system.model import System

A100 = load_system("a100-80gb")
H100 = load_system("h100-80gb")
B200 = load_system("b200")
MODEL = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=4096)

# te42kyfo/gpu-benches gpu-small-kernels: element count d of the scale kernel (reads and writes
# d doubles: 16·d bytes) -> the best block size's GB/s, DRAM-sized volumes
A100_80 = {  # a100_80.txt
    5250033: 1587,
    7142609: 1623,
    10494834: 1665,
    15420351: 1691,
    24470157: 1713,
}
H200 = {  # h200.txt
    5298583: 3005,
    7516137: 3109,
    10661781: 3193,
    15123937: 3256,
    18012850: 3282,
}
# NVIDIA/cccl#7391, B200, DeviceTransform add F16 (3 arrays of 2-byte elements), cold single
# launches: elements -> us; NVIDIA/cccl#5249, B200, 2^16 elements: cold, batched (no PDL) us
B200_ADD = {2**24: 23.033, 2**28: 239.643}
B200_LAUNCH = (5.729, 4.094)


def _kernels(system: System) -> KernelModel:
    kernels = system.accelerator.kernels
    assert kernels is not None
    return kernels


def _fit(points: dict[int, float]) -> tuple[float, float]:
    """Least-squares ``t = a + V/b`` over (volume bytes, seconds): (a seconds, b bytes/s)."""
    pairs = [(16 * d, 16 * d / (gbs * 1e9)) for d, gbs in points.items()]
    n = len(pairs)
    mean_v = sum(v for v, _ in pairs) / n
    mean_t = sum(t for _, t in pairs) / n
    slope = sum((v - mean_v) * (t - mean_t) for v, t in pairs) / sum(
        (v - mean_v) ** 2 for v, _ in pairs
    )
    return mean_t - slope * mean_v, 1 / slope


@pytest.mark.parametrize(("system", "points"), [(A100, A100_80), (H100, H200)])
def test_the_presets_figure_is_the_benchmarks_fit(system: System, points: dict[int, float]) -> None:
    fixed, bandwidth = _fit(points)
    assert _kernels(system).memory_kernel_s == pytest.approx(fixed, abs=0.15e-6)
    if system is A100:  # the fit's rate is the preset's large-kernel fraction: no double count
        rate = system.accelerator.achieved_memory_bandwidth_bytes_per_s
        assert bandwidth == pytest.approx(rate, rel=0.02)


def test_the_b200_figure_is_the_cold_fit_less_the_single_launch_overhead() -> None:
    (v1, t1), (v2, t2) = ((6 * n, us * 1e-6) for n, us in B200_ADD.items())
    slope = (t2 - t1) / (v2 - v1)
    cold = t1 - slope * v1
    cold_launch, batched = B200_LAUNCH
    assert 1 / slope == pytest.approx(6.97e12, rel=0.01)
    assert _kernels(B200).memory_kernel_s == pytest.approx(
        cold - (cold_launch - batched) * 1e-6, abs=0.1e-6
    )
    for carried in ("gb200-nvl72", "b300", "gb300-nvl72"):  # no Blackwell Ultra figure: B200's
        assert _kernels(load_system(carried)).memory_kernel_s == _kernels(B200).memory_kernel_s


def _timer(
    system: System, memory_kernel_s: float = 0.0, eager_bytes: Mapping[str, int] | None = None
) -> KernelTimer:
    return KernelTimer(
        system.accelerator, _kernels(system), "bf16", frozenset(), 4096, 128, True,
        eager_bytes=eager_bytes or {}, memory_kernel_s=memory_kernel_s,
    )  # fmt: skip


def test_a_kernel_of_its_own_pays_it_once_and_a_fused_producer_not() -> None:
    fixed = _kernels(H100).memory_kernel_s
    hbm = H100.accelerator.achieved_memory_bandwidth_bytes_per_s
    timer = _timer(H100, memory_kernel_s=fixed)
    add = Instr("add", "fwd", "elementwise", bytes_read=4096, bytes_written=2048,
                outputs=(("y", 2048),))  # fmt: skip
    assert is_own_kernel(add)
    assert timer(add) == pytest.approx(fixed + 6144 / hbm, rel=1e-12)
    fused = replace(add, bytes_written=0)  # its output stays on chip: inside the next kernel
    assert not is_own_kernel(fused)
    assert timer(fused) == pytest.approx(4096 / hbm, rel=1e-12)
    bias_grad = Instr("b.backward", "bwd", "backwardop", bytes_read=2048, bytes_written=16,
                      outputs=(("d.x", 2048), ("d.b", 16)))  # fmt: skip
    assert is_own_kernel(bias_grad)  # reads the gradient it passes on: a reduction kernel
    gemm = Instr("mm", "fwd", "einsum", flops=2 * 64**3, bytes_read=2 * 2 * 64 * 64,
                 bytes_written=2 * 64 * 64, inputs=(("a", 8192), ("w", 8192)),
                 outputs=(("o", 8192),))  # fmt: skip
    assert not is_own_kernel(gemm)
    assert _timer(H100)(gemm) == timer(gemm)


def test_a_fused_chain_pays_it_once() -> None:
    gpt = get_flavor("gpt3-1.3b").with_overrides(layers=2, seq_len=1024)  # bias, GeLU, dropout
    layer = bind_all(make_workload(gpt, ParallelConfig(global_batch=1)))["layer"]
    fused = fuse_elementwise(layer.fwd)
    fixed = _kernels(H100).memory_kernel_s
    on, off = _timer(H100, memory_kernel_s=fixed), _timer(H100)
    chains = sum(1 for i in fused if is_own_kernel(i) and i.collective is None)
    producers = sum(
        1
        for before, after in zip(layer.fwd, fused, strict=True)
        if after.kind == "elementwise" and after.bytes_written < before.bytes_written
    )
    assert producers > 0  # the layer has fused chains (bias + GeLU, bias + dropout + add)
    for before, after in zip(layer.fwd, fused, strict=True):
        if after.kind == "elementwise" and after.bytes_written < before.bytes_written:
            assert not is_own_kernel(after)  # a producer runs inside its consumer's kernel
            assert is_own_kernel(before)  # unfused, it is a kernel
    compute = [i for i in fused if i.collective is None]
    extra = sum(on(i) for i in compute) - sum(off(i) for i in compute)
    assert extra == pytest.approx(chains * fixed, rel=1e-9)


def test_eager_table_ops_do_not_pay_it_again() -> None:
    """The eager fraction was measured on whole chains of ATen kernels at the rows' sizes: their
    fixed times are in it."""
    layer = bind_all(make_workload(MODEL, ParallelConfig(global_batch=1)))["layer"]
    table = eager_op_bytes(MODEL, "torchtitan", fused=False)
    fixed = _kernels(H100).memory_kernel_s
    on = _timer(H100, memory_kernel_s=fixed, eager_bytes=table)
    off = _timer(H100, eager_bytes=table)
    (norm,) = [i for i in layer.fwd if i.name == "ln2"]
    assert on(norm) == off(norm)


def test_the_figure_is_read_from_a_system_and_checked() -> None:
    data = A100.to_dict()
    assert data["accelerator"]["kernels"]["memory_kernel_s"] == 5.0e-6
    assert system_from_mapping(data) == A100
    data["accelerator"]["kernels"]["memory_kernel_s"] = -1e-6
    with pytest.raises(ConfigError, match="memory_kernel_s"):
        system_from_mapping(data)


def test_an_evaluation_pays_it() -> None:
    parallel = ParallelConfig(tp=2, dp=4, micro_batch=1, global_batch=8)
    none = replace(H100, accelerator=replace(
        H100.accelerator, kernels=replace(_kernels(H100), memory_kernel_s=0.0)))  # fmt: skip
    backend = AnalyticalBackend(framework="megatron-core")
    slow = backend.evaluate(MODEL, parallel, H100).step_time_s
    fast = backend.evaluate(MODEL, parallel, none).step_time_s
    assert slow > fast


def test_the_wgrad_gemm_accumulates_into_main_grad() -> None:
    """TE's wgrad GEMM reads and writes the accumulator (β = 1): fp32 adds 6 bytes per
    element to the generator's 2-byte write, bf16 2; under the GEMM's roofline they cost only a
    memory-bound GEMM time."""
    m, n, k = 4096, 4096, 64  # few tokens: memory-bound
    dw = Instr("dw", "bwd", "einsum", flops=2 * m * n * k, bytes_read=2 * k * (m + n),
               bytes_written=2 * m * n, inputs=(("x", 2 * k * m), ("d.y", 2 * k * n)),
               outputs=(("d.w", 2 * m * n),))  # fmt: skip
    assert wgrad_accumulate_bytes(dw, 4) == 6 * m * n
    assert wgrad_accumulate_bytes(dw, 2) == 2 * m * n
    weights = frozenset({"w"})
    hbm = H100.accelerator.achieved_memory_bandwidth_bytes_per_s

    def timer(accumulator: int) -> KernelTimer:
        return KernelTimer(H100.accelerator, _kernels(H100), "bf16", weights, 4096, 128, True,
                           wgrad_accumulator=accumulator)  # fmt: skip

    assert timer(4)(dw) == pytest.approx(timer(0)(dw) + 6 * m * n / hbm, rel=1e-9)
    big = replace(dw, flops=2 * m * n * 8192, bytes_read=2 * 8192 * (m + n))  # compute-bound
    assert timer(4)(big) == timer(0)(big)
