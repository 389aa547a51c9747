"""The training loss as Megatron computes it: FP32, several passes over the logits
(CROSS_ENTROPY_BYTES per logit, forward and backward), at the achieved HBM bandwidth."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.kernels import (
    CROSS_ENTROPY_BYTES,
    TE_CROSS_ENTROPY_BYTES,
    KernelTimer,
    loss_logits,
)
from stage_explore.system import load_system

H100 = load_system("h100-80gb")
MODEL = get_flavor("llama3-8b").with_overrides(layers=2)


@pytest.mark.parametrize("tp", [1, 4])
def test_the_loss_moves_its_fp32_passes_over_the_logits(tp: int) -> None:
    parallel = ParallelConfig(tp=tp, sp=tp > 1, global_batch=1)
    head = bind_all(make_workload(MODEL, parallel))["head"]
    accelerator = H100.accelerator
    assert accelerator.kernels is not None
    logits = loss_logits(head.fwd)
    timer = KernelTimer(
        accelerator, accelerator.kernels, "bf16", frozenset(w.name for w in head.weights),
        MODEL.seq_len, 128, True, loss_logits=logits,
    )  # fmt: skip
    plain = KernelTimer(
        accelerator, accelerator.kernels, "bf16", frozenset(w.name for w in head.weights),
        MODEL.seq_len, 128, True,
    )  # fmt: skip
    bandwidth = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    # this rank's logits: the sequence times its share of the padded vocabulary
    elements = MODEL.seq_len * -(-MODEL.vocab // (128 * tp)) * 128
    (loss,) = [i for i in head.fwd if i.kind == "crossentropy"]
    (grad,) = [i for i in head.bwd if any(n == "d.logits" for n, _ in i.outputs)]
    assert timer(loss) == pytest.approx(elements * CROSS_ENTROPY_BYTES[0] / bandwidth)
    assert timer(grad) == pytest.approx(elements * CROSS_ENTROPY_BYTES[1] / bandwidth)
    assert timer(loss) > plain(loss) and timer(grad) > plain(grad)
    others = [i for i in (*head.fwd, *head.bwd) if i is not loss and i is not grad]
    assert all(timer(i) == plain(i) for i in others)


def test_transformer_engines_fused_loss_moves_fewer_bytes() -> None:
    """Under ``te_loss`` (framework option ``te_cross_entropy``: Megatron-Core
    ``cross_entropy_fusion_impl = "te"``) the loss is timed at TE_CROSS_ENTROPY_BYTES per logit,
    and a megatron-core step with the option is faster than the unfused fp32 loss's."""
    parallel = ParallelConfig(global_batch=1)
    head = bind_all(make_workload(MODEL, parallel))["head"]
    accelerator = H100.accelerator
    assert accelerator.kernels is not None
    logits = loss_logits(head.fwd)
    unfused = KernelTimer(
        accelerator, accelerator.kernels, "bf16", frozenset(w.name for w in head.weights),
        MODEL.seq_len, 128, True, loss_logits=logits,
    )  # fmt: skip
    fused = replace(unfused, te_loss=True)
    generator = replace(unfused, loss_logits=frozenset())  # the generator's own bytes
    bandwidth = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    elements = MODEL.seq_len * -(-MODEL.vocab // 128) * 128
    (loss,) = [i for i in head.fwd if i.kind == "crossentropy"]
    (grad,) = [i for i in head.bwd if any(n == "d.logits" for n, _ in i.outputs)]
    assert fused(loss) == pytest.approx(elements * TE_CROSS_ENTROPY_BYTES[0] / bandwidth)
    # the in-place scale, or the generator's gradient op where that moves more (its targets)
    te_grad = elements * TE_CROSS_ENTROPY_BYTES[1] / bandwidth
    assert fused(grad) == pytest.approx(max(te_grad, generator(grad)))
    assert fused(grad) == pytest.approx(te_grad, rel=1e-4)
    assert fused(loss) < unfused(loss) and fused(grad) < unfused(grad)
    assert not FRAMEWORKS["megatron-core"].te_cross_entropy

    def step(overrides: dict[str, object]) -> float:
        backend = AnalyticalBackend(framework="megatron-core", overrides=overrides)
        return backend.evaluate(MODEL, parallel, H100).step_time_s

    assert step({"te_cross_entropy": True}) < step({})
