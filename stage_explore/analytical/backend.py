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
from dataclasses import dataclass, replace
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

    def __init__(self, cache_size: int = 1024) -> None:
        self._blocks = _Memo(cache_size)
        self._times = _Memo(cache_size * 64)

    def __getstate__(self) -> dict[str, int]:
        return {"cache_size": self._blocks.size}

    def __setstate__(self, state: dict[str, int]) -> None:
        self.__init__(state["cache_size"])  # type: ignore[misc]

    # -- binding and timing, memoised ---------------------------------------------------------

    def _memo(self, key: Hashable, compute: Any) -> Any:
        value = self._times.get(key)
        return value if value is not None else self._times.put(key, compute())

    def _bound(self, workload: Workload) -> tuple[Hashable, dict[str, BoundBlock]]:
        """Bound blocks, shared by every candidate with the same per-rank shapes: blocks never
        communicate over pp or dp, so those degrees enter only as "1 or more" (and dp through
        the global micro-batch B, whose per-rank share is the micro-batch either way)."""
        canonical = _canonical(workload)
        key = (
            Structure.of(canonical.model), canonical.options, canonical.flags,
            str(canonical.parallel.recompute), tuple(sorted(canonical.sizes.items())),
            tuple(sorted(canonical.axis_sizes.items())), canonical.model.tied_embeddings,
            workload.parallel.pp == 1,
        )
        blocks = self._blocks.get(key)
        if blocks is None:
            blocks = self._blocks.put(key, tie_embeddings(workload, bind_all(canonical)))
        return key, blocks

    def _span(self, system: System, table: GroupTable, rank: int, axes: tuple[str, ...]) -> tuple[object, ...]:
        key = ("span", _system_key(system), table.shape, table.names, rank, axes)
        return self._memo(key, lambda: _span_key(table, rank, axes, system))  # type: ignore[no-any-return]

    def _comm_time(self, system: System, table: GroupTable, rank: int, instr: Instr) -> float:
        """α–β time of a collective or ring exchange, memoised by the dims its group spans."""
        span = self._span(system, table, rank, instr.axes)
        key = ("comm", _system_key(system), span, instr.kind, instr.collective, instr.comm_bytes, instr.ring_steps)
        return self._memo(key, lambda: _comm_time(system, table, rank, instr))  # type: ignore[no-any-return]

    def _zero_time(
        self, workload: Workload, key: Hashable, block: BoundBlock, system: System,
        table: GroupTable, rank: int, gather: bool,
    ) -> float:
        memo_key = ("zero", key, block.kind, gather, _system_key(system), tuple(workload.axis_sizes.items()), rank)
        return self._memo(memo_key, lambda: sum(  # type: ignore[no-any-return]
            self._comm_time(system, table, rank, i) for i in _zero_collectives(workload, block, gather)
        ))

    def _block_timing(
        self, key: Hashable, block: BoundBlock, phase: str, system: System, table: GroupTable,
        rank: int, dtype: str,
    ) -> BlockTiming:
        span = tuple(self._span(system, table, rank, axes) for axes in _axes_of(block))
        memo_key = (key, block.kind, phase, _system_key(system), span, dtype)
        return self._timed(memo_key, block, phase, system, table, rank, dtype)

    def _timed(
        self, memo_key: Hashable, block: BoundBlock, phase: str, system: System,
        table: GroupTable, rank: int, dtype: str,
    ) -> BlockTiming:
        timing = self._times.get(memo_key)
        if timing is None:
            instrs = block.fwd if phase == "fwd" else block.bwd
            timing = time_block(
                instrs,
                lambda i: system.accelerator.compute_time_s(i.flops, i.bytes_read + i.bytes_written, dtype),
                lambda i: self._comm_time(system, table, rank, i),
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
        table = self._memo(("groups", workload.mesh), lambda: GroupTable(workload.mesh))
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
        working_set = self._memo(("working_set", key), lambda: recompute_working_set(workload, blocks))
        best: tuple[float, dict[str, float]] | None = None
        peak_memory = 0
        for stage in range(p):
            rank = workload.mesh.rank_of({"pp": stage})
            chunks, timing = stage_chunks[stage], stage_times[stage]
            sync_end, optimizer_s, gather_s = self._step_work(
                workload, key, chunks, timing, pipeline.last_backward_start_s[stage], system, table, rank, dtype,
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
            memory = chunks_memory(workload, chunks, None, working_set, stage)
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
        seen: dict[int, tuple[BlockTiming, BlockTiming]] = {}
        for chunk in chunks:
            f_total = b_total = 0.0
            per_block = []
            for block in chunk.blocks:
                pair = seen.get(id(block))
                if pair is None:
                    pair = seen[id(block)] = (
                        self._block_timing(key, block, "fwd", system, table, rank, dtype),
                        self._block_timing(key, block, "bwd", system, table, rank, dtype),
                    )
                tf, tb = pair
                df, db = tf.duration_s, tb.duration_s
                if zero >= 3:  # parameter gathers (and gradient scatters) on their own stream
                    gather = self._zero_time(workload, key, block, system, table, rank, True)
                    scatter = self._zero_time(workload, key, block, system, table, rank, False)
                    exposed["zero_gather"] = exposed.get("zero_gather", 0.0) + max(0.0, gather - df) + max(0.0, gather + scatter - db)
                    df, db = max(df, gather), max(db, gather + scatter)
                elif zero == 2:
                    scatter = self._zero_time(workload, key, block, system, table, rank, False)
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
        self, workload: Workload, key: Hashable, chunks: tuple[Any, ...], timing: _StageTiming,
        last_backward: tuple[float, ...], system: System, table: GroupTable, rank: int, dtype: str,
    ) -> tuple[float, float, float]:
        """Gradient synchronisation overlapped with the last backward; optimizer; gathers."""
        free = 0.0
        gather = 0.0
        for chunk in chunks:
            starts = [last_backward[chunk.index]]
            for seconds in timing.block_bwd[chunk.index]:
                starts.append(starts[-1] + seconds)
            sync_key = ("sync", key, chunk.stage, workload.parallel.zero, workload.axis_sizes["dp"],
                        workload.parallel.grad_bucket_bytes, workload.parallel.pp, workload.parallel.vpp)
            for op in self._memo(sync_key, lambda chunk=chunk: _sync_ops(workload, chunk)):
                span = self._span(system, table, rank, op.axes)
                seconds = self._memo(
                    ("sync_time", _system_key(system), span, op.collective, op.comm_bytes),
                    lambda op=op: alpha_beta_collective_s(system, op.collective, op.comm_bytes, table.group(rank, op.axes)),
                )
                if op.after < 0:
                    gather += seconds
                    continue
                free = max(free, starts[op.after + 1]) + seconds
        optimizer = self._memo(
            ("optimizer", key, chunks[0].stage, workload.parallel.zero, workload.axis_sizes["dp"],
             workload.parallel.pp, workload.parallel.vpp),
            lambda: _optimizer(workload, chunks),
        )
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
        per_block: dict[int, tuple[int, int]] = {}
        for chunks in stage_chunks:
            for chunk in chunks:
                for block in chunk.blocks:
                    if id(block) not in per_block:
                        per_block[id(block)] = _block_flops(block)
                    model, hardware = per_block[id(block)]
                    model_flops += model
                    hardware_flops += hardware
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


def _system_key(system: System) -> str:
    """A value key of a system (its dataclass repr): equal systems share memo entries."""
    return repr(system)


def _canonical(workload: Workload) -> Workload:
    axes = dict(workload.axis_sizes)
    sizes = dict(workload.sizes)
    dp = axes["dp"]
    axes["dp"] = min(dp, 2)
    axes["pp"] = 1
    sizes["B"] = sizes["B"] // dp * axes["dp"]
    sizes["C"] = sizes["C"] // dp * axes["dp"] if workload.model.is_moe else sizes["C"]
    return replace(workload, sizes=sizes, axis_sizes=axes)


def _block_flops(block: BoundBlock) -> tuple[int, int]:
    """Matmul and attention FLOPs of a block: without recompute (model), with it (hardware)."""
    model = hardware = 0
    for instr in (*block.fwd, *block.bwd):
        if instr.kind in _MODEL_KINDS:
            hardware += instr.flops
            if instr.phase != "recompute":
                model += instr.flops
    return model, hardware


def _axes_of(block: BoundBlock) -> list[tuple[str, ...]]:
    return sorted({i.axes for i in (*block.fwd, *block.bwd) if i.axes})


def _span_key(table: GroupTable, rank: int, axes: tuple[str, ...], system: System) -> tuple[object, ...]:
    """What a group's timing depends on: its size and the network coordinates of its ends and
    stride (groups with equal keys span the same dims the same way)."""
    group = table.group(rank, axes)
    second = group[1] if len(group) > 1 else group[0]
    return (len(group), system.coordinates(group[0]), system.coordinates(second), system.coordinates(group[-1]))


def _comm_time(system: System, table: GroupTable, rank: int, instr: Instr) -> float:
    if instr.kind == "ring":
        (axis,) = instr.axes
        peer = table.shifted(rank, axis, 1)
        return instr.ring_steps * alpha_beta_point_to_point_s(system, rank, peer, instr.comm_bytes)
    assert instr.collective is not None
    return alpha_beta_collective_s(system, instr.collective, instr.comm_bytes, table.group(rank, instr.axes))


def _infeasible(reason: str, gpus: int, system: System) -> Evaluation:
    return Evaluation(
        step_time_s=float("nan"), mfu=float("nan"), hfu=float("nan"),
        tokens_per_s_per_gpu=float("nan"), peak_memory_bytes=0, feasible=False, reason=reason,
        memory_capacity_bytes=system.accelerator.memory_bytes, num_gpus=gpus,
    )
