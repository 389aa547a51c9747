"""Megatron-Core's ``fused_single_qkv_rope`` for an inferred ``megatron-core`` row (7 Dec 2026,
s31 qkvrope): :func:`single_qkv_rope`.

The option (``TransformerConfig.fused_single_qkv_rope``, default False; NeMo's yaml configs
``fused_single_qkv_rope: ${oc.decode:${oc.env:FUSED_QKV_ROPE,False}}``) sends the fused QKV
projection's output whole to Transformer Engine's fused QKV rotary kernel, skipping the query's
reshape copy and the ``dq`` / ``dk`` concatenation of the split
(:mod:`~stage_explore.analytical.eager_qkv_split`). Read:

- from a row's text that states it: ``FUSED_QKV_ROPE`` named among a config's switches (the
  MLPerf configs' export), ``FUSED_QKV_ROPE=True`` / ``=1``, or ``fused_single_qkv_rope True``;
  ``=False`` / ``=0`` states it off;
- for an MLPerf Training v6.0 GPT-OSS 20B row whose text does not state it: NVIDIA's
  implementation's ``config_common.sh`` exports ``FUSED_QKV_ROPE=True`` (Lambda's stored copy,
  ``Lambda/benchmarks/gpt_oss_20b/implementations/b200_0504/config_common.sh``, Richardyu114/
  training_results_v6.0 eabf23a0, a copy of mlcommons/training_results_v6.0), which every
  config of that implementation sources (:mod:`.infer_mlperf_gptoss`), read by
  ``conf/gpt_oss.yaml``'s ``fused_single_qkv_rope``. Megatron-Bridge's GPT-OSS 20B
  performance configs set ``cfg.model.fused_single_qkv_rope = True`` as well
  (``set_gpt_oss_20b_common_configs``).

Nothing else sets it: Megatron-Core's and NeMo's defaults are off.
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_mlperf_gptoss import mlperf_gptoss_applies
from stage_explore.validation.infer_release import Defaults, row_text

#: ``FUSED_QKV_ROPE`` or ``fused_single_qkv_rope``, with the value the text gives it, if any.
_STATED = re.compile(
    r"\b(?:FUSED_QKV_ROPE|fused_single_qkv_rope)\b(?:\s*[=:]?\s*['\"]?(true|false|1|0)\b)?",
    re.IGNORECASE,
)
_GPTOSS_SOURCE = (
    "NVIDIA's MLPerf Training v6.0 GPT-OSS 20B implementation: config_common.sh "
    "FUSED_QKV_ROPE=True (Lambda/benchmarks/gpt_oss_20b/implementations/b200_0504 copy, "
    "Richardyu114/training_results_v6.0 eabf23a0), read by conf/gpt_oss.yaml "
    "fused_single_qkv_rope"
)


def single_qkv_rope(row: dict[str, str], flavor: str, out: Defaults) -> None:
    """Set ``fused_single_qkv_rope`` on ``out`` where the row's text states it (on, or off) or
    the row is an MLPerf v6.0 GPT-OSS 20B run whose implementation sets it (module docstring),
    with the assumption in ``out.notes``; other rows keep the default (off)."""
    stated = _STATED.findall(row_text(row))
    values = {value.lower() in ("", "true", "1") for value in stated}
    if len(values) > 1:
        out.notes.append("fused_single_qkv_rope stated both on and off: not read")
        return
    if values:
        (on,) = values
        why = "the text states the config's FUSED_QKV_ROPE / fused_single_qkv_rope"
    elif mlperf_gptoss_applies(row, flavor):
        on, why = True, _GPTOSS_SOURCE
    else:
        return
    out.options["fused_single_qkv_rope"] = on
    out.notes.append(
        f"Megatron-Core's fused QKV rotary embedding {'on' if on else 'off'} "
        f"(fused_single_qkv_rope): {why}"
        + (
            "; no query reshape copy, no dq / dk concatenation (Transformer Engine "
            "fused_qkv_rope_forward / _backward, NVIDIA/TransformerEngine#2122)"
            if on
            else ""
        )
    )
