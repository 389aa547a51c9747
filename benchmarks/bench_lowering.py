"""Lowering at full depth: ``lower()`` and the per-stage trace templates of Llama-3-70B.

Llama-3-70B (80 layers) on dp 8 × tp 8 × pp 4 (256 GPUs) with sequence parallelism, global
batch 64 (8 micro-batches per pipeline). Measured in this process:

- ``lower`` cold (the first call derives the symbolic blocks: sharding, collectives, backward)
  and warm (the symbolic blocks are memoised; only binding to integers and scheduling remain);
- ``stage_nodes`` for every pipeline stage (one template per stage, shared by its 64 ranks),
  with the node count per stage and the nodes the whole trace set holds (templates × ranks);
- ``materialize`` of one rank per stage (groups and peers bound);
- peak RSS of the process (``resource.getrusage``).

Run: ``python benchmarks/bench_lowering.py``; ``main()`` is what ``benchmarks/run_all.py`` calls
(``--quick`` is accepted and changes nothing: the full-depth run takes about a second). The
figures are printed as a table and written to ``benchmarks/results/lowering.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from stage_core.lower.memory import memory_report
from stage_core.lower.nodes import materialize, stage_nodes
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig

T = TypeVar("T")
HERE = Path(__file__).resolve().parent


def _timed(function: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def _peak_rss_mib() -> float:
    # ru_maxrss is KiB on Linux, bytes on macOS
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def run(dp: int = 8, tp: int = 8, pp: int = 4, global_batch: int = 64) -> dict[str, object]:
    """One measurement; returns the figures the table prints."""
    model = get_flavor("llama3-70b")
    parallel = ParallelConfig(dp=dp, tp=tp, pp=pp, sp=True, global_batch=global_batch)
    programs, cold = _timed(lambda: lower(model, parallel))
    _, warm = _timed(lambda: lower(model, parallel))
    templates, nodes_seconds = _timed(lambda: [stage_nodes(programs, s) for s in programs.stages])
    mesh = programs.workload.mesh

    def materialize_one_rank_per_stage() -> int:
        return sum(
            len(list(materialize(template, programs.ranks(stage.stage)[0], mesh)))
            for stage, template in zip(programs.stages, templates, strict=True)
        )

    _, materialize_seconds = _timed(materialize_one_rank_per_stage)
    report, memory_seconds = _timed(lambda: memory_report(programs, with_ranks=False))
    ranks_per_stage = [len(programs.ranks(s.stage)) for s in programs.stages]
    return {
        "config": f"llama3-70b (80 layers) dp{dp} tp{tp} pp{pp} sp, B={global_batch}, "
                  f"m={programs.workload.micro_batches}, {parallel.world_size} GPUs",
        "lower_cold_s": cold,
        "lower_warm_s": warm,
        "stage_nodes_s": nodes_seconds,
        "materialize_s": materialize_seconds,
        "memory_report_s": memory_seconds,
        "nodes_per_stage": [len(t) for t in templates],
        "trace_nodes": sum(len(t) * n for t, n in zip(templates, ranks_per_stage, strict=True)),
        "peak_gib_per_stage": [round(e.peak_bytes / 2**30, 2) for e in report],
        "peak_rss_mib": _peak_rss_mib(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dp", type=int, default=8)
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--pp", type=int, default=4)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="accepted for run_all; no change")
    args = parser.parse_args(argv)
    result = run(args.dp, args.tp, args.pp, args.global_batch)
    print(f"lowering: {result['config']}")
    rows = [
        ("lower (cold: symbolic derivation + binding)", f"{result['lower_cold_s']:.3f} s"),
        ("lower (warm: binding + schedules)", f"{result['lower_warm_s']:.3f} s"),
        ("stage_nodes, all stages", f"{result['stage_nodes_s']:.3f} s"),
        ("materialize, one rank per stage", f"{result['materialize_s']:.3f} s"),
        ("memory_report", f"{result['memory_report_s']:.3f} s"),
        ("template nodes per stage", ", ".join(map(str, result["nodes_per_stage"]))),  # type: ignore[call-overload]
        ("nodes in the whole trace set", f"{result['trace_nodes']:,}"),
        ("peak memory per stage (GiB)", ", ".join(map(str, result["peak_gib_per_stage"]))),  # type: ignore[call-overload]
        ("peak RSS of this process", f"{result['peak_rss_mib']:.1f} MiB"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "lowering.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
