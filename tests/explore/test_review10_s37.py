"""A demanding user's pass over serving studies and ``stage calibrate`` (7 Dec 2026, s37
review10; docs/studies.md, the section of that name). Each test failed at f9660be:

- a named length distribution whose quantile points fall outside 1 … 2^24 tokens was clamped
  without a word (a lognormal of mean 2,048 and sigma 50 served 1-token prompts; a uniform up
  to 10^9 served 2^24-token ones);
- ``cached_prompt_len`` + prompt + output over 2^24 was taken, then every trial was refused
  with a ``context_len`` the user never gave; a ``cached_prompt_len`` error was reported under
  ``[workload] arrival_rate``;
- ``arrival_rate = inf`` (``[space]``) was taken and every trial refused; in ``[workload]`` (and
  ``RequestLoad``) the message said "must be a number > 0, but got inf";
- an inference ``[space]`` without a structurally possible point named no value;
- ``stage calibrate`` fitted runs whose ``recompute`` cell was empty or absent as ``none``
  without a word (an empty ``sp`` has had a note since s28).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore.analytical.requests import RequestLoad, length_distribution
from stage_explore.calibrate_rows import recompute_note
from stage_explore.cli import main
from stage_explore.study import load_study

STUDY = """\
[study]
name = "s"
[model]
flavor = "llama3-8b"
[workload]
kind = "inference"
prompt_len = 2048
output_len = 256
{workload}
[system]
preset = "h100-80gb"
[space]
num_gpus = 8
tp = {tp}
batch = [64]
arrival_rate = {rate}
[objectives]
tokens_per_s_per_gpu = "max"
[sampler]
kind = "grid"
"""


def _study(tmp_path: Path, workload: str = "", tp: str = "[2, 8]", rate: str = "[2]") -> Path:
    path = tmp_path / "s.toml"
    path.write_text(STUDY.format(workload=workload, tp=tp, rate=rate), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ({"distribution": "lognormal", "mean": 2048, "sigma": 50}, "sigma 50 puts the mean of bin"),
        ({"distribution": "uniform", "min": 1, "max": 1e9}, "max 1000000000.0 puts"),
        ({"distribution": "exponential", "mean": 0.5}, "at 0.03264 tokens"),
        ({"distribution": "lognormal", "mean": 1e9, "sigma": 0.8}, "outside 1 to 16777216"),
    ],
)
def test_named_distribution_outside_the_lengths_is_refused(
    value: dict[str, object], shown: str
) -> None:
    with pytest.raises(ConfigError, match="prompt_len: distribution") as error:
        length_distribution(value, "prompt_len")
    assert shown in str(error.value)


def test_named_distributions_within_the_lengths_are_accepted() -> None:
    # the bins' conditional means since s37 lengths (the midpoint quantiles were 436, 731,
    # 1006, 1311, 1687, 2199, 3024, 5074 and 17, 53, 96, 147, 212, 298, 429, 710)
    lognormal = {"distribution": "lognormal", "mean": 2048, "sigma": 0.8}
    assert length_distribution(lognormal, "p").lengths() == (
        419, 731, 1007, 1314, 1692, 2211, 3062, 5948,
    )  # fmt: skip
    exponential = length_distribution({"distribution": "exponential", "mean": 256}, "p")
    assert exponential.lengths() == (17, 53, 96, 148, 213, 299, 433, 788)


def test_request_longer_than_the_context_limit_is_refused() -> None:
    prompt, output = length_distribution(2048, "p"), length_distribution(256, "o")
    with pytest.raises(ConfigError, match=r"but got 16777000 \+ 2048 \+ 256 = 16779304"):
        RequestLoad(prompt=prompt, output=output, cached_prompt_len=16_777_000)
    RequestLoad(prompt=prompt, output=output, cached_prompt_len=16_777_216 - 2048 - 256)
    with pytest.raises(ConfigError, match="must be a finite number > 0, but got inf"):
        RequestLoad(prompt=prompt, output=output, arrival_rate_per_s=math.inf)


@pytest.mark.parametrize(
    ("workload", "rate", "message"),
    [
        ("cached_prompt_len = 16777216", "[2]", "[workload] cached_prompt_len: `cached_prompt"),
        ("cached_prompt_len = 16777000", "[2]", "[workload] cached_prompt_len: `cached_prompt"),
        ("arrival_rate = inf", "[2]", "[workload] arrival_rate: `arrival_rate_per_s` must be a "
         "finite"),
        ("", "[2, inf]", "[space] arrival_rate: expected finite numbers > 0, got inf"),
    ],
)  # fmt: skip
def test_study_names_the_bad_workload_key(
    tmp_path: Path, workload: str, rate: str, message: str
) -> None:
    path = _study(tmp_path, workload, rate=rate)
    if workload.startswith("arrival_rate"):
        path.write_text(path.read_text().replace("arrival_rate = [2]\n", ""), encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_study(path)
    assert message in str(error.value)


def test_inference_space_without_a_possible_point_names_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load_study(_study(tmp_path, tp="[3]"))
    assert "the first, num_gpus=8 tp=3 pp=1 dp=1 batch=64: num_gpus=8 minus" in str(error.value)
    assert "decode instance's tp·pp·dp=3 GPUs" in str(error.value)


HEADER = "id,model,seq_len,global_batch_seqs,micro_batch,tp,pp,dp,sp,recompute,iter_time_s"
RUNS = [
    "r1,megatron-gpt-1.7b,2048,64,1,2,1,32,yes,,0.60",
    "r2,megatron-gpt-1.7b,2048,128,1,2,1,32,yes,selective,1.10",
    "r3,megatron-gpt-1.7b,2048,64,1,4,1,16,yes,,0.70",
]


def test_calibrate_names_runs_with_an_empty_recompute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([HEADER, *RUNS]) + "\n", encoding="utf-8")
    argv = ["calibrate", "--runs", str(path), "--system", "a100-80gb", "--fit", "memory",
            "--no-loo", "--framework", "megatron-lm-2021"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "note: recompute empty on 2 runs, taken as none: r1, r3;" in out
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["recompute_defaults"] == {
        "r1": "none", "r3": "none",
    }  # fmt: skip
    absent = tmp_path / "absent.csv"  # no recompute column at all
    absent.write_text(
        "\n".join(",".join(c for i, c in enumerate(line.split(",")) if i != 9)
                  for line in [HEADER, *RUNS]) + "\n", encoding="utf-8",
    )  # fmt: skip
    assert main([*argv[:2], str(absent), *argv[3:]]) == 0
    assert "note: recompute empty on 3 runs, taken as none: r1, r2, r3;" in capsys.readouterr().out
    assert recompute_note({}) == []


LOADER = (
    "#!/bin/sh\n"
    'echo "$0: error while loading shared libraries: libprotobuf.so.32: cannot open shared '
    'object file: No such file or directory" >&2\n'
    "exit 127\n"
)


def test_astrasim_binary_the_loader_cannot_start_is_refused_before_a_run(tmp_path: Path) -> None:
    """A prebuilt ASTRA-sim copied without its lib/ folder: every trial failed with "exited
    with status 127" (the loader's line only in the output's tail); now one line at preflight."""
    from stage_explore.astrasim import AstraSimBackend
    from stage_explore.astrasim.discovery import BinaryNotFound

    binary = tmp_path / "AstraSim_Analytical_Congestion_Unaware"
    binary.write_text(LOADER, encoding="utf-8")
    binary.chmod(0o755)
    with pytest.raises(BinaryNotFound) as error:
        AstraSimBackend(binary=str(binary)).preflight()
    assert f"ASTRA-sim binary {binary} cannot start" in str(error.value)
    assert "'libprotobuf.so.32: cannot open shared object file" in str(error.value)
    fine = tmp_path / "fine"  # exits 255 on its missing options, as ASTRA-sim does
    fine.write_text("#!/bin/sh\necho 'Error parsing options' >&2\nexit 255\n", encoding="utf-8")
    fine.chmod(0o755)
    assert AstraSimBackend(binary=str(fine)).preflight() == fine


def test_a_column_named_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A header with ``iter_time_s`` twice: every run was fitted to the second column's cell
    (``csv.DictReader`` keeps the last), without a word; a spreadsheet's unnamed trailing
    columns may still repeat."""
    from stage_explore.validation.csv_cells import read_csv

    path = tmp_path / "runs.csv"
    path.write_text(
        "\n".join([HEADER + ",Iter_Time_S ", *(f"{run},0.9" for run in RUNS)]) + "\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"column 'iter_time_s' twice \(columns 11 and 12\)"):
        read_csv(path)
    assert main(["calibrate", "--runs", str(path), "--system", "a100-80gb", "--no-loo"]) == 2
    assert "names column 'iter_time_s' twice" in capsys.readouterr().err
    trailing = tmp_path / "trailing.csv"
    trailing.write_text(
        "\n".join([HEADER + ",,", *(f"{run},," for run in RUNS)]) + "\n", encoding="utf-8"
    )
    assert [row["id"] for row in read_csv(trailing)] == ["r1", "r2", "r3"]
