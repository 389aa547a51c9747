"""The levelled analytical mode against the trace mode on whole steps (docs/analytical.md,
"The timing engine").

The trace mode (:func:`~stage_explore.analytical.trace_mode.trace_step`) runs every node of a
step's program — all micro-batches' forward and backward blocks, bucketed gradient
reductions, ZeRO collectives, the optimizer — through the trace simulator under the backend's
policy, with the backend's own per-instruction costs and its rewrites applied to the trace.
The levelled mode (:class:`~stage_explore.analytical.backend.AnalyticalBackend`) times the same
program block by block, chunk by chunk and task by task. The contract, per framework profile,
on dense, Llama, Mixtral and DeepSeek configurations:

- one pipeline stage, ZeRO 0/1: both end the optimizer at the same time (to 1e-9 relative),
  except where userbuffers' rewrite leaves a collective after a block's last instruction (a
  block boundary synchronises both streams in the levelled mode only): then the trace is
  earlier by at most those tails;
- the step: the trace adds the ZeRO-1/2 parameter gather after the optimizer whole, the
  levelled mode hides the part ``overlap_param_gather`` hides behind the next step's forward;
- ZeRO-2/3 (collectives queued on their own streams in the trace, beside their block in the
  levelled mode) and pipeline transfers (on arrival in the trace, the profile's semantics in
  the levelled mode): the two differ by at most the seconds of those collectives / transfers;
- with the preset's ``nccl_channels`` (NCCL's SMs beside compute, charged per node in the
  trace, per block and chunk in the levelled mode): one stage, ZeRO 0/1, the trace ends
  between its end without them and the levelled end, at most the levelled charge earlier;
  pipelines, no earlier than the levelled mode and later by at most what its compute lost.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.nodes import stage_nodes
from stage_core.lower.program import lower
from stage_core.lower.program_node import (
    BWD_B,
    BWD_W,
    OPTIMIZER,
    PARAM_GATHER,
    SYNC,
    ZERO_GATHER,
    ZERO_SCATTER,
)
from stage_core.lower.weightgrad import split_backward
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Recompute, Schedule
from stage_core.trace import CollectiveKind, NodeKind, TraceNode
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.policy import ASTRA_SIM_POLICY, Overlap
from stage_explore.analytical.trace_mode import TraceStep, trace_step
from stage_explore.analytical.trace_models import AlphaBetaTimingModel
from stage_explore.analytical.tracesim import simulate
from stage_explore.evaluation import Evaluation
from stage_explore.system import load_system
from stage_explore.system.model import System
from tests.explore.trace_helpers import optimizer_end

#: The real preset: its network dims say how many SMs NCCL's kernels hold beside compute
#: (``nccl_channels``), which both modes charge (:mod:`~stage_explore.analytical.contention`;
#: the trace per compute node while a side stream's collective runs beside it, the levelled
#: mode per block and chunk).
REAL_SYSTEM = load_system("a100-80gb")
#: The same system without those figures: the contract of the two modes' timing is checked on
#: it, and on the real preset how far their contention differs.
SYSTEM = replace(
    REAL_SYSTEM, network=tuple(replace(dim, nccl_channels=None) for dim in REAL_SYSTEM.network)
)

#: One pipeline stage, ZeRO 0/1: tensor, sequence and expert parallelism, recompute, dense and
#: MoE families.
EQUAL_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("gpt-tp2-dp2-sp", "megatron-gpt-1.7b", dict(tp=2, dp=2, sp=True, global_batch=8)),
    ("gpt-tp4-dp2", "megatron-gpt-1.7b", dict(tp=4, dp=2, global_batch=8)),
    ("llama-zero1", "llama3-8b", dict(tp=2, dp=2, sp=True, zero=1, global_batch=8)),
    ("llama-selective", "llama3-8b",
     dict(tp=2, dp=2, sp=True, recompute=Recompute.SELECTIVE, global_batch=8)),
    ("mixtral-ep2", "mixtral-8x7b", dict(tp=2, dp=2, ep=2, sp=True, global_batch=4)),
    ("deepseek-ep2", "deepseek-v2-lite", dict(tp=2, dp=2, ep=2, sp=True, global_batch=4)),
]  # fmt: skip

#: ZeRO-2/3 with the preset's ``nccl_channels``: where the modes differ, each bounded.
BOUNDED_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("llama-zero2", "llama3-8b", dict(tp=1, dp=4, zero=2, global_batch=8)),
    ("llama-hsdp", "llama3-8b", dict(tp=1, dp=4, dp_shard=2, zero=3, global_batch=8)),
    ("llama-pp2-zero3", "llama3-8b", dict(tp=1, dp=2, pp=2, zero=3, global_batch=8)),
]

#: ZeRO-2/3: both modes run ZeRO's one queue (zero_queue.py), gathers one block ahead of their
#: compute, reduce-scatters in the frameworks' order, and a backward pass that ends once its
#: reduce-scatters (and hybrid sharding's replica all-reduces) have.
ZERO_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("llama-zero3", "llama3-8b", dict(tp=1, dp=4, zero=3, global_batch=8)),
    ("gpt-zero3-mb2", "megatron-gpt-1.7b", dict(tp=1, dp=4, zero=3, global_batch=16,
                                                 micro_batch=2)),
    ("llama-zero3-full", "llama3-8b",
     dict(tp=1, dp=4, zero=3, recompute=Recompute.FULL, global_batch=8)),
    ("llama-zero2", "llama3-8b", dict(tp=1, dp=4, zero=2, global_batch=8)),
    ("gpt-zero2-mb2", "megatron-gpt-1.7b", dict(tp=1, dp=4, zero=2, global_batch=16,
                                                 micro_batch=2)),
    ("llama-zero2-tp2-full", "llama3-8b",
     dict(tp=2, dp=2, sp=True, zero=2, recompute=Recompute.FULL, global_batch=8)),
    ("llama-hsdp", "llama3-8b", dict(tp=1, dp=4, dp_shard=2, zero=3, global_batch=8)),
    ("llama-hsdp-zero2", "llama3-8b", dict(tp=1, dp=4, dp_shard=2, zero=2, global_batch=8)),
    ("llama-pp2-zero3", "llama3-8b", dict(tp=1, dp=2, pp=2, zero=3, global_batch=8)),
    ("llama-pp2-zero2", "llama3-8b", dict(tp=1, dp=2, pp=2, zero=2, global_batch=8)),
]  # fmt: skip

#: Pipelines: the trace's sends hold what the policy's ``point_to_point`` gives a transfer
#: (scatter/gather without sp under tp), on arrival; the modes end the step together.
PIPELINE_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("gpt-pp2-tied-dp1", "megatron-gpt-1.7b", dict(tp=2, pp=2, global_batch=8)),
    ("gpt-pp2-dp2", "megatron-gpt-1.7b", dict(tp=2, dp=2, pp=2, global_batch=8)),
    ("llama-pp2-zero1-sp", "llama3-8b", dict(tp=2, dp=2, pp=2, zero=1, sp=True, global_batch=8)),
    ("gpt-pp2-vpp2", "megatron-gpt-1.7b",
     dict(tp=2, dp=2, pp=2, vpp=2, schedule=Schedule.INTERLEAVED, global_batch=8)),
    ("gpt-pp2-vpp2-n3", "megatron-gpt-1.7b",  # Megatron's groups of 3 (its PP2 N3 M5 example)
     dict(tp=2, dp=2, pp=2, vpp=2, schedule=Schedule.INTERLEAVED, global_batch=10,
          microbatch_group_size_per_vp_stage=3)),
]  # fmt: skip


def _run(
    framework: str, flavor: str, kwargs: dict[str, Any], system: System = SYSTEM
) -> tuple[Evaluation, TraceStep]:
    backend = AnalyticalBackend(framework=framework)
    model = get_flavor(flavor).with_overrides(layers=2, seq_len=1024)
    parallel = ParallelConfig(**kwargs)
    evaluation = backend.evaluate(model, parallel, system)
    return evaluation, trace_step(
        backend, model, parallel, system, record_nodes=True, gathers_ahead=False
    )


def _seconds(traced: TraceStep, rank: int, wanted: Any) -> float:
    """Seconds of ``rank``'s nodes for which ``wanted(template item)`` holds."""
    times = traced.result.node_times
    template = traced.templates[traced.stage_of[rank]]
    return sum(
        times[(rank, item.node.id)][1] - times[(rank, item.node.id)][0]
        for item in template
        if wanted(item)
    )


def _tails(traced: TraceStep, rank: int) -> float:
    """Per block instance of ``rank``: how long its nodes run past its last node (by id)."""
    instances: dict[str, list[int]] = {}
    for item in traced.templates[traced.stage_of[rank]]:
        if item.source is not None and item.source[1] in ("fwd", "bwd"):
            block = ".".join(item.node.name.split(".")[:4])  # F0.c0.b1.layer
            instances.setdefault(block, []).append(item.node.id)
    times = traced.result.node_times
    return sum(
        max(times[(rank, i)][1] for i in ids) - times[(rank, max(ids))][1]
        for ids in instances.values()
    )


@pytest.mark.parametrize(
    ("flavor", "kwargs"), [c[1:] for c in EQUAL_CASES], ids=[c[0] for c in EQUAL_CASES]
)
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_the_levelled_mode_ends_the_step_as_the_trace_mode(
    framework: str, flavor: str, kwargs: dict[str, Any]
) -> None:
    evaluation, traced = _run(framework, flavor, kwargs)
    backend_policy = AnalyticalBackend(framework=framework).policy
    (rank,) = traced.result.ranks
    gather = evaluation.breakdown.get("parameter_gather", 0.0)
    levelled = evaluation.step_time_s - gather  # the optimizer's end
    traced_end = optimizer_end(traced)
    userbuffers = Overlap.TP_COMM in backend_policy.overlaps and kwargs.get("sp", False)
    tolerance = 1e-9 * levelled
    if userbuffers:  # pipelined reduce-scatter chunks after a block's last instruction
        assert -tolerance <= levelled - traced_end <= _tails(traced, rank) + tolerance
    else:
        assert math.isclose(traced_end, levelled, rel_tol=1e-9), (traced_end, levelled)
    # after the optimizer: the parameter all-gathers, whole in the trace
    after = traced.result.makespan - traced_end
    gathers = _seconds(traced, rank, lambda i: i.source is not None and i.source[1] == SYNC
                       and i.node.collective is CollectiveKind.ALL_GATHER)  # fmt: skip
    assert math.isclose(after, gathers, rel_tol=1e-9, abs_tol=1e-15)
    if Overlap.PARAM_GATHER in backend_policy.overlaps:
        assert gather <= after * (1 + 1e-9) + 1e-15
    else:
        assert math.isclose(gather, after, rel_tol=1e-9, abs_tol=1e-15)
    if kwargs.get("zero", 0) >= 1:
        assert after > 0.0


@pytest.mark.parametrize(
    ("flavor", "kwargs"), [c[1:] for c in BOUNDED_CASES], ids=[c[0] for c in BOUNDED_CASES]
)
@pytest.mark.parametrize("framework", ["megatron-core", "deepspeed", "fsdp"])
def test_where_the_modes_differ_the_difference_is_bounded(
    framework: str, flavor: str, kwargs: dict[str, Any]
) -> None:
    """With the preset's ``nccl_channels`` both modes slow the compute beside the ZeRO
    collectives, the levelled per block, the trace per node while one runs beside it: apart,
    by at most the seconds of those collectives (equal without the figures:
    :func:`test_zero_queue_ends_the_step_as_the_trace_mode`)."""
    evaluation, traced = _run(framework, flavor, kwargs, REAL_SYSTEM)
    levelled = evaluation.step_time_s - evaluation.breakdown.get("parameter_gather", 0.0)
    rank = max(traced.result.ranks, key=lambda r: traced.end_of(r, OPTIMIZER))
    difference = abs(levelled - optimizer_end(traced))
    zero = (ZERO_GATHER, ZERO_SCATTER)
    bound = _seconds(traced, rank, lambda i: i.source is not None and i.source[1] in zero)
    assert 0.0 < difference <= bound * (1 + 1e-9), (difference, bound)


#: (framework, case) pairs of the queue's parity test: every case under every framework but
#: DeepSpeed's ZeRO-3 with recompute, whose third gather is the levelled mode's only.
ZERO_QUEUE_CASES = [
    pytest.param(framework, flavor, kwargs, id=f"{framework}-{name}")
    for framework in ("megatron-core", "deepspeed", "fsdp", "torchtitan")
    for name, flavor, kwargs in ZERO_CASES
    if not (framework == "deepspeed" and kwargs["zero"] == 3 and "recompute" in kwargs)
]


@pytest.mark.parametrize(("framework", "flavor", "kwargs"), ZERO_QUEUE_CASES)
@pytest.mark.parametrize("layers", [2, 8])
def test_zero_queue_ends_the_step_as_the_trace_mode(
    framework: str, layers: int, flavor: str, kwargs: dict[str, Any]
) -> None:
    """The levelled mode's closed form of ZeRO's queue per pass (``chunk_timing`` with the
    profile's ``zero3_prefetch_units``) ends the step where the trace's gathers and scatters,
    emitted in the frameworks' order on one stream, end it, with a backward pass (its send,
    the next task) waiting for its reduce-scatters and replica all-reduces in both: under a
    policy whose collectives wait for the compute issued before them (megatron-core,
    deepspeed) and ones whose do not (fsdp; torchtitan with FSDP's root unit, reduced as one
    unit: its scatters, then its replica all-reduce, and under pipelines its stage held
    gathered); ZeRO-2 and -3, hybrid sharding, two pipeline stages. Not here: DeepSpeed's
    third gather under recompute (the levelled mode only)."""
    backend = AnalyticalBackend(framework=framework)
    model = get_flavor(flavor).with_overrides(layers=layers, seq_len=1024)
    parallel = ParallelConfig(**kwargs)
    evaluation = backend.evaluate(model, parallel, SYSTEM)
    traced = trace_step(backend, model, parallel, SYSTEM, record_nodes=True)
    levelled = evaluation.step_time_s - evaluation.breakdown.get("parameter_gather", 0.0)
    assert math.isclose(optimizer_end(traced), levelled, rel_tol=1e-9), (
        optimizer_end(traced),
        levelled,
    )
    # the queue's edges: more exposed than the per-block rule (0 after the first block)
    label = "exposed_zero_gather" if kwargs["zero"] >= 3 else "exposed_zero_scatter"
    assert evaluation.breakdown[label] > 0.0


@pytest.mark.parametrize(
    ("flavor", "kwargs"), [c[1:] for c in PIPELINE_CASES], ids=[c[0] for c in PIPELINE_CASES]
)
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_pipelines_end_the_step_as_the_trace_mode(
    framework: str, flavor: str, kwargs: dict[str, Any]
) -> None:
    """Blocking, blocking-separate and overlapped transfers, tied embeddings (their all-reduce
    after the last backward also without gradient reductions, dp = 1), bucketed and
    unbucketed chunks, 1F1B and interleaved: the optimizer of the slowest stage ends at the
    same time in both modes."""
    evaluation, traced = _run(framework, flavor, kwargs)
    levelled = evaluation.step_time_s - evaluation.breakdown.get("parameter_gather", 0.0)
    assert math.isclose(optimizer_end(traced), levelled, rel_tol=1e-9), (
        optimizer_end(traced),
        levelled,
    )
    rank = max(traced.result.ranks, key=lambda r: traced.end_of(r, OPTIMIZER))
    sends = [
        traced.result.node_times[(rank, i.node.id)]
        for i in traced.templates[traced.stage_of[rank]]
        if i.node.kind is NodeKind.SEND
    ]
    assert sends and all(end > start for start, end in sends)


def test_every_node_of_a_stage_says_where_it_comes_from() -> None:
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
    programs = lower(model, ParallelConfig(tp=2, dp=2, pp=2, zero=3, global_batch=8))
    for stage in programs.stages:
        for item in stage_nodes(programs, stage):
            node = item.node
            if node.kind in (NodeKind.SEND, NodeKind.RECV):
                assert item.source is None
                continue
            assert item.source is not None, node.name
            kind, phase, index = item.source
            if phase in ("fwd", "bwd"):
                block = programs.blocks[kind]
                instr = (block.fwd if phase == "fwd" else block.bwd)[index]
                assert node.name.endswith("." + instr.name)
            elif phase == SYNC:
                assert node.name.endswith("." + stage.sync[index].name)
            elif phase == OPTIMIZER:
                assert node.name == "step.optimizer"
            else:
                assert phase in (ZERO_GATHER, ZERO_SCATTER) and kind in programs.blocks


def test_a_split_backward_is_emitted_as_the_callers_b_and_w_parts() -> None:
    """Under ZB-H1 the ``instructions`` hook is asked for the forward and the B and W parts
    (never the whole backward); given the bound halves it emits the bound split's nodes, the
    same names in the same order (test_trace_mode_split.py times them)."""
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=2, seq_len=1024)
    parallel = ParallelConfig(tp=2, pp=2, schedule=Schedule.ZERO_BUBBLE, global_batch=8)
    programs = lower(model, parallel)
    asked: set[str] = set()

    def halves(block: BoundBlock, phase: str) -> tuple[Instr, ...]:
        asked.add(phase)
        split = split_backward(block)
        return {"fwd": block.fwd, BWD_B: split.input_grad, BWD_W: split.weight_grad}[phase]

    for stage in programs.stages:
        bound = stage_nodes(programs, stage, keep_empty=True)
        emitted = stage_nodes(programs, stage, halves, keep_empty=True)
        assert [i.node.name for i in emitted] == [i.node.name for i in bound]
    assert asked == {"fwd", BWD_B, BWD_W}


def test_a_collective_on_a_side_stream_runs_beside_the_communication_slot() -> None:
    size = 1 << 26
    reduce = TraceNode(0, "tp", NodeKind.COLL, collective=CollectiveKind.ALL_REDUCE,
                       comm_bytes=size, group=(0, 1))  # fmt: skip
    bucket = TraceNode(1, "dp", NodeKind.COLL, collective=CollectiveKind.ALL_REDUCE,
                       comm_bytes=size, group=(0, 1))  # fmt: skip
    model = AlphaBetaTimingModel(SYSTEM)
    seconds = model.collective(CollectiveKind.ALL_REDUCE, size, (0, 1))[0]
    policy = AnalyticalBackend().policy
    assert policy.side_streams and not ASTRA_SIM_POLICY.side_streams
    one = simulate({0: [reduce, bucket]}, model, policy=policy)
    beside = simulate({0: [reduce, bucket]}, model, policy=policy, streams={0: {1: "sync"}})
    assert one.ranks[0].finish == 2 * seconds  # both on the one slot: in a row
    assert beside.ranks[0].finish == seconds  # the bucket on its own stream
    with pytest.raises(ConfigError, match="stream 'comm' of node 1"):
        simulate({0: [reduce, bucket]}, model, policy=policy, streams={0: {1: "comm"}})


def _random_cases(count: int, seed: int) -> list[tuple[str, dict[str, Any]]]:
    """Seeded one-stage configurations without ZeRO-2/3: tp, sp, dp, ep, recompute, ZeRO-1,
    micro-batch size and count, over dense and MoE families."""
    import random

    rng = random.Random(seed)
    flavors = ("megatron-gpt-1.7b", "llama3-8b", "mixtral-8x7b", "deepseek-v2-lite")
    cases: list[tuple[str, dict[str, Any]]] = []
    while len(cases) < count:
        flavor = rng.choice(flavors)
        tp, dp = rng.choice((1, 2, 4)), rng.choice((1, 2, 4))
        ep = rng.choice((1, 2)) if flavor in ("mixtral-8x7b", "deepseek-v2-lite") else 1
        if dp % ep or tp * dp > 8:
            continue
        micro_batch = rng.choice((1, 2))
        kwargs: dict[str, Any] = dict(
            tp=tp, dp=dp, ep=ep, sp=tp > 1 and rng.random() < 0.5, zero=rng.choice((0, 1)),
            recompute=rng.choice(tuple(Recompute)), micro_batch=micro_batch,
            global_batch=dp * micro_batch * rng.choice((1, 2, 3)),
        )  # fmt: skip
        cases.append((flavor, kwargs))
    return cases


@pytest.mark.parametrize("framework", ["megatron-lm-2021", "torchtitan"])
@pytest.mark.parametrize(("flavor", "kwargs"), _random_cases(12, seed=11))
def test_the_modes_agree_on_random_one_stage_configurations(
    framework: str, flavor: str, kwargs: dict[str, Any]
) -> None:
    evaluation, traced = _run(framework, flavor, kwargs)
    levelled = evaluation.step_time_s - evaluation.breakdown.get("parameter_gather", 0.0)
    assert math.isclose(optimizer_end(traced), levelled, rel_tol=1e-9), kwargs


def test_megatron_core_buckets_only_the_first_chunk_in_the_trace_too() -> None:
    """``ddp_bucket_first_chunk_only`` (Megatron-Core DDP's ``disable_bucketing``): the trace
    reduces a later pipeline stage's gradients after its last backward, as the levelled mode
    does, and only the first stage's first chunk reduces buckets during its backward."""
    backend = AnalyticalBackend(framework="megatron-core")
    assert backend.framework.ddp_bucket_first_chunk_only
    assert Overlap.GRAD_REDUCE in backend.policy.overlaps
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=8, seq_len=1024)
    parallel = ParallelConfig(tp=2, dp=2, pp=2, global_batch=8)
    traced = trace_step(backend, model, parallel, SYSTEM, record_nodes=True, gathers_ahead=False)
    times = traced.result.node_times
    early = {}
    for rank in traced.result.ranks:
        template = traced.templates[traced.stage_of[rank]]
        backward_end = traced.end_of(rank, "bwd")
        starts = [
            times[(rank, item.node.id)][0]
            for item in template
            if item.source is not None and item.source[1] == SYNC
            and item.node.collective is not CollectiveKind.ALL_GATHER
        ]  # fmt: skip
        assert starts
        early[traced.stage_of[rank]] = sum(start < backward_end for start in starts)
    assert early[0] > 0 and early[1] == 0, early


@pytest.mark.parametrize(
    "kwargs",
    [dict(tp=2, pp=2, global_batch=8), dict(tp=2, dp=2, pp=2, zero=2, global_batch=8)],
    ids=["dp1", "zero2"],
)
def test_the_tied_embedding_all_reduce_follows_the_last_backward_without_buckets(
    kwargs: dict[str, Any],
) -> None:
    """No gradient bucket to queue behind (dp = 1; ZeRO-2, whose reduce-scatters run per
    block): the all-reduce of the tied embedding between the pipeline ends still runs after
    the first stage's last backward pass (under ZeRO-2 once its reduce-scatters have ended),
    exposed before the optimizer, in both modes."""
    for framework in ("megatron-lm-2021", "megatron-core"):
        evaluation, traced = _run(framework, "megatron-gpt-1.7b", kwargs)
        rank = max(traced.result.ranks, key=lambda r: traced.end_of(r, OPTIMIZER))
        (tied,) = [
            traced.result.node_times[(rank, i.node.id)]
            for i in traced.templates[traced.stage_of[rank]]
            if i.node.name.endswith("embedding_grad_all_reduce")
        ]
        end = traced.end_of(rank, "bwd")  # issued when the backward pass ends
        if kwargs.get("zero", 0) >= 2:
            assert traced.end_of(rank, ZERO_SCATTER) > end
            end = traced.end_of(rank, ZERO_SCATTER)
        assert tied[0] == end
        exposed = evaluation.breakdown.get("exposed_gradient_sync", 0.0)
        assert exposed > 0.0
        assert math.isclose(exposed, tied[1] - tied[0], rel_tol=1e-9), (exposed, tied)


def _slowed(traced: TraceStep) -> float:
    """Seconds the trace's compute nodes lasted beyond their work, over every rank (what the
    collectives beside them took: :meth:`~stage_explore.analytical.trace_models.
    BaseTimingModel.beside_share`)."""
    times, total = traced.result.node_times, 0.0
    for rank, timing in traced.result.ranks.items():
        walls = sum(
            times[(rank, item.node.id)][1] - times[(rank, item.node.id)][0]
            for item in traced.templates[traced.stage_of[rank]]
            if item.node.kind is NodeKind.COMP
        )
        total += walls - timing.compute
    return total


def _levelled_end(evaluation: Evaluation) -> float:
    return evaluation.step_time_s - evaluation.breakdown.get("parameter_gather", 0.0)


@pytest.mark.parametrize(
    ("flavor", "kwargs"), [c[1:] for c in EQUAL_CASES], ids=[c[0] for c in EQUAL_CASES]
)
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_on_the_real_preset_the_trace_charges_the_sms_nccl_holds_at_most_as_the_levelled_mode(
    framework: str, flavor: str, kwargs: dict[str, Any]
) -> None:
    """One stage, ZeRO 0/1, the preset's ``nccl_channels``: the gradient buckets beside the
    last backward slow it in both modes. The levelled mode charges the chunk's share for all
    the buckets' hidden seconds and adds them after its last backward
    (``planning._chunk``: ``hidden_sync_s`` × ``_chunk_share``); the trace slows each compute
    node only while a bucket runs beside it — not while the compute stream waits for a tp
    collective — and a slowed backward delays no bucket of a backlogged queue. So the trace
    ends between its end without the figures and the levelled end, at most the levelled
    charge (``exposed_nccl_contention``) earlier; where the levelled mode charges nothing the
    two agree as without the figures."""
    real, traced = _run(framework, flavor, kwargs, REAL_SYSTEM)
    plain = optimizer_end(_run(framework, flavor, kwargs)[1])
    levelled, end = _levelled_end(real), optimizer_end(traced)
    charged = real.breakdown.get("exposed_nccl_contention", 0.0)
    tolerance = 1e-9 * levelled
    policy = AnalyticalBackend(framework=framework).policy
    (rank,) = traced.result.ranks
    tails = _tails(traced, rank) if Overlap.TP_COMM in policy.overlaps else 0.0
    assert plain - tolerance <= end <= levelled + tolerance, (plain, end, levelled)
    assert levelled - end <= charged + tails + tolerance, (levelled - end, charged)
    if charged == 0.0:
        assert end == pytest.approx(plain, rel=1e-9)
    elif kwargs.get("zero") == 1 and not FRAMEWORKS[framework].zero1_grad_all_reduce:
        # reduce-scatters beside the backward, no backlog (an all-reducing ZeRO-1, InternEvo's,
        # moves twice the bytes and backs its queue up: a slowed backward delays no bucket)
        assert end > plain + tolerance and _slowed(traced) > 1e-12


@pytest.mark.parametrize(
    ("flavor", "kwargs"), [c[1:] for c in PIPELINE_CASES], ids=[c[0] for c in PIPELINE_CASES]
)
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_on_the_real_preset_a_pipelines_slowed_backward_delays_the_stage_before_it(
    framework: str, flavor: str, kwargs: dict[str, Any]
) -> None:
    """Pipelines with the preset's ``nccl_channels``: the trace ends no earlier than the
    levelled mode, and later by at most what its compute nodes lost. The levelled mode adds a
    chunk's lost seconds to its reductions' end only; in the trace a later stage's last
    backward, slowed by its buckets, sends its input gradient later, and the stage before it
    starts its own last backward that much later (per-chunk approximation of the levelled
    mode)."""
    real, traced = _run(framework, flavor, kwargs, REAL_SYSTEM)
    plain = optimizer_end(_run(framework, flavor, kwargs)[1])
    levelled, end = _levelled_end(real), optimizer_end(traced)
    tolerance = 1e-9 * levelled
    assert plain - tolerance <= end
    assert levelled - tolerance <= end <= levelled + _slowed(traced) + tolerance, (end, levelled)


@pytest.mark.parametrize("framework", ["megatron-lm-2021", "torchtitan"])
def test_the_trace_mode_sees_the_sms_nccl_holds_beside_compute(framework: str) -> None:
    """The trace on the real preset is slower than without its ``nccl_channels`` by the
    seconds its compute nodes lost beside the buckets (one rank, the backward on the critical
    path): Llama 3 8B tp 2 dp 2 sp ZeRO-1."""
    kwargs = dict(tp=2, dp=2, sp=True, zero=1, global_batch=8)
    _, traced = _run(framework, "llama3-8b", kwargs, REAL_SYSTEM)
    plain = _run(framework, "llama3-8b", kwargs)[1]
    slowed = _slowed(traced)
    assert abs(_slowed(plain)) < 1e-12 < slowed  # float sums of the node durations
    assert 0.0 < optimizer_end(traced) - optimizer_end(plain) <= slowed * (1 + 1e-9)


#: ZeRO-1 under ``overlap_param_gather``: GPT's tied embedding in the forward's first bucket,
#: Llama with sp (its tp all-reduced norms outside the buckets), a pipeline.
AHEAD_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("gpt-zero1-dp4", "megatron-gpt-1.7b", dict(tp=1, dp=4, zero=1, global_batch=8)),
    ("llama-zero1-sp", "llama3-8b", dict(tp=2, dp=2, sp=True, zero=1, global_batch=8)),
    ("llama-pp2-zero1-sp", "llama3-8b", dict(tp=2, dp=2, pp=2, zero=1, sp=True, global_batch=8)),
]

#: The profiles whose policy overlaps the next step's parameter gathers.
GATHERING = sorted(
    f for f in FRAMEWORKS if Overlap.PARAM_GATHER in AnalyticalBackend(framework=f).policy.overlaps
)


@pytest.mark.parametrize(
    ("flavor", "kwargs"), [c[1:] for c in AHEAD_CASES], ids=[c[0] for c in AHEAD_CASES]
)
@pytest.mark.parametrize("framework", GATHERING)
def test_the_next_steps_parameter_gathers_run_ahead_of_the_first_forward(
    framework: str, flavor: str, kwargs: dict[str, Any]
) -> None:
    """``gathers_ahead``: every bucketed chunk's step-end all-gather runs bucket by bucket
    before its first forward's blocks (its bytes split, none left after the optimizer); the
    step ends later than with the gathers after the optimizer by at least the first bucket's
    gather on the first stage (everything waits for that stage's first forward) and at most
    every stage's gathers in a row (max-plus)."""
    backend = AnalyticalBackend(framework=framework)
    model = get_flavor(flavor).with_overrides(layers=2, seq_len=1024)
    parallel = ParallelConfig(**kwargs)
    behind = trace_step(backend, model, parallel, SYSTEM, record_nodes=True, gathers_ahead=False)
    ahead = trace_step(backend, model, parallel, SYSTEM, record_nodes=True)
    programs = lower(model, parallel)
    first = whole = 0.0
    for rank in ahead.result.ranks:
        stage = ahead.stage_of[rank]
        items = [i for i in ahead.templates[stage] if i.source and i.source[1] == PARAM_GATHER]
        if stage > 0 and backend.framework.ddp_bucket_first_chunk_only:
            assert not items  # unbucketed: its gather after the optimizer, as before
            continue
        assert len(items) >= 2  # buckets
        assert ahead.end_of(rank, OPTIMIZER) == max(
            end for (r, _), (_, end) in ahead.result.node_times.items() if r == rank
        )  # nothing after the optimizer
        step_end = {i.source[2] for i in items if i.source is not None}
        sync = programs.stages[stage].sync
        assert sum(i.node.comm_bytes for i in items) == sum(sync[j].comm_bytes for j in step_end)
        times = [ahead.result.node_times[(rank, i.node.id)] for i in items]
        whole += sum(end - start for start, end in times)
        if stage == 0:
            first = times[0][1] - times[0][0]
    exposed = optimizer_end(ahead) - optimizer_end(behind)
    tolerance = 1e-9 * optimizer_end(behind)
    assert first - tolerance <= exposed <= whole + tolerance, (first, exposed, whole)
