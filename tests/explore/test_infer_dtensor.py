"""What a row of the ``fsdp`` profile states of its own code (7 Dec 2026, s34 kempner):
DTensor tensor parallelism with sequence parallelism takes DTensor's functional-collective
copies and saved gathered inputs (``funcol_seq_copies``, ``tp_saves_gathered_input``), and a
model cast to bf16 takes bf16 model states (``bf16_model_states``: no fp32 master, the gradient
and AdamW's moments in bf16; KempnerForge's ``build_parallel_model``,
kempnerforge/distributed/parallel.py 01b461a7, casts with ``model.to(dtype=param_dtype)`` before
the optimizer is built)."""

from __future__ import annotations

import pytest

from stage_explore.analytical import kernels
from stage_explore.analytical.loss_kernels import CROSS_ENTROPY_BYTES
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_dtensor import BF16_CAST, DTENSOR_TP
from stage_explore.validation.run import analytical_factory
from stage_explore.validation.setup_systems import case_system
from stage_explore.validation.setups import data_dir

FILE = "published_runs_no_setup.csv"
KEMPNER = "KEMPNERFORGE-H200-70B-TP4-FSDP8-32"
KEMPNER_TP_ONLY = "KEMPNERFORGE-H200-7B-TP2-FSDP1-2"
KEMPNER_NO_TP = "KEMPNERFORGE-H200-7B-TP1-FSDP4-4"
DTENSOR_OPTIONS = ("funcol_seq_copies", "tp_saves_gathered_input")


def _package(row_id: str) -> dict[str, str]:
    (row,) = [r for r in read_csv(data_dir() / FILE) if r["id"] == row_id]
    return row


def _options(row: dict[str, str]) -> tuple[dict[str, object], tuple[str, ...]]:
    (case, *_) = row_cases(row, FILE, 1)
    return dict(case.framework_options), tuple(case.assumptions)


@pytest.mark.parametrize(
    ("text", "cast"),
    [
        ("the model cast to bf16 by build_parallel_model", True),
        ("parameters are cast to bfloat16 before sharding", True),
        ("we cast the model to bf16", True),
        ("the model is not cast to bf16", False),
        ("no model cast to bf16", False),
        ("weights cast to fp16", False),
        ("MixedPrecisionPolicy bf16 parameters, fp32 gradient reduction", False),
    ],
)
def test_the_cast_is_read_only_where_stated(text: str, cast: bool) -> None:
    assert (BF16_CAST.search(text) is not None) is cast


@pytest.mark.parametrize("row_id", [KEMPNER, KEMPNER_TP_ONLY])
def test_a_kempnerforge_row_takes_bf16_model_states(row_id: str) -> None:
    options, assumptions = _options(_package(row_id))
    assert options.get("bf16_model_states") is True
    assert any("build_parallel_model" in a and "bf16_model_states" in a for a in assumptions)


def test_a_row_not_stating_the_cast_keeps_fp32_shards() -> None:
    row = _package(KEMPNER)
    row["precision"] = "bf16 (mixed_precision default bf16, fp32 gradient reduce-scatter)"
    options, assumptions = _options(row)
    assert "bf16_model_states" not in options
    assert not any("bf16_model_states" in a for a in assumptions)


def test_a_row_also_stating_fp32_master_weights_keeps_them() -> None:
    row = _package(KEMPNER)
    row["notes"] += "; FP32 master weights in the optimizer"
    options, _ = _options(row)
    assert "bf16_model_states" not in options


def test_the_bf16_states_lower_the_predicted_memory_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same row with and without the stated cast: 8 bytes of model state per parameter
    instead of the fp32 shard's 16 (TP 4 x FSDP 8), the step time unchanged — with the bf16
    loss's passes (the same cast's ``loss_16bit_buffers``, s35 bf16loss, tested in
    test_loss_kernels.py) timed as the fp32 loss's, so that only the states differ."""
    monkeypatch.setattr(kernels, "BF16_CROSS_ENTROPY_BYTES", CROSS_ENTROPY_BYTES)
    cast = _package(KEMPNER)
    plain = dict(cast)
    plain["precision"] = "bf16 (mixed_precision default bf16, fp32 gradient reduce-scatter)"
    (with_cast, *_) = row_cases(cast, FILE, 1)
    (without, *_) = row_cases(plain, FILE, 1)
    factory = analytical_factory()
    results = []
    for case in (with_cast, without):
        assert case.model is not None and case.parallel is not None, case.reason
        backend = factory(case.backend_key)
        results.append(backend.evaluate(case.model, case.parallel, case_system(case)))
    a, b = results
    assert a.step_time_s == pytest.approx(b.step_time_s)
    assert with_cast.model is not None
    # 16 -> 8 bytes per parameter: at least the 32-way shard of every parameter, at most the
    # 8-way (data-parallel only) shard of every one (what tensor parallelism leaves whole)
    saved = b.peak_memory_bytes - a.peak_memory_bytes
    params = with_cast.model.params()
    assert 8 * params / 32 <= saved <= 8 * params / 8


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("yes (DTensor SequenceParallel norms)", True),
        ("parallelize_module with a ColwiseParallel plan", True),
        ("RowwiseParallel(output_layouts=Shard(1))", True),
        ("Megatron sequence parallelism", False),
        ("SequenceParallelism of Megatron-LM", False),
    ],
)
def test_dtensor_tensor_parallelism_is_read_only_where_named(text: str, named: bool) -> None:
    assert (DTENSOR_TP.search(text) is not None) is named


@pytest.mark.parametrize("row_id", [KEMPNER, KEMPNER_TP_ONLY])
def test_a_kempnerforge_tp_row_takes_dtensor_copies_and_saved_gathers(row_id: str) -> None:
    options, assumptions = _options(_package(row_id))
    assert all(options.get(name) is True for name in DTENSOR_OPTIONS)
    assert any("funcol.all_gather_tensor" in a for a in assumptions)


def test_without_tensor_parallelism_there_are_no_dtensor_collectives() -> None:
    options, _ = _options(_package(KEMPNER_NO_TP))
    assert not any(name in options for name in DTENSOR_OPTIONS)


def test_without_sequence_parallelism_there_are_no_sequence_dim_copies() -> None:
    row = _package(KEMPNER)
    row["sp"] = "no (DTensor tensor parallelism, Replicate activations)"
    options, _ = _options(row)
    assert not any(name in options for name in DTENSOR_OPTIONS)


def test_a_row_not_naming_dtensor_keeps_megatrons_sequence_first_collectives() -> None:
    row = _package(KEMPNER)
    for column in ("source", "source_table", "notes", "dp_sharding"):
        row[column] = row[column].replace("DTensor", "Megatron")
    row["sp"] = "yes"
    options, _ = _options(row)
    assert not any(name in options for name in DTENSOR_OPTIONS)


def test_the_dtensor_copies_lengthen_the_step() -> None:
    """The same row with and without naming DTensor: the cat copies of the sequence-dim
    all-gathers and reduce-scatters add compute-stream time."""
    named = _package(KEMPNER_TP_ONLY)
    plain = dict(named)
    for column in ("source", "source_table", "notes", "dp_sharding"):
        plain[column] = plain[column].replace("DTensor", "Megatron")
    plain["sp"] = "yes"
    factory = analytical_factory()
    times = []
    for row in (named, plain):
        (case, *_) = row_cases(row, FILE, 1)
        assert case.model is not None and case.parallel is not None, case.reason
        evaluation = factory(case.backend_key).evaluate(
            case.model, case.parallel, case_system(case)
        )
        times.append(evaluation.step_time_s)
    assert times[0] > times[1]
