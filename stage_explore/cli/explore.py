"""``stage explore STUDY``: run a study and record every trial.

Contents:
    :func:`register`        the subcommand's parser.
    :class:`ProgressLine`   the progress line (rewritten in place on a terminal, else every
                            10 s at most, and the final count).
    :func:`run`             load the study, check the output folder, pick the executor, run,
                            print the summary (and, when the study searches ``precision``,
                            the best result of each precision).
    :func:`no_feasible_lines`
                            the reasons a run that found no feasible trial prints.

``STUDY`` is a study file or the name of a study shipped with the package (``quickstart``,
``gpt3_175b_a100`` …, :func:`~stage_explore.study.loader.bundled_studies`).

Resume semantics: ``--trials N`` is the *total* budget, trials recorded before included. With
``--resume`` the folder must hold a recorded study (``_study.json`` or record parts); when it
already holds ``N`` or more trials nothing runs and a message says so (exit 0).

Exit status: 0 when the study ran to its end (or its budget was already reached; also when no
trial was feasible: each is recorded with its reason, and the most frequent are printed), 130
when it was interrupted (what finished is kept and ``--resume`` continues it; also before its
first trial was recorded, and when a second Ctrl-C aborts it: the same ``--resume`` line), 2
on a configuration error (including an output folder that cannot be written or a corrupt
``_study.json``).
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from stage_explore.cli.paths import path_argument, removed_if_failed, writable_folder
from stage_explore.study.spec import ExecutorKind
from stage_explore.wording import counted

if TYPE_CHECKING:
    from collections.abc import Callable

    from stage_explore.search.executors import BaseExecutor
    from stage_explore.search.progress import Progress, RefineProgress, StudySummary
    from stage_explore.search.worker import EvaluationJob
    from stage_explore.study.spec import StudySpec

_QUIET_EVERY_S = 10.0
#: How the summary says why a run ended, where "stopped by <StudySummary.stopped_by>" would not
#: read as English (s34 review7: "stopped by exhausted", "stopped by interrupted"); the budget's
#: and the grid's keep "stopped by budget" / "stopped by grid".
_STOPPED = {
    "exhausted": "stopped with no configuration left to propose",
    "interrupted": "stopped by an interrupt",
    "time limit": "stopped by the time limit",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``explore`` to the ``stage`` command."""
    parser = subparsers.add_parser(
        "explore",
        help="run a design-space exploration study",
        description="Run STUDY (a study file, or a study shipped with STAGE by name: "
        + ", ".join(_bundled_names())
        + "): propose design points, evaluate them in parallel, and record every trial under "
        "OUT/<study name>.",
    )
    parser.add_argument(
        "study",
        metavar="STUDY",
        help="a study file, or the name of a bundled study (e.g. quickstart, gpt3_175b_a100)",
    )
    parser.add_argument(
        "--out",
        type=path_argument,
        default=Path("results"),
        help="output folder; records go to OUT/<study name> (default: results)",
    )
    parser.add_argument(
        "--executor",
        choices=[kind.value for kind in ExecutorKind],
        help="where evaluations run (default: the study's [executor] kind, ray)",
    )
    parser.add_argument(
        "--address",
        help="join the Ray cluster at HOST:PORT, ray://HOST:PORT, or auto (Ray's discovery: "
        "$RAY_ADDRESS, else this machine's `ray start` cluster); default: the study's "
        "[executor] address, else a new local Ray instance ($RAY_ADDRESS is then ignored)",
    )
    parser.add_argument(
        "--trials",
        type=int,
        metavar="N",
        help="total trial budget, trials recorded before included: with --resume, "
        "--trials 100 runs up to 100 minus those (default: [sampler] trials)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the study recorded in OUT/<study name> (an error if there is none)",
    )
    parser.set_defaults(func=run)


class ProgressLine:
    """Prints progress snapshots: in place on a terminal; otherwise (a log) the first snapshot,
    then one line every 10 s at most, and at the end the last snapshot if its counts were not
    shown yet — a short study logs its start and its final count, a long one no flood. A
    two-stage study's re-evaluation shows its first and last point; the search's last count
    is written before it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._last = 0.0
        self._width = 0
        #: not a terminal: the latest snapshot not written, as (kind, counts, text)
        self._pending: tuple[str, tuple[int, ...], str] | None = None
        #: not a terminal: the counts of the last line written of each kind
        self._written: dict[str, tuple[int, ...]] = {}

    def __call__(self, progress: Progress) -> None:
        total = "" if progress.total is None else f"/{progress.total}"
        of = progress.done if progress.total is None else progress.total  # "1/1 trial"
        trials = "trial" if of == 1 else "trials"
        minutes, seconds = divmod(int(progress.elapsed_s), 60)
        text = (
            f"{progress.study}: {progress.done}{total} {trials} · {progress.ok} feasible · "
            f"{progress.infeasible} infeasible · {progress.failed} failed · {progress.best} · "
            f"{progress.rate_per_s:.1f} trials/s · {minutes}:{seconds:02d}"
        )
        if progress.infrastructure_failed:
            text += f" · {progress.infrastructure_failed} lost to infrastructure failures"
        if progress.repeats:  # configurations the sampler proposed again: answered, not counted
            text += f" · {progress.repeats} repeats from cache"
        if progress.where:
            text += f" · {progress.where}"
        counts = (progress.done, progress.ok, progress.infeasible, progress.failed,
                  progress.infrastructure_failed, progress.repeats)  # fmt: skip
        self._show(text, ("search", counts))

    def refine(self, progress: RefineProgress) -> None:
        """A two-stage study's re-evaluation of the front (its first line always shown)."""
        minutes, seconds = divmod(int(progress.elapsed_s), 60)
        points = "point" if progress.total == 1 else "points"  # "1/1 point", as "1/1 trial"
        text = (
            f"re-evaluating the front with {progress.backend}: {progress.done}/{progress.total} "
            f"{points} · {progress.ok} feasible · {progress.failed} failed · "
            f"{minutes}:{seconds:02d}"
        )
        counts = (progress.done, progress.total, progress.ok, progress.failed)
        self._show(text, ("refine", counts), force=progress.done in (0, progress.total))

    def _show(self, text: str, key: tuple[str, tuple[int, ...]], force: bool = False) -> None:
        if self._tty:
            self._stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
            self._stream.flush()
            return
        kind, counts = key
        if self._pending is not None and self._pending[0] != kind:
            self._write(*self._pending)  # the search's last count before the re-evaluation
        if force or time.monotonic() - self._last >= _QUIET_EVERY_S:
            self._write(kind, counts, text)
        elif self._written.get(kind) != counts:
            self._pending = (kind, counts, text)
        else:  # the counts last written, only later: nothing new for the end
            self._pending = None

    def _write(self, kind: str, counts: tuple[int, ...], text: str) -> None:
        self._stream.write(text + "\n")
        self._stream.flush()
        self._last = time.monotonic()
        self._written[kind] = counts
        self._pending = None

    def end(self) -> None:
        """Finish the in-place line; not on a terminal, write the last snapshot if its counts
        were not shown."""
        if self._tty and self._width:
            self._stream.write("\n")
            self._stream.flush()
        elif self._pending is not None:
            self._write(*self._pending)


def run(args: argparse.Namespace) -> int:
    """Run the study named on the command line."""
    import optuna

    from stage_core.errors import ConfigError
    from stage_explore.study.loader import load_study, resolve_study

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="stage explore: %(message)s")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.trials is not None and args.trials < 1:
        raise ConfigError(f"--trials: expected a positive integer, got {args.trials}")
    spec = load_study(resolve_study(args.study))
    with removed_if_failed(args.out / spec.name):  # a refused --address leaves no empty --out
        return _explore(args, spec)


def _explore(args: argparse.Namespace, spec: StudySpec) -> int:
    """Run the loaded study ``spec`` with the command line's options; the exit status."""
    from stage_explore.search.executors import create_executor

    directory = writable_folder(args.out, "--out") / spec.name
    if directory.is_dir() and not args.resume:
        writable_folder(directory, "--out")
    if args.resume:
        recorded = _recorded_trials(directory)
        budget = args.trials if args.trials is not None else spec.sampler.trials
        if budget is not None and recorded >= budget:
            print(
                f"study {spec.name}: {counted(recorded, 'trial')} already recorded in {directory}, "
                f"which reaches the budget of {budget} (--trials counts every trial, recorded "
                "ones included); nothing to run: pass a larger --trials to continue"
            )
            print(_records_line(directory))
            return 0
    kind = ExecutorKind(args.executor) if args.executor else spec.executor.kind
    address = args.address

    def executor_factory(job: EvaluationJob) -> BaseExecutor:
        return create_executor(spec.executor, job, kind=kind, address=address)

    line = ProgressLine(sys.stderr)
    try:
        summary = _run_explore(args, spec, executor_factory, line)
    except KeyboardInterrupt:
        # s34 review7b: a second Ctrl-C aborts the run (the driver flushes what was recorded);
        # once the folder holds the study, --resume continues it, so say so as the first does
        if not _holds_study(directory):
            raise
        print("stage explore: aborted by the interrupt; what was recorded is kept",
              file=sys.stderr)  # fmt: skip
        print(_records_line(directory))
        print(f"interrupted: continue with {resume_command(args)}")
        return 130
    progress = summary.progress
    resumed = f" ({summary.resumed} resumed)" if summary.resumed else ""
    # s34 review7: a run that ended with no feasible trial said "none feasible yet", as if
    # the finished grid could still find one
    best = "none feasible" if progress.ok == 0 and not summary.interrupted else progress.best
    print(
        f"study {progress.study}: {counted(progress.done, 'trial')}{resumed}: {progress.ok} ok, "
        f"{progress.infeasible} infeasible, {progress.failed} failed; {best}; "
        f"{_STOPPED.get(summary.stopped_by, f'stopped by {summary.stopped_by}')} after "
        f"{progress.elapsed_s:.1f} s "
        f"({progress.rate_per_s:.1f} trials/s)"
    )
    if progress.done and progress.ok == 0 and not summary.interrupted:
        for reason in no_feasible_lines(summary.directory):
            print(reason)
    refined = summary.refined
    from stage_explore.search.refine import refined_folder

    if refined is not None and refined.total == 0:
        print(f"front: every point already re-evaluated with {refined.backend} (records: "
              f"{refined_folder(summary.directory)})")  # fmt: skip
    elif refined is not None:
        print(
            f"front re-evaluated with {refined.backend}: {refined.done} of "
            f"{counted(refined.total, 'point')} not refined before: {refined.ok} feasible, "
            f"{refined.failed} failed, "
            f"{refined.done - refined.ok - refined.failed} infeasible "
            f"(records: {refined_folder(summary.directory)})"
        )
    # s34 review7: a run interrupted before its first trial was recorded has no record part;
    # reading the folder for these notes ended it in "error: … no trial records" (exit 2, no
    # --resume hint)
    if summary.stopped_by == "grid" and progress.done:
        for note in unreached_values(spec, summary.directory):
            print(note)
    if len(spec.space.choices().get("precision", ())) > 1 and progress.done:
        _print_precisions(spec, summary.directory)
    print(_records_line(summary.directory))
    if progress.infrastructure_failed:
        print(
            f"{counted(progress.infrastructure_failed, 'trial')} lost to infrastructure failures "
            f"after their retries: {resume_command(args)} re-runs them"
        )
    if summary.interrupted:
        print(f"interrupted: continue with {resume_command(args)}")
        return 130
    return 0


def resume_command(args: argparse.Namespace) -> str:
    """The command continuing this run: the study, ``--out`` and ``--resume``, with the
    ``--trials``, ``--executor`` and ``--address`` it was given (7 Dec 2026, s29 review: the
    hint dropped them, so a run interrupted at ``--trials 1500 --executor local`` continued on
    a new Ray instance to the study's own budget)."""
    words = ["stage", "explore", str(args.study), "--out", str(args.out)]
    for option, value in (("--trials", args.trials), ("--executor", args.executor),
                          ("--address", args.address)):  # fmt: skip
        if value is not None:
            words += [option, str(value)]
    return shlex.join([*words, "--resume"])


def no_feasible_lines(directory: Path, limit: int = 3) -> list[str]:
    """What a run that recorded trials but no feasible one says after its summary: the most
    frequent reasons (as ``stage report`` groups them) and where to read the rest. Such a run
    still exits 0: every point was evaluated and recorded with its reason, which answers the
    study's question (a memory bound or a model no configuration fits)."""
    from stage_explore.report import build_report

    report = build_report(directory)
    lines = ["no feasible configuration; the most frequent reasons:"]
    for status in ("infeasible", "failed"):
        other = report.other_reasons(status, limit)
        for reason, count in [*report.reasons(status, limit), *([other] if other else [])]:
            lines.append(f"  {status} ×{count}: {reason}")
    return lines


def unreached_values(spec: StudySpec, directory: Path) -> list[str]:
    """One note per value a ``[space]`` list names that no record of the finished grid holds:
    no point with it can exist (``tp·pp·cp`` does not divide ``num_gpus = 12``, ``dp·micro_batch``
    does not divide the batch), or each is the same configuration as one without it (a pinned
    knob); the grid never proposes such points, so nothing else would say so."""
    from stage_explore.records import load_results

    frame = load_results(directory)
    notes = []
    for knob, values in spec.space.choices().items():
        if len(values) < 2 or knob not in frame.columns:
            continue
        held = {str(value) for value in frame[knob].dropna().unique().tolist()}
        missing = [value for value in values if str(value) not in held]
        if missing:
            listed = ", ".join(str(value) for value in missing)
            notes.append(
                f"note: [space] {knob} = {listed}: in no record: every point with it is "
                "structurally impossible or the same configuration as one without it "
                "(docs/explore.md §1)"
            )
    return notes


def _print_precisions(spec: StudySpec, directory: Path) -> None:
    """The best result of each searched precision (by the study's first objective)."""
    from stage_explore.records import load_results
    from stage_explore.report.precisions import precision_lines
    from stage_explore.study.spec import Direction

    objective = spec.objectives[0]
    minimise = objective.direction is Direction.MIN
    for line in precision_lines(load_results(directory), objective.metric, minimise):
        print(line)


def _run_explore(
    args: argparse.Namespace,
    spec: StudySpec,
    executor_factory: Callable[[EvaluationJob], BaseExecutor],
    line: ProgressLine,
) -> StudySummary:
    """The driver's run of ``spec`` with the command line's options, the progress line ended
    however it stops."""
    from stage_explore.search.driver import explore

    try:
        return explore(
            spec,
            out=args.out,
            executor_factory=executor_factory,
            trials=args.trials,
            resume=args.resume,
            on_progress=line,
            on_refine=line.refine,
        )
    finally:
        line.end()


def _records_line(directory: Path) -> str:
    """The line naming where a study's records are and the command that reports them."""
    return f"records: {directory}  (stage report {directory})"


def _holds_study(directory: Path) -> bool:
    """Whether ``--resume`` would find a recorded study in ``directory`` (its ``_study.json``
    or a record part), the condition :func:`_recorded_trials` checks."""
    from stage_explore.records import STUDY_FILE, count_records

    if not directory.is_dir():
        return False
    return (directory / STUDY_FILE).is_file() or count_records(directory) > 0


def _recorded_trials(directory: Path) -> int:
    """How many final trials the folder to resume holds (trials lost to the infrastructure are
    run again, so they do not count); an error if it holds no study."""
    from stage_core.errors import ConfigError
    from stage_explore.records import STUDY_FILE, count_records, read_study_meta

    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"--resume: {directory}: expected a study folder, got a file")
    meta = read_study_meta(directory) if directory.is_dir() else None
    if meta is None and count_records(directory) == 0:
        raise ConfigError(
            f"--resume: {directory} holds no recorded study (expected {STUDY_FILE} or "
            "part-*.parquet files there); run without --resume to start it, or check --out"
        )
    if directory.is_dir():
        writable_folder(directory, "--resume")
    return count_records(directory, final=True)


def _bundled_names() -> list[str]:
    from stage_explore.study.loader import bundled_studies

    return list(bundled_studies())
