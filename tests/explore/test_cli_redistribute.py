"""``stage redistribute``: text and JSON output, and errors as one line with exit status 2."""

from __future__ import annotations

import json

import pytest

from stage_explore.cli import main

KINDS = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "slice"}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["redistribute", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_text_output_lists_steps_in_order_with_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "x[B/dp, S, H @ 1/tp]", "[B, S, H]",
        "--mesh", "dp=2,tp=4", "--dims", "B=8,S=16,H=32",
    )
    assert code == 0 and err == ""
    assert out.splitlines() == [
        "x[B/dp, S, H @ 1/tp]  ->  x[B, S, H]  on {dp=2, tp=4}",
        "  1. all_reduce over tp: 4096 bytes",
        "     x[B/dp, S, H @ 1/tp] -> x[B/dp, S, H]",
        "  2. all_gather over dp on B: 4096 bytes",
        "     x[B/dp, S, H] -> x[B, S, H]",
    ]


def test_text_output_symbolic_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "x[B/dp, S, H @ 1/tp]", "[B/dp, S, H/tp]")
    assert code == 0
    assert "on {dp=dp, tp=tp}" in out.splitlines()[0]
    assert "1. reduce_scatter over tp onto H: 2*B*H*S/dp bytes" in out


def test_equal_layouts_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "x[B/dp, S]", "[B/dp, S]")
    assert code == 0 and "(no communication: the layouts are equal)" in out


@pytest.mark.parametrize(
    ("src", "dst", "expected"),
    [
        ("x[B/dp, S, H @ 1/tp]", "[B/dp, S, H/tp]", [("reduce_scatter", ["tp"])]),
        ("x[B/dp, S, H @ 1/tp]", "[B, S/dp, H @ 1/tp]", [("all_to_all", ["dp"])]),
        ("x[B/dp, S, H @ 1/tp]", "[B, S, H @ 1/tp]", [("all_gather", ["dp"])]),
        ("x[B/dp, S, H @ 1/tp]", "[B/dp, S, H]", [("all_reduce", ["tp"])]),
        (
            "x[B/dp, S, H @ 1/tp]", "[B/tp, S, H/dp]",
            [("all_to_all", ["dp"]), ("reduce_scatter", ["tp"])],
        ),
        (
            "x[B/dp, S, H @ 1/tp]", "[B, S, H]",
            [("all_reduce", ["tp"]), ("all_gather", ["dp"])],
        ),
        ("x[B, S]", "[B/(dp*tp), S]", [("slice", ["dp", "tp"])]),
        ("x[B/(dp*tp), S]", "[B, S]", [("all_gather", ["dp", "tp"])]),
        ("x[B/dp, S]", "x[B/dp, S]", []),
    ],
)
def test_json_is_a_list_of_steps_in_execution_order(
    capsys: pytest.CaptureFixture[str], src: str, dst: str, expected: list[tuple[str, list[str]]]
) -> None:
    code, out, err = run(capsys, src, dst, "--json")
    assert code == 0 and err == ""
    steps = json.loads(out)
    assert isinstance(steps, list)
    assert all(step["kind"] in KINDS and isinstance(step["axes"], list) for step in steps)
    assert [(step["kind"], step["axes"]) for step in steps] == expected


def test_json_with_bound_sizes_has_integer_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "x[B/dp, S, H/tp]", "[B/dp, S, H]", "--json",
        "--mesh", "dp=2,tp=4", "--dims", "B=8,S=16,H=32", "--dtype-bytes", "4",
    )
    assert code == 0
    (step,) = json.loads(out)
    assert step == {
        "kind": "all_gather", "axes": ["tp"], "src_dim": "H", "dst_dim": None,
        "bytes_per_rank": 4 * 16 * 8 * 4, "before": "x[B/dp, S, H/tp]", "after": "x[B/dp, S, H]",
    }


def test_no_merge_gives_one_step_per_axis(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "x[B/(dp*tp), S]", "[B, S]", "--json", "--no-merge")
    assert code == 0
    assert [(s["kind"], s["axes"]) for s in json.loads(out)] == [
        ("all_gather", ["tp"]), ("all_gather", ["dp"])
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["x[B, S]", "[B, S @ 1/tp]"], "a partial sum over 'tp' cannot be created"),
        (["x[B/dp, S/(cp*tp), H @ 1/tp]", "[B, S, H]"], "both partitions a dim and is a partial"),
        (["x[B/dp", "[B]"], "cannot read the layout"),
        (["x[B, S]", "[B]"], "they have 2 and 1 dims"),
        (["x[B/dp]", "[B]", "--mesh", "dp=two"], "--mesh expects NAME=INT"),
        (["x[B/dp]", "[B]", "--dims", "B"], "--dims expects NAME=INT"),
        # q1, s10: these printed 0 or negative bytes, a fractional shard, or ignored the typo.
        (["x[B/dp]", "[B]", "--dtype-bytes", "0"], "--dtype-bytes must be a positive integer"),
        (["x[B/dp]", "[B]", "--dtype-bytes", "-2"], "--dtype-bytes must be a positive integer"),
        (
            ["x[B/dp, S]", "[B, S]", "--mesh", "dp=4", "--dims", "B=6,S=8"],
            "SRC x[B/dp, S]: dim B of size 6 does not split evenly over dp = 4",
        ),
        (
            ["x[B, S]", "[B, S/tp]", "--mesh", "tp=8", "--dims", "B=6,S=12"],
            "DST [B, S/tp]: dim S of size 12 does not split evenly over tp = 8",
        ),
        (["x[B/dp]", "[B]", "--dims", "Q=3"], "--dims names 'Q', which is not a dim size"),
    ],
)
def test_errors_exit_2_with_one_line_and_no_traceback(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("stage redistribute: error: ")
    assert message in err
    assert err.count("\n") == 1 and err.endswith("\n")
    assert "Traceback" not in err


def test_errors_exit_2_with_json_too(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "x[B, S]", "[B, S @ 1/tp]", "--json")
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1
