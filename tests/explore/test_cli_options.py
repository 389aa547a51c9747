"""The shared workload options: spelling, defaults, overrides and validation, in-process."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import CpStyle, ParallelConfig, Precision, Recompute, Schedule
from stage_explore.cli import main
from stage_explore.cli.options import add_model_options, add_parallel_options, parse_workload

EXPECTED_FLAGS = {
    "--model", "--layers", "--seq-len", "--mtp-layers", "--dropout", "--no-dropout",
    "--dp", "--dp-shard", "--tp", "--cp", "--pp", "--ep", "--etp", "--sp", "--no-sp", "--zero",
    "--recompute",
    "--recompute-modules", "--recompute-num-layers", "--recompute-method",
    "--moe-dispatcher",
    "--schedule", "--vpp", "--microbatch-group-size-per-virtual-pipeline-stage",
    "--micro-batch", "--global-batch", "--cp-style", "--precision",
    "--fp8-recipe", "--fp8-gemms",
    "--fp32-grads", "--no-fp32-grads",
    "--pp-layout", "--pp-layers", "--pp-first-layers", "--pp-last-layers", "--pp-split",
}  # fmt: skip


def build() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stage test", exit_on_error=False)
    add_model_options(parser)
    add_parallel_options(parser)
    return parser


def workload(*argv: str) -> tuple[object, ParallelConfig]:
    return parse_workload(build().parse_args(list(argv)))


def test_exactly_the_documented_flags() -> None:
    flags = {flag for action in build()._actions for flag in action.option_strings}
    assert flags - {"-h", "--help"} == EXPECTED_FLAGS


def test_defaults() -> None:
    spec, config = workload("--model", "llama3-8b")
    assert spec == get_flavor("llama3-8b")
    assert config == ParallelConfig()
    assert config.schedule is Schedule.ONE_F_ONE_B and config.zero == 0
    assert config.recompute is Recompute.NONE and not config.sp
    assert config.cp_style is CpStyle.ALLGATHER and config.precision is Precision.BF16


def test_every_option_reaches_the_config() -> None:
    argv = (
        "--model mixtral-8x7b --dp 4 --tp 2 --cp 2 --pp 4 --ep 8 --sp --zero 1 --recompute full "
        "--schedule interleaved --vpp 2 --micro-batch 2 --global-batch 64 --seq-len 4096 "
        "--layers 16 --dropout --cp-style ring --precision fp8"
    ).split()
    spec, config = workload(*argv)
    assert config == ParallelConfig(
        dp=4, tp=2, cp=2, pp=4, ep=8, sp=True, zero=1, recompute=Recompute.FULL,
        schedule=Schedule.INTERLEAVED, vpp=2, micro_batch=2, global_batch=64, seq_len=4096,
        dropout=True, cp_style=CpStyle.RING, precision=Precision.FP8,
    )  # fmt: skip
    assert spec == get_flavor("mixtral-8x7b").with_overrides(layers=16, seq_len=4096, dropout=True)


def test_the_interleaved_group_size_reaches_the_config_and_is_checked() -> None:
    base = "--model llama3-8b --pp 4 --schedule interleaved --vpp 2 --global-batch 10".split()
    _, config = workload(*base, "--microbatch-group-size-per-virtual-pipeline-stage", "6")
    assert config.microbatch_group_size_per_vp_stage == 6
    assert workload(*base[:-1], "8")[1].microbatch_group_size_per_vp_stage is None
    with pytest.raises(ConfigError, match="must be 0 or at least pp"):
        workload(*base, "--microbatch-group-size-per-virtual-pipeline-stage", "7")


def test_etp_reaches_the_config_and_defaults_to_tp() -> None:
    argv = "--model mixtral-8x7b --dp 4 --tp 2 --ep 8 --etp 1 --sp".split()
    _, config = workload(*argv)
    assert (config.etp, config.expert_tp, config.expert_dp) == (1, 1, 1)
    _, config = workload("--model", "mixtral-8x7b", "--dp", "4", "--tp", "2", "--ep", "2")
    assert (config.etp, config.expert_tp, config.expert_dp) == (None, 2, 2)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--dp", "4", "--micro-batch", "2"], 8),
        (["--dp", "4", "--micro-batch", "2", "--global-batch", "32"], 32),
    ],
)
def test_global_batch_defaults_to_dp_times_micro_batch(argv: list[str], expected: int) -> None:
    _, config = workload("--model", "gpt3-125m", *argv)
    assert config.global_batch == expected


def test_no_dropout_overrides_the_flavor() -> None:
    spec, config = workload("--model", "gpt3-125m", "--no-dropout")
    assert get_flavor("gpt3-125m").dropout and not spec.dropout and config.dropout is False


def test_model_files_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "short.toml"
    path.write_text('base = "llama3-8b"\nlayers = 4\n', encoding="utf-8")
    spec, _ = workload("--model", str(path), "--pp", "4")
    assert spec.layers == 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--model", "llama3-8b", "--tp", "3"],
            "`tp` must divide `heads`, but got (tp=3, heads=32)",
        ),
        (
            ["--model", "llama3-8b", "--pp", "3", "--pp-split", "even"],
            "`pp`·`vpp` must divide `layers` for an even pipeline split",
        ),
        (
            ["--model", "llama3-8b", "--layers", "30", "--pp", "4", "--pp-split", "even"],
            "(layers=30, pp·vpp=4)",
        ),
        (["--model", "llama3-8b", "--pp", "2", "--pp-layers", "16,x"], "`--pp-layers` must be"),
        (["--model", "llama3-8b", "--pp", "2", "--pp-layers", "15,16"], "must add up to"),
        (
            ["--model", "llama3-8b", "--ep", "2", "--dp", "2"],
            "--ep applies to a model with experts (MoE), but got --ep=2 with model 'llama3-8b'",
        ),
        (  # the dense model named first, not the ep·etp divisibility (s29 review2)
            ["--model", "llama3-8b", "--ep", "2", "--tp", "2"],
            "--ep applies to a model with experts (MoE), but got --ep=2 with model 'llama3-8b'",
        ),
        (["--model", "llama3-8b", "--vpp", "2", "--pp", "2"], "`vpp` > 1 needs schedule="),
        (["--model", "llama3-8b", "--dp", "0"], "`dp` must be a positive int, but got dp=0"),
        (["--model", "llama3-8b", "--layers", "0"], "`layers` must be a positive int"),
        (["--model", "llama3-8b", "--global-batch", "0"], "`global_batch` must be a positive int"),
        (["--model", "llama3-8b", "--seq-len", "-1"], "`seq_len` must be a positive int or None"),
        (["--model", "llama3-8b", "--cp", "3", "--seq-len", "1000"], "2·`cp` must divide"),
        (["--model", "llama9-8b"], "unknown model flavor 'llama9-8b'; close names: llama3-8b"),
    ],
)
def test_invalid_workloads_raise_config_errors(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        workload(*argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["--model", "gpt3-125m", "--zero", "4"],
        ["--model", "gpt3-125m", "--schedule", "zigzag"],
        ["--model", "gpt3-125m", "--precision", "fp32"],
        ["--model", "gpt3-125m", "--tp", "two"],
    ],
)
def test_argparse_rejects_bad_choices(argv: list[str]) -> None:
    with pytest.raises(argparse.ArgumentError):
        build().parse_args(argv)


def test_model_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        build().parse_args(["--tp", "2"])
    assert caught.value.code == 2
    assert "the following arguments are required: --model" in capsys.readouterr().err


def test_recompute_modules() -> None:
    _, config = workload(
        "--model", "deepseek-v3", "--recompute", "selective",
        "--recompute-modules", "mla_up_proj, mlp",
    )  # fmt: skip
    assert config.recompute_modules == ("mla_up_proj", "mlp")
    assert workload("--model", "llama3-8b")[1].recompute_modules == ()
    with pytest.raises(ConfigError, match="recompute_modules"):
        workload("--model", "llama3-8b", "--recompute-modules", "moe_act")


def test_help_names_the_default_of_each_parallel_choice(capsys: pytest.CaptureFixture[str]) -> None:
    # s19 usertour: --schedule, --zero, --recompute, --cp-style, --precision, --fp8-recipe and
    # --moe-dispatcher did not say what they default to.
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("default: 1f1b", "FSDP (default: 0)", "recomputation (default: none)",
                    "(default: allgather)", "default: bf16", "(default: delayed)",
                    "routed tokens (default)", "named by $ASTRA_SIM_BIN"):  # fmt: skip
        assert default in text, default
