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
:func:`fuse_siblings` is the rewrite for any such group of one module's weights (the gated
MLP's gate and up projections: :mod:`~stage_explore.analytical.fused_fc1`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from stage_core.autodiff import grad_name
from stage_core.lower.bind import Instr

#: The generator's names of the attention's query, key and value weights
#: (``stage_core.blocks._attention``).
QKV_WEIGHTS = frozenset({"wq", "wk", "wv"})


def _sibling(name: str, weights: Collection[str], siblings: Collection[str]) -> str | None:
    """The module of ``name`` (``shared`` of ``shared.wg``) when it is one of the block's
    weights whose own name is in ``siblings``, else None."""
    if name not in weights:
        return None
    module, _, own = name.rpartition(".")
    return module if own in siblings else None


def _group_key(
    instr: Instr, weights: Collection[str], siblings: Collection[str]
) -> tuple[str, str, str, str] | None:
    """``(role, phase, shared tensor, module)`` of a sibling projection GEMM (forward,
    input-gradient or weight-gradient), or None for any other instruction."""
    if instr.kind != "einsum" or len(instr.inputs) != 2 or len(instr.outputs) != 1:
        return None
    (first, _), (second, _) = instr.inputs
    out = instr.outputs[0][0]
    prefix = grad_name("")
    if out.startswith(prefix):
        module = _sibling(out.removeprefix(prefix), weights, siblings)
        if module is not None:
            activation = second if first.startswith(prefix) else first  # (d.q, ln1) -> d.wq
            return ("wgrad", instr.phase, activation, module)
    for weight in (first, second):
        module = _sibling(weight, weights, siblings)
        if module is None:
            continue
        if out.startswith(prefix):  # (d.q, wq) -> d.ln1: the input's gradient, shared
            return ("dgrad", instr.phase, out, module)
        return ("fwd", instr.phase, second if weight == first else first, module)  # -> q
    return None


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
    return fuse_siblings(instrs, weights, QKV_WEIGHTS)


def _own_weight(instr: Instr, weights: Collection[str], siblings: Collection[str]) -> str:
    """The own name (``wu`` of ``experts.wu``) of the sibling weight a grouped GEMM uses or
    whose gradient it writes."""
    prefix = grad_name("")
    names = [n for n, _ in instr.inputs] + [
        n.removeprefix(prefix) for n, _ in instr.outputs if n.startswith(prefix)
    ]
    return next(n.rpartition(".")[2] for n in names if _sibling(n, weights, siblings) is not None)


def fuse_siblings(
    instrs: Sequence[Instr],
    weights: Collection[str],
    siblings: Collection[str],
    named: str | None = None,
) -> tuple[Instr, ...]:
    """``instrs`` with each phase's GEMMs of one module's weights named in ``siblings`` (which
    read the same input) run as one over the concatenated weights, and the adds of their
    partial input gradients spared (module docstring). The fused GEMM takes the first
    member's place and, when ``named`` is given, the name of the member using that weight
    (else the first's). Unchanged when there is no such group."""
    groups: dict[tuple[str, str, str, str], list[int]] = {}
    for index, instr in enumerate(instrs):
        key = _group_key(instr, weights, siblings)
        if key is not None:
            groups.setdefault(key, []).append(index)
    fused = list(instrs)
    spared: dict[tuple[str, str], int] = {}  # (phase, gradient) -> adds that no longer run
    for (role, phase, shared, _), indices in groups.items():
        if len(indices) < 2:
            continue
        fused[indices[0]] = _fused([instrs[i] for i in indices], shared)
        namesake = next(
            (i for i in indices if _own_weight(instrs[i], weights, siblings) == named), None
        )
        if namesake is not None:
            fused[indices[0]] = replace(fused[indices[0]], name=instrs[namesake].name)
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
