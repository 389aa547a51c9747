"""Uneven pipeline splits from the command line: ``--pp-layers`` and its siblings reach
``memory``, ``trace`` (per rank and symmetric), ``check`` and ``eval``; Llama-3.1 405B (126
layers) runs on 16 pipeline stages by default; bad splits are one line with exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stage_core.lower.memory import memory_report
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.cli import main

SMALL = ("--model", "llama3-8b", "--layers", "6", "--seq-len", "256")


def test_memory_json_follows_pp_layers(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SMALL, "--pp", "4", "--pp-layers", "1,2,2,1", "--global-batch", "4", "--json"]
    assert main(["memory", *argv]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["parallel"]["pp_layers"] == [1, 2, 2, 1]
    rows = document["ranks"]
    model = get_flavor("llama3-8b").with_overrides(layers=6, seq_len=256)
    expected = memory_report(
        lower(model, ParallelConfig(pp=4, pp_layers=(1, 2, 2, 1), global_batch=4))
    )
    assert [row["weights_bytes"] for row in rows] == [e.weights_bytes for e in expected]
    assert rows[1]["weights_bytes"] == rows[2]["weights_bytes"] != rows[3]["weights_bytes"]


def test_first_and_last_stage_options_reach_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SMALL, "--pp", "3", "--pp-first-layers", "1", "--pp-last-layers", "1", "--json"]
    assert main(["memory", *argv, "--global-batch", "3"]) == 0
    rows = json.loads(capsys.readouterr().out)["ranks"]
    assert len(rows) == 3
    argv = [*SMALL, "--pp", "4", "--pp-split", "embedding-loss", "--json", "--global-batch", "4"]
    assert main(["memory", *argv]) == 0
    split = json.loads(capsys.readouterr().out)["ranks"]
    model = get_flavor("llama3-8b").with_overrides(layers=6, seq_len=256)
    config = ParallelConfig(pp=4, pp_layers=(1, 2, 2, 1), global_batch=4)
    assert [r["peak_bytes"] for r in split] == [
        e.peak_bytes for e in memory_report(lower(model, config))
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pp", "4", "--pp-layers", "2,2,2"], "`pp_layers` must list one count per pipeline"),
        (["--pp", "4", "--pp-layers", "2,2,2,2"], "`pp_layers` must add up to the model's layers"),
        (["--pp", "4", "--pp-layers", "a,b"], "`--pp-layers` must be comma-separated"),
        (["--pp", "4", "--pp-split", "even"], "`pp`·`vpp` must divide `layers` for an even"),
        (["--pp", "4", "--pp-first-layers", "2"], "the first/last-stage layer counts must leave"),
        (
            ["--pp", "2", "--vpp", "2", "--schedule", "interleaved", "--pp-layers", "3,3"],
            "with `vpp`=2 every pipeline rank's layer count must divide by vpp",
        ),
    ],
)
def test_bad_splits_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["memory", *SMALL, "--global-batch", "4", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_llama31_405b_pp16_traces_check_and_evaluates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """126 layers on 16 stages (7, 8 × 14, 7): every rank's Chakra trace (tp 1, short sequences
    and 4 micro-batches to stay fast) passes ``stage check``; the symmetric form at 1,024 GPUs
    is written; ``stage eval`` gives a feasible result on 1,024 H100s."""
    model = ("--model", "llama3.1-405b", "--pp", "16")
    per_rank = tmp_path / "et"
    argv = [*model, "--seq-len", "128", "--global-batch", "4", "--out", str(per_rank), "--quiet"]
    assert main(["trace", *argv]) == 0
    assert len(list(per_rank.glob("workload.*.et"))) == 16
    assert main(["check", str(per_rank), "--json"]) == 0
    capsys.readouterr()
    sym = tmp_path / "sym"
    big = [*model, "--tp", "8", "--dp", "8", "--sp", "--global-batch", "128"]
    assert main(["trace", *big, "--format", "symmetric", "--out", str(sym), "--quiet"]) == 0
    assert any(sym.iterdir())
    capsys.readouterr()
    flags = ["--recompute", "full", "--system", "h100-80gb", "--json"]
    assert main(["eval", *big, *flags]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["feasible"] is True and result["num_gpus"] == 1024
    # the model's FLOPs per step do not depend on the split: the even pp2 split (63 + 63)
    even = [*big[:2], "--pp", "2", *big[4:]]
    assert main(["eval", *even, *flags]) == 0
    assert (
        json.loads(capsys.readouterr().out)["model_flops_per_step"]
        == result["model_flops_per_step"]
    )
