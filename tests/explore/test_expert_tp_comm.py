"""Megatron-Core's expert-tensor-parallel collectives under ``--tp-comm-overlap``: the
all-to-all dispatcher's all-gather of the routed tokens and reduce-scatter of the experts'
output (and their backward mirrors) are plain NCCL calls, never userbuffers
(:func:`~stage_explore.analytical.overlap.expert_tp_collective`), while the dense layers' keep
their userbuffers overlap."""

from __future__ import annotations

import pytest

from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical import costing
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.overlap import (
    Bulk,
    Pipelined,
    expert_tp_collective,
    overlap_collectives,
    overlap_rule,
)
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.system import load_system

AG, RS = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER


def _comm(kind: CollectiveKind, tensor: str, phase: str = "fwd") -> Instr:
    name = f"{'all_gather' if kind is AG else 'reduce_scatter'}:{tensor}"
    return Instr(name, phase, "comm", collective=kind, axes=("tp",), comm_bytes=1000)


def _rule(expert_tp_overlap: bool = False) -> object:
    policy = TimingPolicy.from_profile(get_framework("megatron-core"))
    rule = overlap_rule(policy, 4, True, expert_tp_overlap=expert_tp_overlap)
    assert rule is not None
    return rule


@pytest.mark.parametrize(
    ("kind", "tensor", "phase"),
    [(AG, "moe.tokens", "fwd"), (RS, "experts.fc2", "fwd"),
     (AG, "d.experts.fc2", "bwd"), (RS, "d.moe.tokens", "bwd")],
)  # fmt: skip
def test_expert_collectives_stay_on_the_path(kind: CollectiveKind, tensor: str, phase: str) -> None:
    instr = _comm(kind, tensor, phase)
    assert expert_tp_collective(instr)
    assert _rule()(instr) is None  # type: ignore[operator]
    kept = _rule(expert_tp_overlap=True)(instr)  # type: ignore[operator]
    assert kept is not None  # PyTorch async TP's path is left as it was


def test_dense_collectives_keep_userbuffers() -> None:
    rule = _rule()
    assert not expert_tp_collective(_comm(AG, "ln1"))
    assert rule(_comm(AG, "ln1")) == 0.25  # type: ignore[operator]
    assert rule(_comm(RS, "attn.proj")) == Pipelined(4)  # type: ignore[operator]
    assert rule(_comm(RS, "d.ln1", "bwd")) == Bulk()  # type: ignore[operator]
    a2a = Instr("all_to_all:moe.tokens", "fwd", "comm", collective=CollectiveKind.ALL_TO_ALL)
    assert not expert_tp_collective(a2a)


def test_expert_fc2_is_not_split_into_pipelined_chunks() -> None:
    gemm = Instr(
        "experts.fc2", "fwd", "einsum", flops=4000,
        inputs=(("experts.act", 4), ("experts.w2", 4)), outputs=(("experts.fc2", 4),),
    )  # fmt: skip
    scatter = Instr(
        "reduce_scatter:experts.fc2", "fwd", "comm", collective=RS, axes=("tp",),
        comm_bytes=4000, deps=(0,), inputs=(("experts.fc2", 4),), outputs=(("experts.fc2", 4),),
    )  # fmt: skip
    assert overlap_collectives([gemm, scatter], _rule()) == (gemm, scatter)  # type: ignore[arg-type]
    chunked = overlap_collectives([gemm, scatter], _rule(expert_tp_overlap=True))  # type: ignore[arg-type]
    assert len(chunked) > 2


def test_etp_equal_tp_exposes_the_expert_all_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    """tp 4 with etp = tp under megatron-core: the experts' all-gathers are exposed in full,
    more than when the rule is made to overlap them as userbuffers would."""
    model = get_flavor("mixtral-8x7b").with_overrides(layers=2, seq_len=2048)
    system = load_system("h100-80gb")
    parallel = ParallelConfig(tp=4, dp=8, ep=8, sp=True, global_batch=16)

    def exposed_gather() -> float:
        result = AnalyticalBackend(framework="megatron-core").evaluate(model, parallel, system)
        return float(result.breakdown.get("exposed_all_gather", 0.0))

    as_megatron = exposed_gather()
    original = costing.overlap_rule

    def overlapping(*args: object, **kwargs: object) -> object:
        return original(*args, **{**kwargs, "expert_tp_overlap": True})  # type: ignore[arg-type]

    monkeypatch.setattr(costing, "overlap_rule", overlapping)
    assert as_megatron > exposed_gather() > 0.0
