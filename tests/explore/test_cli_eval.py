"""``stage eval``: the table, the JSON keys, ``--compare``, and one-line errors with exit 2."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.cli import COMMANDS, main
from stage_explore.system import load_system

POINT = (
    "--model", "megatron-gpt-1.7b", "--layers", "8", "--tp", "2", "--pp", "2", "--dp", "2",
    "--global-batch", "16", "--sp", "--recompute", "selective", "--system", "a100-80gb",
)  # fmt: skip
KEYS = {
    "step_time_s",
    "mfu",
    "hfu",
    "tokens_per_s_per_gpu",
    "peak_memory_bytes",
    "feasible",
    "breakdown",
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["eval", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_eval_and_validate_are_subcommands() -> None:
    assert "eval" in COMMANDS and "validate" in COMMANDS


def test_json_is_the_evaluation(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *POINT, "--json")
    assert code == 0
    data = json.loads(out)
    assert KEYS <= set(data)
    parallel = ParallelConfig(tp=2, pp=2, dp=2, global_batch=16, sp=True, recompute="selective")
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=8)
    expected = AnalyticalBackend().evaluate(model, parallel, load_system("a100-80gb"))
    assert data["step_time_s"] == pytest.approx(expected.step_time_s, rel=1e-12)
    assert data["peak_memory_bytes"] == expected.peak_memory_bytes
    assert sum(data["breakdown"].values()) == pytest.approx(data["step_time_s"], rel=1e-9)
    assert (
        data["parallel"]["tp"] == 2
        and data["system"] == "a100-80gb"
        and data["backend"] == "analytical"
    )


def test_table_lists_headline_figures_and_the_breakdown(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *POINT)
    assert code == 0
    for label in (
        "step time (s)",
        "MFU",
        "HFU",
        "tokens/s per GPU",
        "peak memory (GiB)",
        "compute",
        "pipeline_bubble",
    ):
        assert label in out


def test_an_infeasible_point_prints_its_reason_and_json_has_no_nan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ("--model", "gpt3-175b", "--tp", "8", "--dp", "4", "--system", "a100-80gb")
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "infeasible (analytical): out of memory" in out
    code, out, _ = run(capsys, *argv, "--json")
    data = json.loads(out)
    assert data["feasible"] is False and math.isfinite(data["step_time_s"])


def test_compare_shows_the_analytical_result_beside_another_backend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    reference = "stage_explore.analytical.backend:AnalyticalBackend"
    code, out, _ = run(capsys, *POINT, "--backend", reference, "--compare", "--json")
    assert code == 0
    data = json.loads(out)
    assert KEYS <= set(data["analytical"])
    assert data["analytical"]["step_time_s"] == data["step_time_s"]
    code, out, _ = run(capsys, *POINT, "--backend", reference, "--compare")
    header = out.splitlines()[1]
    assert header.split() == ["analytical", "analytical"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--backend", "nope"), "unknown backend 'nope'"),
        (("--backend", "no.such.module:Backend"), "cannot import module"),
        (("--compare",), "--compare needs a non-analytical --backend"),
        (("--tp", "5"), "`tp` must divide `heads`"),
    ],
)
def test_errors_are_one_line_with_exit_2(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    code, out, err = run(capsys, *POINT, *argv)
    assert code == 2 and out == ""
    assert err.startswith("stage eval: error:") and err.count("\n") == 1 and message in err


def test_unknown_system_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--model", "gpt3-125m", "--system", "no-such-preset")
    assert code == 2 and "unknown system 'no-such-preset'" in err and err.count("\n") == 1


def test_astra_sim_without_a_binary_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ASTRA_SIM_BIN", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    code, out, err = run(capsys, *POINT, "--backend", "astra-sim")
    assert code == 2 and out == ""
    assert err.startswith("stage eval: error:") and err.count("\n") == 1


def test_astra_sim_compare_json_with_a_simulating_stand_in(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--backend astra-sim --compare --json`` end to end, with a stand-in executable that times
    the inputs it is given with the ASTRA-sim-equivalent simulator (process handling and the
    output's shape only; not evidence about the real binary)."""
    process = importlib.import_module(
        f"{__package__}.test_astrasim_process" if __package__ else "test_astrasim_process"
    )
    binary = process.simulating_stand_in(tmp_path / "astra", tmp_path / "record.json")
    monkeypatch.setenv("ASTRA_SIM_BIN", str(binary))
    small = ("--model", "gpt3-125m", "--layers", "2", "--tp", "2", "--dp", "2",
             "--global-batch", "4", "--seq-len", "256", "--system", "a100-80gb")  # fmt: skip
    code, out, _ = run(capsys, *small, "--backend", "astra-sim", "--compare", "--json")
    assert code == 0
    result = json.loads(out)
    assert KEYS <= set(result) and KEYS <= set(result["analytical"])
    assert result["backend"] == "astra-sim" and result["analytical"]["backend"] == "analytical"
    assert (
        result["step_time_s"] > 0
        and result["peak_memory_bytes"] == result["analytical"]["peak_memory_bytes"]
    )


def test_help_lists_every_registered_framework_profile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from stage_explore.analytical.frameworks import FRAMEWORKS

    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    # argparse wraps at hyphens; undo the wrap before looking for each name
    text = text.replace("- ", "-")
    for name in FRAMEWORKS:
        assert name in text, name


class StandInBackend(AnalyticalBackend):
    """The analytical backend under another name, standing in for a slow one (ASTRA-sim)."""

    name = "stand-in"


class _Terminal:
    """A stand-in stderr that says it is a terminal and keeps what is written."""

    def __init__(self) -> None:
        self.text = ""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def test_a_backend_other_than_the_analytical_says_it_is_running_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # s19 usertour: `stage eval --backend astra-sim` on thousands of ranks ran for minutes with
    # nothing on the screen.
    stand_in = f"{__name__}:StandInBackend"
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert main(["eval", *POINT, "--backend", stand_in]) == 0
    assert terminal.text.startswith(f"stage eval: running {stand_in} on 8 ranks … ")
    assert terminal.text.endswith(" s\n")
    terminal.text = ""
    assert main(["eval", *POINT]) == 0  # the analytical model: milliseconds, no line
    assert terminal.text == ""
    capsys.readouterr()
