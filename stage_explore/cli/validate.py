"""``stage validate``: the analytical backend against every published training run.

Evaluates every row of the published runs shipped in ``stage_explore/data`` with the setups of
``setups.toml`` (:mod:`stage_explore.validation`; ``--data DIR`` for another folder of
published-runs CSVs, whose rows no ``setups.toml`` source claims get inferred setups) and
prints the row count, then per source the mean absolute error on in-sample rows (used to
choose a constant) and on held-out rows, the vTrain ranking quality, the targets of issue #11
and every row. ``--loso`` adds the leave-one-source-out figure (a fit per source: minutes;
``--jobs N`` runs N fits at once in worker processes, the same figure, default 1; without
``--loso`` there is no fit and ``--jobs`` is refused, not ignored).
``--json`` prints ``{"source", "rows": [{"id", "metric", "predicted", "measured", "error",
"in_sample", ...}], "mean_abs_error": {source: fraction}, "sources": {source:
{"in_sample_mae", "held_out_mae", "rows", ...}}, "leave_one_source_out", "targets",
"accounting"}``; ``--markdown`` prints ``benchmarks/results/validation.md``. ``--check`` exits
1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="compare the analytical backend with published training and serving runs",
        description="Evaluate every published training and serving run (stage_explore/data, "
        "setups in setups.toml; --data for others) and print the rows' self-consistency check, "
        "in-sample and held-out error per source (rows no source claims under 'inferred "
        "setups'), vTrain ranking quality, the targets of issue #11, every row, and the "
        "serving rows.",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        metavar="DIR|FILE",
        help="a folder of published-runs CSVs, with or without a setups.toml, or one such CSV "
        "(rows no source claims get an inferred setup; default: the package's data)",
    )
    parser.add_argument(
        "--loso",
        action="store_true",
        help="add the leave-one-source-out figure (a fit per source: most of an hour on the "
        "package's data, progress on stderr; Ctrl-C or SIGTERM stops it)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="with --loso only: fit N sources at once in worker processes (default: 1; the same "
        "figure whatever N)",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a target of issue #11 is missed"
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON")
    output.add_argument(
        "--markdown",
        action="store_true",
        help="print the Markdown report (with --loso: benchmarks/results/validation.md)",
    )
    parser.set_defaults(func=run)


def _finite(value: Any) -> Any:
    """JSON without NaN: non-finite floats become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def run(args: argparse.Namespace) -> int:
    from stage_core.errors import ConfigError
    from stage_explore.cli.meter import RankMeter, StepMeter
    from stage_explore.validation.render import to_markdown, to_text
    from stage_explore.validation.serving import (
        serving_markdown,
        serving_rows,
        serving_summary,
        serving_text,
    )
    from stage_explore.validation.suite import run_validation

    jobs = 1 if args.jobs is None else args.jobs
    if jobs < 1:
        raise ConfigError(f"--jobs must be an integer >= 1, but got {jobs}")
    if args.jobs is not None and not args.loso:
        raise ConfigError(
            f"--jobs {jobs} runs the leave-one-source-out fits at once and needs --loso "
            "(the rows alone are evaluated in one process)"
        )
    report = run_validation(
        args.data,
        loso=args.loso,
        loso_progress=StepMeter("leave one source out", "sources") if args.loso else None,
        loso_jobs=jobs,
        # in place on a terminal only: 20-50 s of rows, silent before s29 review
        progress=RankMeter(sys.stderr.isatty(), "evaluating rows"),
    )
    serving = serving_rows(args.data)  # beside training: the published serving measurements
    if args.json:
        payload = report.to_dict()
        payload.setdefault("sources", {}).update(serving_summary(serving))
        print(json.dumps(_finite(payload), indent=1))
    elif args.markdown:
        print(to_markdown(report), end="")
        print(serving_markdown(serving), end="")
    else:
        print(to_text(report) + serving_text(serving))
    if args.check:
        missed = [t for t in report.targets() if not t.passed]
        if missed:
            print(f"stage validate: {len(missed)} of {len(report.targets())} targets missed")
            return 1
    return 0
