"""A Mamba-2 mixer's input projections as one GEMM: :func:`fuse_in_proj`.

The generator emits the mixer's projections of the normalised input to ``z``, ``x``, ``B``,
``C`` and ``dt`` as five einsums (``stage_core.blocks._mamba``: weights ``ssm.in_z``,
``ssm.in_x``, ``ssm.in_b``, ``ssm.in_c``, ``ssm.in_dt``); in the backward each writes a partial
gradient of the input, which autograd then sums. Every implementation runs them as one linear:
Megatron-Core's ``MambaMixer.in_proj`` is one column-parallel linear of output
``d_inner * 2 + 2 * ngroups * d_state + nheads`` ("z x B C dt",
``megatron/core/ssm/mamba_mixer.py``; the mamba layer spec builds it as
``TELayerNormColumnParallelLinear``), as mamba_ssm's ``Mamba2.in_proj`` (``nn.Linear`` of
``2 * d_inner + 2 * ngroups * d_state + nheads``) and transformers' ``NemotronHMamba2Mixer``
do. So one forward GEMM reading the input once, one input-gradient GEMM writing its gradient
once (the four adds of partial gradients do not run) and one weight-gradient GEMM; the small
``dt`` (``nheads / tp`` columns) and ``B`` / ``C`` GEMMs are not kernels of their own.

No framework keeps them apart, so this is not a profile option: the rewrite always applies to a
block with these weights (:func:`~stage_explore.analytical.fused_qkv.fuse_siblings`, timing
only, the instruction list's length and order kept; FLOPs, bytes of the operands and the
trace's tensors are the generator's). The fused GEMM takes the ``x`` projection's name.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from stage_core.lower.bind import Instr
from stage_explore.analytical.fused_qkv import fuse_siblings

#: The generator's names of the Mamba-2 input projections under the ``ssm`` module.
IN_PROJ_WEIGHTS = frozenset({"in_z", "in_x", "in_b", "in_c", "in_dt"})


def fuse_in_proj(instrs: Sequence[Instr], weights: Collection[str]) -> tuple[Instr, ...]:
    """``instrs`` with each phase's Mamba-2 input projections run as one GEMM and their input
    gradients' adds spared (module docstring); ``weights`` are the block's weight names.
    Unchanged for a block without a Mamba-2 mixer."""
    return fuse_siblings(instrs, weights, IN_PROJ_WEIGHTS, named="in_x")
