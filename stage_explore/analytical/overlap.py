"""Communication that frameworks overlap with compute, as rewrites of a block's instructions.

Holds :func:`overlap_collectives` (take a collective, or all but a first chunk of it, off its
dependents' critical path), :func:`overlap_shared_experts` (run an MoE block's shared experts
while its dispatch all-to-all is in flight), :func:`overlap_rule` (which collectives a
:class:`~stage_explore.analytical.frameworks.FrameworkProfile` overlaps, and how much of each
stays on the path) and :func:`flat_ring_s` (a collective run as one flat ring over a group that
spans several network dims).

A block's instructions run on an in-order compute stream and an in-order communication stream
(:func:`~stage_explore.analytical.blocktime.time_block`); a collective's dependents wait for all
of it. Overlap is expressed without changing that engine:

- **Chunked overlap** (Megatron ``--tp-comm-overlap``: Transformer Engine splits a
  tensor-parallel all-gather or reduce-scatter into ``tp`` chunks pipelined with the GEMM that
  consumes or produces it): the collective becomes a *head* carrying ``1/tp`` of the bytes, which
  its dependents wait for, and a *tail* carrying the rest, which runs after it on the
  communication stream while the GEMM computes.
- **Full overlap** (Megatron ``--overlap-moe-expert-parallel-comm``: one micro-batch's
  dispatch/combine all-to-all runs beside another micro-batch's compute): the dependents wait only
  for what the collective itself waited for; the collective still occupies the communication
  stream, so a block never ends before its communication does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from stage_core.lower.bind import Instr
from stage_core.plans import TP_OUTER
from stage_core.trace import CollectiveKind
from stage_explore.analytical.collectives import _level_s
from stage_explore.analytical.frameworks import FrameworkProfile
from stage_explore.system.model import System
from stage_explore.system.ranks import group_span

#: A rule: for a collective, None (not overlapped) or the fraction of it its dependents wait for.
OverlapRule = Callable[[Instr], float | None]


def overlap_collectives(instrs: Sequence[Instr], rule: OverlapRule) -> tuple[Instr, ...]:
    """``instrs`` with the collectives ``rule`` selects taken (partly) off the critical path
    (module docstring); dependency indices are renumbered."""
    result: list[Instr] = []
    waits: list[tuple[int, ...]] = []  # old index -> what its dependents wait for, renumbered
    for instr in instrs:
        deps = tuple(sorted({d for dep in instr.deps for d in waits[dep]}))
        fraction = rule(instr) if instr.collective is not None else None
        if fraction is None or instr.comm_bytes == 0:
            result.append(replace(instr, deps=deps))
            waits.append((len(result) - 1,))
            continue
        head_bytes = int(instr.comm_bytes * fraction)
        if head_bytes > 0:
            result.append(replace(instr, deps=deps, comm_bytes=head_bytes))
            head = len(result) - 1
            result.append(
                replace(instr, name=instr.name + ".tail", deps=(head,),
                        comm_bytes=instr.comm_bytes - head_bytes)
            )  # fmt: skip
            waits.append((head,))
        else:
            result.append(replace(instr, deps=deps))
            waits.append(deps)
    return tuple(result)


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


def overlap_rule(
    profile: FrameworkProfile, tp: int, sp: bool, inner_tp: int | None = None
) -> OverlapRule | None:
    """The collectives ``profile`` overlaps inside a block, or None when it overlaps none:
    tensor-parallel all-gathers and reduce-scatters (sequence parallelism only, as Transformer
    Engine requires) with ``1/tp`` on the path, and expert-parallel all-to-alls fully.
    ``inner_tp``: the size of the mesh's ``tp`` axis when the lowering splits tp into ``tpo``
    and ``tp`` (an expert tensor parallel size strictly between 1 and tp): the dense layers'
    collectives over both keep ``1/tp``, the experts' over ``tp`` alone ``1/inner_tp``."""
    tp_overlap = profile.tp_comm_overlap and sp and tp > 1
    moe_overlap = profile.moe_comm_overlap
    if not tp_overlap and not moe_overlap:
        return None
    chunks = {("tp",): inner_tp or tp, (TP_OUTER, "tp"): tp}

    def rule(instr: Instr) -> float | None:
        kind = instr.collective
        if (
            tp_overlap
            and instr.axes in chunks
            and kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)
        ):
            return 1 / chunks[instr.axes]
        if moe_overlap and kind is CollectiveKind.ALL_TO_ALL:
            return 0.0  # in training only the expert dispatch/combine are all-to-alls; their
            # group may be ep, ep×tp, ep×cp or, with the ep axis of size 1, cp alone
        return None

    return rule


def flat_ring_s(
    system: System, kind: CollectiveKind, size_bytes: int, group: Sequence[int]
) -> float:
    """α–β time of a collective run as one ring over all of ``group`` on the slowest network
    dim it spans (every hop at that dim's per-rank bandwidth); ``size_bytes`` as in
    :func:`~stage_explore.analytical.collectives.alpha_beta_collective_s`."""
    ranks = len(group)
    if ranks < 2:
        return 0.0
    span = group_span(system.dim_sizes, group)
    dim = system.network[span.dims[-1]]
    buffer = size_bytes * ranks if kind is CollectiveKind.ALL_GATHER else size_bytes
    algorithm = dim.algorithms.for_kind(kind)
    return _level_s(kind, algorithm, ranks, float(buffer), dim)
