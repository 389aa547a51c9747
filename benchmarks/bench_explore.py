"""Explorer throughput: trials per second of a 10,000-trial study, on Ray and on the local
process pool, with the backend named on the command line.

    python benchmarks/bench_explore.py                        # analytical backend, both executors
    python benchmarks/bench_explore.py --backend module:Class --trials 2000 --executors local

The study is of the quickstart kind (one model on one system, the usual parallel knobs, two
objectives, the random sampler so the sampler's own cost does not dominate). Startup (process
pool or Ray instance) is reported apart from the steady rate.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna

from stage_explore.search import BaseExecutor, EvaluationJob, Explorer, create_executor
from stage_explore.study import ExecutorKind, parse_study

STUDY = """\
[study]
name = "bench-{executor}"
seed = 0

[model]
flavor = "{model}"

[workload]
global_batch = 1024
sequence_length = 4096

[system]
preset = "{system}"

[space]
num_gpus = [64, 128, 256, 512]
tp = [1, 2, 4, 8]
pp = [1, 2, 4, 8]
cp = [1, 2]
sp = [false, true]
zero = [0, 1, 2, 3]
recompute = ["none", "selective", "full"]
schedule = ["1f1b", "interleaved"]
vpp = [1, 2]
micro_batch = [1, 2, 4]

[objectives]
step_time_s = "min"
mfu = "max"

[sampler]
kind = "{sampler}"
trials = {trials}
batch_size = {batch_size}

[backend]
name = "{backend}"

[executor]
kind = "{executor}"
"""


def run_one(args: argparse.Namespace, executor: str, folder: Path) -> dict[str, Any]:
    """Run the benchmark study on one executor; its timings and counts."""
    text = STUDY.format(
        executor=executor,
        model=args.model,
        system=args.system,
        sampler=args.sampler,
        trials=args.trials,
        batch_size=args.batch_size,
        backend=args.backend,
    )
    spec = parse_study(text, folder / f"bench-{executor}.toml")
    startup: list[float] = []

    def factory(job: EvaluationJob) -> BaseExecutor:
        start = time.perf_counter()
        made = create_executor(
            spec.executor, job, kind=ExecutorKind(executor), address=args.address
        )
        startup.append(time.perf_counter() - start)
        return made

    start = time.perf_counter()
    summary = Explorer(spec, out=folder / "out", executor_factory=factory).run()
    total = time.perf_counter() - start
    progress = summary.progress
    return {
        "executor": executor,
        "backend": args.backend,
        "trials": progress.done,
        "ok": progress.ok,
        "infeasible": progress.infeasible,
        "failed": progress.failed,
        "startup_s": round(startup[0], 3),
        "run_s": round(progress.elapsed_s, 3),
        "total_s": round(total, 3),
        "trials_per_s": round(progress.rate_per_s, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run each executor, print a table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend", default="analytical", help="backend name or module:Class (default: analytical)"
    )
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--executors", default="ray,local", help="comma-separated: ray, local")
    parser.add_argument("--address", help="an existing Ray cluster (default: a local instance)")
    parser.add_argument("--model", default="llama3-8b")
    parser.add_argument("--system", default="h100-80gb")
    parser.add_argument("--sampler", default="random", choices=["random", "tpe", "nsga2", "grid"])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--quick", action="store_true", help="1,000 trials instead of 10,000")
    args = parser.parse_args(argv)
    if args.quick:
        args.trials = min(args.trials, 1_000)
    logging.basicConfig(level=logging.WARNING)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-explore-") as temporary:
        for executor in args.executors.split(","):
            results.append(run_one(args, executor.strip(), Path(temporary)))
    if not args.quick:
        written = Path(__file__).resolve().parent / "results" / "explore.json"
        written.parent.mkdir(exist_ok=True)
        written.write_text(json.dumps(results, indent=1))
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
