"""The micro-batch of a row whose ``micro_batch`` cell is empty (6 Dec 2026, s28 readers).

Megatron's ``--micro-batch-size`` default is 1 (the reading of every profile before). DeepSpeed
has no such default: its config needs ``train_batch_size`` or
``train_micro_batch_size_per_gpu``, and given only the first it runs one micro-batch of the
whole per-replica batch (deepspeedai/DeepSpeed 3a890ec5 ``deepspeed/runtime/config.py``,
``DeepSpeedConfig._set_batch_related_parameters``: "elif train_batch is not None:
self.gradient_accumulation_steps = 1; self.train_micro_batch_size_per_gpu = train_batch //
self.world_size", ``world_size`` the data-parallel size; ``_batch_assertion`` then requires
``train_batch_size == micro × accumulation × world_size``). A DeepSpeed row stating its global
batch and no micro-batch is read so; Megatron-DeepSpeed (its text names Megatron) passes
Megatron's ``--micro-batch-size`` to DeepSpeed and keeps Megatron's reading.

torchtitan (7 Dec 2026, s29 readers2): ``training.local_batch_size`` is the per-device batch and
``global_batch_size`` defaults to -1, "local_batch_size * data-parallel degree"
(pytorch/torchtitan 000204a4 ``torchtitan/config/job_config.py`` class Training), which
``torchtitan/train.py`` reads as "1 gradient accumulation step"; a global batch is otherwise a
multiple of local × dp it accumulates over. A torchtitan row stating its global batch and not
its per-device batch is read with that default: one step of global / dp per device (as the
pipeline reading in :mod:`~stage_explore.validation.infer_torch` takes the local batch), refused
when dp does not divide the global batch (the trainer's assertion). ``local_batch_size``'s own
default, 8, is not taken: it holds only when the run sets neither batch, and every row states
its global batch (torchtitan's shipped train configs set local_batch_size).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from stage_explore.validation.infer_errors import Uninferable
from stage_explore.validation.infer_stated import stated_or_inferred

#: Columns whose text says the run is Megatron-DeepSpeed (Megatron's batch arguments).
_COLUMNS = ("source", "source_table", "url", "notes", "dp_sharding")
_MEGATRON = re.compile(r"megatron", re.IGNORECASE)


def default_micro_batch(
    row: dict[str, str], framework: str, stated: Mapping[str, int], fields: Mapping[str, Any]
) -> tuple[int, str]:
    """``(micro_batch, assumption)`` for a row whose ``micro_batch`` cell is empty, given the
    row's ``stated`` integer cells (``global_batch_seqs`` among them) and the layout ``fields``
    inferred so far (``dp`` when the cell is empty): on the ``torchtitan`` profile without
    pipeline parallelism global / dp (:func:`_torchtitan`); on the ``deepspeed`` profile (not
    Megatron-DeepSpeed) DeepSpeed's global batch / dp with no gradient accumulation,
    :class:`Uninferable` when dp does not divide the global batch (DeepSpeed's batch assertion
    fails); else Megatron's default of 1."""
    global_batch = stated["global_batch_seqs"]
    dp = stated_or_inferred(stated, fields, "dp")
    megatron = any(_MEGATRON.search(row.get(c, "")) for c in _COLUMNS)
    if framework == "torchtitan" and stated_or_inferred(stated, fields, "pp") <= 1:
        return _torchtitan(global_batch, dp)
    if framework != "deepspeed" or megatron:
        return 1, "micro-batch 1 (Megatron's --micro-batch-size default; column empty)"
    return _per_replica(
        global_batch, dp,
        "DeepSpeed's train_batch_size / data-parallel size (gradient accumulation 1, its rule "
        "when train_micro_batch_size_per_gpu is absent) must be a whole micro-batch",
        "no gradient accumulation (column empty: DeepSpeed's rule when only train_batch_size is "
        "set, deepspeed/runtime/config.py _set_batch_related_parameters)",
    )  # fmt: skip


def _torchtitan(global_batch: int, dp: int) -> tuple[int, str]:
    """``(micro_batch, assumption)`` of a torchtitan row (no pipeline parallelism: its
    pipeline reading is :func:`~stage_explore.validation.infer_torch.torchtitan_pipeline`'s)
    whose ``micro_batch`` is empty: global / dp, one gradient-accumulation step (torchtitan's
    ``global_batch_size`` default); :class:`Uninferable` when dp does not divide it."""
    return _per_replica(
        global_batch, dp,
        "torchtitan's per-device local_batch_size x dp (its global_batch_size default, one "
        "accumulation step) must be the global batch; state micro_batch",
        "one gradient-accumulation step (column empty: torchtitan's global_batch_size default "
        "-1 is local_batch_size x dp, torchtitan/config/job_config.py; train.py: '1 gradient "
        "accumulation step')",
    )  # fmt: skip


def _per_replica(global_batch: int, dp: int, rule: str, why: str) -> tuple[int, str]:
    """``(global / dp, assumption)``: the whole per-replica batch as one micro-batch, the
    assumption ending with ``why``; :class:`Uninferable` naming ``rule`` when dp does not divide
    the global batch."""
    if global_batch % dp or global_batch < dp:
        raise Uninferable(
            f"micro_batch is empty and global_batch_seqs {global_batch} is not a multiple of dp "
            f"{dp}: {rule}"
        )
    micro = global_batch // dp
    return micro, f"micro-batch {micro} = global_batch_seqs {global_batch} / dp {dp}, {why}"
