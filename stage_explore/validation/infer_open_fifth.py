"""Open models of the fifth pass (7 Dec 2026, s30 readers5): Phi-3's 4k sliding window and its
128k variants, Phi-3.5 mini, Mistral Small 22B (2409), Codestral 22B and SmolLM2, entries of
:data:`~stage_explore.validation.infer_open_models.OPEN_MODELS`, each from a config.json cited
in the entry (Hugging Face copies of the published configs, found in the ``docs`` corpus).

The window: Phi-3 mini and medium's 4k configs set ``sliding_window`` 2047 on every layer (the
model's ``swa`` layers, the window keys a query attends to); it changes the attention cost
only for sequences longer than the window (a 4,096-token row: each query's keys capped at
2,047; a 2,048-token row: no change but the one key the window leaves out of the last query).
The 128k variants (and Phi-3.5 mini, a 128k model) are timed with full attention: their
windows are at least their 131,072-token context.
"""

from __future__ import annotations

from stage_explore.validation.infer_open_base import Field, OpenModel, dims

_HF = "huggingface.co"

#: Phi-3 mini / medium 4k: ``"sliding_window": 2047`` in microsoft/Phi-3-mini-4k-instruct's
#: config.json (as duplicated at huggingface.co/Alignment-Lab-AI/idfkphi4kiguess, "Duplicate
#: from microsoft/Phi-3-mini-4k-instruct") and in microsoft/Phi-3-medium-4k-instruct's (as
#: copied at huggingface.co/fakezeta/Phi-3-medium-4k-instruct-ov-int8), both beside
#: max_position_embeddings 4096; the window on every layer (Phi3Config has no layer types).
PHI3_4K_WINDOW: tuple[Field, ...] = (("layer_pattern", "swa+mlp*"), ("sliding_window", 2047))
#: The 4k entries' version pattern: the model text does not name the 128k variant.
NOT_128K = r"^(?!.*128\s*k)"
PHI3_4K_WHERE = (
    "; sliding_window 2047 on every layer (the 4k config.json: microsoft/Phi-3-mini-4k-instruct "
    f"duplicated at {_HF}/Alignment-Lab-AI/idfkphi4kiguess, microsoft/Phi-3-medium-4k-instruct "
    f"copied at {_HF}/fakezeta/Phi-3-medium-4k-instruct-ov-int8; the Phi-3 report, arXiv "
    "2404.14219: the default context length 4K, 128K the long-context variant); it caps each "
    "query's keys only where the sequence exceeds it"
)

#: Phi-3 mini / medium 128k: the 4k models' dims (microsoft/Phi-3-mini-128k-instruct config.json
#: as copied at huggingface.co/stiucsib/phi3_lora_sft-mathinstruct-lima: hidden_size 3072,
#: intermediate_size 8192, num_hidden_layers 32, 32 heads and key / value heads, max_position_
#: embeddings 131072; microsoft/Phi-3-medium-128k-instruct config.json at refs/pr/5: hidden 5120,
#: intermediate 17920, 40 layers, 40 heads, 10 key / value heads, max_position_embeddings 131072)
#: with LongRoPE scaling (a position rescaling, no cost). Its window is not in the quoted text
#: for the medium; the mini's config carries sliding_window 262144 (as kept in
#: huggingface.co/yujiepan/phi-3-tiny-random, from microsoft/Phi-3-mini-128k-instruct): no
#: window below the context, timed as full attention.
PHI3_128K = (
    OpenModel("Phi-3 mini 3.8B 128k", 3.8, dims(32, 3072, 8192, 32, 32, 32064),
              f"{_HF}/microsoft/Phi-3-mini-128k-instruct config.json (32 layers, hidden 3072, "
              "intermediate 8192, 32 heads, 32 key / value heads, vocab_size 32064, "
              "max_position_embeddings 131072, sliding_window 262144: full attention at any "
              "row's sequence, untied)", alias=r"\bmini\b", version=r"128\s*k"),
    OpenModel("Phi-3 medium 14B 128k", 14, dims(40, 5120, 17920, 40, 10, 32064),
              f"{_HF}/microsoft/Phi-3-medium-128k-instruct config.json (40 layers, hidden "
              "5120, intermediate 17920, 40 heads, 10 key / value heads, "
              "max_position_embeddings 131072; vocab_size 32064 and untied as the 4k's): "
              "timed with full attention (a 128k-context model)",
              alias=r"\bmedium\b", version=r"128\s*k"),
)  # fmt: skip

#: Phi-3.5 mini: microsoft/Phi-3.5-mini-instruct's config.json as copied at
#: huggingface.co/twelcone/pii-phi and huggingface.co/anakin87/Phi-3.5-mini-ITA
#: (_name_or_path microsoft/Phi-3.5-mini-instruct, Phi3ForCausalLM: hidden_size 3072,
#: intermediate_size 8192, num_hidden_layers 32, num_attention_heads 32, num_key_value_heads
#: 32, max_position_embeddings 131072); vocab_size 32064 and tie_word_embeddings false from
#: the same model converted to Llama (huggingface.co/ihughes15234/phi_3_5_mini_3k_each, from
#: unsloth/phi-3.5-mini-instruct). A 128k-context model: timed with full attention (its
#: window is not in the quoted text). Not Phi-3.5-MoE / vision (other architectures; Phi-3.5
#: small does not exist, refused as Phi-3 small).
PHI35 = (
    OpenModel("Phi-3.5 mini 3.8B", 3.8, dims(32, 3072, 8192, 32, 32, 32064),
              f"{_HF}/microsoft/Phi-3.5-mini-instruct config.json (copied at {_HF}/"
              "twelcone/pii-phi: 32 layers, hidden 3072, intermediate 8192, 32 heads, 32 key / "
              "value heads, max_position_embeddings 131072); vocab_size 32064, untied "
              f"({_HF}/ihughes15234/phi_3_5_mini_3k_each); a 128k model, full attention",
              alias=r"\bmini\b"),
)  # fmt: skip

#: Mistral Small 22B (v24.09) and Codestral 22B share one shape: mistralai/Mistral-Small-
#: Instruct-2409's config.json as copied at huggingface.co/minchyeom/letta (MistralForCausalLM:
#: head_dim 128, hidden_size 6144, intermediate_size 16384, num_attention_heads 48,
#: num_hidden_layers 56, num_key_value_heads 8, sliding_window null, tie_word_embeddings
#: false, vocab_size 32768) and mistralai/Codestral-22B-v0.1's as copied at
#: huggingface.co/MrezaPRZ/codestral_bird_train (the same dims, sliding_window null, untied,
#: vocab_size 32768).
_MISTRAL22 = (*dims(56, 6144, 16384, 48, 8, 32768), ("head_dim", 128))
MISTRAL_SMALL_22B = (
    OpenModel("Mistral Small 22B", 22, _MISTRAL22,
              "mistralai/Mistral-Small-Instruct-2409 config.json (copied at "
              f"{_HF}/minchyeom/letta: 56 layers, hidden 6144, intermediate 16384, 48 heads, 8 "
              "key / value heads, head_dim 128, vocab_size 32768, sliding_window null, untied)",
              alias=r"\b2409\b", version=r"small"),
)  # fmt: skip
CODESTRAL = (
    OpenModel("Codestral 22B", 22, _MISTRAL22,
              "mistralai/Codestral-22B-v0.1 config.json (copied at "
              f"{_HF}/MrezaPRZ/codestral_bird_train: 56 layers, hidden 6144, intermediate "
              "16384, 48 heads, 8 key / value heads, vocab_size 32768, sliding_window null, "
              "untied)"),
)  # fmt: skip

#: SmolLM2 (Hugging Face, LlamaForCausalLM, tied embeddings, vocab_size 49152): 1.7B from
#: HuggingFaceTB/SmolLM2-1.7B-Instruct's config.json as copied at
#: huggingface.co/real-jiakai/SmolLM2-1.7B-TLDR (hidden_size 2048, intermediate_size 8192,
#: num_hidden_layers 24, 32 heads and key / value heads, head_dim 64); 360M from
#: HuggingFaceTB/SmolLM2-360M-Instruct's as copied at huggingface.co/eduardoworrel/
#: SmolLM2-360M-Instruct (hidden 960, intermediate 2560, 32 layers, 15 heads, 5 key / value
#: heads, head_dim 64); 135M from HuggingFaceTB/SmolLM2-135M's as copied at
#: huggingface.co/Rea-per/smol_course_module1 (hidden 576, intermediate 1536, 30 layers, 9
#: heads, 3 key / value heads, head_dim 64). Not the first SmolLM (its own configs).
_SMOL_WHERE = "config.json (LlamaForCausalLM, vocab_size 49152, tie_word_embeddings true; copied at"
SMOLLM2 = (
    OpenModel("SmolLM2 1.7B", 1.7, (*dims(24, 2048, 8192, 32, 32, 49152),
              ("tied_embeddings", True)),
              f"HuggingFaceTB/SmolLM2-1.7B-Instruct {_SMOL_WHERE} {_HF}/real-jiakai/"
              "SmolLM2-1.7B-TLDR: 24 layers, hidden 2048, intermediate 8192, 32 heads, 32 key "
              "/ value heads)"),
    OpenModel("SmolLM2 360M", 0.36, (*dims(32, 960, 2560, 15, 5, 49152),
              ("tied_embeddings", True)),
              f"HuggingFaceTB/SmolLM2-360M-Instruct {_SMOL_WHERE} {_HF}/eduardoworrel/"
              "SmolLM2-360M-Instruct: 32 layers, hidden 960, intermediate 2560, 15 heads, 5 "
              "key / value heads)", alias=r"\b360\s*m\b"),
    OpenModel("SmolLM2 135M", 0.135, (*dims(30, 576, 1536, 9, 3, 49152),
              ("tied_embeddings", True)),
              f"HuggingFaceTB/SmolLM2-135M {_SMOL_WHERE} {_HF}/Rea-per/smol_course_module1: "
              "30 layers, hidden 576, intermediate 1536, 9 heads, 3 key / value heads)",
              alias=r"\b135\s*m\b"),
)  # fmt: skip

#: InternLM2.5 1.8B: internlm2_5-1_8b-chat's config.json as copied at
#: huggingface.co/Alannikos768/BanterBot_1_8b-chat (_name_or_path .../internlm2_5-1_8b-chat,
#: InternLM2ForCausalLM: bias false, hidden_size 2048, intermediate_size 8192,
#: num_attention_heads 16, num_hidden_layers 24, num_key_value_heads 8, tie_word_embeddings
#: false, vocab_size 92544; dynamic RoPE scaling, no cost). The spelling "internlm2_5-1_8b"
#: (an underscore for the point) states no 1.8 and stays refused, naming the held sizes.
INTERNLM25_SMALL = (
    OpenModel("InternLM2.5 1.8B", 1.8, dims(24, 2048, 8192, 16, 8, 92544),
              f"internlm2_5-1_8b-chat config.json (copied at {_HF}/Alannikos768/"
              "BanterBot_1_8b-chat: 24 layers, hidden 2048, intermediate 8192, 16 heads, 8 key "
              "/ value heads, vocab_size 92544, no bias, untied)"),
)  # fmt: skip

#: Granite 3.0 2B: huggingface.co/ibm-granite/granite-3.0-2b-instruct/blame/main/config.json
#: (GraniteForCausalLM: hidden_size 2048, intermediate_size 8192, num_attention_heads 32,
#: num_hidden_layers 40, num_key_value_heads 8, tie_word_embeddings true, vocab_size 49155,
#: max_position_embeddings 4096, rope_theta 10000, embedding / attention / residual
#: multipliers and logits_scaling as the 3.1 2B's): the 3.1 2B's dims at the 3.0 context.
GRANITE30_2B_WHERE = (
    f"{_HF}/ibm-granite/granite-3.0-2b-instruct config.json (40 layers, hidden 2048, "
    "intermediate 8192, 32 heads, 8 key / value heads, vocab_size 49155, tied)"
)
GRANITE30_2B_FIELDS: tuple[Field, ...] = (
    *dims(40, 2048, 8192, 32, 8, 49155), ("tied_embeddings", True),
)  # fmt: skip
