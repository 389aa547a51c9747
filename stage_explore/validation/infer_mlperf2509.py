"""NVIDIA's MLPerf Training NeMo 2.0 implementation of the 25.09 release (the v5.1 Llama 3.1
8B / 405B one) for an inferred ``megatron-core`` row whose text names MLPerf and container 25.09
or later: its FP8 recipe and loss, as its ``conf/custom.yaml`` and the 8B configs set them.

Read in mlcommons/training_results_v5.1 4da2d1cd, the submitters' copies of that implementation
(NVIDIA's own stores only its config files):

- ``Lambda/benchmarks/llama31_8b/implementations/gb300_0922/conf/custom.yaml``:
  ``fp8_recipe: ${oc.env:FP8_RECIPE,tensorwise}`` and
  ``cross_entropy_fusion_impl: ${oc.env:CE_FUSION_IMPL,'native'}``;
- ``NVIDIA/benchmarks/llama31_8b/implementations/nemo/config_common.sh``:
  ``FP8_RECIPE="tensorwise"``;
- ``config_common_8b.sh``, which every 8B config sources (NVIDIA's
  ``config_GB300_128x4x1xtp2pp1cp4_8b.sh`` sources it and then overrides its ``USE_TE_OPS``):
  ``CE_FUSION_IMPL=te`` in the two stored copies,
  ``Lambda/.../gb300_0922/config_common_8b.sh`` and
  ``HPE/benchmarks/llama3_8b/implementations/nemo-x86_64/config_common_8b.sh``.

The earlier NeMo 2.0 implementation (Cisco's copy on NeMo v2.4.0, ``Cisco/benchmarks/llama31_8b/
implementations/nemo/conf/custom.yaml``: ``fp8_recipe`` default ``delayed``, no
``cross_entropy_fusion_impl``) is not this one: a row naming no container keeps its reading.
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_fields import FP8_RECIPES
from stage_explore.validation.infer_release import (
    CONTAINER_COLUMNS,
    Defaults,
    container,
    row_text,
)

#: The first container of the implementation whose custom.yaml defaults ``fp8_recipe`` to
#: tensorwise and reads ``CE_FUSION_IMPL`` (Lambda's ``gb300_0922`` copy, NeMo 25.09).
MLPERF_2509 = (25, 9)
#: ``CE_FUSION_IMPL=te`` / ``native`` stated in a row's text, or the model config's key as a log
#: prints it (``cross_entropy_fusion_impl te``, ``cross_entropy_fusion_impl: 'te'``,
#: ``cross_entropy_fusion_impl='te'``).
_CE_FUSION_IMPL = re.compile(
    r"(?:CE_FUSION_IMPL|cross_entropy_fusion_impl)\s*[=:]?\s*['\"]?(te|native)\b", re.IGNORECASE
)
#: The Llama 3.1 8B benchmark, whose configs source config_common_8b.sh.
_LLAMA31_8B = re.compile(r"llama[\s_-]*3\.1[\s_-]*8b", re.IGNORECASE)
_NATIVE_NOTE = "the loss as Megatron-Core's native fused cross-entropy"


def _said(row: dict[str, str]) -> str:
    release = container(row)
    assert release is not None
    return f"the text names MLPerf and container {release[0]}.{release[1]:02d}"


def mlperf_2509_applies(row: dict[str, str]) -> bool:
    """Whether the row's text names MLPerf and container 25.09 or later (this implementation)."""
    release = container(row)
    return release is not None and release >= MLPERF_2509 and "mlperf" in row_text(row).lower()


def mlperf_2509_recipe(row: dict[str, str], precision: str, out: Defaults) -> None:
    """Tensorwise (current) scaling for an FP8 row whose precision cell names no recipe: the
    implementation's custom.yaml default and config_common.sh's ``FP8_RECIPE``, in place of
    Megatron-Core's ``--fp8-recipe`` default (delayed)."""
    cell = row.get("precision", "").lower()
    if precision != "fp8" or not mlperf_2509_applies(row):
        return
    if any(re.search(pattern, cell) for pattern, _ in FP8_RECIPES):
        return  # the row names its recipe
    out.parallel["fp8_recipe"] = "tensorwise"
    out.notes.append(
        "fp8_recipe tensorwise (Transformer Engine's current scaling), not Megatron-Core's "
        "delayed default: NVIDIA's MLPerf NeMo 2.0 implementation of 25.09 reads "
        "fp8_recipe ${oc.env:FP8_RECIPE,tensorwise} (conf/custom.yaml, Lambda's gb300_0922 copy, "
        "mlcommons/training_results_v5.1 4da2d1cd) and its config_common.sh exports "
        f'FP8_RECIPE="tensorwise" ({_said(row)})'
    )


def mlperf_2509_loss(row: dict[str, str], out: Defaults) -> None:
    """The loss the implementation's ``cross_entropy_fusion_impl`` selects: ``CE_FUSION_IMPL``
    as the row's text states it, else ``te`` for the Llama 3.1 8B benchmark (its
    config_common_8b.sh); any other row keeps custom.yaml's default, native."""
    if not mlperf_2509_applies(row):
        return
    text = row_text(row, CONTAINER_COLUMNS)
    stated = _CE_FUSION_IMPL.search(text)
    if stated is not None:
        impl = stated.group(1).lower()
        why = f"the text states {stated.group(0).strip()!r}"
    elif _LLAMA31_8B.search(row.get("model", "")):
        impl = "te"
        why = (
            "the Llama 3.1 8B configs source config_common_8b.sh, whose stored copies (Lambda's "
            "gb300_0922, HPE's nemo-x86_64) export CE_FUSION_IMPL=te"
        )
    else:
        return
    if impl != "te":
        return  # custom.yaml's default, native: the container path's reading already
    out.options.pop("native_cross_entropy", None)
    out.notes[:] = [n for n in out.notes if not n.startswith(_NATIVE_NOTE)]
    out.options["te_cross_entropy"] = True
    out.notes.append(
        "the loss as Transformer Engine's fused cross-entropy (te_cross_entropy): NVIDIA's MLPerf "
        "NeMo 2.0 implementation of 25.09 passes cross_entropy_fusion_impl "
        "${oc.env:CE_FUSION_IMPL,'native'} (conf/custom.yaml, Lambda's gb300_0922 copy, "
        f"mlcommons/training_results_v5.1 4da2d1cd) and {why} ({_said(row)})"
    )
