"""FSDP gradient accumulation without a gradient reduction per micro-batch
(``fsdp_no_sync_accumulation``) at any pipeline depth; the pipeline-stage form of the same
mechanism is ``pp_unsharded_params`` (7 Dec 2026, s35 nosync).

A trainer that turns FSDP's gradient sync off on every micro-batch of a step but the last —
FSDP2 ``module.set_requires_gradient_sync(False)``, FSDP1 ``with model.no_sync():`` — keeps
every FSDP unit's gradient unsharded on each rank from the first micro-batch's backward to
the last one's, and reduce-scatters once per step:

- FSDP2 (torch ``distributed/fsdp/_fully_shard/_fsdp_param_group.py`` ``post_backward``:
  without ``reduce_grads`` it calls ``fsdp_param.to_accumulated_grad_if_needed()`` and returns
  before the reduce-scatter; ``_fsdp_param.py`` ``to_accumulated_grad_if_needed`` keeps the
  unsharded gradient as ``unsharded_accumulated_grad`` cast to the ``reduce_dtype``, and
  ``accumulate_unsharded_grad_if_needed`` adds each later micro-batch's gradient into it;
  ``_fsdp_state.py`` / ``fully_shard.set_requires_gradient_sync`` sets ``reduce_grads`` on
  every state). ``reshard_after_backward`` stays on, so the parameters are resharded and
  all-gathered per micro-batch as before.
- FSDP1 (``fully_shard_data_parallel.py`` ``no_sync`` docstring: gradients "accumulated in
  module variables", and ".. note:: This likely results in higher memory usage because FSDP
  will accumulate the full model gradients (instead of gradient shards) until the eventual
  sync").

What the model charges (:func:`no_sync_accumulates`): memory, the rank's unsharded gradient of
every block (:func:`no_sync_held_bytes`: FSDP2 in the reduce dtype, FSDP1 in the parameter
dtype) beside the step's other buffers;
time, the per-block reduce-scatters (and a hybrid-sharded block's replica all-reduce) only in
the step's last micro-batch, overlapped with its backward as before (:func:`without_scatters`
per micro-batch, :func:`last_scatter_s` once), and the accumulation into the unsharded
buffer every micro-batch (``passes.py``, :func:`accumulation_bytes`) in place of the sharded
gradient's accumulation. The trace mode emits the reduce-scatters in a chunk's last
micro-batch's backward only (``trace_mode.py``, ``NodeOptions(zero_no_sync=True)``).

No gradient shard at the peak (7 Dec 2026, s36 kfmem): a step's gradient shards exist only
after its last micro-batch reduces each unit — ``optimizer.zero_grad()`` sets them to ``None``
(torch's default ``set_to_none=True`` since 2.0), FSDP2's ``foreach_reduce`` assigns
``sharded_param.grad`` when the unit is reduced (``_fsdp_collectives.py``: a new sharded
DTensor gradient when ``.grad is None``), FSDP1's ``_post_backward_hook`` replaces the
unsharded ``flat_param.grad`` by its shard likewise — and each unit's unsharded gradient is
freed as its shard appears. The peak (the loss's backward of a micro-batch after the first,
every unit's unsharded gradient held) therefore holds none of the shards the model states
count: the held bytes replace them (``costing_states.py`` ``_held_bytes``). The same holds for
a pipeline stage held by ``pp_unsharded_params`` (7 Dec 2026, s37 fsdpsync,
:func:`grad_shards_absent`): its unsharded gradients are kept with sync off until the stage's
last backward, so its shards are not counted either — except when several pipeline schedules
a step each reduce the stage (``pp_held_sync_per_schedule``), whose later peaks hold the
shards the first schedule reduced.

FSDP2 over one data-parallel rank (``fsdp2_one_rank_mesh``, :func:`one_rank_fsdp2`; 7 Dec
2026, s36 kfmem): a run at dp·cp = 1 has its ZeRO stage folded to 0, but a trainer that still
calls ``fully_shard`` over a one-rank mesh (KempnerForge at tp > 1) holds every weight's
unsharded gradient in the reduce dtype the same way; the option charges that hold and its
accumulation pass at zero 0 (there are no reduce-scatters to defer).

FSDP1's flat-gradient concatenation (``fsdp1_flat_grad``, ``passes.py`` ``_flat_grad_s``)
stays charged every micro-batch: it is autograd's ``SplitWithSizesBackward0`` building the
flat parameter's gradient from its views' ones, before the ``AccumulateGrad`` node that adds
it into the held ``flat_param.grad`` (s35 nosync2). ``_flat_param.py``
``prepare_gradient_for_backward`` clears ``.grad`` only when it is not the unsharded size
("Expects `.grad` to be the unsharded gradient in `no_sync()`"), so under ``no_sync`` the
unsharded ``.grad`` stays and autograd adds each micro-batch's concatenated gradient into it;
``_post_backward_hook`` (``_runtime_utils.py``, run on the flat parameter's
``AccumulateGrad``) returns only after that, before the cast and the reduce-scatter.

ZeRO-2 (FSDP1 ``SHARD_GRAD_OP``, FSDP2 ``reshard_after_forward=False``, as the reader maps
them, ``infer_shard.py``) takes the same gradient path: ``_post_backward_hook`` /
``post_backward`` return before the reduce-scatter whatever the sharding strategy. FSDP1's
``_should_free_in_backward`` (``_sync_gradients`` or a reshard-after-forward strategy) also
keeps ``SHARD_GRAD_OP``'s parameters gathered from one micro-batch to the next under
``no_sync``: one all-gather per step, what the model's ZeRO-2 charges with or without the
option (its step-end parameter all-gather).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from stage_core.lower.bind import BoundBlock
from stage_core.lower.compact import Runs
from stage_core.lower.memory import unsharded_elements
from stage_core.lower.program import Workload
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.blocktime import BlockCost, chunk_timing
from stage_explore.analytical.framework_costs import (
    held_accumulation_bytes,
    local_schedule_micro_batches,
)
from stage_explore.analytical.framework_profile import FrameworkProfile
from stage_explore.analytical.parts import Point
from stage_explore.analytical.zero_queue import QueueBlock, pass_time


def no_sync_accumulates(
    profile: FrameworkProfile, parallel: ParallelConfig, micro_batches: int
) -> bool:
    """Whether a step accumulates FSDP's unsharded gradients with sync off
    (``fsdp_no_sync_accumulation``): ZeRO-3 (FSDP's full sharding) or ZeRO-2 (FSDP1's
    ``SHARD_GRAD_OP``, FSDP2's ``reshard_after_forward=False``: the same early return before
    the reduce-scatter, module docstring), more than one micro-batch (with one, the trainer's
    last micro-batch is its only one: nothing is deferred), and not a ZeRO-3 pipeline stage
    held by ``pp_unsharded_params``, which charges the same gradients with its gathered
    parameters."""
    if not profile.fsdp_no_sync_accumulation or micro_batches <= 1:
        return False
    if one_rank_fsdp2(profile, parallel):
        return True
    if parallel.zero < 2:
        return False
    return not (profile.pp_unsharded_params and parallel.pp > 1 and parallel.zero >= 3)


def grad_shards_absent(
    profile: FrameworkProfile, parallel: ParallelConfig, micro_batches: int
) -> bool:
    """Whether a step's peak holds none of the gradient shards the model states count (module
    docstring, 'No gradient shard at the peak'): under :func:`no_sync_accumulates`, or on a
    ZeRO-3 pipeline stage held by ``pp_unsharded_params`` (7 Dec 2026, s37 fsdpsync) whose
    reduction runs once a step. ``torch.distributed.pipelining`` ``stage.py``
    ``backward_maybe_with_nosync`` turns sync off on every backward of an ``FSDPModule`` stage
    and runs each state's ``post_backward`` only on the stage's last backward, and
    ``post_backward`` without ``reduce_grads`` returns before ``foreach_reduce``, the only place
    a sharded gradient is assigned (torch ``_fsdp_param_group.py``, pytorch/pytorch 002a76fb);
    the optimizer's ``zero_grad`` left none from the step before. Under
    ``pp_held_sync_per_schedule`` with several schedules a step, the first schedule's last
    backward reduces the stage, so its shards exist at every later schedule's peak: counted."""
    if no_sync_accumulates(profile, parallel, micro_batches):
        return True
    if not (profile.pp_unsharded_params and parallel.zero >= 3 and parallel.pp > 1):
        return False
    if not profile.pp_held_sync_per_schedule:
        return True
    return local_schedule_micro_batches(profile, parallel, micro_batches) >= micro_batches


def one_rank_fsdp2(profile: FrameworkProfile, parallel: ParallelConfig) -> bool:
    """Whether FSDP2 wraps the model over one data-parallel rank (``fsdp2_one_rank_mesh``):
    dp·cp = 1, where the ZeRO stage runs as 0 (:func:`stage_core.parallel.unsharded_zero`)
    though ``fully_shard`` still holds each unit's parameters and gradients. FSDP2 has no
    ``NO_SHARD`` fallback: at world size 1 its ``foreach_reduce`` copies the reduce-dtype
    gradients to the output instead of reduce-scattering them (torch
    ``distributed/fsdp/_fully_shard/_fsdp_collectives.py``, pytorch/pytorch 010ae4a8), and with
    sync off ``post_backward`` keeps ``unsharded_accumulated_grad`` in the reduce dtype whatever
    the mesh size (module docstring)."""
    return (
        profile.fsdp2_one_rank_mesh
        and parallel.zero == 0
        and parallel.dp * parallel.cp == 1
        and parallel.expert_dp == 1
    )


def held_elements(profile: FrameworkProfile, workload: Workload, block: BoundBlock) -> int:
    """Elements of ``block``'s weights whose unsharded gradient FSDP holds with sync off: the
    ones ZeRO shards on this rank (:func:`~stage_core.lower.memory.unsharded_elements`), or
    under :func:`one_rank_fsdp2` every weight of the block (``fully_shard`` over one rank wraps
    every parameter; nothing is left out for a one-rank group there)."""
    if one_rank_fsdp2(profile, workload.parallel):
        return sum(weight.elements for weight in block.weights)
    return unsharded_elements(workload, block)


def is_fsdp2(profile: FrameworkProfile) -> bool:
    """Whether the profile's ZeRO-3 is FSDP2 (``fully_shard``): its copies (``fsdp2_copies``,
    set for FSDP2 rows and torchtitan), its held pipeline stages (``pp_unsharded_params``,
    torchtitan's and NeMo AutoModel's FSDP2) or its wrapper over one rank
    (``fsdp2_one_rank_mesh``); otherwise FSDP1's flat parameter (the ``fsdp`` profile's
    default)."""
    return profile.fsdp2_copies or profile.pp_unsharded_params or profile.fsdp2_one_rank_mesh


def held_grad_bytes(profile: FrameworkProfile, workload: Workload) -> int:
    """Bytes per element of the unsharded gradient held with sync off: FSDP2's
    (:func:`is_fsdp2`) ``unsharded_accumulated_grad`` in the reduce dtype
    (``workload.grad_bytes``; ``to_accumulated_grad_if_needed`` casts to ``reduce_dtype``);
    FSDP1's flat parameter keeps autograd's gradient in the parameter (compute) dtype,
    ``workload.weight_bytes`` (``_runtime_utils.py`` ``_post_backward_hook``: without
    ``_sync_gradients`` it returns before casting ``flat_param.grad`` to the reduce dtype)."""
    return workload.grad_bytes if is_fsdp2(profile) else workload.weight_bytes


def accumulation_bytes(profile: FrameworkProfile, workload: Workload) -> float:
    """HBM bytes per unsharded element and micro-batch, averaged over the step, of accumulating
    the held gradient: FSDP2 casts the first micro-batch's gradient into the reduce-dtype buffer
    and adds each later one (:func:`~stage_explore.analytical.framework_costs.
    held_accumulation_bytes`, the pass ``pp_unsharded_params`` charges); FSDP1's autograd adds
    each later micro-batch's gradient into ``flat_param.grad`` in place (two reads, one write of
    ``weight_bytes``), the first taking the fresh gradient as it is."""
    m = max(1, workload.micro_batches)
    if is_fsdp2(profile):
        return held_accumulation_bytes(m, workload.weight_bytes, workload.grad_bytes)
    return (m - 1) * 3 * workload.weight_bytes / m


def no_sync_held_bytes(profile: FrameworkProfile, point: Point, signature: tuple[Runs, ...]) -> int:
    """Bytes of the unsharded gradients a rank holds from the first micro-batch's backward to
    the last: every element FSDP shards of the rank's blocks (its tensor-parallel shard;
    :func:`held_elements`) at :func:`held_grad_bytes`."""
    workload: Workload = point.workload
    elements = sum(
        n * held_elements(profile, workload, point.blocks[k]) for runs in signature for k, n in runs
    )
    return elements * held_grad_bytes(profile, workload)


def without_zero(costs: Mapping[str, BlockCost]) -> dict[str, BlockCost]:
    """``costs`` (per block kind) without their ZeRO-3 gathers, reduce-scatters and replica
    all-reduces, nor the compute they slow: a micro-batch of a stage whose parameters stay
    gathered (``pp_unsharded_params``; moved here from ``planning.py``)."""
    return {
        kind: replace(
            cost,
            gather_s=0.0,
            scatter_s=0.0,
            replica_s=0.0,
            zero_share=(0.0, 0.0),
            replica_share=0.0,
            backward_gather_s=None,
        )
        for kind, cost in costs.items()
    }


def without_scatters(costs: Mapping[str, BlockCost]) -> dict[str, BlockCost]:
    """``costs`` (per block kind) without their reduce-scatters and replica all-reduces: a
    micro-batch before the step's last under ``fsdp_no_sync_accumulation`` (the all-gathers
    unchanged)."""
    return {
        kind: replace(cost, scatter_s=0.0, replica_s=0.0, replica_share=0.0)
        for kind, cost in costs.items()
    }


def last_scatter_s(
    runs: Runs,
    costs: Mapping[str, BlockCost],
    zero: int,
    root_unit: bool,
    queue_depth: int | None,
) -> float:
    """Seconds the step's last micro-batch's backward takes beyond the others' under
    ``fsdp_no_sync_accumulation``: the chunk's backward with its per-block reduce-scatters
    (``costs``, overlapped as :func:`~stage_explore.analytical.blocktime.chunk_timing` runs
    them every micro-batch without the option) less the backward without them."""
    synced = chunk_timing(runs, costs, zero, root_unit, queue_depth).backward_s
    unsynced = chunk_timing(runs, without_scatters(costs), zero, root_unit, queue_depth)
    return max(0.0, synced - unsynced.backward_s)


#: No gradient synchronisation: (``total_s``, ``latest_s``) of :func:`weight_scatters_sync`.
NO_SYNC = (0.0, float("-inf"))


def weight_scatters_sync(
    runs: Runs,
    costs: Mapping[str, BlockCost],
    root_unit: bool,
    queue_depth: int | None,
) -> tuple[float, float]:
    """ZeRO-2's reduce-scatters after a chunk's last ``W`` under a split backward (ZB-H1,
    DualPipe), as a gradient synchronisation (:class:`~stage_explore.analytical.step.
    SyncCost`'s ``total_s`` and ``latest_s``), with or without ``fsdp_no_sync_accumulation``:
    each block's scatters follow its ``W`` on the ZeRO queue; the rank's next task does not
    wait for them (``W`` runs outside autograd: no post-backward callback waits, and ZeRO-2 has
    no gather queued behind them), the optimizer does (it needs the reduced shards). An
    earlier ``W``'s scatters (without the option) run beside the rank's later tasks and are
    not charged: the queue's backlog from one ``W`` into the next (two ``W`` tasks in a row,
    ZB-H1's drain) is the levelled mode's one approximation here (s36 tracegap). ``latest``:
    from the ``W`` task's start, the ``W`` pass with its scatters queued
    (:func:`~stage_explore.analytical.blocktime.chunk_timing` at ``queue_depth``: the pass
    ends with its scatter backlog); ``total``: the scatters back to back on the queue (a
    hybrid-sharded block's replica all-reduce on a stream of its own beside the next scatter,
    :func:`~stage_explore.analytical.zero_queue.pass_time` of blocks without compute). The
    trace mode runs the same program (``stage_core/lower/nodes.py`` ``_weight_nodes``)."""
    latest = chunk_timing(runs, costs, 2, root_unit, queue_depth).backward_s
    scatters = [
        (QueueBlock(0.0, 0.0, costs[k].scatter_s, costs[k].replica_s), n) for k, n in reversed(runs)
    ]
    return pass_time(scatters, 0), latest
