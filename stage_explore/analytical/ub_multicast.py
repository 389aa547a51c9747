"""Transformer Engine's userbuffers "pipeline" and "bulk" kernels as NVLink SHARP multicast.

On a GPU of compute capability 9.0 or newer, Transformer Engine's userbuffers communicator
turns CUDA multicast on unless the launch sets ``UB_SKIPMC`` (``create_communicator_grouped2``:
``if sm_arch >= 9 && ar2_nvsize > 1 && !getenv("UB_SKIPMC")`` ... ``use_mc = 1``), and every
overlap buffer is registered with a multicast mapping (``register_user_buffer_collective(...,
alloc=true)``; NVIDIA/TransformerEngine transformer_engine/common/comm_gemm_overlap/userbuffers/
userbuffers-host.cpp). The kernels the "pipeline" and "bulk" methods launch then take the
multicast branch (``userbuffers.cu``: ``if (comm->use_mc && (comm->memflags[handler] &
UB_MEM_MC_CREATED))``): the 16-bit reduce-scatter of a pipelined forward GEMM
(``reducescatter2_userbuff_stridedoutput`` → ``userbuffers_fp16_sum_inplace_gpu_mc_rs_oop``)
and the bulk reduce-scatter of the backward input gradient (``reducescatter2_userbuff_inplace``
→ ``..._mc_rs``) read their rank's slice with ``multimem.ld_reduce`` (the switch reads every
rank's partial and returns the sum), and the bulk all-gather of a layer's input for its weight
gradient (``allgather2_userbuff_inplace`` → ``..._mc_ag``) writes the rank's shard once with
``multimem.st`` (the switch writes it to every rank). "ring_exchange" (the forward all-gathers,
the output-gradient all-gathers and the recipes' ring-exchange reduce-scatters) copies
point to point with the copy engines and is unaffected.

So these kernels move what NVLink SHARP moves, not what a ring moves: for a reduce-scatter of
``S`` bytes over ``n`` ranks each GPU sends ``S`` and receives ``S/n``; for an all-gather of
``S`` it sends ``S/n`` and receives ``S`` (NVIDIA/nccl#1083, NCCL maintainer; a ring sends and
receives ``(n-1)/n · S``), at the rate multicast traffic reaches per direction, a network dim's
``nvls_efficiency`` of its link bandwidth (read off NCCL's NVLS all-reduce). Their SMs carry only
``S/n`` (the reduced slice or the shard), so the 2–32 SMs the recipes give them
(``num_sm``) are not what limits them at the per-SM rates found (docs/analytical.md, "SM-driven
userbuffers kernels and their SMs (s13 ubsm)").

Not multicast (reviewed 5 Dec 2026, s13 ubreview): a pipelined reduce-scatter whose buffer
is FP8 (the recipe's ``fp8_buf`` on ``proj_fprop`` / ``fc2_fprop`` under an FP8 run, framework
options ``ub_proj_fprop_fp8_buf`` / ``ub_fc2_fprop_fp8_buf``): the GEMM chunks write FP8 into
the buffer and ``split_overlap_rs`` calls ``reducescatter2_userbuff_stridedoutput_fp8``
(``_ubuf.element_size() == 1``), which has no multicast branch — it pulls each peer's FP8 slice
over its pointers and writes the 16-bit sum (``userbuffers_fp16_sum_inplace_gpu_rr_rs_oop_fp8``),
one byte per element, timed as a ring of those bytes. Nor an atomic-GEMM reduce-scatter (the
recipe's ``atomic_gemm``, options ``ub_proj_fprop_atomic_gemm`` / ``ub_fc2_fprop_atomic_gemm``):
``atomic_gemm_overlap_rs`` calls ``reducescatter2_userbuff_strided_atomic`` /
``_multiatomic`` (and their ``_fp8`` forms), none with a multicast branch; timed as a ring of
the buffer's bytes. (TE ``comm_gemm_overlap.cpp`` / ``userbuffers.cu``; ``pytorch/csrc/
comm_gemm_overlap.h`` in TE 1.x.)
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from stage_core.lower.bind import Instr
from stage_core.lower.fp8 import FP8_BYTES
from stage_core.trace import CollectiveKind
from stage_explore.analytical.gemm_tiles import ELEMENT_BYTES
from stage_explore.analytical.overlap import Bulk, OverlapRule, Pipelined, ub_fprop_name
from stage_explore.system.model import System
from stage_explore.system.ranks import group_span


def ub_multicast_collective(instr: Instr, rule: OverlapRule) -> bool:
    """Whether ``instr`` (a tensor-parallel collective that userbuffers runs, as
    :func:`~stage_explore.analytical.overlap.runs_outside_nccl` tells) is one of Transformer
    Engine's multicast kernels (module docstring): a reduce-scatter pipelined with its GEMM
    (not a ring exchange) or run in bulk beside the weight gradients, or a backward all-gather
    of a layer's input (not of an output gradient, ``d.*``, which TE gathers by ring
    exchange) — the bulk all-gather beside the input-gradient GEMM."""
    answer = rule(instr)
    if instr.collective is CollectiveKind.REDUCE_SCATTER:
        return isinstance(answer, Bulk) or (isinstance(answer, Pipelined) and not answer.ring)
    if instr.collective is CollectiveKind.ALL_GATHER and instr.phase == "bwd":
        tensor = instr.name.partition(":")[2]
        return isinstance(answer, float) and not tensor.startswith("d.")
    return False


def pipelined_fprop_scatter(instr: Instr, rule: OverlapRule, names: Collection[str]) -> bool:
    """Whether ``instr`` is a forward tensor-parallel reduce-scatter that userbuffers pipelines
    with its GEMM (``rule`` answers :class:`Pipelined`, not a ring exchange) under one of the
    userbuffers ``names`` (``proj``, ``fc2``: :func:`~stage_explore.analytical.overlap.
    ub_fprop_name`): the overlaps whose ``fp8_buf`` Transformer Engine honours (``initialize_ub``:
    ``fp8_buf = name in layers_all_gather_overlap or (cfg fp8_buf and name in
    methods["pipeline"])``) and whose ``atomic_gemm`` makes them atomic-GEMM reduce-scatters."""
    if instr.collective is not CollectiveKind.REDUCE_SCATTER or instr.phase != "fwd":
        return False
    answer = rule(instr)
    pipelined = isinstance(answer, Pipelined) and not answer.ring
    return pipelined and ub_fprop_name(instr) in names


def with_fp8_buffer_scatters(
    instrs: tuple[Instr, ...], rule: OverlapRule, names: Collection[str]
) -> tuple[Instr, ...]:
    """``instrs`` with each :func:`pipelined_fprop_scatter` of ``names`` (those whose buffer is
    FP8) moving one byte per element (its GEMM writes FP8 into the userbuffer; TE 1.x
    ``ub_obj.is_fp8_ubuf()`` → FP8 GEMM output, TE ≥ 2.2 the same,
    NVIDIA/TransformerEngine#1633); every other instruction unchanged. The caller keeps them
    off the multicast path (:func:`pipelined_fprop_scatter` on the rewritten program)."""
    return tuple(
        replace(instr, comm_bytes=instr.comm_bytes // ELEMENT_BYTES * FP8_BYTES)
        if pipelined_fprop_scatter(instr, rule, names)
        else instr
        for instr in instrs
    )


def nvls_collective_s(
    system: System, kind: CollectiveKind, size_bytes: int, group: Sequence[int]
) -> float | None:
    """Seconds of a multicast reduce-scatter or all-gather over ``group``: one step of the
    dim's latency plus the larger direction's bytes (``S`` for either, ``size_bytes`` the
    reduce-scatter's input, the all-gather's per-rank shard as in the trace convention) at the
    dim's ``nvls_efficiency`` of its link bandwidth. ``system`` is the achieved network the
    backend times collectives on (each dim's bandwidth at its ``bus_efficiency``, as for
    :func:`~stage_explore.analytical.collectives.alpha_beta_collective_s`), hence the factor
    :meth:`~stage_explore.system.model.NetworkDim.multicast_factor`. None when the group spans
    more than one dim, when that dim has no ``nvls_efficiency`` or for any other collective
    (timed as before)."""
    if kind not in (CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_GATHER):
        return None
    span = group_span(system.dim_sizes, group)
    if len(span.dims) != 1:
        return None
    dim = system.network[span.dims[0]]
    factor = dim.multicast_factor()
    if factor is None:
        return None
    ranks = len(group)
    moved = size_bytes * ranks if kind is CollectiveKind.ALL_GATHER else size_bytes
    return dim.latency_s + moved / (dim.bandwidth_bytes_per_s * factor)
