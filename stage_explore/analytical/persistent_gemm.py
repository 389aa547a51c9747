"""Userbuffers bulk kernels beside persistent GEMMs: :func:`persistent_bulk_s` and
:func:`bulk_gather_partners`.

Transformer Engine runs a layer's backward tensor-parallel exchanges that have no GEMM to be
pipelined with as "bulk" overlaps (``CommOverlapBase::bulk_overlap``,
transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp): the all-gather of the
layer's input for its weight gradient beside the input-gradient GEMM (``qkv_dgrad``,
``fc1_dgrad``) and the reduce-scatter of the input gradient beside the weight-gradient GEMM
(``qkv_wgrad``, ``fc1_wgrad``). The communication kernel (``num_sm`` thread blocks) is launched
first, then the GEMM with ``_math_sms`` SMs: ``sm_count − num_sm`` with ``set_sm_margin``,
every SM without it (``CommOverlapCore``: ``_math_sms = (set_sm_margin) ? sm_count -
num_comm_sm : sm_count``). The NeMo / Megatron-Bridge recipes' configs set ``set_sm_margin``
off for every bulk overlap (``ub_bulk_sm_margin``).

On Hopper cuBLAS runs its GEMMs as persistent kernels, one block per SM each working through
a fixed share of the tiles ("they launch as many CUDA blocks as there are SMs on the GPU (i.e.,
132) and each of these blocks will process several tiles in a row", pytorch/pytorch#143988,
which measured H100 matmuls taking 2× as long beside an NCCL kernel holding ~10 % of the SMs;
Transformer Engine's own comment: "Hopper, which uses persistent CTA execution"). A GEMM
launched on every SM beside a kernel that holds some of them cannot place all its blocks: those
left over start when the communication kernel ends or the first blocks finish, and each block's
share takes the whole GEMM's time — the GEMM ends at ``min(comm, gemm) + gemm``
(:func:`persistent_bulk_s`). Where the accelerator's kernels are not persistent
(``KernelModel.persistent_gemm`` off) the blocks are placed as SMs free and lose the SMs' share
only (:func:`~stage_explore.analytical.overlap.ub_bulk_share_s`).
"""

from __future__ import annotations

from collections.abc import Sequence

from stage_core.lower.bind import Instr
from stage_core.trace import CollectiveKind
from stage_explore.analytical.overlap import OverlapRule
from stage_explore.analytical.overlap_reorder import is_gemm
from stage_explore.analytical.ub_multicast import ub_multicast_collective


def persistent_bulk_s(bulk_s: float, gemm_s: float) -> float:
    """Compute seconds a persistent GEMM of ``gemm_s`` launched on every SM loses beside
    ``bulk_s`` of a communication kernel launched before it (module docstring): it ends at
    ``min(bulk_s, gemm_s) + gemm_s``. The block timing already exposes the communication's
    ``bulk_s − gemm_s`` beyond the GEMM, so what is added is ``max(0, min(bulk_s, 2·gemm_s −
    bulk_s))``: the pair lasts ``max(bulk_s, min(bulk_s, gemm_s) + gemm_s)``."""
    if bulk_s <= 0.0 or gemm_s <= 0.0:
        return 0.0
    return max(0.0, min(bulk_s, 2.0 * gemm_s - bulk_s))


def bulk_gather_partners(
    instrs: Sequence[Instr], rule: OverlapRule
) -> tuple[tuple[Instr, ...], tuple[Instr, ...]]:
    """The bulk all-gathers of a backward program after the overlaps are applied (the part
    beside compute: each gather's tail, or the gather whole when it has none) and the
    input-gradient GEMMs they run beside: the GEMMs that read what the gather's weight-gradient
    GEMMs read but not the gather (the same linear layer's input gradient)."""
    gathers: list[Instr] = []
    partners: dict[int, Instr] = {}
    for index, instr in enumerate(instrs):
        if instr.collective is not CollectiveKind.ALL_GATHER or instr.phase != "bwd":
            continue
        if not ub_multicast_collective(instr, rule) or instr.name.endswith(".tail"):
            continue
        tail = next(  # the part its dependents do not wait for
            (t for t in instrs[index + 1 :] if t.deps == (index,) and t.name.endswith(".tail")),
            instr,
        )
        gathers.append(tail)
        readers = [g for g in instrs if is_gemm(g) and index in g.deps]
        upstream = {d for g in readers for d in g.deps} - {index}
        for k, gemm in enumerate(instrs):
            if is_gemm(gemm) and index not in gemm.deps and upstream & set(gemm.deps):
                partners[k] = gemm
    return tuple(gathers), tuple(partners[k] for k in sorted(partners))
