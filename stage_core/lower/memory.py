"""Per-rank memory: model states by ZeRO stage, activations by liveness along the schedule.

Model states follow Rajbhandari et al. 2020: 16-bit weights, gradients (fp32 when gradients
accumulate in fp32, Megatron's default), and 12 bytes of fp32 master weights and Adam moments
per parameter; ZeRO-1 shards the optimizer states, ZeRO-2 also the gradients, ZeRO-3 also the
weights, over the data-parallel axes of each weight (dp·ep·cp; dp·cp for experts).

Activations are the tensors each block saves for its backward (exact bytes from the derived
backward), summed over the micro-batches in flight: walking the stage's task order, a forward
adds its chunk's saved bytes and a backward frees them; the peak is the activation term.
Transient buffers: the working set that recompute re-materialises for one layer, and under
ZeRO-3 the gathered weights of two blocks (one in use, one prefetched).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stage_core.blocks import Structure
from stage_core.lower.bind import DATA_AXES, MESH_AXES, WeightShard, bind_block, symbolic_block
from stage_core.lower.program import ProgramSet, StageProgram, Workload


def weight_shard_factor(workload: Workload, weight: WeightShard, sharded: bool) -> int:
    """How many ranks share one copy of ``weight`` when its state is ``sharded`` (ZeRO)."""
    if not sharded:
        return 1
    sizes = workload.axis_sizes
    axes = [a for a in MESH_AXES if a in DATA_AXES and (a != "ep" or not weight.expert)]
    return math.prod(sizes[a] for a in axes)


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes one rank of a stage holds at its peak."""

    stage: int
    ranks: tuple[int, ...]
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    transient_bytes: int

    @property
    def peak_bytes(self) -> int:
        return (
            self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
            + self.activations_bytes + self.transient_bytes
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "stage": self.stage,
            "ranks": list(self.ranks),
            "weights_bytes": self.weights_bytes,
            "gradients_bytes": self.gradients_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "transient_bytes": self.transient_bytes,
            "peak_bytes": self.peak_bytes,
        }


def activation_peak(stage: StageProgram) -> int:
    """Peak bytes of saved activations over the stage's task order."""
    live = peak = 0
    for task in stage.tasks:
        saved = stage.chunks[task.chunk].saved_bytes
        if task.phase == "F":
            live += saved
            peak = max(peak, live)
        else:
            live -= saved
    return peak


def _recompute_working_set(programs: ProgramSet) -> int:
    """Bytes one layer re-materialises during its backward under recompute."""
    workload = programs.workload
    mode = str(workload.parallel.recompute)
    if mode == "none":
        return 0
    structure = Structure.of(workload.model)
    kinds = [k for k in ("layer", "moe_layer") if k in programs.blocks]
    largest = 0
    for kind in kinds:
        full = symbolic_block(kind, structure, workload.options, workload.flags, "none")
        kept = programs.blocks[kind].saved_bytes
        bound = bind_block(full, kind, workload.sizes, workload.axis_sizes)
        largest = max(largest, bound.saved_bytes - kept)
    return largest


def stage_memory(programs: ProgramSet, stage: StageProgram, ranks: tuple[int, ...] = ()) -> MemoryBreakdown:
    workload = programs.workload
    zero = workload.parallel.zero
    weights = grads = optimizer = 0
    gathered: list[int] = []
    for chunk in stage.chunks:
        for block in chunk.blocks:
            block_full = 0
            for weight in block.weights:
                elements = weight.elements
                weights += elements * workload.weight_bytes // weight_shard_factor(workload, weight, zero >= 3)
                grads += elements * workload.grad_bytes // weight_shard_factor(workload, weight, zero >= 2)
                optimizer += elements * workload.optimizer_bytes // weight_shard_factor(workload, weight, zero >= 1)
                block_full += elements * workload.weight_bytes
            gathered.append(block_full)
    transient = _recompute_working_set(programs)
    if zero >= 3:
        transient += sum(sorted(gathered, reverse=True)[:2])
    return MemoryBreakdown(
        stage.stage, ranks, weights, grads, optimizer, activation_peak(stage), transient
    )


def memory_report(programs: ProgramSet, with_ranks: bool = True) -> list[MemoryBreakdown]:
    """One breakdown per distinct stage program."""
    return [
        stage_memory(programs, stage, tuple(programs.ranks(stage.stage)) if with_ranks else ())
        for stage in programs.stages
    ]
