"""Study reports: the best configurations and the Pareto front, as text and as HTML.

Contents:
    :class:`Report`
        a study's records with the objectives, the front and the best rows; ``text()``.
    :func:`build_report`
        load a study folder and compute its report.
    :func:`parse_objective_option`
        ``"step_time_s:min,mfu"`` → an objectives mapping.
    :func:`write_html`
        the self-contained HTML report (inline SVG plots with tooltips, embedded PNGs) and the
        PNG images beside it (see :mod:`.html` and :mod:`.images`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stage_core.errors import ConfigError
from stage_explore.pareto import pareto_front, parse_objectives
from stage_explore.records import (
    STUDY_FILE,
    load_results,
    make_folder,
    read_study_meta,
    storage_error,
)
from stage_explore.report.tables import format_table
from stage_explore.report.units import display, in_display_units
from stage_explore.study.serving_space import SERVING_DEFAULTS, SERVING_KNOBS
from stage_explore.study.space import KNOB_DEFAULTS
from stage_explore.study.spec import OBJECTIVE_METRICS, PARALLEL_KNOBS, Direction
from stage_explore.wording import counted

if TYPE_CHECKING:
    import pandas as pd

_DEFAULT_OBJECTIVES = {"step_time_s": "min", "mfu": "max"}
_ALWAYS = ("num_gpus", "dp", "tp", "pp")
#: Columns also shown when fixed at a value other than the study's default for them
#: (:data:`~stage_explore.study.space.KNOB_DEFAULTS`, an inference study's
#: :data:`~stage_explore.study.serving_space.SERVING_DEFAULTS`): a study fixed at fp8 says so
#: in its tables.
_SHOWN_OFF_DEFAULT = ("precision",)

#: Columns an inference study's tables always show besides its objectives.
_SERVING_SHOWN = ("time_to_first_token_s", "time_per_output_token_s", "tokens_per_s_per_gpu")
_LOST = "infrastructure_failed"
_STATUSES = ("ok", "infeasible", "failed", _LOST)
#: What a table of feasible trials says when there is none (the reasons are listed above it).
NO_FEASIBLE = "no feasible trial (the reasons are above)"
#: A number in a reason (``95.38``, ``1,024``, ``pp=32``'s 32): reasons differing only there
#: are one kind of reason in the report.
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?")


def _off_default(column: pd.Series, default: object) -> bool:
    """Whether ``column`` holds a value other than ``default`` (never, without a default)."""
    return default is not None and bool((column.dropna() != default).any())


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """A study's records and what the report shows of them."""

    study: str
    directory: Path
    frame: pd.DataFrame
    objectives: tuple[tuple[str, Direction], ...]
    front: pd.DataFrame
    best: Mapping[str, pd.DataFrame]
    parameters: tuple[str, ...]

    def counts(self) -> dict[str, int]:
        """Trials by status."""
        counts = self.frame["status"].value_counts()
        return {status: int(counts.get(status, 0)) for status in _STATUSES}

    def counts_text(self) -> str:
        """``840 trials, 830 ok, 10 infeasible, 0 failed`` (and the trials lost to the
        infrastructure, which ``--resume`` runs again, when there are any)."""
        counts = self.counts()
        text = (
            f"{counted(len(self.frame), 'trial')}, {counts['ok']} ok, "
            f"{counts['infeasible']} infeasible, {counts['failed']} failed"
        )
        lost = counts[_LOST]
        return text + (
            f", {lost} lost to the infrastructure (--resume runs them again)" if lost else ""
        )

    def columns(self) -> list[str]:
        """The columns of the tables: trial (and its study, when the records hold several: an
        output folder's; trial numbers repeat across studies), varying parameters, objectives,
        memory."""
        metrics = [
            "peak_memory_gib" if name == "peak_memory_bytes" else name
            for name, _ in self.objectives
        ]
        shown = ("peak_memory_gib", *_SERVING_SHOWN)
        extra = [name for name in shown if name not in metrics and name in self.frame]
        several = "study" in self.frame and self.frame["study"].nunique() > 1
        lead = ["study", "trial"] if several else ["trial"]
        return [*lead, *self.parameters, *metrics, *extra, *self.refined_columns()]

    def convergence(self) -> list[tuple[str, pd.DataFrame]]:
        """The best value of the first objective so far, trial by trial, over the feasible
        trials: one ``(study, frame)`` per study the records hold (``trial`` and ``best``
        columns), as trial numbers restart in each study of an output folder; the study is ""
        when the records hold one."""
        import pandas as pd

        name, direction = self.objectives[0]
        ok = self.frame[self.frame["status"] == "ok"]
        several = "study" in ok and ok["study"].nunique() > 1
        groups = ok.groupby("study", sort=True) if several else [("", ok)]
        series = []
        for study, rows in groups:
            ordered = rows.sort_values("trial")
            values = ordered[name].astype("float64")
            best = values.cummin() if direction is Direction.MIN else values.cummax()
            frame = pd.DataFrame({"trial": ordered["trial"].to_numpy(), "best": best.to_numpy()})
            series.append((str(study), frame))
        return series

    def refined_columns(self) -> list[str]:
        """A two-stage study's second-backend numbers of the objectives, where any were made."""
        names = [f"refined_{name}" for name, _ in self.objectives]
        return [name for name in names if name in self.frame and self.frame[name].notna().any()]

    def table(self, rows: pd.DataFrame) -> str:
        """``rows`` as a terminal table: the report's columns, headers with units."""
        columns = self.columns()
        shown = in_display_units(rows, columns)
        headers = [display(name).header for name in columns]
        return format_table(headers, list(shown.itertuples(index=False)))

    def _reason_kinds(self, status: str) -> list[list[tuple[str, int]]]:
        """The reasons of trials with ``status`` grouped into kinds (texts that differ only in
        their numbers), each kind's texts most frequent first, the most frequent kind first."""
        counts = self.frame.loc[self.frame["status"] == status, "reason"].value_counts()
        groups: dict[str, list[tuple[str, int]]] = {}
        for reason, count in counts.items():
            groups.setdefault(_NUMBER.sub("#", str(reason)), []).append((str(reason), int(count)))
        return sorted(groups.values(), key=lambda texts: -sum(n for _, n in texts))

    def reasons(self, status: str, limit: int = 5) -> list[tuple[str, int]]:
        """The most frequent reasons of trials with ``status``, reasons that differ only in
        their numbers (``out of memory: peak 95.38 GiB exceeds 80.00 GiB``, one per trial)
        counted as one, shown by its most frequent text."""
        out = []
        for texts in self._reason_kinds(status)[:limit]:
            text, total = texts[0][0], sum(n for _, n in texts)
            if len(texts) > 1:
                text += f" (e.g.: one of {len(texts)} variants differing in their numbers)"
            out.append((text, total))
        return out

    def other_reasons(self, status: str, limit: int = 5) -> tuple[str, int] | None:
        """The kinds of reason :meth:`reasons` leaves out beyond ``limit`` as one line and their
        trials (s27 review: the serving study's report listed 165 of its 169 infeasible trials
        and said nothing of the other 4), None when it leaves none out."""
        rest = self._reason_kinds(status)[limit:]
        if not rest:
            return None
        total = sum(n for texts in rest for _, n in texts)
        kinds = counted(len(rest), "other kind")
        return f"{kinds} of reason (each in the records' reason column)", total

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "study": self.study,
            "directory": str(self.directory),
            "counts": self.counts(),
            "objectives": {name: str(direction) for name, direction in self.objectives},
            "front_size": len(self.front),
        }

    def text(self) -> str:
        """The terminal report."""
        lines = [f"study {self.study}: {self.counts_text()}"]
        for status in ("infeasible", "failed", _LOST):
            other = self.other_reasons(status, 3)
            for reason, count in [*self.reasons(status, 3), *([other] if other else [])]:
                lines.append(f"  {status} ×{count}: {reason}")
        for metric, rows in self.best.items():
            direction = dict(self.objectives)[metric]
            word = "lowest" if direction is Direction.MIN else "highest"
            if rows.empty:  # s25 review: a header over no row, as if the table were cut off
                lines += ["", f"best by {display(metric).label}: {NO_FEASIBLE}"]
                continue
            lines += ["", f"best by {display(metric).label}, {word} first:", self.table(rows)]
        if "refined_status" in self.frame and self.frame["refined_status"].notna().any():
            refined = self.frame[self.frame["refined_status"].notna()]
            backends = ", ".join(sorted(map(str, refined["refined_backend"].dropna().unique())))
            lines += [
                "",
                f"two-stage: {counted(len(refined), 'front configuration')} re-evaluated with "
                f"{backends} "
                "(columns marked [2nd])",
            ]
        if len(self.objectives) > 1:
            names = " and ".join(
                f"{display(name).label} [{direction}]" for name, direction in self.objectives
            )
            front = counted(len(self.front), "configuration")
            if self.front.empty:
                lines += ["", f"Pareto front of {names}: {NO_FEASIBLE}"]
            else:
                lines += ["", f"Pareto front of {names}: {front}", self.table(self.front)]
        return "\n".join(lines)


def parse_objective_option(text: str) -> dict[str, str]:
    """``"step_time_s:min,mfu"`` → ``{"step_time_s": "min", "mfu": "max"}``."""
    words = [word.strip() for word in text.split(",") if word.strip()]
    if not words:
        raise ConfigError("--objectives: expected NAME[:min|max],…, got nothing")
    objectives: dict[str, str] = {}
    for word in words:
        name, _, direction = word.partition(":")
        if name in objectives:  # s22 review: `a:min,a:max` kept the last silently
            raise ConfigError(f"--objectives names {name!r} more than once: name each once")
        if not direction and name not in OBJECTIVE_METRICS:
            close = difflib.get_close_matches(name, list(OBJECTIVE_METRICS), 1, 0.8)
            if close:  # s29 review: a misspelt metric was told to take a direction
                raise ConfigError(
                    f"--objectives: {name!r} is not a metric of the records; expected "
                    f"{close[0]} (or one of: {', '.join(OBJECTIVE_METRICS)})"
                )
            raise ConfigError(
                f"--objectives: {name!r} has no default direction; give it as {name}:min or "
                f"{name}:max, or use one of: {', '.join(OBJECTIVE_METRICS)}"
            )
        try:
            objectives.update(parse_objectives({name: direction} if direction else [name]))
        except ConfigError as error:  # s34 review7b: "objective 'x': …" did not name the option
            raise ConfigError(f"--objectives: {error}") from None
    return {name: str(direction) for name, direction in parse_objectives(objectives)}


def _check_objective_columns(frame: pd.DataFrame, names: list[str]) -> None:
    """Each objective a numeric column of the records, else a one-line :class:`ConfigError`
    (s22 review: ``--objectives nosuch:min`` was a ``KeyError`` traceback, ``reason:min`` a
    ``ValueError`` one)."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    metrics = [name for name in OBJECTIVE_METRICS if name in frame.columns]
    for name in names:
        if name not in frame.columns:
            close = difflib.get_close_matches(name, [str(c) for c in frame.columns], 1, 0.8)
            got = "the records have no such column" + (f" (close: {close[0]})" if close else "")
        elif not is_numeric_dtype(frame[name]) or is_bool_dtype(frame[name]):
            got = f"its column holds {frame[name].dtype} values"
        else:
            continue
        raise ConfigError(
            f"objective {name!r}: expected a numeric column of the records (such as "
            f"{', '.join(metrics)}), but {got}"
        )


def _study_objectives(directory: Path) -> dict[str, str] | None:
    meta = read_study_meta(directory)
    if meta is None:
        return None
    study = meta.get("study", {})
    try:
        return {item["metric"]: item["direction"] for item in study.get("objectives", [])} or None
    except (AttributeError, KeyError, TypeError):
        raise ConfigError(
            f"{directory / STUDY_FILE}: corrupt study definition (its objectives are not "
            "[{metric, direction}, …]); pass --objectives to report without it"
        ) from None


def build_report(
    directory: str | Path, *, objectives: Mapping[str, str] | None = None, top: int = 10
) -> Report:
    """The report of the study recorded in ``directory``."""
    folder = Path(directory)
    frame = load_results(folder)
    frame["peak_memory_gib"] = frame["peak_memory_bytes"] / float(1 << 30)
    chosen = objectives or _study_objectives(folder) or _DEFAULT_OBJECTIVES
    pairs = tuple(parse_objectives(chosen))
    _check_objective_columns(frame, [name for name, _ in pairs])
    knobs = (*PARALLEL_KNOBS[:1], "dp", *PARALLEL_KNOBS[1:])
    defaults = KNOB_DEFAULTS
    if "cp" not in frame.columns and "batch" in frame.columns:  # an inference study
        knobs, defaults = (*SERVING_KNOBS, "decode_instances"), SERVING_DEFAULTS
    searched = [name for name in knobs if name in frame.columns]
    searched += [name for name in frame.columns if name.startswith("hw_")]
    # one row per configuration (a sampler may propose a point twice): the first trial of it
    ok = frame[frame["status"] == "ok"].drop_duplicates(subset=["study", *searched])
    best = {
        name: ok.sort_values(name, ascending=direction is Direction.MIN, kind="stable").head(top)
        for name, direction in pairs
    }
    parameters = tuple(
        name
        for name in searched
        if name in _ALWAYS
        or frame[name].nunique(dropna=True) > 1
        or (name in _SHOWN_OFF_DEFAULT and _off_default(frame[name], defaults.get(name)))
    )
    studies = frame["study"].unique()
    front = pareto_front(ok, {name: str(direction) for name, direction in pairs})
    return Report(
        study=", ".join(map(str, studies)),
        directory=folder,
        frame=frame,
        objectives=pairs,
        front=front,
        best=best,
        parameters=parameters,
    )


def write_html(report: Report, path: Path) -> list[Path]:
    """Write the HTML report to ``path`` and its PNG images beside it; the files written."""
    from stage_explore.report.html import render_html
    from stage_explore.report.images import write_images

    if path.is_dir():
        raise ConfigError(f"{path}: expected the HTML file to write, got a folder")
    make_folder(path.parent, "the report")
    try:
        images = write_images(report, path.with_suffix(""))
        path.write_text(render_html(report, images), encoding="utf-8")
    except OSError as error:
        raise storage_error(Path(error.filename or path), error, "the report") from None
    return [path, *images]
