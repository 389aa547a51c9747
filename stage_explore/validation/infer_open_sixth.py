"""Open models of the sixth pass (7 Dec 2026, s31 readers6): names papers, framework tables and
MLPerf write that the readers could not read, each from a config cited in its entry.

- The first LLaMA (7B, 13B, 33B / "30B", 65B; Touvron et al. 2023), entries of
  :data:`~stage_explore.validation.infer_open_models.OPEN_MODELS` (:data:`LLAMA1`): before,
  "LLaMA-65B" was of no known family and "LLaMA-33B" was read as a Llama 3 of no flavor's size.
- Mistral Large 2's vocabulary (:data:`MISTRAL_LARGE_2`): the s28 entry left it to the row.
- Phi-3.5-MoE and DeepSeek-R1, entries of
  :data:`~stage_explore.validation.infer_architectures.ARCHITECTURES` (:data:`SIXTH_ARCHITECTURES`):
  Mixtral's and DeepSeek-V3's blocks at their published sizes.
- A size spelled with an underscore for the point (``internlm2_5-1_8b``: 1.8B) read as the size
  (:func:`decimal_size`).
- Falcon 180B, GPT-NeoX-20B and Command R (v01, 08-2024) in the open-model table, BLOOM 176B
  named alone on gpt3-175b's block.
- Models refused by name, one line saying what the generator cannot time
  (:data:`REFUSED_SIXTH`): linear-attention hybrids (Qwen3-Next, MiniMax-01 / M1), Snowflake
  Arctic's dense residual MLP and encoder-decoders (T5, UL2, BART). GLM-130B is not refused
  (s31 lead): its rows state their dims and are timed as the common decoder, whose attention
  and norms cost what GLM's do (its blank-infilling mask and DeepNorm are not modelled,
  as the row's assumption says).
- An entry with as many key / value heads as heads keeps that layout at the heads a row states
  (:func:`heads_kept_multi_head`).
"""

from __future__ import annotations

import re
from typing import TypeVar

from stage_explore.validation.infer_open_base import Field, OpenModel, dims

_HF = "huggingface.co"

#: The first LLaMA named by a size right after the name (or after "1"): "LLaMA-65B", "llama
#: 7b", "LLaMA-1 13B", "huggyllama/llama-30b"; not Llama 2 / 3 / 3.1 ("llama-2-7b": a digit
#: not followed by "b"), not Code Llama nor OpenLLaMA (their own vocabularies / training), nor
#: DeepSeek-R1-Distill-Llama-70B (a Llama 3.3 70B).
LLAMA1_PATTERN = (
    r"(?<!code[\s_-])(?<!open[\s_-])(?<!distill[\s_-])"
    r"\bllama(?:[\s_-]*1)?[\s_-]*(?=\d+(?:\.\d+)?\s*b\b)"
)

#: LLaMA (1): the Hugging Face conversions' config.json (LlamaForCausalLM: no biases, RMSNorm,
#: SwiGLU, rotary positions, tie_word_embeddings false, vocab_size 32000, full multi-head
#: attention): huggingface.co/huggyllama/llama-65b (refs/pr/2: hidden_size 8192,
#: intermediate_size 22016, 64 heads, 80 layers) and huggingface.co/huggyllama/llama-30b
#: (hidden 6656, intermediate 17920, 52 heads, 60 layers; the paper's "33B", Hugging Face's
#: "30B"); 7B and 13B from huggyllama/llama-7b / -13b as copied with their _name_or_path at
#: huggingface.co/musabgultekin/functionary-7b-v0.2 (4096, 11008, 32 heads, 32 layers) and
#: huggingface.co/AlexeyChe/llama-13b-lora (5120, 13824, 40 heads, 40 layers).
_LLAMA1_TEXT = "config.json (LlamaForCausalLM, vocab_size 32000, tie_word_embeddings false"
#: The paper's 33B, which Hugging Face names 30B: one config under two names.
_LLAMA1_33B = dims(60, 6656, 17920, 52, 52, 32000)
_LLAMA1_33B_WHERE = (
    f"{_HF}/huggyllama/llama-30b {_LLAMA1_TEXT}: hidden 6656, intermediate 17920, 52 heads, "
    "60 layers"
)
LLAMA1 = (
    OpenModel("LLaMA 7B", 7, dims(32, 4096, 11008, 32, 32, 32000),
              f"huggyllama/llama-7b {_LLAMA1_TEXT}; copied at {_HF}/musabgultekin/"
              "functionary-7b-v0.2: hidden 4096, intermediate 11008, 32 heads, 32 layers)"),
    OpenModel("LLaMA 13B", 13, dims(40, 5120, 13824, 40, 40, 32000),
              f"huggyllama/llama-13b {_LLAMA1_TEXT}; copied at {_HF}/AlexeyChe/llama-13b-lora: "
              "hidden 5120, intermediate 13824, 40 heads, 40 layers)"),
    OpenModel("LLaMA 33B", 33, _LLAMA1_33B, f"{_LLAMA1_33B_WHERE}; the paper's 33B)"),
    OpenModel("LLaMA 30B", 30, _LLAMA1_33B,
              f"{_LLAMA1_33B_WHERE}; Hugging Face's name of the paper's 33B)"),
    OpenModel("LLaMA 65B", 65, dims(80, 8192, 22016, 64, 64, 32000),
              f"{_HF}/huggyllama/llama-65b {_LLAMA1_TEXT}: hidden 8192, intermediate 22016, 64 "
              "heads, 80 layers)"),
)  # fmt: skip

#: Mistral Large 2 (123B, 2407): NeMo's MistralNeMoConfig123B dims (the s28 entry) with the
#: vocabulary of mistralai/Mistral-Large-Instruct-2407's config.json, as copied at
#: huggingface.co/ModelCloud/Mistral-Large-Instruct-2407-gptq-4bit (_name_or_path
#: Mistral-Large-Instruct-2407: head_dim 128, hidden_size 12288, intermediate_size 28672, 96
#: heads, 88 layers, 8 key / value heads, sliding_window null, tie_word_embeddings false,
#: vocab_size 32768) and at huggingface.co/IntervitensInc/Mistral-Large-Instruct-2407-chatml
#: (the same fields, vocab_size 32768). The 2411 release has the same fields
#: (huggingface.co/TechxGenus/Mistral-Large-Instruct-2411-AWQ); it is not named here.
MISTRAL_LARGE_2 = (
    OpenModel("Mistral Large 2 123B", 123,
              (*dims(88, 12288, 28672, 96, 8, 32768), ("head_dim", 128)),
              "NVIDIA-NeMo/Speech nemo/collections/llm/gpt/model/mistral.py "
              "MistralNeMoConfig123B (mistral-large-2407: 88 layers, hidden 12288, FFN 28672, 96 "
              "heads, 8 query groups, kv_channels 128); vocab_size 32768 and untied from "
              "mistralai/Mistral-Large-Instruct-2407's config.json (copied at "
              f"{_HF}/ModelCloud/Mistral-Large-Instruct-2407-gptq-4bit)",
              alias=r"\blarge[\s-]*(?:instruct[\s-]*)?(?:2(?![\d.])|2407\b)", version=r"large"),
)  # fmt: skip

#: Falcon 180B: tiiuae/falcon-180B's config.json as copied at huggingface.co/TheBloke/
#: Falcon-180B-GPTQ and huggingface.co/TeeZee/falcon-180B-chat-AWQ (FalconForCausalLM,
#: new_decoder_architecture true, parallel_attn true, bias false, alibi false: hidden_size
#: 14848, 232 heads, num_kv_heads 8, 80 layers, vocab_size 65024; no ffn_hidden_size, so
#: FalconConfig's 4 x hidden, 59392). Falcon 7B / 40B's block (s29 readers3): GELU, LayerNorm,
#: tied by PretrainedConfig's default (the config does not set the tie).
FALCON_180B = (
    OpenModel("Falcon 180B", 180,
              (*dims(80, 14848, 59392, 232, 8, 65024), ("activation", "gelu"),
               ("norm", "layernorm"), ("tied_embeddings", True)),
              f"tiiuae/falcon-180B config.json (copied at {_HF}/TheBloke/Falcon-180B-GPTQ: 80 "
              "layers, hidden_size 14848, 232 heads, 8 key / value heads, vocab_size 65024, "
              "parallel_attn, bias false; no ffn_hidden_size: FalconConfig's 4 x hidden); GELU, "
              "LayerNorm, tied as Falcon 7B / 40B",
              unmodelled="Falcon's parallel attention / MLP block (both sub-blocks read one "
              "normed input: the same GEMMs, timed as the sequential block)"),
)  # fmt: skip

#: GPT-NeoX-20B: EleutherAI/gpt-neox-20b's config.json as copied with its _name_or_path at
#: huggingface.co/ybelkada/gpt-neo-x-20b-sharded-bf16 and huggingface.co/Dahoas/
#: gptneox-sft-static (GPTNeoXForCausalLM: hidden_size 6144, intermediate_size 24576, 64
#: heads, 44 layers, vocab_size 50432, hidden_act gelu_fast, rotary_pct 0.25,
#: tie_word_embeddings false, use_parallel_residual true); LayerNorm and biases on every
#: linear layer (GPTNeoXLayer's LayerNorms, the Linear layers' default bias).
GPT_NEOX_PATTERN = r"\bgpt[\s_-]*neo[\s_-]*x\b"
GPT_NEOX = (
    OpenModel("GPT-NeoX 20B", 20,
              (*dims(44, 6144, 24576, 64, 64, 50432), ("activation", "gelu"),
               ("norm", "layernorm"), ("bias", True), ("tied_embeddings", False)),
              f"EleutherAI/gpt-neox-20b config.json (copied at {_HF}/ybelkada/"
              "gpt-neo-x-20b-sharded-bf16: 44 layers, hidden 6144, intermediate 24576, 64 "
              "heads, vocab_size 50432, gelu_fast, rotary_pct 0.25, untied, "
              "use_parallel_residual true); LayerNorm, biases",
              unmodelled="its parallel attention / MLP residual (the same GEMMs, timed as the "
              "sequential block) and rotary positions on a quarter of each head (elementwise)"),
)  # fmt: skip

#: BLOOM 176B (BigScience): bigscience/bloom's config.json as copied at huggingface.co/
#: joaoalvarenga/bloom-8bit (_name_or_path bigscience/bloom: n_embed 14336, n_layer 70,
#: num_attention_heads 112, vocab_size 250880); the MLP is 4 x hidden (BloomMLP's
#: dense_h_to_4h; arXiv 2211.05100 Table 3: 176B, 70 layers, 112 heads, hidden 14336); GELU,
#: LayerNorm, biases and tied embeddings are the gpt3-175b flavor's block, ALiBi set by
#: :data:`~stage_explore.validation.infer_fields.ALIBI_FAMILIES` ("bloom").
_BLOOM_176B = (
    ("layers", 70), ("hidden", 14336), ("ffn", 57344), ("heads", 112), ("kv_heads", 112),
    ("vocab", 250880),
)  # fmt: skip

#: Command R (Cohere, 35B): CohereForAI/c4ai-command-r-v01's config.json as copied with its
#: _name_or_path at huggingface.co/TechxGenus/c4ai-command-r-v01-AWQ (CohereForCausalLM:
#: hidden_size 8192, intermediate_size 22528, 64 heads, 64 key / value heads, 40 layers,
#: vocab_size 256000, attention_bias false, logit_scale 0.0625, use_qk_norm false) and
#: tie_word_embeddings true (huggingface.co/Aratako/c4ai-command-r-v01-japanese-instruct);
#: the 08-2024 release from huggingface.co/unsloth/c4ai-command-r-08-2024 (_name_or_path
#: CohereForAI/c4ai-command-r-08-2024: intermediate_size 24576, 8 key / value heads, the rest
#: as v01; the tie is CohereConfig's default, true, as v01's; 32B by these dims, the "35B" of
#: v01 less the key / value heads and the wider MLP). Its block: LayerNorm without
#: bias (timed as LayerNorm), SwiGLU, rotary, attention and MLP in parallel on one normed input.
_COMMAND_R_WHERE = (
    "config.json (CohereForCausalLM: 40 layers, hidden 8192, 64 heads, vocab_size 256000, "
    "attention_bias false, logit_scale 0.0625, tied"
)
_COMMAND_R_UNMODELLED = (
    "Cohere's parallel attention / MLP block (both read one normed input: the same GEMMs, "
    "timed as the sequential block) and the logit scale (a scalar)"
)
COMMAND_R = (
    OpenModel("Command R 32B (08-2024)", 32,
              (*dims(40, 8192, 24576, 64, 8, 256000), ("norm", "layernorm"),
               ("tied_embeddings", True)),
              f"CohereForAI/c4ai-command-r-08-2024 {_COMMAND_R_WHERE}; copied at {_HF}/unsloth/"
              "c4ai-command-r-08-2024: intermediate 24576, 8 key / value heads)",
              alias=r"\bcommand[\s_-]*r\b", version=r"08[\s_-]*2024",
              unmodelled=_COMMAND_R_UNMODELLED),
    OpenModel("Command R 35B (v01)", 35,
              (*dims(40, 8192, 22528, 64, 64, 256000), ("norm", "layernorm"),
               ("tied_embeddings", True)),
              f"CohereForAI/c4ai-command-r-v01 {_COMMAND_R_WHERE}; copied at {_HF}/TechxGenus/"
              "c4ai-command-r-v01-AWQ: intermediate 22528, 64 key / value heads)",
              alias=r"\bcommand[\s_-]*r\b", unmodelled=_COMMAND_R_UNMODELLED),
)  # fmt: skip
#: Command R, not Command R+ / R7B / A (other sizes and blocks, no config cited here).
COMMAND_R_PATTERN = r"\bcommand[\s_-]*r\b(?![\s_-]*(?:\+|plus|7\s*b))"

#: Phi-3.5-MoE (42B, 16 experts choosing 2 in every layer): Mixtral's block. Hugging Face's
#: PhiMoEConfig, whose defaults "yield a similar configuration to that of the
#: microsoft/Phi-3.5-MoE-instruct" (as copied at huggingface.co/microsoft/Phi-tiny-MoE-instruct
#: configuration_slimmoe.py: vocab_size 32064, hidden_size 4096, intermediate_size 6400,
#: num_hidden_layers 32), and Phi-3.5-MoE-instruct's config.json as kept in pruned copies
#: (huggingface.co/Pearush/phi_moe_30_attn2, _name_or_path Phi-3.5-MoE-instruct, which pruned
#: the hidden and expert widths only: num_attention_heads 32, num_key_value_heads 8,
#: num_local_experts 16, num_experts_per_tok 2, attention_bias true, lm_head_bias true,
#: tie_word_embeddings false, vocab_size 32064). Not timed: its LayerNorm (the flavor's
#: RMSNorm), the query / key / value / output and output-layer biases (elementwise adds), the
#: SparseMixer router (no GEMM beyond the router's).
_PHI35_MOE = (
    ("layers", 32), ("hidden", 4096), ("ffn", 6400), ("expert_ffn", 6400), ("heads", 32),
    ("kv_heads", 8), ("vocab", 32064), ("num_experts", 16), ("top_k", 2),
)  # fmt: skip

#: DeepSeek-R1 (and R1-Zero, R1-0528): DeepSeek-V3's architecture and sizes. deepseek-ai/
#: DeepSeek-R1's config.json as copied at huggingface.co/OPEA/DeepSeek-R1-int4-gptq-sym-inc
#: (_name_or_path DeepSeek-R1-bf16, DeepseekV3ForCausalLM: first_k_dense_replace 3,
#: hidden_size 7168, intermediate_size 18432, kv_lora_rank 512, moe_intermediate_size 2048,
#: n_group 8, n_routed_experts 256, n_shared_experts 1, num_attention_heads 128,
#: num_experts_per_tok 8, num_hidden_layers 61, num_key_value_heads 128,
#: num_nextn_predict_layers 1, q_lora_rank 1536, qk_nope_head_dim 128, qk_rope_head_dim 64):
#: every quoted field is the deepseek-v3 flavor's; the vocabulary is past the quoted text (the
#: flavor's). Not the R1-Distill models (Llama / Qwen dense decoders).
_DEEPSEEK_R1 = (
    ("layers", 61), ("hidden", 7168), ("ffn", 18432), ("expert_ffn", 2048), ("heads", 128),
    ("kv_heads", 128), ("num_experts", 256), ("num_shared_experts", 1), ("top_k", 8),
    ("first_k_dense", 3),
)  # fmt: skip

#: (pattern on the lower-cased model text, base flavor, model fields, where the sizes are
#: published): entries of :data:`~stage_explore.validation.infer_architectures.ARCHITECTURES`.
SIXTH_ARCHITECTURES: tuple[tuple[str, str, tuple[tuple[str, int], ...], str], ...] = (
    # "BLOOM 176B", "bloom-176b", "BLOOM (176B)", "bigscience/bloom"; not BLOOM-7B1 / 560M nor
    # "BLOOM-style" models of other sizes
    (r"\bbloom(?=[\s_-]*\(?176\s*b\b|\s*$)", "gpt3-175b", _BLOOM_176B,
     f"bigscience/bloom config.json (copied at {_HF}/joaoalvarenga/bloom-8bit: 70 layers, "
     "n_embed 14336, 112 heads, vocab_size 250880); FFN 4 x hidden (BloomMLP; arXiv "
     "2211.05100 Table 3)"),
    (r"\bphi[\s_-]*3\.5[\s_-]*moe\b", "mixtral-8x7b", _PHI35_MOE,
     "PhiMoEConfig's defaults, 'similar ... to microsoft/Phi-3.5-MoE-instruct' (vocab_size "
     "32064, hidden_size 4096, intermediate_size 6400, 32 layers), and Phi-3.5-MoE-instruct's "
     f"config.json as kept at {_HF}/Pearush/phi_moe_30_attn2 (32 heads, 8 key / value heads, "
     "16 experts choosing 2, untied); not timed: its LayerNorm (as RMSNorm) and its attention "
     "and output-layer biases"),
    (r"\bdeepseek[\s_-]*r1(?![\s_-]*distill)\b", "deepseek-v3", _DEEPSEEK_R1,
     f"deepseek-ai/DeepSeek-R1's config.json (copied at {_HF}/OPEA/"
     "DeepSeek-R1-int4-gptq-sym-inc: DeepseekV3ForCausalLM, 61 layers, hidden 7168, dense "
     "FFN 18432 in the first 3 layers, 256 experts of 2048 and 1 shared, top-8, 128 heads, "
     "q / kv LoRA ranks 1536 / 512, one next-token-prediction layer): DeepSeek-V3's"),
)  # fmt: skip

#: (pattern on the lower-cased model text, why): models refused by name, read before the
#: open-model table (their names would otherwise fall to a family or the common decoder).
REFUSED_SIXTH: tuple[tuple[str, str], ...] = (
    (r"\bqwen[\s_-]*3[\s_-]*(?:coder[\s_-]*)?next\b",
     "Qwen3-Next's Gated DeltaNet linear-attention layers (three of every four: "
     "full_attention_interval 4, layer_types linear_attention / full_attention in its "
     "config.json, e.g. huggingface.co/amd/Qwen3-Coder-Next-MXFP4; the transformers qwen3_next "
     "model doc: 'Gated DeltaNet and Gated Attention'): the generator has no linear-attention "
     "layer"),
    (r"\bminimax[\s_-]*(?:m1|text[\s_-]*01|01)\b",
     "MiniMax-01 / M1's lightning attention, a linear attention, beside softmax attention "
     "layers (MiniMax-01, arXiv 2501.08313; MiniMax-M1, arXiv 2506.13585, 'hybrid-attention', "
     "built on MiniMax-Text-01): the generator has no linear-attention layer"),
    (r"\b(?:flan[\s_-]*|m|by)?t5\b|\bul2\b|\bbart\b",
     "an encoder-decoder (T5, arXiv 1910.10683: an encoder and a decoder stack with "
     "cross-attention; UL2 and BART likewise): the generator times decoder-only stacks"),
    (r"\bsnowflake[\s_-]*arctic\b(?![\s_-]*(?:training|alst|embed|long))"
     r"|\barctic[\s_-]*(?:instruct|base|480\s*b)\b",  # 480B: s33 readers8
     "Snowflake Arctic's dense residual MLP of the hidden width beside a 128-expert top-2 MoE "
     "of 4864 in every layer (use_residual, parallel_attn_mlp_res in "
     "huggingface.co/Snowflake/snowflake-arctic-instruct config.json): the generator's shared "
     "experts have the experts' width"),
)  # fmt: skip

#: An entry's fields: an architecture entry's (int values) or an open model's (:data:`Field`).
F = TypeVar("F", bound=Field)

#: A size with an underscore for the point after a separator ("internlm2_5-1_8b": "-1_8b").
_UNDERSCORE_SIZE = re.compile(r"(?<=[-\s])(\d+)_(\d+)(?=\s*b\b)")


def decimal_size(text: str) -> str:
    """``text`` (a lower-cased model name) with a size spelled with an underscore for the
    point, after a hyphen or a space, spelled with the point: ``internlm2_5-1_8b-chat`` ->
    ``internlm2_5-1.8b-chat`` (InternLM's Hugging Face ids); other underscores are kept."""
    return _UNDERSCORE_SIZE.sub(r"\1.\2", text)


def heads_kept_multi_head(
    row: dict[str, str], fields: tuple[F, ...], own: tuple[F, ...]
) -> tuple[F | tuple[str, int], ...]:
    """``own`` (an architecture or open-model entry's ``fields`` less the dims the row states)
    with the key / value heads of a multi-head entry (as many key / value heads as heads:
    BLOOM, Kimi K2, Gemma 7B) set to the heads the row states when it leaves ``kv_heads``
    empty: the entry's key / value heads belong to its own head count, not to another the row
    states. Otherwise ``own``."""
    entry = dict(fields)
    heads, kv_heads = row.get("heads", "").strip(), row.get("kv_heads", "").strip()
    if entry.get("kv_heads") != entry.get("heads") or not heads.isdigit() or kv_heads:
        return own
    return (*(f for f in own if f[0] != "kv_heads"), ("kv_heads", int(heads)))
