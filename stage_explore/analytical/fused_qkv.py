"""The attention's query, key and value projections as one GEMM: :func:`fuse_qkv`.

The generator emits ``q``, ``k`` and ``v`` as three einsums reading the normalised input
(``stage_core.blocks._attention``): their FLOPs and weights are the model's either way. Megatron
runs them as one column-parallel linear over the concatenated weights — Megatron-LM's
``ParallelAttention.query_key_value = mpu.ColumnParallelLinear(args.hidden_size, 3 *
projection_size, ...)`` (``megatron/model/transformer.py``, which Megatron-DeepSpeed keeps) and
Megatron-Core's ``SelfAttention.linear_qkv`` of output size ``query_projection_size + 2 *
kv_projection_size`` (``megatron/core/transformer/attention.py``). That changes the kernels,
not the work:

- forward (and its recomputation): one GEMM of ``N = Nq + Nk + Nv`` reading the input once,
  instead of three of ``Nq``, ``Nk``, ``Nv`` (each with its own wave quantization and K loop);
- input gradient: one GEMM of ``K = Nq + Nk + Nv`` writing the input's gradient once, where the
  three GEMMs write three partial gradients that autograd then sums (the generator's
  ``<op>.accumulate.<gradient>`` adds, :meth:`stage_core.autodiff.Backward.settle`): those adds
  do not run;
- weight gradient: one GEMM of the concatenated weight gradient reading the input once.

The rewrite keeps the instruction list's length and order (dependencies are indices): the
first GEMM of each group becomes the fused one, the others and the spared adds keep their place
with no work. Timing only: FLOPs, memory and the trace's tensors are the generator's.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from stage_core.autodiff import grad_name
from stage_core.lower.bind import Instr

#: The generator's names of the attention's query, key and value weights
#: (``stage_core.blocks._attention``).
QKV_WEIGHTS = frozenset({"wq", "wk", "wv"})


def _is_qkv_weight(name: str, weights: Collection[str]) -> bool:
    return name in weights and name.rsplit(".", 1)[-1] in QKV_WEIGHTS


def _group_key(instr: Instr, weights: Collection[str]) -> tuple[str, str, str] | None:
    """``(role, phase, shared tensor)`` of a q/k/v projection GEMM (forward, input-gradient or
    weight-gradient), or None for any other instruction."""
    if instr.kind != "einsum" or len(instr.inputs) != 2 or len(instr.outputs) != 1:
        return None
    (first, _), (second, _) = instr.inputs
    out = instr.outputs[0][0]
    prefix = grad_name("")
    if out.startswith(prefix) and _is_qkv_weight(out.removeprefix(prefix), weights):
        activation = second if first.startswith(prefix) else first  # (d.q, ln1) -> d.wq
        return ("wgrad", instr.phase, activation)
    weight = next((n for n in (first, second) if _is_qkv_weight(n, weights)), None)
    if weight is None:
        return None
    if out.startswith(prefix):  # (d.q, wq) -> d.ln1: the input's gradient, shared
        return ("dgrad", instr.phase, out)
    return ("fwd", instr.phase, second if weight == first else first)  # (ln1, wq) -> q


def _fused(members: Sequence[Instr], shared: str) -> Instr:
    """One GEMM doing ``members``' work: the operand they share counted once, the others
    concatenated (their sizes summed), so that :func:`~stage_explore.analytical.kernels.
    gemm_shape` finds the fused ``(M, N, K)``."""
    head = members[0]

    def merged(position: int, side: str) -> tuple[tuple[str, int], ...]:
        operands = [getattr(m, side)[position] for m in members]
        name = operands[0][0]
        if name == shared:
            return ((name, operands[0][1]),)
        return ((name, sum(size for _, size in operands)),)

    inputs = merged(0, "inputs") + merged(1, "inputs")
    outputs = merged(0, "outputs")
    read_once = sum(size for name, size in head.inputs if name == shared)
    written_once = sum(size for name, size in head.outputs if name == shared)
    extra = len(members) - 1
    return replace(
        head,
        flops=sum(m.flops for m in members),
        bytes_read=sum(m.bytes_read for m in members) - extra * read_once,
        bytes_written=sum(m.bytes_written for m in members) - extra * written_once,
        inputs=inputs,
        outputs=outputs,
    )


def _idle(instr: Instr) -> Instr:
    """``instr`` kept in place (its dependencies stay valid) with no work."""
    return replace(instr, flops=0, bytes_read=0, bytes_written=0, inputs=(), outputs=())


def fuse_qkv(instrs: Sequence[Instr], weights: Collection[str]) -> tuple[Instr, ...]:
    """``instrs`` with each phase's q, k and v projection GEMMs run as one (module docstring);
    ``weights`` are the block's weight names. Unchanged when the block has no such group."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for index, instr in enumerate(instrs):
        key = _group_key(instr, weights)
        if key is not None:
            groups.setdefault(key, []).append(index)
    fused = list(instrs)
    spared: dict[tuple[str, str], int] = {}  # (phase, gradient) -> adds that no longer run
    for (role, phase, shared), indices in groups.items():
        if len(indices) < 2:
            continue
        fused[indices[0]] = _fused([instrs[i] for i in indices], shared)
        for index in indices[1:]:
            fused[index] = _idle(instrs[index])
        if role == "dgrad":
            spared[phase, shared] = len(indices) - 1
    for index, instr in enumerate(instrs):
        if instr.kind != "elementwise" or ".accumulate." not in instr.name:
            continue
        gradient = instr.name.split(".accumulate.", 1)[1]
        left = spared.get((instr.phase, gradient), 0)
        if left and [name for name, _ in instr.outputs] == [gradient]:
            fused[index] = _idle(instr)
            spared[instr.phase, gradient] = left - 1
    return tuple(fused)
