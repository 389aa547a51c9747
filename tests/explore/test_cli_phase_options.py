"""Options the chosen ``--phase`` would ignore are refused in one line (q1, s10: ``stage eval
--phase decode --framework …`` was refused, but ``--moe-deepep``, ``--etp``, ``--fp8-recipe``,
``--dp-shard`` … were silently dropped, ``--batch`` with a training step too, and
``--prefill-instances -1`` ended in a ZeroDivisionError traceback; s22 review: a decode step
took ``--prompt-len`` and ``--chunk``, the steady state ``--context-len``, and ignored them)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from stage_explore.cli import build_parser, main
from stage_explore.cli.serving import _SERVE_ONLY, _SERVING_ONLY, _TRAINING_ONLY

MODEL = ["--model", "llama3-8b", "--system", "h100-80gb"]
DECODE = ["--phase", "decode", "--context-len", "64"]
SERVE = ["--phase", "serve", "--prompt-len", "64", "--output-len", "16"]


def _subparser(name: str) -> argparse.ArgumentParser:
    [action] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    parser = action.choices[name]
    assert isinstance(parser, argparse.ArgumentParser)
    return parser


@pytest.mark.parametrize("command", ["eval", "memory", "trace"])
def test_every_option_has_a_phase_and_the_parser_default(command: str) -> None:
    # Each option of a workload subcommand is shared by both kinds of step, training-only or
    # serving-only; the listed defaults are the parser's (else a default value would be refused).
    shared = {
        "help", "model", "layers", "dp", "tp", "pp", "ep", "precision", "phase", "system",
        "backend", "json", "format", "out", "prefix", "units", "target", "progress", "jobs",
        "quiet",
    }  # fmt: skip
    parser = _subparser(command)
    for action in parser._actions:
        dest = action.dest
        if dest in shared:
            continue
        table = _TRAINING_ONLY if dest in _TRAINING_ONLY else _SERVING_ONLY
        assert dest in table, f"stage {command}: option {dest!r} has no phase"
        assert parser.get_default(dest) == table[dest], (command, dest)
    assert set(_SERVE_ONLY) <= set(_SERVING_ONLY)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["eval", *MODEL, *DECODE, "--moe-deepep"], "--moe-deepep is a training option"),
        (["eval", *MODEL, *DECODE, "--etp", "1"], "--etp is a training option"),
        (["eval", *MODEL, *DECODE, "--fp8-recipe", "blockwise"], "--fp8-recipe is a training"),
        (["eval", *MODEL, *DECODE, "--dp-shard", "1"], "--dp-shard is a training option"),
        (["eval", *MODEL, *DECODE, "--schedule", "zb"], "--schedule is a training option"),
        (["memory", "--model", "llama3-8b", *DECODE, "--cp-style", "ring"], "--cp-style is a"),
        (["eval", *MODEL, "--batch", "64"], "--batch is a serving option: expected --phase"),
        (["memory", "--model", "llama3-8b", "--context-len", "9"], "--context-len is a serving"),
        (["eval", *MODEL, *DECODE, "--output-len", "9"], "--output-len applies to --phase serve"),
        (["eval", *MODEL, *DECODE, "--prompt-len", "9"], "--prompt-len applies to --phase pre"),
        (["eval", *MODEL, *DECODE, "--chunk", "8"], "--chunk applies to --phase prefill or"),
        (["trace", "--model", "llama3-8b", *DECODE, "--prompt-len", "9", "--out", "t"], "--pro"),
        (["eval", *MODEL, *SERVE, "--context-len", "9"], "--context-len applies to --phase pre"),
        (["eval", *MODEL, *SERVE, "--prefill-instances", "-1"], "--prefill-instances must be"),
        (["eval", *MODEL, *SERVE, "--decode-instances", "0"], "--decode-instances >= 1"),
        (
            ["eval", *MODEL, *DECODE, "--batch", "6", "--dp", "2", "--two-batch-overlap"],
            "--two-batch-overlap needs an even number of sequences per dp rank",
        ),
    ],
)
def test_an_option_the_phase_ignores_is_a_one_line_error(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # `stage trace --out t` writes nothing here, if anything
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_the_options_a_phase_uses_still_run(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", *MODEL, *DECODE, "--batch", "4", "--two-batch-overlap", "--json"]
    assert main(argv) == 0
    assert main(["eval", *MODEL, *SERVE, "--prefill-instances", "1", "--json"]) == 0
    assert main(["eval", *MODEL, *SERVE, "--chunk", "32", "--json"]) == 0
    prefill = ["--phase", "prefill", "--prompt-len", "64", "--context-len", "64", "--chunk", "32"]
    assert main(["eval", *MODEL, *prefill, "--json"]) == 0
    capsys.readouterr()
