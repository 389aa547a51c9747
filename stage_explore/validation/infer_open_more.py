"""More common open dense models a row may name without its dims (7 Dec 2026, s29 readers2):
Llama 3.2 (1B, 3B) and Qwen3 dense (0.6B to 32B), entries of
:data:`~stage_explore.validation.infer_open_models.OPEN_MODELS` beside the s28 families.

Both tie their input and output embeddings at the small sizes (one vocabulary-by-hidden table
read by the embedding and the output layer): Llama 3.2 at both sizes, Qwen3 at 0.6B / 1.7B /
4B. Before, "Llama 3.2 1B" with empty dims was refused (no Llama 3 flavor of that size), and a
row stating its dims was read through the Llama 3 family with untied embeddings; "Qwen3 8B" was
refused (the Qwen3 rule holds only the MoE flavors 30B-A3B and 235B-A22B).

A framework may untie what the published config ties: AMD's Primus builds every Llama from
``llama_base.yaml``, which sets ``untie_embeddings_and_output_weights: true``
(:data:`UNTIED_BY_SOURCE`); a row whose text names Primus keeps untied embeddings.
"""

from __future__ import annotations

from stage_explore.validation.infer_open_base import OpenModel, dims

_NEMO = "NVIDIA-NeMo/Speech nemo/collections/llm/gpt/model"

#: Llama 3.2 1B / 3B: NeMo's Llama32Config1B / Llama32Config3B (llama.py, NVIDIA-NeMo/Speech
#: 7b2c814e: share_embeddings_and_output_weights True, 8 query groups, FFN 8192); the
#: vocabulary is the Llama 3 tokenizer's, given in the Hugging Face config.json
#: (meta-llama/Llama-3.2-1B and -3B: vocab_size 128256, tie_word_embeddings true, head_dim 64
#: / 128 = hidden / heads).
LLAMA32 = tuple(
    OpenModel(f"Llama 3.2 {size:g}B", size,
              (*dims(*shape, 128256), ("tied_embeddings", True)),
              f"{_NEMO}/llama.py Llama32Config{size:g}B ({shape[0]} layers, hidden {shape[1]}, "
              f"FFN {shape[2]}, {shape[3]} heads, {shape[4]} query groups, "
              "share_embeddings_and_output_weights True); vocab_size 128256 and "
              f"tie_word_embeddings true in huggingface.co/meta-llama/Llama-3.2-{size:g}B "
              "config.json")
    for size, shape in ((1, (16, 2048, 8192, 32, 8)), (3, (28, 3072, 8192, 24, 8)))
)  # fmt: skip

#: Qwen3 dense: NeMo's Qwen3Config (qwen3.py, NVIDIA-NeMo/Speech 4b2864f5: add_qkv_bias False,
#: qk_layernorm True, kv_channels 128, num_query_groups 8, vocab_size 151936) and its sizes,
#: share_embeddings_and_output_weights True at 0.6B / 1.7B / 4B (each "Config for Qwen 3 ...:
#: https://huggingface.co/Qwen/Qwen3-...").
QWEN3 = tuple(
    OpenModel(f"Qwen3 {size:g}B", size,
              (*dims(*shape, 8, 151936), ("head_dim", 128), ("qk_norm", True),
               ("tied_embeddings", tied)),
              f"{_NEMO}/qwen3.py {config} ({shape[0]} layers, hidden {shape[1]}, FFN "
              f"{shape[2]}, {shape[3]} heads; Qwen3Config: 8 query groups, kv_channels 128, "
              "qk_layernorm, no q / k / v bias, vocab_size 151936; "
              f"share_embeddings_and_output_weights {tied})")
    for size, shape, tied, config in (
        (0.6, (28, 1024, 3072, 16), True, "Qwen3Config600M"),
        (1.7, (28, 2048, 6144, 16), True, "Qwen3Config1P7B"),
        (4, (36, 2560, 9728, 32), True, "Qwen3Config4B"),
        (8, (36, 4096, 12288, 32), False, "Qwen3Config8B"),
        (14, (40, 5120, 17408, 40), False, "Qwen3Config14B"),
        (32, (64, 5120, 25600, 64), False, "Qwen3Config32B"),
    )
)  # fmt: skip

#: (pattern on a row's source / notes text, the families it unties, why): a framework whose
#: model configs untie what the published config ties.
UNTIED_BY_SOURCE: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (r"\bprimus\b", tuple(entry.name for entry in LLAMA32),
     "AMD-AGI/Primus primus/configs/models/megatron/llama_base.yaml (1b29bf7c): "
     "untie_embeddings_and_output_weights: true, the base of llama3_base.yaml (AMD-AIG-AIMA/"
     "Primus 09f03f5b, 'bases: - llama_base.yaml'), which llama3.2_1B.yaml (241f0d53) "
     "extends"),
)  # fmt: skip
