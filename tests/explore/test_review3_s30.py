"""A user's pass over exploration and calibration (7 Dec 2026, s30 review3).

ZeRO-2/3 over one data-parallel rank: ``--zero 3`` at dp·cp = 1 was accepted, its trace was
ZeRO-0's, yet the memory model charged a parameter-gather buffer and the FSDP-based profiles
their sharded-parameter times. It now runs as ZeRO-0, as PyTorch FSDP (``NO_SHARD`` at world
size 1) and DeepSpeed ZeRO-3 (no gather from one partition) run it, with a note. ``stage
calibrate`` listed ``gpu`` among the columns it does not read, beside its warning about that
very cell. Each test but the guard ``test_zero_that_shards_something_is_kept`` fails on main
56eeff9."""

from __future__ import annotations

import json
from importlib import import_module
from pathlib import Path

import pytest

from stage_core.models import load_model
from stage_core.parallel import ParallelConfig, unsharded_zero, unsharded_zero_note
from stage_explore import load_results
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.cli import main
from stage_explore.search import explore
from stage_explore.study import parse_study
from stage_explore.system import load_system

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)

WORKLOAD = ["--model", "llama3-8b", "--tp", "2", "--pp", "2", "--micro-batch", "1",
            "--global-batch", "8", "--seq-len", "2048"]  # fmt: skip


@pytest.mark.parametrize("zero", [2, 3])
def test_zero_2_and_3_over_one_rank_are_zero_0(zero: int) -> None:
    assert ParallelConfig(dp=1, tp=2, pp=2, zero=zero).zero == 0
    assert ParallelConfig(dp=1, tp=2, pp=2, zero="fsdp").zero == 0


def test_zero_that_shards_something_is_kept() -> None:
    assert ParallelConfig(dp=1, cp=2, zero=3).zero == 3  # ZeRO shards over dp×cp
    assert ParallelConfig(dp=2, zero=3).zero == 3
    assert ParallelConfig(dp=1, tp=2, zero=1).zero == 1  # the distributed optimizer: kept
    # experts folded over tp (etp 1 of tp 4, ep 2): two expert data-parallel ranks to shard over
    moe = ParallelConfig(dp=1, tp=4, etp=1, ep=2, sp=True, zero=3)
    assert moe.expert_dp == 2 and moe.zero == 3
    assert not unsharded_zero(3, 1, 1, 2) and unsharded_zero(3, 1, 1, 1)


def _eval(zero: int, framework: str, capsys: pytest.CaptureFixture[str]) -> tuple[dict, str]:
    main(["eval", *WORKLOAD, "--system", "h100-80gb", "--dp", "1", "--zero", str(zero),
          "--framework", framework, "--json"])  # fmt: skip
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


@pytest.mark.parametrize("framework", ["megatron-lm-2021", "llm-foundry-2023", "torchtitan"])
def test_eval_runs_zero_3_at_dp_1_as_zero_0_with_a_note(
    framework: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """On main the Megatron profile charged +0.74 GB of gather buffer, llm-foundry's FSDP
    profile 0.57 s -> 0.71 s and 2.7 GB less memory, for a run that shards over one rank."""
    plain, quiet = _eval(0, framework, capsys)
    sharded, note = _eval(3, framework, capsys)
    assert sharded["step_time_s"] == plain["step_time_s"]
    assert sharded["peak_memory_bytes"] == plain["peak_memory_bytes"]
    assert sharded["parallel"]["zero"] == 0
    assert quiet == ""
    assert note.startswith("stage eval: note: zero 3 at dp·cp = 1 shards over one rank")
    assert note.count("\n") == 1


def test_the_python_api_agrees() -> None:
    model, system = load_model("gpt3-1.3b"), load_system("a100-80gb")
    backend = AnalyticalBackend()
    runs = [backend.evaluate(model, ParallelConfig(dp=1, tp=2, pp=2, zero=z, global_batch=8),
                             system) for z in (0, 3)]  # fmt: skip
    assert runs[0].peak_memory_bytes == runs[1].peak_memory_bytes
    assert runs[0].step_time_s == runs[1].step_time_s


def test_stage_memory_of_the_trace_agrees(capsys: pytest.CaptureFixture[str]) -> None:
    """The per-rank memory from the lowered programs' liveness (``stage memory``) counted the
    ZeRO-3 gather buffer too."""
    outputs = []
    for zero in (0, 3):
        main(["memory", *WORKLOAD, "--dp", "1", "--zero", str(zero)])
        outputs.append(capsys.readouterr())
    assert outputs[0].out == outputs[1].out
    assert "note: zero 3 at dp·cp = 1" in outputs[1].err


def test_a_study_listing_only_zero_3_records_dp_1_points_with_the_note(tmp_path: Path) -> None:
    """The canonical space keeps a study's only ZeRO value at dp·cp = 1 (its pin takes the first
    listed value): the record keeps ``zero = 3`` and says it ran as ZeRO-0; nothing is lost."""
    text = """[study]
name = "z3"
seed = 0
[model]
flavor = "gpt3-1.3b"
[workload]
global_batch = 64
sequence_length = 2048
[system]
preset = "a100-80gb"
[space]
num_gpus = [4]
tp = [2, 4]
pp = [1, 2]
zero = [3]
[objectives]
step_time_s = "min"
[sampler]
kind = "grid"
[backend]
name = "analytical"
"""
    spec = parse_study(text, tmp_path / "z3.toml")
    summary = explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    frame = load_results(summary.directory)
    assert len(frame) == summary.progress.done == 3  # tp 4 · pp 2 leaves no dp
    assert (frame["status"] == "ok").all() and (frame["zero"] == 3).all()
    notes = frame["extra_json"].map(lambda text: json.loads(text).get("note", ""))
    one_rank = frame["dp"] == 1
    assert one_rank.sum() == 2
    assert notes[one_rank].str.startswith("zero 3 at dp·cp = 1 shards over one rank").all()
    assert (notes[~one_rank] == "").all()
    backend = AnalyticalBackend()
    model, system = load_model("gpt3-1.3b"), load_system("a100-80gb")
    for row in frame[one_rank].itertuples():
        plain = ParallelConfig(dp=1, tp=row.tp, pp=row.pp, global_batch=64, seq_len=2048)
        assert row.peak_memory_bytes == backend.evaluate(model, plain, system).peak_memory_bytes


def test_calibrate_does_not_call_the_gpu_column_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``note: columns not read: gpu`` followed every fit of the README's example (whose CSV has
    a ``gpu`` column), though the cell is read: a run of another GPU is warned of."""
    header = ("id,model,seq_len,global_batch_seqs,micro_batch,tp,pp,dp,cp,sp,vpp,recompute,"
              "precision,zero,iter_time_s,gpu")  # fmt: skip
    run = "llama3-8b,8192,1024,1,1,1,32,2,no,1,none,bf16,1,13.08"
    runs = tmp_path / "runs.csv"
    runs.write_text(f"{header}\nr1,{run},H100\nr2,{run},A100\n")
    argv = ["calibrate", "--runs", str(runs), "--system", "h100-80gb", "--fit", "memory",
            "--no-loo"]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["columns_not_read"] == []
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "columns not read" not in out
    assert "warning: r2: gpu 'A100' is the a100-80gb preset's" in out


def test_calibrate_says_a_zero_3_run_at_dp_1_is_fitted_as_zero_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A runs CSV with ``zero`` 3 on one data-parallel rank was fitted as ZeRO-0 without a word
    once ``ParallelConfig`` holds it as 0; the fit now names the run, as ``stage eval`` does."""
    header = ("id,model,seq_len,global_batch_seqs,micro_batch,tp,pp,dp,cp,sp,vpp,recompute,"
              "precision,zero,iter_time_s")  # fmt: skip
    runs = tmp_path / "runs.csv"
    runs.write_text(
        f"{header}\nr1,llama3-8b,8192,1024,1,1,1,32,2,no,1,none,bf16,3,13.08\n"
        "r2,llama3-8b,8192,8,1,8,1,1,1,yes,1,none,bf16,3,2.0\n"
    )
    assert main(["calibrate", "--runs", str(runs), "--system", "h100-80gb", "--fit", "memory",
                 "--no-loo"]) == 0  # fmt: skip
    notes = [line for line in capsys.readouterr().out.splitlines() if "shards over one" in line]
    assert notes == [f"note: r2: {unsharded_zero_note(3)}"]


VALIDATE_HEADER = ("id,model,seq_len,global_batch_seqs,micro_batch,tp,pp,dp,cp,sp,vpp,recompute,"
                   "precision,{zero},iter_time_s,gpu")  # fmt: skip
VALIDATE_RUN = "r1,llama3-8b,8192,8,1,8,1,1,1,yes,1,none,bf16,{zero},2.0,H100"


def _validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, cell: str) -> dict:
    runs = tmp_path / "mine.csv"
    header, run = VALIDATE_HEADER.format(zero=column), VALIDATE_RUN.format(zero=cell)
    runs.write_text(f"{header}\n{run}\n")
    main(["validate", "--data", str(runs), "--json"])
    return dict(json.loads(capsys.readouterr().out))


def test_validate_data_names_a_run_of_zero_3_on_one_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row whose ``dp_sharding`` says ZeRO-3 on one data-parallel rank was evaluated as ZeRO-0
    with only "zero 3" among its assumptions; the row now says it ran as zero 0."""
    data = _validate(tmp_path, capsys, "dp_sharding", "ZeRO-3")
    (row,) = data["rows"]
    assert row["evaluated"] and "zero" not in row["setup"]
    assert unsharded_zero_note(3) in row["assumptions"]


def test_validate_data_says_where_a_calibrate_zero_column_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``stage calibrate``'s ``zero`` column in a ``validate --data`` CSV was listed as not read
    with no hint, beside the row's "zero 1 … (column empty)"."""
    data = _validate(tmp_path, capsys, "zero", "3")
    assert data["accounting"]["columns_not_read"] == [
        "mine.csv (zero (stage calibrate's column; give it as dp_sharding here))"
    ]
