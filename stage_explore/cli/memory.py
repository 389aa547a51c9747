"""``stage memory``: the per-rank memory breakdown of a training configuration."""

from __future__ import annotations

import argparse
import json

from stage_core.lower.memory import memory_report
from stage_core.lower.program import lower
from stage_explore.cli.options import add_model_options, add_parallel_options, parse_workload

GIB = 2**30


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) <= 4:
        return ",".join(map(str, ranks))
    return f"{ranks[0]},{ranks[1]},…,{ranks[-1]} ({len(ranks)} ranks)"


def run(args: argparse.Namespace) -> int:
    model, parallel = parse_workload(args)
    programs = lower(model, parallel)
    report = memory_report(programs)
    if args.json:
        print(
            json.dumps(
                {
                    "model": model.name,
                    "parallel": parallel.to_dict(),
                    "ranks": [entry.to_dict() for entry in report],
                },
                indent=1,
            )
        )
        return 0
    print(
        f"{model.name}: {parallel.world_size} GPUs, {programs.workload.micro_batches} "
        "micro-batches per step, one program per pipeline stage"
    )
    columns = ("weights", "grads", "optim", "activ", "transient", "peak")
    header = f"{'stage':>5} " + " ".join(f"{c:>9}" for c in columns) + "  ranks"
    print(header + "\n" + "-" * len(header))
    for entry in report:
        values = (
            entry.weights_bytes,
            entry.gradients_bytes,
            entry.optimizer_bytes,
            entry.activations_bytes,
            entry.transient_bytes,
            entry.peak_bytes,
        )
        cells = " ".join(f"{v / GIB:9.2f}" for v in values)
        print(f"{entry.stage:>5} {cells}  {_ranks_text(list(entry.ranks))}")
    print("(GiB; activations: saved tensors of the micro-batches in flight at the schedule's peak)")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "memory",
        help="per-rank memory: weights, gradients, optimizer states, activations, peak",
        description="Print the per-rank memory breakdown of one training configuration.",
    )
    add_model_options(parser)
    add_parallel_options(parser)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)
