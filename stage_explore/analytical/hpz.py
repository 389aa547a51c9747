"""DeepSpeed ZeRO++'s hierarchical partitioning (hpZ, the profile option
``zero_hpz_partition_size``; Wang et al., 'ZeRO++', arXiv 2306.10209, Section 3.2), as
DeepSpeed's code runs it (deepspeedai/DeepSpeed, ``deepspeed/runtime/zero/
partition_parameters.py`` and ``stage3.py``, ``deepspeed/utils/groups.py``, read 7 Dec 2026):

- **The groups.** ``groups._create_zero_param_parallel_group(group_size)`` cuts the *world*
  into groups of ``min(group_size, world_size)`` consecutive ranks (``ranks = range(i * size,
  (i + 1) * size)``, after ``_ensure_divisibility(world_size, size)``); its docstring's example
  is plain data parallelism ("data_parallel_group = [0,1,...,15]") and
  ``_zero_param_parallel_is_initialized`` carries "TODO: assert that MPU is not set". Those
  groups are data-parallel groups only when the data-parallel group is the world, so the model
  takes hpZ on a pure data-parallel mesh only (:func:`hpz_size`), its groups consecutive
  data-parallel ranks (:func:`hpz_span`).
- **Which gather uses which group.** ``Init.all_gather_coalesced`` gathers over the whole
  data-parallel group (``ds_process_group``, the primary shards ``ds_tensor``) unless the
  parameter has a secondary tensor (``use_secondary_tensor = params[0].ds_secondary_tensor is
  not None``), then over the hpZ group (``zero_param_process_group``, "intragroup") from the
  secondary shards. The secondary tensor is written by ``_partition_param_sec`` whenever a
  parameter that is whole on the rank is released (``_partition`` calls it before
  ``_partition_param``): a copy of the rank's slice of the gathered tensor, no collective. After
  each optimizer step ``_post_step`` calls ``invalidate_secondary_tensor`` (every
  ``ds_secondary_tensor = None``), so the step's first forward gathers each parameter over the
  whole group and refills the secondary shard on release; every later gather of the step — the
  backward's, a recomputed forward's, the later micro-batches' forwards — runs inside the hpZ
  group. Gradients are reduce-scattered over the whole group and the optimizer states stay
  sharded over it (hpZ changes neither).
- **Per micro-batch.** The levelled plan times one micro-batch for all (``_chunk``): a block's
  forward gather there is the mean over the step's ``m`` micro-batches of one whole-group gather
  and ``m − 1`` in-group ones (:func:`forward_gather_s`), the backward's always in-group.
- **Memory.** The secondary shard, the rank's ``1 / size`` of every partitioned parameter at the
  16-bit weight bytes (``secondary_partition_size = tensor_size // num_ranks_in_param_group``),
  held from the first forward release to the step's end (:func:`secondary_bytes`).

Not modelled: ZeRO++'s quantized weight all-gather (qwZ, ``zero_quantized_weights``) and
quantized gradient reduce (qgZ, ``zero_quantized_gradients``): no public measurement of
DeepSpeed's block-quantization and all-to-all kernels' seconds (``CUDAQuantizer``,
``all_to_all_quant_reduce``) that the model could take (docs/analytical.md, s34 zeropp).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.parallel.config import ParallelConfig
from stage_explore.analytical.framework_profile import FrameworkProfile
from stage_explore.system.ranks import group_span

#: A span as :meth:`~stage_explore.analytical.costing_comm.CommCosting._spans` gives one.
Span = tuple[Any, ...]


def hpz_size(profile: FrameworkProfile, parallel: ParallelConfig) -> int:
    """The ranks of a hpZ group under ``profile`` for ``parallel`` (1: hpZ off); a one-line
    :class:`ConfigError` for a combination DeepSpeed refuses or the model does not take."""
    size = profile.zero_hpz_partition_size
    if size == 1:
        return 1
    if parallel.zero != 3:
        raise ConfigError(
            f"`zero_hpz_partition_size` {size} needs ZeRO stage 3 (DeepSpeed keeps a secondary "
            f"partition only of stage 3's partitioned parameters), but got zero {parallel.zero}"
        )
    others = {"tp": parallel.tp, "cp": parallel.cp, "pp": parallel.pp, "ep": parallel.ep}
    model = {name: n for name, n in others.items() if n > 1}
    if model:
        raise ConfigError(
            f"`zero_hpz_partition_size` needs a pure data-parallel mesh (DeepSpeed cuts hpZ "
            f"groups from consecutive world ranks), but got {model}"
        )
    if parallel.dp_shard is not None and parallel.dp_shard not in (1, parallel.dp):
        raise ConfigError(
            f"`zero_hpz_partition_size` with hybrid sharding (dp_shard {parallel.dp_shard}) is "
            "not modelled (expected full ZeRO-3 over dp)"
        )
    if parallel.dp % size:
        raise ConfigError(
            f"`zero_hpz_partition_size` {size} must divide dp {parallel.dp} (DeepSpeed's "
            "_ensure_divisibility of the world by the hpZ group)"
        )
    return size


def hpz_span(dim_sizes: Sequence[int], span: Span, size: int) -> Span:
    """The span of the hpZ group inside the data-parallel group of ``span`` (its ranks sorted):
    the ``size`` consecutive members holding the span's rank, as DeepSpeed's
    ``_create_zero_param_parallel_group`` cuts them."""
    _, group, rank = span
    start = group.index(rank) // size * size
    members = tuple(group[start : start + size])
    found = group_span(dim_sizes, members)
    return (len(members), found.counts, found.regular, found.blocks), members, rank


def forward_gather_s(whole_s: float, group_s: float, micro_batches: int) -> float:
    """A block's forward gather per micro-batch (module docstring): the step's first over the
    whole data-parallel group (``whole_s``), the other ``micro_batches - 1`` inside the hpZ group
    (``group_s``), averaged."""
    return (whole_s + (micro_batches - 1) * group_s) / micro_batches


def hpz_gathers(
    dim_sizes: Sequence[int],
    gathers: Sequence[Instr],
    spans: dict[Any, Any],
    size: int,
    micro_batches: int,
    seconds: Callable[[Span, Instr, int], float],
) -> tuple[float, float | None]:
    """(forward, backward) seconds of a block's ZeRO-3 gathers ``gathers`` (the ``n``-th issued
    as its prefetch batches' calls, which ``seconds`` applies with ``n``): without hpZ (``size``
    1) the whole group's for both, backward None (the same); with it
    :func:`forward_gather_s` and the in-group gathers' seconds, each rank sending its secondary
    shard (``len(group) / size`` times its primary one)."""
    whole_s = sum(seconds(spans[i.axes], i, n) for n, i in enumerate(gathers))
    if size == 1 or not gathers:
        return whole_s, None
    group_s = sum(
        seconds(hpz_span(dim_sizes, spans[i.axes], size), _in_group(i, spans[i.axes], size), n)
        for n, i in enumerate(gathers)
    )
    return forward_gather_s(whole_s, group_s, micro_batches), group_s


def _in_group(gather: Instr, span: Span, size: int) -> Instr:
    """``gather`` (a rank's primary shard, ``1 / len(group)`` of the weights) as the in-group
    gather sends it: the rank's secondary shard, ``1 / size`` of the weights."""
    return replace(gather, comm_bytes=gather.comm_bytes * (len(span[1]) // size))


def secondary_bytes(elements: int, weight_bytes: int, size: int) -> int:
    """Bytes of the secondary shard a rank holds of ``elements`` partitioned parameter elements
    under hpZ groups of ``size`` (0 when off): ``ceil(elements / size)`` at the weight bytes."""
    return 0 if size == 1 else math.ceil(elements / size) * weight_bytes
