"""s31 review4, a user's pass over the README tour: each bad input found there is one line
naming the bad value (docs/studies.md, "A user's pass over the README tour")."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_explore.cli import main


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # a misspelt required option was reported as the missing option it was meant to be
        (
            ["eval", "--model", "llama3-8b", "--sytem", "h100-80gb"],
            "stage eval: error: unrecognized argument '--sytem'; did you mean --system?",
        ),
        (
            ["trace", "--model", "llama3-8b", "--tp", "2", "--ot", "traces/"],
            "stage trace: error: unrecognized argument '--ot'; did you mean --out?",
        ),
        (
            ["eval", "--modle=llama3-8b", "--system", "h100-80gb"],
            "stage eval: error: unrecognized argument '--modle=llama3-8b'; did you mean --model?",
        ),
        # a required option simply left out is still named as missing
        (["eval", "--model", "llama3-8b"], "the following arguments are required: --system"),
        # an abbreviation argparse accepts is not taken for a misspelling
        (
            ["eval", "--mod", "llama3-8b", "--tp", "-1"],
            "the following arguments are required: --system",
        ),
    ],
)
def test_a_misspelt_required_option_is_named(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    err = capsys.readouterr().err
    assert caught.value.code == 2
    assert expected in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # Megatron-LM turns --sequence-parallel off at tp 1; the figures were --sp-less ones
        (
            ["eval", "--model", "llama3-8b", "--system", "h100-80gb", "--sp"],
            "stage eval: error: --sp applies with --tp > 1 (sequence parallelism splits the "
            "tensor-parallel region's activations over the tp ranks), but got --sp with --tp 1",
        ),
        (["memory", "--model", "llama3-8b", "--dp", "2", "--sp"], "--sp applies with --tp > 1"),
        # the interleaved schedule at one model chunk per rank was timed as 1f1b
        (
            ["eval", "--model", "llama3-8b", "--system", "h100-80gb", "--pp", "2",
             "--schedule", "interleaved", "--global-batch", "8"],
            "stage eval: error: --schedule interleaved needs --vpp >= 2 model chunks per "
            "pipeline rank (with one it is 1f1b), but got --schedule interleaved with --vpp 1",
        ),
    ],
)  # fmt: skip
def test_an_option_the_layout_ignores_is_refused(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1, err


def test_the_refused_options_still_run_where_they_apply(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["eval", "--model", "llama3-8b", "--layers", "4", "--system", "h100-80gb"]
    assert main([*base, "--tp", "2", "--sp"]) == 0
    assert main([*base, "--pp", "2", "--schedule", "interleaved", "--vpp", "2",
                 "--global-batch", "8"]) == 0  # fmt: skip
    capsys.readouterr()


def test_check_of_a_missing_path_names_both_kinds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = f"{tmp_path}/traces"
    assert main(["check", missing]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"stage check: error: {missing}: no such file or folder; expected a trace folder "
        "(<prefix>.<rank>.et files) or a published-runs .csv\n"
    )
