"""``stage memory``: the per-rank memory breakdown of a training configuration, or with
``--phase prefill|decode`` of a serving step (weights, KV cache, activation workspace per
pipeline stage, the largest step's)."""

from __future__ import annotations

import argparse
import json

from stage_core.lower.memory import memory_report
from stage_core.lower.program import lower
from stage_core.serving import (
    ServingMemory,
    kv_cache_bytes_per_token,
    lower_step,
    serving_memory,
)
from stage_explore.cli.options import add_model_options, add_parallel_options, parse_workload
from stage_explore.cli.serving import add_serving_options, serving_workload
from stage_explore.wording import counted

GIB = 2**30


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) <= 4:
        return ",".join(map(str, ranks))
    return f"{ranks[0]},{ranks[1]},…,{ranks[-1]} ({len(ranks)} ranks)"


def _run_serving(args: argparse.Namespace) -> int:
    model, config = serving_workload(args)
    rows = []
    for step in config.steps():
        for entry in serving_memory(lower_step(model, config, step)):
            rows.append(entry)
    worst: dict[int, ServingMemory] = {}
    for entry in rows:  # per stage, the step that needs the most
        if entry.stage not in worst or entry.total_bytes > worst[entry.stage].total_bytes:
            worst[entry.stage] = entry
    stages = [worst[stage] for stage in sorted(worst)]
    if args.json:
        payload = {
            "model": model.name, **config.to_dict(),
            "kv_cache_bytes_per_token": kv_cache_bytes_per_token(model, config.kv_bytes),
            "stages": [
                {
                    "stage": e.stage, "weight_bytes": e.weight_bytes,
                    "kv_cache_bytes": e.kv_cache_bytes, "activation_bytes": e.activation_bytes,
                    "peak_bytes": e.total_bytes,
                }
                for e in stages
            ],
        }  # fmt: skip
        print(json.dumps(payload, indent=1))
        return 0
    print(
        f"{model.name}, {config.phase}: batch {config.batch}, dp{config.dp} tp{config.tp} "
        f"pp{config.pp} ep{config.ep}, KV cache {config.kv_precision} "
        f"({kv_cache_bytes_per_token(model, config.kv_bytes):,} bytes per token for the model)"
    )
    print(f"{'stage':>5}  {'weights':>9}  {'KV cache':>9}  {'activations':>11}  {'peak GiB':>9}")
    for e in stages:
        print(
            f"{e.stage:>5}  {e.weight_bytes / GIB:>9.2f}  {e.kv_cache_bytes / GIB:>9.2f}  "
            f"{e.activation_bytes / GIB:>11.2f}  {e.total_bytes / GIB:>9.2f}"
        )
    return 0


def run(args: argparse.Namespace) -> int:
    if args.phase != "train":
        return _run_serving(args)
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
        f"{model.name}: {counted(parallel.world_size, 'GPU')}, "
        f"{counted(programs.workload.micro_batches, 'micro-batch')} per step, one program per "
        "pipeline stage"
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
    fp8 = max(entry.fp8_weights_bytes for entry in report)
    kind = str(parallel.precision).upper()  # FP8 or FP4
    if fp8:
        print(
            f"(weights include up to {fp8 / GIB:.2f} GiB of {kind} weight copies and scales per "
            f"rank, recipe {parallel.linear_recipe}, {kind} GEMMs {','.join(parallel.fp8_gemms)})"
        )
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "memory",
        help="per-rank memory: weights, gradients, optimizer states, activations, peak",
        description="Print the per-rank memory breakdown of one training configuration, or "
        "of a serving step with --phase prefill|decode.",
    )
    add_model_options(parser)
    add_parallel_options(parser)
    add_serving_options(parser, steady_state=False)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)
