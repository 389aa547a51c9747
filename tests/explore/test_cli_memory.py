"""``stage memory``: the JSON shape (one entry per distinct stage program, exact ints), agreement
with ``memory_report``, the text table, and bad combinations as one line with exit status 2."""

from __future__ import annotations

import json

import pytest

from stage_core.lower.memory import memory_report
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.cli import main

INT_KEYS = (
    "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "transient_bytes",
    "peak_bytes",
)
BASE = ("--model", "megatron-gpt-1.7b", "--layers", "4")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["memory", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("argv", "config"),
    [
        (("--tp", "2"), ParallelConfig(tp=2)),
        (
            ("--tp", "2", "--pp", "2", "--dp", "2", "--sp", "--zero", "1", "--global-batch", "8",
             "--recompute", "selective"),
            ParallelConfig(
                tp=2, pp=2, dp=2, sp=True, zero=1, global_batch=8, recompute="selective",
            ),
        ),
        (
            ("--pp", "2", "--dp", "2", "--schedule", "interleaved", "--vpp", "2", "--global-batch",
             "8", "--no-fp32-grads", "--zero", "3"),
            ParallelConfig(pp=2, dp=2, schedule="interleaved", vpp=2, global_batch=8,
                           grad_fp32=False, zero=3),
        ),
    ],
    ids=["tp", "tp-pp-dp-sp-zero1", "interleaved-zero3"],
)
def test_json_has_one_entry_per_stage_program_with_exact_ints(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], config: ParallelConfig,
) -> None:
    code, out, err = run(capsys, *BASE, *argv, "--json")
    assert code == 0 and err == ""
    document = json.loads(out)
    assert document["model"] == "megatron-gpt-1.7b"
    assert document["parallel"]["tp"] == config.tp and document["parallel"]["pp"] == config.pp
    entries = document["ranks"]
    assert isinstance(entries, list) and len(entries) == config.pp
    seen: list[int] = []
    for index, entry in enumerate(entries):
        assert entry["stage"] == index
        assert isinstance(entry["ranks"], list) and all(type(r) is int for r in entry["ranks"])
        seen += entry["ranks"]
        for key in INT_KEYS:
            assert type(entry[key]) is int and entry[key] >= 0, key
        assert entry["peak_bytes"] == sum(entry[k] for k in INT_KEYS[:-1])
    assert sorted(seen) == list(range(config.world_size))
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
    expected = memory_report(lower(model, config))
    assert entries == [e.to_dict() for e in expected]


def test_text_output_is_a_table_with_one_row_per_stage(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("--tp", "2", "--pp", "2", "--dp", "2", "--global-batch", "8")
    code, out, err = run(capsys, *BASE, *argv)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == (
        "megatron-gpt-1.7b: 8 GPUs, 4 micro-batches per step, one program per pipeline stage"
    )
    assert lines[1].split() == [
        "stage", "weights", "grads", "optim", "activ", "transient", "peak", "ranks",
    ]
    rows = [line.split() for line in lines[3:5]]
    assert [row[0] for row in rows] == ["0", "1"]
    assert [row[-1] for row in rows] == ["0,1,2,3", "4,5,6,7"]
    assert lines[-1].startswith("(GiB;")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--tp", "5"), "`tp` must divide `heads`"),
        (("--pp", "3", "--pp-split", "even"), "`pp`·`vpp` must divide `layers`"),
        (("--cp", "2", "--cp-style", "ring"), "ring context parallelism"),
        (("--dp", "2", "--global-batch", "3"), "must divide `global_batch`"),
        (
            ("--pp", "2", "--schedule", "interleaved", "--vpp", "2", "--global-batch", "3"),
            "micro-batches",
        ),
    ],
    ids=["tp-heads", "pp-layers", "ring-gpt", "batch", "interleaved-batch"],
)
def test_bad_combination_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str,
) -> None:
    code, out, err = run(capsys, *BASE, *argv, "--json")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("stage memory: error: ")
    assert message in err


def test_expert_parallelism_the_generator_cannot_fold(capsys: pytest.CaptureFixture[str]) -> None:
    """An expert-parallel group inside the cp ranks (ep 2 < cp 4, dp 1) is one line, exit 2."""
    code, out, err = run(
        capsys, "--model", "mixtral-8x7b", "--layers", "2", "--cp", "4", "--ep", "2", "--json",
    )
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "must divide `dp`" in err and "ep=2" in err


def test_memory_json_accepts_etp(capsys: pytest.CaptureFixture[str]) -> None:
    """Megatron-Bridge's Qwen3 layout scaled down: tp 2, ep folded over tp×dp, etp 1."""
    code, out, _ = run(
        capsys, "--model", "mixtral-8x7b", "--layers", "2", "--dp", "4", "--tp", "2", "--ep",
        "8", "--etp", "1", "--sp", "--global-batch", "4", "--json",
    )  # fmt: skip
    assert code == 0
    report = json.loads(out)
    assert report["parallel"]["etp"] == 1 and report["parallel"]["ep"] == 8
