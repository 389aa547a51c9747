"""FSDP gradient accumulation with sync off on every micro-batch but the last
(``fsdp_no_sync_accumulation``, :mod:`stage_explore.analytical.no_sync`), against closed forms
computed here: the unsharded reduce-dtype gradients held beside the step's buffers, the
reduce-scatters only in the last micro-batch, the unsharded accumulation pass, nothing with
one micro-batch or without FSDP sharding; and the KempnerForge reader rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.lower.memory import unsharded_elements
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import BlockCost, BlockTiming, chunk_timing
from stage_explore.analytical.framework_costs import held_accumulation_bytes
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.no_sync import grad_shards_absent, last_scatter_s, without_scatters
from stage_explore.system import load_system
from stage_explore.validation.infer_no_sync import automodel_no_sync_defaults, no_sync_defaults
from stage_explore.validation.infer_release import Defaults

LLAMA = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=1024)
SYSTEM = load_system("h100-80gb")
#: The tensors' own peak: no runtime reserve, no allocator overhead.
TENSORS = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0}


def _evaluate(on: bool, parallel: ParallelConfig, **overrides: object) -> tuple[int, float, dict]:
    backend = AnalyticalBackend(
        framework="fsdp", overrides={**TENSORS, **overrides, "fsdp_no_sync_accumulation": on}
    )
    result = backend.evaluate(LLAMA, parallel, SYSTEM)
    return result.peak_memory_bytes, result.step_time_s, result.breakdown


def _unsharded_total(parallel: ParallelConfig) -> int:
    """Every block's unsharded elements on one rank, each block kind times its count."""
    programs = lower(LLAMA, parallel)
    return sum(
        (LLAMA.layers if kind == "layer" else 1) * unsharded_elements(programs.workload, block)
        for kind, block in programs.blocks.items()
    )


@pytest.mark.parametrize("zero", [2, 3])
@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize(("fsdp2", "held_bytes"), [(True, 4), (False, 2)])
def test_memory_holds_the_unsharded_gradients(
    tp: int, fsdp2: bool, held_bytes: int, zero: int
) -> None:
    """FSDP2 holds them in the fp32 reduce dtype (``unsharded_accumulated_grad``), FSDP1's flat
    parameter in the bf16 parameter dtype (its ``.grad``, cast only when synced); under ZeRO-2
    (``SHARD_GRAD_OP``) as under ZeRO-3. They replace the states' fp32 gradient shards, none
    of which exists before the step's last micro-batch reduces its units (s36 kfmem)."""
    parallel = ParallelConfig(tp=tp, dp=4, zero=zero, recompute=Recompute.FULL, global_batch=16)
    on, _, _ = _evaluate(True, parallel, fsdp2_copies=fsdp2)
    off, _, _ = _evaluate(False, parallel, fsdp2_copies=fsdp2)
    workload = lower(LLAMA, parallel).workload
    assert (workload.grad_bytes, workload.weight_bytes) == (4, 2)  # fp32 reduction, bf16
    shards = _unsharded_total(parallel) * workload.grad_bytes // parallel.dp
    assert on - off == _unsharded_total(parallel) * held_bytes - shards


@pytest.mark.parametrize(
    "parallel",
    [
        ParallelConfig(dp=4, zero=3, recompute=Recompute.FULL, global_batch=4),  # one micro-batch
        ParallelConfig(dp=4, zero=1, recompute=Recompute.FULL, global_batch=16),  # no FSDP units
    ],
)
def test_nothing_changes_with_one_micro_batch_or_without_sharding(
    parallel: ParallelConfig,
) -> None:
    assert _evaluate(True, parallel)[:2] == _evaluate(False, parallel)[:2]


@pytest.mark.parametrize("zero", [2, 3])
def test_zero2_and_zero3_defer_the_reduce_scatters(zero: int) -> None:
    """Across nodes (dp 16 on 8-GPU nodes) the reduce-scatters of three of four micro-batches
    are skipped under SHARD_GRAD_OP as under FULL_SHARD: the step gets faster (before s35
    nosync2 the option did nothing under ZeRO-2)."""
    parallel = ParallelConfig(dp=16, zero=zero, recompute=Recompute.FULL, global_batch=64)
    assert _evaluate(True, parallel)[1] < _evaluate(False, parallel)[1]


def test_fsdp1_flat_gradient_concatenation_stays_every_micro_batch() -> None:
    """``fsdp1_flat_grad``: autograd concatenates the views' gradients into the flat gradient
    before ``AccumulateGrad`` adds it into the held ``.grad`` (no_sync.py), so the option
    changes the step's compute by exactly the accumulation pass with or without the
    concatenation timed: the concatenation's seconds are the same either way."""
    m = 4
    parallel = ParallelConfig(dp=4, zero=3, recompute=Recompute.FULL, global_batch=4 * m)
    compute = {
        (flat, on): _evaluate(on, parallel, fsdp1_flat_grad=flat)[2]["compute"]
        for flat in (False, True)
        for on in (False, True)
    }
    flat_off = compute[(True, False)] - compute[(False, False)]
    flat_on = compute[(True, True)] - compute[(False, True)]
    assert flat_off > 0.0
    assert flat_on == pytest.approx(flat_off, rel=1e-9)


def test_fsdp1_autograd_adds_each_later_micro_batch() -> None:
    """The fsdp profile (FSDP1) times no sharded accumulation (``grad_accumulation`` none):
    the option's compute is autograd's in-place add into the unsharded bf16 ``.grad`` from the
    second micro-batch on (two reads, one write of 2 bytes)."""
    m = 4
    parallel = ParallelConfig(dp=4, zero=3, recompute=Recompute.FULL, global_batch=4 * m)
    _, _, on = _evaluate(True, parallel)
    _, _, off = _evaluate(False, parallel)
    bandwidth = SYSTEM.accelerator.achieved_memory_bandwidth_bytes_per_s
    per_step = (m - 1) * _unsharded_total(parallel) * 3 * 2 / bandwidth
    assert on["compute"] - off["compute"] == pytest.approx(per_step, rel=1e-6)


def test_fsdp2_casts_then_adds_and_copies_in_once() -> None:
    """FSDP2: the cast-then-add pass into the fp32 accumulator every micro-batch, and the
    reduce-scatter copy-in (bf16 -> fp32, 6 bytes per element, each micro-batch without the
    option) once, from the fp32 accumulator (8 bytes)."""
    m = 4
    parallel = ParallelConfig(dp=4, zero=3, recompute=Recompute.FULL, global_batch=4 * m)
    _, _, on = _evaluate(True, parallel, fsdp2_copies=True)
    _, _, off = _evaluate(False, parallel, fsdp2_copies=True)
    bandwidth = SYSTEM.accelerator.achieved_memory_bandwidth_bytes_per_s
    elements = _unsharded_total(parallel)
    accumulate = m * elements * held_accumulation_bytes(m, 2, 4)
    copies = elements * (4 + 4) - m * elements * (2 + 4)
    expected = (accumulate + copies) / bandwidth
    assert on["compute"] - off["compute"] == pytest.approx(expected, rel=1e-6)


def _cost(backward_s: float, scatter_s: float) -> BlockCost:
    timing = BlockTiming(backward_s, backward_s, {}, 0)
    return BlockCost(forward=timing, backward=timing, gather_s=0.1, scatter_s=scatter_s)


def test_the_last_micro_batch_pays_the_exposed_scatters_once() -> None:
    """Each of four blocks' reduce-scatter (3 s) outlasts the next block's backward (1 s):
    with scatters, the backward ends after the last block's scatter; without them, after the
    blocks' compute (and the gathers, unchanged)."""
    runs = (("layer", 4),)
    costs = {"layer": _cost(1.0, 3.0)}
    synced = chunk_timing(runs, costs, 3).backward_s
    bare = chunk_timing(runs, without_scatters(costs), 3).backward_s
    assert without_scatters(costs)["layer"].gather_s == 0.1
    assert synced > bare
    assert last_scatter_s(runs, costs, 3, False, 1) == pytest.approx(
        chunk_timing(runs, costs, 3, False, 1).backward_s
        - chunk_timing(runs, without_scatters(costs), 3, False, 1).backward_s
    )
    hidden = {"layer": _cost(1.0, 0.0)}
    assert last_scatter_s(runs, hidden, 3, False, 1) == 0.0


def test_scatter_bound_step_gets_faster() -> None:
    """Across nodes (dp 16 on 8-GPU nodes) the fp32 reduce-scatters of three of four
    micro-batches are skipped."""
    parallel = ParallelConfig(dp=16, zero=3, recompute=Recompute.FULL, global_batch=64)
    _, on, on_breakdown = _evaluate(True, parallel)
    _, off, off_breakdown = _evaluate(False, parallel)
    assert on < off
    assert 0.0 < on_breakdown["exposed_zero_gather"] < off_breakdown["exposed_zero_gather"]


def test_only_automodel_turns_it_on() -> None:
    assert [n for n, p in FRAMEWORKS.items() if p.fsdp_no_sync_accumulation] == ["automodel"]


@pytest.mark.parametrize(
    ("source", "zero", "expected"),
    [
        ("models trained with KempnerForge (FSDP2 fully_shard)", 3, True),
        ("models trained with KempnerForge (FSDP2 fully_shard)", 0, False),
        ("models trained with KempnerForge (FSDP2 fully_shard)", 2, True),
        ("models trained with KempnerForge (FSDP2 fully_shard)", 1, False),
        ("models trained with torchtitan (FSDP2 fully_shard)", 3, False),
        ("run_clm.py with the Hugging Face Trainer under PyTorch FSDP", 3, True),
        ("the Hugging Face Trainer under FSDP2 (fsdp_version 2)", 3, False),
        ("Hugging Face transformers models in a custom loop under FSDP", 3, False),
    ],
)
def test_reader_rule(source: str, zero: int, expected: bool) -> None:
    out = Defaults()
    no_sync_defaults({"source": source, "source_table": "", "notes": ""}, zero, out)
    assert out.options.get("fsdp_no_sync_accumulation", False) is expected
    assert bool(out.notes) is expected


@pytest.mark.parametrize(
    ("options", "pp", "zero", "expected"),
    [
        ({"pp_unsharded_params": True}, 2, 3, True),  # torchtitan's held stage: one reduction
        ({"pp_unsharded_params": True}, 1, 3, False),  # no pipeline: FSDP2's per-unit reduction
        ({"pp_unsharded_params": True}, 2, 2, False),  # ZeRO-2: the stage is not held
        ({"pp_unsharded_params": True, "pp_held_sync_per_schedule": True}, 2, 3, False),
        ({"pp_unsharded_params": True, "pp_held_sync_per_schedule": True,
          "local_batch_size": 8}, 2, 3, True),  # one schedule a step: reduced once  # fmt: skip
        ({}, 2, 3, False),
    ],
)
def test_held_stage_has_no_gradient_shard_at_its_peak(
    options: dict[str, bool | int], pp: int, zero: int, expected: bool
) -> None:
    """s37 fsdpsync: a stage held by ``pp_unsharded_params`` keeps its gradients unsharded with
    sync off until its last backward, so no shard exists at the peak, unless several schedules
    a step each reduce it (``pp_held_sync_per_schedule``: here 8 micro-batches in local
    batches of 2, four schedules)."""
    fields: dict[str, bool | int] = {"pp_unsharded_params": False, "local_batch_size": 2}
    profile = replace(FRAMEWORKS["torchtitan"], **{**fields, **options})  # type: ignore[arg-type]
    parallel = ParallelConfig(dp=2, pp=pp, zero=zero, global_batch=16)
    assert grad_shards_absent(profile, parallel, 8) is expected


def test_held_stage_peak_counts_shards_only_after_an_earlier_schedule_reduced_them() -> None:
    """Memory: with four schedules a step each reducing the held stage, the peak holds the
    stage's fp32 gradient shards beside its unsharded gradients; with one reduction a step
    (torchtitan's), not: the difference is one pipeline stage's gradient shards."""
    parallel = ParallelConfig(dp=2, pp=2, zero=3, recompute=Recompute.FULL, global_batch=16)

    def peak(per_schedule: bool) -> int:
        backend = AnalyticalBackend(
            framework="torchtitan",
            overrides={**TENSORS, "pp_held_sync_per_schedule": per_schedule,
                       "local_batch_size": 2},  # fmt: skip
        )
        return backend.evaluate(LLAMA, parallel, SYSTEM).peak_memory_bytes

    programs = lower(LLAMA, parallel)
    workload = programs.workload
    grads = {
        kind: unsharded_elements(workload, block) * workload.grad_bytes // parallel.dp
        for kind, block in programs.blocks.items()
    }
    half = LLAMA.layers // 2
    stages = {grads["embedding"] + half * grads["layer"], half * grads["layer"] + grads["head"]}
    assert peak(True) - peak(False) in stages


@pytest.mark.parametrize(
    ("source", "dense", "zero", "expected"),
    [
        ("NeMo AutoModel performance summary (PyTorch backend), version of April 2026", True, 3,
         False),
        ("NeMo AutoModel llama3_1_70b_pretrain_benchmark_8nodes_tp1cp2pp1.yaml", True, 3, False),
        ("NeMo AutoModel performance summary (PyTorch backend)", False, 3, None),  # MoE table
        ("NeMo AutoModel llm_pretrain recipe (llama3_70b_pretrain.yaml)", True, 3, None),
        ("NeMo AutoModel performance summary (PyTorch backend)", True, 1, None),
    ],
)  # fmt: skip
def test_automodel_reader_rule(source: str, dense: bool, zero: int, expected: bool | None) -> None:
    """s37 fsdpsync: AutoModel's published dense benchmark configs set
    ``defer_fsdp_grad_sync: False``; its MoE benchmark configs and its recipes leave the
    library default (the profile's deferred sync)."""
    out = Defaults()
    row = {"source": source, "source_table": "", "notes": ""}
    automodel_no_sync_defaults(row, zero, dense, out)
    assert out.options.get("fsdp_no_sync_accumulation") is expected
    assert bool(out.notes) is (expected is not None)
