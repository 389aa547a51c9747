"""FSDP2 over a one-rank data-parallel mesh (``fsdp2_one_rank_mesh``, 7 Dec 2026, s36 kfmem):
KempnerForge at tp > 1 and dp 1 still wraps the model in ``fully_shard`` (its
``init_distributed`` keeps a ``dp_shard`` dimension of size 1 whenever TP is on,
kempnerforge/distributed/setup.py 01b461a7), so with sync off on every micro-batch but the last
each rank holds its whole gradient unsharded in the fp32 reduce dtype, although the run's ZeRO
stage folds to 0. Closed forms computed here; the reader rule on the package's rows."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.memory import unsharded_elements
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.no_sync import no_sync_accumulates, one_rank_fsdp2
from stage_explore.system import load_system
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_release import TEXT_COLUMNS
from stage_explore.validation.setups import data_dir

LLAMA = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=1024)
SYSTEM = load_system("h100-80gb")
#: The tensors' own peak: no runtime reserve, no allocator overhead.
TENSORS = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0}
FILE = "published_runs_no_setup.csv"
KF_TP2_DP1 = "KEMPNERFORGE-H200-7B-TP2-FSDP1-2"
KF_TP4_DP1 = "KEMPNERFORGE-H200-7B-TP4-FSDP1-4"
KF_TP2_DP2 = "KEMPNERFORGE-H200-7B-TP2-FSDP2-4"
KF_TP1_DP4 = "KEMPNERFORGE-H200-7B-TP1-FSDP4-4"


def _evaluate(parallel: ParallelConfig, **options: object) -> tuple[int, float]:
    backend = AnalyticalBackend(framework="fsdp", overrides={**TENSORS, **options})
    result = backend.evaluate(LLAMA, parallel, SYSTEM)
    return result.peak_memory_bytes, result.step_time_s


def _weight_elements(parallel: ParallelConfig) -> int:
    """Every weight element on one rank (its tensor-parallel shard), each block kind times its
    count."""
    programs = lower(LLAMA, parallel)
    return sum(
        (LLAMA.layers if kind == "layer" else 1) * sum(w.elements for w in block.weights)
        for kind, block in programs.blocks.items()
    )


@pytest.mark.parametrize(("bf16_states", "state_grad_bytes"), [(True, 2), (False, 4)])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_one_rank_fsdp2_holds_every_gradient_in_fp32(
    tp: int, bf16_states: bool, state_grad_bytes: int
) -> None:
    """dp 1, zero 3 stated (run as 0), 4 micro-batches: every weight's gradient held at 4
    bytes (the fp32 reduce dtype) in place of the states' gradient (bf16 under
    ``bf16_model_states``, KempnerForge's; else the fp32 ``grad_fp32`` one), and nothing
    without no-sync."""
    parallel = ParallelConfig(tp=tp, dp=1, zero=3, recompute=Recompute.FULL, global_batch=4)
    assert parallel.zero == 0  # folded: nothing to shard
    states = {"bf16_model_states": bf16_states}
    plain, _ = _evaluate(parallel, **states)
    one_rank, _ = _evaluate(
        parallel, **states, fsdp2_one_rank_mesh=True, fsdp_no_sync_accumulation=True
    )
    assert one_rank - plain == _weight_elements(parallel) * (4 - state_grad_bytes)
    without_no_sync, _ = _evaluate(parallel, **states, fsdp2_one_rank_mesh=True)
    assert without_no_sync == plain


def test_the_held_gradient_is_accumulated_every_micro_batch() -> None:
    """The fp32 cast-and-add pass replaces the 16-bit accumulation: the step is longer."""
    parallel = ParallelConfig(tp=2, dp=1, recompute=Recompute.FULL, global_batch=4)
    _, plain = _evaluate(parallel)
    _, one_rank = _evaluate(parallel, fsdp2_one_rank_mesh=True, fsdp_no_sync_accumulation=True)
    assert one_rank > plain


@pytest.mark.parametrize(
    ("dp", "micro_batches", "zero", "expected"),
    [(1, 4, 0, True), (1, 1, 0, False), (2, 4, 0, False), (2, 4, 3, True)],
)
def test_when_the_one_rank_hold_applies(
    dp: int, micro_batches: int, zero: int, expected: bool
) -> None:
    """Only at dp·cp = 1 (zero run as 0) with several micro-batches; at dp > 1 ZeRO-3's own
    no-sync path holds the gradients, and at dp > 1 without ZeRO there is no FSDP wrapper."""
    profile = FRAMEWORKS["fsdp"].with_overrides(
        {"fsdp2_one_rank_mesh": True, "fsdp_no_sync_accumulation": True}
    )
    parallel = ParallelConfig(dp=dp, zero=zero, global_batch=dp * micro_batches)
    assert no_sync_accumulates(profile, parallel, micro_batches) is expected
    assert one_rank_fsdp2(profile, parallel) is (dp == 1)


def _package(row_id: str) -> dict[str, str]:
    (row,) = [r for r in read_csv(data_dir() / FILE) if r["id"] == row_id]
    return row


def _options(row: dict[str, str]) -> dict[str, object]:
    (case, *_) = row_cases(row, FILE, 1)
    return dict(case.framework_options)


@pytest.mark.parametrize("row_id", [KF_TP2_DP1, KF_TP4_DP1])
def test_kempnerforge_tp_rows_at_dp_1_take_the_one_rank_mesh(row_id: str) -> None:
    options = _options(_package(row_id))
    assert options.get("fsdp2_one_rank_mesh") is True
    assert options.get("fsdp_no_sync_accumulation") is True


@pytest.mark.parametrize("row_id", [KF_TP2_DP2, KF_TP1_DP4])
def test_other_kempnerforge_rows_do_not(row_id: str) -> None:
    """dp > 1: ZeRO-3's own no-sync rule; tp 1 at dp 4 likewise (and tp 1 at one GPU has no
    mesh at all)."""
    assert "fsdp2_one_rank_mesh" not in _options(_package(row_id))


def test_a_row_not_naming_kempnerforge_is_not_wrapped() -> None:
    row = dict(_package(KF_TP4_DP1))
    for column in TEXT_COLUMNS:
        row[column] = re.sub("kempnerforge", "a trainer", row.get(column, ""), flags=re.I)
    options = _options(row)
    assert "fsdp2_one_rank_mesh" not in options
    assert "fsdp_no_sync_accumulation" not in options


# -- the token embedding whole on every tp rank (tp_embedding_replicated) --------------------


def _embedding(parallel: ParallelConfig) -> tuple[int, list[str], list[str]]:
    """The embedding block's weight elements on a rank and its forward / backward
    collectives (kind and axes)."""
    block = lower(LLAMA, parallel).blocks["embedding"]
    comms = [
        [f"{i.name.split(':')[0]} {i.axes}" for i in phase if i.axes]
        for phase in (block.fwd, block.bwd)
    ]
    return sum(w.elements for w in block.weights), comms[0], comms[1]


@pytest.mark.parametrize("tp", [2, 4])
def test_a_replicated_embedding_holds_the_whole_table_and_scatters_nothing(tp: int) -> None:
    """Vocab-parallel: V/tp rows, the partial output reduce-scattered over tp. Replicated: all V
    rows, the whole lookup cut to the rank's sequence shard (no forward collective); the
    backward gathers the output's gradient over tp (Shard(1) -> Replicate), and nothing
    reduces the table's gradient over tp."""
    base = ParallelConfig(tp=tp, dp=2, zero=3, sp=True, global_batch=4)
    vocab, v_fwd, v_bwd = _embedding(base)
    whole, r_fwd, r_bwd = _embedding(replace(base, tp_embedding_replicated=True))
    assert whole == tp * vocab == base.padded_vocab(LLAMA) * LLAMA.hidden
    assert v_fwd == ["reduce_scatter ('tp',)"] and r_fwd == []
    assert r_bwd == v_bwd == ["all_gather ('tp',)"]


def test_at_tp_1_the_flag_changes_nothing() -> None:
    base = ParallelConfig(dp=2, zero=3, global_batch=4)
    assert _embedding(base) == _embedding(replace(base, tp_embedding_replicated=True))


def test_the_flag_is_a_bool() -> None:
    with pytest.raises(ConfigError, match="`tp_embedding_replicated` must be a bool"):
        ParallelConfig(tp=2, tp_embedding_replicated="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("row_id", [KF_TP2_DP1, KF_TP4_DP1, KF_TP2_DP2])
def test_kempnerforge_tp_rows_replicate_the_embedding(row_id: str) -> None:
    (case, *_) = row_cases(_package(row_id), FILE, 1)
    assert case.parallel is not None and case.parallel.tp_embedding_replicated


def test_kempnerforge_tp1_and_unnamed_rows_keep_the_vocab_parallel_embedding() -> None:
    row = dict(_package(KF_TP4_DP1))
    for column in TEXT_COLUMNS:
        row[column] = re.sub("kempnerforge", "a trainer", row.get(column, ""), flags=re.I)
    for plain in (row, _package(KF_TP1_DP4)):
        (case, *_) = row_cases(plain, FILE, 1)
        assert case.parallel is not None and not case.parallel.tp_embedding_replicated


# -- no gradient shard at a no-sync peak -------------------------------------------------------


@pytest.mark.parametrize(("zero", "fsdp2"), [(3, True), (3, False), (2, False)])
def test_the_no_sync_peak_holds_no_gradient_shard(zero: int, fsdp2: bool) -> None:
    """The held unsharded gradients replace the states' gradient shards: the peak with no-sync
    less the peak without it is the held bytes less the shards (closed forms: FSDP2 holds the
    fp32 reduce dtype, FSDP1 the bf16 parameter dtype; the shard is the states' fp32
    gradient over dp)."""
    dp = 4
    parallel = ParallelConfig(tp=2, dp=dp, zero=zero, recompute=Recompute.FULL, global_batch=16)
    options = {"fsdp2_copies": fsdp2}
    off, _ = _evaluate(parallel, **options, fsdp_no_sync_accumulation=False)
    on, _ = _evaluate(parallel, **options, fsdp_no_sync_accumulation=True)
    programs = lower(LLAMA, parallel)
    unsharded = sum(
        (LLAMA.layers if kind == "layer" else 1) * unsharded_elements(programs.workload, block)
        for kind, block in programs.blocks.items()
    )
    held = unsharded * (4 if fsdp2 else 2)
    shard = _weight_elements(parallel) * 4 // dp  # grad_fp32: the states' fp32 gradient shard
    assert on - off == pytest.approx(held - shard, rel=1e-6)
