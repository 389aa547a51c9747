"""The per-group cost of MoE grouped GEMMs (``KernelModel.grouped_gemm_group_s``): which GEMMs
are grouped, what a group adds to a kernel's time, that the H100 preset's figure is the cited
benchmark's time over the batched-GEMM wave model per group (and the B200 preset's, Transformer
Engine's on SM100), and what it changes in an evaluation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.serving import Phase, ServingConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.expert_gemms import grouped_gemm_groups
from stage_explore.analytical.gemm_tiles import gemm_shape, gemm_time_s
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.analytical.serving import evaluate_decode
from stage_explore.system import load_system
from stage_explore.system.accelerator import KernelModel
from stage_explore.system.loading import system_from_mapping
from stage_explore.system.model import System

H100 = load_system("h100-80gb")
B200 = load_system("b200")
GPTOSS = get_flavor("gpt-oss-20b").with_overrides(layers=2, seq_len=1024)  # 32 experts, top-4
LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)


def _kernels(system: System) -> KernelModel:
    kernels = system.accelerator.kernels
    assert kernels is not None
    return kernels


def _with_group_s(system: System, seconds: float) -> System:
    kernels = replace(_kernels(system), grouped_gemm_group_s=seconds)
    return replace(system, accelerator=replace(system.accelerator, kernels=kernels))


def test_the_grouped_gemms_are_the_fused_fc1_and_fc2_of_each_pass() -> None:
    layer = bind_all(make_workload(GPTOSS, ParallelConfig(global_batch=1)))["moe_layer"]
    groups = {
        i.name: grouped_gemm_groups(i, shape)
        for i in (*layer.fwd, *layer.bwd)
        if (shape := gemm_shape(i)) is not None
    }
    experts = GPTOSS.num_experts  # one rank holds every expert here
    grouped = {name for name, n in groups.items() if n}
    # forward up (gate fused into it) and fc2; backward each one's input and weight gradient
    assert len(grouped) == 6 and all(groups[name] == experts for name in grouped)
    assert all(name.startswith(("experts.up", "experts.fc2")) for name in grouped)
    assert not any(n for name, n in groups.items() if name.startswith("experts.gate"))
    assert not any(n for name, n in groups.items() if not name.startswith("experts."))


def test_a_grouped_gemm_adds_its_groups_times_the_per_group_cost() -> None:
    layer = bind_all(make_workload(GPTOSS, ParallelConfig(global_batch=1)))["moe_layer"]
    (up,) = [i for i in layer.fwd if i.name.startswith("experts.up") and i.kind == "einsum"]
    (q,) = [i for i in layer.fwd if i.name.startswith("q.") and i.kind == "einsum"]
    kernels = _kernels(H100)
    accelerator = H100.accelerator
    timer = KernelTimer(
        accelerator, kernels, "bf16", frozenset(), keys=512, head_dim=64, causal=True
    )
    rate = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    for instr, groups in ((up, GPTOSS.num_experts), (q, 0)):
        shape = gemm_shape(instr)
        assert shape is not None
        memory_s = (instr.bytes_read + instr.bytes_written) / rate
        alone = gemm_time_s(accelerator, kernels, "bf16", shape, instr.flops, memory_s)
        expected = alone + groups * kernels.grouped_gemm_group_s
        assert timer(instr) == pytest.approx(expected, rel=1e-12)


# tgale96/grouped_gemm#37 (H100, multi-stream cuBLAS, the path of TE's GroupedLinear and of
# AutoModel's grouped_gemm): 128 experts x 512 tokens, K 2048, N 1536 at 129.5 TFLOP/s — the
# preset's figure; pytorch/ao#2490 (H100, torch._grouped_mm): 16 experts, 8192 tokens, K 5120,
# N 8192 in 1.31 ms — a second implementation and shape in the same range
CUBLAS = ((128, 512, 1536, 2048), 2 * 65536 * 1536 * 2048 / 129.5e12)
GROUPED_MM = ((16, 512, 8192, 5120), 1.31e-3)


def _per_group_s(shape: tuple[int, int, int, int], measured_s: float) -> float:
    """The benchmark's time beyond this preset's batched-GEMM wave model, per group."""
    kernels = _kernels(H100)
    accelerator = H100.accelerator
    batch, m, n, k = shape
    rate = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    memory_s = 2 * batch * (m * k + k * n + m * n) / rate
    flops = 2 * batch * m * n * k
    model_s = gemm_time_s(accelerator, kernels, "bf16", shape, flops, memory_s)
    return (measured_s - model_s) / batch


def test_the_h100_figure_is_the_benchmarks_time_over_the_wave_model_per_group() -> None:
    figure = _kernels(H100).grouped_gemm_group_s
    assert _per_group_s(*CUBLAS) == pytest.approx(figure, abs=0.5e-6)
    assert 15e-6 <= _per_group_s(*GROUPED_MM) <= figure


# NVIDIA/TransformerEngine#3134 (SM100, benchmarks/linear/benchmark_grouped_linear.py): TE's
# multi-stream grouped GEMM (one cuBLASLt GEMM per expert) takes 0.267 ms for 8 experts x 128
# tokens, N 2048, K 2048 ("pure": GEMMs only). Its operands were NVFP4; timed here at the B200
# preset's FP8 and BF16 rates (the math is ~1 us per expert either way).
TE_SM100 = ((8, 128, 2048, 2048), 0.267e-3)


def _b200_per_group_s(dtype: str, element_bytes: int) -> float:
    """TE#3134's time beyond the B200 preset's batched-GEMM wave model, per group."""
    (batch, m, n, k), measured_s = TE_SM100
    accelerator = B200.accelerator
    rate = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    memory_s = (batch * (m * k + k * n) * element_bytes + 2 * batch * m * n) / rate
    flops = 2 * batch * m * n * k
    model_s = gemm_time_s(accelerator, _kernels(B200), dtype, (batch, m, n, k), flops, memory_s)
    return (measured_s - model_s) / batch


def test_the_b200_figure_is_the_te_benchmarks_time_over_the_wave_model_per_group() -> None:
    figure = _kernels(B200).grouped_gemm_group_s
    for dtype, element_bytes in (("fp8", 1), ("bf16", 2)):
        assert _b200_per_group_s(dtype, element_bytes) == pytest.approx(figure, abs=1.5e-6)
    # the same silicon, the same figure; Hopper parts take the H100's
    assert _kernels(load_system("gb200-nvl72")).grouped_gemm_group_s == figure
    for preset in ("h200", "h800"):
        assert (
            _kernels(load_system(preset)).grouped_gemm_group_s
            == _kernels(H100).grouped_gemm_group_s
        )


def test_the_figure_is_read_from_a_preset_and_checked() -> None:
    assert _kernels(H100).grouped_gemm_group_s == 20e-6
    assert _kernels(B200).grouped_gemm_group_s == 32e-6
    data = H100.to_dict()
    assert data["accelerator"]["kernels"]["grouped_gemm_group_s"] == 20e-6
    assert system_from_mapping(data) == H100
    data["accelerator"]["kernels"]["grouped_gemm_group_s"] = -1.0
    with pytest.raises(ConfigError, match="grouped_gemm_group_s.*>= 0, but got -1"):
        system_from_mapping(data)


EP8 = ParallelConfig(dp=8, ep=8, zero=1, micro_batch=1, global_batch=8)


def test_the_cost_in_an_evaluation() -> None:
    """An MoE step is slower by the groups' cost; a backend given the same point on systems that
    differ only in the figure gives different results (no stale memo); a dense model is
    untouched."""
    backend = AnalyticalBackend(framework="megatron-core")
    without = _with_group_s(H100, 0.0)
    moe_with = backend.evaluate(GPTOSS, EP8, H100).step_time_s
    moe_without = backend.evaluate(GPTOSS, EP8, without).step_time_s
    assert moe_with > moe_without
    dense = ParallelConfig(dp=8, zero=1, micro_batch=1, global_batch=8)
    assert (
        backend.evaluate(LLAMA, dense, H100).step_time_s
        == backend.evaluate(LLAMA, dense, without).step_time_s
    )


def test_serving_runs_the_experts_fused_without_the_per_group_cost() -> None:
    """A serving engine's fused MoE kernel (vLLM / SGLang fused_moe: one launch for every
    expert) has no per-expert cost: a decode step is the same on systems that differ only in
    the figure, while its MoE layer does have several local experts."""
    config = ServingConfig(phase=Phase.DECODE, batch=64, context_len=1024, dp=8, ep=8)
    backend = AnalyticalBackend()
    with_figure = evaluate_decode(backend, GPTOSS, config, H100)
    without = evaluate_decode(backend, GPTOSS, config, _with_group_s(H100, 0.0))
    assert _kernels(H100).grouped_gemm_group_s > 0
    assert GPTOSS.num_experts // config.ep > 1
    assert with_figure.time_per_output_token_s == without.time_per_output_token_s
    assert with_figure.breakdown == without.breakdown
