"""``stage calibrate`` on a runs CSV as a spreadsheet exports it (s27 review): an empty ``dp``
fitted a 64-GPU run on 2 GPUs without a word; an empty ``micro_batch`` read "neither in the CSV
nor in setups.toml", once per run; a header with its unit (``iter_time_s [s]``) or a file
separated by semicolons read "needs a column iter_time_s …"; a trailing ``,,,,`` line was a run
of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore.calibrate import user_cases
from stage_explore.calibrate_rows import (
    header_problem,
    layout_defaults,
    layout_notes,
    sp_defaults,
    sp_note,
)
from stage_explore.cli import main
from stage_explore.validation.csv_cells import read_csv

HEADER = "id,model,seq_len,global_batch_seqs,micro_batch,tp,pp,dp,sp,recompute,iter_time_s"
RUNS = [
    "r1,megatron-gpt-1.7b,2048,64,1,2,1,32,yes,selective,0.60",
    "r2,megatron-gpt-1.7b,2048,128,1,2,1,32,yes,selective,1.10",
    "r3,megatron-gpt-1.7b,2048,64,1,4,1,16,yes,selective,0.70",
]
SYSTEM = "a100-80gb"


def _csv(tmp_path: Path, *lines: str, header: str = HEADER) -> Path:
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([header, *lines]) + "\n", encoding="utf-8")
    return path


def _cases(path: Path) -> dict[str, str]:
    cases = user_cases(path, SYSTEM, "megatron-lm-2021", "megatron-gpt-1.7b")
    return {case.id: case.reason for case in cases}


def _calibrate(path: Path, *extra: str) -> list[str]:
    argv = ["calibrate", "--runs", str(path), "--system", SYSTEM, "--fit", "memory"]
    return [*argv, "--no-loo", "--framework", "megatron-lm-2021", *extra]


def test_an_empty_dp_is_named_with_the_gpus_the_run_is_fitted_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _csv(tmp_path, RUNS[0].replace(",1,32,", ",1,,"), *RUNS[1:])
    assert layout_defaults(path) == {"r1": ("dp",)}
    assert main(_calibrate(path)) == 0
    out = capsys.readouterr().out
    assert "note: dp empty, taken as 1 (the layout's default): fitted as r1 on 2 GPUs" in out
    assert main([*_calibrate(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layout_defaults"] == {"r1": ["dp"]}


def test_a_file_without_tp_and_pp_columns_names_them_once_for_every_run() -> None:
    defaults = {f"r{i}": ("tp", "pp") for i in range(1, 8)}
    gpus = {f"r{i}": 8 * i for i in range(1, 8)}
    (note,) = layout_notes(defaults, gpus)
    assert note.startswith("note: tp and pp empty, taken as 1")
    assert "r1 on 8 GPUs, r2 on 16 GPUs, r3 on 24 GPUs, r4 on 32 GPUs, r5 on 40 GPUs and 2" in note
    (one,) = layout_notes({"a": ("tp", "pp", "dp")}, {"a": 1})
    assert "tp, pp and dp empty" in one and "a on 1 GPU " in one


def test_empty_batch_and_measured_cells_are_said_in_a_fits_words(tmp_path: Path) -> None:
    path = _csv(
        tmp_path,
        RUNS[0].replace(",64,1,2,", ",64,,2,"),
        RUNS[1].replace(",128,1,", ",,1,"),
        RUNS[2].removesuffix("0.70"),
    )
    reasons = _cases(path)
    assert reasons["r1"] == (
        "the micro_batch cell is empty; expected the micro-batch size in sequences (a whole number)"
    )
    assert reasons["r2"].startswith("the global_batch_seqs cell is empty; expected the global")
    assert reasons["r3"] == "no measured value: the iter_time_s cell is empty"
    assert not any("setups.toml" in reason or "source" in reason for reason in reasons.values())


def test_one_reason_of_every_run_is_said_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _csv(tmp_path, *(run.replace(",1,2,", ",,2,").replace(",1,4,", ",,4,") for run in RUNS))
    assert main(_calibrate(path)) == 2
    (message,) = capsys.readouterr().err.splitlines()
    assert "r1, r2, r3: the micro_batch cell is empty" in message
    assert message.count("micro_batch cell") == 1


@pytest.mark.parametrize(
    ("header", "expected"),
    [(HEADER.replace("iter_time_s", "iter_time_s [s]"),
      "column 'iter_time_s [s]' is iter_time_s with a unit beside its name; expected the "
      "header iter_time_s alone"),
     (HEADER.replace("seq_len", "seq_len (tokens)"),
      "column 'seq_len (tokens)' is seq_len with a unit beside its name"),
     (HEADER.replace("iter_time_s", "iter_time (s)"),
      "needs a column iter_time_s, tflops_per_gpu or tokens_per_s_per_gpu (column "
      "'iter_time (s)' looks like iter_time_s"),
     (HEADER.replace(",", ";"), "is not comma-separated: its header is one column 'id;model;"),
     (HEADER.replace(",", "\t"), "its names separated by tabs; expected the columns separated "
      "by commas")],
)  # fmt: skip
def test_a_header_the_fit_cannot_read_is_one_line(
    tmp_path: Path, header: str, expected: str
) -> None:
    separator = ";" if ";" in header else "\t" if "\t" in header else ","
    path = _csv(tmp_path, *(run.replace(",", separator) for run in RUNS), header=header)
    with pytest.raises(ConfigError) as error:
        _cases(path)
    assert expected in str(error.value)
    assert "\n" not in str(error.value)


def test_a_unit_beside_a_column_the_fit_does_not_read_is_no_error() -> None:
    assert header_problem("runs.csv", ["id", "cluster (site)", "iter_time_s"], frozenset()) == ""
    header = ["id", "iter_time_s", "iter_time_s (s)"]  # the plain column is there: read it
    assert header_problem("runs.csv", header, frozenset({"iter_time_s"})) == ""


def test_a_trailing_line_of_empty_cells_is_no_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _csv(tmp_path, *RUNS, "," * HEADER.count(","), " , ,", "")
    assert [row["id"] for row in read_csv(path)] == ["r1", "r2", "r3"]
    assert list(_cases(path)) == ["r1", "r2", "r3"]
    assert main(_calibrate(path)) == 0
    out = capsys.readouterr().out
    assert "run-4" not in out and "note:" not in out


def test_a_run_the_model_says_cannot_run_is_named_before_the_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # s27 review: runs predicted out of memory were fitted without a word (their CSV left out
    # the ZeRO stage or recompute that let them run); a measured run did run
    huge = "r4,megatron-gpt-1.7b,2048,512,256,1,1,2,no,none,9.0"
    path = _csv(tmp_path, *RUNS, huge)
    assert main([*_calibrate(path), "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["run_warnings"]
    (line,) = [w for w in warnings if "cannot run" in w]
    assert line.startswith(f"r4: measured, yet the model predicts it cannot run on {SYSTEM}")
    assert "(out of memory: peak " in line and "fitted all the same" in line


def test_an_empty_dp_beside_num_gpus_is_derived_from_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # as stage validate --data derives it; before, num_gpus was a column not read and dp 1
    header = f"{HEADER},num_gpus"
    path = _csv(tmp_path, RUNS[0].replace(",1,32,", ",1,,") + ",64", *(f"{r},64" for r in RUNS[1:]),
                header=header)  # fmt: skip
    cases = user_cases(path, SYSTEM, "megatron-lm-2021", "megatron-gpt-1.7b")
    assert cases[0].parallel is not None and cases[0].parallel.dp == 32
    assert layout_defaults(path) == {}
    assert main([*_calibrate(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dp_from_num_gpus"] == {"r1": 32} and data["layout_defaults"] == {}
    assert "num_gpus" not in data["columns_not_read"]
    assert main(_calibrate(path)) == 0
    assert "note: dp empty, derived as num_gpus / (tp·pp·cp): r1 dp 32" in capsys.readouterr().out
    # 63 GPUs are no whole number of tp-2 replicas: dp stays 1, named as before
    odd = _csv(tmp_path, RUNS[0].replace(",1,32,", ",1,,") + ",63", header=header)
    assert layout_defaults(odd) == {"r1": ("dp",)}


def test_a_misspelt_fit_parameter_is_refused_before_the_runs_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # s27 review: '--fit memry' read and evaluated every run, printed their warnings, then
    # ended "unknown fittable parameter 'memry'; known: [...]" (a Python list)
    path = _csv(tmp_path, "r1,megatron-gpt-1.7b,2048,512,256,1,1,2,no,none,9.0")  # out of memory
    argv = [a if a != "memory" else "memry" for a in _calibrate(path)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no run was read: no warning before the error
    (line,) = captured.err.splitlines()
    assert f"unknown fittable parameter 'memry' of {SYSTEM}; did you mean 'memory'?" in line
    assert "[" not in line


def test_an_empty_sp_on_a_tensor_parallel_run_is_named_and_taken_as_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # r1 (tp 2) and r3 (tp 4) leave sp empty; a tp-1 run with an empty sp is not named
    tp1 = "r4,megatron-gpt-1.7b,2048,64,1,1,1,64,,selective,0.90"
    path = _csv(tmp_path, RUNS[0].replace(",yes,", ",,"), RUNS[1],
                RUNS[2].replace(",yes,", ",,"), tp1)  # fmt: skip
    assert sp_defaults(path) == ["r1", "r3"]
    cases = {case.id: case for case in user_cases(path, SYSTEM, "megatron-lm-2021",
                                                  "megatron-gpt-1.7b")}  # fmt: skip
    assert [cases[i].parallel.sp for i in ("r1", "r2", "r3")] == [False, True, False]
    assert main(_calibrate(path)) == 0
    out = capsys.readouterr().out
    assert "note: sp empty on 2 runs with tp > 1, taken as no" in out and ": r1, r3;" in out
    assert main([*_calibrate(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sp_defaults"] == ["r1", "r3"]
    assert sp_note([]) == ""
    assert sp_note([f"r{i}" for i in range(7)]).count(" and 2 more") == 1


def test_a_refused_model_with_no_dims_is_not_fitted_as_the_base_s_sizes(tmp_path: Path) -> None:
    """A run naming a model the reading refuses (``Phi-3 5B``: no entry of that size; Phi-3
    medium, the s28 example, has one since s30 readers4) with no dims was fitted as
    megatron-gpt-1.7b's own sizes (s28 review); it is not fitted, with the reason. With its
    dims stated, or with the model cell empty, --model-base stands in."""
    named = RUNS[0].replace("megatron-gpt-1.7b", "Phi-3 5B")
    empty = RUNS[1].replace("megatron-gpt-1.7b", "")
    reasons = _cases(_csv(tmp_path, named, empty, RUNS[2]))
    assert "so --model-base megatron-gpt-1.7b's own sizes would stand in for 'Phi-3 5B'" in (
        reasons["r1"]
    )
    assert "Phi-3 mini 3.8B" in reasons["r1"] and "\n" not in reasons["r1"]
    assert reasons["r2"] == reasons["r3"] == ""
    header = f"{HEADER},layers,hidden,heads"
    dims = _csv(tmp_path, f"{named},40,5120,40", f"{RUNS[2]},24,2048,16", header=header)
    assert _cases(dims)["r1"] == ""
