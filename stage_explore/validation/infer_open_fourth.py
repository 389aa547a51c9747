"""Open models of the fourth pass (7 Dec 2026, s30 readers4): OLMo (the first release, 1B and
7B), OLMo 2 7B and 32B beside the s29 13B, Phi-3 medium, Phi-4, Granite 3.0 / 3.1 and Falcon3,
entries of :data:`~stage_explore.validation.infer_open_models.OPEN_MODELS`, each from a config
cited in the entry (the DeepSeek-V2 236B MoE is an architecture entry:
:data:`~stage_explore.validation.infer_architectures.ARCHITECTURES`).

What these have beyond the common decoder, where the generator expresses it: OLMo's LayerNorm
(``norm layernorm``), OLMo 2's query / key norm, Falcon3's 256-wide heads, the tie of each
config. What it does not, and that leaves the matrix FLOPs as they are, the entry says
(``unmodelled``): OLMo's LayerNorm without scale or shift, OLMo 2's norms after (not before)
each sub-block, Granite's scalar multipliers (embedding, attention, residual, logits).
"""

from __future__ import annotations

from stage_explore.validation.infer_open_base import OpenModel, dims
from stage_explore.validation.infer_open_fifth import (
    GRANITE30_2B_FIELDS,
    GRANITE30_2B_WHERE,
    NOT_128K,
    PHI3_4K_WHERE,
    PHI3_4K_WINDOW,
)

_HF = "huggingface.co"

#: OLMo (Groeneveld et al. 2024, arXiv 2402.00838), its released training configs (allenai/OLMo
#: configs/official/OLMo-1B.yaml 394bb22b, OLMo-7B.yaml 0bb7f7db): OLMo-1B d_model 2048,
#: n_heads 16, n_layers 16, mlp_ratio 8 (a SwiGLU input width of 16384: two halves of 8192),
#: weight_tying true; OLMo-7B d_model 4096, n_heads 32, n_layers 32, mlp_hidden_size 22016
#: (2 x 11008), weight_tying false; both: include_bias false, rope, activation_type swiglu,
#: layer_norm_type default with layer_norm_with_affine false (a LayerNorm without scale or
#: shift), vocab_size 50280 in an embedding of embedding_size 50304 rows (the table's width).
_OLMO_BLOCK = (("norm", "layernorm"),)
_OLMO_UNMODELLED = "OLMo's LayerNorm has no scale or shift (timed as a LayerNorm)"
OLMO1 = (
    OpenModel("OLMo 1B", 1, (*dims(16, 2048, 8192, 16, 16, 50304), *_OLMO_BLOCK,
              ("tied_embeddings", True)),
              "allenai/OLMo configs/official/OLMo-1B.yaml (d_model 2048, n_heads 16, n_layers "
              "16, mlp_ratio 8: SwiGLU 2 x 8192, weight_tying true, no biases, rope, "
              "non-affine LayerNorm, embedding_size 50304)", unmodelled=_OLMO_UNMODELLED),
    OpenModel("OLMo 7B", 7, (*dims(32, 4096, 11008, 32, 32, 50304), *_OLMO_BLOCK,
              ("tied_embeddings", False)),
              "allenai/OLMo configs/official/OLMo-7B.yaml (d_model 4096, n_heads 32, n_layers "
              "32, mlp_hidden_size 22016: SwiGLU 2 x 11008, weight_tying false, no biases, "
              "rope, non-affine LayerNorm, embedding_size 50304)", unmodelled=_OLMO_UNMODELLED),
)  # fmt: skip

#: OLMo 2 7B: Hugging Face Olmo2Config's defaults, "Olmo2 7B style" (huggingface/transformers
#: 008e5743 src/transformers/models/olmo2/configuration_olmo2.py, checkpoint
#: allenai/Olmo2-7B-1124-hf: hidden_size 4096, intermediate_size 11008, num_hidden_layers 32,
#: num_attention_heads 32, key / value heads = heads, tie_word_embeddings False); its
#: vocabulary (100352, the OLMo 2 tokenizer's; the default's 50304 is OLMo 1's) and the
#: 32 / 32 / 128 heads from the OLMo-2-1124-7B config.json row of a census of published configs
#: (huggingface.co/allenai/OLMo-2-1124-7B/raw/main/config.json: MHA 32/32/128, vocab 100352,
#: untied), the layers and width from the OLMo 2 model card's table (32 layers, hidden 4096,
#: 32 heads; mauer4/Attention-From-Scratch weights/allenai/OLMo-2-1124-13B/README.md).
#: OLMo 2 32B: huggingface.co/allenai/OLMo-2-0325-32B/raw/cc9d3cf9/config.json (hidden_size
#: 5120, num_attention_heads 40, num_key_value_heads 8, intermediate_size 27648,
#: num_hidden_layers 64, vocab_size 100352), untied as Olmo2Config's default.
_OLMO2_UNMODELLED = (
    "OLMo 2's norms after (not before) the attention / MLP, as many; its q / k norm spans all "
    "heads' width, timed as a per-head norm of the same size"
)
OLMO2_MORE = (
    OpenModel("OLMo 2 7B", 7, (*dims(32, 4096, 11008, 32, 32, 100352), ("qk_norm", True),
              ("tied_embeddings", False)),
              "huggingface/transformers configuration_olmo2.py Olmo2Config defaults ('Olmo2 7B "
              "style': hidden 4096, intermediate 11008, 32 layers, 32 heads, kv = heads, "
              f"untied); vocab_size 100352 ({_HF}/allenai/OLMo-2-1124-7B config.json: MHA "
              "32/32/128, untied)", unmodelled=_OLMO2_UNMODELLED),
    OpenModel("OLMo 2 32B", 32, (*dims(64, 5120, 27648, 40, 8, 100352), ("qk_norm", True),
              ("tied_embeddings", False)),
              f"{_HF}/allenai/OLMo-2-0325-32B config.json at cc9d3cf9 (64 layers, hidden 5120, "
              "intermediate 27648, 40 heads, 8 key / value heads, vocab_size 100352); untied "
              "(Olmo2Config's default)", unmodelled=_OLMO2_UNMODELLED),
)  # fmt: skip

#: Phi-3 medium: huggingface.co/microsoft/Phi-3-medium-4k-instruct/blob/main/config.json as
#: restated by an LLM analyser's model table (hidden_size 5120, num_attention_heads 40,
#: num_key_value_heads 10, head_dim 128, intermediate_size 17920, 40 decoder layers, vocab_size
#: 32064, silu); untied (Phi3Config's tie_word_embeddings False, as the Phi-3 mini entry).
PHI3_MEDIUM = (
    # the 4k config's sliding window since s30 readers5 (timed as full attention before)
    OpenModel("Phi-3 medium 14B", 14, (*dims(40, 5120, 17920, 40, 10, 32064), *PHI3_4K_WINDOW),
              f"{_HF}/microsoft/Phi-3-medium-4k-instruct config.json (40 layers, hidden 5120, "
              "intermediate 17920, 40 heads, 10 key / value heads, head_dim 128, vocab_size "
              f"32064, silu, untied){PHI3_4K_WHERE}", alias=r"\bmedium\b", version=NOT_128K),
)  # fmt: skip

#: Phi-4: huggingface.co/microsoft/phi-4/raw/2db69c1c/config.json (Phi3ForCausalLM: hidden_size
#: 5120, num_attention_heads 40, num_key_value_heads 10, head_dim 128, intermediate_size 17920,
#: num_hidden_layers 40, vocab_size 100352; tie_word_embeddings false, attention_bias false,
#: sliding_window null in the same config.json as copied in a transformers tutorial).
PHI4 = (
    OpenModel("Phi-4 14B", 14, dims(40, 5120, 17920, 40, 10, 100352),
              f"{_HF}/microsoft/phi-4 config.json at 2db69c1c (Phi3ForCausalLM: 40 layers, "
              "hidden 5120, intermediate 17920, 40 heads, 10 key / value heads, vocab_size "
              "100352, tie_word_embeddings false, no sliding window)",
              alias=r"\bphi[\s_-]*4\b"),
)  # fmt: skip

#: Granite 3.0 / 3.1 (IBM): the Foundation Model Stack's Granite configs
#: (foundation-model-stack/foundation-model-stack cbf72b20 fms/models/granite.py): _8b_config
#: src_vocab_size 49155, emb_dim 4096, nheads 32, kvheads 8, nlayers 40, hidden_grow_factor
#: 12800 / 4096, tie_heads True; _3_1_2b_config src_vocab_size 49155, emb_dim 2048, nheads 32,
#: kvheads 8, nlayers 40, hidden_grow_factor 8192 / 2048, tie_heads True; both with
#: embedding_multiplier, attention_multiplier, residual_multiplier and logits_scaling (scalar
#: rescalings: no GEMM). The 8B config (max_expected_seq_len 8192, rope_theta 1e4: the 3.0
#: release's) is read for Granite 3.1 8B too: what the cited configs show the 3.1 release
#: changing is the context and rope base (the 3.1 2B's 131072 / 5e6), taken as the 8B's only
#: change, not confirmed from a 3.1 8B config; the 2B entry only for 3.1, its config's release.
_GRANITE_UNMODELLED = "Granite's scalar embedding / attention / residual / logits multipliers"
GRANITE3 = (
    OpenModel("Granite 3.0 / 3.1 8B", 8, (*dims(40, 4096, 12800, 32, 8, 49155),
              ("tied_embeddings", True)),
              "foundation-model-stack fms/models/granite.py _8b_config (nlayers 40, emb_dim "
              "4096, hidden 12800, nheads 32, kvheads 8, src_vocab_size 49155, tie_heads True)",
              unmodelled=_GRANITE_UNMODELLED),
    OpenModel("Granite 3.1 2B", 2, (*dims(40, 2048, 8192, 32, 8, 49155),
              ("tied_embeddings", True)),
              "foundation-model-stack fms/models/granite.py _3_1_2b_config (nlayers 40, emb_dim "
              "2048, hidden 8192, nheads 32, kvheads 8, src_vocab_size 49155, tie_heads True)",
              version=r"3\.1", unmodelled=_GRANITE_UNMODELLED),
    # s30 readers5: the 3.0 2B, its own config (the 3.1 2B's dims)
    OpenModel("Granite 3.0 2B", 2, GRANITE30_2B_FIELDS, GRANITE30_2B_WHERE, version=r"3\.0",
              unmodelled=_GRANITE_UNMODELLED),
)  # fmt: skip

#: Falcon3 (TII, Dec 2024): Llama-architecture decoders with 256-wide heads. 10B:
#: huggingface.co/tiiuae/Falcon3-10B-Base/raw/34bb99a8/config.json (hidden_size 3072,
#: num_attention_heads 12, num_key_value_heads 4, head_dim 256, intermediate_size 23040,
#: num_hidden_layers 40, vocab_size 131072). 1B / 3B / 7B: the Falcon3 configs restated in
#: xxxn3m3s1sxxx/ATLAS-TQ1_0 2f45830e scripts/release_to_hf.py KNOWN_CONFIGS (1B: 18 layers,
#: hidden 2048, intermediate 8192, 8 heads, 4 kv heads, head_dim 256, vocab 131072; 3B: 22,
#: 3072, 9216, 12, 4, 256, 131072; 7B: 28, 3072, 23040, 12, 4, 256, vocab 131080), the 7B the
#: 10B's width (the 10B is the 7B "upscaled ... by duplicating the redundant layers",
#: huggingface/transformers docs/source/en/model_doc/falcon3.md). No tie is given in the cited
#: text: untied, LlamaConfig's default.
FALCON3 = tuple(
    OpenModel(f"Falcon3 {size}B", size, (*dims(*shape, vocab), ("head_dim", 256),
              ("tied_embeddings", False)),
              f"{where} ({shape[0]} layers, hidden {shape[1]}, intermediate {shape[2]}, "
              f"{shape[3]} heads, {shape[4]} key / value heads, head_dim 256, vocab {vocab}; "
              "untied: LlamaConfig's default, no tie in the cited text)")
    for size, shape, vocab, where in (
        (1, (18, 2048, 8192, 8, 4), 131072, "xxxn3m3s1sxxx/ATLAS-TQ1_0 release_to_hf.py "
         "KNOWN_CONFIGS['1B']"),
        (3, (22, 3072, 9216, 12, 4), 131072, "xxxn3m3s1sxxx/ATLAS-TQ1_0 release_to_hf.py "
         "KNOWN_CONFIGS['3B']"),
        (7, (28, 3072, 23040, 12, 4), 131080, "xxxn3m3s1sxxx/ATLAS-TQ1_0 release_to_hf.py "
         "KNOWN_CONFIGS['7B']"),
        (10, (40, 3072, 23040, 12, 4), 131072, f"{_HF}/tiiuae/Falcon3-10B-Base config.json "
         "at 34bb99a8"),
    )
)  # fmt: skip

#: Yi 9B and Yi-1.5 (01.AI): Llama-architecture decoders. Yi-1.5-9B:
#: huggingface.co/01-ai/Yi-1.5-9B/blob/main/config.json (LlamaForCausalLM, num_hidden_layers
#: 48, hidden_size 4096, intermediate_size 11008, num_attention_heads 32, num_key_value_heads
#: 4, vocab_size 64000, tie_word_embeddings false); Yi-9B the same dims (its config.json from
#: the 01-ai/Yi-9B snapshot a06d5c1b as copied at huggingface.co/GreenBitAI/
#: 01-Yi-9B-channel-mix-bpw-2.5: 48 layers, 4096, 11008, 32 / 4 heads, 64000, untied; the
#: 01.AI blog: Yi-9B is Yi-6B after "model depth expansion"). Yi-1.5-6B reads as the s29 Yi 6B
#: entry (huggingface.co/01-ai/Yi-1.5-6B-Chat/blob/dd86db5e/config.json: 32 layers, 4096,
#: 11008, 32 / 4 heads, 64000, untied: Yi-6B's dims).
YI9 = (
    OpenModel("Yi 9B / Yi-1.5 9B", 9, dims(48, 4096, 11008, 32, 4, 64000),
              f"{_HF}/01-ai/Yi-1.5-9B config.json (48 layers, hidden 4096, intermediate 11008, "
              "32 heads, 4 key / value heads, vocab_size 64000, untied); 01-ai/Yi-9B's config "
              "the same (snapshot a06d5c1b, copied at huggingface.co/GreenBitAI/"
              "01-Yi-9B-channel-mix-bpw-2.5)"),
)  # fmt: skip
#: What the s29 Yi 6B entry cites for Yi-1.5-6B, which it now reads too.
YI15_6B_WHERE = (
    f"; Yi-1.5-6B the same dims ({_HF}/01-ai/Yi-1.5-6B-Chat config.json at dd86db5e: 32 layers, "
    "hidden 4096, intermediate 11008, 32 / 4 heads, vocab 64000, untied)"
)

#: InternLM2.5 (Shanghai AI Lab): InternLM2's architecture at InternLM2's 7B / 20B dims, from
#: its configs: 7B internlm/internlm2_5-7b as restated at huggingface.co/Tongjilibo/
#: bert4torch_config internlm/internlm2_5-7b/bert4torch_config.json (hidden_size 4096,
#: intermediate_size 14336, 32 heads, 8 key / value heads, 32 layers, vocab_size 92544,
#: tie_word_embeddings false, rope_scaling dynamic 2.0); 20B the internlm2_5-20b-chat
#: config.json as copied at huggingface.co/c01zaut/internlm2_5-20b-chat-RK3588-1.1.4
#: (InternLM2ForCausalLM: hidden_size 6144, intermediate_size 16384, 48 heads, 8 key / value
#: heads, 48 layers, vocab_size 92544, untied, rope dynamic 2.5). The RoPE scaling is a
#: position-table change, no cost.
INTERNLM25 = (
    OpenModel("InternLM2.5 7B", 7, dims(32, 4096, 14336, 32, 8, 92544),
              f"internlm/internlm2_5-7b config ({_HF}/Tongjilibo/bert4torch_config "
              "internlm/internlm2_5-7b: 32 layers, hidden 4096, intermediate 14336, 32 heads, 8 "
              "key / value heads, vocab_size 92544, untied): InternLM2 7B's dims"),
    OpenModel("InternLM2.5 20B", 20, dims(48, 6144, 16384, 48, 8, 92544),
              f"internlm2_5-20b-chat config.json (copied at {_HF}/c01zaut/"
              "internlm2_5-20b-chat-RK3588-1.1.4: 48 layers, hidden 6144, intermediate 16384, "
              "48 heads, 8 key / value heads, vocab_size 92544, untied): InternLM2 20B's dims"),
)  # fmt: skip

#: Falcon 2 11B (TII): the Falcon block (parallel attention / MLP, GELU, LayerNorm, no biases)
#: at new sizes. The model card (tiiuae/falcon-11B README, as stored at YinanWusoymilk/hf-readme
#: training_and_application/readme_files/tiiuae_falcon-11B.md): 60 layers, d_model 4096,
#: head_dim 128, vocabulary 65024, "parallel attention/MLP"; the rest from a config.json derived
#: from it (huggingface.co/ssmits/Falcon2-5.5B-Swedish config.json, _name_or_path
#: tiiuae/falcon-11B, a layer-pruned copy whose 28 layers are not the 11B's): hidden_size 4096,
#: num_attention_heads 32, num_kv_heads 8, ffn_hidden_size 16384, activation gelu, bias false,
#: new_decoder_architecture true with num_ln_in_parallel_attn 1 (one LayerNorm per block),
#: tie_word_embeddings false.
FALCON2 = (
    OpenModel("Falcon 2 11B", 11, (*dims(60, 4096, 16384, 32, 8, 65024), ("activation", "gelu"),
              ("norm", "layernorm"), ("tied_embeddings", False)),
              "tiiuae/falcon-11B model card (60 layers, d_model 4096, head_dim 128, vocabulary "
              "65024, parallel attention / MLP) and a config.json derived from it (ssmits/"
              "Falcon2-5.5B-Swedish, from tiiuae/falcon-11B: 32 heads, 8 key / value heads, "
              "ffn_hidden_size 16384, GELU, no biases, one LayerNorm, untied)",
              version=r"^(?!.*\bvlm\b)",  # not Falcon2-11B-vlm: its CLIP encoder is not timed
              unmodelled="Falcon's parallel attention / MLP block (both sub-blocks read one "
              "normed input and add to the residual together: the same GEMMs, timed as the "
              "sequential block)"),
)  # fmt: skip
