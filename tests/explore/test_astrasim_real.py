"""The real ASTRA-sim binary, where one is installed (skipped otherwise, with the reason).

Found as the backend finds it: ``ASTRA_SIM_BIN``, else ``AstraSim_Analytical_Congestion_Unaware``
on ``PATH``. These are the only tests that show what the real binary does with STAGE's files:

- the reference run (``tests/fixtures/astra-sim/sample-run``) through the runner and parser
  gives 1,087,986 cycles on every rank, as recorded;
- for small STAGE workloads, the backend's run completes and its step time equals, to the
  nanosecond, the ASTRA-sim-equivalent trace simulator on the same files (a disagreement is a
  finding about the simulator or the binary's version, worth a look with ``keep_dir``).
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest

from stage_core.chakra.groups import read_comm_groups
from stage_core.chakra.reader import read_trace_set
from stage_explore.analytical.trace_models import AstraTimingModel
from stage_explore.analytical.tracesim import simulate
from stage_explore.astrasim import AstraInputs, AstraSimBackend, command_line, run_astra_sim
from stage_explore.astrasim.logconfig import LOGGING_CONFIG_FILE, logging_config_text
from stage_explore.system import astra_config_from_files, load_system
from tests.fixtures import SAMPLE_RUN, real_astra_sim

BINARY, WHY = real_astra_sim()
pytestmark = pytest.mark.skipif(BINARY is None, reason=WHY)
inputs_tests = importlib.import_module(
    f"{__package__}.test_astrasim_inputs" if __package__ else "test_astrasim_inputs"
)


def test_reference_run_through_the_real_binary(tmp_path: Path) -> None:
    assert BINARY is not None
    if not SAMPLE_RUN.is_dir():
        pytest.fail(f"the ASTRA-sim reference run is missing: expected {SAMPLE_RUN}")
    for source in SAMPLE_RUN.iterdir():
        if source.suffix in (".et", ".json", ".yml"):
            shutil.copy(source, tmp_path / source.name)
    (tmp_path / "log").mkdir()
    inputs = AstraInputs(
        directory=tmp_path,
        world_size=4,
        config=astra_config_from_files(tmp_path / "system.json", tmp_path / "network.yml"),
        groups=read_comm_groups(tmp_path / "comm_group.json"),
    )
    run = run_astra_sim(BINARY, inputs, timeout_s=120)
    for result in run.report.ranks.values():
        assert result.finished_cycles == 1_087_986
        assert result.gpu_time_cycles == 416_902
        assert result.exposed_communication_cycles == 671_084


@pytest.mark.parametrize("name", sorted(inputs_tests.POINTS))
def test_stage_workloads_complete_and_match_the_trace_simulator(name: str, tmp_path: Path) -> None:
    model, parallel = inputs_tests.point(name)
    system = load_system("a100-80gb")
    backend = AstraSimBackend(binary=str(BINARY), keep_dir=str(tmp_path), timeout_s=600)
    evaluation = backend.evaluate(model, parallel, system)
    kept = Path(evaluation.extra["astra_sim_dir"])
    config = astra_config_from_files(kept / "system.json", kept / "network.yml")
    expected = simulate(read_trace_set(kept).ranks, AstraTimingModel(config)).makespan
    assert evaluation.step_time_s == expected * 1e-9, f"inputs and output kept in {kept}"


def test_the_run_directory_holds_the_logging_configuration_the_command_names(
    tmp_path: Path,
) -> None:
    """Every run is given ``logging.toml`` (the result loggers synchronous), and the binary
    accepts it: the run completes with every rank's ``finished`` line and statistics."""
    assert BINARY is not None
    model, parallel = inputs_tests.point("llama-cp-ring")
    backend = AstraSimBackend(binary=str(BINARY), keep_dir=str(tmp_path), timeout_s=600)
    evaluation = backend.evaluate(model, parallel, load_system("a100-80gb"))
    kept = Path(evaluation.extra["astra_sim_dir"])
    config = kept / LOGGING_CONFIG_FILE
    assert config.read_text() == logging_config_text()
    inputs = AstraInputs(
        directory=kept,
        world_size=8,
        config=astra_config_from_files(kept / "system.json", kept / "network.yml"),
        groups=read_comm_groups(kept / "comm_group.json"),
    )
    assert f"--logging-configuration={config}" in command_line(BINARY, inputs)
    run = run_astra_sim(BINARY, inputs, timeout_s=600)
    assert sorted(run.report.ranks) == list(range(8))
    assert all(rank.gpu_time_cycles is not None for rank in run.report.ranks.values())
