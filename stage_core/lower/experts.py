"""Where the experts live on the generator's mesh: Megatron-Core's MoE parallel folding.

Megatron-Core builds two rank generators over the same ranks (``parallel_state``: attention
layers ``tp-cp-dp-pp``, expert layers ``etp-ep-edp-pp``; NVIDIA's "MoE parallel folding",
Liu et al. 2025, arXiv:2504.14960). With tp fastest in the rank id, an expert-parallel group
is the ``ep`` ranks right above the ``etp`` ranks: first what is left of tp (``tp/etp``), then
cp, then dp.

The generator's mesh is ``pp, dp, ep, cp, tp`` (the ``dp`` axis has size ``dp/ep_d``), and
:func:`fold_experts` says which of its axes partition the experts:

- ``etp = tp``: the experts are tensor-parallel over ``tp``; the group folds over cp when
  ``cp`` divides ``ep`` (axes ``ep, cp``), else it is carved out of dp alone (axis ``ep``);
- ``etp = 1``: every tp rank holds whole experts and routes its own sequence shard (sequence
  parallelism, which Megatron-Core requires for MoE with tp > 1); the group folds over tp and
  then as above (axes ``ep, tp`` or ``ep, cp, tp``);
- ``1 < etp < tp``: the tp axis is split in mesh axes :data:`TP_OUTER` (``tpo``, size
  ``tp/etp``) and ``tp`` (size ``etp``, innermost). Dense layers partition over both (one
  tensor-parallel group of ``tp`` consecutive ranks, as before); the experts are
  tensor-parallel over the inner ``tp`` alone and the group folds over ``tpo`` and then as
  above (axes ``ep, tpo`` or ``ep, cp, tpo``); sequence parallelism is required as for
  ``etp = 1``.
- ``etp < tp`` with an expert-parallel group smaller than the ``tp/etp`` ranks it folds over
  first (``ep`` a proper divisor of ``tp/etp``, e.g. tp 8, etp 2, ep 2; or ep 1): the group is
  the ``ep`` ranks right above the ``etp`` ranks, all inside tp, so tp splits in three,
  :data:`TP_REST` (``tpr``, size ``tp/(etp·ep)``, outermost), ``tpo`` (size ``ep``) and ``tp``
  (size ``etp``); the experts are partitioned over ``tpo`` alone (axes ``ep, tpo``, the ``ep``
  axis of size 1) and replicated over ``tpr``, which joins their data-parallel axes.

What is left, ``ep_d``, is the size of the mesh's ``ep`` axis and must divide ``dp`` (under hybrid
sharding ``dp_shard``: the group lies inside a shard group, the replicas stay outside it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from stage_core.errors import ConfigError
from stage_core.lower.bind import DATA_AXES, MESH_AXES
from stage_core.parallel.config import ParallelConfig
from stage_core.plans import TP_OUTER, TP_REST


@dataclass(frozen=True, slots=True)
class ExpertFold:
    """The mesh axes partitioning the experts (outermost first), the ``ep`` axis's size and,
    when tp is split, the sizes of its sub-axes :data:`TP_OUTER` (folded into the expert
    group) and :data:`TP_REST` (the experts' data-parallel part of tp); both 1 when tp is not
    split."""

    axes: tuple[str, ...]
    ep_from_dp: int
    tp_outer: int = 1
    tp_rest: int = 1

    @property
    def tp_split(self) -> bool:
        """Whether the mesh splits tp into ``tpr, tpo, tp``."""
        return self.tp_outer * self.tp_rest > 1


def fold_experts(parallel: ParallelConfig) -> ExpertFold:
    """Megatron-Core's expert-parallel group as axes of the generator's mesh (module docstring)."""
    # under hybrid sharding the group is carved out of a shard group (dp_shard), not the replicas
    hybrid = parallel.dp_shard is not None
    tp, cp, ep, etp = parallel.tp, parallel.cp, parallel.ep, parallel.expert_tp
    dp = parallel.shard_dp
    order = [a for a in parallel.axis_order if a != "pp"]
    axes = ["ep"]
    rest = ep
    outer = tp // etp
    if etp < tp:
        if not parallel.sequence_parallel:
            raise ConfigError(
                "`etp` < `tp` routes each tp rank's own sequence shard: it needs sequence "
                f"parallelism (Megatron-Core requires it for MoE with tp > 1), but got ({etp=}, "
                f"{tp=}, sp={parallel.sp})"
            )
        if ep % outer and outer % ep:
            raise ConfigError(
                "with `etp` < `tp` the expert-parallel group spans the tp ranks outside an "
                f"expert's tensor-parallel group first: `tp`/`etp` = {outer} and `ep` must "
                f"divide one another, but got ({ep=}, {etp=}, {tp=})"
            )
        if ep < outer:  # the group lies inside tp: tp splits in three (module docstring)
            return ExpertFold(("ep", TP_OUTER), 1, ep, outer // ep)
        axes.append("tp" if etp == 1 else TP_OUTER)
        rest //= outer
    if cp > 1 and rest % cp == 0 and order.index("cp") == order.index("ep") + 1:
        axes.insert(1, "cp")
        rest //= cp
    if dp % rest:
        folded = "·".join(a for a in ("tp", TP_OUTER, "cp") if a in axes) or "nothing"
        raise ConfigError(
            "the expert-parallel group left after folding over "
            f"{folded} must divide `dp`"
            + (" (its shard group `dp_shard` under hybrid sharding)" if hybrid else "")
            + f", but got ({ep=}, {etp=}, {tp=}, {cp=}, dp={parallel.dp}"
            + (f", dp_shard={dp})" if hybrid else ")")
        )
    return ExpertFold(tuple(axes), rest, outer if 1 < etp < tp else 1)


def data_axes(
    axis_sizes: Mapping[str, int], expert_axes: tuple[str, ...], expert: bool
) -> tuple[str, ...]:
    """The axes (size > 1, mesh order) over which a weight is replicated: ``dp, ep, cp`` for a
    dense weight, those not partitioning the experts for an expert weight (and ``tpr``, the
    tp ranks outside the experts' group when tp is split in three)."""
    if not expert:
        return tuple(a for a in MESH_AXES if a in DATA_AXES and axis_sizes[a] > 1)
    candidates = DATA_AXES | {TP_REST}
    return tuple(
        a for a in MESH_AXES if a in candidates and a not in expert_axes and axis_sizes[a] > 1
    )
