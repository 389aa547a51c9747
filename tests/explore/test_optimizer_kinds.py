"""s37 optim: the optimizer's kind as a framework option (``optimizer``,
:mod:`stage_core.lower.optimizer_kinds`) — its state bytes and step bytes, the memory and
step time that follow it, the ``stage eval --optimizer`` flag, and the reader of a row's cells
(:mod:`stage_explore.validation.infer_optimizer`)."""

from __future__ import annotations

import json

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.optimizer_kinds import (
    ADAM_BYTES_READ_PER_PARAM,
    ADAM_BYTES_WRITTEN_PER_PARAM,
    ADAM_FLOPS_PER_PARAM,
    OPTIMIZERS,
    optimizer_state_bytes,
    optimizer_step_bytes,
)
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS, get_framework
from stage_explore.cli import main
from stage_explore.system import load_system
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_optimizer import named_optimizer
from stage_explore.validation.setups import data_dir

NO_SETUP = "published_runs_no_setup.csv"


@pytest.mark.parametrize(
    ("kind", "master", "state"),
    [("adam", True, 12), ("adam_bf16_moments", True, 8), ("sgd_momentum", True, 8),
     ("sgd", True, 4), ("adam", False, 4), ("adam_bf16_moments", False, 4),
     ("sgd_momentum", False, 2), ("sgd", False, 0)],
)  # fmt: skip
def test_the_state_is_the_master_and_the_moments(kind: str, master: bool, state: int) -> None:
    # fp32 master (4) + moments: fp32 (4) each, bf16 (2) for bf16 moments or without a master
    assert optimizer_state_bytes(kind, master) == state


def test_adam_is_the_lowering_s_count_and_the_others_move_fewer_bytes() -> None:
    adam = optimizer_step_bytes("adam")
    assert adam == (ADAM_FLOPS_PER_PARAM, ADAM_BYTES_READ_PER_PARAM, ADAM_BYTES_WRITTEN_PER_PARAM)
    # master 4 + grad 4 + moments read; master 4 + moments + 16-bit copy 2 written
    assert optimizer_step_bytes("adam_bf16_moments") == (12, 12, 10)
    assert optimizer_step_bytes("sgd_momentum") == (4, 12, 10)
    assert optimizer_step_bytes("sgd") == (2, 8, 6)


def test_every_profile_defaults_to_adam() -> None:
    assert {profile.optimizer for profile in FRAMEWORKS.values()} == {"adam"}
    assert OPTIMIZERS[0] == "adam"


def test_an_unknown_optimizer_is_one_line_naming_it() -> None:
    with pytest.raises(ConfigError) as error:
        get_framework("megatron-core").with_overrides({"optimizer": "lamb"})
    message = str(error.value)
    assert "\n" not in message and "'lamb'" in message and "adam, adam_bf16_moments" in message


def test_distributed_fused_adam_needs_adam() -> None:
    with pytest.raises(ConfigError, match="expected optimizer 'adam'.*optimizer='sgd'"):
        get_framework("megatron-core").with_overrides(
            {"distributed_fused_adam": "fp32", "optimizer": "sgd"}
        )


def _evaluate(kind: str, framework: str = "megatron-core") -> tuple[int, float]:
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=2048)
    parallel = ParallelConfig(dp=8, zero=1, global_batch=8)
    result = AnalyticalBackend(framework=framework, overrides={"optimizer": kind}).evaluate(
        model, parallel, load_system("h100-80gb")
    )
    return result.peak_memory_bytes, result.breakdown["optimizer"]


def test_memory_and_step_time_follow_the_kind() -> None:
    adam, bf16, momentum, sgd = (_evaluate(kind) for kind in OPTIMIZERS)
    assert adam[0] > bf16[0] == momentum[0] > sgd[0]  # 12 > 8 = 8 > 4 bytes, sharded over 8
    assert adam[1] > bf16[1] > sgd[1] and momentum[1] > sgd[1]
    model = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=2048)
    shard = model.params() // 8  # ZeRO-1 over dp 8: (12 - 4) bytes of the shard
    assert adam[0] - sgd[0] == pytest.approx(8 * shard, rel=0.06)  # + allocator overhead


def test_the_eval_flag_sets_it_and_refuses_an_unknown_kind(
    capsys: pytest.CaptureFixture[str],
) -> None:
    point = ("--model", "llama3-8b", "--layers", "2", "--dp", "8", "--zero", "1",
             "--global-batch", "8", "--system", "h100-80gb", "--json")  # fmt: skip
    assert main(["eval", *point]) == 0
    adam = json.loads(capsys.readouterr().out)
    assert main(["eval", *point, "--optimizer", "sgd"]) == 0
    sgd = json.loads(capsys.readouterr().out)
    assert sgd["peak_memory_bytes"] < adam["peak_memory_bytes"]
    with pytest.raises(SystemExit):
        main(["eval", *point, "--optimizer", "lamb"])
    assert "invalid choice: 'lamb'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("cells", "options"),
    [({"precision": "fp16 ('All experiments were run with fp16, including SGD optimizer')"},
      {"optimizer": "sgd", "bf16_model_states": True}),
     ({"precision": "bf16 mixed precision, SGD with momentum 0.9"}, {"optimizer": "sgd_momentum"}),
     ({"precision": "FP8 (fine-grained recipe; BF16 optimizer moments)"},
      {"optimizer": "adam_bf16_moments"}),
     ({"precision": "bf16", "dp_sharding": "ZeRO-1; AdamW moments in BF16"},
      {"optimizer": "adam_bf16_moments"}),
     ({"precision": "bf16; optimizer states in bf16"}, {"bf16_model_states": True})],
)  # fmt: skip
def test_a_cell_stating_the_optimizer_sets_it(
    cells: dict[str, str], options: dict[str, object]
) -> None:
    read, note = named_optimizer(cells)
    assert read == options and note


@pytest.mark.parametrize(
    "cells",
    [{"precision": "bf16"}, {"precision": "fp16 (not SGD: Adam)"},
     {"precision": "fp16 (Apex O2: FP32 optimizer states and master weights)"},
     {"precision": "bf16 with fp32 moments", "notes": "SGD, not Adam"},
     {"dp_sharding": "ZeRO-1 (optimizer states sharded over data-parallel ranks)"}],
)  # fmt: skip
def test_a_cell_stating_no_other_optimizer_keeps_adam(cells: dict[str, str]) -> None:
    assert named_optimizer(cells) == ({}, "")


@pytest.mark.parametrize(
    ("row_id", "options"),
    [("FSDPAWS-A100-40G-GPT175B-128", {"optimizer": "sgd", "bf16_model_states": True}),
     ("DSV3-H800-2048-PRETRAIN", {"optimizer": "adam_bf16_moments"})],
)  # fmt: skip
def test_the_rows_that_state_it_get_it(row_id: str, options: dict[str, object]) -> None:
    (row,) = [r for r in read_csv(data_dir() / NO_SETUP) if r["id"] == row_id]
    (case, *_) = row_cases(row, NO_SETUP, 1, data_dir())
    assert options.items() <= dict(case.framework_options).items()
    assert any("infer_optimizer" in a for a in case.assumptions)
