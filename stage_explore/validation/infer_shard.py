"""The size of a hybrid-sharding group a ``dp_sharding`` cell states, and the DeepSpeed sharding
variants the model does not express (s27 hidden22).

**A stated shard group.** Hybrid sharding shards the model states inside groups of
``dp_shard`` data-parallel ranks and replicates them across the ``dp / dp_shard`` groups
(``ParallelConfig.dp_shard``). The reader took every hybrid cell as one node of 8 GPUs, PyTorch
``HYBRID_SHARD``'s group when none is named; a cell that names the group reads it now:

- torchtitan's ``data_parallel_shard_degree`` / ``data_parallel_replicate_degree`` (its
  ``Parallelism`` config: "If `data_parallel_shard_degree` is also greater than 1, the
  parallelism method used is HSDP (Hybrid Sharded Data Parallelism). Otherwise, the parallelism
  method used is DDP"), AutoModel's ``dp_replicate_size`` ("dp_shard_size = dp_size /
  dp_replicate_size", NVIDIA-NeMo/Automodel 0091ccf1 ``docs/guides/llm/pretraining.md``), the
  spellings ``dp_shard 16`` / ``dp_replicate 4`` / ``shard group 32``;
- DeepSpeed MiCS, ZeRO-3 partitioned within subgroups of devices and replicated across them
  (``mics_shard_size``, default -1, off: ``DeepSpeedZeroConfig`` in deepspeedai/DeepSpeed
  cbf3d661 ``deepspeed/runtime/zero/config.py``; Zhang et al., 'MiCS', VLDB 2023, arXiv
  2205.00119). A cell naming MiCS without its size is refused: DeepSpeed has no default group.

- Megatron-Core's partial distributed optimizer, ``--num-distributed-optimizer-instances N``
  ("Number of Distributed Optimizer copies across Data Parallel domain", NVIDIA/Megatron-LM
  307dcf37 ``megatron/training/arguments.py``): the optimizer states sharded inside ``dp / N``
  ranks, the N instances replicas (with Megatron-FSDP, HSDP's outer replicas).

A replicate degree R with no shard degree gives groups of ``dp / R`` (groups of one: DDP, no
sharding); a shard degree equal to ``dp`` is full sharding; two different sizes, or a size that
does not divide ``dp``, are refused.

**ZeRO++** (Wang et al., arXiv 2306.10209; the same ``DeepSpeedZeroConfig``:
``zero_quantized_weights`` (qwZ, int8 weight all-gather), ``zero_hpz_partition_size`` (hpZ, a
secondary weight partition inside a node so the backward all-gather stays in it),
``zero_quantized_gradients`` (qgZ, int4 gradient reduce-scatter)) is ZeRO-3 with quantized and
hierarchical collectives: a cell naming it was refused (s27 hidden22), where ``ZeRO++`` alone
read as ZeRO-1 (DeepSpeed's default stage) and ``ZeRO-3 with ZeRO++ (...)`` as plain ZeRO-3.
Since 7 Dec 2026 (s34 zeropp) the model times hpZ (the profile option
``zero_hpz_partition_size``, :mod:`~stage_explore.analytical.hpz`): a cell on ZeRO stage 3 that
states ``zero_hpz_partition_size N`` and, when it names ZeRO++, that quantization is off reads
as ZeRO-3 with hpZ groups of N (:func:`stated_hpz`); a cell naming qwZ or qgZ on, ZeRO++
without its hpZ size or without saying quantization is off, or hpZ off stage 3 stays refused.

**Parameters not resharded after the forward** (6 Dec 2026, s28 readers): a cell naming
``reshard_after_forward=False`` / ``'never'`` / "not resharded after the forward"
(:data:`RESHARD_NEVER`) is ZeRO-2 without pipeline parallelism and ZeRO-3 held through the step
under it (:func:`reshard_never`).
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_errors import Uninferable

#: The size of a shard group: ``dp_shard 16``, ``dp_shard_size=16``, ``data_parallel_shard_degree
#: 16``, ``mics_shard_size: 8``, ``shard group 32``, ``sharding group size of 16``, ``shard a
#: model across 128 GPUs``, ``zero1=8``.
SHARD_SIZE = re.compile(
    r"(?:\bdp[_\s-]?shard(?:[_\s-]?(?:size|degree))?|data[_\s-]parallel[_\s-]shard[_\s-]degree|"
    r"mics[_\s-]shard[_\s-]size|shard(?:ing)?[_\s-]+(?:group|degree)(?:[_\s-]+size)?(?:\s+of)?|"
    # in words, the group a count of GPUs follows: "We shard a model across 128 GPUs, and we
    # have 4 copies of the model" (BloombergGPT, arXiv 2303.17564, Section 3.4; 7 Dec 2026, s31
    # rowsA: was refused as MiCS without a group); not "across 4 nodes"
    r"\bshard(?:s|ed|ing)?\s+(?:(?:a|the)\s+)?(?:model\s+)?across(?=\s+\d+\s+(?:GPUs?|devices)\b)|"
    # InternLM / InternEvo's ZeRO-1 group, ``zero1=8`` or ``zero1=dict(size=8)`` (-1: all of
    # dp, no group; 1: no sharding): "zero1 > 1 and zero1 <= dp world size, the world size of
    # zero is a subset of dp world size" (InternLM/InternLM 00478761 configs/7B_sft.py; 7 Dec
    # 2026, s34 rowsF)
    r"\bzero1\s*=\s*(?:dict\(\s*size\s*=\s*)?(?=\d))"
    r"\s*[:=]?\s*(\d+)\b",
    re.IGNORECASE,
)
#: ZeRO stage 1 named: ``ZeRO-1``, ``zero stage 1``, the distributed optimizer (Megatron's,
#: Apex's ``DistributedFusedAdam``). Beside "hybrid" it keeps stage 1 (s34 rowsF): InternLM's
#: "Hybrid Zero" optimizer shards the optimizer states only (``zero1`` groups), and Megatron-Core's
#: partial distributed optimizer is its "Hybrid Shard Data-Parallel" (``--num-distributed-
#: optimizer-instances``, NVIDIA/Megatron-LM megatron/core/transformer/moe/README.md, MCore v0.13).
ZERO_ONE = (
    r"zero[-\s]?1|zero stage 1|distributed.optimi[sz]er|distributed_fused_adam|"
    r"distributedfusedadam|dist[-_\s]?opt"
)
#: The number of replicas: ``dp_replicate 4``, ``dp_replicate_size=4``,
#: ``data_parallel_replicate_degree 2``, ``replicate degree 2``, Megatron's
#: ``--num-distributed-optimizer-instances 2``.
REPLICAS = re.compile(
    r"(?:\bdp[_\s-]?replicate(?:[_\s-]?(?:size|degree))?|data[_\s-]parallel[_\s-]replicate[_\s-]"
    r"degree|replicate[_\s-]+degree|num[_\s-]distributed[_\s-]optimizer[_\s-]instances)"
    r"\s*[:=]?\s*(\d+)\b",
    re.IGNORECASE,
)
#: DeepSpeed MiCS named in a cell.
MICS = re.compile(r"\bmics\b", re.IGNORECASE)
#: DeepSpeed ZeRO++ or one of its three parts named in a cell (not ``zero_hpz_partition_size
#: 1`` nor ``zero_quantized_weights: false``, DeepSpeed's defaults: the part off).
ZERO_PP = re.compile(
    r"zero\s*\+\+|\bhpz\b|\bqwz\b|\bqgz\b|"
    r"zero_quantized_(?:weights|gradients)(?!\s*[:=]?\s*(?:false|0)\b)|"
    r"zero_hpz_partition_size(?!\s*[:=]?\s*1\b)",
    re.IGNORECASE,
)


def _one(pattern: re.Pattern[str], cell: str, what: str) -> int | None:
    """The one number ``pattern`` reads in ``cell``; None when it reads none; refused when it
    reads two different ones."""
    values = {int(m.group(1)) for m in pattern.finditer(cell)}
    if len(values) > 1:
        raise Uninferable(
            f"dp_sharding {cell.strip()!r} names {len(values)} different {what}s "
            f"({', '.join(str(v) for v in sorted(values))}); expected one"
        )
    return values.pop() if values else None


#: ZeRO++'s quantized collectives named on (qwZ, qgZ, their DeepSpeed keys not set false).
ZERO_PP_QUANTIZED = re.compile(
    r"\bqwz\b|\bqgz\b|zero_quantized_(?:weights|gradients)(?!\s*[:=]?\s*(?:false|0)\b)",
    re.IGNORECASE,
)
#: The hpZ group a cell states: DeepSpeed's key ``zero_hpz_partition_size N``.
HPZ_SIZE = re.compile(r"zero_hpz_partition_size\s*[:=]?\s*(\d+)\b", re.IGNORECASE)
#: A statement that ZeRO++'s quantization is off.
NO_QUANTIZATION = re.compile(
    r"quantization\s+(?:is\s+)?(?:not\s+enabled|disabled|off)\b|\bno\s+quantization\b|"
    r"without\s+quantization\b",
    re.IGNORECASE,
)
#: ZeRO stage 3 named in a cell.
STAGE_3 = re.compile(r"zero[-\s]?3|zero\s+stage\s*3|\bstage\s*3\b", re.IGNORECASE)


def stated_hpz(cell: str) -> int | None:
    """The hpZ group (``zero_hpz_partition_size``) of a ``dp_sharding`` cell naming ZeRO++ or one
    of its parts; None when it names none (or only their off defaults); refused when it names
    qwZ / qgZ on, no hpZ size, ZeRO++ without saying quantization is off, or no ZeRO stage 3
    (module docstring)."""
    found = ZERO_PP.search(cell)
    if not found:
        return None
    said = f"dp_sharding {cell.strip()!r} names"
    quantized = ZERO_PP_QUANTIZED.search(cell)
    if quantized and not NO_QUANTIZATION.search(cell):
        raise Uninferable(
            f"{said} {quantized.group(0)!r}: DeepSpeed ZeRO++'s quantized weight all-gather "
            "(qwZ) and quantized gradient reduce (qgZ) are not modelled (no public measurement "
            "of their quantization kernels; expected hpZ alone, ZeRO-1/2/3, MiCS or FSDP)"
        )
    size = HPZ_SIZE.search(cell)
    if size is None or int(size.group(1)) < 1:
        raise Uninferable(
            f"{said} {found.group(0)!r} but no hpZ group (expected zero_hpz_partition_size N; "
            "qwZ and qgZ are not modelled)"
        )
    if re.search(r"zero\s*\+\+", cell, re.IGNORECASE) and not NO_QUANTIZATION.search(cell):
        raise Uninferable(
            f"{said} ZeRO++ but not that its quantization (qwZ, qgZ) is off (expected "
            "'quantization not enabled': qwZ and qgZ are not modelled)"
        )
    if not STAGE_3.search(cell):
        raise Uninferable(
            f"{said} hpZ ({size.group(0)!r}) but not ZeRO stage 3 (DeepSpeed's secondary "
            "partition is stage 3's)"
        )
    return int(size.group(1))


def mics_group(cell: str) -> int | None:
    """The partition group of a cell naming DeepSpeed MiCS (its ``mics_shard_size``); None when
    the cell does not name MiCS; refused when it names MiCS but no size."""
    if not MICS.search(cell):
        return None
    size = _one(SHARD_SIZE, cell, "shard group size")
    if size is None or size < 1:
        raise Uninferable(
            f"dp_sharding {cell.strip()!r} names MiCS but no partition group size (expected "
            "mics_shard_size N: MiCS has no default group)"
        )
    return size


def stated_shard_size(cell: str) -> int | None:
    """The shard group size a cell states (:data:`SHARD_SIZE`), None when it states none."""
    size = _one(SHARD_SIZE, cell, "shard group size")
    return size if size else None


def stated_group(cell: str, dp: int, zero: int = 3) -> tuple[int, int | None, str] | None:
    """``(zero, dp_shard, assumption)`` of a sharded cell (``zero`` 3: ZeRO-3 / FSDP; 1: the
    distributed optimizer) that states a shard degree below ``dp`` or a replicate degree above 1
    (module docstring): ``zero`` in groups of ``dp_shard``, or no sharding at all for groups of
    one (torchtitan: a replicate degree with no shard degree above 1 is DDP); None when the cell
    states neither, or a shard degree of all of ``dp``."""
    shard = stated_shard_size(cell)
    replicas = _one(REPLICAS, cell, "replicate degree")
    said = f"the dp_sharding column says {cell.strip()!r}"
    if replicas is not None and replicas > 1:
        if dp % replicas:
            raise Uninferable(
                f"dp_sharding {cell.strip()!r} names {replicas} replicas, but dp {dp} is not a "
                "multiple"
            )
        if shard is not None and shard * replicas != dp:
            raise Uninferable(
                f"dp_sharding {cell.strip()!r}: shard degree {shard} x replicate degree "
                f"{replicas} is not dp {dp}"
            )
        shard = dp // replicas
    if shard is None or shard == dp:
        return None
    if dp % shard:
        raise Uninferable(f"hybrid sharding in groups of {shard}, but dp {dp} is not a multiple")
    if shard == 1:
        return 0, None, f"zero 0: {dp} replicas of one rank, no sharding (DDP; {said})"
    return zero, shard, (
        f"zero {zero} inside shard groups of {shard} GPUs, {dp // shard} replicas (dp_shard "
        f"{shard}, the group the cell states; {said})"
    )


#: A ``dp_sharding`` cell that says FSDP keeps the parameters gathered from the forward to the
#: backward (6 Dec 2026, s28 readers): FSDP2 ``fully_shard(reshard_after_forward=False)``,
#: torchtitan's ``fsdp_reshard_after_forward = "never"`` policy, or in words ("not resharded
#: after the forward"). Not the cells naming the default (resharding after the forward).
RESHARD_NEVER = re.compile(
    r"reshard[_\s-]*after[_\s-]*forward\s*[=:]?\s*['\"]?(?:false|never|0)\b|"
    r"(?:not|no|without|never)[_\s-]+reshard(?:ed|ing)?[_\s-]+(?:the[_\s-]+)?"
    r"(?:params?|parameters?[_\s-]+)?after[_\s-]+(?:the[_\s-]+)?forward",
    re.IGNORECASE,
)


def reshard_never(cell: str, pp: int, said: str) -> tuple[int, str] | None:
    """``(zero, assumption)`` of a cell naming :data:`RESHARD_NEVER`, None otherwise. Without
    pipeline parallelism: ZeRO-2, the parameters sharded at rest but held unsharded from each
    forward through its backward, gradients and optimizer states sharded -- FSDP1's
    SHARD_GRAD_OP ("can be disabled by setting fsdp_reshard_after_forward to False (this
    corresponds to SHARD_GRAD_OP sharding strategy)", pytorch/torchtune
    recipes/knowledge_distillation_distributed.py). Under pipeline parallelism: ZeRO-3 held
    through the step, the model's FSDP2-under-PP reading (``zero_held``, stage_core/lower/
    nodes.py) -- which is torchtitan's ``default`` policy there (torchtitan/distributed/fsdp.py
    ``get_fsdp_reshard_after_forward_policy``: "never" -> False, "default" -> ``not
    pp_enabled``)."""
    found = RESHARD_NEVER.search(cell)
    if found is None:
        return None
    if pp > 1:
        return 3, (
            f"zero 3 with the parameters held gathered through the step ({found.group(0)!r} "
            f"under pipeline parallelism: FSDP2's reading with PP, torchtitan's default there; "
            f"{said})"
        )
    return 2, (
        f"zero 2 ({found.group(0)!r}: parameters kept unsharded from the forward to the "
        f"backward, gradients and optimizer states sharded, FSDP1's SHARD_GRAD_OP; {said})"
    )
