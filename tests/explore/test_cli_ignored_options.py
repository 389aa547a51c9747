"""An option the model or the configuration would ignore is refused in one line naming it, as
an option the phase ignores is (s22 review: ``--fp8-recipe blockwise`` without ``--precision
fp8``, ``--moe-deepep`` or ``--etp`` on a dense model, ``--dp-shard`` without ZeRO,
``--cp-style ring`` at ``--cp 1`` and ``--pp-split`` at ``--pp 1`` each printed the figures of
the run without the option)."""

from __future__ import annotations

import pytest

from stage_explore.cli import main

DENSE = ["--model", "llama3-8b", "--layers", "2", "--seq-len", "1024", "--dp", "2"]
EVAL = ["eval", *DENSE, "--system", "h100-80gb"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*EVAL, "--fp8-recipe", "blockwise"], "--fp8-recipe applies to --precision fp8, but got"),
        (["memory", *DENSE, "--fp8-gemms", "fprop"], "--fp8-gemms applies to --precision fp8 or"),
        ([*EVAL, "--moe-deepep"], "--moe-deepep applies to a model with experts (MoE), but got"),
        ([*EVAL, "--moe-hybridep"], "--moe-hybridep applies to a model with experts"),
        ([*EVAL, "--moe-load-imbalance", "2"], "--moe-load-imbalance applies to a model with"),
        (["memory", *DENSE, "--etp", "1"], "--etp=1 with model 'llama3-8b', which has none"),
        (["memory", *DENSE, "--moe-dispatcher", "allgather"], "--moe-dispatcher applies to a"),
        ([*EVAL, "--dp-shard", "2"], "--dp-shard applies with --zero 1, 2 or 3"),
        (["memory", *DENSE, "--cp-style", "ring"], "--cp-style applies with --cp > 1, but got"),
        (["memory", *DENSE, "--pp-split", "ends"], "--pp-split applies with --pp > 1, but got"),
    ],
)
def test_an_option_the_configuration_ignores_is_a_one_line_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_the_options_a_configuration_reads_still_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*EVAL, "--precision", "fp8", "--fp8-recipe", "blockwise", "--json"]) == 0
    assert main([*EVAL, "--zero", "1", "--dp-shard", "2", "--json"]) == 0
    assert main(["memory", *DENSE, "--cp", "2", "--cp-style", "ring", "--json"]) == 0
    moe = ["--model", "mixtral-8x7b", "--layers", "2", "--seq-len", "1024", "--dp", "8"]
    assert main(["memory", *moe, "--ep", "8", "--moe-dispatcher", "allgather", "--json"]) == 0
    capsys.readouterr()
