"""Why ASTRA-sim and the analytical model differ on one design point (``stage eval --compare``).

Holds :class:`GapPart`, :class:`GapExplanation` and :func:`explain_gap`. The step of each
backend splits into two parts that mean the same thing on both sides:

- **compute**: the slowest rank's kernels. ASTRA-sim times each compute node at the roofline
  *peak* (``peak-perf``, ``local-mem-bw``, no efficiency); the analytical model with its own
  kernel model at the accelerator's calibrated efficiencies (matmul efficiency curve, memory
  efficiency). To separate the two causes, the slowest rank's compute nodes are timed again at
  the roofline peak here (which must equal ASTRA-sim's reported GPU time: ``roofline_check``;
  under the compute policy ``kernels`` ASTRA-sim replays each node's ``duration_micros`` from
  the analytical per-kernel timer instead, and the check is on those durations),
  and the same rank's kernels as the analytical model runs them are read from its trace mode
  (:func:`~stage_explore.analytical.trace_mode.trace_step`: the rank's GPU compute seconds,
  :attr:`~stage_explore.analytical.tracesim.RankTiming.compute`, on the rank that stands for
  the slowest rank's pipeline stage and cp position — the same program, fused and overlapped
  as the backend runs it, with the backend's per-kernel costs).
- **exposed communication and waiting**: everything else. ASTRA-sim runs one collective at a
  time per rank in issue order, with its algorithm per network dim at the full link bandwidth
  in ``preferred-dataset-splits`` chunks, and counts pipeline waits as exposed communication;
  the analytical model uses α–β collectives at the achieved (NCCL-level) bandwidth and
  overlaps what its framework's timing policy overlaps, with the pipeline bubble its own
  component.

The two sides' execution rules are named by their
:class:`~stage_explore.analytical.policy.TimingPolicy` values: the analytical backend's (built
from its framework profile, passed in) and :data:`~stage_explore.analytical.policy.
ASTRA_SIM_POLICY`, the one :func:`~stage_explore.analytical.tracesim.simulate` reproduces
ASTRA-sim with.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from stage_core.errors import ConfigError
from stage_core.lower.nodes import stage_nodes
from stage_core.lower.program import ProgramSet
from stage_core.trace import NodeKind
from stage_explore.analytical.policy import ASTRA_SIM_POLICY, TimingPolicy
from stage_explore.analytical.trace_mode import TraceStep
from stage_explore.analytical.trace_models import AstraTimingModel
from stage_explore.astrasim.inputs import AstraSettings, astra_config
from stage_explore.astrasim.kernel_times import (
    KERNELS,
    ROOFLINE,
    kernel_seconds,
    micros_with_residual,
    replayed_ns,
)
from stage_explore.evaluation import Evaluation
from stage_explore.system.model import System

COMPUTE_WHY = (
    "ASTRA-sim runs every kernel at the roofline peak ({peak:.0f} TFLOP/s, {bandwidth:.0f} GB/s, "
    "no efficiency); the analytical model at calibrated efficiency (matmul up to "
    "{matmul:.0%} of peak, memory {memory:.0%} of bandwidth). {calibrated}"
)
CALIBRATED_WHY = (
    "The same rank's kernels as the analytical model runs them (its trace mode, rank "
    "{trace_rank}) take {seconds:.4f} s."
)
KERNELS_WHY = (
    "ASTRA-sim replays each kernel's time from the analytical kernel model (compute policy "
    "`kernels`: duration_micros from the per-kernel timer at calibrated efficiency, matmul up "
    "to {matmul:.0%} of peak, memory {memory:.0%} of bandwidth, each bound kernel on its own, "
    "rounded to the microsecond with the residual carried; roofline off); the analytical "
    "model runs the same kernels fused and overlapped as its framework does. {calibrated}"
)
NO_TRACE_WHY = "(The analytical model's trace mode does not time this step: {reason})"
WAIT_WHY = (
    "ASTRA-sim: one collective at a time per rank in issue order, its algorithm on each network "
    "dim at full link bandwidth in {splits} chunks, pipeline waits counted as exposed "
    "communication; analytical: α-β collectives at achieved (NCCL-level) bandwidth, the "
    "pipeline bubble its own component. Timing policies: ASTRA-sim {astra_policy}; "
    "analytical {analytical_policy}."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class GapPart:
    """One part of the step on both backends (seconds) and why they differ."""

    astra_sim_s: float
    analytical_s: float
    why: str

    @property
    def gap_s(self) -> float:
        return self.astra_sim_s - self.analytical_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "astra_sim_s": self.astra_sim_s,
            "analytical_s": self.analytical_s,
            "gap_s": self.gap_s,
            "why": self.why,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class GapExplanation:
    """The step gap split into compute and exposed communication/waiting.

    ``compute_at_peak_s``: the slowest ASTRA-sim rank's compute nodes timed at the roofline
    peak; ``roofline_check``: it equals ASTRA-sim's GPU time for that rank (to the ns).
    ``compute_policy``: the ASTRA-sim backend's (``roofline`` | ``kernels``); under
    ``kernels`` ``compute_from_durations_s`` is the replayed time of the rank's written
    ``duration_micros`` (:func:`~stage_explore.astrasim.kernel_times.replayed_ns`) and
    ``roofline_check`` becomes a durations check: it equals ASTRA-sim's GPU time (to the ns).
    ``compute_at_calibrated_efficiency_s``: the GPU compute seconds of that rank's kernels as
    the analytical model runs them, read from its trace mode's rank ``trace_rank`` (the rank
    of the same pipeline stage and cp position, :func:`~stage_explore.analytical.trace_mode.
    trace_step`); both None where the trace mode does not time the step.
    """

    step: GapPart
    compute: GapPart
    exposed_communication_and_waiting: GapPart
    compute_at_peak_s: float
    compute_at_calibrated_efficiency_s: float | None
    roofline_check: bool
    slowest_rank: int
    trace_rank: int | None
    analytical_policy: TimingPolicy
    astra_sim_policy: TimingPolicy = ASTRA_SIM_POLICY
    compute_policy: str = ROOFLINE
    compute_from_durations_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step.to_dict(),
            "compute": self.compute.to_dict(),
            "exposed_communication_and_waiting": self.exposed_communication_and_waiting.to_dict(),
            "compute_at_peak_s": self.compute_at_peak_s,
            "compute_at_calibrated_efficiency_s": self.compute_at_calibrated_efficiency_s,
            "roofline_check": self.roofline_check,
            "compute_policy": self.compute_policy,
            "compute_from_durations_s": self.compute_from_durations_s,
            "slowest_rank": self.slowest_rank,
            "trace_rank": self.trace_rank,
            "analytical_policy": self.analytical_policy.to_dict(),
            "astra_sim_policy": self.astra_sim_policy.to_dict(),
        }


def is_waiting(component: str) -> bool:
    """A breakdown component that is communication or waiting rather than kernels."""
    return any(word in component for word in ("exposed", "bubble", "idle", "wait"))


def explain_gap(
    astra: Evaluation,
    analytical: Evaluation,
    programs: ProgramSet,
    system: System,
    *,
    dtype: str,
    policy: TimingPolicy,
    trace: TraceStep | ConfigError,
    settings: AstraSettings | None = None,
) -> GapExplanation:
    """Split the gap between ``astra`` (an ASTRA-sim evaluation of ``programs``) and
    ``analytical`` (evaluated under the timing ``policy``: the analytical backend's
    ``policy``; ``trace``: the same backend's trace mode of the same step,
    :func:`~stage_explore.analytical.trace_mode.trace_step`, or the ConfigError it raised for
    a step it does not time) into compute and exposed communication/waiting, with the
    causes."""
    settings = AstraSettings() if settings is None else settings
    rank = int(astra.extra.get("slowest_rank", 0))
    stage = programs.stages[programs.stage_of(rank)]
    config = astra_config(  # the roofline's peak, whichever policy the run used
        system, num_gpus=programs.workload.world_size, dtype=dtype,
        settings=replace(settings, compute=ROOFLINE),
    )  # fmt: skip
    peak_model = AstraTimingModel(config)
    accelerator = system.accelerator
    peak_ns = 0
    template = [item.node for item in stage_nodes(programs, stage)]
    for node in template:
        if node.kind is NodeKind.COMP:
            peak_ns += peak_model.compute(node)
    replayed: int | None = None
    if settings.compute == KERNELS:  # the durations the run's trace carried
        seconds = kernel_seconds(programs, system)
        micros = iter(micros_with_residual(template, seconds[stage.stage]))
        timed = [
            replace(node, duration_micros=next(micros)) if node.kind is NodeKind.COMP else node
            for node in template
        ]
        replayed = replayed_ns(timed)
    trace_rank: int | None = None
    calibrated_s: float | None = None
    if isinstance(trace, ConfigError):
        calibrated = NO_TRACE_WHY.format(reason=trace)
    else:
        trace_rank = _trace_rank(programs, trace, rank)
        calibrated_s = trace.result.ranks[trace_rank].compute
        calibrated = CALIBRATED_WHY.format(trace_rank=trace_rank, seconds=calibrated_s)
    astra_compute = astra.breakdown.get("compute", 0.0)
    analytical_compute = sum(v for k, v in analytical.breakdown.items() if not is_waiting(k))
    analytical_waiting = sum(v for k, v in analytical.breakdown.items() if is_waiting(k))
    efficiency = accelerator.efficiency
    why = KERNELS_WHY if replayed is not None else COMPUTE_WHY
    compute_why = why.format(
        peak=config.peak_perf_tflops, bandwidth=config.local_mem_bw_gbps,
        matmul=efficiency.matmul_peak, memory=efficiency.memory, calibrated=calibrated,
    )  # fmt: skip
    step_why = (
        "the sum of the two parts below"
        if astra.step_time_s >= analytical.step_time_s
        else "the sum of the two parts below (ASTRA-sim is faster)"
    )
    return GapExplanation(
        step=GapPart(
            astra_sim_s=astra.step_time_s, analytical_s=analytical.step_time_s, why=step_why
        ),
        compute=GapPart(
            astra_sim_s=astra_compute, analytical_s=analytical_compute, why=compute_why
        ),  # fmt: skip
        exposed_communication_and_waiting=GapPart(
            astra_sim_s=astra.step_time_s - astra_compute,
            analytical_s=analytical_waiting,
            why=WAIT_WHY.format(
                splits=settings.preferred_dataset_splits,
                astra_policy=ASTRA_SIM_POLICY.describe(),
                analytical_policy=policy.describe(),
            ),
        ),
        compute_at_peak_s=peak_ns * 1e-9,
        compute_at_calibrated_efficiency_s=calibrated_s,
        roofline_check=round(astra_compute * 1e9) == (peak_ns if replayed is None else replayed),
        slowest_rank=rank,
        trace_rank=trace_rank,
        analytical_policy=policy,
        compute_policy=settings.compute,
        compute_from_durations_s=None if replayed is None else replayed * 1e-9,
    )


def _trace_rank(programs: ProgramSet, trace: TraceStep, rank: int) -> int:
    """The rank of ``trace`` (one per pipeline stage and cp position) that stands for the
    global ``rank``: the rank of its pipeline stage and cp coordinate. A trace of another
    step (no such rank) is a ConfigError."""
    mesh = programs.workload.mesh
    coords = mesh.coordinates(rank)
    place: dict[str, int] = {axis: coords[axis] for axis in ("pp", "cp") if axis in coords}
    standing = mesh.rank_of(place)
    if standing not in trace.result.ranks:
        raise ConfigError(f"the trace mode's step has no rank {standing} (for rank {rank})")
    return standing


def format_gap(explanation: GapExplanation) -> str:
    """The text form: one line per part (ASTRA-sim, analytical, gap), then the causes."""
    rows = [
        ("step", explanation.step),
        ("compute", explanation.compute),
        ("exposed communication + waiting", explanation.exposed_communication_and_waiting),
    ]
    lines = [
        f"gap (ASTRA-sim − analytical, slowest ASTRA-sim rank {explanation.slowest_rank}):",
        f"  {'':32s} {'ASTRA-sim':>10s} {'analytical':>10s} {'gap':>10s}",
    ]
    for label, part in rows:
        lines.append(
            f"  {label:32s} {part.astra_sim_s:10.4f} {part.analytical_s:10.4f} {part.gap_s:+10.4f}"
        )
    check = "equals" if explanation.roofline_check else "DIFFERS FROM"
    durations = explanation.compute_from_durations_s
    if durations is None:
        note = (
            f"(The same kernels at the roofline peak: {explanation.compute_at_peak_s:.4f} s, "
            f"which {check} ASTRA-sim's GPU time.)"
        )
    else:
        note = (
            f"(The rank's written kernel durations: {durations:.4f} s, which {check} "
            f"ASTRA-sim's GPU time; at the roofline peak: {explanation.compute_at_peak_s:.4f} s.)"
        )
    lines.append(f"  compute: {explanation.compute.why} {note}")
    lines.append(f"  communication: {explanation.exposed_communication_and_waiting.why}")
    return "\n".join(lines)
