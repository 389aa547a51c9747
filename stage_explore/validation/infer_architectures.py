"""Models that are another flavor's architecture at their own published sizes
(:data:`ARCHITECTURES`): a row naming one is set up as the base flavor with those sizes, each
from the model's published configuration, cited with the entry. A dim the row's CSV states
wins over the entry's (:func:`stage_explore.validation.infer_fields.infer_flavor`).
"""

from __future__ import annotations

from stage_explore.validation.infer_moe_families import MOE_ARCHITECTURES
from stage_explore.validation.infer_open_sixth import SIXTH_ARCHITECTURES

#: Llama 4's text decoder as NeMo 2.0 builds it for training (NVIDIA-NeMo/Speech, NeMo's
#: repository under its later name, 7b2c814e ``nemo/collections/llm/gpt/model/llama.py``:
#: ``Llama4Config`` num_layers 48, hidden_size 5120, ffn_hidden_size 16384 (the dense layers),
#: num_attention_heads 40, vocab_size 25256 * 8 = 202048, gated_linear_unit, add_bias_linear
#: False, moe_ffn_hidden_size 8192, moe_shared_expert_intermediate_size 8192 (one shared expert
#: of the experts' width), moe_router_topk 1, attention_chunk_size 8192); the DGX Cloud
#: Benchmarking Llama 4 recipe's FLOP notes restate those sizes and give 8 query groups
#: (NVIDIA/dgxc-benchmarking 1f6d9f40 ``llama4/README.md``). Timed as every layer's full
#: causal attention: exact up to 8192 tokens, where the chunked layers' chunk is the whole
#: sequence; the NoPE layers' skipped rotary and Scout's parameter-free query / key L2 norm
#: (qk_l2_norm) are not timed.
_LLAMA4 = (
    ("layers", 48), ("hidden", 5120), ("ffn", 16384), ("expert_ffn", 8192), ("heads", 40),
    ("kv_heads", 8), ("vocab", 202048), ("top_k", 1), ("num_shared_experts", 1),
)  # fmt: skip
_LLAMA4_WHERE = (
    "NeMo's Llama4Config (NVIDIA-NeMo/Speech 7b2c814e nemo/collections/llm/gpt/model/llama.py: 48 "
    "layers, hidden 5120, dense FFN 16384, 40 heads, 8 query groups, vocabulary 202048, experts "
    "of 8192 and one shared expert of 8192, top-1; attention chunk 8192, so full causal "
    "attention up to 8192 tokens)"
)

#: DeepSeek-V2 236B's sizes (s30 readers4; the entry below cites them), DeepSeek-V2.5's too.
_DEEPSEEK_V2 = (
    ("layers", 60), ("hidden", 5120), ("ffn", 12288), ("expert_ffn", 1536), ("heads", 128),
    ("kv_heads", 128), ("vocab", 102400), ("num_experts", 160), ("num_shared_experts", 2),
    ("top_k", 6), ("first_k_dense", 1), ("mtp_layers", 0), ("router_groups", 8),
    ("router_group_topk", 3),
)  # fmt: skip

#: (pattern on the lower-cased model text, base flavor, model fields, where the sizes are
#: published).
ARCHITECTURES: tuple[tuple[str, str, tuple[tuple[str, int], ...], str], ...] = (
    (r"kimi[\s_-]*k2", "deepseek-v3",
     (("layers", 61), ("hidden", 7168), ("ffn", 18432), ("expert_ffn", 2048), ("heads", 64),
      ("kv_heads", 64), ("vocab", 163840), ("num_experts", 384), ("num_shared_experts", 1),
      ("top_k", 8), ("first_k_dense", 1), ("mtp_layers", 0), ("router_groups", 0),
      ("router_group_topk", 0)),
     "moonshotai's kimi_k2 config (the Kimi K2 / K2.5 text_config: DeepSeek-V3's MLA and MoE "
     "blocks, q / kv LoRA ranks 1536 / 512, head dims 128 + 64 rope, v 128; "
     "num_hidden_layers 61, hidden_size 7168, intermediate_size 18432 in the "
     "first_k_dense_replace 1 dense layer, moe_intermediate_size 2048, num_attention_heads 64, "
     "n_routed_experts 384, n_shared_experts 1, num_experts_per_tok 8, vocab_size 163840, "
     "num_nextn_predict_layers 0, n_group 1 / topk_group 1: no group-limited routing); Kimi "
     "K2 technical report, arXiv 2507.20534"),
    # DeepSeek-V2 236B (7 Dec 2026, s30 readers4): DeepSeek-V3's block (multi-head latent
    # attention with a query latent, DeepSeekMoE with shared experts) at V2's sizes; the
    # flavor's MLA dims are V2's too (q / kv LoRA ranks 1536 / 512, head dims 128 + 64 rope, v
    # 128). Not V2-Lite (its own flavor, no query latent). V2's softmax router (V3's is a
    # sigmoid with an expert bias) changes no GEMM; V2 has no multi-token-prediction module.
    (r"deepseek[\s_-]*v2(?![.\d])(?![\s_-]*lite)", "deepseek-v3", _DEEPSEEK_V2,
     "AMD-AIG-AIMA/Primus primus/configs/models/megatron/deepseek_v2.yaml (0333eedc: "
     "https://huggingface.co/deepseek-ai/DeepSeek-V2, num_layers 60, hidden_size 5120, "
     "ffn_hidden_size 12288 in the first (dense) layer, moe_layer_freq [0]*1+[1]*59, 128 "
     "heads, q_lora_rank 1536, kv_lora_rank 512, qk_head_dim 128, qk_pos_emb_head_dim 64, "
     "v_head_dim 128, num_experts 160 of moe_ffn_hidden_size 1536, "
     "moe_shared_expert_intermediate_size 3072 = 2 shared, moe_router_num_groups 8, "
     "moe_router_group_topk 3) and deepseek_v2_base.yaml (6726ee83: moe_router_topk 6, "
     "softmax router); vocab_size 102400, num_key_value_heads 128, tie_word_embeddings false "
     "in deepseek-ai/DeepSeek-V2's config.json (DeepseekV2ForCausalLM, as copied in public "
     "config readers' tests)"),
    # DeepSeek-V2.5 (and V2.5-1210) (7 Dec 2026, s30 readers5): V2's shape in its own
    # config.json, so V2's entry: the fields quoted below are V2's numbers one for one; the
    # vocabulary, tie and router group top-k fall past the quoted text and are V2's.
    (r"deepseek[\s_-]*v2\.5(?!\d)", "deepseek-v3", _DEEPSEEK_V2,
     "deepseek-ai/DeepSeek-V2.5's config.json (snapshot 24b08cb7, as copied at "
     "huggingface.co/nm-testing/DeepSeek-V2.5-W4A16; DeepSeek-V2.5-1210's the same at "
     "huggingface.co/OPEA/DeepSeek-V2.5-1210-int4-sym-inc: DeepseekV2ForCausalLM, "
     "num_hidden_layers 60, hidden_size 5120, intermediate_size 12288, first_k_dense_replace "
     "1, moe_intermediate_size 1536, n_routed_experts 160, n_shared_experts 2, "
     "num_experts_per_tok 6, n_group 8, num_attention_heads 128, num_key_value_heads 128, "
     "q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64): "
     "DeepSeek-V2's sizes; vocab_size, the tie and topk_group 3 as DeepSeek-V2's config"),
    # Moonlight-16B-A3B (DeepseekV3ForCausalLM): DeepSeek-V2-Lite's shape with its own dense
    # FFN and vocabulary (V3's sigmoid router with expert bias changes no GEMM).
    (r"moonlight", "deepseek-v2-lite", (("ffn", 11264), ("vocab", 163842), ("mtp_layers", 0)),
     "Megatron-Bridge's MoonlightModelProvider16B (NVIDIA-NeMo/Megatron-Bridge 355cef45 "
     "src/megatron/bridge/models/deepseek/deepseek_provider.py: 27 layers, hidden 2048, "
     "ffn_hidden_size 11264 in the first layer (moe_layer_freq [0] + [1] * 26), 16 heads, "
     "q_lora_rank None, kv_lora_rank 512, 64 experts of 1408, 2 shared (2816), top-6, "
     "vocab_size 163842); the verification card's recipe builds it from the Hugging Face "
     "config moonshotai/Moonlight-16B-A3B (architecture DeepseekV3ForCausalLM)"),
    # DBRX (6 Dec 2026, s28 readers): fine-grained MoE in every layer, 16 experts of 10752
    # choosing 4, no shared expert, grouped-query attention; its GLU experts (ffn_act_fn silu)
    # are Mixtral's block. Not timed: clip_qkv, its LayerNorm (the flavor's RMSNorm).
    (r"\bdbrx\b", "mixtral-8x7b",
     (("layers", 40), ("hidden", 6144), ("ffn", 10752), ("expert_ffn", 10752), ("heads", 48),
      ("kv_heads", 8), ("vocab", 100352), ("num_experts", 16), ("top_k", 4)),
     "databricks/dbrx-base's config.json (copied at huggingface.co/LnL-AI/"
     "dbrx-base-converted-v2/blob/main/config.json and amd/dbrx-instruct-FP8-KV: n_layers 40, "
     "d_model 6144, n_heads 48, attn_config.kv_n_heads 8, ffn_config.ffn_hidden_size 10752, "
     "moe_num_experts 16, moe_top_k 4, vocab_size 100352, tie_word_embeddings false)"),
    # Nemotron-4 15B (7 Dec 2026, s29 readers2): Nemotron-4 340B's block (squared-ReLU MLP,
    # LayerNorm, rope, untied, no biases) at the 15B sizes; the 340B flavor's vocabulary
    # (256,000) is the 15B's too (its report, arXiv 2402.16819 section 2: "a vocabulary of
    # 256,000 tokens"). Only a row naming 15B: other sizes keep the Nemotron-4 rule.
    (r"nemotron[\s_-]*4[\s_-]*15\s*b\b", "nemotron-4-340b",
     (("layers", 32), ("hidden", 6144), ("ffn", 24576), ("heads", 48), ("kv_heads", 8)),
     "NeMo's Nemotron4Config15B (NVIDIA-NeMo/Speech nemo/collections/llm/gpt/model/"
     "nemotron.py: num_layers 32, hidden_size 6144, ffn_hidden_size 24576, "
     "num_attention_heads 48, num_query_groups 8, seq_length 4096)"),
    # Maverick: Llama4Experts128Config num_moe_experts 128, moe_layer_freq [0, 1] * 24 (every
    # other layer MoE; the flavor's interval 2 puts the MoE blocks on layers 0, 2, ..., NeMo's
    # on 1, 3, ...: the same 24 of 48).
    (r"llama[\s_-]*4.*(?:maverick|\b128\s*e\b|\be128\b)", "mixtral-8x7b",
     (*_LLAMA4, ("num_experts", 128), ("moe_layer_interval", 2)),
     f"{_LLAMA4_WHERE}; Llama4Experts128Config (Maverick): 128 experts in every other layer"),
    # Scout: Llama4Experts16Config num_moe_experts 16, no moe_layer_freq (Megatron-Core's
    # default 1: every layer MoE).
    (r"llama[\s_-]*4.*(?:scout|\b16\s*e\b|\be16\b)", "mixtral-8x7b",
     (*_LLAMA4, ("num_experts", 16)),
     f"{_LLAMA4_WHERE}; Llama4Experts16Config (Scout): 16 experts in every layer"),
    # s31 readers6 (infer_open_sixth): Phi-3.5-MoE (Mixtral's block), DeepSeek-R1 (V3's)
    *SIXTH_ARCHITECTURES,
    # s33 readers8 (infer_moe_families): Qwen1.5-MoE, Qwen2-57B-A14B, OLMoE, Qwen3-Coder-480B,
    # GLM-4.5 / 4.5-Air
    *MOE_ARCHITECTURES,
)  # fmt: skip
