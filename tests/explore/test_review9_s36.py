"""s36 review9: a demanding user's pass over the Python API, ``stage eval``, ``stage memory``,
``stage redistribute``, ``stage check`` and ``stage trace`` at scale: each test here fails on
the code before it (docs/studies.md, the s36 review9 section)."""

from __future__ import annotations

import heapq
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.serving import ServingConfig
from stage_explore.analytical.attention_grid import _makespan
from stage_explore.analytical.serving import RequestMix
from stage_explore.cli import main


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """``stage ARGV``'s exit status 2 and its one stderr line."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_an_infinite_capacity_factor_in_a_model_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``capacity_factor = inf`` passed the ``> 0`` check and ended in an OverflowError
    traceback where the expert capacity is rounded up."""
    model = tmp_path / "moe.toml"
    model.write_text('base = "mixtral-8x7b"\ncapacity_factor = inf\n')
    err = _one_line_error(capsys, ["eval", "--model", str(model), "--system", "h100-80gb"])
    assert err == (
        f"stage eval: error: {model}: model 'mixtral-8x7b': `capacity_factor` must be a finite "
        "number > 0 (omit it for dropless routing), but got capacity_factor=inf"
    )


def test_a_serve_output_too_long_names_the_options_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--output-len 100000000`` was refused as "`context_len` must be an int from 0 to
    16777216, but got context_len=50001024", a value the user never gave."""
    err = _one_line_error(
        capsys,
        ["eval", "--model", "llama3-8b", "--system", "h100-80gb", "--phase", "serve",
         "--prompt-len", "1024", "--output-len", "100000000"],
    )  # fmt: skip
    assert err == (
        "stage eval: error: a request's `prompt_len` + `output_len` must be at most 16777216 = "
        "2^24 tokens (its sequence at the last token), but got prompt_len=1024 + "
        "output_len=100000000"
    )
    with pytest.raises(ConfigError, match="`prompt_len` \\+ `output_len` must be at most"):
        RequestMix(prompt_len=1 << 23, output_len=(1 << 23) + 1)
    assert RequestMix(prompt_len=1 << 23, output_len=1 << 23).output_len == 1 << 23


def test_the_context_bounds_of_a_step_agree_with_each_other() -> None:
    """A decode step at ``context_len = 2^24`` said "must be below 16777216" after the range
    check had said "from 0 to 16777216"; a prefill's cache plus its prompt was not bounded
    (``--prompt-len 16777216 --context-len 16777216`` ran a 2^25-token sequence)."""
    with pytest.raises(ConfigError) as decode:
        ServingConfig(phase="decode", context_len=1 << 24)
    assert str(decode.value) == (
        "a decode step's `context_len` must be at most 16777215 (the cache plus the new token "
        "within 16777216 = 2^24 tokens), but got context_len=16777216"
    )
    assert ServingConfig(phase="decode", context_len=(1 << 24) - 1).context_len == (1 << 24) - 1
    with pytest.raises(ConfigError) as prefill:
        ServingConfig(phase="prefill", prompt_len=1 << 24, context_len=1)
    assert str(prefill.value) == (
        "a prefill's `context_len` + `prompt_len` (the cache after the step) must be at most "
        "16777216 = 2^24 tokens, but got context_len=1 + prompt_len=16777216"
    )
    assert ServingConfig(phase="prefill", prompt_len=1 << 23, context_len=1 << 23).prompt_len


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--mesh", "dp=4,dp=8"], "--mesh expects each name once, but got 'dp' twice (dp=4 and "
         "dp=8)"),
        (["--dims", "B=8, B=4"], "--dims expects each name once, but got 'B' twice (B=8 and B=4)"),
        (["--mesh", "dp=4,,tp=8"], "--mesh expects NAME=INT[,NAME=INT...], but got an empty "
         "item in 'dp=4,,tp=8'"),
    ],
)  # fmt: skip
def test_redistribute_refuses_a_name_given_twice(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    """``--mesh dp=4,dp=8`` kept dp = 8 without a word (and ``--dims`` alike); the empty item
    of ``dp=4,,tp=8`` was skipped (a missing axis reads as a typo)."""
    layouts = ["x[B/dp, S, H @ 1/tp]", "[B/dp, S, H/tp]"]
    err = _one_line_error(capsys, ["redistribute", *layouts, *argv])
    assert err == f"stage redistribute: error: {expected}"


def test_check_refuses_quiet_with_progress_and_progress_on_a_runs_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``stage check DIR --quiet --progress`` showed the meter (``stage trace`` refuses the
    pair); ``stage check runs.csv --progress`` showed nothing without a word."""
    out = tmp_path / "traces"
    assert main(["trace", "--model", "gpt3-125m", "--layers", "1", "--dp", "2",
                 "--global-batch", "2", "--out", str(out), "--quiet"]) == 0  # fmt: skip
    capsys.readouterr()
    err = _one_line_error(capsys, ["check", str(out), "--quiet", "--progress"])
    assert err == (
        "stage check: error: --quiet and --progress contradict each other; pass one of them"
    )
    runs = tmp_path / "runs.csv"
    runs.write_text("id,gpu,iter_time_s\n")
    err = _one_line_error(capsys, ["check", str(runs), "--progress"])
    assert err == (
        f"stage check: error: --progress applies to a trace folder, but got {str(runs)!r}, a "
        "runs CSV"
    )


def _listed_makespan(works: tuple[int, ...], copies: int, slots: int, longest_first: bool) -> int:
    """The greedy list schedule CTA by CTA, as :func:`_makespan` computed it before s36."""
    tasks = [w for _ in range(copies) for w in works]
    if longest_first:
        tasks.sort(reverse=True)
    if len(tasks) <= slots:
        return max(tasks, default=0)
    free = [0] * slots
    for work in tasks:
        heapq.heapreplace(free, free[0] + work)
    return max(free)


def test_the_attention_grid_makespan_equals_the_listed_schedule() -> None:
    """The shortcut (uniform rounds longest first, the period in grid order) gives the listed
    schedule's makespan exactly: random grids, and causal / full FlashAttention grids."""
    rng = random.Random(36)
    for _ in range(1500):
        works = tuple(rng.randint(0, 9) for _ in range(rng.randint(0, 12)))
        copies, slots = rng.randint(0, 300), rng.randint(1, 40)
        for longest_first in (False, True):
            expected = _listed_makespan(works, copies, slots, longest_first)
            assert _makespan(works, copies, slots, longest_first) == expected
    for blocks in (8, 64):
        for works in (tuple(range(1, blocks + 1)), (blocks,) * blocks):
            for copies in (1, 100, 1000):
                for slots in (132, 264):
                    for longest_first in (False, True):
                        expected = _listed_makespan(works, copies, slots, longest_first)
                        assert _makespan(works, copies, slots, longest_first) == expected


def test_a_huge_micro_batch_is_evaluated_in_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    """``stage eval --micro-batch 1048576`` listed every CTA of the attention grid (2·10^9 of
    them): 45 s and 1 GB at 32,768 sequences, hours and tens of GB at 2^20. Now the same
    makespan without the list; the point is a result (out of memory), not a hang."""
    start = time.perf_counter()
    assert main(["eval", "--model", "llama3-8b", "--layers", "2", "--system", "h100-80gb",
                 "--micro-batch", "1048576", "--global-batch", "1048576"]) == 0  # fmt: skip
    assert time.perf_counter() - start < 60
    assert "infeasible (analytical): out of memory" in capsys.readouterr().out
    start = time.perf_counter()
    assert _makespan(tuple(range(1, 65)), 1 << 25, 264, False) > 0
    assert time.perf_counter() - start < 10


_JSON_DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "json.md"


def _documented_keys() -> dict[str, list[str]]:
    """Each row of docs/reference/json.md's table: its first cell, and its keys in order."""
    rows: dict[str, list[str]] = {}
    for line in _JSON_DOC.read_text().splitlines():
        if line.startswith("| ") and not line.startswith("| output"):
            name, keys = line.strip("|").rsplit(" | ", 1)
            rows[name.strip()] = [key.strip().strip("`") for key in keys.split(",")]
    return rows


def _json_of(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    capsys.readouterr()
    assert main([*argv, "--json"]) in (0, 1)
    return json.loads(capsys.readouterr().out, parse_constant=_refuse_constant)


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"--json emitted {name}, which is not JSON")


def test_the_json_keys_are_the_documented_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No document listed the keys of ``--json``; docs/reference/json.md does, and each of its
    rows is checked against the command's output here (none holds NaN or Infinity)."""
    rows = _documented_keys()
    eval_ = ["eval", "--model", "llama3-8b", "--layers", "2", "--system", "h100-80gb"]
    serve = [*eval_, "--phase", "serve", "--prompt-len", "128", "--output-len", "16"]
    memory = ["memory", "--model", "llama3-8b", "--layers", "2"]
    traces = tmp_path / "traces"
    assert main(["trace", "--model", "gpt3-125m", "--layers", "1", "--dp", "2",
                 "--global-batch", "2", "--out", str(traces), "--quiet"]) == 0  # fmt: skip
    runs = Path(__file__).resolve().parents[2] / "stage_explore" / "data" / "published_runs.csv"
    cases: list[tuple[str, Any]] = []
    cases.append(("`stage eval --json` (a training step)", _json_of(capsys, eval_)))
    cases.append(("`stage eval --json --phase prefill\\|decode\\|serve`", _json_of(capsys, serve)))
    cases.append((
        "the same, a point that cannot be laid out (more GPUs than the system has)",
        _json_of(capsys, [*eval_, "--phase", "decode", "--context-len", "8", "--dp", "262144",
                          "--batch", "262144"]),
    ))  # fmt: skip
    trained = _json_of(capsys, memory)
    cases.append(("`stage memory --json` (training)", trained))
    cases.append(("each of its `ranks` (one per pipeline stage)", trained["ranks"][0]))
    served = _json_of(capsys, [*memory, "--phase", "decode", "--context-len", "8"])
    cases.append(("`stage memory --json --phase prefill\\|decode`", served))
    cases.append(("each of its `stages`", served["stages"][0]))
    steps = _json_of(capsys, ["redistribute", "x[B/dp, S, H @ 1/tp]", "[B/dp, S, H/tp]"])
    cases.append(("`stage redistribute --json`: a list, each step", steps[0]))
    checked = _json_of(capsys, ["check", str(traces)])
    cases.append(("`stage check DIR --json`", checked))
    cases.append(("each of its `ranks` (keyed by the rank as a string)", checked["ranks"]["0"]))
    cases.append(("`stage check RUNS.csv --json`", _json_of(capsys, ["check", str(runs)])))
    assert sorted(name for name, _ in cases) == sorted(rows)
    for name, payload in cases:
        assert list(payload) == rows[name], name
