"""Splitting a block's backward into input-gradient (B) and weight-gradient (W) work.

Zero-bubble schedules (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, arXiv
2401.10241, Section 2) run the part of a backward that the previous stage waits for — the
gradient with respect to the block's input — as ``B``, and the weight gradients as a separate
``W`` that may run later. The split is read off the derived backward of a bound block:

- the *seeds* of W are the compute instructions whose every output is a weight gradient
  (``d.<weight>``: the weight-gradient einsums, an embedding's gradient scatter);
- an instruction all of whose dependents are in W (and that has some) joins W: the gathers of
  saved inputs that only weight gradients read (``all_gather:ln1`` under sequence
  parallelism), as the zero-bubble reference runtime does: sail-sg/zero-bubble-pipeline-parallelism
  ``megatron/core/tensor_parallel/layers.py`` stores the un-gathered input with
  ``WeightGradStore.put(weight, partial(pre_process, grad_output, input), ...)`` and
  ``megatron/core/zbpp_utils.py`` ``WeightGradStore.pop`` runs ``func(*pre_func(async_op=False))``
  (the sp all-gather, then the weight GEMM) in the W slot (docs/analytical.md, s36 wsplit);
- an instruction that only reads W's results joins W (collectives over weight gradients);
- W runs its gathers as the reference's ``pop`` does, ``async_op=False``: each all-gather waits
  for the W compute instruction before it in program order (the previous linear's weight GEMM:
  issued on the compute stream after it, and ProcessGroupNCCL's stream waits for the compute
  stream), and its weight GEMM waits for it (its data dependency) — :func:`_serial_gathers`;
- everything else — recomputed forwards, activation-gradient einsums and element-wise
  backwards, the collectives on the activation gradient — is B.

While a micro-batch's W is pending the rank keeps the gradients W reads that it does not
produce itself (activation gradients such as ``d.mlp.fc2``, made by B or by the next block):
:attr:`BackwardSplit.pending_bytes`. Its saved activations
stay live until W too (:mod:`stage_core.lower.memory`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from stage_core.lower.bind import BoundBlock, Instr
from stage_core.trace import CollectiveKind


@dataclass(frozen=True, slots=True)
class BackwardSplit:
    """Indices (into ``block.bwd``) of the B and W instructions, the two instruction lists with
    their ``deps`` renumbered within each list (W's dependencies on B are dropped: B runs
    first), and the bytes of the gradients W reads but does not produce."""

    input_grad_index: tuple[int, ...]
    weight_grad_index: tuple[int, ...]
    input_grad: tuple[Instr, ...]
    weight_grad: tuple[Instr, ...]
    pending_bytes: int


def _renumber(instrs: tuple[Instr, ...], index: tuple[int, ...]) -> tuple[Instr, ...]:
    position = {old: new for new, old in enumerate(index)}
    return tuple(
        replace(instrs[old], deps=tuple(position[d] for d in instrs[old].deps if d in position))
        for old in index
    )


def _serial_gathers(instrs: tuple[Instr, ...]) -> tuple[Instr, ...]:
    """W's all-gathers issued one at a time, as the zero-bubble reference runtime's
    ``WeightGradStore.pop`` runs each stored linear: ``func(*pre_func(async_op=False))``
    (sail-sg/zero-bubble-pipeline-parallelism ``megatron/core/zbpp_utils.py``, commit
    7e93f886a24cec4c14712287dda081943d6fd5f0; ``pre_func`` is the linear's ``pre_process``,
    the sequence-parallel ``_all_gather_base`` of its saved input,
    ``megatron/core/tensor_parallel/layers.py``, commit
    3664da69a25186d234e8a422023d36f00ca2dec9): the gather of a linear is issued after the
    previous linear's weight GEMM and waited for before its own. Each all-gather here waits for
    the last compute instruction before it in ``instrs`` (program order), so it no longer starts
    at the W task's entry beside the earlier GEMMs (``deps`` are positions within ``instrs``)."""
    out: list[Instr] = []
    previous: int | None = None
    for position, instr in enumerate(instrs):
        if (
            instr.collective is CollectiveKind.ALL_GATHER
            and previous is not None
            and previous not in instr.deps
        ):
            instr = replace(instr, deps=(*instr.deps, previous))
        if instr.collective is None:
            previous = position
        out.append(instr)
    return tuple(out)


@functools.lru_cache(maxsize=512)
def split_backward(block: BoundBlock) -> BackwardSplit:
    """The B/W split of ``block``'s backward (memoised: a pure function of the block)."""
    instrs = block.bwd
    grads = {f"d.{weight.name}" for weight in block.weights}
    dependents: list[list[int]] = [[] for _ in instrs]
    for index, instr in enumerate(instrs):
        for dep in instr.deps:
            dependents[dep].append(index)
    in_w = [
        instr.collective is None
        and instr.kind != "ring"
        and bool(instr.outputs)
        and all(name in grads for name, _ in instr.outputs)
        for instr in instrs
    ]
    changed = True
    while changed:
        changed = False
        for index, instr in enumerate(instrs):
            if in_w[index]:
                continue
            users = dependents[index]
            feeds_only_w = bool(users) and all(in_w[u] for u in users)
            reads_only_w = bool(instr.deps) and all(in_w[d] for d in instr.deps)
            if feeds_only_w or (reads_only_w and not users):
                in_w[index] = changed = True
    b_index = tuple(i for i in range(len(instrs)) if not in_w[i])
    w_index = tuple(i for i in range(len(instrs)) if in_w[i])
    produced_by_w = {  # a collective in place (all_gather:d.x → d.x) produces nothing new
        name
        for i in w_index
        for name, _ in instrs[i].outputs
        if name not in {n for n, _ in instrs[i].inputs}
    }
    read_by_w = {
        name: nbytes
        for i in w_index
        for name, nbytes in instrs[i].inputs
        if name.startswith("d.") and name not in produced_by_w
    }
    pending = sum(read_by_w.values())
    return BackwardSplit(
        b_index,
        w_index,
        _renumber(instrs, b_index),
        _serial_gathers(_renumber(instrs, w_index)),
        pending,
    )
