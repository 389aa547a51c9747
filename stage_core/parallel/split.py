"""Pipeline splits: how many transformer layers each model chunk (virtual pipeline stage) holds.

Contents:

- :class:`PipelineSplit`: the split policies when no explicit count is given.
- :func:`split_layers`: the layer count of every global virtual stage (``pp·vpp`` of them,
  chunk ``v`` of pipeline rank ``r`` is global stage ``v·pp + r``), from a policy, Megatron's
  first/last-stage counts or an explicit list; a one-line :class:`ConfigError` otherwise.

``front`` is NeMo AutoModel's split (``torch.distributed.pipelining`` stages, :func:`_front`):
``⌊L/n⌋`` layers each and one more on the first ``L mod n`` stages, embedding and head not
counted.

Layers are assigned consecutively in global-stage order; the embedding goes with global stage 0
and the head (final norm, output layer, loss) with the last one.

Megatron-Core's rules (``get_num_layers_to_build`` and ``get_transformer_layer_offset`` in
``megatron/core/transformer/transformer_block.py`` / ``transformer_layer.py``):

- Without options the depth must divide evenly: ``layers % pp == 0`` (and the per-rank count
  by ``vpp``); Megatron refuses anything else.
- ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` fix the first
  (last) rank's count; the other ranks share the rest equally, which must divide. With
  interleaving each of those per-rank counts must divide by ``vpp`` and a rank's chunks hold
  ``count/vpp`` layers each. Megatron forbids combining them with the two options below.
- ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split`` count
  the embedding (loss) as one layer: ``layers + 1`` (``+ 2`` with both) must divide by
  ``pp·vpp``; every virtual stage gets the quotient, less one for the first (last) virtual stage.

STAGE's default (``auto``) is the even split when it divides, else ``ends``: every middle
stage gets the same ``m`` layers and the two end stages share the rest (the head's end the
smaller half), with ``m`` chosen to minimise the largest stage when the embedding and the head
count as one layer each, Megatron's accounting. When ``layers + 2`` divides by ``n`` this is
exactly Megatron's embedding-and-loss split — the one Meta used for Llama 3.1 405B
(126 layers on 16 stages: "we reduce one Transformer layer each from the first and the last
stages", Llama Team 2024, arXiv 2407.21783, Section 3.3.2). Any ``ends`` split with ``vpp = 1``
is expressible with Megatron's first/last-stage options; with ``vpp > 1`` it needs Megatron's
``--pipeline-model-parallel-layout`` (``pp_layout``, :mod:`stage_core.parallel.layout`), which
spells out every stage's layers and is taken as given.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from enum import StrEnum

from stage_core.errors import ConfigError
from stage_core.parallel.layout import layout_layers


class PipelineSplit(StrEnum):
    """How layers are split over pipeline stages when no explicit counts are given."""

    AUTO = "auto"  # even when it divides, else ends
    EVEN = "even"  # Megatron's default: layers % (pp·vpp) == 0
    ENDS = "ends"  # middle stages ⌈L/n⌉, the two ends share the rest
    EMBEDDING = "embedding"  # --account-for-embedding-in-pipeline-split
    LOSS = "loss"  # --account-for-loss-in-pipeline-split
    EMBEDDING_LOSS = "embedding-loss"  # both
    FRONT = "front"  # ⌊L/n⌋ each, the first L mod n stages one more (NeMo AutoModel)


def _even(layers: int, stages: int) -> tuple[int, ...]:
    if layers % stages:
        raise ConfigError(
            f"`pp`·`vpp` must divide `layers` for an even pipeline split, but got ({layers=}, "
            f"pp·vpp={stages}) — pp_split='auto' or 'ends', first/last-stage layers or an "
            "explicit pp_layers list split it unevenly"
        )
    return (layers // stages,) * stages


def _accounted(layers: int, stages: int, embedding: int, loss: int) -> tuple[int, ...]:
    total = layers + embedding + loss
    if total % stages:
        counted = " and ".join(n for n, c in (("embedding", embedding), ("loss", loss)) if c)
        raise ConfigError(
            f"counting the {counted} as layers needs `pp`·`vpp` to divide {total} "
            f"(layers={layers} + {embedding + loss}), but got pp·vpp={stages}"
        )
    counts = [total // stages] * stages
    counts[0] -= embedding
    counts[-1] -= loss
    if min(counts) < 0:
        raise ConfigError(
            f"too few layers to count the embedding or loss as one: ({layers=}, pp·vpp={stages})"
        )
    return tuple(counts)


def _ends(layers: int, stages: int) -> tuple[int, ...]:
    """Middle stages ``m`` layers each, the two ends share the rest (the head's end the smaller
    half); ``m`` minimises the largest stage load counting the embedding and the head as one
    layer each (Megatron's accounting), ties going to the larger ``m`` (lighter ends)."""
    if stages == 1:
        return (layers,)
    best: tuple[int, int, int] | None = None
    for middle in sorted(
        {layers // stages, -(-layers // stages), (layers + 2) // stages, -(-(layers + 2) // stages)}
    ):
        rest = layers - (stages - 2) * middle
        if (middle < 1 and stages > 2) or rest < 0:
            continue
        first = rest - rest // 2
        load = max(middle if stages > 2 else 0, first + 1)
        if best is None or load <= best[0]:
            best = (load, middle, first)
    if best is None:
        raise ConfigError(
            f"`layers` must be at least pp·vpp − 2 to give every middle stage a layer, but got "
            f"({layers=}, pp·vpp={stages})"
        )
    _, middle, first = best
    rest = layers - (stages - 2) * middle
    return (first, *(middle,) * (stages - 2), rest - first)


def _front(layers: int, stages: int) -> tuple[int, ...]:
    """``⌊layers/stages⌋`` layers per stage, the first ``layers mod stages`` stages one more:
    NeMo AutoModel's split for ``torch.distributed.pipelining``
    (``nemo_automodel/components/distributed/pipelining/functional.py``,
    ``generate_hf_model_fqn_per_model_part``: ``layers_per_stage = num_layers // num_stages``,
    ``stage_layer_count += 1`` while ``stage_idx < num_layers % num_stages``; the embedding on
    the first stage, the final norm and ``lm_head`` on the last, neither counted), which refuses
    more stages than layers."""
    if stages > layers:
        raise ConfigError(
            f"pp_split='front' gives every pipeline stage at least one layer, but got more "
            f"stages than layers ({layers=}, pp·vpp={stages})"
        )
    base, extra = divmod(layers, stages)
    return tuple(base + (1 if stage < extra else 0) for stage in range(stages))


def _per_rank(counts: Sequence[int], pp: int, vpp: int, what: str) -> tuple[int, ...]:
    """Per-rank counts expanded to virtual stages: chunk ``v`` of rank ``r`` gets ``c_r/vpp``."""
    if vpp > 1:
        bad = [count for count in counts if count % vpp]
        if bad:
            raise ConfigError(
                f"with `vpp`={vpp} every pipeline rank's layer count must divide by vpp "
                f"(Megatron), but {what} gives {list(counts)}"
            )
    return tuple(counts[stage % pp] // vpp for stage in range(pp * vpp))


def _first_last(
    layers: int, pp: int, vpp: int, first: int | None, last: int | None
) -> tuple[int, ...]:
    fixed = [count for count in (first, last) if count is not None]
    others = pp - len(fixed)
    rest = layers - sum(fixed)
    given = f"(first={first}, last={last}, {layers=}, {pp=})"
    if rest < 0 or (others == 0 and rest) or (others and rest % others):
        raise ConfigError(
            "the first/last-stage layer counts must leave a number of layers that the other "
            f"pipeline stages share equally (Megatron), but got {given}"
        )
    middle = rest // others if others else 0
    counts = [middle] * pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return _per_rank(counts, pp, vpp, f"first/last-stage layers {given}")


def _layout(layers: int, stages: int, layout: str) -> tuple[int, ...]:
    counts = layout_layers(layout)
    if len(counts) != stages:
        raise ConfigError(
            f"`pp_layout` must list pp·vpp = {stages} stages, but got {len(counts)} in "
            f"pp_layout={layout!r}"
        )
    if sum(counts) != layers:
        raise ConfigError(
            f"`pp_layout` must place the model's {layers} decoder layers ('t'), but got "
            f"{sum(counts)} in pp_layout={layout!r}"
        )
    return counts


def _explicit(layers: int, pp: int, vpp: int, explicit: Sequence[int]) -> tuple[int, ...]:
    """The per-chunk counts of an explicit ``pp_layers`` list: its length is checked first
    (one count per stage or per chunk), then its sum; a list wrong in both says both."""
    listed = list(explicit)
    total = sum(listed)
    if len(listed) not in (pp, pp * vpp):
        also = f"; they also add up to {total}, not the model's {layers} layers"
        raise ConfigError(
            f"`pp_layers` must list one count per pipeline stage (pp={pp}) or per model chunk "
            f"(pp·vpp={pp * vpp}), but got {len(listed)} counts: {listed}"
            f"{also if total != layers else ''}"
        )
    if total != layers:
        raise ConfigError(
            f"`pp_layers` must add up to the model's layers, but got pp_layers={listed} "
            f"(sum {total}) with {layers=}"
        )
    if len(listed) == pp * vpp:
        return tuple(listed)
    return _per_rank(listed, pp, vpp, f"pp_layers={listed}")


@functools.lru_cache(maxsize=4096)
def cached_split_layers(
    layers: int,
    pp: int,
    vpp: int,
    split: PipelineSplit | str,
    first: int | None,
    last: int | None,
    explicit: tuple[int, ...],
    layout: str = "",
) -> tuple[int, ...]:
    """:func:`split_layers` memoised (a pure function of hashable arguments; a configuration's
    split is asked for by its validation and again by its workload, for every candidate of a
    search); a :class:`ConfigError` is raised again on each call."""
    return split_layers(
        layers, pp, vpp, split=split, first=first, last=last, explicit=explicit, layout=layout
    )


def split_layers(
    layers: int,
    pp: int,
    vpp: int = 1,
    *,
    split: PipelineSplit | str = PipelineSplit.AUTO,
    first: int | None = None,
    last: int | None = None,
    explicit: Sequence[int] = (),
    layout: str = "",
) -> tuple[int, ...]:
    """The layers of each global virtual stage ``v·pp + r`` (``pp·vpp`` counts summing to
    ``layers``). A Megatron-Core ``layout`` string (:mod:`stage_core.parallel.layout`, its
    stage count and tokens already checked by the configuration) wins, then ``explicit``, then
    ``first``/``last``, then the ``split`` policy.

    Every stage holds at least one layer except the first and the last, which may hold only
    the embedding or the head (as Megatron's embedding/loss accounting allows).
    """
    stages = pp * vpp
    policy = PipelineSplit(split)
    if layout:
        counts = _layout(layers, stages, layout)
    elif explicit:
        counts = _explicit(layers, pp, vpp, explicit)
    elif first is not None or last is not None:
        counts = _first_last(layers, pp, vpp, first, last)
    elif policy is PipelineSplit.EVEN:
        counts = _even(layers, stages)
    elif policy is PipelineSplit.AUTO:
        counts = _even(layers, stages) if layers % stages == 0 else _ends(layers, stages)
    elif policy is PipelineSplit.ENDS:
        counts = _ends(layers, stages)
    elif policy is PipelineSplit.FRONT:
        counts = _front(layers, stages)
    else:
        embedding = int(policy in (PipelineSplit.EMBEDDING, PipelineSplit.EMBEDDING_LOSS))
        loss = int(policy in (PipelineSplit.LOSS, PipelineSplit.EMBEDDING_LOSS))
        counts = _accounted(layers, stages, embedding, loss)
    negative = [count for count in counts if count < 0]
    empty = [index for index in range(1, stages - 1) if counts[index] == 0]
    if negative or empty or (stages == 1 and counts[0] == 0):
        raise ConfigError(
            "every pipeline stage but the first and the last (which hold the embedding and the "
            f"head) needs at least one layer, but the split gives {list(counts)}"
        )
    return counts
