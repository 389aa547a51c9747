"""Reports: terminal tables, the self-contained HTML page with its SVG plots, PNG images, and
the ``stage explore`` / ``stage report`` commands."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from importlib import import_module
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore import load_results, pareto_front
from stage_explore.cli import main
from stage_explore.report import build_report, parse_objective_option, write_html
from stage_explore.report.units import display
from stage_explore.search import explore
from stage_explore.study import parse_study

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def study_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report")
    spec = parse_study(support.study_text(trials=150, options="fail_tp = 8"), root / "s.toml")
    return explore(spec, out=root / "out", executor_factory=support.InlineExecutor).directory


def test_text_report_lists_counts_best_rows_and_the_front(study_folder: Path) -> None:
    report = build_report(study_folder, top=3)
    frame = load_results(study_folder)
    text = report.text()
    counts = frame["status"].value_counts()
    assert text.splitlines()[0] == (
        f"study demo: 150 trials, {counts['ok']} ok, {counts['infeasible']} infeasible, "
        f"{counts['failed']} failed"
    )
    assert "failed ×" in text and "RuntimeError: synthetic failure at tp=8" in text
    assert "best by step time (s), lowest first:" in text
    assert "best by MFU (% of peak FLOP/s), highest first:" in text
    assert all(len(rows) == 3 for rows in report.best.values())
    best_time = frame.loc[frame["status"] == "ok", "step_time_s"].min()
    assert report.best["step_time_s"]["step_time_s"].iloc[0] == best_time
    configs = pareto_front(frame, {"step_time_s": "min", "mfu": "max"}).drop_duplicates(
        subset=["num_gpus", "tp", "pp", "zero", "recompute", "micro_batch"]
    )
    assert len(report.front) == len(configs)
    assert (
        f"Pareto front of step time (s) [min] and MFU (% of peak FLOP/s) [max]: "
        f"{len(configs)} configurations" in text
    )
    header = text.splitlines()[text.splitlines().index("best by step time (s), lowest first:") + 1]
    assert "step time (s)" in header and "MFU (%)" in header and "peak memory (GiB)" in header
    assert {"trial", "num_gpus", "dp", "tp", "pp", "peak_memory_gib"} <= set(report.columns())
    assert "cp" not in report.parameters  # not searched: not shown


def test_html_report_is_self_contained_with_interactive_svg(
    study_folder: Path, tmp_path: Path
) -> None:
    report = build_report(study_folder)
    written = write_html(report, tmp_path / "html" / "report.html")
    page_path, *images = written
    assert [image.name for image in images] == ["report-front.png", "report-convergence.png"]
    for image in images:
        assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = page_path.read_text()
    urls = set(re.findall(r"https?://[^\s\"'<>]+", page))
    assert urls <= {"http://www.w3.org/2000/svg"}  # nothing fetched: works offline
    assert "<script src" not in page and "<link" not in page
    assert "data:image/png" not in page  # each plot once: the PNGs are linked, not repeated
    assert all(f'<a href="{image.name}">' in page for image in images)
    assert page.count("<svg ") == 2
    svgs = re.findall(r"<svg .*?</svg>", page, flags=re.S)
    scatter = ElementTree.fromstring(svgs[0])
    circles = scatter.findall(f"{SVG}circle")
    front = [c for c in circles if c.get("class") == "front"]
    assert len(front) == len(report.front)
    data = re.search(
        r'<script type="application/json" id="scatter-data">(.*?)</script>', page, re.S
    )
    assert data is not None
    table = json.loads(data.group(1))
    assert sorted(int(c.get("data-i", -1)) for c in circles) == list(range(len(table)))
    assert set(table[0]) == {display(name).header for name in report.columns()}
    assert scatter.findall(f"{SVG}polyline")  # the front is drawn as a line
    ElementTree.fromstring(svgs[1])  # the convergence plot is well-formed too


def test_single_objective_report(tmp_path: Path) -> None:
    spec = parse_study(
        support.study_text(trials=30, objectives='tokens_per_s_per_gpu = "max"'),
        tmp_path / "s.toml",
    )
    folder = explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor).directory
    report = build_report(folder)
    assert [name for name, _ in report.objectives] == ["tokens_per_s_per_gpu"]
    assert "Pareto front" not in report.text()
    assert len(write_html(report, tmp_path / "r.html")) == 3


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("step_time_s:min,mfu", {"step_time_s": "min", "mfu": "max"}),
        ("peak_memory_bytes", {"peak_memory_bytes": "min"}),
        ("mfu:min", {"mfu": "min"}),
    ],
)
def test_objective_option(option: str, expected: dict[str, str]) -> None:
    assert parse_objective_option(option) == expected


def test_bad_objective_option_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no default direction; give it as latency:min or"):
        parse_objective_option("latency")
    # s22 review: a name given twice kept its last direction silently
    with pytest.raises(ConfigError, match="names 'mfu' more than once"):
        parse_objective_option("mfu:max,step_time_s,mfu:min")


@pytest.mark.parametrize(
    ("option", "got"),
    [
        ("latency_s:min", "the records have no such column"),
        ("reason:min", "its column holds"),
        ("sp:max", "its column holds bool values"),
    ],
)
def test_an_objective_that_is_no_numeric_column_is_a_one_line_error(
    study_folder: Path, option: str, got: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # s22 review: `stage report --objectives nosuch:min` was a KeyError traceback, and a text
    # column such as `reason` a ValueError one.
    assert main(["report", str(study_folder), "--objectives", option]) == 2
    err = capsys.readouterr().err
    name = option.split(":")[0]
    assert f"error: objective {name!r}: expected a numeric column of the records" in err
    assert got in err and err.count("\n") == 1


def test_explore_and_report_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "study.toml"
    study.write_text(support.study_text(trials=20))
    out = tmp_path / "out"
    assert main(["explore", str(study), "--out", str(out), "--executor", "local"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("study demo: 20 trials: ") and "stopped by budget" in printed
    assert main(["explore", str(study), "--out", str(out), "--executor", "local"]) == 2
    assert "error: " in capsys.readouterr().err
    assert main(["explore", str(study), "--out", str(out), "--trials", "30", "--resume"]) == 0
    assert "30 trials (20 resumed)" in capsys.readouterr().out
    html = tmp_path / "report.html"
    assert main(["report", str(out / "demo"), "--html", str(html), "--top", "2"]) == 0
    printed = capsys.readouterr().out
    assert "best by step time (s)" in printed and f"wrote {html}" in printed
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "nothing: no such folder; expected a study's records folder" in capsys.readouterr().err


def test_a_study_without_a_feasible_trial_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # s25 review: the text report printed each table's header over no row, and the front
    # image empty axes from -0.04 to 0.04 with a legend of points that were not there
    spec = parse_study(support.study_text(trials=12, options="capacity_gib = 0.001",
                                          objectives='step_time_s = "min"\nmfu = "max"'),
                       tmp_path / "s.toml")  # fmt: skip
    folder = explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor).directory
    report = build_report(folder)
    assert report.counts()["ok"] == 0
    text = report.text()
    assert "best by step time (s): no feasible trial (the reasons are above)" in text
    assert "[max]: no feasible trial (the reasons are above)" in text
    assert "trial  " not in text  # no table header without rows
    assert "infeasible ×" in text
    written = write_html(report, tmp_path / "r.html")
    assert len(written) == 3 and all(path.stat().st_size > 0 for path in written)
    import matplotlib.image

    front = matplotlib.image.imread(str(tmp_path / "r-front.png"))
    assert front.shape[0] == 200  # the 7 × 2 in notice, not the 7 × 4.5 in axes
