"""The levelled analytical mode against the trace mode, per framework profile and configuration.

For each profile and each small configuration (2 layers, sequence 1,024, a100-80gb unless
``--system``), evaluates the step with the analytical backend (the levelled mode) and with
:func:`~stage_explore.analytical.trace_mode.trace_step` (the same program, policy and
per-instruction costs, a whole step's traces run by the trace simulator), and prints the end of
the optimizer in both, their relative difference, and the step times (the trace runs the
ZeRO-1/2 parameter gather whole after the optimizer). ``--one-slot`` runs the traces without
the policy's ``side_streams`` (gradient buckets and ZeRO in the blocks' communication slot).
docs/analytical.md, "The timing engine" ("Levelled against trace") quotes its output; the
contract is ``tests/explore/test_trace_mode.py``.

Run: ``python benchmarks/trace_mode_gap.py [--system NAME] [--one-slot]``.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from stage_core.lower.program_node import OPTIMIZER
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.trace_mode import trace_step
from stage_explore.system import load_system

CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("gpt-tp2-dp2-sp", "megatron-gpt-1.7b", dict(tp=2, dp=2, sp=True, global_batch=8)),
    ("gpt-tp4-dp2", "megatron-gpt-1.7b", dict(tp=4, dp=2, global_batch=8)),
    ("llama-zero1", "llama3-8b", dict(tp=2, dp=2, sp=True, zero=1, global_batch=8)),
    ("llama-zero2", "llama3-8b", dict(tp=1, dp=4, zero=2, global_batch=8)),
    ("llama-zero3", "llama3-8b", dict(tp=1, dp=4, zero=3, global_batch=8)),
    ("llama-hsdp", "llama3-8b", dict(tp=1, dp=4, dp_shard=2, zero=3, global_batch=8)),
    ("llama-selective", "llama3-8b",
     dict(tp=2, dp=2, sp=True, recompute=Recompute.SELECTIVE, global_batch=8)),
    ("llama-full", "llama3-8b",
     dict(tp=2, dp=2, sp=True, recompute=Recompute.FULL, global_batch=8)),
    ("mixtral-ep2", "mixtral-8x7b", dict(tp=2, dp=2, ep=2, sp=True, global_batch=4)),
    ("deepseek-ep2", "deepseek-v2-lite", dict(tp=2, dp=2, ep=2, sp=True, global_batch=4)),
    ("gpt-pp2", "megatron-gpt-1.7b", dict(tp=2, pp=2, global_batch=8)),
]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", default="a100-80gb")
    parser.add_argument("--one-slot", action="store_true", help="side_streams off in traces")
    args = parser.parse_args()
    system = load_system(args.system)
    print(f"{'profile':18} {'case':16} {'levelled':>10} {'trace':>10} {'relative':>10}  step")
    for framework in sorted(FRAMEWORKS):
        backend = AnalyticalBackend(framework=framework)
        for name, flavor, kwargs in CASES:
            model = get_flavor(flavor).with_overrides(layers=2, seq_len=1024)
            parallel = ParallelConfig(**kwargs)
            evaluation = backend.evaluate(model, parallel, system)
            tracer = backend
            if args.one_slot:
                tracer = AnalyticalBackend(framework=framework)
                tracer.policy = replace(tracer.policy, side_streams=False)
            traced = trace_step(
                tracer, model, parallel, system, record_nodes=True, gathers_ahead=False
            )
            levelled = evaluation.step_time_s - evaluation.breakdown.get("parameter_gather", 0.0)
            ends = max(traced.end_of(rank, OPTIMIZER) for rank in traced.result.ranks)
            print(
                f"{framework:18} {name:16} {levelled:10.6f} {ends:10.6f} "
                f"{(ends - levelled) / levelled:+10.2e}  {evaluation.step_time_s:.6f} / "
                f"{traced.step_time_s:.6f}"
            )


if __name__ == "__main__":
    main()
