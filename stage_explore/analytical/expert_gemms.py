"""Which GEMMs are an MoE layer's expert GEMMs, as the kernel timer charges them (split from
:mod:`~stage_explore.analytical.kernels`, s33 simplify).

Holds :data:`GROUPED_EXPERT_GEMMS` and :func:`grouped_gemm_groups` (the expert projections a
framework runs as one grouped GEMM, and the groups each pays
:attr:`~stage_explore.system.accelerator.KernelModel.grouped_gemm_group_s` for), and
:data:`ROUTED_EXPERT_PREFIX` and :func:`routed_rows_share` (the routed experts' forward and
input-gradient GEMMs, whose rows are the routed tokens).
"""

from __future__ import annotations

from collections.abc import Collection

from stage_core.lower.bind import Instr
from stage_explore.analytical.fp8_roles import gemm_role

#: The generator's expert projections that frameworks run as one grouped GEMM each (forward,
#: input gradient, weight gradient): the up (with the gate fused into it: Megatron-Core's
#: ``linear_fc1`` of a gated unit, AutoModel's ``gate_and_up_projs``), the non-gated fc1 and
#: fc2. The generator's separate gate projection (``experts.gate``) is half of the fused fc1.
GROUPED_EXPERT_GEMMS = ("experts.up", "experts.fc1", "experts.fc2")


def grouped_gemm_groups(instr: Instr, shape: tuple[int, int, int, int]) -> int:
    """The groups (local experts) of an MoE expert GEMM that a framework runs as one grouped
    GEMM (:data:`GROUPED_EXPERT_GEMMS`; ``shape``'s batch), each costing
    :attr:`~stage_explore.system.accelerator.KernelModel.grouped_gemm_group_s`; 0 for any other
    GEMM."""
    name = instr.name
    if not any(name == op or name.startswith(f"{op}.") for op in GROUPED_EXPERT_GEMMS):
        return 0
    return shape[0]


#: The generator's routed-expert projections (``experts.gate``, ``experts.up``, ``experts.fc1``,
#: ``experts.fc2`` and their gradients); shared experts are ``shared.*``.
ROUTED_EXPERT_PREFIX = "experts."


def routed_rows_share(instr: Instr, weights: Collection[str], share: float) -> float:
    """``share`` when ``instr`` is a routed expert's forward or input-gradient GEMM, whose rows
    are the expert's tokens (its weight gradient reduces over them: no row tiles); else 0."""
    if share <= 0.0 or not instr.name.startswith(ROUTED_EXPERT_PREFIX):
        return 0.0
    return share if gemm_role(instr, weights) in ("fprop", "dgrad") else 0.0
