"""Megatron-style expert parallelism in the lowering (issue #12): etp, MoE parallel folding.

Every collective is derived from the MoE block's layouts (``plans.py``), none written by hand.
The properties checked for every tp/sp/ep/etp/cp combination the generator accepts:

- each dispatch and combine all-to-all carries the rank's *own* tokens × top-k × hidden × 2 B
  (its sequence shard under sequence parallelism), forward and backward;
- the all-to-all's communicator group is exactly Megatron-Core's expert-parallel group, the
  experts' tensor-parallel collectives run over exactly its expert-tensor-parallel group and the
  dense layers' over its tensor-parallel group (:func:`megatron_groups` computes them from
  Megatron-Core's documented rank order, independently of the generator's meshes);
- expert weights are reduced over the expert-data-parallel ranks, ``tp·dp·cp/(ep·etp)`` of them,
  and the shards of one expert-parallel × expert-tensor-parallel group add up to the model's
  routed-expert parameters.

Expert tensor parallel sizes 1, tp and strictly between (tp split into the mesh axes ``tpo``
and ``tp``) are all in the grid, and so are expert-parallel groups smaller than the ``tp/etp``
ranks they fold over first (tp split into ``tpr``, ``tpo`` and ``tp``).
"""

from __future__ import annotations

import itertools
import math

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import BoundBlock
from stage_core.lower.experts import fold_experts
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig

A2A, AR, RS = "all_to_all", "all_reduce", "reduce_scatter"
MIXTRAL = get_flavor("mixtral-8x7b").with_overrides(layers=2, seq_len=256, num_experts=16)


def _collectives(block: BoundBlock, kind: str) -> list[tuple[str, str, tuple[str, ...], int]]:
    return [
        (i.phase, i.name.partition(":")[2], i.axes, i.comm_bytes)
        for i in block.fwd + block.bwd
        if i.is_comm and str(i.collective) == kind
    ]


def _combinations() -> list[ParallelConfig]:
    """Every accepted config of a small grid (refused ones are checked separately)."""
    found = []
    grid = itertools.product(
        (1, 2, 4, 8), (False, True), (1, 2, 4, 8), (None, 1, 2, 4), (1, 2), (2, 4)
    )
    for tp, sp, ep, etp, cp, dp in grid:
        if etp is not None and etp >= tp:
            continue  # etp = tp is the config with etp=None; etp > tp is refused elsewhere
        try:
            config = ParallelConfig(tp=tp, sp=sp, ep=ep, etp=etp, cp=cp, dp=dp, global_batch=dp)
            fold_experts(config)
        except ConfigError:
            continue
        found.append(config)
    return found


COMBINATIONS = _combinations()


def test_the_grid_covers_every_folding() -> None:
    folds = {fold_experts(c).axes for c in COMBINATIONS if c.ep > 1}
    assert folds == {
        ("ep",), ("ep", "cp"), ("ep", "tp"), ("ep", "cp", "tp"), ("ep", "tpo"), ("ep", "cp", "tpo")
    }  # fmt: skip
    assert len(COMBINATIONS) > 180
    split = [c for c in COMBINATIONS if 1 < c.expert_tp < c.tp]
    assert {(c.tp, c.expert_tp) for c in split} == {(4, 2), (8, 2), (8, 4)}
    inside = [c for c in COMBINATIONS if fold_experts(c).tp_rest > 1]  # ep < tp/etp
    assert {(c.tp, c.expert_tp, c.ep) for c in inside} >= {(4, 1, 2), (8, 2, 2), (4, 2, 1)}


def megatron_groups(parallel: ParallelConfig, rank: int) -> dict[str, tuple[int, ...]]:
    """Rank ``rank``'s tensor-parallel, expert-parallel and expert-tensor-parallel groups as
    Megatron-Core's ``parallel_state`` builds them (``RankGenerator``: the first name of the
    order varies fastest in the rank id): dense layers ``tp-cp-ep-dp-pp`` with ep = 1, expert
    layers ``tp-ep-dp-pp`` with tp = etp, dp = edp = tp·cp·dp/(ep·etp) and cp = 1."""
    tp, etp, ep = parallel.tp, parallel.expert_tp, parallel.ep
    per_stage = parallel.tp * parallel.cp * parallel.dp
    edp = per_stage // (ep * etp)
    base = rank - rank % per_stage  # the pipeline stage's first rank
    t, e, d = rank % etp, rank // etp % ep, rank // (etp * ep) % edp
    first_tp = rank - rank % tp
    return {
        "tp": tuple(range(first_tp, first_tp + tp)),
        "ep": tuple(base + t + etp * (j + ep * d) for j in range(ep)),
        "etp": tuple(base + j + etp * (e + ep * d) for j in range(etp)),
        "edp": tuple(base + t + etp * (e + ep * j) for j in range(edp)),
    }


def _name(c: ParallelConfig) -> str:
    return f"tp{c.tp}sp{int(c.sp)}ep{c.ep}etp{c.etp}cp{c.cp}dp{c.dp}"


@pytest.mark.parametrize("parallel", COMBINATIONS, ids=_name)
def test_all_to_all_bytes_are_the_ranks_own_tokens_times_top_k(parallel: ParallelConfig) -> None:
    """Issue #12's property: per rank, every all-to-all moves the tokens the rank holds × top-k
    × hidden × 2 B, over a group of exactly ``ep`` ranks, the one Megatron-Core builds."""
    programs = lower(MIXTRAL, parallel)
    moe = programs.blocks["moe_layer"]
    held = MIXTRAL.seq_len // parallel.cp // (parallel.tp if parallel.sequence_parallel else 1)
    own = held * MIXTRAL.top_k * MIXTRAL.hidden * 2
    exchanged = _collectives(moe, A2A)
    if parallel.ep == 1:
        assert exchanged == []
        return
    assert [(phase, size) for phase, _, _, size in exchanged] == [
        ("fwd", own), ("fwd", own), ("bwd", own), ("bwd", own)
    ]  # fmt: skip
    mesh = programs.workload.mesh
    axes = exchanged[0][2]
    assert {a for _, _, a, _ in exchanged} == {axes}
    assert math.prod(int(mesh.size(a)) for a in axes) == parallel.ep
    if parallel.cp == 1 or "cp" in axes:  # Megatron's group (cp folded first when it divides)
        megatron = parallel.expert_mesh()
        for rank in range(0, parallel.world_size, 3):
            assert mesh.group(rank, axes) == megatron_groups(parallel, rank)["ep"]
            assert mesh.group(rank, axes) == megatron.group(rank, ["ep"])


@pytest.mark.parametrize("parallel", [c for c in COMBINATIONS if c.sequence_parallel], ids=_name)
def test_tensor_parallel_groups_are_megatrons(parallel: ParallelConfig) -> None:
    """The dense layers' sequence-parallel gathers run over Megatron's tensor-parallel group
    (tp consecutive ranks, whether or not the mesh splits tp); the experts' own tensor-parallel
    collectives (the routed tokens' all-gather and reduce-scatter) over its
    expert-tensor-parallel group of ``etp`` ranks, and not at all when etp = 1."""
    programs = lower(MIXTRAL, parallel)
    mesh = programs.workload.mesh
    moe = programs.blocks["moe_layer"]
    (dense,) = {i.axes for i in moe.fwd if i.name == "all_gather:ln1"}
    expert_tp = {
        i.axes
        for i in moe.fwd + moe.bwd
        if i.is_comm and str(i.collective) != A2A and ("moe.tokens" in i.name or "fc2" in i.name)
    }
    if parallel.expert_tp == 1:
        assert expert_tp == set()
    else:
        assert expert_tp == {("tp",)}
    for rank in range(0, parallel.world_size, 5):
        megatron = megatron_groups(parallel, rank)
        assert mesh.group(rank, dense) == megatron["tp"]
        if parallel.expert_tp > 1:
            assert mesh.group(rank, ("tp",)) == megatron["etp"]


@pytest.mark.parametrize("parallel", COMBINATIONS[::5], ids=_name)
def test_expert_weights_reduce_over_the_expert_data_parallel_ranks(
    parallel: ParallelConfig,
) -> None:
    programs = lower(MIXTRAL, parallel)
    sizes = programs.workload.axis_sizes
    weights = {w.name: w for w in programs.blocks["moe_layer"].weights}
    w2 = weights["experts.w2"]
    assert math.prod(sizes[a] for a in w2.grad_axes) == parallel.expert_dp
    total = MIXTRAL.num_experts * MIXTRAL.expert_ffn * MIXTRAL.hidden
    assert w2.elements * parallel.ep * parallel.expert_tp == total


@pytest.mark.parametrize(
    "parallel", [c for c in COMBINATIONS if c.expert_tp < c.tp] + COMBINATIONS[::7], ids=_name
)
def test_expert_shards_sum_to_the_models_expert_parameters(parallel: ParallelConfig) -> None:
    """The ep·etp ranks of one Megatron expert-parallel × expert-tensor-parallel group hold
    disjoint shards of every routed expert: their expert parameters add up to the model's
    (``num_experts`` × one SwiGLU FFN of ``expert_ffn``, ``ModelSpec.mlp_params``), and the
    other ``edp`` such groups hold copies, reduced over the expert-data-parallel axes."""
    programs = lower(MIXTRAL, parallel)
    weights = [w for w in programs.blocks["moe_layer"].weights if w.expert]
    mesh, sizes = programs.workload.mesh, programs.workload.axis_sizes
    ep_group = megatron_groups(parallel, 0)["ep"]
    group = {m for rank in ep_group for m in megatron_groups(parallel, rank)["etp"]}
    assert len(group) == parallel.ep * parallel.expert_tp
    held = sum(w.elements for w in weights) * len(group)  # every rank runs the same program
    assert held == MIXTRAL.num_experts * MIXTRAL.mlp_params(MIXTRAL.expert_ffn)
    folded = parallel.cp == 1 or "cp" in programs.workload.expert_axes
    for weight in weights:
        assert math.prod(sizes[a] for a in weight.grad_axes) == parallel.expert_dp
        if folded:  # Megatron's expert-data-parallel group (cp folded as Megatron folds it)
            for rank in range(0, parallel.world_size, 5):
                edp = megatron_groups(parallel, rank)["edp"]
                assert mesh.group(rank, weight.grad_axes) == edp


def test_routed_token_gradient_is_reduce_scattered_over_tp() -> None:
    """Experts tensor-parallel over tp (etp = tp) under sequence parallelism: the routed tokens'
    gradient, partial over tp, is reduce-scattered into the rank's slots (Megatron's backward
    of its all-gather), never all-reduced over tp."""
    programs = lower(MIXTRAL, ParallelConfig(dp=4, ep=2, tp=2, sp=True, global_batch=4))
    moe = programs.blocks["moe_layer"]
    routed = MIXTRAL.seq_len * MIXTRAL.top_k * MIXTRAL.hidden * 2
    assert ("bwd", "d.moe.tokens", ("tp",), routed) in _collectives(moe, RS)
    assert [c for c in _collectives(moe, AR) if "moe" in c[1] or "experts" in c[1]] == []


def test_expert_tensor_parallel_one_is_a_single_all_to_all_over_ep_and_tp() -> None:
    """Qwen3-235B on Megatron-Bridge's layout (tp 2, ep over tp×dp, etp 1), scaled down: one
    all-to-all over the folded group each way, no tp collective in the expert region."""
    parallel = ParallelConfig(dp=4, tp=2, ep=8, etp=1, sp=True, global_batch=4)
    programs = lower(MIXTRAL, parallel)
    moe = programs.blocks["moe_layer"]
    experts = [
        (str(i.collective), i.axes)
        for i in moe.fwd + moe.bwd
        if i.is_comm and ("moe" in i.name or "experts" in i.name)
    ]
    assert experts == [(A2A, ("ep", "tp"))] * 4
    assert programs.workload.axis_sizes["ep"] == 4 and programs.workload.axis_sizes["dp"] == 1
    assert parallel.expert_dp == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(tp=2, etp=1, ep=2, dp=2), "needs sequence parallelism"),
        (dict(tp=4, etp=2, ep=2, dp=2), "needs sequence parallelism"),
        (dict(ep=2, dp=1, cp=4), "must divide `dp`"),  # an ep group inside cp
    ],
)
def test_refused_foldings_name_the_values(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        lower(MIXTRAL.with_overrides(seq_len=6 * 64), ParallelConfig(**fields))  # type: ignore[arg-type]


def test_an_expert_group_straddling_tp_groups_is_refused() -> None:
    """tp 8, etp 2, ep 3 (Megatron-Core accepts it with dp 3): the expert-parallel group would
    take 3 of the 4 tp ranks outside an expert's tp group, then one of the next tp group's; no
    split of the mesh's axes expresses it."""
    model = MIXTRAL.with_overrides(num_experts=12)
    parallel = ParallelConfig(tp=8, etp=2, ep=3, dp=3, sp=True, global_batch=3)
    with pytest.raises(ConfigError, match="`tp`/`etp` = 4 and `ep` must divide one another"):
        lower(model, parallel)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(tp=4, etp=3), "`etp` \\(expert tensor parallel size\\) must divide `tp`"),
        (dict(tp=2, dp=2, ep=8, etp=1), "`ep`·`etp` must divide `tp`·`dp`·`cp`"),
        (dict(etp=0), "`etp` must be a positive int or None"),
    ],
)
def test_parallel_config_rejects_bad_etp(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ParallelConfig(**fields)  # type: ignore[arg-type]


def test_expert_mesh_splits_tp_when_etp_is_smaller() -> None:
    """Megatron-Core's expert rank generator ``etp-ep-edp-pp``: with tp 4, etp 2, ep 4 the
    expert-parallel group of rank 0 is ranks 0, 2, 4, 6 (the rest of tp, then dp)."""
    config = ParallelConfig(tp=4, etp=2, ep=4, dp=2, pp=2, global_batch=2)
    mesh = config.expert_mesh()
    assert str(mesh) == "{pp=2, edp=1, ep=4, etp=2}"
    assert mesh.group(0, ["ep"]) == (0, 2, 4, 6)
    assert mesh.group(0, ["etp"]) == (0, 1)


@pytest.mark.parametrize("parallel", [ParallelConfig(), COMBINATIONS[-1]], ids=_name)
def test_router_flops_are_two_h_e_per_token_the_rank_routes(parallel: ParallelConfig) -> None:
    """The router is a [h, E] matmul on the tokens the rank holds (its sequence shard under
    sequence parallelism), replicated over every rank that holds them: 2·h·E FLOPs a token."""
    moe = lower(MIXTRAL, parallel).blocks["moe_layer"]
    (router,) = [i for i in moe.fwd if i.name == "moe.logits"]
    held = MIXTRAL.seq_len // parallel.cp // (parallel.tp if parallel.sequence_parallel else 1)
    assert router.flops == 2 * held * MIXTRAL.hidden * MIXTRAL.num_experts


@pytest.mark.parametrize(
    "fields",
    [
        dict(dp=4, ep=4),
        dict(dp=4, ep=8, tp=2, etp=1, sp=True),
        dict(dp=4, ep=2, tp=2, sp=True),
        dict(dp=2, ep=4, tp=4, etp=2, sp=True),
    ],
    ids=["ep4", "ep8-etp1", "ep2-tp2", "ep4-tp4-etp2"],
)
def test_biased_experts_hold_one_bias_per_expert_and_output(fields: dict[str, object]) -> None:
    """GPT-OSS's expert projections carry biases (Hugging Face gate_up_proj_bias [E, 2G],
    down_proj_bias [E, H]): lowered, a rank holds its experts' share, E·(2G+H)/(ep·etp) in
    all, split over etp for the FFN width like the weights; the down-projection's bias is
    added after the tp reduction, as a row-parallel layer adds it."""
    model = get_flavor("gpt-oss-20b").with_overrides(layers=2)
    parallel = ParallelConfig(global_batch=4, **fields)  # type: ignore[arg-type]
    programs = lower(model, parallel)
    block = next(b for name, b in programs.blocks.items() if "moe" in name)
    biases = {w.name: w.elements for w in block.weights if w.name.endswith(".bias")}
    expert = {k: v for k, v in biases.items() if k.startswith("experts.")}
    e, g, h = model.num_experts, model.expert_ffn, model.hidden
    etp = parallel.expert_tp
    assert expert == {
        "experts.wg.bias": e * g // (parallel.ep * etp),
        "experts.wu.bias": e * g // (parallel.ep * etp),
        "experts.w2.bias": e * h // parallel.ep,
    }
    assert {w.name: w.expert for w in block.weights}["experts.w2.bias"]
