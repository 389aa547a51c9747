"""The analytical backend: step time, its breakdown, MFU, memory and feasibility in microseconds.

For one (model, parallel config, system) point it binds the generator's blocks (memoised:
candidates of a search share them), times each block kind once per pipeline stage on a compute
and a communication stream (:mod:`~stage_explore.analytical.blocktime`; identical layers and
micro-batches are timed once), simulates the pipeline schedule across stages with the
activation transfers between them (:mod:`~stage_explore.analytical.pipeline`), overlaps the
bucketed gradient synchronisation of the last micro-batch with the rest of the backward, and
adds the optimizer step and ZeRO's parameter gathers.

Step time = busy (compute + exposed communication) + pipeline bubble + exposed gradient
synchronisation + optimizer + parameter gathers, for the slowest pipeline rank; the breakdown
reports those components and adds up to the step time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from stage_core.blocks import Structure
from stage_core.errors import InfeasibleError
from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.emit import GroupTable
from stage_core.lower.memory import chunks_memory, recompute_working_set
from stage_core.lower.nodes import _zero_collectives
from stage_core.lower.program import (
    Workload,
    _optimizer,
    _sync_ops,
    bind_all,
    boundary_bytes,
    chunk_blocks,
    make_workload,
    tie_embeddings,
)
from stage_core.lower.schedule import schedule
from stage_core.models.spec import ModelSpec
from stage_core.parallel.config import ParallelConfig
from stage_explore.analytical.blocktime import BlockTiming, time_block
from stage_explore.analytical.collectives import (
    alpha_beta_collective_s,
    alpha_beta_point_to_point_s,
)
from stage_explore.analytical.pipeline import StageTimes, step_time
from stage_explore.evaluation import BaseBackend, Evaluation
from stage_explore.system.model import System

_MODEL_KINDS = ("einsum", "attention")


class _Memo:
    """A small LRU memo owned by one backend instance (no module-level state)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable) -> Any:
        value = self.items.get(key)
        if value is not None:
            self.items.move_to_end(key)
        return value

    def put(self, key: Hashable, value: Any) -> Any:
        self.items[key] = value
        if len(self.items) > self.size:
            self.items.popitem(last=False)
        return value


@dataclass(frozen=True, slots=True)
class _StageTiming:
    fwd: tuple[float, ...]
    bwd: tuple[float, ...]
    compute_s: float  # per micro-batch, all chunks, forward and backward
    exposed: dict[str, float]  # per micro-batch
    block_bwd: tuple[tuple[float, ...], ...]  # per chunk, backward block order


class AnalyticalBackend(BaseBackend):
    """Roofline compute, α–β collectives over the network dims a group spans, event-driven
    streams within a block and across pipeline stages."""

    name = "analytical"

    def __init__(self, cache_size: int = 256) -> None:
        self._blocks = _Memo(cache_size)
        self._times = _Memo(cache_size * 8)

    def __getstate__(self) -> dict[str, int]:
        return {"cache_size": self._blocks.size}

    def __setstate__(self, state: dict[str, int]) -> None:
        self.__init__(state["cache_size"])  # type: ignore[misc]

    # -- binding and timing, memoised ---------------------------------------------------------

    def _bound(self, workload: Workload) -> tuple[Hashable, dict[str, BoundBlock]]:
        key = (
            Structure.of(workload.model), workload.options, workload.flags,
            str(workload.parallel.recompute), tuple(sorted(workload.sizes.items())),
            tuple(sorted(workload.axis_sizes.items())), workload.model.tied_embeddings,
            workload.parallel.pp == 1,
        )
        blocks = self._blocks.get(key)
        if blocks is None:
            blocks = self._blocks.put(key, tie_embeddings(workload, bind_all(workload)))
        return key, blocks

    def _block_timing(
        self, key: Hashable, block: BoundBlock, phase: str, system: System, table: GroupTable,
        rank: int, dtype: str,
    ) -> BlockTiming:
        span = tuple(_span_key(table, rank, axes, system) for axes in _axes_of(block))
        memo_key = (key, block.kind, phase, id(system), span, dtype)
        timing = self._times.get(memo_key)
        if timing is None:
            instrs = block.fwd if phase == "fwd" else block.bwd
            timing = time_block(
                instrs,
                lambda i: system.accelerator.compute_time_s(i.flops, i.bytes_read + i.bytes_written, dtype),
                lambda i: _comm_time(system, table, rank, i),
            )
            self._times.put(memo_key, timing)
        return timing

    # -- evaluation ---------------------------------------------------------------------------

    def evaluate(self, model: ModelSpec, parallel: ParallelConfig, system: System) -> Evaluation:  # type: ignore[override]
        workload = make_workload(model, parallel)
        gpus = workload.world_size
        if gpus > system.max_gpus:
            return _infeasible(f"{gpus} GPUs exceed the system's {system.max_gpus}", gpus, system)
        try:
            key, blocks = self._bound(workload)
        except InfeasibleError as error:
            return _infeasible(error.reason, gpus, system)
        return self._evaluate(workload, key, blocks, system)

    def _evaluate(
        self, workload: Workload, key: Hashable, blocks: dict[str, BoundBlock], system: System,
    ) -> Evaluation:
        parallel = workload.parallel
        p, vpp, m = parallel.pp, parallel.vpp, workload.micro_batches
        dtype = "fp16" if str(parallel.precision) == "fp16" else str(parallel.precision)
        if dtype not in system.accelerator.peak_flops_per_s:
            dtype = "bf16"
        table = GroupTable(workload.mesh)
        stage_times: list[_StageTiming] = []
        stage_chunks = []
        for stage in range(p):
            rank = workload.mesh.rank_of({"pp": stage})
            chunks = tuple(chunk_blocks(workload, blocks, v * p + stage) for v in range(vpp))
            stage_chunks.append(chunks)
            stage_times.append(self._stage_timing(workload, key, chunks, system, table, rank, dtype))
        transfer = 0.0
        if p > 1:
            transfer = alpha_beta_point_to_point_s(
                system, workload.mesh.rank_of({"pp": 0}), workload.mesh.rank_of({"pp": 1}),
                boundary_bytes(workload),
            )
        kind = str(parallel.schedule)
        pipeline = step_time(
            kind, [StageTimes(t.fwd, t.bwd) for t in stage_times], m, vpp, transfer
        )
        working_set = recompute_working_set(workload, blocks)
        best: tuple[float, dict[str, float]] | None = None
        peak_memory = 0
        for stage in range(p):
            rank = workload.mesh.rank_of({"pp": stage})
            chunks, timing = stage_chunks[stage], stage_times[stage]
            sync_end, optimizer_s, gather_s = self._step_work(
                workload, chunks, timing, pipeline.last_backward_start_s[stage], system, table, rank, dtype,
            )
            end = pipeline.end_s[stage]
            total = max(end, sync_end) + optimizer_s + gather_s
            breakdown = {"compute": m * timing.compute_s}
            for label, seconds in timing.exposed.items():
                breakdown[f"exposed_{label}"] = m * seconds
            breakdown["pipeline_bubble"] = end - pipeline.busy_s[stage]
            breakdown["exposed_gradient_sync"] = max(0.0, sync_end - end)
            breakdown["optimizer"] = optimizer_s
            breakdown["parameter_gather"] = gather_s
            busy_parts = breakdown["compute"] + sum(m * s for s in timing.exposed.values())
            breakdown["other"] = max(0.0, pipeline.busy_s[stage] - busy_parts)
            if best is None or total > best[0]:
                best = (total, breakdown)
            tasks = schedule(kind, stage, p, m, vpp)
            memory = chunks_memory(workload, chunks, tasks, working_set, stage)
            peak_memory = max(peak_memory, memory.peak_bytes)
        assert best is not None
        return self._result(workload, blocks, stage_chunks, best, peak_memory, system)

    def _stage_timing(
        self, workload: Workload, key: Hashable, chunks: tuple[Any, ...], system: System,
        table: GroupTable, rank: int, dtype: str,
    ) -> _StageTiming:
        zero = workload.parallel.zero
        fwd, bwd, block_bwd = [], [], []
        compute = 0.0
        exposed: dict[str, float] = {}
        for chunk in chunks:
            f_total = b_total = 0.0
            per_block = []
            for block in chunk.blocks:
                tf = self._block_timing(key, block, "fwd", system, table, rank, dtype)
                tb = self._block_timing(key, block, "bwd", system, table, rank, dtype)
                df, db = tf.duration_s, tb.duration_s
                if zero >= 3:  # parameter gathers (and gradient scatters) on their own stream
                    gather = _instrs_time(system, table, rank, _zero_collectives(workload, block, True))
                    scatter = _instrs_time(system, table, rank, _zero_collectives(workload, block, False))
                    exposed["zero_gather"] = exposed.get("zero_gather", 0.0) + max(0.0, gather - df) + max(0.0, gather + scatter - db)
                    df, db = max(df, gather), max(db, gather + scatter)
                elif zero == 2:
                    scatter = _instrs_time(system, table, rank, _zero_collectives(workload, block, False))
                    exposed["zero_scatter"] = exposed.get("zero_scatter", 0.0) + max(0.0, scatter - db)
                    db = max(db, scatter)
                f_total += df
                b_total += db
                per_block.append(db)
                compute += tf.compute_s + tb.compute_s
                for label, seconds in (*tf.exposed_s.items(), *tb.exposed_s.items()):
                    exposed[label] = exposed.get(label, 0.0) + seconds
            fwd.append(f_total)
            bwd.append(b_total)
            block_bwd.append(tuple(reversed(per_block)))
        return _StageTiming(tuple(fwd), tuple(bwd), compute, exposed, tuple(block_bwd))

    def _step_work(
        self, workload: Workload, chunks: tuple[Any, ...], timing: _StageTiming,
        last_backward: tuple[float, ...], system: System, table: GroupTable, rank: int, dtype: str,
    ) -> tuple[float, float, float]:
        """Gradient synchronisation overlapped with the last backward; optimizer; gathers."""
        free = 0.0
        gather = 0.0
        for chunk in chunks:
            starts = [last_backward[chunk.index]]
            for seconds in timing.block_bwd[chunk.index]:
                starts.append(starts[-1] + seconds)
            for op in _sync_ops(workload, chunk):
                seconds = alpha_beta_collective_s(system, op.collective, op.comm_bytes, table.group(rank, op.axes))
                if op.after < 0:
                    gather += seconds
                    continue
                free = max(free, starts[op.after + 1]) + seconds
        optimizer = _optimizer(workload, chunks)
        optimizer_s = system.accelerator.compute_time_s(
            optimizer.flops, optimizer.bytes_read + optimizer.bytes_written, "fp32"
            if "fp32" in system.accelerator.peak_flops_per_s else dtype,
        )
        return free, optimizer_s, gather

    def _result(
        self, workload: Workload, blocks: dict[str, BoundBlock], stage_chunks: list[tuple[Any, ...]],
        best: tuple[float, dict[str, float]], peak_memory: int, system: System,
    ) -> Evaluation:
        step, breakdown = best
        gpus = workload.world_size
        per_stage_ranks = gpus // workload.parallel.pp
        m = workload.micro_batches
        model_flops = hardware_flops = 0
        for chunks in stage_chunks:
            for chunk in chunks:
                for block in chunk.blocks:
                    for instr in (*block.fwd, *block.bwd):
                        if instr.kind in _MODEL_KINDS:
                            hardware_flops += instr.flops
                            if instr.phase != "recompute":
                                model_flops += instr.flops
        model_flops *= m * per_stage_ranks
        hardware_flops *= m * per_stage_ranks
        peak = system.accelerator.peak(str(workload.parallel.precision) if str(workload.parallel.precision) in system.accelerator.peak_flops_per_s else "bf16")
        tokens = workload.tokens_per_step
        capacity = system.accelerator.memory_bytes
        feasible = peak_memory <= capacity
        reason = "" if feasible else (
            f"out of memory: peak {peak_memory / 2**30:.2f} GiB exceeds {capacity / 2**30:.2f} GiB"
        )
        cost = None if system.price_per_gpu_hour is None else system.price_per_gpu_hour * gpus * step / 3600
        return Evaluation(
            step_time_s=step,
            mfu=model_flops / (step * gpus * peak),
            hfu=hardware_flops / (step * gpus * peak),
            tokens_per_s_per_gpu=tokens / step / gpus,
            peak_memory_bytes=peak_memory,
            feasible=feasible,
            reason=reason,
            breakdown={k: v for k, v in breakdown.items() if v > 0 or k in ("compute", "pipeline_bubble")},
            memory_capacity_bytes=capacity,
            num_gpus=gpus,
            model_flops_per_step=model_flops,
            hardware_flops_per_step=hardware_flops,
            cost_per_step=cost,
            cost_per_million_tokens=None if cost is None else cost / tokens * 1e6,
            backend=self.name,
        )


def _axes_of(block: BoundBlock) -> list[tuple[str, ...]]:
    return sorted({i.axes for i in (*block.fwd, *block.bwd) if i.axes})


def _span_key(table: GroupTable, rank: int, axes: tuple[str, ...], system: System) -> tuple[int, ...]:
    group = table.group(rank, axes)
    return tuple(system.coordinates(member) for member in (group[0], group[-1]))  # type: ignore[arg-type]


def _comm_time(system: System, table: GroupTable, rank: int, instr: Instr) -> float:
    if instr.kind == "ring":
        (axis,) = instr.axes
        peer = table.shifted(rank, axis, 1)
        return instr.ring_steps * alpha_beta_point_to_point_s(system, rank, peer, instr.comm_bytes)
    assert instr.collective is not None
    return alpha_beta_collective_s(system, instr.collective, instr.comm_bytes, table.group(rank, instr.axes))


def _instrs_time(system: System, table: GroupTable, rank: int, instrs: list[Instr]) -> float:
    return sum(_comm_time(system, table, rank, i) for i in instrs)


def _infeasible(reason: str, gpus: int, system: System) -> Evaluation:
    return Evaluation(
        step_time_s=float("nan"), mfu=float("nan"), hfu=float("nan"),
        tokens_per_s_per_gpu=float("nan"), peak_memory_bytes=0, feasible=False, reason=reason,
        memory_capacity_bytes=system.accelerator.memory_bytes, num_gpus=gpus,
    )
