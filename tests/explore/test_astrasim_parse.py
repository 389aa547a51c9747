"""The ASTRA-sim output parser, on the real run in ``tests/fixtures/astra-sim/sample-run``.

``stdout.txt`` is what ``AstraSim_Analytical_Congestion_Unaware`` printed (README there): every
rank finished at 1,087,986 cycles with 416,902 of GPU time and 671,084 of exposed communication.
The fixture is part of the repository (provenance in its README); without it these tests fail
and say where they looked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_explore.astrasim import parse_output
from stage_explore.astrasim.parse import statistic_key
from tests.fixtures import SAMPLE_RUN

REPOSITORY = Path(__file__).resolve().parents[2]


def sample_stdout() -> str:
    path = SAMPLE_RUN / "stdout.txt"
    if not path.is_file():
        pytest.fail(
            f"the ASTRA-sim reference output is missing: expected {path} (a repository "
            "fixture); these tests parse a real ASTRA-sim run"
        )
    return path.read_text()


def test_sample_run_every_rank() -> None:
    report = parse_output(sample_stdout())
    assert sorted(report.ranks) == [0, 1, 2, 3]
    assert report.missing(4) == () and report.unexpected(4) == ()
    for rank, result in report.ranks.items():
        assert result.rank == rank
        assert result.finished_cycles == 1_087_986
        assert result.exposed_communication_cycles == 671_084
        assert result.wall_time_cycles == 1_087_986
        assert result.gpu_time_cycles == result.compute_cycles == 416_902
        assert result.comm_time_cycles == 671_084
    assert report.makespan_cycles == 1_087_986
    assert report.slowest.rank == 0  # a tie goes to the lowest rank


def test_sample_run_statistics_by_key() -> None:
    statistics = parse_output(sample_stdout()).ranks[2].statistics
    assert statistics == {
        "wall_time": 1_087_986,
        "gpu_time": 416_902,
        "comm_time": 671_084,
        "compute_bound_percentage": 100.0,
        "average_compute_utilization_percent": 100.0,
        "average_memory_utilization_percent": 14.415,
        "average_operation_intensity": 2275.551,
    }


def test_lines_as_an_iterable_give_the_same_report() -> None:
    text = sample_stdout()
    assert parse_output(iter(text.splitlines(keepends=True))) == parse_output(text)


def test_a_missing_rank_is_reported_missing() -> None:
    lines = [line for line in sample_stdout().splitlines() if "sys[2] finished" not in line]
    report = parse_output(lines)
    assert sorted(report.ranks) == [0, 1, 3]
    assert report.missing(4) == (2,)
    assert report.unexpected(2) == (3,)


def test_slowest_rank_and_fallback_compute_time() -> None:
    report = parse_output(
        [
            "[workload] [info] sys[0] finished, 900 cycles, exposed communication 100 cycles.",
            "[workload] [info] sys[1] finished, 1000 cycles, exposed communication 300 cycles.",
            "[statistics] [info] sys[0], GPU time: 800",
            "garbage sys[ line",
        ]
    )
    assert report.slowest.rank == 1 and report.makespan_cycles == 1000
    assert report.ranks[1].gpu_time_cycles is None
    assert report.ranks[1].compute_cycles == 700  # finished − exposed without a GPU time line
    assert report.ranks[0].compute_cycles == 800


def test_output_without_results_has_no_ranks() -> None:
    topology_only = [line for line in sample_stdout().splitlines() if "RingTopology" in line]
    report = parse_output(topology_only)
    assert report.ranks == {} and report.missing(4) == (0, 1, 2, 3)
    with pytest.raises(ValueError, match="no rank reported"):
        report.slowest  # noqa: B018


@pytest.mark.parametrize(
    ("label", "percent", "key"),
    [
        ("Wall time", False, "wall_time"),
        ("Average memory utilization", True, "average_memory_utilization_percent"),
        ("Compute bound percentage", True, "compute_bound_percentage"),
    ],
)
def test_statistic_keys(label: str, percent: bool, key: str) -> None:
    assert statistic_key(label, percent) == key
