"""s31 review4, a user's pass over the README tour: each bad input found there is one line
naming the bad value (docs/studies.md, "A user's pass over the README tour")."""

from __future__ import annotations

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
