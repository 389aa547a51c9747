"""Communication per rank against formulas.md §5, from the lowered instructions and trace nodes.

Every collective here is *derived* (layout changes, weight-gradient partial sums, ZeRO
shards, pipeline boundaries), none is written by hand; these tests pin the derived lists to
Megatron's, per layer and micro-batch (``BoundBlock.fwd``/``bwd``), per step
(``StageProgram.sync``) and per stage template (``stage_nodes``). ``comm_bytes`` follows
ASTRA-sim: all-reduce and all-to-all the whole buffer, reduce-scatter the whole input,
all-gather the per-rank shard. Where the generator differs from the reference's wording the
test asserts the generator's exact list and says why (docs/parallelism.md lists them).
"""

from __future__ import annotations

from collections import Counter

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import BoundBlock
from stage_core.lower.memory import memory_report
from stage_core.lower.nodes import stage_nodes
from stage_core.lower.program import ProgramSet, lower
from stage_core.lower.program_node import ProgramNode
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind, NodeKind

AR, AG, RS, A2A = "all_reduce", "all_gather", "reduce_scatter", "all_to_all"

GPT = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)  # s=2048, h=2304
LLAMA = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=1024)  # h=4096, 8 kv heads
MIXTRAL = get_flavor("mixtral-8x7b").with_overrides(layers=2, seq_len=1024)  # 8 experts, top-2


Comm = tuple[str, str, tuple[str, ...], int]


def comms(block: BoundBlock, phase: str | None = None) -> list[Comm]:
    """(collective, tensor, axes, bytes) of a block's collectives, in order."""
    return [
        (str(i.collective), i.name.partition(":")[2], i.axes, i.comm_bytes)
        for i in block.fwd + block.bwd
        if i.is_comm and (phase is None or i.phase == phase)
    ]


# -- tensor parallelism --------------------------------------------------------------------------


@pytest.mark.parametrize("t", [2, 4, 8])
@pytest.mark.parametrize("b", [1, 2])
def test_tp_is_two_all_reduces_forward_and_two_backward(t: int, b: int) -> None:
    layer = lower(GPT, ParallelConfig(tp=t, micro_batch=b)).blocks["layer"]
    bsh = b * GPT.seq_len * GPT.hidden * 2
    # Megatron's g after the row-parallel attention projection and FFN down-projection ...
    assert comms(layer, "fwd") == [
        (AR, "attn.proj.nobias", ("tp",), bsh),
        (AR, "mlp.fc2.nobias", ("tp",), bsh),
    ]
    # ... and f, the all-reduce of the input gradient of each column-parallel region.
    assert comms(layer, "bwd") == [(AR, "d.ln2", ("tp",), bsh), (AR, "d.ln1", ("tp",), bsh)]


@pytest.mark.parametrize("t", [2, 4, 8])
@pytest.mark.parametrize("b", [1, 2])
def test_tp_sp_gathers_and_scatters_and_regathers_the_saved_inputs(t: int, b: int) -> None:
    """Forward: 2 all-gathers (shard ``b·s·h/t``) and 2 reduce-scatters (input ``b·s·h``).
    Backward: the conjugates (2 reduce-scatters, 2 all-gathers) *plus* 2 all-gathers that
    re-gather the sequence-sharded saved norms (``ln1``, ``ln2``) for the weight gradients —
    Megatron's implementation saves ``x/t`` and re-gathers it; the reference's "the same
    backward" counts only the conjugates."""
    layer = lower(GPT, ParallelConfig(tp=t, sp=True, micro_batch=b)).blocks["layer"]
    bsh = b * GPT.seq_len * GPT.hidden * 2
    shard = bsh // t
    assert comms(layer, "fwd") == [
        (AG, "ln1", ("tp",), shard),
        (RS, "attn.proj.nobias", ("tp",), bsh),
        (AG, "ln2", ("tp",), shard),
        (RS, "mlp.fc2.nobias", ("tp",), bsh),
    ]
    assert comms(layer, "bwd") == [
        (AG, "d.mlp.fc2.nobias", ("tp",), shard),  # conjugate of the FFN reduce-scatter
        (AG, "ln2", ("tp",), shard),  # re-gather of the saved input, for dW1
        (RS, "d.ln2", ("tp",), bsh),  # conjugate of the FFN all-gather
        (AG, "d.attn.proj.nobias", ("tp",), shard),
        (AG, "ln1", ("tp",), shard),  # re-gather, for dWq, dWk, dWv
        (RS, "d.ln1", ("tp",), bsh),
    ]
    kinds = Counter(kind for kind, *_ in comms(layer, "bwd"))
    assert kinds == {AG: 4, RS: 2}


def test_full_recompute_repeats_the_forward_collectives_selective_none() -> None:
    sp = ParallelConfig(tp=4, sp=True)
    forward = comms(lower(GPT, sp).blocks["layer"], "fwd")
    full = lower(GPT, ParallelConfig(tp=4, sp=True, recompute="full")).blocks["layer"]
    selective = lower(GPT, ParallelConfig(tp=4, sp=True, recompute="selective")).blocks["layer"]
    assert comms(full, "recompute") == forward
    assert comms(selective, "recompute") == []  # the attention core communicates nothing
    plain = lower(GPT, sp).blocks["layer"]
    assert comms(full, "bwd") == comms(selective, "bwd") == comms(plain, "bwd")


def test_vocab_parallel_head_and_embedding() -> None:
    """Embedding: partial sums over the vocabulary shards, reduce-scattered with SP; the loss
    all-reduces three fp32 statistics per token (max, sum of exponentials, target logit)."""
    b, t = 2, 4
    programs = lower(GPT, ParallelConfig(tp=t, sp=True, micro_batch=b))
    bsh = b * GPT.seq_len * GPT.hidden * 2
    assert comms(programs.blocks["embedding"], "fwd") == [(RS, "embed.tokens", ("tp",), bsh)]
    assert (
        comms(programs.blocks["head"], "fwd")
        == [(AG, "ln_f", ("tp",), bsh // t)]
        + [(AR, "loss.stats", ("tp",), b * GPT.seq_len * 4)] * 3
    )


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_the_loss_statistics_are_reduced_after_the_cross_entropy(recompute: str) -> None:
    """The statistics all-reduces are a chain that starts from the cross-entropy's own
    instruction (Megatron-LM ``_VocabParallelCrossEntropy.forward`` reduces the max, the target
    logit and the sum of exponentials of the logits it was given): before session 36 the first
    waited for nothing in the block, ran beside the logits GEMM, and the head's last
    instruction (the chain's end) ended before the loss, so a pass that followed the head
    waited for the wrong node (the trace mode 4-6 % faster than the levelled mode on FSDP
    ZeRO-3 with tp 2, tests/explore/test_trace_mode_grid.py)."""
    parallel = ParallelConfig(tp=4, micro_batch=2, recompute=recompute)
    head = lower(LLAMA, parallel).blocks["head"]
    for phase in ("fwd", "recompute"):
        instrs = [(i, ins) for i, ins in enumerate((*head.fwd, *head.bwd)) if ins.phase == phase]
        stats = [i for i, ins in instrs if ins.collective is not None and "loss.stats" in ins.name]
        if phase == "recompute" and not stats:
            continue  # the head is not recomputed
        everything = (*head.fwd, *head.bwd)
        (loss,) = [i for i, ins in instrs if ins.kind == "crossentropy"]
        offset = 0 if phase == "fwd" else len(head.fwd)
        assert len(stats) == 3
        assert everything[stats[0]].deps == (loss - offset,)
        assert [everything[i].deps for i in stats[1:]] == [(s - offset,) for s in stats[:-1]]


# -- data parallelism and ZeRO -------------------------------------------------------------------


def _programs(model: object, zero: int, micro_batches: int = 1, **kw: object) -> ProgramSet:
    dp = int(kw.pop("dp", 4))  # type: ignore[call-overload]
    parallel = ParallelConfig(
        dp=dp,
        tp=2,
        pp=2,
        sp=True,
        zero=zero,
        global_batch=dp * micro_batches,
        grad_bucket_bytes=40 * 2**20,
        **kw,  # type: ignore[arg-type]
    )
    return lower(model, parallel)  # type: ignore[arg-type]


def _step_nodes(template: list[ProgramNode], what: str) -> list[ProgramNode]:
    return [n for n in template if n.node.kind == NodeKind.COLL and what in n.node.name]


@pytest.mark.parametrize("model", [LLAMA, GPT], ids=["llama", "gpt"])
def test_dp_reduces_exactly_the_gradients_once_per_step_in_buckets(model: object) -> None:
    one, four = _programs(model, 0, 1), _programs(model, 0, 4)
    for programs in (one, four):
        for stage, memory in zip(programs.stages, memory_report(programs, False), strict=True):
            # (the tied-embedding reduction between the pipeline ends is tested on its own)
            sync = [op for op in stage.sync if op.name != "embedding_grad_all_reduce"]
            assert {op.collective for op in sync} == {CollectiveKind.ALL_REDUCE}
            assert all("dp" in op.axes for op in sync)
            assert sum(op.comm_bytes for op in sync) == memory.gradients_bytes
            # buckets fill to the limit in backward order; only each group's last may be smaller
            by_axes: dict[tuple[str, ...], list[int]] = {}
            for op in sync:
                by_axes.setdefault(op.axes, []).append(op.comm_bytes)
            for sizes in by_axes.values():
                assert all(size >= 40 * 2**20 for size in sizes[:-1])
    # once per step: the same step-level collectives whatever the number of micro-batches
    for stage_one, stage_four in zip(one.stages, four.stages, strict=True):
        nodes_one = _step_nodes(stage_nodes(one, stage_one), "step.")
        nodes_four = _step_nodes(stage_nodes(four, stage_four), "step.")
        assert len(nodes_one) == len(nodes_four) == len(stage_one.sync)
        assert [n.node.comm_bytes for n in nodes_four] == [op.comm_bytes for op in stage_four.sync]


@pytest.mark.parametrize("sp", [False, True])
def test_position_embedding_gradient_is_reduced_with_the_step(sp: bool) -> None:
    """Positions are looked up per token (``pos_ids[B, S]``, as Megatron's ``position_ids``), so
    the table's gradient is a partial sum over the token axes, reduced once per step with the
    other weights — not an all-reduce of the ``[S, H]`` activation gradient over dp in every
    micro-batch (the bug this test was written for). With SP the sequence-parallel gradient of
    the positions is all-gathered over tp, like the token embedding's."""
    programs = lower(GPT, ParallelConfig(dp=4, tp=2, sp=sp, global_batch=4))
    embedding = programs.blocks["embedding"]
    grad_axes = {w.name: w.grad_axes for w in embedding.weights}
    assert grad_axes["embed.pos"] == grad_axes["embed"] == ("dp",)
    bsh = GPT.seq_len * GPT.hidden * 2
    expected = [
        (AG, "d.embed.pos_out", ("tp",), bsh // 2),
        (AG, "d.embed.tokens", ("tp",), bsh // 2),
    ]
    assert comms(embedding, "bwd") == (expected if sp else [])


def test_tied_embedding_gradients_are_reduced_between_the_pipeline_ends() -> None:
    programs = lower(GPT, ParallelConfig(pp=2, dp=2, tp=2, global_batch=2))
    table = 51200 // 2 * GPT.hidden * programs.workload.grad_bytes
    for stage in programs.stages:
        ends = [op for op in stage.sync if op.name == "embedding_grad_all_reduce"]
        assert [(op.axes, op.comm_bytes) for op in ends] == [(("pp_ends",), table)]


def _data_weights(programs: ProgramSet, stage_index: int) -> tuple[int, int]:
    """(Ψ, Ψ of the weights whose gradient is partial over tp too: SP norms, row biases)."""
    stage = programs.stages[stage_index]
    weights = [w for c in stage.chunks for b in c.blocks for w in b.weights]
    return sum(w.elements for w in weights), sum(w.elements for w in weights if "tp" in w.grad_axes)


@pytest.mark.parametrize("micro_batches", [1, 3])
def test_zero_1_reduce_scatters_gradients_and_gathers_parameters(micro_batches: int) -> None:
    programs = _programs(LLAMA, 1, micro_batches)
    for index, stage in enumerate(programs.stages):
        psi, tp_partial = _data_weights(programs, index)
        grad_bytes = programs.workload.grad_bytes
        by_name = Counter()  # type: Counter[tuple[str, tuple[str, ...]]]
        for op in stage.sync:
            by_name[(op.name, op.axes)] += op.comm_bytes
        assert by_name == {
            ("grad_reduce_scatter", ("dp",)): psi * grad_bytes,
            ("grad_all_reduce", ("tp",)): tp_partial * grad_bytes,  # SP norms, over tp
            ("param_all_gather", ("dp",)): psi // 4 * 2,  # each rank's updated shard
        }
        assert all(op.after == -1 for op in stage.sync if op.name == "param_all_gather")
        template = stage_nodes(programs, stage)
        assert len(_step_nodes(template, "step.")) == len(stage.sync)
        assert _step_nodes(template, "zero.") == []


@pytest.mark.parametrize("zero", [2, 3])
@pytest.mark.parametrize("micro_batches", [1, 3])
def test_zero_2_and_3_reduce_scatter_every_micro_batch(zero: int, micro_batches: int) -> None:
    """ZeRO-2/3 reduce-scatter each block's gradients after its backward, every micro-batch (the
    rank keeps only its shard); ZeRO-2 gathers the updated parameters once per step, ZeRO-3
    gathers each block's parameters before each forward and each backward use instead."""
    programs = _programs(LLAMA, zero, micro_batches)
    grad_bytes = programs.workload.grad_bytes
    for index, stage in enumerate(programs.stages):
        psi, _ = _data_weights(programs, index)
        blocks = [b for c in stage.chunks for b in c.blocks if b.weights]
        template = stage_nodes(programs, stage)
        scatters = _step_nodes(template, "zero.grad_reduce_scatter")
        assert len(scatters) == micro_batches * len(blocks)
        assert all(n.group_axes == ("dp",) for n in scatters)
        assert sum(n.node.comm_bytes for n in scatters) == micro_batches * psi * grad_bytes
        gathers = _step_nodes(template, "zero.param_all_gather")
        step_gathers = [op for op in stage.sync if op.name == "param_all_gather"]
        if zero == 2:
            assert gathers == []
            assert sum(op.comm_bytes for op in step_gathers) == psi // 4 * 2
        else:
            assert step_gathers == []
            assert len(gathers) == 2 * micro_batches * len(blocks)
            assert sum(n.node.comm_bytes for n in gathers) == 2 * micro_batches * psi // 4 * 2
            first_forward = next(i for i, n in enumerate(template) if n.node.kind == NodeKind.COMP)
            assert "zero.param_all_gather" in template[first_forward - 1].node.name
        assert {op.name for op in stage.sync} <= {"grad_all_reduce", "param_all_gather"}
        assert all(op.axes == ("tp",) for op in stage.sync if op.name == "grad_all_reduce")


# -- pipeline parallelism ------------------------------------------------------------------------


def _p2p(template: list[ProgramNode], axis: str = "pp") -> Counter[tuple[str, str, int]]:
    """(kind, direction F/B, peer shift) → count of point-to-point nodes along ``axis``."""
    return Counter(
        (n.node.kind.name, n.node.name[0], n.peer_shift)
        for n in template
        if n.node.kind in (NodeKind.SEND, NodeKind.RECV) and n.peer_axis == axis
    )


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize(("sp", "cp"), [(False, 1), (True, 1), (True, 2)])
def test_pp_sends_one_activation_and_one_gradient_per_micro_batch_and_boundary(
    schedule: str,
    sp: bool,
    cp: int,
) -> None:
    p, m, t, b = 4, 6, 2, 2
    parallel = ParallelConfig(
        tp=t,
        pp=p,
        cp=cp,
        sp=sp,
        micro_batch=b,
        global_batch=b * m,
        schedule=schedule,
    )
    programs = lower(LLAMA, parallel)
    boundary = b * LLAMA.seq_len * LLAMA.hidden * 2 // cp // (t if sp else 1)
    for stage in programs.stages:
        template = stage_nodes(programs, stage)
        expected = Counter()  # type: Counter[tuple[str, str, int]]
        if stage.stage < p - 1:
            expected += Counter({("SEND", "F", 1): m, ("RECV", "B", 1): m})
        if stage.stage > 0:
            expected += Counter({("RECV", "F", -1): m, ("SEND", "B", -1): m})
        assert _p2p(template) == expected
        sizes = {n.node.comm_bytes for n in template if n.peer_axis == "pp" and n.peer_shift}
        assert sizes == {boundary}


def test_interleaving_sends_at_every_chunk_boundary() -> None:
    """With v chunks per rank, global stage ``v·p + r`` sends to ``v·p + r + 1`` — the next rank,
    wrapping from the last rank to the first: m messages per chunk boundary and direction."""
    p, v, m = 4, 2, 8
    programs = lower(
        LLAMA.with_overrides(layers=8),
        ParallelConfig(
            tp=2,
            pp=p,
            sp=True,
            global_batch=m,
            schedule="interleaved",
            vpp=v,
        ),
    )
    for stage in programs.stages:
        sends_forward = sum(1 for c in range(v) if c * p + stage.stage < p * v - 1)
        receives_forward = sum(1 for c in range(v) if c * p + stage.stage > 0)
        assert _p2p(stage_nodes(programs, stage)) == {
            ("SEND", "F", 1): m * sends_forward,
            ("RECV", "B", 1): m * sends_forward,
            ("RECV", "F", -1): m * receives_forward,
            ("SEND", "B", -1): m * receives_forward,
        }


# -- expert parallelism --------------------------------------------------------------------------


@pytest.mark.parametrize(("dp", "ep", "b"), [(4, 4, 1), (4, 2, 2), (8, 8, 1)])
def test_ep_dispatch_and_combine_all_to_all_forward_and_backward(dp: int, ep: int, b: int) -> None:
    """Capacity factor 1: each all-to-all carries the rank's routed tokens, ``b·s·k·h`` × 2 B."""
    model = MIXTRAL.with_overrides(capacity_factor=1.0)
    programs = lower(model, ParallelConfig(dp=dp, ep=ep, micro_batch=b, global_batch=dp * b))
    routed = b * model.seq_len * model.top_k * model.hidden * 2
    moe = programs.blocks["moe_layer"]
    assert comms(moe, "fwd") == [
        (A2A, "moe.tokens", ("ep",), routed),
        (A2A, "experts.fc2", ("ep",), routed),
    ]
    assert comms(moe, "bwd") == [
        (A2A, "d.experts.fc2", ("ep",), routed),
        (A2A, "d.moe.tokens", ("ep",), routed),
    ]


def test_capacity_factor_scales_the_all_to_all() -> None:
    model = MIXTRAL.with_overrides(capacity_factor=1.25)
    programs = lower(model, ParallelConfig(dp=4, ep=4, global_batch=4))
    slots = -(-5 * model.top_k * model.seq_len // 4 // model.num_experts)  # ceil(1.25·k·b·s/E)
    dispatch = comms(programs.blocks["moe_layer"], "fwd")[0]
    assert dispatch[3] == slots * model.num_experts * model.hidden * 2


def test_ep_with_tp_and_sp_routes_each_ranks_own_tokens() -> None:
    """Megatron-Core's all-to-all dispatcher with expert TP = TP: each rank sends its own
    sequence shard's ``(s/t)·k·h`` over ep, then gathers over tp for the experts' tp shards;
    back, a reduce-scatter over tp, then the all-to-all; the routed-token gradient is
    reduce-scattered over tp (the backward of the all-gather)."""
    programs = lower(MIXTRAL, ParallelConfig(dp=4, ep=2, tp=2, sp=True, global_batch=4))
    routed = MIXTRAL.seq_len * MIXTRAL.top_k * MIXTRAL.hidden * 2
    bsh = MIXTRAL.seq_len * MIXTRAL.hidden * 2
    moe = programs.blocks["moe_layer"]
    assert comms(moe, "fwd")[2:] == [
        (A2A, "moe.tokens", ("ep",), routed // 2),
        (AG, "moe.tokens", ("tp",), routed // 2),
        (RS, "experts.fc2", ("tp",), routed),
        (A2A, "experts.fc2", ("ep",), routed // 2),
    ]
    assert all(c[1] != "ln2" for c in comms(moe, "fwd"))  # the router sees the shard only
    assert (RS, "d.moe.tokens", ("tp",), routed) in comms(moe, "bwd")
    assert (AR, "d.moe.tokens", ("tp",), routed) not in comms(moe, "bwd")
    assert bsh == routed // MIXTRAL.top_k


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("ep", [1, 2, 4])
def test_all_to_all_bytes_are_the_ranks_own_tokens_times_top_k(tp: int, sp: bool, ep: int) -> None:
    """Issue #12's property: per rank and direction, the dispatch all-to-all moves the tokens
    the rank holds (its sequence shard under sequence parallelism) × top-k × hidden."""
    parallel = ParallelConfig(dp=4, ep=ep, tp=tp, sp=sp, global_batch=4)
    moe = lower(MIXTRAL, parallel).blocks["moe_layer"]
    held = MIXTRAL.seq_len // (tp if sp and tp > 1 else 1)
    expected = held * MIXTRAL.top_k * MIXTRAL.hidden * 2
    dispatched = [c for c in comms(moe, "fwd") if c[0] == A2A]
    if ep == 1:
        assert not dispatched
    else:
        assert [c[3] for c in dispatched] == [expected, expected]


def test_expert_gradients_reduce_over_the_expert_data_parallel_ranks() -> None:
    programs = lower(MIXTRAL, ParallelConfig(dp=4, ep=2, global_batch=4))
    weights = {w.name: w for w in programs.blocks["moe_layer"].weights}
    assert weights["experts.w2"].grad_axes == ("dp",)  # dp here is the dp/ep = 2 axis
    assert programs.workload.axis_sizes["dp"] == 2 and programs.workload.axis_sizes["ep"] == 2
    assert set(weights["wq"].grad_axes) == {"dp", "ep"}


def test_ep_folds_over_cp_as_megatron_does() -> None:
    """ep 2 over dp 1 × cp 2 (Megatron-Core's MoE parallel folding): the expert-parallel group
    is the cp ranks, so the all-to-all runs over ep×cp of the generator's mesh
    (tests/core/test_lower_moe.py checks every folding)."""
    programs = lower(MIXTRAL, ParallelConfig(dp=1, cp=2, ep=2))
    assert programs.workload.expert_axes == ("ep", "cp")
    assert {c[2] for c in comms(programs.blocks["moe_layer"]) if c[0] == A2A} == {("cp",)}
    assert programs.workload.axis_sizes["ep"] == 1  # an axis of size 1 drops out of the group


# -- context parallelism -------------------------------------------------------------------------


@pytest.mark.parametrize("cp", [2, 4])
def test_cp_all_gather_style(cp: int) -> None:
    """Forward: all-gather K and V; backward: re-gather K and V (saved as sequence shards, like
    SP's norms) and reduce-scatter dK and dV."""
    t = 2
    programs = lower(LLAMA, ParallelConfig(cp=cp, tp=t, sp=True, global_batch=1))
    kv_shard = LLAMA.seq_len // cp * LLAMA.kv_heads * LLAMA.head_dim // t * 2
    layer = programs.blocks["layer"]
    cp_comms = [c for c in comms(layer) if c[2] == ("cp",)]
    assert [c for c in comms(layer, "fwd") if c[2] == ("cp",)] == [
        (AG, "k.rope", ("cp",), kv_shard),
        (AG, "v", ("cp",), kv_shard),
    ]
    assert sorted(c for c in comms(layer, "bwd") if c[2] == ("cp",)) == sorted(
        [
            (AG, "k.rope", ("cp",), kv_shard),
            (AG, "v", ("cp",), kv_shard),
            (RS, "d.k.rope", ("cp",), kv_shard * cp),
            (RS, "d.v", ("cp",), kv_shard * cp),
        ]
    )
    assert len(cp_comms) == 6


@pytest.mark.parametrize("cp", [2, 4])
def test_cp_ring_style(cp: int) -> None:
    """cp−1 steps of the K/V chunk forward; backward 2·(cp−1) (K/V again, then dK/dV home);
    emitted as one SEND to the next and one RECV from the previous cp rank per step."""
    t, m = 2, 2
    programs = lower(LLAMA, ParallelConfig(cp=cp, tp=t, sp=True, cp_style="ring", global_batch=m))
    chunk = 2 * LLAMA.seq_len // cp * LLAMA.kv_heads * LLAMA.head_dim // t * 2  # K and V
    layer = programs.blocks["layer"]
    rings = [
        (i.phase, i.axes, i.comm_bytes, i.ring_steps)
        for i in layer.fwd + layer.bwd
        if i.kind == "ring"
    ]
    assert rings == [("fwd", ("cp",), chunk, cp - 1), ("bwd", ("cp",), chunk, 2 * (cp - 1))]
    assert [c for c in comms(layer) if c[2] == ("cp",)] == []
    template = stage_nodes(programs, programs.stages[0])
    steps = m * LLAMA.layers * 3 * (cp - 1)
    forward, backward = steps // 3, 2 * steps // 3
    assert _p2p(template, "cp") == {
        ("SEND", "F", 1): forward,
        ("RECV", "F", -1): forward,
        ("SEND", "B", 1): backward,
        ("RECV", "B", -1): backward,
    }
    assert {n.node.comm_bytes for n in template if n.peer_axis == "cp"} == {chunk}


def test_ring_attention_needs_the_fused_kernel() -> None:
    """The GPT family uses Megatron's unfused core attention (scores materialised), which cannot
    run on K/V chunks passed around a ring: a clear ConfigError, not a layout error."""
    with pytest.raises(ConfigError, match="ring"):
        lower(GPT, ParallelConfig(cp=2, cp_style="ring"))
