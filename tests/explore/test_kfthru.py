"""The step time of KempnerForge's logits gathered on every tensor-parallel rank (7 Dec 2026,
s35 kfthru): the head's all-gather of the logits, the loss kernels on ``tp`` times the local
logits, no vocabulary-parallel statistics all-reduces, no backward collective
(:mod:`stage_explore.analytical.gathered_logits`)."""

from __future__ import annotations

import pytest

from stage_core.lower.bind import Instr
from stage_core.trace import CollectiveKind
from stage_explore.analytical import kernels
from stage_explore.analytical.gathered_logits import gathered_logits
from stage_explore.analytical.loss_kernels import CROSS_ENTROPY_BYTES
from tests.explore.test_kflogits import (
    KF_TP1,
    KF_TP4,
    _evaluate,
    _package,
    _without_the_loss_rule,
)

LOCAL = 1000  # bytes of the rank's logits shard
LOSSES = frozenset({"loss"})


def _forward() -> list[Instr]:
    """The generator's head forward under TP: GEMM, vocabulary-parallel loss, 3 stats
    all-reduces."""
    stats = [
        Instr(
            "all_reduce:loss.stats",
            "fwd",
            "comm",
            collective=CollectiveKind.ALL_REDUCE,
            axes=("tp",),
            comm_bytes=8,
            deps=deps,
            inputs=(("loss.stats", 8),),
            outputs=(("loss.stats", 8),),
        )
        for deps in ((), (3,), (4,))
    ]
    return [
        Instr("ln_f", "fwd", "reduction", bytes_read=10, bytes_written=10),
        Instr("logits", "fwd", "einsum", flops=99, deps=(0,), outputs=(("logits", LOCAL),)),
        Instr(
            "loss",
            "fwd",
            "crossentropy",
            flops=5 * LOCAL // 2,
            bytes_read=LOCAL + 8,
            bytes_written=8,
            deps=(1,),
            inputs=(("logits", LOCAL), ("targets", 8)),
            outputs=(("loss", 8),),
        ),
        *stats,
        Instr("after", "fwd", "elementwise", bytes_read=4, bytes_written=4, deps=(5, 2)),
    ]


def _backward() -> list[Instr]:
    return [
        Instr(
            "loss.backward",
            "bwd",
            "backwardop",
            flops=LOCAL,
            bytes_read=LOCAL + 8,
            bytes_written=LOCAL,
            inputs=(("d.loss", 8), ("logits", LOCAL)),
            outputs=(("d.logits", LOCAL),),
        ),
        Instr("logits.dln_f", "bwd", "einsum", flops=99, deps=(0,), inputs=(("d.logits", LOCAL),)),
    ]


def test_the_forward_gathers_the_logits_before_the_loss_and_drops_the_stats() -> None:
    out = gathered_logits(_forward(), 4, LOSSES)
    names = [i.name for i in out]
    assert names == ["ln_f", "logits", "all_gather:logits", "loss", "after"]
    gather, loss, after = out[2], out[3], out[4]
    assert gather.collective is CollectiveKind.ALL_GATHER and gather.axes == ("tp",)
    assert gather.comm_bytes == LOCAL and gather.outputs == (("logits", 4 * LOCAL),)
    assert gather.deps == (1,) and set(loss.deps) == {1, 2}
    assert loss.inputs == (("logits", 4 * LOCAL), ("targets", 8))
    assert loss.bytes_read == 4 * LOCAL + 8 and loss.flops == 4 * (5 * LOCAL // 2)
    assert set(after.deps) == {3}  # the dropped all-reduce's wait goes back to the loss


def test_the_backward_has_the_loss_gradient_on_tp_times_the_logits_and_no_collective() -> None:
    out = gathered_logits(_backward(), 4, LOSSES)
    grad, gemm = out
    assert grad.outputs == (("d.logits", 4 * LOCAL),) and grad.flops == 4 * LOCAL
    assert grad.bytes_read == 4 * LOCAL + 8 and grad.bytes_written == 4 * LOCAL
    assert gemm == _backward()[1]  # the GEMM reads the local chunk of the gradient
    assert not any(i.collective for i in out)


@pytest.mark.parametrize("phase", [_forward, _backward])
def test_tp1_or_no_loss_leaves_the_instructions(phase: object) -> None:
    instrs = phase()  # type: ignore[operator]
    assert gathered_logits(instrs, 1, LOSSES) == tuple(instrs)
    assert gathered_logits(instrs, 4, frozenset()) == tuple(instrs)
    with pytest.raises(ValueError, match="tp must be >= 1, got 0"):
        gathered_logits(instrs, 0, LOSSES)


def test_the_gathered_logits_slow_the_kempnerforge_tp4_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """7B TP 4, micro-batch 4 x 4,096 tokens: per micro-batch an all-gather of 1 GB a rank
    and 3 more quarters of the loss's passes — several ms each, over a step above 1 s."""
    named = _evaluate(_package(KF_TP4))[0]
    plain = _without_the_loss_rule(_package(KF_TP4), monkeypatch)[0]
    assert 1.01 * plain < named < 1.15 * plain


def test_without_tensor_parallelism_the_step_is_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At TP 1 nothing is gathered: with the bf16 loss's passes (s35 bf16loss, its own tests in
    test_loss_kernels.py) timed as the fp32 loss's, the named row's step is the plain one's."""
    monkeypatch.setattr(kernels, "BF16_CROSS_ENTROPY_BYTES", CROSS_ENTROPY_BYTES)
    named = _evaluate(_package(KF_TP1))[0]
    plain = _without_the_loss_rule(_package(KF_TP1), monkeypatch)[0]
    assert named == pytest.approx(plain)
