"""The bytes an FP8 run sends, written into the lowered programs: a training step's
:class:`~stage_core.lower.program.ProgramSet` with its collectives sized as the analytical
backend sizes them under a framework profile, so that ``stage trace --precision fp8`` writes
what the run moves (docs/trace-formats.md, "FP8 and FP4 traces").

The lowering sizes every collective at the 16-bit width. Where the profile sends FP8 data the
analytical backend already counts it, and :func:`fp8_wire` reuses those counts rather than
deriving them again:

- **Tensor-parallel all-gathers of FP8 linear inputs** (the profile's ``tp_comm_overlap`` with
  Transformer Engine's userbuffers; without them Transformer Engine's NCCL sequence-parallel
  gathers, ``te_sp_fp8_gather``, which under ``mxfp8`` leave the output gradients' gathers
  16-bit; or torchao's ``float8_tp`` under the ``tensorwise`` recipe): the gathers
  :meth:`~stage_explore.analytical.costing_compute.ComputeCosting.fp8_tp_gathered` names
  move 1 byte per element, plus one E8M0 byte per 32 under ``mxfp8``
  (:func:`~stage_explore.analytical.fp8_gather.with_fp8_gathers`; TE
  ``transformer_engine/pytorch/module/base.py`` ``initialize_ub`` / ``fill_userbuffers_buffer_
  for_all_gather``, torchao ``torchao/float8/float8_tensor_parallel.py``, cited in
  :mod:`~stage_explore.analytical.fp8_gather`).
- **FP8 parameters** (the profile option ``fp8_param_gather``, Megatron ``--fp8-param-gather``,
  precision ``fp8``): the distributed optimizer's parameter all-gathers (ZeRO-1/2) move the FP8
  linear layers' weights at 1 byte per element
  (:func:`~stage_explore.analytical.fp8_gathers.fp8_param_gathers` on each block's
  :func:`~stage_core.lower.program.block_sync` gathers, as the backend's ``_block_sync``;
  Megatron-Core ``core/distributed/distributed_data_parallel.py``: a ``torch.uint8`` parameter
  buffer for FP8 parameters).

Everything else stays 16-bit, as in the frameworks and the backend: gradient reductions, the
tensor-parallel reduce-scatters and all-reduces, the blockwise recipe's gathers (userbuffers
refuse its quantizer), the FP4 recipe's, pipeline transfers. Not carried here though the
backend counts them: a userbuffers reduce-scatter on an FP8 buffer (``ub_*_fprop_fp8_buf``,
off in every profile) and FSDP2's float8 parameter all-gathers (``fsdp_float8_all_gather``,
ZeRO-3: the gathers the trace emits come from :func:`stage_core.lower.zero_nodes.
zero_collectives`, which the programs do not hold). The compute nodes keep their FLOPs and
bytes; the FP8 GEMMs' speed reaches a trace only as kernel durations (``--compute kernels``,
:mod:`~stage_explore.astrasim.kernel_times`).
"""

from __future__ import annotations

from dataclasses import replace

from stage_core.lower.bind import BoundBlock
from stage_core.lower.fp8 import fp8_block
from stage_core.lower.program import Chunk, ProgramSet, StageProgram, Workload, block_sync
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_gather import with_fp8_gathers
from stage_explore.analytical.fp8_gathers import fp8_param_gathers

#: The lowering's name of a chunk's ZeRO-1/2 parameter all-gather
#: (:func:`stage_core.lower.program._sync_ops`).
PARAM_ALL_GATHER = "param_all_gather"


def fp8_wire(programs: ProgramSet, backend: AnalyticalBackend) -> ProgramSet:
    """``programs`` with the collectives an FP8 run sends in FP8 under ``backend``'s profile
    sized as the backend sizes them (module docstring); ``programs`` itself when nothing
    changes (a 16-bit run, or a profile that gathers nothing in FP8)."""
    workload = programs.workload
    parallel = workload.parallel
    if not parallel.quantized:
        return programs
    recipe = parallel.linear_recipe
    blocks: dict[int, BoundBlock] = {}
    for block in _distinct_blocks(programs):
        gathered = backend.fp8_tp_gathered(parallel, block)
        if gathered:
            fwd = with_fp8_gathers(block.fwd, gathered, recipe)
            bwd = with_fp8_gathers(block.bwd, gathered, recipe)
            blocks[id(block)] = replace(block, fwd=fwd, bwd=bwd)
    fp8_params = backend.framework.fp8_param_gather and str(parallel.precision) == "fp8"
    if not blocks and not fp8_params:
        return programs
    stages = tuple(_stage(workload, stage, blocks, fp8_params) for stage in programs.stages)
    kinds = {kind: blocks.get(id(block), block) for kind, block in programs.blocks.items()}
    return ProgramSet(workload, stages, kinds)


def param_gather_saving(workload: Workload, block: BoundBlock) -> dict[tuple[str, ...], int]:
    """Bytes per data axes that FP8 parameters (``fp8_param_gather``) take off one ``block``'s
    ZeRO-1/2 parameter all-gathers: the 16-bit bytes less the backend's FP8 bytes
    (:func:`~stage_explore.analytical.fp8_gathers.fp8_param_gathers`), none for a block whose
    linear layers are not FP8 (the embedding, the output layer)."""
    gathers = block_sync(workload, block)[1]
    if not fp8_block(str(block.kind)):
        return {}
    fp8 = fp8_param_gathers(workload, block, gathers)
    return {axes: size - fp8[axes] for axes, size in gathers.items() if size != fp8[axes]}


def _distinct_blocks(programs: ProgramSet) -> list[BoundBlock]:
    seen: dict[int, BoundBlock] = {id(b): b for b in programs.blocks.values()}
    for stage in programs.stages:
        for chunk in stage.chunks:
            for block in chunk.blocks:
                seen.setdefault(id(block), block)
    return list(seen.values())


def _stage(
    workload: Workload, stage: StageProgram, blocks: dict[int, BoundBlock], fp8_params: bool
) -> StageProgram:
    """``stage`` with its blocks replaced by ``blocks`` (by identity, so that blocks the
    lowering shares stay shared) and, under FP8 parameters, its chunks' parameter all-gathers
    less :func:`param_gather_saving` for each block they gather."""
    chunks = tuple(
        replace(chunk, blocks=tuple(blocks.get(id(b), b) for b in chunk.blocks))
        for chunk in stage.chunks
    )
    sync = stage.sync
    if fp8_params:
        saving = {chunk.index: _chunk_saving(workload, chunk) for chunk in stage.chunks}
        sync = tuple(
            replace(op, comm_bytes=op.comm_bytes - saving[op.chunk].get(op.axes, 0))
            if op.name == PARAM_ALL_GATHER and op.collective is CollectiveKind.ALL_GATHER
            else op
            for op in sync
        )
    return replace(stage, chunks=chunks, sync=sync)


def _chunk_saving(workload: Workload, chunk: Chunk) -> dict[tuple[str, ...], int]:
    per_block: dict[int, dict[tuple[str, ...], int]] = {}
    total: dict[tuple[str, ...], int] = {}
    for block in chunk.blocks:
        if id(block) not in per_block:
            per_block[id(block)] = param_gather_saving(workload, block)
        for axes, size in per_block[id(block)].items():
            total[axes] = total.get(axes, 0) + size
    return total
