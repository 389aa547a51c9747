"""``stage explore STUDY.toml``: run a study and record every trial.

Contents:
    :func:`register`        the subcommand's parser.
    :class:`ProgressLine`   the progress line (rewritten in place on a terminal, else every 10 s).
    :func:`run`             load the study, pick the executor, run, print the summary.

Exit status: 0 when the study ran to its end, 130 when it was interrupted (what finished is
kept and ``--resume`` continues it), 2 on a configuration error.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from stage_explore.study.spec import ExecutorKind

if TYPE_CHECKING:
    from stage_explore.search.executors import BaseExecutor
    from stage_explore.search.progress import Progress
    from stage_explore.search.worker import EvaluationJob

_QUIET_EVERY_S = 10.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``explore`` to the ``stage`` command."""
    parser = subparsers.add_parser(
        "explore",
        help="run a design-space exploration study",
        description="Run the study in STUDY.toml: propose design points, evaluate them in "
        "parallel, and record every trial under OUT/<study name>.",
    )
    parser.add_argument("study", type=Path, metavar="STUDY.toml", help="the study file")
    parser.add_argument(
        "--out", type=Path, default=Path("results"), help="output folder (default: results)"
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
        help="total trial budget, resumed trials included (default: [sampler] trials)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue the study recorded in the output folder"
    )
    parser.set_defaults(func=run)


class ProgressLine:
    """Prints progress snapshots: in place on a terminal, as a line every 10 s otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._last = 0.0
        self._width = 0

    def __call__(self, progress: Progress) -> None:
        total = "" if progress.total is None else f"/{progress.total}"
        minutes, seconds = divmod(int(progress.elapsed_s), 60)
        text = (
            f"{progress.study}: {progress.done}{total} trials · {progress.ok} feasible · "
            f"{progress.infeasible} infeasible · {progress.failed} failed · {progress.best} · "
            f"{progress.rate_per_s:.1f} trials/s · {minutes}:{seconds:02d}"
        )
        if self._tty:
            self._stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
            self._stream.flush()
        elif time.monotonic() - self._last >= _QUIET_EVERY_S:
            self._stream.write(text + "\n")
            self._stream.flush()
            self._last = time.monotonic()

    def end(self) -> None:
        """Finish the in-place line."""
        if self._tty and self._width:
            self._stream.write("\n")
            self._stream.flush()


def run(args: argparse.Namespace) -> int:
    """Run the study named on the command line."""
    import optuna

    from stage_core.errors import ConfigError
    from stage_explore.search.driver import explore
    from stage_explore.search.executors import create_executor
    from stage_explore.study.loader import load_study

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="stage explore: %(message)s")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.trials is not None and args.trials < 1:
        raise ConfigError(f"--trials: expected a positive integer, got {args.trials}")
    spec = load_study(args.study)
    kind = ExecutorKind(args.executor) if args.executor else spec.executor.kind
    address = args.address

    def executor_factory(job: EvaluationJob) -> BaseExecutor:
        return create_executor(spec.executor, job, kind=kind, address=address)

    line = ProgressLine(sys.stderr)
    try:
        summary = explore(
            spec,
            out=args.out,
            executor_factory=executor_factory,
            trials=args.trials,
            resume=args.resume,
            on_progress=line,
        )
    finally:
        line.end()
    progress = summary.progress
    resumed = f" ({summary.resumed} resumed)" if summary.resumed else ""
    print(
        f"study {progress.study}: {progress.done} trials{resumed}: {progress.ok} ok, "
        f"{progress.infeasible} infeasible, {progress.failed} failed; {progress.best}; "
        f"stopped by {summary.stopped_by} after {progress.elapsed_s:.1f} s "
        f"({progress.rate_per_s:.1f} trials/s)"
    )
    print(f"records: {summary.directory}  (stage report {summary.directory})")
    if summary.interrupted:
        print(f"interrupted: continue with stage explore {args.study} --out {args.out} --resume")
        return 130
    return 0
