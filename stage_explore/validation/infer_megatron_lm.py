"""Rows that name Megatron-LM itself as what ran, read by an inferred setup (6 Dec 2026, s27
hidden20): Megatron-LM's own launcher, ``pretrain_gpt.py`` with its argument defaults, not a
NeMo / Megatron-Bridge / MLPerf recipe.

The ``megatron-core`` profile holds the switches those recipes turn on (the overlap of the
data-parallel gradient reduce and parameter gather, TP communication overlap, sequence
parallelism with TP, the distributed optimizer). Megatron-LM leaves every one of them off unless
its command line names it: ``--overlap-grad-reduce``, ``--overlap-param-gather``,
``--tp-comm-overlap``, ``--sequence-parallel`` and ``--use-distributed-optimizer`` are all
``action='store_true'`` (NVIDIA/Megatron-LM 307dcf37 ``megatron/training/arguments.py``; the
first with ``default=False`` spelled out). A paper that benchmarks "Megatron-LM" as its baseline
(MegaScale, NSDI 2024: the baseline is "the original Megatron-LM", to which MegaScale adds TP,
PP and DP communication overlap, its Table 3) ran those defaults unless it says otherwise.

Read only when the row's text names Megatron-LM and no framework rule of
:data:`stage_explore.validation.infer_fields.FRAMEWORK_RULES` (a NeMo, Megatron-Core, Bridge,
MLPerf, DGX Cloud or Primus recipe keeps its own reading) nor a framework the model has no
profile of (GPT-NeoX, Nanotron … stay refused), or when it names Megatron-Core only as the tag
Megatron-LM's own ``pretrain_gpt.py`` ran on and no recipe (:func:`core_version_launch`, s33
rowsE). A switch the row's text names as on keeps the
profile's value. The model fields a launch row's text says its script left at Megatron-LM's
defaults (learned absolute positions, tied embeddings, biased linears, dropout 0.1:
:data:`LAUNCH_MODEL_DEFAULTS`, s34 flagperf) replace the flavor's. The attention kernel is the
profile's (Megatron-LM's Transformer Engine path picks a fused kernel by default; its legacy
path of 2023 ran unfused attention unless ``--use-flash-attn``, which a row's date alone does
not settle; what the flag selects on each path: :mod:`stage_explore.validation.
infer_attention_flag`).
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_attention_flag import flash_flag_kernel, named_backend
from stage_explore.validation.infer_release import Defaults, row_text

#: Megatron-LM named as a framework (``Megatron-LM``, ``Megatron LM``, ``megatron_lm``); not
#: Megatron-DeepSpeed nor Megatron-Core, whose rules read them first.
MEGATRON_LM = re.compile(r"megatron[\s_-]?lm\b", re.IGNORECASE)
#: How :func:`stage_explore.validation.infer_fields.infer_framework`'s reading of such a row
#: begins (the test of :func:`megatron_lm_launch`).
MEGATRON_LM_READING = "framework profile megatron-core, Megatron-LM's own launcher"
ARGUMENTS = "NVIDIA/Megatron-LM 307dcf37 megatron/training/arguments.py"
#: The core_v0.6.0-era copy of that file a benchmark suite stores beside its launch script.
ARGUMENTS_FLAGPERF = (
    "FlagOpen/FlagPerf 8f45ae0a training/benchmarks/llama3_8B/megatron/arguments.py, "
    "Megatron-LM's arguments.py of the core_v0.6.0 era"
)
#: (option, what the row's text must name to keep the profile's value on, Megatron-LM's flag).
LAUNCH_OFF: tuple[tuple[str, str, str], ...] = (
    ("overlap_grad_reduce", r"overlap[-_\s]grad[-_\s]reduce", "--overlap-grad-reduce"),
    ("overlap_param_gather", r"overlap[-_\s]param[-_\s]gather", "--overlap-param-gather"),
    ("tp_comm_overlap", r"tp[-_\s]comm[-_\s]overlap", "--tp-comm-overlap"),
)
#: Megatron-LM's gradient-accumulation fusion named as off: the flag
#: ``--no-gradient-accumulation-fusion`` or a config's ``gradient_accumulation_fusion false``
#: (Primus, NeMo yaml); not ``... true``. The fusion is on by default (Megatron-LM
#: ``megatron/arguments.py`` of 2023 and ``megatron/training/arguments.py``:
#: ``--no-gradient-accumulation-fusion``, ``action='store_false'``, dest
#: ``gradient_accumulation_fusion``), so only a row that names it off leaves the profile's
#: ``fused-linear``.
NO_GRAD_ACCUMULATION_FUSION = (
    r"no[-_\s]gradient[-_\s]accumulation[-_\s]fusion|"
    r"gradient[-_\s]accumulation[-_\s]fusion[\s:=\"']*(?:false|off|0)\b"
)
#: What the row then runs: each linear layer's weight-gradient GEMM writes a fresh 16-bit
#: gradient (Megatron-LM 2023 ``megatron/core/tensor_parallel/layers.py``
#: ``LinearWithGradAccumulationAndAsyncCommunication.backward``: ``grad_weight =
#: grad_output.t().matmul(total_input)`` unless ``gradient_accumulation_fusion``, then
#: ``fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32`` into ``main_grad``; Transformer
#: Engine's layers take ``fuse_wgrad_accumulation=config.gradient_accumulation_fusion``) and
#: the DDP hook adds it into ``main_grad`` every micro-batch (``param.main_grad.add_(
#: param.grad.data)``): the profile's ``grad_accumulation`` ``add``.
NO_GRAD_ACCUMULATION_FUSION_NOTE = (
    "weight gradients written, then added into main_grad every micro-batch (grad_accumulation "
    "add): the text names gradient-accumulation fusion off (Megatron-LM "
    "--no-gradient-accumulation-fusion, store_false, on by default: the wgrad GEMM then writes "
    "a fresh gradient, megatron/core/tensor_parallel/layers.py, and the DDP hook runs "
    "main_grad.add_(grad))"
)
#: Megatron-LM's ``--use-flash-attn`` (a config's ``use_flash_attn true``); not ``... false``.
#: What it selects depends on the model path the row ran (legacy transformer: the flash-attn
#: package; a Megatron-Core model: nothing, Transformer Engine chooses): :mod:`stage_explore.
#: validation.infer_attention_flag` (s35 attnflag).
USE_FLASH_ATTN = r"use[-_\s]flash[-_\s]attn\b(?![\s:=\"']*(?:false|off|0|no)\b)"
#: Megatron-LM's model-architecture defaults as a Megatron-LM launch row's text states them
#: left in place (its script passing none of the flags that change them): (model field, value,
#: pattern, why). The defaults, in Megatron-LM's ``megatron/training/arguments.py`` of the
#: core_v0.6.0 era as BAAI FlagPerf stores it (FlagOpen/FlagPerf 8f45ae0a
#: ``training/benchmarks/llama3_8B/megatron/arguments.py``, the copy its Llama 3 cases patch):
#: ``--position-embedding-type`` default ``learned_absolute``,
#: ``--untie-embeddings-and-output-weights`` store_true (tied unless passed),
#: ``--disable-bias-linear`` store_false into ``add_bias_linear`` (biases unless passed),
#: ``--hidden-dropout`` / ``--attention-dropout`` default 0.1. A Llama-family row's flavor is
#: rotary, untied, biasless and dropout-free; a launch that passes none of these flags ran
#: Megatron-LM's GPT defaults instead (7 Dec 2026, s34 flagperf). Read only from what the text
#: names, never assumed from the launch alone: a row naming "Llama" usually passed them.
LAUNCH_MODEL_DEFAULTS: tuple[tuple[str, object, str, str], ...] = (
    ("position", "learned", r"learned[-_\s]absolute",
     "learned absolute position embeddings (position learned): Megatron-LM's "
     "--position-embedding-type default learned_absolute, the text says it ran"),
    ("tied_embeddings", True, r"(?<![\w-])tied (?:input and output )?embeddings",
     "input and output embeddings tied (tied_embeddings): Megatron-LM's "
     "--untie-embeddings-and-output-weights is store_true, the text says they were tied"),
    ("bias", True, r"bias(?:es)? in the linear layers|add[-_\s]bias[-_\s]linear",
     "biases in the linear layers (bias): Megatron-LM's --disable-bias-linear is store_false "
     "into add_bias_linear (on by default), the text says they were kept"),
    ("dropout", True, r"dropout\s*(?:=\s*)?0?\.0*[1-9]",
     "dropout on (dropout): Megatron-LM's --hidden-dropout / --attention-dropout default 0.1, "
     "the text names a nonzero dropout"),
)  # fmt: skip
#: A named switch turned off (``no --tp-comm-overlap``, ``tp_comm_overlap=False``) is not on.
_DENIED = r"(?:\bno\s+|\bwithout\s+)(?:--)?{0}|{0}[\s:=]*(?:false|off|0)\b"


def megatron_lm_reading(column: str, said: str) -> str:
    """The framework reading of a row whose ``column`` names Megatron-LM (``said``)."""
    return (
        f"{MEGATRON_LM_READING} (the {column} column names {said!r}: pretrain_gpt.py with its "
        "argument defaults, not a NeMo / Megatron-Bridge recipe's)"
    )


#: Megatron-LM's own entry scripts at its repository's root (NVIDIA/Megatron-LM:
#: ``pretrain_gpt.py``, ``pretrain_bert.py``, ``pretrain_t5.py``, ``pretrain_mamba.py``,
#: ``pretrain_vlm.py``, ``pretrain_retro.py``, ``pretrain_ict.py``), each parsing
#: ``megatron/training/arguments.py`` with its defaults.
LAUNCH_SCRIPT = re.compile(r"\bpretrain_(?:gpt|bert|t5|mamba|vlm|retro|ict)\.py\b", re.IGNORECASE)
#: A recipe that sets the overlaps itself (NeMo, Megatron-Bridge, MLPerf, DGX Cloud
#: Benchmarking, Primus, ROCm Megatron, the Megatron-MoE-ModelZoo scripts): a row naming one keeps
#: the megatron-core profile's reading.
RECIPE = re.compile(
    r"megatron[\s_-]?bridge|\bnemo(?![a-z])|mlperf|dgx cloud|dgxc-benchmarking|\bprimus\b|"
    r"rocm/megatron|model[\s_-]?zoo",
    re.IGNORECASE,
)


def core_version_launch(row: dict[str, str], columns: tuple[str, ...]) -> str:
    """The Megatron-LM launcher reading (:func:`megatron_lm_reading`) of a row that names
    Megatron-Core only as what Megatron-LM's own script ran on: its text (``columns``) names a
    :data:`LAUNCH_SCRIPT` and no :data:`RECIPE`; "" otherwise (7 Dec 2026, s33 rowsE).

    Megatron-Core releases are tags of the Megatron-LM repository (``core_v0.6.0``), so a
    benchmark suite states its Megatron-LM checkout as "megatron-core tag:core_v0.6.0" and
    launches ``pretrain_gpt.py`` with its own flags: BAAI FlagPerf's NVIDIA Llama 3 cases
    (FlagOpen/FlagPerf 4218a899 ``training/benchmarks/llama3_8B/megatron/run_pretraining.py``
    runs ``pretrain_llama3.sh``, ``torchrun ... /workspace/Megatron-LM/pretrain_gpt.py`` with
    ``--sequence-parallel --use-distributed-optimizer --transformer-impl transformer_engine``
    and no overlap flag). The word "Megatron-Core" had read such a row as a recipe's, with the
    data-parallel and TP overlaps on that Megatron-LM leaves off unless named
    (:data:`LAUNCH_OFF`)."""
    for column in columns:
        script = LAUNCH_SCRIPT.search(row.get(column, ""))
        if script is not None:
            if any(RECIPE.search(row.get(c, "")) for c in columns):
                return ""
            return megatron_lm_reading(column, script.group(0))
    return ""


def megatron_lm_launch(framework_reading: str) -> bool:
    """Whether a row's framework was read as Megatron-LM's own launcher."""
    return framework_reading.startswith(MEGATRON_LM_READING)


def _named_on(text: str, pattern: str) -> bool:
    return bool(re.search(pattern, text, re.IGNORECASE)) and not re.search(
        _DENIED.format(pattern), text, re.IGNORECASE
    )


def launch_options(row: dict[str, str], out: Defaults) -> None:
    """Megatron-LM's argument defaults for the overlaps of :data:`LAUNCH_OFF`: off unless the
    row's text names the flag as on."""
    text = row_text(row, ("source", "source_table", "notes", "dp_sharding"))
    for option, pattern, flag in LAUNCH_OFF:
        if _named_on(text, pattern):
            continue
        out.options[option] = False
        out.notes.append(
            f"{option} false: Megatron-LM's {flag} is store_true ({ARGUMENTS}) and the row "
            "does not name it"
        )


def launch_model_defaults(row: dict[str, str], out: Defaults) -> None:
    """The model fields a Megatron-LM launch row's text (its :data:`TEXT_COLUMNS
    <stage_explore.validation.infer_release.TEXT_COLUMNS>` and ``uncertain``) states its
    script left at Megatron-LM's defaults (:data:`LAUNCH_MODEL_DEFAULTS`), over the flavor's."""
    text = row_text(row, ("source", "source_table", "notes", "uncertain"))
    for field, value, pattern, why in LAUNCH_MODEL_DEFAULTS:
        if re.search(pattern, text, re.IGNORECASE):
            out.model[field] = value
            out.notes.append(f"{why} ({ARGUMENTS_FLAGPERF})")


def launch_sequence_parallel(row: dict[str, str]) -> tuple[bool, str]:
    """Sequence parallelism of a Megatron-LM launch whose ``sp`` cell is empty: off unless the
    text names ``--sequence-parallel``."""
    if _named_on(row_text(row), r"sequence[-_\s]parallel(?:ism)?"):
        return True, "sequence parallelism on (column empty; the text names it)"
    return False, (
        f"sequence parallelism off (column empty; Megatron-LM's --sequence-parallel is "
        f"store_true, {ARGUMENTS})"
    )


def launch_zero(row: dict[str, str]) -> tuple[int, str] | None:
    """No optimizer sharding for a Megatron-LM launch whose ``dp_sharding`` cell is empty and
    whose text names no distributed optimizer; ``None`` when the cell or text says otherwise."""
    if row.get("dp_sharding", "").strip():
        return None
    if _named_on(row_text(row), r"distributed[-_\s]optimi[sz]er"):
        return None
    return 0, (
        f"zero 0 (dp_sharding empty; Megatron-LM's --use-distributed-optimizer is store_true, "
        f"{ARGUMENTS})"
    )


def named_launch_flags(row: dict[str, str], out: Defaults) -> None:
    """The megatron-core profile's defaults a row's text overrides by naming Megatron-LM's flag
    (any megatron-core row: a Megatron-LM launch, a NeMo or Primus config): gradient-accumulation
    fusion off (:data:`NO_GRAD_ACCUMULATION_FUSION`: ``grad_accumulation`` ``add``) and
    ``--attention-backend`` / ``--use-flash-attn`` (:data:`USE_FLASH_ATTN`; what they select,
    :mod:`stage_explore.validation.infer_attention_flag`). Read after the container's era
    defaults, which a named flag outranks."""
    text = row_text(row).lower()
    if re.search(NO_GRAD_ACCUMULATION_FUSION, text):
        out.options["grad_accumulation"] = "add"
        out.notes.append(NO_GRAD_ACCUMULATION_FUSION_NOTE)
    if named_backend(text, out):
        return
    if re.search(USE_FLASH_ATTN, text):
        flash_flag_kernel(text, out)
