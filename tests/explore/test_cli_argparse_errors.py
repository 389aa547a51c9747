"""argparse's own errors are one line, as every other ``stage`` error (q1, s10: a bad choice
printed a 23-line usage block before the error; a misspelt option was reported by the top-level
parser, ``stage: error: unrecognized arguments: --tpp 2``, without the subcommand or a hint)."""

from __future__ import annotations

import pytest

from stage_explore.cli import main


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["memory", "--model", "llama3-8b", "--tpp", "2"],
            "stage memory: error: unrecognized argument '--tpp'; did you mean --tp? "
            "(see `stage memory --help`)",
        ),
        (
            ["eval", "--model", "llama3-8b", "--system", "h100-80gb", "--frameworks", "fsdp"],
            "stage eval: error: unrecognized argument '--frameworks'; did you mean --framework?",
        ),
        (
            ["memory", "--model", "llama3-8b", "--zero", "4"],
            "stage memory: error: argument --zero: invalid choice: 4 (choose from 0, 1, 2, 3)",
        ),
        (["memory", "--model", "llama3-8b", "--tp", "2.5"], "argument --tp: invalid int value"),
        (["trace", "--model", "llama3-8b"], "the following arguments are required: --out"),
        (["memory", "--model", "llama3-8b", "extra"], "unrecognized argument 'extra' (see"),
        (["memorry"], "stage: error: argument COMMAND: invalid choice: 'memorry'"),
    ],
)
def test_argparse_errors_are_one_line(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    err = capsys.readouterr().err
    assert caught.value.code == 2
    assert expected in err and err.count("\n") == 1 and "usage:" not in err, err


def test_help_still_prints_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["memory", "--help"])
    assert caught.value.code == 0 and capsys.readouterr().out.startswith("usage: stage memory")


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    # s19 usertour: `stage --version` said "the following arguments are required: COMMAND".
    from importlib.metadata import version

    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out == f"stage {version('stage-dse')}\n"
