"""Model states per rank against the ZeRO paper (Rajbhandari et al. 2020; formulas.md §4).

``Ψ`` is the number of parameters a rank holds *before* ZeRO sharding (the sum of its
``WeightShard.elements``: tensor- and pipeline-parallel shards, experts of its ep group) and
``N_d`` the number of data-parallel replicas of those weights: ``dp·cp`` for dense weights
(context parallelism replicates weights like data parallelism does), ``dp·cp/ep`` for expert
weights. With 16-bit gradients (``grad_fp32=False``) and Adam's ``K = 12`` bytes:

- baseline ``(2+2+12)·Ψ``; ZeRO-1 ``(2+2)·Ψ + 12·Ψ/N_d``; ZeRO-2 ``2·Ψ + 14·Ψ/N_d``;
  ZeRO-3 ``16·Ψ/N_d``;
- with fp32 gradient accumulation (``grad_fp32=True``, Megatron's default) 18 bytes/param.

The configurations below make every weight divisible by ``N_d``, so the equalities are exact.
"""

from __future__ import annotations

import pytest

from stage_core.lower.memory import MemoryBreakdown, memory_report
from stage_core.lower.program import ProgramSet, StageProgram, lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig

GPT = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
LLAMA = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=1024)
MIXTRAL = get_flavor("mixtral-8x7b").with_overrides(layers=4, seq_len=1024)


def held(stage: StageProgram, expert: bool | None = None) -> int:
    """Ψ of a stage's ranks (``expert``: only expert weights, or only the others)."""
    return sum(
        weight.elements
        for chunk in stage.chunks
        for block in chunk.blocks
        for weight in block.weights
        if expert is None or weight.expert == expert
    )


def states(entry: MemoryBreakdown) -> tuple[int, int, int]:
    return entry.weights_bytes, entry.gradients_bytes, entry.optimizer_bytes


def zero_formula(zero: int, psi: int, replicas: int) -> tuple[int, int, int]:
    """(weights, gradients, optimizer) bytes of the ZeRO paper, 2-byte gradients."""
    sharded = {0: (False, False, False), 1: (False, False, True), 2: (False, True, True),
               3: (True, True, True)}[zero]
    return tuple(  # type: ignore[return-value]
        per_param * psi // (replicas if shard else 1)
        for per_param, shard in zip((2, 2, 12), sharded, strict=True)
    )


def _all_divisible(programs: ProgramSet, replicas: int) -> bool:
    return all(
        weight.elements % replicas == 0
        for stage in programs.stages for chunk in stage.chunks
        for block in chunk.blocks for weight in block.weights
    )


#: (model, tp, pp, dp, cp): N_d = dp·cp.
DENSE = [
    ("gpt", GPT, 2, 2, 4, 1),
    ("gpt-cp", GPT, 2, 1, 2, 2),
    ("llama", LLAMA, 4, 2, 8, 1),
    ("llama-nodp", LLAMA, 2, 2, 1, 1),
]
DENSE_IDS = [d[0] for d in DENSE]


def report(programs: ProgramSet) -> list[MemoryBreakdown]:
    return memory_report(programs, with_ranks=False)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
@pytest.mark.parametrize(("label", "model", "tp", "pp", "dp", "cp"), DENSE, ids=DENSE_IDS)
def test_dense_model_states_follow_the_zero_paper(
    label: str, model: object, tp: int, pp: int, dp: int, cp: int, zero: int,
) -> None:
    parallel = ParallelConfig(
        tp=tp, pp=pp, dp=dp, cp=cp, sp=True, zero=zero, grad_fp32=False, global_batch=2 * dp,
    )
    programs = lower(model, parallel)  # type: ignore[arg-type]
    replicas = dp * cp
    assert _all_divisible(programs, replicas)
    for stage, entry in zip(programs.stages, report(programs), strict=True):
        psi = held(stage)
        assert psi > 0
        assert states(entry) == zero_formula(zero, psi, replicas), (label, stage.stage)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_expert_weights_are_sharded_over_their_own_replicas(zero: int) -> None:
    """EP is carved out of dp: expert weights have ``dp·cp/ep`` replicas, the others ``dp·cp``."""
    dp, ep = 4, 2
    parallel = ParallelConfig(
        tp=2, pp=2, dp=dp, ep=ep, sp=True, zero=zero, grad_fp32=False, global_batch=2 * dp,
    )
    programs = lower(MIXTRAL, parallel)
    for stage, entry in zip(programs.stages, report(programs), strict=True):
        dense = zero_formula(zero, held(stage, expert=False), dp)
        expert = zero_formula(zero, held(stage, expert=True), dp // ep)
        assert held(stage, expert=True) > 0
        assert states(entry) == tuple(a + b for a, b in zip(dense, expert, strict=True))


@pytest.mark.parametrize(("label", "model", "tp", "pp", "dp", "cp"), DENSE, ids=DENSE_IDS)
def test_fp32_gradients_are_18_bytes_per_parameter(
    label: str, model: object, tp: int, pp: int, dp: int, cp: int,
) -> None:
    """Megatron's estimator: 2 (weights) + 4 (fp32 gradients) + 12 (Adam) bytes per parameter."""
    parallel = ParallelConfig(tp=tp, pp=pp, dp=dp, cp=cp, sp=True, global_batch=2 * dp)
    assert parallel.grad_fp32
    programs = lower(model, parallel)  # type: ignore[arg-type]
    for stage, entry in zip(programs.stages, report(programs), strict=True):
        psi = held(stage)
        assert states(entry) == (2 * psi, 4 * psi, 12 * psi)


def test_megatron_distributed_optimizer_is_6_plus_12_over_d() -> None:
    """ZeRO-1 with fp32 gradients: ``6 + 12/d`` bytes per parameter (Megatron's estimator)."""
    dp = 4
    parallel = ParallelConfig(tp=2, pp=2, dp=dp, sp=True, zero=1, global_batch=dp)
    programs = lower(GPT, parallel)
    for stage, entry in zip(programs.stages, report(programs), strict=True):
        psi = held(stage)
        assert sum(states(entry)) == 6 * psi + 12 * psi // dp


@pytest.mark.parametrize("name", ["megatron-gpt-1.7b", "gpt3-350m", "llama3-8b", "mixtral-8x7b"])
@pytest.mark.parametrize("pp", [1, 2])
def test_stages_hold_every_parameter_once(name: str, pp: int) -> None:
    """With tp = 1 the stages' Ψ sum to the model's parameter count (with the padded
    vocabulary); a tied embedding split across pipeline stages is held twice (once per end,
    as Megatron does), one stage holds it once."""
    model = get_flavor(name).with_overrides(layers=4)
    parallel = ParallelConfig(pp=pp, global_batch=2)
    programs = lower(model, parallel)
    padded = (parallel.padded_vocab(model) - model.vocab) * model.hidden
    two_ends = model.tied_embeddings and pp > 1
    extra_copy = parallel.padded_vocab(model) * model.hidden if two_ends else 0
    untied = 1 if model.tied_embeddings else 2
    assert sum(held(stage) for stage in programs.stages) == (
        model.params() + untied * padded + extra_copy
    )
