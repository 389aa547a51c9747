"""``stage eval``: evaluate one design point — step time, its breakdown, MFU, memory.

The model and parallel options are those of every subcommand (:mod:`stage_explore.cli.options`);
``--system`` is a preset name or a system TOML file; ``--backend`` a built-in backend
(``analytical``, ``astra-sim``), a registered one or ``module:Class``
(:func:`stage_explore.search.backends.resolve_backend`). ``--compare`` evaluates the point with
the analytical backend too and shows both. The text output is a table; ``--json`` prints
:meth:`Evaluation.to_dict` (plus ``model``, ``system``, ``parallel`` and, with ``--compare``,
``analytical`` and ``comparison``: the gap split into compute and exposed communication with
its causes, :mod:`stage_explore.astrasim.compare`); NaN (the times of a point that was not
simulated) is printed as ``null``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import TYPE_CHECKING, Any

from stage_core.errors import ConfigError
from stage_core.lower.optimizer_kinds import OPTIMIZERS
from stage_explore.analytical.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS
from stage_explore.cli.options import add_model_options, add_parallel_options, parse_workload
from stage_explore.cli.serving import add_serving_options, run_serving
from stage_explore.evaluation import Evaluation
from stage_explore.wording import counted

if TYPE_CHECKING:
    from stage_core.models.spec import ModelSpec
    from stage_core.parallel.config import ParallelConfig
    from stage_explore.analytical.backend import AnalyticalBackend
    from stage_explore.astrasim.compare import GapExplanation
    from stage_explore.system.model import System

GIB = 2**30


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="evaluate one configuration: step time, breakdown, MFU, memory",
        description="Evaluate one (model, parallel config, system) point with a backend and "
        "print its step time, the breakdown of that time, MFU/HFU, throughput and peak memory.",
    )
    add_model_options(parser)
    add_parallel_options(parser)
    add_serving_options(parser)
    parser.add_argument(
        "--system",
        required=True,
        metavar="PRESET_OR_FILE",
        help="a system preset (e.g. a100-80gb) or a system .toml file",
    )
    parser.add_argument(
        "--backend",
        default="analytical",
        metavar="NAME",
        help="analytical (default), astra-sim (the binary named by $ASTRA_SIM_BIN, else "
        "AstraSim_Analytical_Congestion_Unaware, or _Aware, on PATH; docs/astra-sim.md), a "
        "registered name or module:Class",
    )
    parser.add_argument(
        "--framework",
        default=None,
        metavar="NAME",
        help="training framework profile of the analytical backend: "
        + ", ".join(
            f"{name} (default)" if name == DEFAULT_FRAMEWORK else name
            for name in sorted(FRAMEWORKS)
        ),
    )
    parser.add_argument(
        "--moe-load-imbalance",
        type=float,
        default=None,
        metavar="F",
        help="MoE routing imbalance for the analytical backend: max/mean tokens per "
        "expert-parallel rank (>= 1; default 1, balanced); the busiest rank's routed experts and "
        "dispatch/combine bytes are charged at F",
    )
    parser.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        default=None,
        help="optimizer for the analytical backend (its state per parameter and update bytes): "
        "adam (default: fp32 master and two fp32 moments, 12 bytes), adam_bf16_moments "
        "(DeepSeek-V3's BF16 moments, 8), sgd_momentum (one momentum buffer, 8), sgd (4)",
    )
    parser.add_argument(
        "--moe-deepep",
        action="store_true",
        help="MoE dispatch on DeepEP for the analytical backend (Megatron --moe-enable-deepep): "
        "a token crosses the scale-out network once per remote node holding one of its experts",
    )
    parser.add_argument(
        "--moe-hybridep",
        action="store_true",
        help="MoE dispatch on HybridEP for the analytical backend (Megatron-Bridge "
        "moe_flex_dispatcher_backend='hybridep'): DeepEP's traffic at HybridEP's published "
        "rates (B200, GB200 NVL72, H100 InfiniBand; else the link's), on 16 SMs",
    )
    parser.add_argument(
        "--astra-sim-variant",
        choices=("unaware", "aware"),
        default=None,
        help="ASTRA-sim build for --backend astra-sim: unaware (default, any network) or "
        "aware (congestion-aware, 1-D networks only)",
    )
    parser.add_argument(
        "--astra-sim-compute",
        choices=("roofline", "kernels"),
        default=None,
        help="compute policy for --backend astra-sim: roofline (default: every kernel at the "
        "roofline peak) or kernels (each compute node replays the analytical per-kernel "
        "time as duration_micros, roofline off)",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also evaluate with the analytical backend and show both (needs another --backend)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stage_explore.search.backends import create_backend, resolve_backend
    from stage_explore.system import load_system

    if args.phase != "train":
        return run_serving(args)
    if args.compare and args.backend == "analytical":
        raise ConfigError("--compare needs a non-analytical --backend (e.g. --backend astra-sim)")
    model, parallel = parse_workload(args)
    system = load_system(args.system)
    options: dict[str, Any] = {} if args.framework is None else {"framework": args.framework}
    overrides: dict[str, Any] = {}
    if args.moe_load_imbalance is not None:
        imbalance = args.moe_load_imbalance  # the flag named, not a profile's key (s33 review6)
        if not (math.isfinite(imbalance) and imbalance >= 1):
            raise ConfigError(
                "--moe-load-imbalance: expected a finite number >= 1 (max/mean tokens per "
                f"expert-parallel rank; 1 is balanced), but got {imbalance:g}"
            )
        overrides["moe_load_imbalance"] = imbalance
    if args.optimizer is not None:
        overrides["optimizer"] = args.optimizer
    if args.moe_deepep:
        overrides["moe_deepep"] = True
    if args.moe_hybridep:
        overrides["moe_hybridep"] = True
    for flag, name in (
        ("--moe-load-imbalance", "moe_load_imbalance"),
        ("--moe-deepep", "moe_deepep"),
        ("--moe-hybridep", "moe_hybridep"),
        ("--optimizer", "optimizer"),
    ):
        if name in overrides and args.backend != "analytical" and not args.compare:
            raise ConfigError(
                f"{flag} applies to the analytical backend, but got --backend "
                f"{args.backend} (add --compare to evaluate the analytical model beside it)"
            )
    if overrides:
        options["overrides"] = overrides
    if options and args.backend != "analytical" and not args.compare:
        raise ConfigError(
            f"--framework applies to the analytical backend, but got --backend {args.backend} "
            "(add --compare to evaluate the analytical model beside it)"
        )
    backend_options: dict[str, Any] = options if args.backend == "analytical" else {}
    if args.astra_sim_variant is not None:
        if args.backend != "astra-sim":
            raise ConfigError(
                f"--astra-sim-variant applies to --backend astra-sim, but got --backend "
                f"{args.backend}"
            )
        backend_options = {"variant": args.astra_sim_variant}
    if args.astra_sim_compute is not None:
        if args.backend != "astra-sim":
            raise ConfigError(
                f"--astra-sim-compute applies to --backend astra-sim, but got --backend "
                f"{args.backend}"
            )
        backend_options = {**backend_options, "compute": args.astra_sim_compute}
    backend = create_backend(resolve_backend(args.backend), backend_options)
    preflight = getattr(backend, "preflight", None)
    if callable(preflight):
        from stage_explore.astrasim.discovery import EVAL_HOW, BinaryNotFound

        try:
            preflight()
        except BinaryNotFound as error:  # its own end tells a study's [backend.options]
            raise ConfigError(f"{error.detail}; {EVAL_HOW}") from None
    slow = args.backend != "analytical" and sys.stderr.isatty()
    if slow:  # ASTRA-sim: seconds to many minutes as the ranks grow, with nothing to show
        where = f"stage eval: running {args.backend} on {counted(parallel.world_size, 'rank')} …"
        print(where, end="", file=sys.stderr, flush=True)
    started = time.perf_counter()
    result = backend.evaluate(model, parallel, system)
    if slow:
        print(f" {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    reference = None
    gap = None
    if args.compare:
        from stage_explore.analytical.backend import AnalyticalBackend

        analytical = create_backend(AnalyticalBackend, options)
        assert isinstance(analytical, AnalyticalBackend)
        reference = analytical.evaluate(model, parallel, system)
        gap = _explain(backend, result, reference, analytical, model, parallel, system)
    _warn_placement(result if reference is None else reference)
    if args.json:
        payload = {
            "model": model.name,
            "system": system.name,
            "parallel": parallel.to_dict(),
            **result.to_dict(),
        }
        if reference is not None:
            payload["analytical"] = reference.to_dict()
        if gap is not None:
            payload["comparison"] = gap.to_dict()
        print(json.dumps(_finite(payload), indent=1))
        return 0
    # the layers and sequence the step is timed at: a default the user did not type (a model
    # file's max_position_embeddings, a flavor's own sequence) was shown nowhere (s33 review6)
    shape = f"{counted(model.layers, 'layer')}, seq_len {parallel.sequence_length(model)}"
    print(f"{model.name} on {system.name}: {_describe(parallel.to_dict())}; {shape}")
    columns = [(result.backend or args.backend, result)]
    if reference is not None:
        columns.append(("analytical", reference))
    print(format_table(columns))
    if gap is not None:
        from stage_explore.astrasim.compare import format_gap

        print(format_gap(gap))
    for name, evaluation in columns:
        if not evaluation.feasible:
            print(f"infeasible ({name}): {evaluation.reason}")
    return 0


def _warn_placement(result: Evaluation) -> None:
    """Print the analytical evaluation's placement note (:mod:`~stage_explore.system.placement`:
    a partly used scale-up domain, groups straddling domains unevenly) as one warning line on
    stderr."""
    from stage_explore.system.placement import PLACEMENT_KEY

    note = result.extra.get(PLACEMENT_KEY)
    if note:
        print(f"stage eval: warning: {note}", file=sys.stderr)


def _explain(
    backend: object,
    result: Evaluation,
    reference: Evaluation,
    analytical: AnalyticalBackend,
    model: ModelSpec,
    parallel: ParallelConfig,
    system: System,
) -> GapExplanation | None:
    """ASTRA-sim against the analytical model (``reference``: ``analytical``'s evaluation, under
    its timing policy; the same step in its trace mode for the slowest rank's kernels), split
    into compute and waiting, with causes (:mod:`stage_explore.astrasim.compare`); None for
    other backends or unsimulated points."""
    from stage_core.lower.program import lower
    from stage_explore.analytical.parts import compute_dtype
    from stage_explore.analytical.trace_mode import TraceStep, trace_step
    from stage_explore.astrasim import AstraSimBackend
    from stage_explore.astrasim.compare import explain_gap

    if not isinstance(backend, AstraSimBackend) or not math.isfinite(result.step_time_s):
        return None
    if not math.isfinite(reference.step_time_s):
        return None
    try:
        trace: TraceStep | ConfigError = trace_step(analytical, model, parallel, system)
    except ConfigError as error:  # a step the trace mode does not time: said in the text
        trace = error
    return explain_gap(
        result, reference, lower(model, parallel), system,
        dtype=compute_dtype(parallel, system), policy=analytical.policy, trace=trace,
        settings=backend.settings,
    )  # fmt: skip


def format_table(columns: list[tuple[str, Evaluation]]) -> str:
    """Headline figures, then the breakdown (seconds and share of the step), one column per
    backend."""
    rows: list[tuple[str, list[str]]] = [
        ("step time (s)", [_number(e.step_time_s, "{:.4f}") for _, e in columns]),
        ("MFU", [_number(e.mfu, "{:.1%}") for _, e in columns]),
        ("HFU", [_number(e.hfu, "{:.1%}") for _, e in columns]),
        ("tokens/s per GPU", [_number(e.tokens_per_s_per_gpu, "{:,.0f}") for _, e in columns]),
        ("peak memory (GiB)", [f"{e.peak_memory_bytes / GIB:.2f}" for _, e in columns]),
        ("memory capacity (GiB)", [f"{e.memory_capacity_bytes / GIB:.2f}" for _, e in columns]),
        ("feasible", ["yes" if e.feasible else "no" for _, e in columns]),
        ("GPUs", [str(e.num_gpus) for _, e in columns]),
    ]
    components: list[str] = []
    for _, evaluation in columns:
        components += [k for k in evaluation.breakdown if k not in components]
    if components:
        rows.append(("breakdown (s, % of step)", ["" for _ in columns]))
    for component in components:
        cells = []
        for _, evaluation in columns:
            seconds = evaluation.breakdown.get(component)
            step = evaluation.step_time_s
            if seconds is None:
                cells.append("-")
            elif math.isfinite(step) and step > 0:
                cells.append(f"{seconds:.4f} {seconds / step:6.1%}")
            else:
                cells.append(f"{seconds:.4f}")
        rows.append((f"  {component}", cells))
    header = ("", [name for name, _ in columns])
    width = max(len(label) for label, _ in (header, *rows))
    cell_width = max(len(cell) for _, cells in (header, *rows) for cell in cells)
    lines = []
    for index, (label, cells) in enumerate((header, *rows)):
        lines.append(label.ljust(width) + "  " + "  ".join(c.rjust(cell_width) for c in cells))
        if index == 0:
            lines.append("-" * len(lines[0]))
    return "\n".join(line.rstrip() for line in lines)


def _number(value: float, template: str) -> str:
    return template.format(value) if math.isfinite(value) else "n/a"


def _describe(parallel: dict[str, Any]) -> str:
    keys = ("dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch", "global_batch")
    text = " ".join(
        f"{k}={parallel[k]}" for k in keys if parallel[k] != 1 or k in ("dp", "tp", "pp")
    )
    if parallel.get("etp") is not None and parallel["etp"] != parallel["tp"]:
        text += f" etp={parallel['etp']}"
    if parallel.get("dp_shard") is not None:  # hybrid sharding (HSDP)
        text += f" dp_shard={parallel['dp_shard']}"
    if parallel.get("moe_dispatcher", "alltoall") != "alltoall":
        text += f" moe_dispatcher={parallel['moe_dispatcher']}"
    flags = [
        f"zero={parallel['zero']}" if parallel["zero"] else "",
        "sp" if parallel["sp"] else "",
        f"recompute={parallel['recompute']}"
        + (  # partial checkpointing, listed only when set (ParallelConfig.to_dict)
            f"({parallel['recompute_num_layers']} {parallel.get('recompute_method', 'block')})"
            if parallel.get("recompute_num_layers") is not None
            else ""
        ),
        f"schedule={parallel['schedule']}",
        parallel["precision"],
    ]
    return " ".join([text, *(f for f in flags if f)])


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
