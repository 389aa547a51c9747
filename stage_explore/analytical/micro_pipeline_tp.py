"""Which tensor-parallel collectives PyTorch's asynchronous TP can pipeline with a GEMM.

TorchTitan's ``parallelism.enable_async_tensor_parallel`` (with ``training.compile``) turns on
Inductor's ``_micro_pipeline_tp`` post-grad pass (``torch/_inductor/fx_passes/
micro_pipeline_tp.py``, ``micro_pipeline_tp_pass``). It rewrites two patterns of the compiled
forward and backward graphs into the symmetric-memory ops of ``torch/distributed/
_symmetric_memory``, and leaves every other collective a plain functional (NCCL) one:

- ``fuse_all_gather_matmul``: an all-gather whose result is the *first* operand (``A``) of one
  or more ``mm`` (``_find_consumer_matmuls``: "the matmuls that use `node` as the lhs
  argument"; a matmul whose other operand depends on the gathered tensor is dropped) becomes
  ``fused_all_gather_matmul``. A gather read only as the second operand — the input of a
  weight-gradient GEMM, ``grad_weight = grad_output.t() @ input`` — is not fused.
- ``fuse_matmul_reduce_scatter``: a reduce-scatter whose operand is written by one ``mm`` that
  nothing else reads (``_find_producer_matmul`` matches ``mm``, ``_scaled_mm`` or
  ``reshape → mm → reshape`` only; "matmul result has more than one user, skipping") becomes
  ``fused_matmul_reduce_scatter``. A reduce-scatter of a *sum* of GEMM outputs is not fused:
  TorchTitan's Llama has separate ``wq``/``wk``/``wv`` and ``w1``/``w3`` linears behind one
  sequence-parallel all-gather each, so the backward's input gradient at the attention and
  feed-forward inputs is ``dq·Wq + dk·Wk + dv·Wv`` (``dh1·W1 + dh3·W3``), summed by autograd
  before the reduce-scatter (DTensor ``Partial`` → ``Shard(1)``).

:func:`micro_pipeline_rule` wraps an overlap rule (:func:`~stage_explore.analytical.overlap.
overlap_rule`) so that it answers ``None`` (not overlapped: a plain collective on the path, as
without async TP) for the tensor-parallel all-gathers and reduce-scatters of a block's phase
that the pass would leave alone. The answer is keyed by the collective's phase and name, so
that the rewritten instructions (renumbered dependencies) get the same answer. Only the
reduce-scatters are narrowed: the all-gathers a weight gradient alone reads are, in the
lowering, the backward's re-gathers of a sequence-parallel input, which TorchTitan does not run
(its linears save the gathered input, ``tp_saves_gathered_input``, or the recomputed forward's
fused all-gather returns it), so they keep the policy's answer.

What a fused reduce-scatter adds (:func:`fused_reduce_bytes`): ``_fused_matmul_reduce_scatter_
impl`` computes the GEMM in ``tp`` row chunks, each written to a symmetric-memory buffer that
its destination rank copies with the copy engine (``_pipelined_produce_and_all2all``), and then
reduces the ``tp`` stacked partials on the compute stream —
``reduce_fn(stacked_partials.view(tp, ...))``, ``torch.sum(dim=0)``: a memory-bound kernel that
reads the whole unreduced output (the collective's operand) and writes the rank's shard, where
NCCL's reduce-scatter reduces inside its own kernels. The ops' all-gather side copies the local
shard into the symmetric buffer before the first chunk's GEMM (``copy_shard(dst=local_p2p_bufs,
src=shard)``: 1/tp of the gathered bytes, read and written), not charged here (a seventh of a
reduction's bytes at tp 8).
"""

from __future__ import annotations

from collections.abc import Sequence

from stage_core.lower.bind import Instr
from stage_core.trace import CollectiveKind
from stage_explore.analytical.overlap import Bulk, OverlapRule, Pipelined

_SCATTER = CollectiveKind.REDUCE_SCATTER


def _is_gemm(instr: Instr) -> bool:
    """A two-operand einsum writing one tensor (a linear layer's GEMM)."""
    return instr.kind == "einsum" and len(instr.inputs) == 2 and len(instr.outputs) == 1


def unfused_collectives(instrs: Sequence[Instr], rule: OverlapRule) -> frozenset[tuple[str, str]]:
    """The ``(phase, name)`` of the reduce-scatters of ``instrs`` that ``rule`` overlaps but
    that Inductor's micro-pipeline TP pass does not fuse (module docstring): those whose operand
    is not written by one GEMM that nothing else reads. The all-gathers keep ``rule``'s answer
    (see the module docstring on why they are not narrowed)."""
    readers: dict[int, list[int]] = {}
    for index, instr in enumerate(instrs):
        for dep in instr.deps:
            readers.setdefault(dep, []).append(index)
    found: set[tuple[str, str]] = set()
    for index, instr in enumerate(instrs):
        if instr.collective is not _SCATTER or rule(instr) is None:
            continue
        fused = len(instr.deps) == 1 and _is_gemm(instrs[instr.deps[0]])
        if fused and readers.get(instr.deps[0], []) != [index]:
            fused = False  # "matmul result has more than one user"
        if not fused:
            found.add((instr.phase, instr.name))
    return frozenset(found)


def micro_pipeline_rule(rule: OverlapRule, instrs: Sequence[Instr]) -> OverlapRule:
    """``rule`` with the reduce-scatters of ``instrs`` that PyTorch's async TP does not fuse
    (:func:`unfused_collectives`) not overlapped, their rewritten copies included (a block's
    phases may repeat a collective's name: the recompute's and the backward's)."""
    unfused = unfused_collectives(instrs, rule)
    if not unfused:
        return rule

    def wrapped(instr: Instr) -> float | Pipelined | Bulk | None:
        if instr.collective is not None and (instr.phase, instr.name) in unfused:
            return None
        return rule(instr)

    return wrapped


def fused_reduce_bytes(instrs: Sequence[Instr], rule: OverlapRule) -> int:
    """HBM bytes of the reductions that PyTorch's fused matmul-reduce-scatters run on the
    compute stream after their chunked GEMMs (module docstring): for each tensor-parallel
    reduce-scatter ``rule`` overlaps (``rule`` already narrowed by :func:`micro_pipeline_rule`),
    its operand read and its result written."""
    total = 0
    for instr in instrs:
        if instr.collective is not _SCATTER or rule(instr) is None:
            continue
        total += sum(size for _, size in instr.inputs) + sum(size for _, size in instr.outputs)
    return total
