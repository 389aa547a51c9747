"""What Megatron-LM's ``--use-flash-attn`` and ``--attention-backend`` select, by the model
path a row ran (7 Dec 2026, s35 attnflag).

``--use-flash-attn`` (``action='store_true'``, "use FlashAttention implementation of
attention") is read by Megatron-LM's *legacy* model only: ``megatron/model/transformer.py``
(later ``megatron/legacy/model/transformer.py``) replaces its baddbmm / softmax / bmm core with
``FlashSelfAttention``, a call of the flash-attn package's varlen kernel (NVIDIA/Megatron-LM
00baee46). A Megatron-Core model built with Transformer Engine's layer spec runs
``TEDotProductAttention`` (Transformer Engine's ``DotProductAttention``), which never reads the
flag: in NVIDIA/Megatron-LM 000c4ac2 ``megatron/training/arguments.py`` the flag's only other
reader is the deterministic-mode assertion, and ``core_transformer_config_from_args`` copies no
``use_flash_attn`` into the ``TransformerConfig``. A Transformer Engine developer on
NVIDIA/Megatron-LM#1259 ("Flash attention cannot be applied by passing the --use-flash-attn
flag when the --use-mcore-models flag is also passed", Oct 2024): "TransformerEngine has its
own logic to select attention backends ... TE prefers FlashAttention v2 on pre-Hopper GPUs
(SM < 90) and cuDNN FusedAttention on Hopper and later GPUs (SM >= 90)" — the megatron-core
profile's own reading (``attention_kernel`` ``cudnn``; on a preset without a cuDNN figure, the
A100 / A800 ones, its best kernel, FlashAttention-2).

What chooses the kernel there is ``--attention-backend`` (``flash`` / ``fused`` / ``unfused``
/ ``local`` / ``auto``, default ``auto``; 000c4ac2 ``arguments.py``): Megatron-Core's
``LanguageModule._set_attention_backend`` (``megatron/core/models/common/language_module/
language_module.py``, NVIDIA/Megatron-LM 3d5f704c) sets ``NVTE_FLASH_ATTN=1``,
``NVTE_FUSED_ATTN=0``, ``NVTE_UNFUSED_ATTN=0`` for ``flash`` (the flash-attn package: the
preset's ``fa2``), the reverse for ``fused``, all three 1 for ``auto`` (Transformer Engine's
preference above).

Which model path a row ran: Megatron-Core models became Megatron-LM's default after
``core_v0.7.0``, whose ``arguments.py`` still has ``--use-mcore-models`` as ``store_true``
(shifang99/Megatron-LM_core_v0.7.0_trace 65ae0e7e, a copy of that tag); later ones deprecate it
("Now ignored and mcore models are the default, use --use-legacy-models to not use core
models"). A row is read as a Megatron-Core model when its text names ``--use-mcore-models``, a
``core_r0.N`` / ``core_v0.N`` tag with N >= 8, or a stack built on Megatron-Core's GPTModel
(Megatron-Core itself, NeMo, Megatron-Bridge, Primus), and names no legacy marker
(``--use-legacy-models``, ``--transformer-impl local``, "(local) transformer"). Otherwise
(a Megatron-LM launch of 2023, FP8-LM's baselines) the flag keeps its legacy reading, fa2.

ms-swift's Megatron-SWIFT always builds Megatron-Core models and passes ``--use_flash_attn``
through to Megatron-LM, where it does nothing; its own ``attention_backend`` decides, whose
default was ``'auto'`` in its first Megatron releases (``swift/megatron/argument/
megatron_args.py``, the version with ``extra_megatron_kwargs``: ``use_flash_attn: bool = False``,
``attention_backend: str = 'auto'``) and ``'flash'`` later (modelscope/ms-swift 00840e65).
On a pre-Hopper GPU both give the flash-attn package (Transformer Engine prefers it there); on
Hopper and later the two releases differ (cuDNN vs flash-attn) and a row that names neither the
release nor ``--attention_backend`` cannot be decided from code: the flag keeps its fa2
reading there.
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_release import Defaults

#: ``--attention-backend <name>`` / a config's ``attention_backend: <name>`` (Megatron-Core's
#: ``AttnBackend``; ms-swift's ``--attention_backend``).
ATTENTION_BACKEND = re.compile(
    r"attention[-_\s]backend[\s:=\"']*(flash|fused|unfused|local|auto)\b", re.IGNORECASE
)
#: A Megatron-Core model named: the opt-in flag, a stack built on Megatron-Core's GPTModel.
MCORE_MODEL = re.compile(
    r"use[-_\s]mcore[-_\s]models|megatron[\s_-]?core|\bmcore\b|megatron[\s_-]?bridge|"
    r"\bnemo(?![a-z])|\bprimus\b",
    re.IGNORECASE,
)
#: A Megatron-Core release tag (``core_r0.13.0``, ``core_v0.6.0``): its minor version.
CORE_TAG = re.compile(r"\bcore_[rv]0\.(\d+)", re.IGNORECASE)
#: The first Megatron-Core minor release whose Megatron-LM builds Megatron-Core models by
#: default (``core_v0.7.0``'s ``--use-mcore-models`` is still an opt-in ``store_true``).
FIRST_MCORE_DEFAULT = 8
#: Megatron-LM's legacy model named (the flag's own path).
LEGACY_MODEL = re.compile(
    r"use[-_\s]legacy[-_\s]models|transformer[-_\s]impl[\s:=\"']*local\b|\(local\) transformer|"
    r"megatron/(?:legacy/)?model/transformer\.py",
    re.IGNORECASE,
)
#: ms-swift's Megatron-SWIFT (``megatron sft`` / ``megatron pt``).
MEGATRON_SWIFT = re.compile(r"megatron[\s_-]?swift|\bms[\s_-]?swift\b", re.IGNORECASE)
#: The flash-attn package's kernel, as the presets name it.
FLASH_KERNEL = "fa2"


def mcore_model(text: str) -> bool:
    """Whether ``text`` names a Megatron-Core model path (see the module docstring) and no
    legacy one."""
    if LEGACY_MODEL.search(text):
        return False
    tags = [int(m.group(1)) for m in CORE_TAG.finditer(text)]
    if (
        tags
        and max(tags) < FIRST_MCORE_DEFAULT
        and not re.search(r"use[-_\s]mcore[-_\s]models", text, re.IGNORECASE)
    ):
        return False
    return bool(tags) or bool(MCORE_MODEL.search(text))


def named_backend(text: str, out: Defaults) -> bool:
    """Read a named ``--attention-backend``; True when it decides the kernel (``flash``:
    ``attention_kernel`` fa2; ``fused`` / ``auto``: the profile's Transformer Engine reading
    kept). ``unfused`` / ``local`` are not read here (False)."""
    match = ATTENTION_BACKEND.search(text)
    if match is None:
        return False
    name = match.group(1).lower()
    if name == "flash":
        out.options["attention_kernel"] = FLASH_KERNEL
        out.notes.append(
            "attention on the flash-attn package (attention_kernel fa2): the text names "
            "--attention-backend flash (Megatron-Core LanguageModule._set_attention_backend "
            "sets NVTE_FLASH_ATTN=1, NVTE_FUSED_ATTN=0, NVTE_UNFUSED_ATTN=0, NVIDIA/Megatron-LM "
            "3d5f704c)"
        )
        return True
    if name in ("fused", "auto"):
        out.notes.append(
            f"attention as the profile reads Transformer Engine's choice: the text names "
            f"--attention-backend {name} (Megatron-Core LanguageModule._set_attention_backend: "
            f"{'NVTE_FUSED_ATTN=1, the other two 0' if name == 'fused' else 'all three on'}, "
            "NVIDIA/Megatron-LM 3d5f704c), which a --use-flash-attn does not change"
        )
        return True
    return False


def flash_flag_kernel(text: str, out: Defaults) -> None:
    """What a row's ``--use-flash-attn`` (already matched in ``text``) selects: fa2 on
    Megatron-LM's legacy model and for Megatron-SWIFT (undecided on Hopper+, see the module
    docstring); nothing on a Megatron-Core model, whose Transformer Engine attention the
    profile already reads."""
    if MEGATRON_SWIFT.search(text):
        out.options["attention_kernel"] = FLASH_KERNEL
        out.notes.append(SWIFT_FLASH_NOTE)
        return
    if not mcore_model(text):
        out.options["attention_kernel"] = FLASH_KERNEL
        out.notes.append(USE_FLASH_ATTN_NOTE)
        return
    out.notes.append(
        "attention as the profile reads Transformer Engine's choice (FusedAttention on sm90+, "
        "FlashAttention before): the text names --use-flash-attn on a Megatron-Core model, "
        "whose TEDotProductAttention does not read it (only Megatron-LM's legacy transformer "
        "does; NVIDIA/Megatron-LM 000c4ac2 megatron/training/arguments.py, NVIDIA/Megatron-LM"
        "#1259) and no --attention-backend flash"
    )


#: Why the legacy reading runs the flash-attn package.
USE_FLASH_ATTN_NOTE = (
    "attention on the flash-attn package (attention_kernel fa2): the text names Megatron-LM's "
    "--use-flash-attn on its legacy model (megatron/model/transformer.py FlashSelfAttention over "
    "flash_attn's varlen kernel instead of the baddbmm / softmax / bmm core, NVIDIA/"
    "Megatron-LM 00baee46), not cuDNN's fused attention; read as FlashAttention-2, the "
    "package's version not stated"
)
#: Why a Megatron-SWIFT row naming the flag is read as the flash-attn package.
SWIFT_FLASH_NOTE = (
    "attention on the flash-attn package (attention_kernel fa2): the text names "
    "--use_flash_attn through Megatron-SWIFT, which Megatron-Core ignores; ms-swift's "
    "attention_backend decides, 'auto' in its first Megatron releases and 'flash' later "
    "(swift/megatron/argument/megatron_args.py; modelscope/ms-swift 00840e65): both run "
    "flash-attn before Hopper (Transformer Engine's preference there); on Hopper+ the release "
    "decides and is not stated, the flag's reading kept"
)
