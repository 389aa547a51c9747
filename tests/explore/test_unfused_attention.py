"""Transformer Engine's unfused attention (attention kernel ``"unfused"``,
:mod:`stage_explore.analytical.unfused_attention`): its kernels' scores, FLOPs and bytes against
closed forms computed here from DeepSeek-V3's latent attention, and its place in the timing."""

from __future__ import annotations

from stage_core.lower.bind import Instr
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.analytical.unfused_attention import SCORE_BYTES, UNFUSED, unfused_kernels
from stage_explore.system import load_system

DSV3 = get_flavor("deepseek-v3").with_overrides(layers=4, seq_len=4096)
QK, V = 128 + 64, 128  # DeepSeek-V3: nope 128 + rope 64 query/key dims, value 128
S = 4096
TP = 2


def _parallel(recompute: Recompute = Recompute.NONE) -> ParallelConfig:
    return ParallelConfig(tp=TP, ep=2, etp=1, sp=True, recompute=recompute, global_batch=1)


def _attention() -> list[Instr]:
    layer = lower(DSV3, _parallel()).blocks["layer"]
    return [i for i in (*layer.fwd, *layer.bwd) if i.kind == "attention"]


def test_kernels_cover_the_full_score_square() -> None:
    heads = DSV3.heads // TP
    scores = heads * S * S  # one sequence per micro-batch: every (query, key) pair of each head
    attention = _attention()
    assert {i.phase for i in attention} == {"fwd", "bwd"}
    for instr in attention:
        kernels = unfused_kernels(instr, (QK, V), S, causal=True)
        flops = sum(flops for _, flops, _ in kernels.gemms)
        moved = sum(size for _, _, size in kernels.gemms)
        if instr.phase == "fwd":  # Q·Kᵀ and P·V over every score: twice the causal count
            assert flops == 2 * scores * (QK + V) == 2 * instr.flops
            assert moved == 2 * scores * SCORE_BYTES  # scores written, probabilities read
            assert kernels.memory_bytes == 2 * scores * SCORE_BYTES  # the softmax
            assert [shape for shape, _, _ in kernels.gemms] == [
                (heads, S, S, QK),
                (heads, S, V, S),
            ]
        else:  # dP, dV, dQ, dK
            assert flops == 4 * scores * (QK + V) == 2 * instr.flops
            assert moved == 4 * scores * SCORE_BYTES
            assert kernels.memory_bytes == 3 * scores * SCORE_BYTES  # P, dP in; dS out


def test_timer_times_the_kernels_not_a_fused_rate() -> None:
    accelerator = load_system("gb200-nvl72").accelerator
    assert accelerator.kernels is not None
    hbm = accelerator.achieved_memory_bandwidth_bytes_per_s
    args = (accelerator, accelerator.kernels, "bf16", frozenset[str](), S, 128, True)
    fused = KernelTimer(*args, head_dims=(QK, V))
    unfused = KernelTimer(*args, attention_kernel=UNFUSED, head_dims=(QK, V))
    heads = DSV3.heads // TP
    scores = heads * S * S
    for instr in _attention():
        tensors = 4 if instr.phase == "fwd" else 7  # score-sized tensors read or written
        floor = tensors * scores * SCORE_BYTES / hbm  # every kernel at the HBM roofline
        assert unfused(instr) >= floor
        assert unfused(instr) > 2 * fused(instr)


def test_only_blackwell_runs_the_sm100_kernel() -> None:
    parallel = _parallel(Recompute.SELECTIVE)
    backend = AnalyticalBackend(
        framework="megatron-core", overrides={"sm100_attention_kernel": UNFUSED}
    )
    plain = AnalyticalBackend(framework="megatron-core")
    for system, slower in (("gb200-nvl72", True), ("h100-80gb", False)):
        spec = load_system(system)
        with_kernel = backend.evaluate(DSV3, parallel, spec).step_time_s
        without = plain.evaluate(DSV3, parallel, spec).step_time_s
        assert (with_kernel > without) is slower
        if not slower:
            assert with_kernel == without
