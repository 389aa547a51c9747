"""The gradient buckets a row's text states for Megatron's DDP (:func:`stated_bucket`), for
inferred setups: the MLPerf implementations' ``BUCKET_SIZE``, Megatron-LM's
``--ddp-bucket-size`` or the config field ``bucket_size``, all Megatron's
``DistributedDataParallelConfig.bucket_size`` ("maximum number of parameters in each bucket";
the MLPerf NeMo implementations pass their ``BUCKET_SIZE`` to it: v5.0 tyche ``custom.yaml``,
Richardyu114/training_results_v6.0 ``pretrain.py`` ``get_ddp_config``)."""

from __future__ import annotations

import re

from stage_explore.validation.infer_release import Defaults, row_text

#: A stated bucket size, in parameters (module docstring).
_BUCKET = re.compile(r"(?:\bBUCKET_SIZE|--ddp-bucket-size|\bbucket_size)\s*[=:\s]\s*(\d+)\b")


def stated_bucket(row: dict[str, str], out: Defaults) -> None:
    """The gradient bucket the row's text states (:data:`_BUCKET`): that many parameters per
    bucket times the gradient bytes (bf16 unless ``grad_fp32``, as ``out`` has it so far), in
    place of Megatron-Core's ``max(40M, 1M x dp x cp)`` default; nothing when the text states
    none."""
    found = _BUCKET.search(row_text(row))
    if found is None or int(found.group(1)) <= 0:
        return
    set_bucket(out, int(found.group(1)), (
        f"the text states {found.group(0)!r}, Megatron DDP's bucket_size (parameters per "
        "bucket), not Megatron-Core's max(40M, 1M x dp x cp) default"
    ))  # fmt: skip


def set_bucket(out: Defaults, parameters: int, why: str) -> None:
    """Gradient buckets of ``parameters`` parameters each, in bytes at the gradient dtype ``out``
    has so far (4 unless ``grad_fp32`` is off), with a note naming the bytes and ``why``."""
    grad_bytes = 4 if out.parallel.get("grad_fp32", True) else 2
    out.parallel["grad_bucket_bytes"] = parameters * grad_bytes
    out.notes.append(
        f"gradient buckets of {parameters} parameters ({parameters * grad_bytes} bytes at "
        f"{grad_bytes} per gradient): {why}"
    )
