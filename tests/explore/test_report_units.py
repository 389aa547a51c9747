"""The report a user reads: memory in GiB and times in seconds on the axes, tick labels that fit
the margin and do not collide, units on every cost and time, each plot once."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from importlib import import_module
from pathlib import Path

import numpy as np
import pytest

from stage_explore.records import Outcome, TrialStatus
from stage_explore.report import build_report, write_html
from stage_explore.report.html import _LEFT, Scale, scatter_svg
from stage_explore.report.units import GIB, display, tick_label
from stage_explore.search import explore
from stage_explore.study import parse_study

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)
SVG = "{http://www.w3.org/2000/svg}"
#: Width of one character of the 11 px axis font, generously (digits are ~6.1 px in system-ui).
CHAR_PX = 7.0


@pytest.fixture(scope="module")
def memory_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("units")
    text = support.study_text(
        trials=80, objectives='step_time_s = "min"\npeak_memory_bytes = "min"'
    )
    spec = parse_study(text, root / "s.toml")
    return explore(spec, out=root / "out", executor_factory=support.InlineExecutor).directory


def _texts(svg: ElementTree.Element) -> list[ElementTree.Element]:
    return svg.findall(f"{SVG}text")


def test_memory_axis_is_in_gib_with_short_labels_that_fit(memory_study: Path) -> None:
    report = build_report(memory_study)
    svg_text, _, _ = scatter_svg(report, "s")
    svg = ElementTree.fromstring(svg_text)
    labels = [element.text or "" for element in _texts(svg)]
    assert "step time (s)" in labels and "peak memory per GPU (GiB)" in labels
    ok = report.frame[report.frame["status"] == "ok"]
    gib = ok["peak_memory_bytes"].to_numpy(np.float64) / GIB
    y_ticks = [
        element for element in _texts(svg) if element.get("text-anchor") == "end"
    ]  # the y tick labels, right-aligned against the plot frame
    values = [float((element.text or "").replace(",", "")) for element in y_ticks]
    assert values and min(values) >= gib.min() - (gib.max() - gib.min()) and max(values) < 1e4
    for element in y_ticks:
        assert "e+" not in (element.text or "")  # no scientific notation of byte counts
        width = len(element.text or "") * CHAR_PX
        assert width < _LEFT - 6 - 24, element.text  # clear of the rotated axis title
    x_ticks = [element for element in _texts(svg) if element.get("text-anchor") == "middle"]
    positions = [
        (float(element.get("x", 0)), len(element.text or "") * CHAR_PX)
        for element in x_ticks
        if element.get("class") != "label"
    ]
    for (left, left_width), (right, right_width) in zip(positions, positions[1:], strict=False):
        assert right - left > (left_width + right_width) / 2  # neighbours do not overlap


def test_every_cost_and_time_carries_its_unit(memory_study: Path, tmp_path: Path) -> None:
    report = build_report(memory_study)
    page = write_html(report, tmp_path / "r.html")[0].read_text()
    headers = re.findall(r"<th>(.*?)</th>", page)
    assert "step time (s)" in headers and "peak memory (GiB)" in headers
    assert "peak_memory_bytes" not in headers and "step_time_s" not in headers
    assert page.count("<svg ") == 2 and "data:image/png" not in page
    for name in ("cost_per_step", "cost_per_million_tokens"):
        assert "USD" in display(name).label and "USD" in display(name).header
    for name in ("step_time_s", "eval_s", "breakdown_compute"):
        assert display(name).label.endswith("(s)")


@pytest.mark.parametrize(
    ("value", "step", "text"),
    [
        (0.0, 0.5, "0"),
        (2.5, 0.5, "2.5"),
        (40.0, 20.0, "40"),
        (12000.0, 2000.0, "12,000"),
        (0.05, 0.01, "0.05"),
        (3e9, 1e9, "3e+09"),
    ],
)
def test_tick_labels_have_the_decimals_their_step_needs(
    value: float, step: float, text: str
) -> None:
    assert tick_label(value, step) == text


def test_linear_ticks_of_a_gib_range_are_round_numbers() -> None:
    scale = Scale.fit(np.array([21.3, 77.9]), 0.0, 500.0)
    values = [value for value, _ in scale.ticks()]
    assert all(label == f"{value:.0f}" for value, label in scale.ticks())  # whole GiB
    steps = {round(b - a, 9) for a, b in zip(values, values[1:], strict=False)}
    assert len(steps) == 1
    step = steps.pop()
    mantissa = step / 10 ** np.floor(np.log10(step))
    assert mantissa in (1.0, 2.0, 5.0) and 3 <= len(values) <= 8
    assert values[0] <= 21.3 + step and values[-1] >= 77.9 - step


@pytest.mark.parametrize(
    ("column", "header", "value", "shown"),
    [
        ("hw_accelerator_memory_bytes", "hw_accelerator_memory (GiB)", 80 * 2**30, 80.0),
        ("hw_network_1_bandwidth_bytes_per_s", "hw_network_1_bandwidth (GB/s)", 5e10, 50.0),
        ("breakdown_pipeline_bubble", "pipeline bubble (s)", 1.5, 1.5),
        ("mfu", "MFU (%)", 0.5, 50.0),
        ("tp", "tp", 8, 8),
    ],
)
def test_searched_hardware_and_metric_columns_show_their_unit(
    column: str, header: str, value: float, shown: float
) -> None:
    unit = display(column)
    assert unit.header == header
    assert value * unit.scale == pytest.approx(shown)


def _folder_with_outcomes(tmp_path: Path, trials: int, outcomes: list[Outcome]) -> Path:
    """A recorded study of ``trials`` trials plus one row per outcome (trial numbers after
    them, the first trial's parameters)."""
    from datetime import UTC, datetime

    from stage_explore.records import RecordWriter, make_row, read_records, records_schema

    spec = parse_study(support.study_text(trials=trials), tmp_path / "s.toml")
    folder = explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor).directory
    table = read_records(folder)
    assert table is not None
    first = table.to_pylist()[0]
    params = {name: first[name] for name in spec.space.choices()}
    writer = RecordWriter(folder, records_schema(spec.name, spec.space))
    for trial, outcome in enumerate(outcomes, start=trials):
        writer.append(make_row(trial=trial, study=spec.name, params=params, dp=first["dp"],
                               outcome=outcome, finished_at=datetime.now(UTC)))  # fmt: skip
    writer.flush()
    return folder


def test_trials_lost_to_the_infrastructure_are_counted_and_explained(tmp_path: Path) -> None:
    lost = Outcome(status=TrialStatus.INFRASTRUCTURE_FAILED, reason="worker died (SIGKILL)")
    folder = _folder_with_outcomes(tmp_path, 12, [lost])
    report = build_report(folder)
    first_line = report.text().splitlines()[0]
    counts = report.counts()
    assert sum(counts.values()) == len(report.frame) == 13
    assert first_line.endswith(", 1 lost to the infrastructure (--resume runs them again)")
    assert "infrastructure_failed ×1: worker died (SIGKILL)" in report.text()


def test_reasons_that_differ_only_in_numbers_are_counted_as_one(tmp_path: Path) -> None:
    # s19 usertour: 1,264 out-of-memory trials of gpt3_175b_a100, each with its own peak, were
    # listed as "infeasible ×1" three times, and the summary named none of the kinds.
    reasons = [f"out of memory: peak {peak} GiB exceeds 80.00 GiB" for peak in ("95.38", "1,077")]
    reasons += [reasons[0], "precision 'fp4' needs a grounded NVFP4 GEMM rate"]
    folder = _folder_with_outcomes(
        tmp_path, 4, [Outcome(status=TrialStatus.INFEASIBLE, reason=r) for r in reasons]
    )
    reasons_shown = build_report(folder).reasons("infeasible", limit=20)
    assert (
        "out of memory: peak 95.38 GiB exceeds 80.00 GiB (e.g.: one of 2 variants differing in "
        "their numbers)", 3,
    ) in reasons_shown  # fmt: skip
    assert ("precision 'fp4' needs a grounded NVFP4 GEMM rate", 1) in reasons_shown


def test_the_kinds_of_reason_beyond_those_shown_are_counted(tmp_path: Path) -> None:
    # s27 review: the serving study's report listed three kinds of reason, 165 of its 169
    # infeasible trials, and said nothing of the other 4
    reasons = ["alpha at 1", "alpha at 2", "alpha at 1", "beta", "beta", "zeta", "zeta"]
    reasons += ["gamma", "delta", "omega"]
    folder = _folder_with_outcomes(
        tmp_path, 4, [Outcome(status=TrialStatus.INFEASIBLE, reason=r) for r in reasons]
    )
    report = build_report(folder)
    every = report.reasons("infeasible", limit=1000)  # the study's own kinds and these six
    assert len(every) >= 6 and sum(n for _, n in every) == report.counts()["infeasible"]
    shown = report.reasons("infeasible", limit=3)
    assert [n for _, n in shown] == [3, 2, 2]  # alpha, then beta and zeta
    kinds, left = len(every) - 3, sum(n for _, n in every[3:])
    other = (f"{kinds} other kinds of reason (each in the records' reason column)", left)
    assert report.other_reasons("infeasible", limit=3) == other
    assert report.other_reasons("infeasible", limit=len(every)) is None
    assert f"  infeasible ×{left}: {kinds} other kinds of reason" in report.text()
    write_html(report, tmp_path / "r.html")  # the page lists five kinds, then the others
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert f"×{sum(n for _, n in every[5:])}: {len(every) - 5} other kind" in page
