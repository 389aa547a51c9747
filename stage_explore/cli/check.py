"""``stage check DIR``: read a Chakra trace set, verify it, and print per-rank totals.

Exit status: 0 when the trace set is sound, 1 when it has violations, 2 when it cannot be read
(raised as a :class:`~stage_core.errors.StageError`, printed by the CLI entry point). The text
output is a table of per-rank totals, ranks with identical totals sharing one row, followed by
the violations; ``--json`` prints ``{"violations": [...], "ranks": {rank: totals}}`` instead.
``--for astra-sim`` adds the rules for what makes ASTRA-sim abort or mistime a node
(:func:`stage_core.chakra.check.astra_sim_node_problem`). ``stage check RUNS.csv`` checks a
published-runs CSV instead (read as ``stage validate --data`` reads it): each row's own columns
against each other (:mod:`stage_explore.validation.consistency`), one ``warning:`` line per
disagreement; exit 1 when a row is flagged, ``--json`` prints ``{"rows", "compared",
"data_warnings"}``. What the reader accepted only for
compatibility (traces of the published STAGE generator) is printed as ``warning:`` lines on
stderr, and so is a progress meter of the ranks read and checked (on a terminal, or with
``--progress``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from stage_core.chakra.check import CheckReport, RankTotals, check_trace_set
from stage_core.chakra.reader import read_trace_set
from stage_core.errors import ConfigError
from stage_explore.cli.meter import RankMeter
from stage_explore.wording import counted

_COLUMNS = ("flops", "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv")


def rank_ranges(ranks: list[int]) -> str:
    """Compact rank list: ``[0, 1, 2, 5]`` → ``0-2,5``."""
    spans: list[list[int]] = []
    for rank in ranks:
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in spans)


def _row(totals: RankTotals) -> tuple[int, ...]:
    comm = totals.comm_bytes
    return (
        totals.flops,
        comm["all_reduce"],
        comm["all_gather"],
        comm["reduce_scatter"],
        comm["all_to_all"],
        totals.send_bytes,
        totals.recv_bytes,
    )


def format_report(report: CheckReport) -> str:
    """The text output: totals table (identical rows grouped), then the violations."""
    rows: dict[tuple[int, ...], list[int]] = {}
    for rank, totals in sorted(report.ranks.items()):
        rows.setdefault(_row(totals), []).append(rank)
    table = [("ranks",) + tuple(f"{name} (B)" if name != "flops" else name for name in _COLUMNS)]
    for values, ranks in sorted(rows.items(), key=lambda item: item[1][0]):
        table.append((rank_ranges(ranks),) + tuple(f"{value:,}" for value in values))
    widths = [max(len(row[column]) for row in table) for column in range(len(table[0]))]
    lines = [
        "  ".join(
            cell.ljust(width) if column == 0 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in table
    ]
    rank_count = len(report.ranks)
    lines.append("")
    if report.sound:
        lines.append(f"sound: {counted(rank_count, 'rank')}, no violations")
    else:
        violations = counted(len(report.violations), "violation")
        lines.append(f"{violations} in {counted(rank_count, 'rank')}:")
        lines.extend(f"  {violation}" for violation in report.violations)
    return "\n".join(lines)


def check_runs(args: argparse.Namespace) -> int:
    """``stage check RUNS.csv``: the rows of a published-runs CSV checked against themselves;
    exit 1 when one is flagged."""
    from stage_explore.validation.suite import check_data

    check = check_data(args.directory)
    if args.json:
        payload = {"rows": check.rows, "compared": check.compared, "data_warnings": check.to_list()}
        print(json.dumps(payload, indent=2))
    else:
        print(check.line())
        for warning in check.warnings:
            print(f"warning: {warning.text()}")
    return 1 if check.warnings else 0


def run(args: argparse.Namespace) -> int:
    """Read, check and print; return the exit status."""
    if args.quiet and args.progress:  # s36 review9: accepted, the meter shown (trace refuses)
        raise ConfigError("--quiet and --progress contradict each other; pass one of them")
    if args.directory.lower().endswith(".csv"):
        given = {
            "--prefix": args.prefix != "workload",
            "--for": args.target != "any",
            "--progress": args.progress,  # s36 review9: a CSV's check shows no meter
        }
        for flag in (flag for flag, changed in given.items() if changed):
            # s22 review: a trace set's options were ignored on a runs CSV without a word
            raise ConfigError(
                f"{flag} applies to a trace folder, but got {args.directory!r}, a runs CSV"
            )
        return check_runs(args)
    if Path(args.directory).is_file():  # it said only "… is not a directory"
        raise ConfigError(
            f"{args.directory}: expected a trace folder (<prefix>.<rank>.et files) or a "
            "published-runs .csv, but got another file"
        )
    if not Path(args.directory).exists():  # s31 review4: it said "… is not a directory"
        raise ConfigError(
            f"{args.directory}: no such file or folder; expected a trace folder "
            "(<prefix>.<rank>.et files) or a published-runs .csv"
        )
    show = not args.quiet and sys.stderr.isatty() or args.progress
    trace_set = read_trace_set(args.directory, args.prefix, RankMeter(show, "reading rank files"))
    for warning in trace_set.warnings:  # accepted for compatibility: stderr, not the report
        print(f"warning: {warning}", file=sys.stderr)
    report = check_trace_set(
        trace_set,
        for_astra_sim=args.target == "astra-sim",
        progress=RankMeter(show, "checking ranks"),
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_report(report))
    return 0 if report.sound else 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``stage check``."""
    parser = subparsers.add_parser(
        "check",
        help="verify a Chakra trace set and print per-rank totals (or check a runs CSV's rows)",
        description=(
            "Read DIR/<prefix>.<rank>.et and DIR/comm_group.json, check dependencies, groups, "
            "collective order and send/receive matching, and print FLOPs and bytes per rank. "
            "Given a published-runs CSV instead, check each row's rates and layout against "
            "each other. Exit 0 when sound, 1 with violations, 2 when the input cannot be read."
        ),
    )
    parser.add_argument(
        "directory",
        metavar="DIR|RUNS.csv",
        help="directory holding the trace set, or a published-runs CSV to check row by row",
    )
    parser.add_argument(
        "--prefix", default="workload", help="trace file prefix (default: workload)"
    )
    parser.add_argument("--json", action="store_true", help="print {violations, ranks} as JSON")
    parser.add_argument(
        "--for",
        dest="target",
        choices=("any", "astra-sim"),
        default="any",
        help="any (default): the checks above; astra-sim: also flag what makes ASTRA-sim abort "
        "(zero-FLOP compute nodes with bytes, FLOPs without bytes)",
    )
    parser.add_argument(
        "--progress", action="store_true", help="show progress on stderr even when piped"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress meter")
    parser.set_defaults(func=run)
