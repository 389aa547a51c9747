"""Explorer speed: whole studies on the local executor, and the search's share of wall time.

    python benchmarks/bench_explore.py                      # every scenario, writes results
    python benchmarks/bench_explore.py --scenarios gpt3-tpe --quick

Scenarios (analytical backend, local executor, ``--workers`` processes):

- ``gpt3-tpe``: ``studies/gpt3_175b_a100.toml`` as shipped (TPE) with a 10,000-trial budget.
  Its canonical space holds fewer configurations, so the study ends when each has been
  evaluated once (target: ≤ 60 s on 2 cores).
- ``gpt3-auto``: the same study with ``kind = "auto"`` (the space fits the budget and the
  backend is fast, so it is enumerated).
- ``large-nsga2`` / ``large-tpe``: a larger Llama-3 405B space (``studies/llama3_405b_h100_16k``
  with every knob widened: 55,296 raw points, 20,628 distinct configurations), 10,000 trials
  with NSGA-II or TPE (target: ≤ 5 min on 2 cores).

Each row reports the distinct configurations evaluated, why the study stopped, the wall time
(executor startup included), the time spent proposing and telling (``sampler_s``) and its share
of the wall time, the summed evaluation time of the workers (``eval_s``), the repeats answered
from the cache and the rate. ``--quick`` runs 1,000 trials and does not write the results file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna

from stage_explore import load_results
from stage_explore.search import BaseExecutor, EvaluationJob, Explorer, Progress, create_executor
from stage_explore.study import ExecutorKind, parse_study

ROOT = Path(__file__).resolve().parents[1]

LARGE_SPACE = """[space]
num_gpus = [8192, 16384]
tp = [1, 2, 4, 8]
pp = [1, 2, 4, 8, 16, 32]
cp = [1, 2, 4, 8]
sp = [false, true]
zero = [0, 1, 2, 3]
recompute = ["none", "selective", "full"]
schedule = ["1f1b", "interleaved"]
vpp = [1, 2, 4]
micro_batch = [1, 2]

"""


def _study_text(name: str) -> str:
    for folder in (ROOT / "studies", ROOT / "stage_explore" / "studies"):
        path = folder / f"{name}.toml"
        if path.exists():
            return path.read_text(encoding="utf-8")
    raise SystemExit(f"study {name}.toml not found under studies/ or stage_explore/studies/")


def _with_sampler(text: str, kind: str) -> str:
    return re.sub(r'(\[sampler\][^\[]*?kind = )"\w+"', rf'\1"{kind}"', text, count=1, flags=re.S)


def _scenario_text(scenario: str) -> str:
    if scenario.startswith("gpt3-"):
        return _with_sampler(_study_text("gpt3_175b_a100"), scenario.removeprefix("gpt3-"))
    text = re.sub(r"\[space\].*?\n\n", LARGE_SPACE, _study_text("llama3_405b_h100_16k"), flags=re.S)
    return _with_sampler(text, scenario.removeprefix("large-"))


SCENARIOS = ("gpt3-tpe", "gpt3-auto", "large-nsga2", "large-tpe")


def run_one(scenario: str, trials: int, workers: int, folder: Path) -> dict[str, Any]:
    """Run one scenario on the local executor; its timings and counts."""
    spec = parse_study(_scenario_text(scenario), folder / f"{scenario}.toml")
    startup: list[float] = []

    def factory(job: EvaluationJob) -> BaseExecutor:
        start = time.perf_counter()
        made = create_executor(spec.executor, job, kind=ExecutorKind.LOCAL)
        startup.append(time.perf_counter() - start)
        return made

    spec = dataclasses.replace(spec, executor=dataclasses.replace(spec.executor, workers=workers))

    def report(progress: Progress) -> None:
        if progress.elapsed_s - shown[0] >= 30:
            shown[0] = progress.elapsed_s
            print(
                f"  {scenario}: {progress.done} configurations, {progress.repeats} repeats, "
                f"sampler {progress.sampler_s:.0f} s of {progress.elapsed_s:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    shown = [0.0]
    start = time.perf_counter()
    summary = Explorer(
        spec, out=folder / scenario, executor_factory=factory, trials=trials, on_progress=report
    ).run()
    wall = time.perf_counter() - start
    progress = summary.progress
    frame = load_results(summary.directory)
    return {
        "scenario": scenario,
        "sampler": str(spec.sampler.kind),
        "budget": trials,
        "distinct": progress.done,
        "ok": progress.ok,
        "infeasible": progress.infeasible,
        "stopped_by": summary.stopped_by,
        "repeats": progress.repeats,
        "wall_s": round(wall, 2),
        "startup_s": round(startup[0], 2) if startup else None,
        "sampler_s": round(progress.sampler_s, 2),
        "sampler_share": round(progress.sampler_s / wall, 3),
        "eval_s": round(float(frame["eval_s"].sum()), 2),
        "trials_per_s": round(progress.done / wall, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run each scenario, print a table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--quick", action="store_true", help="1,000 trials, results not written")
    args = parser.parse_args(argv)
    if args.quick:
        args.trials = min(args.trials, 1_000)
    logging.basicConfig(level=logging.WARNING)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-explore-") as temporary:
        for scenario in args.scenarios.split(","):
            if scenario.strip() not in SCENARIOS:
                parser.error(f"unknown scenario {scenario!r}; expected: {', '.join(SCENARIOS)}")
            results.append(run_one(scenario.strip(), args.trials, args.workers, Path(temporary)))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
            if not args.quick:  # after each scenario, so a long run keeps what finished
                written = Path(__file__).resolve().parent / "results" / "explore.json"
                written.parent.mkdir(exist_ok=True)
                machine = {"cpus": os.cpu_count(), "workers": args.workers, "executor": "local"}
                written.write_text(
                    json.dumps({"machine": machine, "runs": results}, indent=1) + "\n"
                )
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    columns = list(results[0])
    print("  ".join(f"{name:>12}" for name in columns))
    for result in results:
        print("  ".join(f"{result[name]!s:>12}" for name in columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
