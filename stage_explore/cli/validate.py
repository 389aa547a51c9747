"""``stage validate``: the analytical backend against published training runs.

Runs every row of ``published_runs.csv`` (:mod:`stage_explore.validate`; default
the copy shipped in ``stage_explore/data``, ``--csv`` to override) and
prints predicted vs measured with the signed error per row and the mean absolute error per
block (KOR22-T5 iteration time, NAR21-T1 TFLOP/s per GPU, KOR22-F1 peak memory). ``--json``
prints ``{"source", "rows": [{"id", "metric", "predicted", "measured", "error", ...}],
"mean_abs_error": {block: fraction}}``; ``--markdown`` prints the tables of
``benchmarks/results/validation.md``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="compare the analytical backend with published training runs",
        description="Evaluate every published run (Narayanan et al. 2021, Korthikanti et al. "
        "2022) and print predicted vs measured, the signed error per row and the mean absolute "
        "error per block.",
    )
    parser.add_argument(
        "--csv",
        type=Path,
        default=None,
        metavar="PATH",
        help="the published runs (default: the copy shipped with the package)",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON")
    output.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stage_explore.validate import run_validation

    report = run_validation(args.csv)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    elif args.markdown:
        print(report.to_markdown())
    else:
        print(f"published runs: {report.source}")
        print(report.to_text())
    return 0
