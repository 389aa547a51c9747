"""``stage report DIR``: the best configurations and the Pareto front of a study.

Contents:
    :func:`register`   the subcommand's parser.
    :func:`run`        print the tables; with ``--html FILE``, also write the HTML report and
                       its PNG images next to it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``report`` to the ``stage`` command."""
    parser = subparsers.add_parser(
        "report",
        help="summarise a study's records: best configurations, Pareto front",
        description="Print the trial counts, the most frequent reasons trials were infeasible "
        "or failed, the best configurations by each objective and their Pareto front, of the "
        "study recorded in DIR (an OUT/<study> folder; an OUT folder holding several studies "
        "reports their trials together), and optionally write an HTML report.",
    )
    parser.add_argument(
        "directory",
        type=Path,
        metavar="DIR",
        help="a study's records folder (OUT/<study>), or an OUT folder of several",
    )
    parser.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="write a self-contained HTML report (and PNG images beside it)",
    )
    parser.add_argument(
        "--objectives",
        metavar="NAME[:min|max],…",
        help="objectives of the front (default: the study's, else step_time_s and mfu)",
    )
    parser.add_argument(
        "--top",
        type=int,
        default=10,
        metavar="N",
        help="rows of each best-configurations table, one per objective (default: 10)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the report of ``args.directory``; write the HTML one when asked."""
    from stage_core.errors import ConfigError
    from stage_explore.cli.paths import writable_folder
    from stage_explore.report import build_report, parse_objective_option, write_html

    if args.top < 1:
        raise ConfigError(f"--top: expected a positive integer, got {args.top}")
    objectives = None if args.objectives is None else parse_objective_option(args.objectives)
    if args.html is not None:
        if args.html.is_dir():
            raise ConfigError(f"--html {args.html}: expected the HTML file to write, got a folder")
        writable_folder(args.html.parent, "--html")
    report = build_report(args.directory, objectives=objectives, top=args.top)
    _note_recording(args.directory)
    print(report.text())
    if args.html is not None:
        written = write_html(report, args.html)
        print("wrote " + ", ".join(str(path) for path in written))
    return 0


def _note_recording(directory: Path) -> None:
    """One stderr line per study folder (``directory`` or a study folder in it) that a
    ``stage explore`` is still recording: the report covers the trials recorded so far."""
    from stage_explore.search.folder_lock import recording_holder

    folders = [directory, *sorted(p for p in directory.iterdir() if p.is_dir())]
    for folder in folders:
        pid = recording_holder(folder)
        if pid is not None:
            print(
                f"stage report: note: {folder} is still being recorded (stage explore, pid "
                f"{pid}); this report covers the trials recorded so far",
                file=sys.stderr,
            )
