"""NVIDIA's MLPerf Training v6.0 GPT-OSS 20B implementation's defaults, for an inferred
``megatron-core`` row of that benchmark whose text does not state them (7 Dec 2026, s29
gptossdef): :func:`mlperf_gptoss_defaults`.

Every v6.0 GPT-OSS 20B submission runs NVIDIA's implementation (``pretrain.py`` on
``conf/gpt_oss.yaml``; its configs source ``config_common.sh``, ``config_common_mxfp8.sh`` and
``config_common_cg.sh`` before their own exports). Read in Richardyu114/training_results_v6.0
eabf23a0, a copy of mlcommons/training_results_v6.0:

- ``NVIDIA/benchmarks/gpt_oss_20b/implementations/nemo/conf/gpt_oss.yaml`` (model section):
  ``moe_flex_dispatcher_backend: ${oc.decode:${oc.env:MOE_FLEX_DISPATCHER_BACKEND,hybridep}}``
  with ``moe_token_dispatcher_type`` default ``flex`` and
  ``moe_hybridep_num_sms: ${oc.decode:${oc.env:MOE_HYBRIDEP_NUM_SMS,128}}`` (lines 43-45);
  ``cross_entropy_fusion_impl: ${oc.decode:${oc.env:CE_FUSION_IMPL,'te'}}`` (line 123);
  optim ``fp8_param_gather: ${oc.decode:${oc.env:FP8_PARAM_GATHER,False}}`` (line 158) and
  ``bucket_size: ${oc.decode:${oc.env:BUCKET_SIZE,134217728}}`` (line 157).
- The implementation's ``config_common.sh`` (not in NVIDIA's folder; Lambda's stored copy,
  ``Lambda/benchmarks/gpt_oss_20b/implementations/b200_0504/config_common.sh``) exports
  ``CE_FUSION_IMPL=te`` and ``BUCKET_SIZE=768000000`` (overriding the yaml's 134217728; HPE's
  v6.0 GPT-OSS logs, whose configs set no BUCKET_SIZE, print ``bucket_size 768000000``) and
  ``FP8_PARAM_GATHER=True``, which ``config_common_mxfp8.sh``, sourced after it, sets back:
  ``FP8_PARAM_GATHER=False`` in GigaComputing's stored copy
  (``GigaComputing/benchmarks/gpt_oss_20b/implementations/GB300/config_common_mxfp8.sh``; HPE's
  logs print ``fp8_param_gather False``). Lambda's own copy of that file was edited to ``True``
  ("DM: Try setting this now"), and its B200 log prints it: a row's stated value wins.
- NVIDIA's stored ``config_GB300_128x4x1xtp2pp1cp4ep8.sh`` sources the three files and sets no
  dispatcher, SM count, loss, bucket or FP8-parameter variable.

So, for an MXFP8 row (the ``config_common_mxfp8.sh`` configs) of MLPerf Training v6.0 GPT-OSS
20B: HybridEP on 128 SMs, Transformer Engine's fused cross-entropy, no FP8 parameter gather, and
gradient buckets of 768,000,000 parameters — each only where the row's text (any cell) does not
state its own value. The CuTe DSL fused grouped MLP is a config's environment variable, not a
default of these files: it stays read where stated (:mod:`.infer_mlperf_moe`).
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_buckets import set_bucket
from stage_explore.validation.infer_mlperf_round import mlperf_training_round
from stage_explore.validation.infer_release import TEXT_COLUMNS, Defaults, row_text

#: The MLPerf Training round and model flavor this implementation is read for.
GPTOSS_ROUND = (6, 0)
GPTOSS_FLAVOR = "gpt-oss-20b"
#: ``moe_hybridep_num_sms`` default of ``conf/gpt_oss.yaml`` (module docstring).
GPTOSS_HYBRIDEP_SMS = 128
#: ``BUCKET_SIZE`` of the implementation's ``config_common.sh`` (module docstring), parameters.
GPTOSS_BUCKET_PARAMETERS = 768_000_000
_SOURCE = "Richardyu114/training_results_v6.0 eabf23a0"
_YAML = "NVIDIA/benchmarks/gpt_oss_20b/implementations/nemo/conf/gpt_oss.yaml"

#: A stated FP8 parameter gather: the config's ``FP8_PARAM_GATHER=…``, a printed
#: ``fp8_param_gather False`` / ``fp8_param_gather=True``, or NeMo's ``fp8_param True``.
_FP8_PARAM = re.compile(r"\bfp8_param(?:_gather)?\b\s*[=:]?\s*['\"]?(true|false)\b", re.IGNORECASE)
#: A stated loss implementation (``CE_FUSION_IMPL=native``, ``cross_entropy_fusion_impl te``).
_CE_IMPL = re.compile(
    r"(?:CE_FUSION_IMPL|cross_entropy_fusion_impl)\s*[=:]?\s*['\"]?(te|native)\b", re.IGNORECASE
)
#: A stated HybridEP SM count (``MOE_HYBRIDEP_NUM_SMS=64``, ``moe_hybridep_num_sms 32``).
_HYBRIDEP_SMS = re.compile(r"\bmoe_hybridep_num_sms\b\s*[=:]?\s*(\d+)", re.IGNORECASE)
#: A stated dispatcher that is not HybridEP: another token dispatcher type or flex backend.
_OTHER_DISPATCHER = re.compile(
    r"(?:moe_token_dispatcher_type\s*[=:]?\s*['\"]?(?:alltoall|allgather)\b|"
    r"moe_flex_dispatcher_backend\s*[=:]?\s*['\"]?deepep\b)",
    re.IGNORECASE,
)
#: A stated gradient bucket (the forms :mod:`.infer_buckets` reads).
_BUCKET = re.compile(r"(?:\bBUCKET_SIZE|--ddp-bucket-size|\bbucket_size)\s*[=:\s]\s*(\d+)\b")
#: Notes of earlier readings this one replaces (their opening words).
_REPLACED = (
    "FP8 parameters (framework option fp8_param_gather)",
    "the loss as Megatron-Core's native fused cross-entropy",
    "the expert dispatch on HybridEP (moe_hybridep, at Megatron-Core's default 16 SMs)",
)


def mlperf_gptoss_applies(row: dict[str, str], flavor: str) -> bool:
    """Whether the row is an MLPerf Training v6.0 GPT-OSS 20B run (its text names the round,
    the model read as :data:`GPTOSS_FLAVOR`)."""
    return flavor == GPTOSS_FLAVOR and mlperf_training_round(row_text(row)) == GPTOSS_ROUND


#: The cells where a row states its own run's values: the text columns and the cells that quote
#: a log (``precision``: "fp8_param True"; ``dp_sharding``: the printed DDP config). Not
#: ``uncertain``, which may quote another run (the NVIDIA GB300 8-GPU row cites HPE's printed
#: ``fp8_param_gather False`` for the same configuration name).
STATED_COLUMNS = (*TEXT_COLUMNS, "precision", "dp_sharding")


def _stated_text(row: dict[str, str]) -> str:
    return row_text(row, STATED_COLUMNS)


def _replace(out: Defaults, prefix: str, note: str) -> None:
    """Drop ``out``'s notes opening with ``prefix`` (an earlier reading) and add ``note``."""
    out.notes[:] = [n for n in out.notes if not n.startswith(prefix)]
    out.notes.append(note)


def mlperf_gptoss_defaults(
    row: dict[str, str], flavor: str, precision: str, fp8_recipe: str, out: Defaults
) -> None:
    """The v6.0 GPT-OSS 20B implementation's defaults (module docstring) into ``out`` for a row
    :func:`mlperf_gptoss_applies` to, each where the row's :data:`STATED_COLUMNS` do not state
    the value (a stated one is left to the readers of stated values); the notes of the
    container-era readings they replace are dropped. MXFP8 rows only: the FP8-parameter default
    is ``config_common_mxfp8.sh``'s, which those configs source after ``config_common.sh``."""
    if not mlperf_gptoss_applies(row, flavor) or precision != "fp8" or fp8_recipe != "mxfp8":
        return
    text = _stated_text(row)
    said = f"NVIDIA's MLPerf Training v6.0 GPT-OSS 20B implementation, {_SOURCE}"
    if not _OTHER_DISPATCHER.search(text):
        stated = _HYBRIDEP_SMS.search(text)
        sms = int(stated.group(1)) if stated else GPTOSS_HYBRIDEP_SMS
        why = (
            f"the text states {stated.group(0)!r}" if stated
            else "moe_hybridep_num_sms default 128, which no stored v6.0 GPT-OSS config overrides"
        )  # fmt: skip
        out.options["moe_hybridep"] = True
        out.options["moe_hybridep_sms"] = sms
        _replace(out, _REPLACED[2], (
            f"the expert dispatch on HybridEP (moe_hybridep) on {sms} SMs (moe_hybridep_sms): "
            f"{_YAML} moe_token_dispatcher_type default flex, moe_flex_dispatcher_backend "
            f"default hybridep; {why} ({said})"
        ))  # fmt: skip
    ce = _CE_IMPL.search(text)
    if ce is None or (ce.group(1).lower() == "te" and "te_cross_entropy" not in out.options):
        out.options.pop("native_cross_entropy", None)
        out.options["te_cross_entropy"] = True
        why = (
            f"the text states {ce.group(0).strip()!r}" if ce
            else "cross_entropy_fusion_impl default 'te'; config_common.sh CE_FUSION_IMPL=te"
        )  # fmt: skip
        _replace(out, _REPLACED[1], (
            f"the loss as Transformer Engine's fused cross-entropy (te_cross_entropy): {_YAML} "
            f"{why} ({said})"
        ))  # fmt: skip
    if _FP8_PARAM.search(text) is None and "fp8_param_gather" in out.options:
        out.options["fp8_param_gather"] = False
        _replace(out, _REPLACED[0], (
            "FP8 parameters off (framework option fp8_param_gather false): config_common_mxfp8.sh "
            "FP8_PARAM_GATHER=False (GigaComputing/benchmarks/gpt_oss_20b/implementations/GB300 "
            f"copy), sourced after config_common.sh's True; {_YAML} optim fp8_param_gather "
            f"default False ({said})"
        ))  # fmt: skip
    if _BUCKET.search(text) is None:
        set_bucket(out, GPTOSS_BUCKET_PARAMETERS, (
            "the implementation's config_common.sh BUCKET_SIZE=768000000 (Lambda/benchmarks/"
            "gpt_oss_20b/implementations/b200_0504 copy; HPE's v6.0 logs print it) over "
            f"{_YAML}'s default 134217728 ({said})"
        ))  # fmt: skip
