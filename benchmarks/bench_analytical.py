"""Analytical backend throughput: full evaluations per second on one core, study-like sweep.

The sweep is what a study of GPT-3-175B on DGX A100 80 GB explores: 10,000 distinct valid
candidates drawn at random (seeded) from

- GPUs ∈ {512, 1024, 2048} (dp = GPUs / (tp·pp)), global batch 1536 sequences of 2048 tokens
  (GPT-3's);
- tp ∈ {1, 2, 4, 8}, pp ∈ {1, 2, 4, 8, 16}, micro-batch ∈ {1, 2, 4}, sp on/off;
- recompute ∈ {none, selective, full}, ZeRO ∈ {0, 1, 2, 3};
- schedule ∈ {1f1b, gpipe, interleaved with vpp 2, 3 or 4};

(invalid combinations — pp·vpp not dividing 96 layers, micro-batches not divisible by pp for
the interleaved schedule, … — are skipped while drawing, as a study's sampler would; the space
has 11,808 valid points, so 10,000 distinct ones cover most of it). Every
candidate is evaluated once by a fresh :class:`AnalyticalBackend` in a fresh process: that is
the "cold" rate a study sees — it includes the generator's one-off symbolic derivation of each
block kind, and the backend's memos fill as it goes (a block kind, a stage class, a schedule
shape is computed once and shared by later candidates). The memo statistics after that pass are
reported; then a second fresh backend in the same process (the generator's pure, process-wide
memos warm) and a second pass of the first backend (everything memoised) are timed for
reference. ``ParallelConfig`` construction (validation included) is timed apart: a study builds
one per trial, outside ``evaluate``. Every pass runs under the explorer worker's garbage policy
(:class:`~stage_explore.search.worker.GarbagePolicy`: what survived is frozen when the policy
is created, after the 1st, 2nd, 4th, … evaluation and every 256), as a study's worker does;
``--no-freeze`` times the interpreter's default.

Run: ``python benchmarks/bench_analytical.py [--quick] [--candidates N] [--profile] [--no-freeze]``;
a full run (10,000 candidates, the garbage policy on) writes ``benchmarks/results/analytical.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import os
import pstats
import random
import sys
import time
from pathlib import Path
from typing import Any

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Precision
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.search.worker import GarbagePolicy
from stage_explore.system import load_system

HERE = Path(__file__).resolve().parent
MODEL = "gpt3-175b"
SYSTEM = "a100-80gb"
SPACE: dict[str, tuple[Any, ...]] = {
    "gpus": (512, 1024, 2048),
    "global_batch": (1536,),
    "tp": (1, 2, 4, 8),
    "pp": (1, 2, 4, 8, 16),
    "micro_batch": (1, 2, 4),
    "sp": (False, True),
    "recompute": ("none", "selective", "full"),
    "zero": (0, 1, 2, 3),
    "schedule": (
        ("1f1b", 1),
        ("gpipe", 1),
        ("interleaved", 2),
        ("interleaved", 3),
        ("interleaved", 4),
    ),
}


def candidates(count: int, seed: int = 0) -> list[ParallelConfig]:
    """``count`` distinct valid configs drawn uniformly from :data:`SPACE`."""
    model = get_flavor(MODEL)
    rng = random.Random(seed)
    seen: set[ParallelConfig] = set()
    result: list[ParallelConfig] = []
    attempts = 0
    while len(result) < count and attempts < 100 * count:
        attempts += 1
        pick = {name: rng.choice(values) for name, values in SPACE.items()}
        tp, pp = pick["tp"], pick["pp"]
        if pick["gpus"] % (tp * pp):
            continue
        schedule, vpp = pick["schedule"]
        if schedule == "interleaved" and pp == 1:
            continue
        try:
            config = ParallelConfig(
                dp=pick["gpus"] // (tp * pp),
                tp=tp,
                pp=pp,
                micro_batch=pick["micro_batch"],
                global_batch=pick["global_batch"],
                sp=pick["sp"],
                recompute=pick["recompute"],
                zero=pick["zero"],
                schedule=schedule,
                vpp=vpp,
                precision=Precision.BF16,
            )
            config.validate(model)
        except ConfigError:
            continue
        if config not in seen:
            seen.add(config)
            result.append(config)
    return result


def run(count: int = 10_000, profile: bool = False, freeze: bool = True) -> dict[str, Any]:
    model, system = get_flavor(MODEL), load_system(SYSTEM)
    configs = candidates(count)
    fields = [f.name for f in dataclasses.fields(ParallelConfig)]
    arguments = [{name: getattr(c, name) for name in fields} for c in configs]
    start = time.perf_counter()
    for kwargs in arguments:
        ParallelConfig(**kwargs)
    build_s = (time.perf_counter() - start) / len(configs)

    cpu: dict[str, float] = {}  # the process's CPU seconds: what a shared machine distorts least

    garbage = GarbagePolicy() if freeze else None  # created: it freezes what exists

    def sweep(backend: AnalyticalBackend, name: str = "") -> tuple[float, list[Any]]:
        start, start_cpu = time.perf_counter(), time.process_time()
        results = []
        for config in configs:
            results.append(backend.evaluate(model, config, system))
            if garbage is not None:
                garbage.evaluated()
        cpu[name] = time.process_time() - start_cpu
        return time.perf_counter() - start, results

    backend = AnalyticalBackend()
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    cold, results = sweep(backend, "cold")  # fresh backend in a fresh process
    if profiler:
        profiler.disable()
    stats = backend.cache_stats()
    fresh, _ = sweep(AnalyticalBackend())  # fresh backend, the process's pure memos warm
    warm, _ = sweep(backend)  # every part memoised
    report: dict[str, Any] = {
        "sweep": f"{len(configs)} distinct valid {MODEL} candidates on {SYSTEM} "
        f"(space: {', '.join(f'{k}={list(v)}' for k, v in SPACE.items())})",
        "python": sys.version.split()[0],
        "candidates": len(configs),
        "feasible": sum(r.feasible for r in results),
        "infeasible_out_of_memory": sum(r.reason.startswith("out of memory") for r in results),
        "cold_evals_per_s": len(configs) / cold,
        "cold_total_s": cold,
        "cold_cpu_evals_per_s": len(configs) / cpu["cold"],
        "load_average_1min": os.getloadavg()[0],
        "garbage_policy": "freeze at start, at evaluations 1, 2, 4, …, 256, then every 256"
        if freeze
        else "interpreter default",
        "fresh_backend_warm_process_evals_per_s": len(configs) / fresh,
        "warm_evals_per_s": len(configs) / warm,
        "parallel_config_build_us": build_s * 1e6,
        "cache_after_cold_pass": stats,
    }
    if profiler:
        buffer = io.StringIO()
        pstats.Stats(profiler, stream=buffer).sort_stats("tottime").print_stats(25)
        report["profile"] = buffer.getvalue()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 candidates instead of 10,000")
    parser.add_argument("--candidates", type=int, default=None)
    parser.add_argument("--profile", action="store_true", help="cProfile the cold pass")
    parser.add_argument(
        "--no-freeze", action="store_true", help="the interpreter's default garbage collection"
    )
    args = parser.parse_args(argv)
    count = args.candidates or (2_000 if args.quick else 10_000)
    report = run(count, args.profile, not args.no_freeze)
    profile = report.pop("profile", None)
    for name, value in report.items():
        if isinstance(value, float):
            value = f"{value:,.1f}"
        print(f"{name:>38}: {value}")
    if profile:
        print(profile)
    if not args.quick and args.candidates is None and not args.no_freeze:
        (HERE / "results").mkdir(exist_ok=True)
        (HERE / "results" / "analytical.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
