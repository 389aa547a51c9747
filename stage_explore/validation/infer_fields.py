"""What a published-runs CSV row states, read as a setup when no ``setups.toml`` source claims
the row (:mod:`stage_explore.validation.infer`): the framework
profile from keywords of ``source`` / ``source_table`` / ``url`` / ``notes`` / ``dp_sharding``,
the precision and FP8 recipe from ``precision`` (:mod:`~stage_explore.validation.infer_precision`,
re-exported here), the model flavor from ``model`` (with
``moe`` and ``params_b``), and the data-parallel sharding from ``dp_sharding``.

Each reader returns the value and the assumption that states it (what was inferred, from which
column and value), or raises :class:`Uninferable` with a one-line reason naming the value and
what was expected. The readers are pure: no file, no preset is loaded here. The ``gpu`` cell's
system preset is read by :mod:`stage_explore.validation.infer_system`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stage_core.models import get_flavor
from stage_core.models.flavors import list_flavors
from stage_core.models.layers import Ffn, Mixer
from stage_explore.validation.infer_architectures import ARCHITECTURES
from stage_explore.validation.infer_citation import flop_citation
from stage_explore.validation.infer_errors import Uninferable as Uninferable
from stage_explore.validation.infer_family_dims import base_size_dims
from stage_explore.validation.infer_generic import GenericRefused, generic_decoder
from stage_explore.validation.infer_generic_moe import generic_moe, moe_refusal
from stage_explore.validation.infer_megatron_lm import (
    MEGATRON_LM,
    core_version_launch,
    megatron_lm_reading,
)
from stage_explore.validation.infer_offload import ZERO_OFFLOAD_STAGE, strip_offload
from stage_explore.validation.infer_open_models import OpenModelRefused, held_sizes, open_model
from stage_explore.validation.infer_open_sixth import heads_kept_multi_head
from stage_explore.validation.infer_precision import FP8_RECIPES as FP8_RECIPES
from stage_explore.validation.infer_precision import PrecisionRead as PrecisionRead
from stage_explore.validation.infer_precision import infer_precision as infer_precision
from stage_explore.validation.infer_shard import (
    REPLICAS,
    ZERO_ONE,
    mics_group,
    reshard_never,
    stated_hpz,
    stated_shard_size,
)


@dataclass(frozen=True, slots=True)
class Inferred:
    """A value read from a row and the assumption that reports it."""

    value: str
    assumption: str
    #: Model fields the value implies beyond the CSV's dims (an MoE base's ``expert_ffn``).
    model: tuple[tuple[str, int | str], ...] = ()


#: PyTorch's DistributedDataParallel named as PyTorch's (not Megatron-Core's class of that name).
TORCH_DDP = r"(?:py)?torch[\s_.-]*(?:nn\.parallel\.)?(?:ddp|distributed\s*data\s*parallel)\b"
#: (keyword pattern, framework profile), first match wins; searched in :data:`FRAMEWORK_COLUMNS`.
FRAMEWORK_RULES: tuple[tuple[str, str], ...] = (
    # InternEvo, InternLM's training framework ("an open-sourced lightweight training framework",
    # InternLM/InternEvo README.md), by name, by its HybridZeroOptimizer, or as "InternLM's own
    # trainer" (not the model name InternLM-7B alone): refused as a framework without a profile
    # until 7 Dec 2026 (s34 rowsF), its profile since s35 internevo (profile_internevo.py)
    (r"intern[\s_-]?evo|hybrid[\s_-]?zero[\s_-]?optimi[sz]er|"
     r"internlm(?:'s)?\s+(?:own\s+)?(?:trainer|training\s+framework)", "internevo"),
    (r"automodel", "automodel"),
    (r"torch[\s_-]?titan", "torchtitan"),
    (r"llm[\s_-]?foundry|mosaic[\s_-]?ml|\bcomposer\b", "llm-foundry-2023"),
    (r"fms-fsdp|foundation-model-stack|\bibm\b.*\bfsdp\b", "fms-fsdp"),
    (r"deepspeed|zero-3|zero stage 3", "deepspeed"),
    (r"narayanan|korthikanti|sc'21|megatron-lm ptd-p|arxiv\.org/abs/2104\.04473|2205\.05198",
     "megatron-lm-2021"),
    (r"megatron[\s_-]?(?:bridge|core|fsdp)|\bmcore\b|\bnemo(?![a-z])|mlperf|dgx cloud|"
     r"dgxc-benchmarking|\bprimus\b|rocm/megatron", "megatron-core"),
    # reshard_after_forward: FSDP2's fully_shard argument (s28 review)
    # PyTorch's own DDP (s32 readers7: was the megatron-core default with its distributed
    # optimizer); the fsdp profile without a wrapper (infer_named_shard reads it as NO_SHARD)
    (r"\bfsdp|\bhsdp\b|full_shard|hybrid_shard|shard_grad_op|fully_shard|"
     r"reshard[_\s-]*after[_\s-]*forward|" + TORCH_DDP, "fsdp"),
    # LitGPT (lit-gpt) pre-trains under Lightning Fabric's FSDPStrategy, PyTorch FSDP with
    # its own eager blocks: Lightning-AI/litgpt e570612c litgpt/pretrain.py ("if devices *
    # num_nodes > 1: strategy = FSDPStrategy(auto_wrap_policy={Block}, ...,
    # sharding_strategy="HYBRID_SHARD")"), 018054966d pretrain/redpajama.py (FSDPStrategy,
    # FULL_SHARD by default, activation_checkpointing=Block), as its predecessor lit-llama
    # (1444d24a pretrain/redpajama.py); the sharding and checkpointing differ by version and are
    # read from their own columns (s27 hidden22: was megatron-core)
    (r"\blit[\s_-]?(?:gpt|llama)\b", "fsdp"),
)  # fmt: skip
#: Training frameworks the model has no profile of (pattern, name): a row naming one and no
#: framework of :data:`FRAMEWORK_RULES` is not evaluated (it was set up as the
#: ``megatron-core`` default, s18 csvrobust), the JAX ones (MaxText, Pax / Praxis, T5X,
#: Levanter) run XLA's kernels and collectives, the others their own parallel layers.
UNMODELLED_FRAMEWORKS: tuple[tuple[str, str], ...] = (
    (r"max[\s_-]?text", "MaxText (JAX)"), (r"\bpax(?:ml)?\b|praxis", "Pax (JAX)"),
    (r"\bt5x\b", "T5X (JAX)"), (r"levanter", "Levanter (JAX)"), (r"\bjax\b", "JAX"),
    (r"nanotron", "Nanotron"), (r"picotron", "Picotron"), (r"colossal[\s_-]?ai", "Colossal-AI"),
    (r"gpt[\s_-]?neox", "GPT-NeoX"), (r"(?:hf|hugging\s*face)[\s_-]*accelerate", "Accelerate"),
    (r"vescale", "veScale"), (r"olmo[\s_-]?core", "OLMo-core"), (r"torchtune", "torchtune"),
    (r"metaseq", "metaseq"), (r"fairseq", "fairseq"), (r"\balpa\b", "Alpa"),
    # AxoNN (Singh, Bhatele et al., SC'24 arXiv 2502.08145): its own 4D hybrid tensor-parallel
    # matrix multiply over a 3D grid of GPUs plus data parallelism, not Megatron's layers
    # (s27 hidden22: was the megatron-core default)
    (r"\baxonn\b", "AxoNN"),
)  # fmt: skip
FRAMEWORK_COLUMNS = ("source", "source_table", "url", "notes", "dp_sharding")
#: The JAX frameworks of :data:`UNMODELLED_FRAMEWORKS`. A row naming one ran XLA: its "FSDP" is
#: XLA's sharding (MaxText ``ici_fsdp_parallelism``), not PyTorch FSDP, and beside Primus it
#: ran Primus's MaxText backend, not Megatron (Primus launches Megatron-LM, TorchTitan or
#: MaxText: ``modules.pre_trainer.framework: maxtext`` in AMD-AGI/Primus 0e6fcd8e
#: tools/convergence_test/configs/maxtext/*.yaml); neither rule reads such a row (s26 hidden18).
_JAX = re.compile(r"max[\s_-]?text|\bpax(?:ml)?\b|praxis|\bt5x\b|levanter|\bjax\b", re.I)
#: ZeRO-3 named beside FSDP describes FSDP's sharding (``FSDP FULL_SHARD (ZeRO-3)``), not DeepSpeed.
_ZERO3_OF_FSDP = re.compile(r"^zero[-\s]?3|^zero stage 3")
#: FSDP's words in a cell naming ZeRO-3 (``reshard_after_forward``: FSDP2's ``fully_shard``
#: argument, torchtitan's ``fsdp_reshard_after_forward``; s28 review: read as DeepSpeed).
_FSDP_WORDS = r"fsdp|full_shard|fully_shard|reshard[_\s-]*after[_\s-]*forward"


def names_bridge(row: dict[str, str]) -> bool:
    """Whether a row's text names Megatron-Bridge (``Megatron-Bridge``, ``Megatron Bridge``)."""
    return any(
        re.search(r"megatron[\s_-]?bridge", row.get(c, ""), re.IGNORECASE)
        for c in FRAMEWORK_COLUMNS
    )


DEFAULT_FRAMEWORK = "megatron-core"
#: The profiles :data:`FRAMEWORK_RULES` name, as the reasons list them.
_KNOWN = ", ".join(sorted({f for _, f in FRAMEWORK_RULES}))
#: What :func:`infer_framework` reads of a row whose text names no framework.
FRAMEWORK_DEFAULT = Inferred(
    DEFAULT_FRAMEWORK,
    f"framework profile {DEFAULT_FRAMEWORK}, a default: no column names a known framework "
    f"({_KNOWN})",
)


def infer_framework(row: dict[str, str]) -> Inferred:
    """The framework profile a row's text names: DeepSpeed when ``dp_sharding`` names it or
    ZeRO-3 without FSDP or its words (Narayanan et al.'s Table 2 compares both in one source);
    else the first column of :data:`FRAMEWORK_COLUMNS` that holds a rule's keyword (rules in
    order; a ZeRO-3 beside FSDP in one cell is FSDP's sharding, not DeepSpeed; FSDP or Primus
    beside a JAX framework is neither PyTorch FSDP nor Megatron); else
    :data:`DEFAULT_FRAMEWORK`, stated as a default."""
    sharding = row.get("dp_sharding", "")
    found = re.search(r"deepspeed|zero[-\s]?3|zero stage 3", sharding, re.IGNORECASE)
    if found and not re.search(_FSDP_WORDS, sharding, re.IGNORECASE):
        return Inferred(
            "deepspeed", f"framework profile deepspeed (the dp_sharding column names "
            f"{found.group(0)!r})",
        )  # fmt: skip
    jax = any(_JAX.search(row.get(c, "")) for c in FRAMEWORK_COLUMNS)
    for column in FRAMEWORK_COLUMNS:
        cell = row.get(column, "")
        fsdp = re.search(_FSDP_WORDS, cell, re.IGNORECASE) is not None
        for pattern, framework in FRAMEWORK_RULES:
            found = next((m for m in re.finditer(pattern, cell, re.IGNORECASE) if not (
                framework == "megatron-lm-2021" and flop_citation(cell, m.start())
            )), None)  # a paper cited for its FLOP count is not the code (s34 rowsF)  # fmt: skip
            if found and fsdp and _ZERO3_OF_FSDP.match(found.group(0).lower()):
                continue  # FSDP's sharding called ZeRO-3: the FSDP rules read the cell
            if found and jax and (framework == "fsdp" or found.group(0).lower() == "primus"):
                continue  # a JAX run: :func:`unmodelled_framework` names it
            if found:
                # Megatron-Core as the tag Megatron-LM's own pretrain_gpt.py ran on (s33 rowsE)
                if framework == DEFAULT_FRAMEWORK and (
                    launch := core_version_launch(row, FRAMEWORK_COLUMNS)
                ):
                    return Inferred(framework, launch)
                return Inferred(
                    framework,
                    f"framework profile {framework} (the {column} column names {found.group(0)!r})",
                )
    # 6 Dec 2026 (s27 hidden20): Megatron-LM named alone was the megatron-core default "no
    # column names a known framework", with the recipes' overlaps (infer_megatron_lm.py)
    if not unmodelled_framework(row, FRAMEWORK_DEFAULT):
        for column in FRAMEWORK_COLUMNS:
            found = MEGATRON_LM.search(row.get(column, ""))
            if found:
                return Inferred(DEFAULT_FRAMEWORK, megatron_lm_reading(column, found.group(0)))
    return FRAMEWORK_DEFAULT


def unmodelled_framework(row: dict[str, str], framework: Inferred) -> str:
    """The reason a row is not evaluated when its text names a framework the model has no
    profile of (:data:`UNMODELLED_FRAMEWORKS`) and none it has: ``framework``, what
    :func:`infer_framework` read of the row, is :data:`FRAMEWORK_DEFAULT` (no rule of
    :data:`FRAMEWORK_RULES` nor the DeepSpeed ``dp_sharding`` words matched); "" otherwise."""
    if framework != FRAMEWORK_DEFAULT:
        return ""
    for column in FRAMEWORK_COLUMNS:
        for pattern, name in UNMODELLED_FRAMEWORKS:
            found = re.search(pattern, row.get(column, ""), re.IGNORECASE)
            if found:
                return (
                    f"the {column} column names {found.group(0)!r}: {name} is no framework "
                    f"profile of the model ({_KNOWN}); not set up as the {DEFAULT_FRAMEWORK} "
                    "default"
                )
    return ""


#: Nemotron-H's published sizes (arXiv 2504.03624; Megatron-Bridge's NemotronHModelProvider4B /
#: 8B / 47B / 56B): each its own layer pattern and state-space dims (stage_core flavors).
NEMOTRON_H_SIZES: dict[float, str] = {4: "nemotron-h-4b", 8: "nemotron-h-8b", 47: "nemotron-h-47b",
                    56: "nemotron-h-56b"}  # fmt: skip
#: NVIDIA's Nemotron 3 / 3.5 family (Nano, Super, Ultra, Lightning; 2025-26): hybrid Mamba-2 /
#: attention stacks (NemotronHForCausalLM, Megatron-Bridge's model verification cards), not the
#: 2023 dense Nemotron-3 8B the Nemotron-4 rule below reads ("nemotron 3" alone).
NEMOTRON_3 = r"nemotron[\s_-]*3(?:\.5)?[\s_-]*(?:nano|super|ultra|lightning)"
#: (family pattern on the lower-cased model text, {size in billions: flavor}, base flavor, or
#: "" when only the listed sizes can be set up).
MODEL_RULES: tuple[tuple[str, dict[float, str], str], ...] = (
    (r"nemotron[\s_-]*h\b", NEMOTRON_H_SIZES, ""),
    (NEMOTRON_3, {4: "nemotron-3-nano-4b"}, ""),
    (r"mamba[\s_-]*2(?![.\d])", {2.7: "mamba2-2.7b"}, ""),
    (r"deepseek[\s_-]*v3", {0: "deepseek-v3"}, ""),
    # s29 readers2: the generator's DeepSeek-V2-Lite and DeepSeekMoE 16B flavors, by name
    (r"deepseek[\s_-]*v2[\s_-]*lite", {0: "deepseek-v2-lite"}, ""),
    (r"deepseek[\s_-]*moe", {16: "deepseek-moe-16b"}, ""),
    (r"qwen[\s_-]*3", {235: "qwen3-235b-a22b", 30: "qwen3-30b-a3b"}, ""),
    (r"gpt[\s_-]*oss", {120: "gpt-oss-120b", 20: "gpt-oss-20b"}, ""),
    # totals too (s33 readers8): 8x7B's 47B (arXiv 2401.04088 section 2, "47B parameters";
    # 46.7B in its model card), 8x22B's 141B (Mistral AI's release post, "141B parameters")
    (r"mixtral", {7: "mixtral-8x7b", 22: "mixtral-8x22b", 46.7: "mixtral-8x7b",
                  47: "mixtral-8x7b", 141: "mixtral-8x22b"}, ""),
    (r"grok[\s_-]*1", {}, "mixtral-8x22b"),
    (r"llama[\s_-]*2", {7: "llama2-7b", 13: "llama2-13b", 70: "llama2-70b"}, "llama2-7b"),
    (r"llama[\s_-]*3\.1", {8: "llama3-8b", 70: "llama3-70b", 405: "llama3.1-405b"}, "llama3-8b"),
    (r"llama[\s_-]*3", {8: "llama3-8b", 70: "llama3-70b", 405: "llama3-405b"}, "llama3-8b"),
    (r"nemotron[\s_-]*4|nemotron[\s_-]*3\b", {340: "nemotron-4-340b"}, "nemotron-4-340b"),
    (r"mt[\s_-]?nlg|megatron[\s_-]*turing", {530: "megatron-gpt-530b"}, "megatron-gpt-530b"),
)
#: GPT-style models (GPT-3, Megatron's GPT-nB, BLOOM, MPT): a flavor of that size, else a GPT
#: base with the CSV's dims.
GPT_PATTERN = r"\bgpt|bloom|\bmpt\b"
#: A Llama named as the model whose description borrows a GPT's sizes ("Llama-175B (GPT-3 175B's
#: 96 layers ... in the Llama architecture)": the Megatron-Kwai ATC '24 artifact's llama-175b,
#: run with --swiglu --normalization RMSNorm --disable-bias-linear, kwai/Megatron-Kwai 6c1ff864
#: examples/atc24/pretrain_llama_using_origin_megatron.sh; s37 blind): its name says the block.
LLAMA_NAME = re.compile(r"\bllama")


def _gpt_named(text: str) -> bool:
    """Whether a model cell (lower case) names a GPT-style model (:data:`GPT_PATTERN`), not a
    Llama by name (the text before its first parenthesis, :data:`LLAMA_NAME`)."""
    name = text.split("(")[0]
    llama = LLAMA_NAME.search(name) and not re.search(GPT_PATTERN, name)
    return not llama and re.search(GPT_PATTERN, text) is not None


#: Hybrid Mamba / attention models (Nemotron-H, Nemotron 3, Jamba, Zamba, Samba): only a flavor
#: of the stated size can time them (their layer pattern and state-space dims are not CSV
#: columns).
HYBRID_PATTERN = re.compile(rf"nemotron[\s_-]*h\b|{NEMOTRON_3}|mamba|jamba|zamba|samba")
#: Dims a base flavor cannot answer for a model of another size: the CSV must state them.
REQUIRED_DIMS = ("layers", "hidden", "heads")
#: Grok-1 (xai-org/grok-1 model.py: RMSNorm, rotary, no biases, 8 experts top-2 in every layer,
#: grouped-query attention) has Mixtral's block structure; NVIDIA's recipes build it as
#: Megatron-Core's Mixtral config with Grok-1's sizes (NVIDIA/NeMo
#: scripts/performance/llm/pretrain_grok1_314b.py: MixtralConfig8x7B(num_layers=64,
#: hidden_size=6144, ...)); its gated GeGLU is timed as the flavor's SwiGLU (the same GEMMs).
#: An MoE base flavor whose every layer is MoE takes experts and top-k from the ``moe`` cell and
#: the expert FFN from ``ffn`` (:attr:`Inferred.model`).
MOE_DIMS = ("ffn",)
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*b(?![a-z])")
_MIXTRAL = re.compile(r"8x(\d+)b")
#: A ``moe`` cell that says the model is dense.
NOT_MOE = re.compile(r"(?:none|no|n/a|dense|false|0|-|–|—)?(?:\s*\(.*\))?")
_MOE_CELL = re.compile(r"\d+\s*(?:routed\s*)?experts?\b.*top[-\s]?\d+", re.IGNORECASE)


def _size(text: str, params_b: str) -> float | None:
    """Billions of parameters the model text (``Llama 3.1 405B``, ``8x7b``) or ``params_b``
    states."""
    found = _MIXTRAL.search(text) or _SIZE.search(text)
    if found:
        return float(found.group(1))
    try:
        return float(params_b) if params_b.strip() else None
    except ValueError:
        return None


def _gpt_flavor(size: float | None, framework: str) -> tuple[str, bool]:
    """A GPT flavor of ``size`` (Megatron's GPT configs first for Megatron-LM 2021 and
    DeepSpeed, GPT-3's otherwise) and whether it is that size, else the framework's GPT base."""
    megatron = framework in ("megatron-lm-2021", "deepspeed")
    families = ("megatron-gpt", "gpt3") if megatron else ("gpt3", "megatron-gpt")
    if size is not None:
        for family in families:
            for name in list_flavors():
                if name.startswith(f"{family}-") and name.endswith("b"):
                    if float(name[len(family) + 1 : -1]) == size:
                        return name, True
    return ("megatron-gpt-22b" if megatron else "gpt3-175b"), False


#: The hybrid flavors a row can be set up as, named in the reason when none fits.
HYBRID_FLAVORS = ", ".join((*NEMOTRON_H_SIZES.values(), "nemotron-3-nano-4b", "mamba2-2.7b"))
#: CSV cells a hybrid flavor must agree with when the row states them: its layer pattern is laid
#: out over exactly its own depth, and its state-space dims follow its width.
HYBRID_DIMS = ("layers", "hidden", "ffn", "heads", "kv_heads")
HEAD_DIMS = ("heads", "kv_heads")


def _hybrid(row: dict[str, str], model: str, flavor: str, by_dims: bool = False) -> Inferred:
    """A hybrid row as the flavor of its stated size, when every dim the row states
    (:data:`HYBRID_DIMS`) is the flavor's; else :class:`Uninferable` naming the first that
    differs (a hybrid's layer pattern cannot be stretched to another depth); ``by_dims``: the
    flavor was chosen by the stated dims, the row naming no published size."""
    spec = get_flavor(flavor)
    kinds = spec.layer_kinds()
    mamba = sum(kind.mixer is Mixer.MAMBA for kind in kinds)
    attention = sum(kind.attends for kind in kinds)
    mlps = sum(kind.ffn is Ffn.DENSE for kind in kinds)
    # a pure Mamba stack's heads / ffn are placeholders (no attention, no MLP reads them)
    dims = [d for d in HYBRID_DIMS if (d != "ffn" or mlps) and (d not in HEAD_DIMS or attention)]
    for dim in dims:
        cell = row.get(dim, "").strip()
        if cell.isdigit() and int(cell) != getattr(spec, dim):
            raise Uninferable(
                f"model {model!r}: the {dim} column says {cell}, but the published {flavor} "
                f"has {getattr(spec, dim)} (its layer pattern and state-space dims are the "
                "flavor's; another depth or width has no published pattern)"
            )
    stated = [d for d in dims if row.get(d, "").strip().isdigit()]
    agree = f"; the CSV's {', '.join(stated)} agree" if stated else ""
    which = "the only one whose dims are the row's" if by_dims else "of that size"
    return Inferred(
        flavor, f"model flavor {flavor} (the model column says {model!r}): the published "
        f"architecture {which}, {spec.layers} layers ({mamba} Mamba-2, {attention} "
        f"attention, {mlps} MLP) with its layer pattern and state-space dims{agree}",
    )  # fmt: skip


def _nemotron_h_by_dims(row: dict[str, str]) -> str:
    """The one Nemotron-H flavor whose dims are all the row states, when the row states its
    layer count but no published size (``Nemotron-H`` alone, or ``56.3`` billion parameters);
    "" when none or several fit (4B and 8B share 52 layers: the hidden size tells them)."""
    if not row.get("layers", "").strip().isdigit():
        return ""
    stated = {d: int(row[d]) for d in HYBRID_DIMS if row.get(d, "").strip().isdigit()}
    fits = [
        name for name in NEMOTRON_H_SIZES.values()
        if all(getattr(get_flavor(name), d) == v for d, v in stated.items())
    ]  # fmt: skip
    return fits[0] if len(fits) == 1 else ""


#: Families that encode position by ALiBi (a bias on the attention scores, no position
#: parameters) whatever their size, and where that is read: (pattern, why). The generator's
#: ``position none`` drops the learned table a GPT base flavor would add.
ALIBI_FAMILIES: tuple[tuple[str, str], ...] = (
    (r"\bbloom",
     "BLOOM's ALiBi positional embeddings at every size (BigScience, arXiv 2211.05100 "
     "section 3.2.3 'ALiBi Positional Embeddings'; Megatron-DeepSpeed --position-embedding-type "
     "alibi; Hugging Face transformers BloomModel has no position-embedding table)"),
)  # fmt: skip


#: A model cell that says the run had no multi-token-prediction module ("DeepSeekV3 (w/o MTP)",
#: Megatron-Bridge's 25.11 performance tables; "without MTP", "no MTP"; "MTP disabled", the
#: wording of torchtitan's DeepSeek-V3 DistMoE report, docs/dsv3_671b_dist_moe_256gpu_report.md
#: 1ec9e872 "PP1, MTP disabled", and "MTP off" / "disabled MTP" / "MTP depth 0", the MTP module's
#: on / off switch and its depth, s31 rowsB), where the flavor has one (DeepSeek-V3's
#: ``num_nextn_predict_layers`` 1).
NO_MTP = re.compile(
    r"(?:w/o|without|no)[\s_-]*mtp\b"
    r"|\bmtp[\s_-]*(?:disabled|off\b|depth[\s_=:-]*0\b)"
    r"|\bdisabled?[\s_-]*mtp\b"
)


def infer_model(row: dict[str, str], framework: str) -> Inferred:
    """The flavor of a row's model (:func:`_infer_flavor`), with no position table for a family
    of :data:`ALIBI_FAMILIES` (s17 infer8)."""
    inferred = _infer_flavor(row, framework)
    text = row.get("model", "").strip().lower()
    mtp = dict(inferred.model).get("mtp_layers", get_flavor(inferred.value).mtp_layers)
    if NO_MTP.search(text) and mtp:  # the flavor's or the entry's (GLM-4.5: s33 readers8)
        inferred = Inferred(
            inferred.value, f"{inferred.assumption}; no multi-token-prediction module "
            f"(mtp_layers 0): the model column says {row.get('model', '').strip()!r}",
            (*inferred.model, ("mtp_layers", 0)),
        )  # fmt: skip
    for pattern, why in ALIBI_FAMILIES:
        if re.search(pattern, text) and get_flavor(inferred.value).position != "none":
            return Inferred(
                inferred.value, f"{inferred.assumption}; no position-embedding table "
                f"(position none): {why}", (*inferred.model, ("position", "none")),
            )  # fmt: skip
    return inferred


def _infer_flavor(row: dict[str, str], framework: str) -> Inferred:
    """The flavor of a row's model: a flavor of the stated family and size, whose dims fill
    what the CSV leaves empty; else the family's base flavor when the CSV states
    :data:`REQUIRED_DIMS` (an MoE row needs a flavor of its size: experts are not in the CSV)."""
    model = row.get("model", "").strip()
    text = model.lower().replace("_", " ")
    size = _size(text, row.get("params_b", ""))
    moe = row.get("moe", "").strip()
    if NOT_MOE.fullmatch(moe.lower()):
        moe = ""  # a dense model's moe cell: "none", "no", "dense", "-"
    for pattern, base, dims, where in ARCHITECTURES:
        if re.search(pattern, text):
            # a dim the CSV states is the CSV's (a setup only fills what a row leaves empty)
            own = tuple((k, v) for k, v in dims if not row.get(k, "").strip().isdigit())
            own = heads_kept_multi_head(row, dims, own)  # s31 readers6
            listed = ", ".join(f"{k} {v}" for k, v in own)
            return Inferred(
                base, f"model {model!r} as flavor {base}'s architecture with its own sizes "
                f"({listed}): {where}; the CSV's dims, where stated, win",
                own,
            )  # fmt: skip
    try:  # a common open model at a published size (Gemma, Mistral, Qwen2, ...; s28 readers)
        found = open_model(row, model)
    except OpenModelRefused as error:
        raise Uninferable(str(error)) from None
    if found is not None:
        return Inferred(found[0], found[1], found[2])
    flavor, exact = "", False
    family: tuple[str, ...] = ()
    for pattern, sizes, base in MODEL_RULES:
        if re.search(pattern, text):
            family = tuple(sizes.values())
            if 0 in sizes:
                flavor, exact = sizes[0], True
            elif size is not None and size in sizes:
                flavor, exact = sizes[size], True
            else:
                flavor = base
            break
    else:
        if _gpt_named(text):
            flavor, exact = _gpt_flavor(size, framework)
            family = tuple(n for n in list_flavors() if re.match(r"(?:gpt3|megatron-gpt)-", n))
    hybrid = HYBRID_PATTERN.search(text)
    by_dims = bool(hybrid) and not exact and bool(re.search(MODEL_RULES[0][0], text))
    if by_dims:
        flavor = _nemotron_h_by_dims(row)
        exact = bool(flavor)
    if hybrid and not exact:
        raise Uninferable(
            f"model {model!r}: a hybrid state-space model ({hybrid.group(0)!r}: Mamba layers "
            f"beside attention) of no size the generator has a flavor of ({HYBRID_FLAVORS}); "
            "its layer pattern and state-space dims are not in the CSV's columns"
        )
    if hybrid:
        return _hybrid(row, model, flavor, by_dims)
    if not flavor:
        try:  # a decoder of no known family: the common (MoE: s33 readers8) block from its columns
            base, assumption, fields = (generic_moe if moe else generic_decoder)(row, model, moe)
        except GenericRefused as error:
            if moe:
                raise Uninferable(moe_refusal(model, str(error))) from None
            held = held_sizes(text)  # a common open model's family at a size not held
            if held:
                raise Uninferable(
                    f"model {model!r}: of its family the open-model table holds {held} "
                    "(expected one of those, its size in billions in the model cell), and it "
                    f"is not a Llama-style decoder: {error}"
                ) from None
            raise Uninferable(
                f"model {model!r} of another size than this family's flavors, or of no known "
                "family (expected Llama 2/3/3.1, GPT/GPT-3/MPT/BLOOM, Nemotron-4, DeepSeek-V3 / "
                "V2 / V2.5 / V2-Lite / MoE 16B, Qwen3, GPT-OSS, Mixtral, Grok-1, Kimi K2, "
                "Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B, OLMoE-1B-7B, GLM-4.5 / 4.5-Air, or a "
                "common open model at a published size: Gemma, Mistral, Qwen2 / Qwen2.5, Qwen3 "
                "dense, "
                "Llama 3.2, Phi-3 mini / medium, Phi-3.5 mini, Phi-4, Baichuan 2, Yi 6B / 9B / "
                "34B, InternLM2 / 2.5, Falcon 7B / 40B, Falcon 2 11B, Falcon3, StarCoder2, OLMo "
                "1B / 7B, OLMo 2 7B / 13B / 32B, Granite 3.0 / 3.1, Codestral 22B, SmolLM2), "
                "and not a Llama-style "
                f"decoder: {error}"
            ) from None
        return Inferred(base, assumption, fields)
    spec = get_flavor(flavor)
    if moe and not spec.num_experts:
        raise Uninferable(f"model {model!r}: the moe column says {moe!r}, but no MoE flavor of it")
    if exact:
        return Inferred(
            flavor, f"model flavor {flavor} (the model column says {model!r}): its dims fill "
            "the empty CSV cells",
        )  # fmt: skip
    missing = [c for c in REQUIRED_DIMS if not row.get(c, "").strip()]
    if spec.num_experts:
        if spec.first_k_dense or spec.moe_layer_interval != 1:
            raise Uninferable(
                f"model {model!r}: no flavor of that size, and the base {flavor} has dense "
                "layers whose FFN the CSV cannot tell from the experts'"
            )
        missing += [c for c in MOE_DIMS if not row.get(c, "").strip().isdigit()]
        missing += [] if _MOE_CELL.search(moe) else ["experts and top-k in the moe column"]
    if missing:
        raise Uninferable(
            f"model {model!r}: no flavor of that size, and the CSV does not state "
            f"{', '.join(missing)} (a base flavor cannot answer them)"
        )
    if spec.num_experts:
        return Inferred(
            flavor, f"model family from flavor {flavor} (norm, activation, position, biases, "
            f"an MoE block in every layer; the model column says {model!r}) with the CSV's "
            "dims, its ffn as every expert's FFN (expert_ffn) and the moe column's experts "
            f"and top-k; dims it leaves empty are {flavor}'s",
            (("expert_ffn", int(row["ffn"])),),
        )  # fmt: skip
    fields, said = base_size_dims(row, model, flavor, family)
    return Inferred(
        flavor, f"model family from flavor {flavor} (norm, activation, position, biases; the "
        f"model column says {model!r}) with the CSV's dims; dims it leaves empty are {flavor}'s"
        + (f" ({said})" if said else ""), fields,
    )  # fmt: skip


#: A ``dp_sharding`` cell that says nothing is sharded (6 Dec 2026, s24 spellings: ``ZeRO-0``,
#: ``no ZeRO``, ``no sharding``, ``NO_SHARD`` (PyTorch FSDP's ShardingStrategy.NO_SHARD),
#: ``off``, ``replicated`` read as the distributed optimizer, ``FSDP NO_SHARD`` as ZeRO-3); not
#: when the cell names another stage too (BLOOM's 'ZeRO stage 1; ds_config zero stage 0').
NO_SHARDING = (
    r"^(?:none|no|off|false|disabled|0|replicated)\b|no[-_\s]?shard|not[-_\s]+sharded|"
    r"\bno[-_\s]+zero\b|\bzero[-\s]?(?:stage\s*)?0\b"
)
#: Profiles built on PyTorch FSDP, whose default sharding is ZeRO-3.
FSDP_PROFILES = ("fsdp", "torchtitan", "automodel", "fms-fsdp", "llm-foundry-2023")


def infer_zero(
    cell: str, framework: str, said: str = "", *, pp: int = 1
) -> tuple[int, int | None, str]:
    """``(zero, dp_shard, assumption)`` of a ``dp_sharding`` cell: ZeRO-2 when gradients are
    sharded (FSDP's ``SHARD_GRAD_OP`` too), 3 for ZeRO-3 / FSDP / FULL_SHARD / Megatron-FSDP
    (not ``FSDP 0``), hybrid sharding in the group the cell states, else within a node of 8
    (PyTorch ``HYBRID_SHARD`` shards inside a host), FSDP2's ``reshard_after_forward=False``
    as ZeRO-2 (ZeRO-3 held through the step when ``pp`` > 1), DeepSpeed MiCS in its
    ``mics_shard_size`` groups, ZeRO++'s hpZ as ZeRO-3 with its groups and qwZ / qgZ refused
    (:mod:`~stage_explore.validation.infer_shard`; s27 hidden22, s34 zeropp), 1 for the
    distributed optimizer / ZeRO-1, 0 for ``none`` and, on the
    FSDP-based profiles, for DDP / ``NO_SHARD`` / replicate (no FSDP wrapper); else the
    framework's default (ZeRO-3 for the FSDP-based profiles, 0 for Megatron-LM 2021, the
    distributed optimizer otherwise). ``said``: where the assumption says ``cell`` came from
    (default: the ``dp_sharding`` column)."""
    text = cell.strip().lower()
    if not said:
        said = f"the dp_sharding column says {cell.strip()!r}" if text else "column empty"
    if re.search(r"offload", text):  # what is offloaded: infer_offload.named_offload (s34)
        cell, bare = strip_offload(cell)
        if bare:
            return ZERO_OFFLOAD_STAGE, None, f"zero 2 (ZeRO-Offload runs ZeRO-2; {said})"
        text = cell.lower()
    hpz = stated_hpz(cell)  # ZeRO++: hpZ read, qwZ / qgZ refused (s34 zeropp)
    if hpz is not None and hpz > 1:
        if framework != "deepspeed":
            raise Uninferable(
                f"dp_sharding {cell.strip()!r} names DeepSpeed's hpZ, but the row runs "
                f"{framework} (expected the deepspeed profile)"
            )
        return 3, None, (
            f"zero 3 with DeepSpeed ZeRO++'s hpZ in groups of {hpz} (zero_hpz_partition_size "
            f"{hpz}; {said})"
        )
    mics = mics_group(cell)
    if mics is not None:
        return 3, mics, f"zero 3 in MiCS partition groups of {mics} GPUs (dp_shard {mics}; {said})"
    if re.search(NO_SHARDING, text) and not re.search(r"zero[-\s]?(?:stage\s*)?[1-3]\b", text):
        return 0, None, f"zero 0 ({said})"
    never = reshard_never(cell, pp, said)  # FSDP2 reshard_after_forward=False (s28 readers)
    if never is not None:
        return never[0], None, never[1]
    if re.search(r"zero[-\s]?2|zero stage 2|gradients sharded|shard_grad_op", text):
        return 2, None, f"zero 2 ({said})"
    if re.search(
        r"zero[-\s]?3|zero stage 3|full_shard|fully_shard|megatron[-\s_]?fsdp", text
    ) or (
        re.search(r"fsdp", text) and not re.search(r"fsdp\s*0\b|hybrid|hsdp", text)
    ):
        return 3, None, f"zero 3 ({said})"
    if re.search(r"hybrid|hsdp", text) and not re.search(ZERO_ONE, text):
        size = stated_shard_size(cell)
        if size is None and REPLICAS.search(cell):  # groups of dp / R: infer.py's stated_group
            return 3, None, f"zero 3 in hybrid groups of dp / the replicate degree ({said})"
        if size == 1:
            return 0, None, f"zero 0: shard groups of one rank, no sharding ({said})"
        if size is not None:
            return 3, size, f"zero 3 inside shard groups of {size} GPUs (dp_shard {size}; {said})"
        return 3, 8, f"zero 3 inside shard groups of 8 GPUs, one node (dp_shard 8; {said})"
    if re.search(ZERO_ONE, text):  # a group it states: infer_parallel's stated_group
        return 1, None, f"zero 1, the distributed optimizer ({said})"
    if text in ("none", "no", "0", "-"):
        return 0, None, f"zero 0 ({said})"
    if framework in FSDP_PROFILES and re.search(r"\bddp\b|no_shard|replicat", text):
        return 0, None, f"zero 0: data parallel without sharding on {framework} ({said})"
    default = {"megatron-lm-2021": 0, **dict.fromkeys(FSDP_PROFILES, 3)}.get(framework, 1)
    what = {0: "no optimizer sharding", 1: "the distributed optimizer", 3: "FSDP"}[default]
    return default, None, f"zero {default} ({what}), the {framework} default ({said})"
