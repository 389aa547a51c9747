"""Block reorderings that let the compute stream run work beside a collective
(:func:`~stage_explore.analytical.overlap.apply_overlaps` applies them):

- :func:`defer_weight_gradients`: Transformer Engine's userbuffers "bulk" overlap, a backward
  input-gradient reduce-scatter issued before the weight-gradient GEMMs it runs beside;
- :func:`overlap_shared_experts`: Megatron-Core's ``--moe-shared-expert-overlap``, the shared
  experts' compute beside the routed tokens' all-to-all.

Each keeps dependency order and returns a block it cannot reorder unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from stage_core.lower.bind import Instr
from stage_core.trace import CollectiveKind


def is_gemm(instr: Instr) -> bool:
    """Whether ``instr`` is a two-operand einsum with one output (a GEMM)."""
    return instr.kind == "einsum" and len(instr.inputs) == 2 and len(instr.outputs) == 1


def defer_weight_gradients(
    instrs: Sequence[Instr], selected: Callable[[Instr], bool]
) -> tuple[Instr, ...]:
    """``instrs`` with each ``selected`` collective (a backward input-gradient reduce-scatter)
    moved before the weight-gradient GEMMs it runs beside (userbuffers "bulk" overlap): those of
    the linear layers whose input gradients it reduces — the einsums that read the output
    gradient an einsum writing the collective's operand reads — and that it does not wait for.
    Dependency order is kept; a block where it would not be is returned unchanged."""
    return deferred_gemms(instrs, selected)[0]


def deferred_gemms(
    instrs: Sequence[Instr], selected: Callable[[Instr], bool]
) -> tuple[tuple[Instr, ...], frozenset[int]]:
    """:func:`defer_weight_gradients` and the new indices of the GEMMs it moved."""
    order = list(range(len(instrs)))
    moved_all: set[int] = set()
    for position in range(len(instrs)):
        index = order[position]
        instr = instrs[index]
        if not selected(instr):
            continue
        ancestors: set[int] = set()
        stack = list(instr.deps)
        while stack:
            dep = stack.pop()
            if dep not in ancestors:
                ancestors.add(dep)
                stack.extend(instrs[dep].deps)
        reduced = {name for name, _ in instr.inputs}
        gradients = {  # what the einsums writing the reduced input gradient read
            name
            for producer in order[:position]
            if is_gemm(instrs[producer]) and instrs[producer].outputs[0][0] in reduced
            for name, _ in instrs[producer].inputs
        }
        moved = [
            i for i in order[:position]
            if i not in ancestors and is_gemm(instrs[i])
            and instrs[i].outputs[0][0] not in reduced
            and any(name in gradients for name, _ in instrs[i].inputs)
        ]  # fmt: skip
        if moved:
            kept = [i for i in order[:position] if i not in moved]
            order = kept + [index] + moved + order[position + 1 :]
            moved_all.update(moved)
    placed = {old: new for new, old in enumerate(order)}
    if any(placed[d] >= placed[i] for i in order for d in instrs[i].deps):
        return tuple(instrs), frozenset()
    deferred = tuple(
        replace(instrs[i], deps=tuple(sorted(placed[d] for d in instrs[i].deps))) for i in order
    )
    return deferred, frozenset(placed[i] for i in moved_all)


def _shared_expert_group(instrs: Sequence[Instr]) -> set[int]:
    """Indices of the shared experts' instructions (``shared.*``) and of the collectives that
    only they consume (e.g. the sequence-parallel all-gather of their input)."""
    group = {i for i, instr in enumerate(instrs) if "shared." in instr.name}
    users: dict[int, set[int]] = {}
    for index, instr in enumerate(instrs):
        for dep in instr.deps:
            users.setdefault(dep, set()).add(index)
    for index, instr in enumerate(instrs):
        if instr.collective is not None and users.get(index) and users[index] <= group:
            group.add(index)
    return group


def overlap_shared_experts(instrs: Sequence[Instr]) -> tuple[Instr, ...]:
    """``instrs`` reordered as Megatron's ``--moe-shared-expert-overlap`` runs them: the
    shared experts' leading collectives just before the first all-to-all (the dispatch, or the
    combine's gradient in the backward) and their compute just after it, so the compute stream
    runs them while the all-to-all is on the communication stream; without it they run in
    program order (forward: after the routed experts; backward: before the combine's gradient
    all-to-all is issued). Blocks without shared experts or all-to-alls, or whose
    dependencies would not allow it, are returned unchanged."""
    first = next(
        (i for i, x in enumerate(instrs) if x.collective is CollectiveKind.ALL_TO_ALL), None
    )
    group = _shared_expert_group(instrs)
    if first is None or not group:
        return tuple(instrs)
    computes = [i for i in sorted(group) if instrs[i].collective is None]
    if not computes:
        return tuple(instrs)
    leading = [i for i in sorted(group) if instrs[i].collective is not None and i < computes[0]]
    moved = set(computes) | set(leading)
    order = [i for i in range(first) if i not in moved] + leading + [first] + computes
    order += [i for i in range(first + 1, len(instrs)) if i not in moved]
    position = {old: new for new, old in enumerate(order)}
    if any(position[d] >= position[i] for i in order for d in instrs[i].deps):
        return tuple(instrs)
    return tuple(
        replace(instrs[i], deps=tuple(sorted(position[d] for d in instrs[i].deps))) for i in order
    )
