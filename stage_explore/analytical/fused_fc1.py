"""A gated MLP's gate and up projections as one GEMM: :func:`fuse_fc1`.

The generator emits a SwiGLU MLP's gate and up projections as two einsums reading the same
input (``stage_core.blocks._mlp``: ``<prefix>.wg`` and ``<prefix>.wu`` for the dense MLP and the
shared experts; ``_moe``: ``experts.wg`` and ``experts.wu`` for the routed experts). In the
backward each writes a partial gradient of that input, which autograd then sums (the
generator's ``ln2.accumulate.d.ln2`` and ``moe.dispatch.accumulate.d.moe.tokens`` adds,
:meth:`stage_core.autodiff.Backward.settle`).

Megatron runs the two as one linear of output ``2 · ffn``: Megatron-Core's ``MLP.__init__``
doubles ``ffn_hidden_size`` when ``config.gated_linear_unit`` and builds one ``linear_fc1``
(NVIDIA/Megatron-LM ``megatron/core/transformer/mlp.py``, commit 8503f754; the shared experts'
``SharedExpertMLP`` is that ``MLP``), and its grouped experts likewise
(``megatron/core/transformer/moe/experts.py``, ``TEGroupedMLP``'s ``linear_fc1`` of
``2 · moe_ffn_hidden_size`` and ``GroupedMLP``'s ``fc1_output_size``); Megatron-LM's legacy
``ParallelMLP.dense_h_to_4h`` (``megatron/model/transformer.py``, ``ffn_hidden_size * 2`` with
``--swiglu``, kept by Megatron-DeepSpeed) does the same. So there: one forward GEMM, one
input-gradient GEMM writing the input's gradient once (no sum of two partials), one
weight-gradient GEMM. TorchTitan's Llama ``FeedForward`` keeps ``w1`` and ``w3`` separate
(``w2(silu(w1(x)) * w3(x))``), as Hugging Face's ``gate_proj`` / ``up_proj`` do: there the
sum runs. NeMo AutoModel fuses its routed experts only: ``GroupedExperts`` /
``GroupedExpertsDeepEP`` hold one ``gate_and_up_projs`` of ``[experts, dim, 2 · moe_inter_dim]``
while its ``MLP`` (dense layers and shared experts) has separate ``gate_proj`` and ``up_proj``
(NVIDIA-NeMo/Automodel ``nemo_automodel/components/moe/layers.py``).

The rewrite is :func:`~stage_explore.analytical.fused_qkv.fuse_siblings`, the one of the
fused q, k, v projection: timing only, the instruction list's length and order kept. The fused
GEMM is named after the up projection's (``experts.up``: the grouped fc1 of
:data:`~stage_explore.analytical.expert_gemms.GROUPED_EXPERT_GEMMS`, one group set per GEMM).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from stage_core.lower.bind import Instr
from stage_explore.analytical.fused_qkv import fuse_siblings

#: The generator's names of a gated MLP's gate and up weights (``stage_core.blocks._mlp`` and
#: ``_moe``), under each module's prefix (``mlp``, ``shared``, ``experts``).
FC1_WEIGHTS = frozenset({"wg", "wu"})


#: The profile's ``fused_fc1`` values: which gated MLPs run gate and up as one GEMM.
FC1_SCOPES = ("none", "experts", "all")

#: The generator's module of the routed experts' weights (``experts.wg``, ``experts.wu``).
ROUTED_EXPERTS = "experts"


def fuse_fc1(
    instrs: Sequence[Instr], weights: Collection[str], scope: str = "all"
) -> tuple[Instr, ...]:
    """``instrs`` with each phase's gate and up projection GEMMs run as one, and their input
    gradients' add spared, for every gated MLP (``scope`` ``all``: dense, shared and routed
    experts) or the routed experts only (``experts``: NeMo AutoModel, whose ``GroupedExperts``
    hold one ``gate_and_up_projs`` but whose dense and shared ``MLP`` keep ``gate_proj`` and
    ``up_proj``); ``weights`` are the block's weight names. Unchanged for non-gated MLPs and
    for ``none``."""
    if scope == "none":
        return tuple(instrs)
    if scope == "experts":
        weights = [w for w in weights if w.startswith(f"{ROUTED_EXPERTS}.")]
    return fuse_siblings(instrs, weights, FC1_WEIGHTS, named="wu")
