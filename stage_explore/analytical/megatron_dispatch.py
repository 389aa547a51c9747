"""Megatron-Core's copies of the routed tokens around the local experts: the all-to-all token
dispatcher's chunk sorts and, under FP8, ``TEGroupedMLP``'s row padding.

Megatron-Core's ``MoEAlltoAllTokenDispatcher`` (``megatron/core/transformer/moe/
token_dispatcher.py``, ``--moe-token-dispatcher-type alltoall``) permutes a rank's tokens by
expert (``permute``: the generator's ``moe.dispatch``) and sends them with one all-to-all. What
a rank receives is ordered by source rank, each source's block by local expert, while the
grouped GEMM wants every local expert's tokens contiguous, so with more than one local expert it
reorders them ("Permutation 2: Sort tokens by local expert"):

    if self.num_local_experts > 1:
        global_input_tokens = sort_chunks_by_idxs(
            global_input_tokens, self.num_global_tokens_per_local_expert.ravel(),
            self.sort_input_by_local_experts, fused=self.config.moe_permute_fusion)

and ``token_unpermutation`` restores the source order before the combine all-to-all ("Unsort
tokens by local expert", ``restore_output_by_local_experts``). Each sort reads every routed
token's row and writes it to its new place — Transformer Engine's ``moe_sort_chunks_by_index``
under ``moe_permute_fusion``, ``torch.split`` and ``torch.cat`` without it, one read and one
write of the permuted tensor either way — and its autograd backward is the inverse sort of the
gradient. The generator's block has no such op (its permute lands tokens in expert order), so
:func:`sort_chunks_bytes` adds, per MoE layer and micro-batch, two reads and writes of the
permuted tensor forward (after the dispatch, before the combine) and two backward, on the
dispatch and combine ops and their backwards, at the achieved HBM rate. The flex dispatcher
(DeepEP, ``moe_deepep``) permutes the received tokens itself and has no chunk sort; a single
local expert needs none.

**The sort runs on the gathered tokens.** With the experts tensor-parallel (``etp`` > 1, sequence
parallelism) the dispatcher all-gathers the received tokens over the experts' tensor-parallel
group *before* the sort and reduce-scatters the experts' output *after* the unsort:
``token_permutation`` calls ``gather_from_sequence_parallel_region(global_input_tokens, ...)``
right after the all-to-all and then "Permutation 2: Sort tokens by local expert"
(``sort_chunks_by_idxs``, its split sizes ``num_global_tokens_per_local_expert`` over
``tp_size · ep_size`` source chunks), and ``token_unpermutation`` runs "Unpermutation 2: Unsort
tokens by local expert" before ``reduce_scatter_to_sequence_parallel_region`` (NVIDIA/Megatron-LM
``megatron/core/transformer/moe/token_dispatcher.py`` of Megatron-Core 0.10, the routing-map
dispatcher with ``cuda_sync_point``; later releases keep the order, their drop-and-pad branch
reordering with ``.view(tp_size · ep_size, num_local_experts, capacity, ...).transpose(0, 1)
.contiguous()`` on the gathered tensor). So each sort moves ``etp`` times the tokens the
generator's dispatch and combine ops hold (their tensors are the rank's own, before the gather
and after the scatter): ``gathered`` below. ``TEGroupedMLP``'s FP8 padding takes the same
gathered tokens (the experts' input and output).

**FP8 padding of the grouped GEMM's rows.** Under an FP8 recipe Megatron-Core's ``TEGroupedMLP``
(``megatron/core/transformer/moe/experts.py``, ``if self.config.fp8 or self.config.fp4:``
``self.quantization_padding = Fp8Padding(self.num_local_experts)``; older releases name it
``self.fp8_padding``) pads every local expert's rows to the FP8 GEMM's alignment before
``linear_fc1`` (``permuted_local_hidden_states, tokens_per_expert =
self.quantization_padding(...)``) and strips the padding from ``linear_fc2``'s output
(``self.quantization_unpadding(output, actual_tokens_per_expert)``). Transformer Engine's
``Fp8Padding`` (``transformer_engine/pytorch/module/fp8_padding.py``) rounds each count up to 32
rows under MXFP8 and 16 otherwise and, unless every count already is a multiple, writes a new
tensor with ``tex.fused_multi_row_padding`` — one read and one write of the routed tokens — and
its backward strips the gradient with ``tex.fused_multi_row_unpadding``; ``Fp8Unpadding`` is the
mirror image. Under random balanced routing (``--moe-router-force-load-balancing``) a count is a
multiple of 32 about once in 32, so with any local expert the copies run: a read and a write of
the routed tokens before the first expert GEMM and after the last, forward and backward — the
same four places and bytes as the chunk sorts (:func:`fp8_padding_bytes`). The probabilities
padded beside them (one value per row) are not counted. ``--moe-router-padding-for-fp8`` pads
the routing map instead ("This can remove the explicit padding in the GroupedMLP layer",
``transformer_config.py``), so a run with it has no copies (framework option
``moe_fp8_padding`` off).

**``SequentialMLP``'s concatenations.** Without ``--moe-grouped-gemm`` (NeMo's
``moe_grouped_gemm: false``) Megatron-Core runs the local experts as ``SequentialMLP``
(``megatron/core/transformer/moe/experts.py``); with more than one local expert its forward is,
in the Megatron-Core 0.10 file (NeMo 24.12)::

    tokens_per_expert = tokens_per_expert.tolist()
    tokens_list = torch.split(permuted_local_hidden_states, tokens_per_expert)
    for expert, tokens in zip(self.local_experts, tokens_list):
        output, output_bias = expert(tokens)
        output_local_list.append(output)
    output_local = torch.cat(output_local_list, dim=0)

(later releases add the probabilities and per-expert FP8 padding around the same loop). The
split is views; the ``torch.cat`` reads and writes the experts' output, and in the backward
``CatBackward0`` narrows (views) while ``SplitWithSizesBackward0`` concatenates the slices'
input gradients into one tensor (PyTorch ``tools/autograd/derivatives.yaml``,
``split_with_sizes_backward``): one more read and write of the routed tokens forward and one
backward, on the gathered tokens (``gathered``), each a kernel of its own. They sit beside the
generator's combine (forward: the experts' output before the unsort) and the dispatch's backward
(the input gradient before the inverse sort): :func:`sequential_cat_bytes`.
"""

from __future__ import annotations

from stage_core.lower.bind import Instr

#: The generator's ops a chunk sort runs beside: after the dispatch all-to-all (on the received
#: tokens), before the combine all-to-all (on the experts' output), and their backwards.
SORT_CHUNKS_OPS = ("moe.dispatch", "moe.combine", "moe.dispatch.backward", "moe.combine.backward")


def sort_chunks_bytes(instr: Instr, gathered: int = 1) -> int:
    """HBM bytes of the chunk sort Megatron-Core's all-to-all dispatcher runs beside ``instr``:
    one read and one write of the permuted tokens (the largest tensor the op touches: the routed
    tokens, the experts' output or their gradients) times ``gathered``, the experts'
    tensor-parallel size whose all-gather precedes the sort (module docstring; 1 without one);
    0 for any other op."""
    if gathered < 1:
        raise ValueError(f"`gathered` must be a positive int, but got {gathered=}")
    if instr.name not in SORT_CHUNKS_OPS:
        return 0
    permuted = max(size for _, size in (*instr.inputs, *instr.outputs))
    return 2 * permuted * gathered


def fp8_padding_bytes(instr: Instr, gathered: int = 1) -> int:
    """HBM bytes of Transformer Engine's ``Fp8Padding`` / ``Fp8Unpadding`` copy that Megatron-
    Core's ``TEGroupedMLP`` runs beside ``instr`` under FP8 (module docstring): one read and one
    write of the routed tokens at the grouped GEMMs' input and output, forward and backward —
    the places and size of :func:`sort_chunks_bytes`, on the tokens gathered over the experts'
    tensor-parallel group (``gathered``); 0 for any other op."""
    return sort_chunks_bytes(instr, gathered)


#: The generator's ops ``SequentialMLP``'s concatenations run beside: the combine (the experts'
#: outputs joined, forward) and the dispatch's backward (their input gradients joined).
SEQUENTIAL_CAT_OPS = ("moe.combine", "moe.dispatch.backward")


def sequential_cat_bytes(instr: Instr, gathered: int = 1) -> int:
    """HBM bytes of ``SequentialMLP``'s ``torch.cat`` (forward) or ``SplitWithSizesBackward0``
    (backward) beside ``instr`` (module docstring): one read and one write of the routed tokens
    gathered over ``gathered`` ranks, as :func:`sort_chunks_bytes`; 0 for any other op."""
    if instr.name not in SEQUENTIAL_CAT_OPS:
        return 0
    return sort_chunks_bytes(instr, gathered)
