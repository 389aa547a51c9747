"""``stage trace``: build the trace set of one training configuration.

Formats: ``chakra`` (``<prefix>.<rank>.et`` per rank plus ``comm_group.json``, for ASTRA-sim),
``json`` (the same traces, readable, one file ``trace.json``) and ``symmetric`` (one program per
rank class plus the rank map, ``symmetric.json``). Progress goes to stderr on long runs; a
summary line ends every run.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from stage_core.chakra.check import astra_sim_node_problem
from stage_core.chakra.mapping import emitted_num_ops
from stage_core.chakra.writer import ClassColumns
from stage_core.errors import ConfigError
from stage_core.lower.emit import write_chakra, write_json, write_symmetric
from stage_core.lower.nodes import stage_nodes
from stage_core.lower.optimizer_kinds import OPTIMIZERS
from stage_core.lower.program import ProgramSet, lower
from stage_core.parallel.config import ParallelConfig
from stage_core.serving.trace import serving_program_set
from stage_core.trace import NodeKind
from stage_explore.analytical.fp8_roles import check_fp8_framework
from stage_explore.analytical.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS
from stage_explore.cli.meter import RankMeter
from stage_explore.cli.options import add_model_options, add_parallel_options, parse_workload
from stage_explore.cli.paths import path_argument
from stage_explore.cli.serving import add_serving_options, serving_workload
from stage_explore.wording import counted

if TYPE_CHECKING:
    from stage_explore.analytical.backend import AnalyticalBackend

#: ``--compute``: the ASTRA-sim backend's compute policies
#: (:data:`stage_explore.astrasim.kernel_times.COMPUTE_POLICIES`, imported when used).
ROOFLINE, KERNELS = "roofline", "kernels"


def astra_sim_problems(programs: ProgramSet) -> list[str]:
    """What would make ASTRA-sim abort or mistime the Chakra trace of ``programs`` (bytes units):
    each stage's template nodes, with the ``num_ops`` the writer emits, against
    :func:`stage_core.chakra.check.astra_sim_node_problem`."""
    problems = []
    for stage in programs.stages:
        for item in stage_nodes(programs, stage):
            node = item.node
            if node.kind is NodeKind.COMP:
                node = replace(node, flops=emitted_num_ops(node.flops, node.tensor_bytes))
            problem = astra_sim_node_problem(node)
            if problem is not None:
                problems.append(f"stage {stage.stage}: {problem}")
    return problems


def training_backend(args: argparse.Namespace, parallel: ParallelConfig) -> AnalyticalBackend:
    """The analytical backend whose profile (``--framework``, ``--fp8-param-gather``) decides
    which collectives carry FP8 data (:func:`~stage_explore.analytical.fp8_wire.fp8_wire`) and
    times the kernels under ``--compute kernels``; the option combinations that would be
    ignored are one-line errors."""
    if args.fp8_param_gather and (str(parallel.precision) != "fp8" or parallel.zero not in (1, 2)):
        raise ConfigError(
            "--fp8-param-gather applies to --precision fp8 with --zero 1 or 2 (the distributed "
            f"optimizer's parameter all-gather), but got --precision {parallel.precision} "
            f"--zero {parallel.zero}"
        )
    if args.fp8_param_gather and parallel.dp * parallel.cp == 1:  # s26 review: ignored there
        raise ConfigError(
            "--fp8-param-gather needs a parameter all-gather, i.e. dp·cp > 1 (ZeRO shards over "
            f"the dp·cp ranks), but got --dp {parallel.dp} --cp {parallel.cp}"
        )
    from stage_explore.analytical.backend import AnalyticalBackend

    overrides: dict[str, object] = {"fp8_param_gather": True} if args.fp8_param_gather else {}
    if args.optimizer is not None:  # the lowering's optimizer node and the kernels' timing
        overrides["optimizer"] = args.optimizer
    framework = DEFAULT_FRAMEWORK if args.framework is None else args.framework
    backend = AnalyticalBackend(framework=framework, overrides=overrides or None)  # a known name
    if str(parallel.precision) == "fp8":  # s26 review: a rowwise Transformer Engine trace
        profile = backend.framework  # was written, a run no framework makes (eval refuses it)
        check_fp8_framework(profile.name, profile.fp8_weight_cast_per_use, parallel.linear_recipe)
    if args.framework is not None and str(parallel.precision) != "fp8" and args.compute != KERNELS:
        # 6 Dec 2026 (s26 review): a 16-bit (or FP4) roofline trace is the same under every
        # profile, so --framework was taken and ignored
        raise ConfigError(
            "--framework applies to --precision fp8 (which collectives are sent in FP8) or "
            "--compute kernels (the kernel times), but got --framework "
            f"{args.framework} with --precision {parallel.precision} --compute {args.compute}"
        )
    return backend


def sixteen_bit_note(parallel: ParallelConfig, backend: AnalyticalBackend) -> str:
    """The line an FP8 / FP4 trace prints when no collective of it is sent in the low
    precision under ``backend``'s profile: the files then carry the 16-bit bytes, which the user
    should not have to find out by comparing them. It says what would send FP8
    (:meth:`~stage_explore.analytical.costing_compute.ComputeCosting.fp8_tp_gathered`,
    :mod:`~stage_explore.analytical.fp8_wire`); an FP4 run sends none under any profile."""
    precision = str(parallel.precision)
    head = (
        f"note: --precision {precision}: no collective of this layout is sent in {precision} "
        f"under the {backend.framework.name} profile, so the trace's collectives carry 16-bit "
        "bytes"
    )
    if precision != "fp8":  # NVFP4 gathers nothing in 4 bits, and --fp8-param-gather is fp8's
        return f"{head} (no profile sends {precision} data: the recipe's gathers are 16-bit)"
    return (
        f"{head} (FP8 is sent by the sequence-parallel all-gathers of --tp > 1 with --sp under "
        "--framework megatron-core (recipes delayed, tensorwise, mxfp8) or torchtitan "
        "(--fp8-recipe tensorwise), and by the parameter all-gathers with --fp8-param-gather)"
    )


def kernel_durations(
    args: argparse.Namespace, programs: ProgramSet, backend: AnalyticalBackend
) -> Callable[[list[ClassColumns]], list[ClassColumns]]:
    """The rank classes with every compute node's ``duration_micros`` from ``backend``'s
    per-kernel timer on ``--system`` (:mod:`~stage_explore.astrasim.kernel_times`, the ASTRA-sim
    backend's ``kernels`` policy)."""
    from stage_explore.astrasim.kernel_times import kernel_seconds, with_durations
    from stage_explore.system import load_system

    seconds = kernel_seconds(programs, load_system(args.system), backend)
    return lambda classes: with_durations(classes, programs, seconds)


def check_compute(args: argparse.Namespace) -> None:
    """``--compute kernels`` needs ``--system`` and Chakra output; ``--system`` alone would be
    ignored: one-line errors."""
    if args.compute == KERNELS and args.system is None:
        raise ConfigError(
            "--compute kernels needs --system PRESET_OR_FILE (the kernel times are the "
            "analytical backend's on that system), but got none"
        )
    if args.compute != KERNELS and args.system is not None:
        raise ConfigError(
            f"--system applies to --compute kernels, but got --system {args.system} with "
            f"--compute {args.compute}"
        )
    if args.compute == KERNELS and args.format != "chakra":
        raise ConfigError(
            "--compute kernels applies to --format chakra (Chakra's duration_micros), but got "
            f"--format {args.format}"
        )


def check_format_options(args: argparse.Namespace) -> None:
    """The options a ``--format`` (or ``--units``) writes nothing with, and ``--quiet`` beside
    ``--progress``, are one-line errors (s26 review: each was taken and ignored — ``--prefix``
    and ``--jobs`` name Chakra's files and writers, a symmetric file has no units, the
    ASTRA-sim check reads Chakra traces in bytes)."""
    if args.format != "chakra":
        for option, value in (("--prefix", args.prefix), ("--jobs", args.jobs)):
            if value is not None:
                raise ConfigError(
                    f"{option} applies to --format chakra (the <prefix>.<rank>.et files and "
                    f"their writer processes), but got {option} {value} with --format "
                    f"{args.format}"
                )
    if args.format == "symmetric" and args.units != "bytes":
        raise ConfigError(
            f"--units {args.units} applies to --format chakra or json (a symmetric file "
            "holds bytes and FLOPs), but got --format symmetric"
        )
    if args.target is not None and (args.format != "chakra" or args.units != "bytes"):
        raise ConfigError(
            f"--for {args.target} applies to Chakra traces in bytes (what ASTRA-sim reads), "
            f"but got --format {args.format} --units {args.units}"
        )
    if args.quiet and args.progress:
        raise ConfigError("--quiet and --progress contradict each other; pass one of them")


def run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    check_format_options(args)
    check_compute(args)
    if args.jobs is not None and args.jobs < 1:
        raise ConfigError(f"--jobs must be an integer >= 1, but got {args.jobs}")
    transform = None
    if args.phase == "train":
        model, parallel = parse_workload(args)
        from stage_explore.analytical.fp8_wire import fp8_wire

        backend = training_backend(args, parallel)
        lowered = lower(model, parallel, optimizer=backend.framework.optimizer)
        programs = fp8_wire(lowered, backend)  # FP8 bytes where they are sent
        if args.compute == KERNELS:  # first: a system that cannot run the precision says so
            transform = kernel_durations(args, programs, backend)
        if parallel.quantized and programs is lowered:
            print(sixteen_bit_note(parallel, backend), file=sys.stderr)
    else:  # a prefill or decode step (the last chunk of a chunked prefill)
        model, config = serving_workload(args)
        programs = serving_program_set(model, config)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    world = programs.workload.world_size
    problems: list[str] = []
    target = "astra-sim" if args.target is None else args.target
    if args.format == "chakra" and target == "astra-sim" and args.units == "bytes":
        problems = astra_sim_problems(programs)
    if args.format == "chakra":
        show = not args.quiet and sys.stderr.isatty() or args.progress
        written = write_chakra(
            programs,
            out,
            "workload" if args.prefix is None else args.prefix,
            units=args.units,
            progress=RankMeter(show, "writing rank files"),
            workers=args.jobs,
            stage_progress=RankMeter(show, "building and encoding pipeline stages"),
            transform=transform,
        )
        files, size = world + 1, written.byte_count
        detail = (
            f"{counted(written.node_count, 'node')}, "
            f"{counted(len(written.groups), 'communicator group')}"
        )
    elif args.format == "json":
        path = out / "trace.json"
        write_json(programs, path, units=args.units)
        files, size, detail = 1, path.stat().st_size, "readable JSON"
    else:
        size = write_symmetric(programs, out / "symmetric.json")
        files, detail = 1, counted(len(programs.stages), "rank class")
    seconds = time.perf_counter() - start
    print(
        f"{model.name}: {counted(world, 'rank')}, {counted(files, 'file')}, "
        f"{counted(size, 'byte')} ({detail}) in {out} [{seconds:.2f} s]"
    )
    for problem in problems:  # the files are written; ASTRA-sim would fail on them
        print(f"ASTRA-sim: {problem}", file=sys.stderr)
    return 1 if problems else 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "trace",
        help="write the execution traces of one training, prefill or decode step (Chakra, JSON "
        "or symmetric)",
        description="Build the per-rank programs of one training step (or, with --phase, one "
        "prefill or decode step) and write them.",
    )
    add_model_options(parser)
    add_parallel_options(parser)
    add_serving_options(parser, steady_state=False)
    parser.add_argument(
        "--format",
        choices=("chakra", "json", "symmetric"),
        default="chakra",
        help="chakra (default): one .et file per rank and comm_group.json; json: the same, "
        "readable, in trace.json; symmetric: one program per rank class, symmetric.json",
    )
    parser.add_argument(
        "--out", required=True, type=path_argument, metavar="DIR", help="output directory"
    )
    parser.add_argument(
        "--prefix", default=None, help="trace file prefix (chakra; default: workload)"
    )
    parser.add_argument(
        "--units",
        choices=("bytes", "stage"),
        default="bytes",
        help="bytes and FLOPs, or the published generator's elements and MACs",
    )
    parser.add_argument(
        "--for",
        dest="target",
        choices=("astra-sim", "any"),
        default=None,
        help="astra-sim (default): check that ASTRA-sim can run the Chakra output (in bytes); "
        "any: skip it",
    )
    parser.add_argument(
        "--framework",
        default=None,
        metavar="NAME",
        help="training framework profile deciding which collectives an FP8 run sends in FP8 "
        "(and timing --compute kernels): "
        + ", ".join(
            f"{name} (default)" if name == DEFAULT_FRAMEWORK else name
            for name in sorted(FRAMEWORKS)
        ),
    )
    parser.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        default=None,
        help="optimizer (default: the --framework profile's, adam): its state bytes and the "
        "optimizer node's FLOPs and bytes (adam 12 FLOPs, 16 bytes read, 14 written per "
        "parameter; sgd 2, 8, 6; optimizer_kinds.py)",
    )
    parser.add_argument(
        "--fp8-param-gather",
        action="store_true",
        help="FP8 parameters (Megatron --fp8-param-gather): the distributed optimizer's "
        "parameter all-gather moves the FP8 linear layers' weights at 1 byte per element",
    )
    parser.add_argument(
        "--compute",
        choices=(ROOFLINE, KERNELS),
        default=ROOFLINE,
        help="roofline (default: compute nodes carry FLOPs and bytes, which ASTRA-sim times at "
        "the roofline peak) or kernels (each compute node also carries the analytical "
        "per-kernel time as duration_micros; needs --system)",
    )
    parser.add_argument(
        "--system",
        default=None,
        metavar="PRESET_OR_FILE",
        help="a system preset (e.g. h100-80gb) or a system .toml file, for --compute kernels",
    )
    parser.add_argument("--progress", action="store_true", help="show progress even when piped")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="processes writing Chakra files (default: one per CPU, up to 4; same bytes)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress meter")
    parser.set_defaults(func=run)
