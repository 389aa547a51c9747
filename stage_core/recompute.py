"""Selective recompute by module, as Megatron-Core's ``--recompute-modules``: which ops of a
block each module names (:func:`recompute_regions`), and which of those are output-discarding.

Megatron-Core (``TransformerConfig.recompute_modules``, ``transformer_layer.py``,
``multi_latent_attention.py``, ``moe/experts.py``) recomputes, under
``--recompute-granularity selective``:

- ``core_attn`` — the attention core (its default; Korthikanti et al. 2022), checkpointed;
- ``mlp`` — a dense layer's MLP (with Transformer Engine its pre-MLP norm is fused into fc1),
  checkpointed;
- ``moe`` — the MoE layer (router, dispatch, experts, combine, shared experts), checkpointed;
- ``shared_experts`` — the MoE layer's shared experts, checkpointed;
- ``layernorm`` — the norms that are modules of their own: an MoE layer's pre-MLP norm (a dense
  MLP or a standard attention fuses its norm into the following TE linear), and a latent
  attention's input norm; output-discarding;
- ``moe_act`` — the routed experts' activation function; output-discarding;
- ``mla_up_proj`` — latent attention's latent norms, up-projections and RoPE (the queries, keys
  and values the attention core reads); output-discarding.

and one module that is not Megatron's:

- ``op`` — torchtitan's op-level selective activation checkpointing (``selective_ac_option =
  'op'``, ``parallelisms/parallelize_llama.py``: a ``create_selective_checkpoint_contexts``
  policy over each transformer block that saves the outputs of ``aten.mm`` — all but every
  second call, counted in forward order — and of the SDPA kernels, and recomputes everything
  else): the whole layer but its attention kernels and every other einsum (the 1st, 3rd, ...;
  a Llama layer's q, v, gate and down projections) re-runs, output-discarding, so the layer
  keeps its input and the outputs of those ops only. Used alone. The policy's ``_save_list``
  also names ``torch.ops._c10d_functional.reduce_scatter_tensor`` (torchtitan's
  ``parallelisms/parallelize_llama.py`` ``_save_list`` at 0596be3, early 2025, and
  ``models/llama3/infra/parallelize.py`` ``_op_sac_save_list`` at 018740b, late 2025): under
  sequence parallelism the reduce-scatter of a row-parallel projection's output (``wo``,
  ``w2``) is saved, not re-run, and the scattered output is what the recompute reads, so the
  projection whose only reader is that scatter is dead code in the recompute (the compiled
  backward's min-cut partitioner re-runs only what the backward needs): :func:`op_sac_scattered`
  names those projections, which the ``op`` region leaves out (the block then keeps their
  scattered outputs).
- ``op_recompute_sdpa`` — the ``op`` policy when its save list does not name the SDPA kernel
  that ran: torchtitan's ``_op_sac_save_list`` named ``aten._scaled_dot_product_flash_attention``
  and ``_efficient_attention`` only, not ``_scaled_dot_product_cudnn_attention``, until
  pytorch/torchtitan#2095 ("add all SDPA backends to op_sac_save_list", merged December 2025,
  after issue #2091 asked why cuDNN attention was recomputed), so where torchtitan runs cuDNN
  attention (Blackwell, its SDPA priority) the policy's ``PREFER_RECOMPUTE`` re-runs the
  attention kernel too: the block keeps neither its output nor its log-sum-exp, and the
  backward re-runs its forward. Used alone.
- ``op_compiled`` / ``op_recompute_sdpa_compiled`` — the same two policies on a block compiled
  with ``torch.compile`` (torchtitan's ``training.compile``, which compiles each checkpointed
  block): the policy's ops keep their tags in the traced joint graph, but AOTAutograd's
  partitioner keeps only the forward values the backward graph reads and re-runs only what it
  needs (:func:`backward_live`). Eager, every ``MUST_SAVE`` output is cached for the whole
  region whether the backward reads it or not (``_CachingTorchDispatchMode.__torch_dispatch__``
  stores each such op's output in the region's ``storage``, ``torch/utils/checkpoint.py``, whose
  ``CheckpointPolicy`` docstring says a saving policy "would save additional tensors not limited
  to ones that are actually needed for gradient computation"); compiled,
  ``_extract_fwd_bwd_modules`` (``torch/_functorch/partitioners.py``) drops every saved value the
  extracted backward graph does not use ("This is to filter out saved values that don't
  actually end up being used by the backwards pass", in every version from 2022 on). In a Llama
  layer that is the down projection's output (``mlp.fc2``, or its reduce-scattered output under
  sequence parallelism), which only the final residual add reads, whose backward reads nothing:
  one hidden-sized 16-bit tensor per token and layer less. Used alone.

A checkpointed module keeps its inputs and re-runs in the backward; an output-discarding one
(Megatron's ``CheckpointWithoutOutput``) also frees its outputs once its consumers have run, and
re-makes them before the first backward that needs them — so neither it nor its consumers keep
them (:func:`stage_core.autodiff.derive_backward`, ``discard``).
"""

from __future__ import annotations

from collections.abc import Collection

from stage_core.blocks import ATTENTION_CORE
from stage_core.graph import Block
from stage_core.ops import Attention, Einsum
from stage_core.ops_moe import Dispatch
from stage_core.sharding import CommStep, Step

#: Modules whose outputs are freed after use and recomputed (``CheckpointWithoutOutput``).
#: torchtitan's op-level policies traced by ``torch.compile`` and the policy each one traces.
COMPILED_OP_SAC = {"op_compiled": "op", "op_recompute_sdpa_compiled": "op_recompute_sdpa"}
OUTPUT_DISCARDING = frozenset(
    {"layernorm", "moe_act", "mla_up_proj", "op", "op_recompute_sdpa", *COMPILED_OP_SAC}
)
#: Latent attention's up-projection part: latent norms, up-projections, RoPE, head concats.
MLA_UP_PROJ = frozenset(
    {
        "q.latent.norm",
        "q.nope",
        "q.pe",
        "q.pe.rope",
        "q",
        "kv.latent.norm",
        "k.nope",
        "v",
        "k.pe.rope",
        "k",
    }
)
#: Op-name prefixes of an MoE layer's parts (blocks._moe).
MOE_PREFIXES = ("moe.", "experts.", "shared.")


def op_sac_saved(block: Block, attention: bool = True) -> set[str]:
    """The ops whose outputs torchtitan's op-level SAC keeps (module docstring, ``op``): the
    attention kernels (unless not ``attention``: ``op_recompute_sdpa``) and every other einsum
    in forward order, starting with the first."""
    einsums = [op.name for op in block.ops if isinstance(op, Einsum)]
    kernels = {op.name for op in block.ops if isinstance(op, Attention)} if attention else set()
    return kernels | set(einsums[::2])


def op_sac_scattered(steps: Collection[Step]) -> frozenset[str]:
    """The ops of a sharded forward (its ``steps``) whose outputs are stored reduce-scattered
    (sequence parallelism's row-parallel projections): torchtitan's op-level SAC saves the
    scatter's output (module docstring, ``op``), so neither the scatter nor, its output being
    read only through the scatter, the op re-runs."""
    return frozenset(
        s.reason.removeprefix("store:")
        for s in steps
        if isinstance(s, CommStep)
        and s.phase == "fwd"
        and s.step.kind == "reduce_scatter"
        and s.reason == f"store:{s.tensor}"
    )


def backward_live(block: Block, region: Collection[str]) -> set[str]:
    """The ops of a recompute ``region`` of ``block`` whose outputs the backward needs: those
    whose outputs a backward reads (any op's ``saved``) or a needed region op reads, to a fixed
    point. What AOTAutograd's partitioner re-runs of a compiled checkpoint (module docstring,
    ``op_compiled``); the rest of the region (a layer's final residual add) is dead code in
    the backward graph, and what only it reads is not saved. One pass from the last op back:
    a block's ops are in order (:class:`~stage_core.graph.Block`), so every reader of an op's
    outputs is seen before the op."""
    needed = {name for op in block.ops for name in op.saved}
    live: set[str] = set()
    for op in reversed(block.ops):
        if op.name in region and needed.intersection(op.outputs):
            live.add(op.name)
            needed.update(op.inputs)
    return live


def _module_ops(block: Block, module: str, scattered: frozenset[str]) -> set[str]:
    """The names of ``block``'s ops that Megatron's recompute ``module`` covers (``scattered``:
    :func:`op_sac_scattered`, read by ``op`` only)."""
    names = {op.name for op in block.ops}
    moe = any(isinstance(op, Dispatch) for op in block.ops)
    latent = "kv.latent" in names
    if module == "core_attn":
        return names & ATTENTION_CORE
    if module == "mlp":
        return set() if moe else {n for n in names if n.startswith("mlp.")} | (names & {"ln2"})
    if module == "moe":
        return {n for n in names if n.startswith(MOE_PREFIXES)} if moe else set()
    if module == "shared_experts":
        return {n for n in names if n.startswith("shared.")}
    if module == "layernorm":
        return (names & {"ln2"} if moe else set()) | (names & {"ln1"} if latent else set())
    if module == "moe_act":
        return {n for n in names if n == "experts.act"}
    if module == "mla_up_proj":
        return names & MLA_UP_PROJ if latent else set()
    if module == "op":
        return names - op_sac_saved(block) - scattered
    if module == "op_recompute_sdpa":
        return names - op_sac_saved(block, attention=False) - scattered
    if module in COMPILED_OP_SAC:
        return backward_live(block, _module_ops(block, COMPILED_OP_SAC[module], scattered))
    raise AssertionError(f"unknown recompute module {module!r}")


def recompute_regions(
    block: Block, modules: Collection[str], scattered: frozenset[str] = frozenset()
) -> tuple[frozenset[str], frozenset[str]]:
    """``(region, discard)``: the ops of ``block`` a selective recompute of ``modules`` re-runs
    (empty ``modules``: Megatron's default, the core attention) and, of those, the ones whose
    outputs are freed after use (output-discarding modules). ``scattered``: the ops whose
    outputs the sharded forward stores reduce-scattered (:func:`op_sac_scattered`)."""
    chosen = tuple(modules) or ("core_attn",)
    region: set[str] = set()
    discard: set[str] = set()
    for module in chosen:
        ops = _module_ops(block, module, scattered)
        region |= ops
        if module in OUTPUT_DISCARDING:
            discard |= ops
    return frozenset(region), frozenset(discard)
