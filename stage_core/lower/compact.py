"""The lowering's compact per-stage form: chunks as runs of identical blocks, and the gradient
buckets of a chunk as groups of equal reductions.

Holds :data:`Runs`, :func:`chunk_runs` (every global pipeline stage's blocks as runs of block
kinds), :func:`layout_key` (what ``chunk_runs`` takes, from a workload), :func:`layer_pattern`,
:func:`mtp_blocks`, :func:`partial_recompute_pattern` and :func:`recompute_groups` (the layers'
block kinds under partial or uniform recompute, and a uniform recompute's groups), :data:`Group`
and :func:`bucket_gradients` (a chunk's bucketed gradient reductions, computed per run of
identical blocks in a few arithmetic steps), :func:`run_totals` (a chunk's bytes per key, summed
over its runs).

The full per-stage program is the expansion of this form: :func:`~stage_core.lower.program.
chunk_blocks` expands a stage's runs into its bound blocks, :func:`~stage_core.lower.program.
_sync_ops` expands the groups into one :class:`~stage_core.lower.program.SyncOp` per reduction.
The analytical backend times the compact form itself (one block timing per run, the reductions
of a group at once), so a chunk of a hundred identical layers costs it a handful of operations;
both read the same derivation (docs/analytical.md, "The timing engine").
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from stage_core.blocks import MTP_HEAD, mtp_block_name
from stage_core.models.layers import grouped_block_name, is_grouped_block, kept_block_name
from stage_core.models.spec import ModelSpec

if TYPE_CHECKING:
    from stage_core.lower.program import Workload

#: A chunk as runs of identical blocks in forward order: ``((kind, count), ...)``.
Runs = tuple[tuple[str, int], ...]

#: A group of equal reductions: (bucket key, bytes, first position, step, count, lead) — at
#: positions ``first + i·step`` (i < count) in backward block order, each holding the gradients
#: of the blocks from ``lead`` positions before its own (where its bucket started filling).
Group = tuple[Hashable, int, int, int, int, int]


def mtp_blocks(model: ModelSpec) -> tuple[str, ...]:
    """The block kinds of the model's multi-token-prediction modules, in order (one per depth;
    each module's transformer layer is of the main model's last layer kind). Their losses are
    as many :data:`~stage_core.blocks.MTP_HEAD` blocks."""
    if not model.mtp_layers:
        return ()
    return (mtp_block_name(model.layer_blocks()[-1]),) * model.mtp_layers


def layer_pattern(model: ModelSpec) -> tuple[str, ...]:
    """Every layer's block kind, or () when all are the dense ``layer``."""
    blocks = model.layer_blocks()
    return () if all(kind == "layer" for kind in blocks) else blocks


@functools.lru_cache(maxsize=256)
def partial_recompute_pattern(
    pattern: tuple[str, ...],
    stage_layers: tuple[int, ...],
    recomputed: int,
    method: str = "block",
    pp: int = 1,
) -> tuple[str, ...]:
    """Every layer's block kind under partial checkpointing: recomputed layers keep their kind,
    the others become :func:`~stage_core.models.layers.kept_block_name` kinds (activations
    kept). ``method`` (:data:`~stage_core.parallel.vocab.RECOMPUTE_METHODS`), N = ``recomputed``:

    - ``block``: Megatron-Core's ``--recompute-method block --recompute-num-layers N`` — in
      each global virtual stage (``stage_layers`` layers each) the first N layers
      (``TransformerBlock._checkpointed_forward`` checkpoints ``layer_idx <
      recompute_num_layers`` over the layers of the block, one block per model chunk).
    - ``every``: torchtitan's every N-th block — per pipeline rank (of ``pp``) a counter over
      its blocks (its chunks in order, global stages r, r + pp, …), a block checkpointed when
      the count is a multiple of N (``_apply_layer_sac``'s ``count % ac_freq == 0``).
    - ``spread``: fms-fsdp's ``selective_checkpointing`` fraction p = N / L of a rank's L
      blocks, as evenly spaced as its rule makes them — per pipeline rank the same counter,
      a block checkpointed when ``count · p >= cut_off``, ``cut_off`` starting at 1/2 and
      growing by 1 at each checkpointed block (fms_fsdp/policies/ac_handler.py
      ``apply_fsdp_checkpointing``), so N = round(L·p) blocks: the j-th at count
      ⌈(j − 1/2)·L/N⌉; exact integer arithmetic: ``2·count·N >= (2·j − 1)·L``.
    - ``uniform``: Megatron-Core's ``--recompute-method uniform`` — every layer recomputed, in
      groups of N consecutive layers of each global virtual stage from its first (the last
      group may be shorter); a layer after the first of its group becomes a
      :func:`~stage_core.models.layers.grouped_block_name` kind (it saves nothing: the group
      keeps only its input).

    (memoised)"""
    if method == "uniform":
        result: list[str] = []
        for count in stage_layers:
            start = len(result)
            result += [
                kind if offset % recomputed == 0 else grouped_block_name(kind)
                for offset, kind in enumerate(pattern[start : start + count])
            ]
        return tuple(result)
    starts = [sum(stage_layers[:g]) for g in range(len(stage_layers))]
    recompute = [False] * len(pattern)
    if method == "block":
        for g, count in enumerate(stage_layers):
            for offset in range(min(count, recomputed)):
                recompute[starts[g] + offset] = True
    for rank in range(pp if method in ("every", "spread") else 0):
        chunks = range(rank, len(stage_layers), pp)
        total = sum(stage_layers[g] for g in chunks)  # L: the rank's blocks
        position = hits = 0
        for g in chunks:
            for offset in range(stage_layers[g]):
                position += 1
                if method == "every":
                    again = position % recomputed == 0
                else:  # position·(N/L) >= hits + 1/2, in integers
                    again = 2 * position * recomputed >= (2 * hits + 1) * total
                    hits += again
                recompute[starts[g] + offset] = again
    return tuple(
        kind if again else kept_block_name(kind)
        for kind, again in zip(pattern, recompute, strict=True)
    )


@functools.lru_cache(maxsize=256)
def _groups_of(pattern: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The distinct uniform recompute groups of a partial pattern, each as its layers' kinds in
    forward order (a kind, then the grouped kinds that follow it), only those of 2 or more."""
    groups: set[tuple[str, ...]] = set()
    current: list[str] = []
    for kind in (*pattern, ""):
        if current and not is_grouped_block(kind):
            if len(current) > 1:
                groups.add(tuple(current))
            current = []
        if kind:
            current.append(kind)
    return tuple(sorted(groups))


def recompute_groups(workload: Workload) -> tuple[tuple[str, ...], ...]:
    """The distinct groups of 2 or more layers a uniform recompute checkpoints as one unit
    (``recompute_method = "uniform"``, :func:`partial_recompute_pattern`), as block kinds in
    forward order; () for any other recompute (memoised by pattern). A group starts at a
    global virtual stage's first layer, so groups never span two chunks."""
    parallel = workload.parallel
    if parallel.recompute_method != "uniform" or parallel.recompute_num_layers is None:
        return ()
    if parallel.recompute_num_layers < 2:
        return ()
    return _groups_of(layout_key(workload)[1])


def layout_key(workload: Workload, pattern: tuple[str, ...] | None = None) -> tuple[Any, ...]:
    """What :func:`chunk_runs` takes for ``workload``; ``pattern``: the model's
    :func:`layer_pattern`, if the caller has it."""
    model, parallel = workload.model, workload.parallel
    if pattern is None:
        pattern = layer_pattern(model)
    stage_layers = workload.stage_layers or parallel.stage_layers(model)
    if parallel.recompute_num_layers is not None:
        pattern = partial_recompute_pattern(
            pattern or ("layer",) * model.layers,
            stage_layers,
            parallel.recompute_num_layers,
            parallel.recompute_method,
            parallel.pp,
        )
    layout = (model.layers, pattern, parallel.pp, parallel.vpp, stage_layers)
    return (*layout, mtp_blocks(model)) if model.mtp_layers else layout


@functools.lru_cache(maxsize=1024)
def chunk_runs(
    layers: int,
    layer_blocks: tuple[str, ...],
    pp: int,
    vpp: int,
    stage_layers: tuple[int, ...] = (),
    mtp: tuple[str, ...] = (),
) -> tuple[Runs, ...]:
    """Per global pipeline stage (``pp·vpp`` of them): its blocks as runs of kinds in forward
    order — the embedding on the first, ``stage_layers[stage]`` layers each (empty: the even
    ``layers/(pp·vpp)``; each layer's block kind from ``layer_blocks``, empty: all ``layer``;
    consecutive identical kinds form one run), on the last the multi-token-prediction modules
    ``mtp`` after the layers (Megatron-Core's default placement), then the head, then the
    modules' losses (memoised)."""
    counts = stage_layers or (layers // (pp * vpp),) * (pp * vpp)
    result = []
    for stage in range(pp * vpp):
        kinds = ["embedding"] if stage == 0 else []
        start = sum(counts[:stage])
        indices = range(start, start + counts[stage])
        kinds += [layer_blocks[i] if layer_blocks else "layer" for i in indices]
        if stage == pp * vpp - 1:
            kinds += [*mtp, "head", *([MTP_HEAD] * len(mtp))]
        runs: list[tuple[str, int]] = []
        for kind in kinds:
            if runs and runs[-1][0] == kind:
                runs[-1] = (kind, runs[-1][1] + 1)
            else:
                runs.append((kind, 1))
        result.append(tuple(runs))
    return tuple(result)


_Key = TypeVar("_Key", bound=Hashable)


def run_totals(per_block: Sequence[Mapping[_Key, int]], counts: Sequence[int]) -> dict[_Key, int]:
    """A chunk's bytes per key (a gather's axes, a reduction's bucket key) summed over its runs:
    each run's bytes of one block (``per_block``) times its block count (``counts``), the keys
    in the order the runs first name them."""
    total: dict[_Key, int] = {}
    for run, count in zip(per_block, counts, strict=True):
        for key, size in run.items():
            total[key] = total.get(key, 0) + count * size
    return total


#: A bucket limit no chunk reaches: every key's gradients are reduced once, after the chunk's
#: last backward (one bucket per chunk).
UNBUCKETED = 2**62


def bucket_gradients(
    runs: Sequence[tuple[Mapping[Any, int], int]],
    limit: int,
) -> list[Group]:
    """The gradient reductions of a chunk, as groups.

    ``runs`` are the chunk's blocks in *backward* order as (gradient bytes per bucket key, number
    of identical blocks; every byte count > 0). Walking the blocks, a key's pending bytes grow by
    each block's contribution; the key is reduced when they reach ``limit``, and every pending
    key at the chunk's last block (Megatron's and PyTorch DDP's buckets, filled in backward
    order). Computed per run: a run adds ``count × size`` to a key, which reaches ``limit``
    after ``⌈(limit − carried)/size⌉`` blocks and then every ``⌈limit/size⌉``.
    """
    total = sum(count for _, count in runs)
    pending: dict[Hashable, int] = {}
    started: dict[Hashable, int] = {}  # where each pending key's bucket started filling
    groups: list[Group] = []
    position = 0
    for reductions, count in runs:
        if count == 0:
            continue
        for key, size in reductions.items():
            carried = pending.pop(key, 0)
            start = started.pop(key, position)
            if size >= limit:  # every block of the run reduces the key on its own
                groups.append((key, carried + size, position, 1, 1, position - start))
                if count > 1:
                    groups.append((key, size, position + 1, 1, count - 1, 0))
                continue
            first = -(-(limit - carried) // size)  # blocks until the pending bytes reach limit
            if first > count:
                pending[key] = carried + count * size
                started[key] = start
                continue
            at = position + first - 1
            groups.append((key, carried + first * size, at, 1, 1, at - start))
            period = -(-limit // size)
            rest = count - first
            full = rest // period
            if full:
                groups.append((key, period * size, at + period, period, full, period - 1))
            if rest - full * period:
                pending[key] = (rest - full * period) * size
                started[key] = at + full * period + 1
        position += count
    for key, size in pending.items():  # the chunk's last block reduces what is left
        groups.append((key, size, total - 1, 1, 1, total - 1 - started[key]))
    return groups
