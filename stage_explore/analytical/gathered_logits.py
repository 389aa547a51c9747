"""The step time of logits gathered to the whole vocabulary on every tensor-parallel rank
(``loss_logits_gathered``; 7 Dec 2026, s35 kfthru: KempnerForge).

KempnerForge's plan puts ``ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())``
on the output head (``kempnerforge/distributed/tensor_parallel.py`` 0c4eba1e) and runs
``F.cross_entropy`` on the result, with no ``loss_parallel``. What that costs beside the
vocabulary-parallel loss the generator lowers:

- forward: ``ColwiseParallel._prepare_output_fn`` redistributes the ``Shard(-1)`` logits to
  ``Replicate()`` (``torch/distributed/tensor/parallel/style.py``), which
  ``Shard._to_replicate_tensor`` runs as ``funcol.all_gather_tensor(gather_dim=self.dim)``
  (``torch/distributed/tensor/placement_types.py``): one all-gather over the tp group of the
  rank's logits shard — timed as any other tensor-parallel collective of the block, and its
  ``torch.cat`` re-layout copy (the gather dim is not 0) charged by
  :func:`~stage_explore.analytical.funcol_copies.funcol_copy_bytes` like the sequence-parallel
  gathers' under ``funcol_seq_copies``;
- the loss's kernels (``log_softmax``, ``nll_loss`` and their backward) read and write ``tp``
  times the local logits: the cross-entropy instructions' logits are scaled by ``tp``, which
  :meth:`~stage_explore.analytical.kernels.KernelTimer._loss_s` turns into ``tp`` times the
  loss's memory-bound passes;
- the vocabulary-parallel loss's per-token statistics all-reduces (max, sum of exponentials,
  target logit: :class:`~stage_core.ops.CrossEntropy` ``stat_collectives``) do not run: the
  loss sees the whole vocabulary;
- backward: the ``Replicate`` gradient goes back to ``Shard(-1)`` through
  ``Redistribute.backward`` (``torch/distributed/tensor/_redistribute.py``), i.e.
  ``Shard._replicate_to_shard``: a local chunk of the replicated gradient and a ``clone`` of
  it — no collective. The clone (one read and write of the local slice) is not charged here:
  under ``torch.compile`` the slice may reach the GEMMs as a strided view, and which one
  KempnerForge's graphs run was not read.

:func:`gathered_logits` rewrites a head block's instructions so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from stage_core.lower.bind import Instr
from stage_core.trace import CollectiveKind

#: The op kind of the generator's cross-entropy instruction (:class:`~stage_core.ops.CrossEntropy`).
CROSS_ENTROPY = "crossentropy"
#: The mesh axes of the dense tensor-parallel group the logits are gathered over.
TP_AXES = ("tp",)


def _scaled(instr: Instr, tensor: str, tp: int) -> Instr:
    """``instr`` reading or writing ``tp`` times the ``tensor`` it names, its FLOPs and the
    bytes of that tensor scaled alike (the loss's other operands, targets and the per-token
    loss, are the same size on every rank)."""

    def grow(
        pairs: tuple[tuple[str, int], ...],
    ) -> tuple[tuple[tuple[str, int], ...], int]:
        out: list[tuple[str, int]] = []
        extra = 0
        for name, size in pairs:
            if name == tensor:
                extra += (tp - 1) * size
                size *= tp
            out.append((name, size))
        return tuple(out), extra

    inputs, read = grow(instr.inputs)
    outputs, written = grow(instr.outputs)
    return replace(
        instr,
        flops=instr.flops * tp,
        bytes_read=instr.bytes_read + read,
        bytes_written=instr.bytes_written + written,
        inputs=inputs,
        outputs=outputs,
    )


def gathered_logits(instrs: Sequence[Instr], tp: int, losses: frozenset[str]) -> tuple[Instr, ...]:
    """A head block's instructions of one phase with its logits gathered over ``tp`` ranks
    (module docstring). ``losses``: the names of the block's cross-entropy instructions (its
    forward's). In the forward an all-gather of the logits' shard right after the instruction
    that writes it, the cross-entropy (waiting for it) on ``tp`` times the logits, and none of
    its statistics all-reduces; in the backward the cross-entropy's gradient
    (``<loss>.backward``) on ``tp`` times them. ``tp`` 1 or no loss: unchanged."""
    if tp < 1:
        raise ValueError(f"gathered_logits: tp must be >= 1, got {tp}")
    if tp == 1 or not losses:
        return tuple(instrs)
    gradients = {f"{name}.backward" for name in losses}
    stats = {f"{ins.outputs[0][0]}.stats" for ins in instrs if ins.name in losses and ins.outputs}
    logits = {_logits(ins) for ins in instrs if ins.kind == CROSS_ENTROPY and ins.name in losses}
    new_index: dict[int, tuple[int, ...]] = {}  # old index -> what a dependency on it means
    gather_at: dict[str, int] = {}
    out: list[Instr] = []

    def mapped(deps: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(dict.fromkeys(d for dep in deps for d in new_index[dep]))

    for index, instr in enumerate(instrs):
        if instr.collective is CollectiveKind.ALL_REDUCE and {n for n, _ in instr.inputs} & stats:
            new_index[index] = mapped(instr.deps)  # the loss sees the whole vocabulary
            continue
        deps = mapped(instr.deps)
        if instr.kind == CROSS_ENTROPY and instr.name in losses:
            name = _logits(instr)
            deps = tuple(dict.fromkeys((*deps, *((gather_at[name],) if name in gather_at else ()))))
            instr = _scaled(instr, name, tp)
        elif instr.name in gradients:
            (grad,) = (n for n, _ in instr.outputs if n[2:] in {m for m, _ in instr.inputs})
            instr = _scaled(_scaled(instr, grad, tp), grad[2:], tp)
            instr = replace(instr, flops=instr.flops // tp)  # FLOPs scaled once, not twice
        new_index[index] = (len(out),)
        out.append(replace(instr, deps=deps))
        written = [(n, size) for n, size in instr.outputs if n in logits]
        if written and instr.phase != "bwd":
            ((name, local),) = written
            gather_at[name] = len(out)
            out.append(
                Instr(
                    name=f"all_gather:{name}",
                    phase=instr.phase,
                    kind="comm",
                    collective=CollectiveKind.ALL_GATHER,
                    axes=TP_AXES,
                    comm_bytes=local,  # the trace convention: the rank's shard
                    deps=(len(out) - 1,),
                    inputs=((name, local),),
                    outputs=((name, local * tp),),
                )
            )
    return tuple(out)


def _logits(loss: Instr) -> str:
    """The logits a cross-entropy instruction reads: its largest input (not the targets)."""
    return max(loss.inputs, key=lambda pair: pair[1])[0]
