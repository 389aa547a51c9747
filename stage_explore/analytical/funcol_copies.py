"""The layout copies of DTensor's sequence-parallel collectives (``funcol_seq_copies``).

DTensor tensor parallelism with sequence parallelism (TorchTitan's and AutoModel's plans:
``SequenceParallel`` norms, ``PrepareModuleInput(Shard(1) -> Replicate)`` before the attention
and the feed-forward, ``RowwiseParallel(output_layouts=Shard(1))`` after them) keeps the
activations sharded on the *sequence* dim, dim 1 of ``[batch, seq, hidden]``. Its collectives
are the functional collectives of ``torch/distributed/_functional_collectives.py``, called by
``Shard._to_replicate_tensor`` (``funcol.all_gather_tensor(gather_dim=self.dim)``) and
``Shard._reduce_shard_tensor`` (``funcol.reduce_scatter_tensor(scatter_dim=self.dim)``,
``torch/distributed/tensor/placement_types.py``). NCCL gathers and scatters along dim 0 only, so
for any other dim the wrappers move the data:

- ``all_gather_tensor``: ``all_gather_into_tensor`` writes the ``tp`` shards one after the other
  (``[tp * batch, seq / tp, hidden]``), then ``torch.cat(torch.chunk(res, group_size, dim=0),
  dim=gather_dim)`` copies them into ``[batch, seq, hidden]``: the whole gathered tensor read
  and written once more, on the compute stream, after the gather's wait;
- ``reduce_scatter_tensor``: ``torch.cat(torch.chunk(self, group_size, dim=scatter_dim))``
  copies the whole unreduced operand into scatter-dim-first order before the reduce-scatter.

Inductor (``training.compile``) keeps both: ``cat`` of the gathered buffer's slices has an
extern (collective) producer and an extern (``mm``) consumer, so it is a kernel of its own —
except where the operand of a reduce-scatter is itself computed by a point-wise kernel (the
backward's sum of the ``wq``/``wk``/``wv`` or ``w1``/``w3`` input gradients): Inductor's
``cat`` lowering writes a point-wise producer straight into the concatenated buffer, so that
copy is not charged under ``fused_elementwise``. PyTorch's async TP (``micro_pipeline_tp``)
matches the ``all_gather → split → cat → mm`` and ``mm → split → cat → reduce_scatter``
patterns whole and runs them in the gather dim's order (``fused_all_gather_matmul`` /
``fused_matmul_reduce_scatter``: ``A_shard.movedim(gather_dim, 0)``, with the producers
restrided by Inductor, ``restride_A_shard_for_fused_all_gather_matmul``), so the collectives it
fuses copy nothing here. A later PyTorch (``_maybe_view_chunk_cat``, late 2025) returns a view
when every dim before the gather dim has size 1 (micro-batch 1): not in the 2024–25 releases
the validation's TorchTitan runs used, so not modelled.

:func:`funcol_copy_bytes` is the HBM traffic of those copies in one block's phase.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from stage_core.lower.bind import Instr
from stage_core.lower.fp8 import FP8_BYTES
from stage_core.trace import CollectiveKind
from stage_explore.analytical.gemm_tiles import ELEMENT_BYTES

_GATHER = CollectiveKind.ALL_GATHER
_SCATTER = CollectiveKind.REDUCE_SCATTER
#: The mesh axes of DTensor's sequence-parallel collectives (the dense tensor-parallel dim).
TP_AXES = ("tp",)


def _pointwise_operand(instrs: Sequence[Instr], instr: Instr) -> bool:
    """Whether ``instr``'s operand is written by one element-wise kernel (a fused sum)."""
    return len(instr.deps) == 1 and instrs[instr.deps[0]].kind == "elementwise"


def funcol_copy_bytes(
    instrs: Sequence[Instr],
    compiled: bool,
    fused: Callable[[Instr], bool],
    fp8_gathered: Collection[tuple[str, str]] = frozenset(),
) -> int:
    """HBM bytes (read + written) of the ``cat`` copies DTensor's sequence-dim all-gathers and
    reduce-scatters over ``tp`` add to ``instrs`` (module docstring): the whole gathered
    tensor, or the whole unreduced operand, read and written once per collective. ``compiled``
    (Inductor): a reduce-scatter whose operand an element-wise kernel writes copies nothing;
    ``fused``: the collectives PyTorch's async TP fuses with a matmul copy nothing;
    ``fp8_gathered``: the ``(phase, tensor)`` of the all-gathers that carry FP8 data (torchao's
    ``Float8Tensor`` gathered and concatenated as its 1-byte data), copied at 1 byte per
    element."""
    total = 0
    for instr in instrs:
        kind = instr.collective
        if instr.axes != TP_AXES or kind not in (_GATHER, _SCATTER) or fused(instr):
            continue
        if kind is _SCATTER and compiled and _pointwise_operand(instrs, instr):
            continue
        whole = instr.outputs if kind is _GATHER else instr.inputs
        size = sum(size for _, size in whole)
        if kind is _GATHER and instr.outputs and (instr.phase, instr.outputs[0][0]) in fp8_gathered:
            size = size * FP8_BYTES // ELEMENT_BYTES
        total += 2 * size
    return total
