"""``stage eval --phase prefill|decode|serve``: serving metrics of one configuration.

The model options are every subcommand's; the serving layout is ``--dp`` (data-parallel
attention), ``--tp``, ``--pp`` and ``--ep`` (experts over the dp ranks) with ``--precision``
for weights and GEMMs; the step is ``--batch`` sequences with ``--prompt-len`` (prefill,
``--chunk`` for chunked prefill), ``--context-len`` (decode: tokens already cached) or
``--prompt-len`` and ``--output-len`` (serve: a steady state of ``--batch`` running sequences,
co-located, or disaggregated with ``--prefill-instances`` and ``--decode-instances``).
Training-only options (cp, sp, ZeRO, recompute, schedules, micro-batches, framework profile
options) are refused with a one-line error, and so are serving options with ``--phase train``
and the steady state's options with one step (:func:`check_phase_options`). Only the
analytical backend evaluates serving so far.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from stage_core.errors import ConfigError, InfeasibleError
from stage_core.models import ModelSpec, load_model
from stage_core.serving import Phase, ServingConfig

PHASES = ("train", "prefill", "decode", "serve")
GIB = 2**30

#: Training options and their defaults (``stage eval``'s, ``stage memory``'s and ``stage
#: trace``'s parsers; a test checks them): a serving step refuses other values.
_TRAINING_ONLY: dict[str, Any] = {
    "seq_len": None, "mtp_layers": None, "dropout": None, "cp": 1, "dp_shard": None,
    "etp": None, "moe_dispatcher": "alltoall", "sp": False, "zero": 0, "recompute": "none",
    "recompute_modules": "", "recompute_num_layers": None, "recompute_method": "block",
    "schedule": "1f1b", "vpp": 1, "microbatch_group_size_per_virtual_pipeline_stage": None,
    "micro_batch": 1, "global_batch": None,
    "cp_style": "allgather", "fp8_recipe": "delayed", "fp8_gemms": "fprop,dgrad,wgrad",
    "pp_layers": None, "pp_first_layers": None, "pp_last_layers": None, "pp_split": "auto",
    "pp_layout": "",
    "fp32_grads": True, "framework": None, "moe_load_imbalance": None, "moe_deepep": False,
    "moe_hybridep": False,
    "astra_sim_variant": None, "astra_sim_compute": None, "compare": False,
    "fp8_param_gather": False, "compute": "roofline", "optimizer": None,
}  # fmt: skip
#: Serving options and their defaults: a training step (``--phase train``) refuses other values.
_SERVING_ONLY: dict[str, Any] = {
    "batch": 1, "prompt_len": 0, "context_len": None, "chunk": 0, "kv_precision": "bf16",
    "two_batch_overlap": False, "output_len": 0, "memory_utilization": 0.9,
    "prefill_instances": 0, "decode_instances": 1,
}  # fmt: skip
#: Options of the steady state alone (``--phase serve``): a single step refuses other values.
_SERVE_ONLY = ("output_len", "prefill_instances", "decode_instances")
#: Serving options a phase ignores, with the phases that read them and what the phase reads
#: instead: a decode step runs over ``context_len`` cached tokens (no prompt, no chunk), the
#: steady state derives each step's cache from its prompt and output lengths (s22 review:
#: ``--phase decode --prompt-len 100000 --chunk 7`` printed the plain decode step's figures).
_PHASE_IGNORES: dict[str, dict[str, str]] = {
    "decode": {
        "prompt_len": "prefill or serve (a decode step runs over --context-len cached tokens)",
        "chunk": "prefill or serve (a decode step generates one token per sequence)",
    },
    "serve": {
        "context_len": "prefill or decode (the steady state's caches follow from --prompt-len "
        "and --output-len)",
    },
}


def _given(args: argparse.Namespace, names: Any, defaults: dict[str, Any]) -> list[str]:
    """``--flag=value`` of each of ``names`` whose value in ``args`` is not the default (an
    option the parser lacks counts as the default)."""
    return [
        f"--{name.replace('_', '-')}={getattr(args, name)!r}"
        for name in names
        if getattr(args, name, defaults[name]) != defaults[name]
    ]


def check_phase_options(args: argparse.Namespace) -> None:
    """Refuse an option the chosen ``--phase`` would ignore (a training option with a serving
    phase, a serving option with a training step, a steady-state option with one step) and
    serving counts out of range, each as a one-line :class:`ConfigError` naming the flag."""
    phase = getattr(args, "phase", "train")
    if phase == "train":
        given = _given(args, _SERVING_ONLY, _SERVING_ONLY)
        if given:
            raise ConfigError(
                f"{given[0].split('=')[0]} is a serving option: expected --phase prefill, "
                f"decode or serve with it, but got {given[0]} with --phase train"
            )
        return
    given = _given(args, _TRAINING_ONLY, _TRAINING_ONLY)
    if given:
        raise ConfigError(
            f"{given[0].split('=')[0]} is a training option, but got {given[0]} with --phase "
            f"{phase}"
        )
    if phase != "serve":
        given = _given(args, _SERVE_ONLY, _SERVING_ONLY)
        if given:
            raise ConfigError(
                f"{given[0].split('=')[0]} applies to --phase serve (a steady state), but got "
                f"{given[0]} with --phase {phase}"
            )
    ignored = _PHASE_IGNORES.get(phase, {})
    given = _given(args, ignored, _SERVING_ONLY)
    if given:
        flag = given[0].split("=")[0]
        raise ConfigError(
            f"{flag} applies to --phase {ignored[flag[2:].replace('-', '_')]}, but got "
            f"{given[0]} with --phase {phase}"
        )
    prefill, decode = getattr(args, "prefill_instances", 0), getattr(args, "decode_instances", 1)
    if prefill < 0 or decode < 1:
        raise ConfigError(
            "--prefill-instances must be >= 0 (0: co-located) and --decode-instances >= 1, "
            f"but got (prefill_instances={prefill}, decode_instances={decode})"
        )
    if prefill == 0 and decode != 1:  # it was ignored (s24 review): one instance's figures
        raise ConfigError(
            "--decode-instances sizes the decode pool of a disaggregated serve (with "
            "--prefill-instances ≥ 1); co-located instances each serve their own requests, "
            f"so one instance's figures per GPU hold for any number, but got --decode-instances "
            f"{decode} without --prefill-instances"
        )
    if getattr(args, "two_batch_overlap", False) and args.dp > 0 and (args.batch // args.dp) % 2:
        raise ConfigError(
            "--two-batch-overlap needs an even number of sequences per dp rank (two halves), "
            f"but got --batch {args.batch} over --dp {args.dp}"
        )


def add_serving_options(parser: argparse.ArgumentParser, steady_state: bool = True) -> None:
    """The serving options of ``stage eval`` (``steady_state``: with ``--phase serve`` and its
    options) and of ``stage trace`` (one step: prefill or decode)."""
    phases = PHASES if steady_state else PHASES[:3]
    group = parser.add_argument_group(f"serving (--phase {', '.join(phases[1:])})")
    group.add_argument(
        "--phase", choices=phases, default="train",
        help="a training step (default), a prefill step, a decode step"
        + (", or a steady serving state" if steady_state else ""),
    )  # fmt: skip
    group.add_argument("--batch", type=int, default=1, help="sequences per step (default: 1)")
    group.add_argument("--prompt-len", type=int, default=0, help="prompt tokens per sequence")
    group.add_argument(
        "--context-len", type=int, default=None,
        help="tokens already in each sequence's KV cache (decode: required; prefill: default 0)",
    )  # fmt: skip
    group.add_argument("--chunk", type=int, default=0, help="chunked prefill: tokens per step")
    group.add_argument(
        "--kv-precision", choices=("bf16", "fp16", "fp8"), default="bf16",
        help="KV-cache element type (default: bf16)",
    )  # fmt: skip
    if not steady_state:
        return
    group.add_argument(
        "--two-batch-overlap", action="store_true",
        help="run each step as two micro-batches whose communication overlaps the other's "
        "compute (DeepSeek's dual micro-batch overlap; needs an even batch per dp rank)",
    )  # fmt: skip
    group.add_argument("--output-len", type=int, default=0, help="generated tokens per request")
    group.add_argument(
        "--memory-utilization", type=float, default=0.9,
        help="share of GPU memory the server may use (default: 0.9, vLLM's default)",
    )  # fmt: skip
    group.add_argument(
        "--prefill-instances", type=int, default=0,
        help="serve: a separate prefill pool of this many instances (disaggregation)",
    )  # fmt: skip
    group.add_argument(
        "--decode-instances", type=int, default=1,
        help="serve: decode instances beside the prefill pool (default: 1)",
    )  # fmt: skip


def serving_config(args: argparse.Namespace, model: ModelSpec) -> ServingConfig:
    """The :class:`ServingConfig` the options describe (training-only options refused)."""
    check_phase_options(args)
    phase = Phase.DECODE if args.phase == "serve" else Phase(args.phase)
    if args.phase == "serve" and (args.prompt_len < 1 or getattr(args, "output_len", 0) < 1):
        raise ConfigError(
            "--phase serve needs --prompt-len and --output-len ≥ 1, but got "
            f"(prompt_len={args.prompt_len}, output_len={args.output_len})"
        )
    if args.phase == "decode" and args.context_len is None:  # s31 review4: it ran at 0
        raise ConfigError(
            "--phase decode needs --context-len (the tokens already in each sequence's KV "
            "cache, e.g. --context-len 4096; 0 for an empty cache), but got none"
        )
    context = 0 if args.context_len is None else args.context_len
    return ServingConfig(
        phase=phase, batch=args.batch, prompt_len=args.prompt_len, context_len=context,
        chunk=args.chunk, kv_precision=args.kv_precision, precision=args.precision,
        dp=args.dp, tp=args.tp, pp=args.pp, ep=args.ep,
        two_batch_overlap=getattr(args, "two_batch_overlap", False),
    )  # fmt: skip


def serving_workload(args: argparse.Namespace) -> tuple[ModelSpec, ServingConfig]:
    """The model (with ``--layers``) and the serving configuration the options describe."""
    from stage_explore.cli.options import with_layers

    model = with_layers(load_model(args.model), args.layers)
    return model, serving_config(args, model)


def run_serving(args: argparse.Namespace) -> int:
    from stage_explore.analytical.backend import AnalyticalBackend
    from stage_explore.analytical.serving import (
        RequestMix,
        evaluate_decode,
        evaluate_prefill,
        evaluate_serve,
    )
    from stage_explore.system import load_system
    from stage_explore.system.placement import PLACEMENT_KEY

    if args.backend != "analytical":
        raise ConfigError(
            f"--phase {args.phase} is evaluated by the analytical backend only, but got "
            f"--backend {args.backend}"
        )
    model, config = serving_workload(args)
    system = load_system(args.system)
    backend = AnalyticalBackend()
    utilization = args.memory_utilization
    payload: dict[str, Any] = {"model": model.name, "system": system.name, **config.to_dict()}
    try:
        if args.phase == "prefill":
            result = evaluate_prefill(backend, model, config, system, utilization)
        elif args.phase == "decode":
            result = evaluate_decode(backend, model, config, system, utilization)
        else:
            result = evaluate_serve(
                backend, model, config, system,
                RequestMix(prompt_len=args.prompt_len, output_len=args.output_len),
                prefill=config if args.prefill_instances else None,
                prefill_instances=args.prefill_instances,
                decode_instances=args.decode_instances, memory_utilization=utilization,
            )  # fmt: skip
    except InfeasibleError as error:
        payload.update(feasible=False, reason=error.reason)
        print(json.dumps(payload, indent=1) if args.json else f"infeasible: {error.reason}")
        return 0
    payload.update(result.to_dict())
    note = result.extra.get(PLACEMENT_KEY)
    if note:  # as stage eval warns of a training step's (system/placement.py)
        print(f"stage eval: warning: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(payload, indent=1))
        return 0
    print(_table(model.name, system.name, config, payload))
    if not result.feasible:
        print(f"infeasible: {result.reason}")
    return 0


def _table(model: str, system: str, config: ServingConfig, p: dict[str, Any]) -> str:
    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:,.2f} ms"

    rows = [
        ("time to first token", seconds(p["time_to_first_token_s"])),
        ("time per output token", seconds(p["time_per_output_token_s"])),
        ("tokens/s", f"{p['tokens_per_s']:,.0f}"),
        ("tokens/s per GPU", f"{p['tokens_per_s_per_gpu']:,.0f}"),
        ("memory per GPU (GiB)", f"{p['peak_memory_bytes'] / GIB:.2f}"),
        ("  weights / KV cache / activations (GiB)",
         f"{p['weight_bytes'] / GIB:.2f} / {p['kv_cache_bytes'] / GIB:.2f} / "
         f"{p['activation_bytes'] / GIB:.2f}"),
        ("largest batch that fits", f"{p['max_batch']:,}"),
        ("compute time memory-bound", f"{p['memory_bound_fraction']:.0%}"),
    ]  # fmt: skip
    rows += [(f"  {k} (s)", f"{v:.6f}") for k, v in p["breakdown"].items() if math.isfinite(v)]
    rows += [
        (f"  {k}", f"{v:.4g}" if isinstance(v, float) else str(v)) for k, v in p["extra"].items()
    ]
    layout = f"dp{config.dp} tp{config.tp} pp{config.pp} ep{config.ep}"
    head = f"{model} on {system}, {p['phase']}: batch {config.batch}, {layout}"
    width = max(len(r[0]) for r in rows)
    return "\n".join([head, *(f"{name:<{width}}  {value}" for name, value in rows)])
