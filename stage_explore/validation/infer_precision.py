"""A published-runs row's ``precision`` cell read as a precision and FP8 / FP4 recipe
(:func:`infer_precision`, :class:`PrecisionRead`, :data:`FP8_RECIPES`): bf16 / fp16 / Apex AMP
spellings, the FP8 recipes' names (current / tensorwise, delayed, MXFP8, blockwise, torchao's
row-wise), NVFP4; the framework's default recipe where an FP8 cell names none. Split out of
:mod:`stage_explore.validation.infer_fields` (which re-exports it) in s26.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stage_explore.validation.csv_cells import DASHES
from stage_explore.validation.infer_errors import Uninferable


@dataclass(frozen=True, slots=True)
class PrecisionRead:
    """A ``precision`` cell read: the precision, the FP8 recipe ("" when not FP8), why, and the
    GEMMs the recipe runs in FP8 (empty: all three, the default)."""

    precision: str
    fp8_recipe: str
    assumption: str
    fp8_gemms: tuple[str, ...] = ()


#: (pattern, fp8 recipe) for the FP8 spellings that name a recipe; first match wins.
FP8_RECIPES: tuple[tuple[str, str], ...] = (
    (r"mxfp8|fp8[-_ ]?mx|microscal|\bmx\b", "mxfp8"),
    # "dynamic" scaling: torchao Float8's per-tensor dynamic scaling, its tensorwise recipe
    # (pytorch/ao torchao/float8/config.py ScalingType.DYNAMIC; s24 spellings: was delayed)
    (r"fp8[-_ ]?cs|current|tensorwise|dynamic(?![-_\s]*loss)", "tensorwise"),
    (r"fp8[-_ ]?ds|delayed", "delayed"),
    # NeMo / Megatron-Bridge's "FP8 NV Subchannel scaling" is fp8_recipe blockwise (128x128
    # weights, 1x128 activations: NVIDIA/NeMo nemo/collections/llm/recipes/precision/
    # mixed_precision.py 1dd5fa11 bf16_with_fp8_subchannel_scaling_mixed; s24: was delayed)
    (r"block|sub[-_\s]?channel", "blockwise"),
)


#: A precision or recipe the cell denies (``bf16 (no fp8)``, ``BF16, FP8 off``, ``w/o FP8``,
#: ``fp8: no``, ``FP16 (not bf16)``, ``FP8 (delayed, not current scaling)``): dropped before
#: the cell is read (s27 review: each was read as the precision or recipe it denies, as s26's
#: ``compiled: no`` was read as compiled).
_DENIED = re.compile(
    r"\b(?:no|not|non|without|w/o)[-\s]+(?:an?\s+|the\s+)?"
    r"(?:mxfp8|nvfp4|mxfp4|fp8|float8|fp4|bf16|bfloat16|fp16|float16|current|delayed|"
    r"tensorwise|blockwise|block|sub[-_\s]?channel)(?:[-_\s]+scaling)?\b"
    r"|\b(?:mxfp8|nvfp4|mxfp4|fp8|float8|fp4)\s*(?:[:=]\s*)?"
    r"(?:off|disabled|not\s+used|not\s+enabled|unused|no|false|0(?![.\d]))\b",
    re.IGNORECASE,
)


def infer_precision(cell: str, framework: str, bridge: bool = False) -> PrecisionRead:
    """The precision of a ``precision`` cell (``FP8-CS``, ``MXFP8``, ``bf16 mixed``,
    ``amp_bf16``, ``fp16 mixed``, ``FP8``, ``NVFP4`` / ``FP4`` …); an FP4 cell is ``fp4`` with
    the ``nvfp4`` recipe (MXFP4 is refused: not modelled); an FP8 cell without a recipe takes the
    framework's default recipe: tensorwise for torchtitan (torchao Float8's dynamic
    tensorwise scaling) and for a Megatron-Bridge table (``bridge``: its tables label FP8 rows
    FP8-CS / FP8-MX, a bare "FP8" read as the first), delayed otherwise (Megatron-Core's
    ``--fp8-recipe`` default); a row-wise spelling (``rowwise``, ``per-row``, ``axiswise``) is
    torchao's ``rowwise``, with ``gw_hp`` its ``rowwise_with_gw_hp`` (:func:`_rowwise`). A
    precision or recipe the cell denies (:data:`_DENIED`) is not read; a cell that only
    denies (``fp8: no``) is :class:`Uninferable`."""
    text = cell.strip().lower()
    said = f"the precision column says {cell.strip()!r}"
    if not text or text in DASHES:
        empty = "column empty" if not text else f"the column says {cell.strip()!r}, not stated"
        return PrecisionRead("bf16", "", f"bf16 mixed precision, a default ({empty})")
    text = _DENIED.sub(" ", text)  # a denied precision is not the row's (cell left as said)
    if re.search(r"mxfp4|fp4[-_ ]?mx", text):
        raise Uninferable(f"precision {cell!r}: the model has NVFP4, not MXFP4")
    if re.search(r"fp4", text):
        layers = (
            "Megatron-Bridge's performance scripts run bf16_with_nvfp4_mixed unchanged, no layer "
            "pinned to BF16: scripts/performance/utils/precision.py 84fba284"
            if bridge
            else "no BF16 layer count stated: none taken (Megatron-Core's "
            "--first-last-layers-bf16 is off by default)"
        )
        return PrecisionRead(
            "fp4", "", f"fp4 with fp4_recipe nvfp4, every decoder layer's linear GEMMs in NVFP4 "
            f"({said}; {layers})"
        )
    if re.search(r"fp8|float8", text):
        if re.search(r"row[-_\s]?wise|per[-_\s]?row|axiswise", text):
            if framework != "torchtitan":
                raise Uninferable(
                    f"precision {cell!r}: FP8 with row-wise scales is torchao Float8's 'rowwise' "
                    f"recipe (torchtitan), but the row's framework is {framework}, whose FP8 "
                    "runs through Transformer Engine: it has no row-wise recipe"
                )
            return _rowwise(text, said)
        for pattern, recipe in FP8_RECIPES:
            if re.search(pattern, text):
                return PrecisionRead("fp8", recipe, f"fp8 with fp8_recipe {recipe} ({said})")
        recipe = "tensorwise" if framework == "torchtitan" or bridge else "delayed"
        whose = "Megatron-Bridge's FP8-CS" if bridge else f"the {framework} default"
        return PrecisionRead(
            "fp8", recipe, f"fp8 with fp8_recipe {recipe}, {whose} ({said}, no recipe named)"
        )
    spellings = (("bf16", r"bf16|bfloat16|brain\s*float"), ("fp16", r"fp16|float16|half"))
    for name, pattern in spellings:
        if re.search(pattern, text):
            return PrecisionRead(name, "", f"{name} mixed precision ({said})")
    # Apex AMP's opt levels (NVIDIA/apex docs/source/amp.rst 3f87614f): O1 and O2 are FP16
    # mixed precision (O2: FP16 weights, FP32 master weights), O0 is FP32, O3 pure FP16
    named = re.search(r"\bamp|apex|opt[-_\s]?level|^o\d$", text)
    apex = re.search(r"\bo([0-3])\b", text) if named else None
    if apex and apex.group(1) in "12":
        level = f"Apex AMP O{apex.group(1)}"
        return PrecisionRead("fp16", "", f"fp16 mixed precision, {level} ({said})")
    if apex:
        raise Uninferable(
            f"precision {cell!r}: Apex AMP O{apex.group(1)} is "
            f"{'FP32' if apex.group(1) == '0' else 'pure FP16 without FP32 master weights'}, "
            "not modelled (expected bf16, fp16 or an FP8 spelling)"
        )
    raise Uninferable(
        f"precision {cell!r}: expected bf16, fp16 or an FP8 spelling (bfloat16, float16, "
        "half, Apex AMP O1 / O2 read too)"
    )


def _rowwise(text: str, said: str) -> PrecisionRead:
    """torchao Float8's row-wise recipes: ``rowwise`` (every GEMM in FP8) and
    ``rowwise_with_gw_hp`` (a ``gw_hp`` / ``gw hp`` spelling: the weight-gradient GEMM in high
    precision, read as ``fp8_gemms`` fprop,dgrad; torchao/float8/config.py c6c388b5)."""
    if re.search(r"gw[-_\s]?hp|grad[-_\s]?weight[-_\s]?(in[-_\s]?)?(hp|high)", text):
        return PrecisionRead(
            "fp8", "rowwise", f"fp8 with fp8_recipe rowwise and fp8_gemms fprop,dgrad, torchao's "
            f"rowwise_with_gw_hp: the weight-gradient GEMM in bf16 ({said})", ("fprop", "dgrad"),
        )  # fmt: skip
    return PrecisionRead("fp8", "rowwise", f"fp8 with fp8_recipe rowwise ({said})")
