"""What a row read as the ``internevo`` profile (InternEvo, InternLM's own trainer) takes from
InternEvo's code beyond the profile (:func:`internevo_defaults`), and the InternEvo settings the
model cannot express, refused with their reason (:func:`internevo_refusal`).

- *Gradients reduced in the parameters' 16-bit dtype*: ``HybridZeroOptimizer._reduce_and_copy``
  flattens each bucket of ``.grad`` tensors (the model's bf16 / fp16 parameters' gradients) and
  ``reduce_tensor(tensor=flat, dtype=self.dtype, ...)`` all-reduces it in ``self._dtype``, the
  parameters' dtype (InternLM/InternLM 01e7fd61 ``internlm/solver/optimizer/
  hybrid_zero_optim.py``): ``grad_fp32`` false.
- *Buckets of ``reduce_bucket_size`` elements*: a bucket is reduced once
  ``num_elements_in_bucket + param.numel() > self._reduce_bucket_size`` (elements, not bytes);
  InternLM's ``configs/7B_sft.py`` (00478761) sets ``reduce_bucket_size=512 * 1024 * 1024``,
  the value taken unless the row states another (``bucket_size`` / ``reduce_bucket_size``).
- *FlashAttention (v1)*: InternLM's install doc pins "Flash-Attention == v1.0.5" (InternLM/InternLM
  0f5ee057 ``doc/en/install.md``), InternEvo's builds v1.0.5 from its ``third_party`` submodule
  and ships images ``torch1.13.1-cuda11.7.1-flashatten1.0.5`` (InternLM/InternEvo 1aea101b
  ``doc/en/install.md``, which allows ">= v1.0.5"): ``attention_kernel`` ``fa1`` on a preset
  that lists its rate (the A100-class ones), unless the row names FlashAttention-2; elsewhere
  the profile's ``fa2`` stands (no FlashAttention-1 figure on other GPUs: a documented
  fallback, docs/analytical.md s35 fa1).
- *Refused*: ZeRO-3 / FSDP under InternEvo (``parallel.zero1.fsdp`` runs PyTorch FSDP through
  ``internlm/solver/optimizer/fsdp_optimizer.py``, whose wrapping and overlap the profile has
  not read: HybridZeroOptimizer, the profile's optimizer, shards the optimizer states only), and
  the tensor-parallel modes other than Megatron-style TP with or without sequence parallelism
  (``tensor=dict(mode=...)``: ``mtp`` / ``msp``, the 2023 ``origin_tp``): ``fsp`` / ``fstp``
  (all-gathered weights in the forward) and ``isp`` (InternEvo's weight-parallel ``wp`` group,
  its weights all-gathered per layer beside the attention's all-to-all), which the profile's
  tensor-parallel options do not describe.
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_buckets import set_bucket
from stage_explore.validation.infer_release import Defaults, row_text

#: ``hybrid_zero_optimizer.reduce_bucket_size`` of InternLM's configs/7B_sft.py (00478761), in
#: elements (module docstring).
REDUCE_BUCKET_ELEMENTS = 512 * 1024 * 1024
#: A stated bucket size, in elements: InternEvo's config key (also Megatron's ``bucket_size``).
_STATED_BUCKET = re.compile(r"\breduce_bucket_size\s*[=:]\s*(\d+)\b")
#: InternEvo's tensor-parallel modes the profile cannot express (module docstring).
_UNEXPRESSED_TP = re.compile(r"""\bmode\s*[=:]\s*["']?(isp|fsp|fstp)\b|\b(isp|fstp)\b""", re.I)
#: ZeRO-3 / FSDP words in a row's ``dp_sharding`` cell, or InternEvo's ``zero1.fsdp`` key.
_FSDP = re.compile(r"\bfsdp\s*[=:]\s*true\b|\bzero[-\s]?3\b|\bfull_shard\b|\bfsdp\b", re.I)
#: The attention kernel InternLM / InternEvo pinned (module docstring).
INTERNEVO_KERNEL = "fa1"
#: A row naming FlashAttention-2 (InternEvo's later installs allow ">= v1.0.5").
_FLASH2 = re.compile(
    r"flash[-_\s]?attn[-_\s]?(?:v|==\s*)?2\b|flash[-\s]?attention[-\s]?(?:v)?2\b", re.I
)
KERNEL_NOTE = (
    "attention on FlashAttention (v1) in CUDA (attention_kernel fa1): InternLM pins "
    "Flash-Attention == v1.0.5 (InternLM/InternLM 0f5ee057 doc/en/install.md), InternEvo builds "
    "v1.0.5 and ships flashatten1.0.5 images (InternLM/InternEvo 1aea101b doc/en/install.md)"
)
GRAD_NOTE = (
    "gradients all-reduced in the parameters' 16-bit dtype (grad_fp32 false): InternEvo's "
    "HybridZeroOptimizer._reduce_and_copy, reduce_tensor(dtype=self.dtype) over the bucket of "
    ".grad tensors (InternLM/InternLM 01e7fd61 internlm/solver/optimizer/hybrid_zero_optim.py)"
)


def internevo_defaults(row: dict[str, str], out: Defaults, fa1_measured: bool) -> None:
    """Set on ``out`` what a row read as ``internevo`` takes from InternEvo's code and shipped
    config (module docstring): FlashAttention (v1) when the row's preset lists its rate
    (``fa1_measured``) and the row names no FlashAttention-2, 16-bit gradient reductions and
    ``reduce_bucket_size`` buckets."""
    if fa1_measured and _FLASH2.search(row_text(row)) is None:
        out.options["attention_kernel"] = INTERNEVO_KERNEL
        out.notes.append(KERNEL_NOTE)
    out.parallel["grad_fp32"] = False
    out.notes.append(GRAD_NOTE)
    stated = _STATED_BUCKET.search(row_text(row))
    if stated is not None and int(stated.group(1)) > 0:
        set_bucket(out, int(stated.group(1)), (
            f"the text states {stated.group(0)!r}, InternEvo's hybrid_zero_optimizer bucket "
            "(elements)"
        ))  # fmt: skip
        return
    set_bucket(out, REDUCE_BUCKET_ELEMENTS, (
        "InternEvo's hybrid_zero_optimizer reduce_bucket_size=512 * 1024 * 1024 elements "
        "(InternLM/InternLM 00478761 configs/7B_sft.py); a bucket is reduced once it would "
        "exceed that many elements (hybrid_zero_optim.py _store_and_try_reduce_grads_by_bucket)"
    ))  # fmt: skip


def internevo_refusal(framework: str, row: dict[str, str]) -> str:
    """The reason a row read as ``internevo`` is not evaluated (module docstring): its
    ``dp_sharding`` cell names ZeRO-3 / FSDP, or its text names the ``isp`` / ``fsp`` /
    ``fstp`` tensor-parallel mode; "" otherwise and for every other framework."""
    if framework != "internevo":
        return ""
    sharding = row.get("dp_sharding", "")
    found = _FSDP.search(sharding)
    if found:
        return (
            f"the dp_sharding column names {found.group(0)!r} under InternEvo: the internevo "
            "profile is HybridZeroOptimizer's ZeRO-1 (optimizer states in zero1 groups); "
            "InternEvo's zero1.fsdp mode (PyTorch FSDP, fsdp_optimizer.py) is not expressed"
        )
    mode = _UNEXPRESSED_TP.search(row_text(row))
    if mode:
        name = (mode.group(1) or mode.group(2)).lower()
        return (
            f"the row names InternEvo's tensor-parallel mode {name!r}: the internevo profile "
            "expresses Megatron-style TP (mtp, or msp with sequence parallelism) only; fsp / "
            "fstp all-gather weights in the forward and isp shards weights over a wp group"
        )
    return ""
