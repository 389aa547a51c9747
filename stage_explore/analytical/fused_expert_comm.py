"""Routed experts whose dispatch and combine run inside their grouped GEMMs (framework option
``moe_fused_expert_comm``): torchtitan's Dist-MoE backend.

Dist-MoE (meta-pytorch/dist_moe; torchtitan ``docs/dist_moe.md`` a30ac1bf: "the router stays in
TorchTitan ... then Dist-MoE fuses dispatch, local expert compute, and combine into its
distributed kernels") runs the routed experts of one MoE layer as a few fused kernels, not as
the eager stack of a permute, an NCCL all-to-all, grouped GEMMs, an activation and a second
all-to-all. Its MXFP8 guides (dist_moe ``docs/mxfp8_execution.md`` and
``docs/mxfp8_kernel_design.md``, 191b73f3 / ab56bced) list the staged pipeline's kernels:

- forward: ``dist_blockscaled_grouped_gemm_fprop_dispatch`` ("gathers BF16 route rows from
  local or peer symmetric HBM" in its gather/quant warps, "then hand[s] the tile to TMA/MMA":
  the W13 GEMM), then ``..._fprop_swiglu_fwd_combine`` ("reads BF16 h1, evaluates SwiGLU in
  FP32 registers, ... runs W2. Its epilogue ... scatters route rows directly to peer symmetric
  combine HBM");
- backward: ``..._dgrad_dispatch`` (gathers the peers' output gradients, W2 DGRAD), the W2
  WGRAD, ``..._dgrad_swiglu_bwd_combine`` ("fused SwiGLU backward, W13 DGRAD, and peer
  scatter"), the W13 WGRAD, ``reduce_from_topk``.

The kernel design guide's warp roles put the "gather/quant warps: peer loads" and the "epilogue
warps: ... GMEM/peer stores" in the same CTA as the "MMA warp/group", so a fused kernel moves its
routed rows over NVLink while its tensor cores work: it takes the longer of the two, not their
sum. This module times that:

- each expert-parallel all-to-all is charged only what its fused GEMMs do not cover,
  ``max(0, transfer − GEMMs)``: a dispatch-side exchange (its received rows feed expert GEMMs)
  under those forward / input-gradient GEMMs, a combine-side exchange (it sends an expert
  GEMM's output) under the GEMMs that produce it (:func:`fused_partners`); weight-gradient
  GEMMs run as kernels of their own and hide nothing;
- every expert GEMM (forward, input and weight gradient) is charged its GEMM kernel alone
  (``gemm_s``: :meth:`~stage_explore.analytical.kernels.KernelTimer.gemm_kernel_s`), without the
  MXFP8 cast kernels the backend times before it: the activations are quantized inside the
  fused kernels ("Dispatch gather/quant warps read local or peer rows, create the
  row-quantized W13 operand and optional column WGRAD operand"; the W2 kernel "creates
  row-quantized h2 for W2 FPROP and the column operand needed by W2 WGRAD"; backward, the
  DGRAD kernels quantize ``grad_h3`` / ``grad_h1`` and produce the WGRAD column operands), and
  the weights once per FSDP unshard, not per micro-batch (torchtitan ``docs/dist_moe.md``, "FSDP
  and MXFP8 weights": the post-all-gather hook "creates grouped 32x32 MXFP8 qdata plus FPROP and
  DGRAD scale layouts"; with ``reshard_after_forward=False`` "one prepared weight is reused by
  every pipeline microbatch" — that once-per-unshard cast is not charged); the kernel is one
  grouped launch with the per-expert counts on the device ("Routing records the actual
  per-expert counts on device"), so no per-expert launch cost either;
- the element-wise ops between fused expert GEMMs — the SwiGLU and its backward, and the sum of
  the gate and up projections' input gradients (one W13 DGRAD over the concatenated ``[2F, D]``
  weight contracts both) — are not charged (:func:`fused_elementwise`).

The transfer is timed as the backend times the all-to-all (the same bytes on the same links);
the permute and the weighted combine (``publish`` / ``scale_and_sum`` and their backwards in
Dist-MoE) stay charged as the generator's ``moe.dispatch`` / ``moe.combine`` ops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from stage_core.lower.bind import Instr
from stage_core.trace import CollectiveKind

Timer = Callable[[Instr], float]


def _expert_weight_gemm(instr: Instr, expert_weights: frozenset[str]) -> bool:
    """Any GEMM of the routed experts: one reading an expert weight or writing its gradient."""
    return instr.kind == "einsum" and (
        _expert_gemm(instr, expert_weights)
        or any(name[2:] in expert_weights for name, _ in instr.outputs if name.startswith("d."))
    )


def _expert_gemm(instr: Instr, expert_weights: frozenset[str]) -> bool:
    """A forward or input-gradient GEMM of the routed experts: an einsum reading an expert
    weight (a weight gradient reads activations and writes ``d.<weight>``)."""
    return instr.kind == "einsum" and any(name in expert_weights for name, _ in instr.inputs)


def _expert_exchange(instr: Instr) -> bool:
    """An all-to-all over the expert-parallel axis (the dispatch or the combine)."""
    return instr.collective == CollectiveKind.ALL_TO_ALL and "ep" in instr.axes


def fused_partners(
    instrs: Sequence[Instr], expert_weights: frozenset[str]
) -> dict[Instr, tuple[Instr, ...]]:
    """Each expert-parallel all-to-all of ``instrs`` and the expert GEMMs it runs inside: the
    forward / input-gradient GEMMs that read what it receives (dispatch side), else those that
    write what it sends (combine side); an exchange with neither is left out."""
    gemms = [i for i in instrs if _expert_gemm(i, expert_weights)]
    partners: dict[Instr, tuple[Instr, ...]] = {}
    for instr in instrs:
        if not _expert_exchange(instr):
            continue
        received = {name for name, _ in instr.outputs}
        sent = {name for name, _ in instr.inputs}
        readers = tuple(g for g in gemms if received & {name for name, _ in g.inputs})
        writers = tuple(g for g in gemms if sent & {name for name, _ in g.outputs})
        if readers or writers:
            partners[instr] = readers or writers
    return partners


def fused_elementwise(instrs: Sequence[Instr], expert_weights: frozenset[str]) -> frozenset[Instr]:
    """The compute ops of ``instrs`` that run inside the fused expert kernels: every
    non-GEMM compute op all of whose dependencies are expert GEMMs (the SwiGLU between W13 and
    W2, its backward between the W2 and W13 input-gradient GEMMs, the sum of the gate and up
    input gradients)."""
    fused = []
    for instr in instrs:
        if instr.collective is not None or instr.kind in ("einsum", "ring") or not instr.deps:
            continue
        deps = [instrs[d] for d in instr.deps if 0 <= d < len(instrs)]
        if len(deps) == len(instr.deps) and all(_expert_gemm(d, expert_weights) for d in deps):
            fused.append(instr)
    return frozenset(fused)


def fused_expert_timers(
    instrs: Sequence[Instr],
    expert_weights: frozenset[str],
    compute_s: Timer,
    comm_s: Timer,
    gemm_s: Timer | None = None,
) -> tuple[Timer, Timer]:
    """``compute_s`` and ``comm_s`` with the expert exchanges, casts and element-wise ops that
    run inside Dist-MoE's fused kernels (module docstring) charged as those kernels run them;
    ``gemm_s`` times an expert GEMM's kernel alone (None: ``compute_s``, no separate casts).
    The timers unchanged when ``instrs`` holds no expert weight's GEMM."""
    if not expert_weights:
        return compute_s, comm_s
    partners = fused_partners(instrs, expert_weights)
    inside = fused_elementwise(instrs, expert_weights)
    gemms = frozenset(i for i in instrs if _expert_weight_gemm(i, expert_weights))
    if not partners and not inside and not gemms:
        return compute_s, comm_s
    kernel_s = gemm_s or compute_s

    def fused_compute_s(instr: Instr) -> float:
        if instr in inside:
            return 0.0
        return kernel_s(instr) if instr in gemms else compute_s(instr)

    def fused_comm_s(instr: Instr) -> float:
        hiding = partners.get(instr)
        if hiding is None:
            return comm_s(instr)
        return max(0.0, comm_s(instr) - sum(kernel_s(g) for g in hiding))

    return fused_compute_s, fused_comm_s
