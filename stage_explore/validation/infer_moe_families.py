"""Mixture-of-experts families a 2024-2026 training report may name, at their published sizes
(7 Dec 2026, s33 readers8): entries of
:data:`~stage_explore.validation.infer_architectures.ARCHITECTURES` (:data:`MOE_ARCHITECTURES`),
each the common MoE block of a flavor already timed, with the sizes of the model's published
configuration, cited with the entry.

- Qwen1.5-MoE-A2.7B and Qwen2-57B-A14B (Hugging Face ``qwen2_moe``): Mixtral's block (RMSNorm,
  rotary, SwiGLU experts, untied, dropless top-k in every layer) plus one always-active shared
  expert. The generator's shared experts are ``num_shared_experts`` MLPs of the routed experts'
  width timed as ONE MLP of ``num_shared_experts × expert_ffn`` (``stage_core/lower/program.py``
  dim ``Z``), the shape of DeepSeek's and Llama 4's shared experts; Qwen2-MoE's single shared
  expert of ``shared_expert_intermediate_size`` is that MLP exactly when its width is a multiple
  of the experts' (5632 = 4 × 1408, 20480 = 8 × 2560). Its sigmoid gate (Megatron-Core
  ``SharedExpertMLP`` with ``moe_shared_expert_gate``: ``output * sigmoid(linear(x,
  gate_weight))``, ``gate_weight`` of ``[1, hidden]``; Hugging Face ``shared_expert_gate``, a
  ``Linear(hidden, 1)``) is 2·hidden FLOPs a token, under 0.02 % of the shared expert's
  6·hidden·width: not timed. Not timed either: the q / k / v biases (``add_qkv_bias``).
- OLMoE-1B-7B: Mixtral's block with 64 experts of 1024 choosing 8 and a query / key RMSNorm
  (timed per head; OLMoE's norms span all heads' width, the same elementwise work).
- Qwen3-Coder-480B-A35B: the Qwen3 MoE flavor's block (query / key norm, head dim 128, no
  shared expert) at its sizes.
- GLM-4.5 (355B-A32B) and GLM-4.5-Air (106B-A12B): grouped-query attention with head dim 128,
  dense first layers, 1 shared expert of the experts' width, one multi-token-prediction layer:
  the Mixtral flavor's block with ``first_k_dense``, ``num_shared_experts``, ``head_dim`` and
  ``mtp_layers`` (the fields DeepSeek's flavors time). Not timed: the partial rotary embedding
  (``rotary_percent`` 0.5: rotary on half of each head, elementwise), the q / k / v biases and
  the sigmoid router with its expert bias (no GEMM).

Refused elsewhere, by name: Snowflake Arctic (a dense residual MLP of the hidden width beside
the experts: :data:`~stage_explore.validation.infer_open_sixth.REFUSED_SIXTH`), Jamba (Mamba
layers beside attention and MoE: the hybrid rule of
:func:`~stage_explore.validation.infer_fields.infer_model`).
"""

from __future__ import annotations

_HF = "huggingface.co"
#: Megatron-Bridge's GLM MoE providers (NVIDIA-NeMo/Megatron-Bridge 5f28ae82
#: src/megatron/bridge/models/glm/glm45_provider.py, GLMMoEModelProvider: RMSNorm, SwiGLU,
#: add_bias_linear False, add_qkv_bias True, untied, vocab_size 151552, num_query_groups 8,
#: num_attention_heads 96, kv_channels 128, rotary_percent 0.5, moe_router_topk 8, sigmoid
#: router with expert bias, mtp_num_layers 1); the same flags in slime's
#: scripts/models/glm4.5-355B-A32B.sh (zyzshishui/slime) and glm4.5-106B-A12B.sh.
_GLM = (
    "NVIDIA-NeMo/Megatron-Bridge 5f28ae82 src/megatron/bridge/models/glm/glm45_provider.py "
    "(GLMMoEModelProvider: 96 heads, 8 query groups, kv_channels 128, vocab_size 151552, "
    "untied, top-8 sigmoid router, mtp_num_layers 1; not timed: add_qkv_bias, rotary_percent "
    "0.5)"
)
#: (pattern on the lower-cased model text, base flavor, model fields, where the sizes are
#: published).
MOE_ARCHITECTURES: tuple[tuple[str, str, tuple[tuple[str, int], ...], str], ...] = (
    # "Qwen1.5-MoE-A2.7B", "Qwen/Qwen1.5-MoE-A2.7B-Chat", "Qwen1.5-MoE" (one published size),
    # "Qwen1.5-MoE 14.3B"; not another active or total size ("Qwen1.5-MoE-A14B")
    (r"\bqwen[\s_-]*1\.5[\s_-]*moe(?:[\s_-]*(?:a[\s_-]*2\.7\s*b|14(?:\.3)?\s*b))?"
     r"(?![\s_-]*(?:a[\s_-]*)?\d)", "mixtral-8x7b",
     (("layers", 24), ("hidden", 2048), ("ffn", 5632), ("expert_ffn", 1408), ("heads", 16),
      ("kv_heads", 16), ("vocab", 151936), ("num_experts", 60), ("top_k", 4),
      ("num_shared_experts", 4)),
     "Qwen/Qwen1.5-MoE-A2.7B's config.json (Qwen2MoeForCausalLM, as copied in public config "
     f"readers' tests and at {_HF}/Qwen/Qwen1.5-MoE-A2.7B-Chat-GPTQ-Int4: num_hidden_layers 24, "
     "hidden_size 2048, intermediate_size 5632, num_attention_heads 16, num_key_value_heads "
     "16, num_experts 60 of moe_intermediate_size 1408, num_experts_per_tok 4, "
     "shared_expert_intermediate_size 5632 = one gated shared expert timed as 4 of the "
     "experts' width, decoder_sparse_step 1, vocab_size 151936, tie_word_embeddings false); "
     "not timed: the shared expert's sigmoid gate (Megatron-Core SharedExpertMLP "
     "moe_shared_expert_gate: a [1, hidden] GEMV) and the q / k / v biases"),
    # "Qwen2-57B-A14B", "Qwen/Qwen2-57B-A14B-Instruct", "Qwen2-MoE 57B"; not "Qwen2-57B-A7B"
    (r"\bqwen[\s_-]*2(?:[\s_-]*moe)?[\s_-]*57\s*b(?:[\s_-]*a[\s_-]*14\s*b)?(?![\w.])"
     r"(?![\s_-]*a[\s_-]*\d)",
     "mixtral-8x7b",
     (("layers", 28), ("hidden", 3584), ("ffn", 18944), ("expert_ffn", 2560), ("heads", 28),
      ("kv_heads", 4), ("vocab", 151936), ("num_experts", 64), ("top_k", 8),
      ("num_shared_experts", 8)),
     "Qwen/Qwen2-57B-A14B's config.json (Qwen2MoeForCausalLM, as NVIDIA/TensorRT-LLM "
     "tests/unittest/_torch/modeling/test_modeling_qwen_moe.py copies it: num_hidden_layers "
     "28, hidden_size 3584, intermediate_size 18944, num_attention_heads 28, "
     "num_key_value_heads 4, num_experts 64 of moe_intermediate_size 2560, "
     "num_experts_per_tok 8, shared_expert_intermediate_size 20480 = one gated shared expert "
     "timed as 8 of the experts' width, vocab_size 151936, tie_word_embeddings False); not "
     "timed: the shared expert's sigmoid gate and the q / k / v biases"),
    # "OLMoE-1B-7B", "allenai/OLMoE-1B-7B-0924", "OLMoE" (one published size); not
    # "OLMoE-1B-14B"
    (r"\bolmoe(?![\s_-]*\d)|\bolmoe[\s_-]*1\s*b[\s_-]*7\s*b\b", "mixtral-8x7b",
     (("layers", 16), ("hidden", 2048), ("ffn", 1024), ("expert_ffn", 1024), ("heads", 16),
      ("kv_heads", 16), ("vocab", 50304), ("num_experts", 64), ("top_k", 8), ("qk_norm", True)),
     "NVIDIA-NeMo/Megatron-Bridge 217dc581 src/megatron/bridge/models/olmoe/olmoe_provider.py "
     "(OlMoEModelProvider: num_layers 16, hidden_size 2048, moe_ffn_hidden_size 1024, "
     "num_attention_heads 16, num_query_groups 16, qk_layernorm over all heads' width, "
     "num_moe_experts 64, moe_router_topk 8, vocab_size 50304, untied, no biases) and "
     "huggingface/transformers configuration_olmoe.py (OlmoeConfig defaults, checkpoint "
     "allenai/OLMoE-1B-7B-0924: the same sizes)"),
    # "Qwen3-Coder-480B-A35B", "Qwen/Qwen3-Coder-480B-A35B-Instruct"
    (r"\bqwen[\s_-]*3[\s_-]*coder[\s_-]*480\s*b(?:[\s_-]*a[\s_-]*35\s*b)?(?![\w.])"
     r"(?![\s_-]*a[\s_-]*\d)",
     "qwen3-235b-a22b",
     (("layers", 62), ("hidden", 6144), ("ffn", 8192), ("expert_ffn", 2560), ("heads", 96),
      ("kv_heads", 8), ("vocab", 151936), ("num_experts", 160), ("top_k", 8)),
     "zyzshishui/miles b2699705 scripts/models/qwen3-coder-480B-A35B.sh "
     "('Qwen/Qwen3-Coder-480B-A35B-Instruct': num-layers 62 all MoE, hidden-size 6144, "
     "ffn-hidden-size 8192, num-attention-heads 96, num-query-groups 8, kv-channels 128, "
     "qk-layernorm, num-experts 160 of moe-ffn-hidden-size 2560, moe-router-topk 8, "
     "vocab-size 151936, untied); the model's config.json as copied in public config "
     "readers' tests gives the same (Qwen3MoeForCausalLM, head_dim 128, "
     "shared_expert_intermediate_size 0)"),
    # "GLM-4.5", "zai-org/GLM-4.5", "GLM-4.5 355B-A32B"; not GLM-4.5-Air, GLM-4.5V / Flash
    (r"\bglm[\s_-]*4\.5(?![\d.])(?![\s_-]*(?:air|v\b|flash))", "mixtral-8x7b",
     (("layers", 92), ("hidden", 5120), ("ffn", 12288), ("expert_ffn", 1536), ("heads", 96),
      ("kv_heads", 8), ("head_dim", 128), ("vocab", 151552), ("num_experts", 160),
      ("top_k", 8), ("num_shared_experts", 1), ("first_k_dense", 3), ("qk_norm", True),
      ("mtp_layers", 1)),
     f"{_GLM}; GLM45ModelProvider355B (num_layers 92, hidden_size 5120, ffn_hidden_size 12288 "
     "in the first 3 dense layers (moe_layer_freq [0] * 3 + [1] * 89), 160 experts of "
     "moe_ffn_hidden_size 1536, moe_shared_expert_intermediate_size 1536, qk_layernorm True)"),
    # "GLM-4.5-Air", "zai-org/GLM-4.5-Air"
    (r"\bglm[\s_-]*4\.5[\s_-]*air\b", "mixtral-8x7b",
     (("layers", 46), ("hidden", 4096), ("ffn", 10944), ("expert_ffn", 1408), ("heads", 96),
      ("kv_heads", 8), ("head_dim", 128), ("vocab", 151552), ("num_experts", 128),
      ("top_k", 8), ("num_shared_experts", 1), ("first_k_dense", 1), ("mtp_layers", 1)),
     f"{_GLM}; GLM45AirModelProvider106B (num_layers 46, hidden_size 4096, ffn_hidden_size "
     "10944 in the first dense layer (moe_layer_freq [0] * 1 + [1] * 45), 128 experts of "
     "moe_ffn_hidden_size 1408, moe_shared_expert_intermediate_size 1408, qk_layernorm "
     "False)"),
)  # fmt: skip
