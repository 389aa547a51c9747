"""Common open dense models a row may name without its dims (6 Dec 2026, s28 readers): Gemma,
Gemma 2, Gemma 3, Mistral 7B / NeMo 12B / Small 3 24B / Large 2, Qwen2 / Qwen2.5, Phi-3 mini,
Baichuan 2, Yi 34B and InternLM2, each at its published sizes (:data:`OPEN_MODELS`); Llama 3.2
and the dense Qwen3 (s29 readers2) from :mod:`~stage_explore.validation.infer_open_more`;
Falcon, StarCoder2 and OLMo 2 (s29 readers3) from
:mod:`~stage_explore.validation.infer_open_cited`, with the models refused by name there; the
first OLMo, OLMo 2 7B / 32B, Phi-3 medium, Phi-4, Granite 3.0 / 3.1, Falcon3, Falcon 2 11B,
Yi 9B / Yi-1.5 and InternLM2.5 (s30 readers4) from
:mod:`~stage_explore.validation.infer_open_fourth`; the first LLaMA, Falcon 180B, GPT-NeoX-20B
and Mistral Large 2's vocabulary, with the models refused by name there (s31 readers6), from
:mod:`~stage_explore.validation.infer_open_sixth`.

A row copied from a paper or README often names the model alone ("Gemma 2 9B", "Qwen2.5-7B")
and leaves the architecture columns empty; before, such a row was refused (the common decoder
of :mod:`~stage_explore.validation.infer_generic` needs every dim), and a row stating its dims
was timed with head dim hidden / heads and untied embeddings (Gemma 7B: 16 heads of 256 =
4096 wide for a hidden of 3072). :func:`open_model` sets such a row up as the common decoder
(flavor ``llama3-8b``'s block: pre-norm RMSNorm, rotary positions, no biases, a gated MLP)
with the model's published config: layers, hidden, FFN, heads, key / value heads, head dim,
vocabulary, tied embeddings, its sliding-window layer pattern and query / key norm. A dim the
row states wins (as :data:`~stage_explore.validation.infer_architectures.ARCHITECTURES`). A
family named at a size the table does not hold is left to the common decoder, as before.

Sources (one per family, cited in the entries): NVIDIA NeMo 2.0's model configs
(NVIDIA-NeMo/Speech, NeMo's repository under its later name, ``nemo/collections/llm/gpt/
model/*.py``, each "copied from the corresponding HF model"), Megatron-Bridge's Mistral
providers, and Hugging Face config.json copies where NeMo leaves the vocabulary to the tokenizer.
"""

from __future__ import annotations

import math
import re

from stage_explore.validation.infer_generic import GenericRefused, stated_head_dim
from stage_explore.validation.infer_open_base import Field, OpenModel
from stage_explore.validation.infer_open_base import dims as _dims
from stage_explore.validation.infer_open_cited import FALCON, OLMO2, REFUSED_BY_NAME, STARCODER2
from stage_explore.validation.infer_open_fifth import (
    CODESTRAL,
    INTERNLM25_SMALL,
    MISTRAL_SMALL_22B,
    NOT_128K,
    PHI3_4K_WHERE,
    PHI3_4K_WINDOW,
    PHI3_128K,
    PHI35,
    SMOLLM2,
)
from stage_explore.validation.infer_open_fourth import (
    FALCON2,
    FALCON3,
    GRANITE3,
    INTERNLM25,
    OLMO1,
    OLMO2_MORE,
    PHI3_MEDIUM,
    PHI4,
    YI9,
    YI15_6B_WHERE,
)
from stage_explore.validation.infer_open_more import LLAMA32, QWEN3, UNTIED_BY_SOURCE
from stage_explore.validation.infer_open_sixth import (
    COMMAND_R,
    COMMAND_R_PATTERN,
    FALCON_180B,
    GPT_NEOX,
    GPT_NEOX_PATTERN,
    LLAMA1,
    LLAMA1_PATTERN,
    MISTRAL_LARGE_2,
    REFUSED_SIXTH,
    decimal_size,
    heads_kept_multi_head,
)

#: The flavor whose block every entry takes (its dims are all replaced by the entry's).
BASE = "llama3-8b"
#: The dims an entry must give, or the row state, for the model to be set up.
NEEDED = ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab")

_NEMO = "NVIDIA-NeMo/Speech nemo/collections/llm/gpt/model"
#: Gemma's block beside the common decoder's (NeMo GemmaConfig / Gemma2Config / Gemma3Config:
#: normalization RMSNorm, gated_linear_unit with openai_gelu (GeGLU: the gated MLP's three
#: GEMMs, timed as the flavor's SwiGLU), rope, add_bias_linear False,
#: share_embeddings_and_output_weights True).
_GEMMA_BLOCK = "GeGLU timed as the gated MLP's three GEMMs, tied input / output embeddings"

_GEMMA_VOCAB = (
    "vocab_size 256000, head_dim 256, tie_word_embeddings True: Hugging Face GemmaConfig's "
    "defaults, 'similar to Gemma-7B' (huggingface/transformers examples/diff_conversion/"
    "diff_llama1.py; UbiquitousLearning/mllm src/models/gemma/README.md lists 2B and 7B)"
)
_GEMMA = (
    OpenModel("Gemma 2B", 2, (*_dims(18, 2048, 16384, 8, 1, 256000), ("head_dim", 256),
              ("tied_embeddings", True)),
              f"{_NEMO}/gemma.py GemmaConfig2B (18 layers, hidden 2048, FFN 16384, 8 heads, 1 "
              f"query group, kv_channels 256); {_GEMMA_VOCAB}"),
    OpenModel("Gemma 7B", 7, (*_dims(28, 3072, 24576, 16, 16, 256000), ("head_dim", 256),
              ("tied_embeddings", True)),
              f"{_NEMO}/gemma.py GemmaConfig7B (28 layers, hidden 3072, FFN 24576, 16 heads, 16 "
              f"query groups, kv_channels 256); {_GEMMA_VOCAB}"),
)  # fmt: skip
#: Gemma 2's local / global alternation: NeMo's Gemma2DotProductAttention sets the window
#: where the (1-based) layer_number is even, so 0-based layers 1, 3, ... slide.
_GEMMA2_PATTERN = (("layer_pattern", "(attn+mlp, swa+mlp)*"), ("sliding_window", 4096))
_GEMMA2_WHERE = (
    f"{_NEMO}/gemma2.py Gemma2Config (window_size (4096, 0) on every even-numbered layer, "
    "vocab_size 256000, kv_channels 256, shared embeddings)"
)
_GEMMA2_UNMODELLED = (
    "Gemma 2's post-attention / post-MLP norms and attention / final logit soft-capping; "
    "NeMo runs its attention unfused over every query-key pair (the window a mask), timed "
    "here as a windowed fused kernel"
)
_GEMMA2 = tuple(
    OpenModel(f"Gemma 2 {size:g}B", size, (*_dims(*dims, 256000), ("head_dim", head_dim),
              ("tied_embeddings", True), *_GEMMA2_PATTERN),
              f"{_GEMMA2_WHERE}; Gemma2Config{size:g}B ({dims[0]} layers, hidden {dims[1]}, FFN "
              f"{dims[2]}, {dims[3]} heads, {dims[4]} query groups, head dim {head_dim})",
              unmodelled=_GEMMA2_UNMODELLED)
    for size, dims, head_dim in (
        (2, (26, 2304, 9216, 8, 4), 256), (9, (42, 3584, 14336, 16, 8), 256),
        (27, (46, 4608, 36864, 32, 16), 128),
    )
)  # fmt: skip
#: Gemma 3's five local layers to one global: NeMo's _is_local_attn_layer(layer_number,
#: (5, 1)) is ``layer_number % 6 != 0`` (1-based), so 0-based layers 5, 11, ... are global.
_GEMMA3_WHERE = (
    f"{_NEMO}/gemma3.py Gemma3Config (interleaved_attn_pattern (5, 1), q_layernorm / "
    "k_layernorm, vocab_size 262208 (262144 for 1B), shared embeddings)"
)
_GEMMA3 = tuple(
    OpenModel(f"Gemma 3 {size:g}B", size, (*_dims(*dims, vocab), ("head_dim", head_dim),
              ("tied_embeddings", True), ("qk_norm", True),
              ("layer_pattern", "(swa+mlp*5, attn+mlp)*"), ("sliding_window", window)),
              f"{_GEMMA3_WHERE}; Gemma3Config{size:g}B ({dims[0]} layers, hidden {dims[1]}, "
              f"FFN {dims[2]}, {dims[3]} heads, {dims[4]} query groups, head dim {head_dim}, "
              f"window {window})",
              unmodelled="Gemma 3's post-attention / post-MLP norms; the vision tower of the "
              "4B / 12B / 27B (the text decoder only)")
    for size, dims, vocab, head_dim, window in (
        (1, (26, 1152, 6912, 4, 1), 262144, 256, 512),
        (4, (34, 2560, 10240, 8, 4), 262208, 256, 1024),
        (12, (48, 3840, 15360, 16, 8), 262208, 256, 1024),
        (27, (62, 5376, 21504, 32, 16), 262208, 128, 1024),
    )
)  # fmt: skip
_MISTRAL_7B = _dims(32, 4096, 14336, 32, 8)
_MISTRAL = (
    OpenModel("Mistral 7B v0.3", 7, (*_MISTRAL_7B, ("vocab", 32768)),
              "Megatron-Bridge 2afd2d34 src/megatron/bridge/models/mistral/mistral_provider.py "
              "MistralModelProvider (Mistral-7B-Instruct-v0.3: 32 layers, hidden 4096, FFN "
              "14336, 32 heads, 8 query groups, vocab_size 32768, window_size None)",
              version=r"v0\.3"),
    OpenModel("Mistral 7B v0.2", 7, (*_MISTRAL_7B, ("vocab", 32000)),
              f"{_NEMO}/mistral.py MistralConfig7B dims; vocab_size 32000 and no sliding "
              "window for v0.2 (edadaltocg/mistral-src-finetune finetune/config.py "
              "'Mistral-7B-v0.2-Instruct')", version=r"v0\.2"),
    OpenModel("Mistral 7B (v0.1)", 7, (*_MISTRAL_7B, ("vocab", 32000),
              ("layer_pattern", "swa+mlp*"), ("sliding_window", 4096)),
              f"{_NEMO}/mistral.py MistralConfig7B (32 layers, hidden 4096, FFN 14336, 32 heads, "
              "8 query groups, window_size [4096, 0] on every layer); vocab_size 32000 "
              "(Hugging Face MistralConfig's Mistral-7B-v0.1 defaults; sumitdotml/transformers "
              "mistral-7b-v0.1/README.md: window_size 4096, vocab_size 32000): the first "
              "release, the Mistral 7B paper's (arXiv 2310.06825), where no version is named"),
    OpenModel("Mistral NeMo 12B", 12, (*_dims(40, 5120, 14336, 32, 8, 131072),
              ("head_dim", 128)),
              f"{_NEMO}/mistral.py MistralNeMoConfig12B (40 layers, hidden 5120, kv_channels "
              "128, FFN 14336, 32 heads, 8 query groups, no window); vocab_size 131072 and "
              "tie_word_embeddings false in mistralai/Mistral-Nemo-Base-2407's config.json "
              "(copied in kevinstephano/thunder_model_blocks mistral/mistral_config.py)",
              alias=r"\bnemo\b", version=r"nemo"),  # NeMo's one size: "Mistral-Nemo-Base-2407"
    OpenModel("Mistral Small 3 24B", 24, (*_dims(40, 5120, 32768, 32, 8, 131072),
              ("head_dim", 128)),
              "Megatron-Bridge 2afd2d34 mistral_provider.py MistralSmall3ModelProvider24B "
              "(Mistral-Small-24B-Instruct-2501: 40 layers, hidden 5120, FFN 32768, 32 heads, 8 "
              "query groups, kv_channels 128, vocab_size 131072)", version=r"small"),
    *MISTRAL_LARGE_2,  # s31 readers6: with its vocabulary (infer_open_sixth)
)  # fmt: skip
_QWEN2_WHERE = (
    f"{_NEMO}/qwen2.py (Qwen2Config: add_qkv_bias, untied unless stated, vocab_size 151936"
)
_QWEN2 = tuple(
    OpenModel(f"Qwen2 / Qwen2.5 {size:g}B", size,
              (*_dims(*dims, vocab), ("tied_embeddings", tied)),
              f"{_QWEN2_WHERE}; {config}: {dims[0]} layers, hidden {dims[1]}, FFN {dims[2]}, "
              f"{dims[3]} heads, {dims[4]} query groups, vocab_size {vocab}){extra}",
              unmodelled="Qwen2's q / k / v projection biases")
    for size, dims, vocab, tied, config, extra in (
        (0.5, (24, 896, 4864, 14, 2), 151936, True, "Qwen2Config500M / Qwen25Config500M",
         "; tie_word_embeddings True in the Hugging Face Qwen2-0.5B / Qwen2.5-0.5B config.json "
         "(rwth-i6/i6_experiments qwen2_configs.py 'Qwen2-0_5B')"),
        (1.5, (28, 1536, 8960, 12, 2), 151936, True, "Qwen2Config1P5B / Qwen25Config1P5B",
         "; tied, as the Hugging Face model card of Qwen/Qwen2.5-1.5B says ('tied word "
         "embeddings'; 1.54B parameters, 1.31B non-embedding: one 151936 x 1536 table), where "
         "NeMo's config leaves them untied (copied at ZHUI/paddlenlp_model_readme "
         "Qwen/Qwen2.5-1.5B/index.md)"),
        (3, (36, 2048, 11008, 16, 2), 151936, True, "Qwen25Config3B",
         " (share_embeddings_and_output_weights True)"),
        (7, (28, 3584, 18944, 28, 4), 152064, False, "Qwen2Config7B / Qwen25Config7B", ""),
        (14, (48, 5120, 13824, 40, 8), 152064, False, "Qwen25Config14B", ""),
        (32, (64, 5120, 27648, 40, 8), 152064, False, "Qwen25Config32B", ""),
        (72, (80, 8192, 29568, 64, 8), 152064, False, "Qwen2Config72B / Qwen25Config72B", ""),
    )
)  # fmt: skip
_PHI3 = (
    # the 4k model's window since s30 readers5 (PHI3_4K_WINDOW); the 128k variant: PHI3_128K
    OpenModel("Phi-3 mini 3.8B", 3.8, (*_dims(32, 3072, 8192, 32, 32, 32064), *PHI3_4K_WINDOW),
              f"{_NEMO}/phi3mini.py Phi3ConfigMini (32 layers, hidden 3072, FFN 8192, 32 heads, "
              f"32 query groups, vocab_size 32064, untied){PHI3_4K_WHERE}", alias=r"\bmini\b",
              version=NOT_128K),
)  # fmt: skip
_BAICHUAN2 = (
    OpenModel("Baichuan 2 7B", 7, _dims(32, 4096, 11008, 32, 32, 125696),
              f"{_NEMO}/baichuan.py Baichuan2Config7B (32 layers, hidden 4096, FFN 11008, 32 "
              "heads, 32 query groups, rope, untied); vocab_size 125696 (inclusionAI/Ling "
              "mindie_config atb_llm/models/baichuan config_baichuan.py)"),
    OpenModel("Baichuan 2 13B", 13, (*_dims(40, 5120, 13696, 40, 40, 125696),
              ("position", "none")),
              "inclusionAI/Ling mindie_config atb_llm/models/baichuan/v2_13b/config_baichuan.py "
              "(vocab_size 125696, hidden_size 5120, intermediate_size 13696, 40 layers, 40 "
              f"heads, untied); ALiBi, no position table: {_NEMO}/baichuan.py reads "
              "position_embedding_type 'rope' if num_hidden_layers == 32 else 'alibi'",
              unmodelled="ALiBi's bias on the attention scores"),
)  # fmt: skip
_YI = (
    # s29 readers2; Yi-1.5-6B read as it since s30 readers4 (its config cited there)
    OpenModel("Yi 6B", 6, _dims(32, 4096, 11008, 32, 4, 64000),
              "01-ai/Yi-6B's config as copied in InternLM/InternEvo-HFModels huggingface_model/"
              "yi/yi_6B/configuration_yi.py (num_hidden_layers 32, hidden_size 4096, "
              "intermediate_size 11008, num_attention_heads 32, num_key_value_heads 4, "
              f"vocab_size 64000, tie_word_embeddings False){YI15_6B_WHERE}"),
    OpenModel("Yi 34B", 34, _dims(60, 7168, 20480, 56, 8, 64000),
              "01-ai/Yi-34B's config.json (copied at huggingface.co/GreenBitAI/"
              "yi-34b-w4a16g32 from the 01-ai/Yi-34B snapshot; 01-ai/Yi-1.5-34B-Chat's the same "
              "dims: num_hidden_layers 60, hidden_size 7168, intermediate_size 20480, "
              "num_attention_heads 56, num_key_value_heads 8, vocab_size 64000, untied)"),
)  # fmt: skip
_INTERNLM2 = (
    OpenModel("InternLM2 7B", 7, _dims(32, 4096, 14336, 32, 8, 92544),
              "huggingface.co/internlm/internlm2-chat-7b config.json (num_hidden_layers 32, "
              "hidden_size 4096, intermediate_size 14336, num_attention_heads 32, "
              "num_key_value_heads 8, vocab_size 92544, bias false, untied)"),
    OpenModel("InternLM2 20B", 20, _dims(48, 6144, 16384, 48, 8, 92544),
              "huggingface.co/internlm/internlm2-20b config.json (num_hidden_layers 48, "
              "hidden_size 6144, intermediate_size 16384, num_attention_heads 48, "
              "num_key_value_heads 8, vocab_size 92544, bias false, untied)"),
)  # fmt: skip

#: (family pattern on the lower-cased model text, its sizes), first family match wins; a
#: family matched at a size it has no entry for is left to the common decoder. Gemma 3 and
#: Gemma 2 before Gemma ("Gemma 2B" is the first Gemma's 2B: a digit followed by "b" is a size,
#: not a generation).
OPEN_MODELS: tuple[tuple[str, tuple[OpenModel, ...]], ...] = (
    (r"\bgemma[\s_-]*3(?![\d.]*\s*b\b)(?![.\dn])", _GEMMA3),
    (r"\bgemma[\s_-]*2(?![\d.]*\s*b\b)(?![.\d])", _GEMMA2),
    # the first Gemma (or 1.1) followed by a size or a word, not by another generation's digit
    (r"\bgemma(?:[\s_-]*1(?:\.1)?(?![\d.]*\s*b\b))?(?=[\s_-]*(?:\d+(?:\.\d+)?\s*b\b|[^\d\s_-]|$))",
     _GEMMA),
    (r"\bmistral(?![\s_-]*(?:medium|\d+x))", (*_MISTRAL, *MISTRAL_SMALL_22B)),
    (r"\bqwen[\s_-]*2(?:\.5)?(?![.\d])(?![\s_-]*(?:moe|vl|audio))", _QWEN2),
    (r"\bphi[\s_-]*3(?![.\d])", (*_PHI3, *PHI3_MEDIUM, *PHI3_128K)),
    (r"\bbaichuan[\s_-]*2(?![.\d])", _BAICHUAN2),
    (r"\byi(?:[\s_-]*1\.5)?\b", (*_YI, *YI9)),
    # not InternLM2.5 ("internlm2_5-7b", "_" read as a space): its own entries (s30 readers4)
    (r"\binternlm[\s_-]*2(?![.\d])(?![\s_-]5(?![\d.]*\s*b\b))", _INTERNLM2),
    (r"\binternlm[\s_-]*2(?:\.|[\s_-])5(?![.\d])(?![\d.]*\s*b\b)",
     (*INTERNLM25, *INTERNLM25_SMALL)),
    # s29 readers2 (infer_open_more): Llama 3.2 (its 11B / 90B vision models have no entry)
    # and the dense Qwen3 (not the MoE 30B-A3B / 235B-A22B, the Qwen3 flavors)
    (r"\bllama[\s_-]*3\.2(?![\d])", LLAMA32),
    (r"\bqwen[\s_-]*3(?![.\d])(?![\s_-]*(?:moe|vl|next|omni|coder))"
     r"(?!.*\ba\d+(?:\.\d+)?b\b)", QWEN3),
    # s29 readers3 (infer_open_cited): Falcon (not Falcon 2 / Falcon3, Falcon Mamba, Falcon-H1:
    # other architectures), StarCoder2, OLMo 2
    (r"\bfalcon(?![\s_-]*(?:mamba|h1\b|[23](?![\d.]*\s*b\b)))", (*FALCON, *FALCON2, *FALCON_180B)),
    (r"\bstar[\s_-]*coder[\s_-]*2(?![.\d])", STARCODER2),
    (r"\bolmo[\s_-]*2(?![.\d])", (*OLMO2, *OLMO2_MORE)),
    # s30 readers4 (infer_open_fourth): the first OLMo (a size right after the name, no other
    # generation's number: not OLMo 1.7 / 3, not OLMoE), Phi-4 (not Phi-4-mini / multimodal),
    # Granite 3.0 / 3.1 dense (not 3.2+, not the MoE 1B-A400M / 3B-A800M), Falcon3 (not
    # Falcon3-Mamba)
    (r"\bolmo(?!e)(?![\s_-]*\d+(?:\.\d+)?(?![\d.])(?!\s*b\b))", OLMO1),
    (r"\bphi[\s_-]*4(?![.\d])(?![\s_-]*(?:mini|multimodal|mm\b))", PHI4),
    (r"\bgranite[\s_-]*3(?:\.[01])?(?![.\d])(?![\s_-]*\d+(?:\.\d+)?\s*b[\s_-]*a\d)", GRANITE3),
    (r"\bfalcon[\s_-]*3(?![.\d])(?![\d.]*\s*b\b)(?![\s_-]*mamba)", FALCON3),
    # Falcon 2 ("Falcon2-11B"; HF names it tiiuae/falcon-11B, read by the Falcon family above)
    (r"\bfalcon[\s_-]*2(?![.\d])(?![\d.]*\s*b\b)(?![\s_-]*vlm)", FALCON2),
    # s30 readers5 (infer_open_fifth): Phi-3.5 mini (not Phi-3.5-MoE / vision; "small" is
    # refused by name as Phi-3 small), Codestral 22B (not Codestral Mamba), SmolLM2
    (r"\bphi[\s_-]*3\.5(?!\d)(?![\s_-]*(?:moe|vision))", PHI35),
    (r"\bcodestral(?![\s_-]*mamba)", CODESTRAL),
    (r"\bsmol[\s_-]*lm[\s_-]*2(?![.\d])", SMOLLM2),
    # s31 readers6 (infer_open_sixth): the first LLaMA, a size right after the name
    (LLAMA1_PATTERN, LLAMA1),
    (GPT_NEOX_PATTERN, GPT_NEOX),
    (COMMAND_R_PATTERN, COMMAND_R),
)  # fmt: skip
_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*b(?![a-z])")


def _stated_size(text: str) -> float | None:
    """The billions of parameters the model text states (``gemma-2-9b``: 9), None if none."""
    found = _SIZE.search(text)
    return float(found.group(1)) if found else None


def find_open_model(text: str) -> tuple[str, OpenModel | None]:
    """``(family pattern, entry)`` of the lower-cased model ``text``: the first family of
    :data:`OPEN_MODELS` it names and the first of its entries whose size (or alias) and version
    it states; ``("", None)`` when it names no family, ``(pattern, None)`` when it names one at
    a size the table does not hold."""
    size = _stated_size(text)
    for pattern, entries in OPEN_MODELS:
        if not re.search(pattern, text):
            continue
        for entry in entries:
            sized = size == entry.size or (
                size is None and bool(entry.alias) and re.search(entry.alias, text) is not None
            )
            if sized and (not entry.version or re.search(entry.version, text)):
                return pattern, entry
        return pattern, None
    return "", None


def held_sizes(text: str) -> str:
    """The entries of the family of :data:`OPEN_MODELS` the lower-cased model ``text`` names
    (``"Phi-3 mini 3.8B"``, comma-separated), "" when it names none: what a row naming the family
    at another size (or none) may state instead."""
    for pattern, entries in OPEN_MODELS:
        if re.search(pattern, text):
            return ", ".join(entry.name for entry in entries)
    return ""


class OpenModelRefused(ValueError):
    """A row names an entry of :data:`OPEN_MODELS` that lacks a dim the row does not state."""


def _check_params(
    row: dict[str, str], model: str, entry: OpenModel, family: tuple[OpenModel, ...]
) -> None:
    """Refuse a ``params_b`` cell nearer (by ratio) another size of ``entry``'s family than
    ``entry``'s: the model and params_b cells name two models ("Gemma 2 9B" beside 27; s28
    review: the params_b cell was not read). A published count above its name's round size
    (Gemma 7B: 8.54B) stays nearest its own entry; a family of one size is never refused, nor
    a count nearer another name of the same configuration (LLaMA "30B" is the paper's 33B)."""
    cell = row.get("params_b", "").strip()
    try:
        params = float(cell)
    except ValueError:
        return
    if not (params > 0 and math.isfinite(params)) or entry.size is None:
        return
    sizes = {e.size for e in family if e.size is not None}
    nearest = min(sizes, key=lambda size: abs(math.log(params / size)))
    # two names of one model (LLaMA "30B" / "33B": the same config) are one model (s31 lead)
    if nearest != entry.size and not any(
        e.size == nearest and e.fields == entry.fields for e in family
    ):
        (other,) = [e.name for e in family if e.size == nearest][:1]
        raise OpenModelRefused(
            f"model {model!r} is {entry.name}, but params_b {cell!r} is nearer {other}: "
            "expected the model and params_b columns to name one model (or params_b empty)"
        )


def _untied_by_source(
    row: dict[str, str], entry: OpenModel, own: tuple[Field, ...]
) -> tuple[tuple[Field, ...], str]:
    """``own`` with untied embeddings, and why, when the row's text names a framework of
    :data:`~stage_explore.validation.infer_open_more.UNTIED_BY_SOURCE` that unties ``entry``'s
    family; else ``own`` unchanged and ""."""
    text = " ".join(row.get(c, "") for c in ("source", "source_table", "url", "notes"))
    for pattern, names, why in UNTIED_BY_SOURCE:
        if entry.name in names and re.search(pattern, text, re.IGNORECASE):
            kept = tuple(f for f in own if f[0] != "tied_embeddings")
            return (*kept, ("tied_embeddings", False)), f"; untied embeddings: {why}"
    return own, ""


def open_model(row: dict[str, str], model: str) -> tuple[str, str, tuple[Field, ...]] | None:
    """``(base flavor, assumption, model fields)`` of a row naming a published size of
    :data:`OPEN_MODELS` (the entry's fields, less the dims the row states, with the head dim
    its model or notes cell states); None when the row
    names none; :class:`OpenModelRefused` when the entry lacks a dim (:data:`NEEDED`) the row
    leaves empty, or the moe cell names experts (every entry is dense)."""
    text = decimal_size(model.lower()).replace("_", " ")
    for refused, why in (*REFUSED_BY_NAME, *REFUSED_SIXTH):
        if re.search(refused, text):
            raise OpenModelRefused(f"model {model!r}: not timed: {why}")
    pattern, entry = find_open_model(text)
    if entry is None:
        return None
    _check_params(row, model, entry, dict(OPEN_MODELS)[pattern])
    moe = row.get("moe", "").strip()
    if moe and re.search(r"\d\s*(?:routed\s*)?experts?|top[-\s]?\d", moe, re.IGNORECASE):
        raise OpenModelRefused(
            f"model {model!r} is the dense {entry.name}, but the moe column says {moe!r}"
        )
    for dim in NEEDED:  # a cell the row fills but not with a number is not the entry's
        cell = row.get(dim, "").strip()
        if cell and not cell.isdigit():
            raise OpenModelRefused(
                f"model {model!r} is {entry.name}, but the {dim} column says {cell!r}: expected "
                "a number (or empty, for the published config's)"
            )
    given = {k for k, _ in entry.fields}
    missing = [d for d in NEEDED if d not in given and not row.get(d, "").strip().isdigit()]
    if missing:
        raise OpenModelRefused(
            f"model {model!r} is {entry.name}, whose {', '.join(missing)} the published config "
            "does not give, and the CSV does not state it"
        )
    own = tuple((k, v) for k, v in entry.fields if not row.get(k, "").strip().isdigit())
    own = heads_kept_multi_head(row, entry.fields, own)  # s31 readers6
    try:  # a head dim the row's model or notes cell states wins too
        head_dim = stated_head_dim(row)
    except GenericRefused as error:
        raise OpenModelRefused(str(error)) from None
    if head_dim is not None:
        own = (*(f for f in own if f[0] != "head_dim"), ("head_dim", head_dim[0]))
    own, untied = _untied_by_source(row, entry, own)
    listed = ", ".join(f"{k} {v}" for k, v in own)
    unmodelled = f"; not modelled: {entry.unmodelled}" if entry.unmodelled else ""
    block = {k for k, _ in own} & {"norm", "activation", "bias"}
    if block:  # Falcon, StarCoder2 (s29 readers3): the entry's own block fields
        unmodelled = f"; its {', '.join(sorted(block))} replace the block's{unmodelled}"
    assumption = (
        f"model {model!r} as {entry.name}: the common decoder (flavor {BASE}'s block: pre-norm "
        f"RMSNorm, rotary positions, no biases, a gated MLP) with its published config "
        f"({listed}): {entry.where}; the CSV's dims, where stated, win{untied}{unmodelled}"
    )
    return BASE, assumption, own
