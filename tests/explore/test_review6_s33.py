"""A user's pass over ``stage calibrate``, ``stage eval`` and ``stage trace`` (s33 review6): a
fit on one run, or on runs of one configuration, printed no leave-one-out line and no reason
(the error the docs promise was left out without a word); a measured cell beyond a float's
range (``1e400``) read as ``inf`` and ended "no run can be evaluated: r1: " with an empty
reason (``stage validate --data``: "not evaluated: " likewise); ``--moe-load-imbalance 0.5`` was
refused as a setting of the framework profile, not as the flag the user typed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore.calibrate_checks import loo_skipped
from stage_explore.cli import main
from stage_explore.validation.csv_cells import measured_value

HEADER = "id,model,layers,hidden,ffn,heads,vocab,seq_len,global_batch_seqs,micro_batch,tp,pp,dp,sp,"
HEADER += "vpp,recompute,precision,iter_time_s"
RUN = "a,megatron-gpt-1.7b,2,2048,8192,16,51200,2048,64,2,1,1,16,no,1,none,bf16,0.2"
OTHER = "e,megatron-gpt-1.7b,2,1024,4096,16,51200,2048,256,8,1,1,32,no,1,none,bf16,0.3"
TWIN = "a2" + RUN[1:]  # run a's configuration under another id


def _csv(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([HEADER, *lines]) + "\n", encoding="utf-8")
    return path


def _argv(path: Path, *extra: str) -> list[str]:
    return ["calibrate", "--runs", str(path), "--system", "a100-80gb", "--fit", "memory",
            "--framework", "megatron-lm-2021", *extra]  # fmt: skip


def test_one_run_says_why_there_is_no_leave_one_out_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "fit.toml"
    assert main(_argv(_csv(tmp_path, RUN), "--out", str(out_file))) == 0
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("leave-one-out")]
    assert line == (
        "leave-one-out: not computed: 1 run; expected at least 2 runs of different "
        "configurations (each run is predicted by a fit on the others)"
    )
    assert "# In-sample mean |error| " in (text := out_file.read_text(encoding="utf-8"))
    assert "leave-one-out not computed: 1 run; expected at least 2 runs" in text


def test_runs_of_one_configuration_say_why_there_is_no_leave_one_out_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_argv(_csv(tmp_path, RUN, TWIN), "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["leave_one_out_mae"] is None
    assert data["leave_one_out_not_computed"].startswith(
        "the 2 runs are one configuration, left out together"
    )
    # two configurations: the error is computed and no reason is given
    assert main(_argv(_csv(tmp_path, RUN, OTHER), "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["leave_one_out_mae"] is not None
    assert data["leave_one_out_not_computed"] is None


def test_no_loo_is_said_as_asked_in_the_written_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "fit.toml"
    assert main(_argv(_csv(tmp_path, RUN, OTHER), "--no-loo", "--out", str(out_file))) == 0
    assert "leave-one-out" not in capsys.readouterr().out  # asked for: no line
    assert "leave-one-out not computed (--no-loo)." in out_file.read_text(encoding="utf-8")
    assert loo_skipped([], []).startswith("0 runs; expected at least 2 runs")


@pytest.mark.parametrize("cell", ["1e400", "-1e999", "1,000e400"])
def test_a_measured_cell_beyond_a_floats_range_is_one_line(cell: str) -> None:
    with pytest.raises(ConfigError) as error:
        measured_value(cell, "r1", "iter_time_s")
    assert str(error.value) == (
        f"r1: the iter_time_s cell {cell!r} is beyond a float's range; expected a finite number"
    )
    assert measured_value("1e300", "r1", "iter_time_s") == 1e300


def test_calibrate_names_a_measured_cell_beyond_a_floats_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # before: "no run of 'runs.csv' can be evaluated: a: " (an empty reason)
    assert main(_argv(_csv(tmp_path, RUN.removesuffix("0.2") + "1e400"))) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("a: the iter_time_s cell '1e400' is beyond a float's range; expected a "
                         "finite number")  # fmt: skip


def test_validate_data_names_a_measured_cell_beyond_a_floats_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(
        "id,gpu,model,layers,hidden,heads,seq_len,global_batch_seqs,tp,pp,dp,iter_time_s\n"
        "a,H100,llama3-8b,32,4096,32,8192,64,1,1,8,1e999\n",
        encoding="utf-8",
    )
    assert main(["validate", "--data", str(path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert "the iter_time_s cell '1e999' is beyond a float's range" in row["not_evaluated_reason"]


@pytest.mark.parametrize("value", ["0.5", "nan", "inf"])
def test_a_moe_load_imbalance_below_one_names_the_flag(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["eval", "--model", "mixtral-8x7b", "--layers", "2", "--ep", "8", "--dp", "8",
            "--global-batch", "64", "--system", "h100-80gb",
            "--moe-load-imbalance", value]  # fmt: skip
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "--moe-load-imbalance: expected a finite number >= 1" in line
    assert f"but got {value}" in line and "framework" not in line


def test_eval_names_the_layers_and_sequence_it_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a Hugging Face config without rope_scaling's original length trains at its
    # max_position_embeddings: 131,072 tokens, shown nowhere before (101 s for a 1B model)
    config = tmp_path / "my model" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
        "intermediate_size": 8192, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_hidden_layers": 16, "vocab_size": 128256, "max_position_embeddings": 131072,
        "tie_word_embeddings": True, "hidden_act": "silu",
    }), encoding="utf-8")  # fmt: skip
    base = ["eval", "--dp", "8", "--global-batch", "64", "--system", "h100-80gb"]
    assert main([*base, "--model", str(config)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("my model on h100-80gb: dp=8 ")
    assert first.endswith("; 16 layers, seq_len 131072")
    assert main([*base, "--model", "llama3-8b", "--layers", "1", "--seq-len", "4096"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("bf16; 1 layer, seq_len 4096")
