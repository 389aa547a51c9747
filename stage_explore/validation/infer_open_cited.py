"""Further open models a row may name without its dims (7 Dec 2026, s29 readers3): Falcon 7B /
40B, StarCoder2 3B / 7B / 15B and OLMo 2 13B, entries of
:data:`~stage_explore.validation.infer_open_models.OPEN_MODELS` beside the s28 / s29 families,
each from a config cited in the entry; and the models refused by name
(:data:`REFUSED_BY_NAME`) whose architecture the generator cannot time.

What these families have beyond the common decoder is set where the generator expresses it:
Falcon's and StarCoder2's non-gated GELU MLP (``activation gelu``: two FFN matrices) and
LayerNorm (``norm layernorm``), StarCoder2's biases on every linear layer (``bias``) and its
4,096-token sliding window, Falcon's multi-query / grouped-query attention, OLMo 2's query / key
RMSNorm. What it does not, and that leaves the matrix FLOPs as they are, is said in the row's
assumption (``unmodelled``): Falcon's parallel attention / MLP block computes the same two
sub-blocks from one normed input and adds both to the residual (the same GEMMs; the sequential
block's second norm is the one extra), OLMo 2's norms after, not before, each sub-block (as many
norms).
"""

from __future__ import annotations

from stage_explore.validation.infer_open_base import OpenModel, dims

_HF = "huggingface/transformers"

#: Falcon 7B: Hugging Face FalconConfig's defaults, "a similar configuration to that of the
#: tiiuae/falcon-7b architecture" (huggingface/transformers 05585536 src/transformers/models/
#: falcon/configuration_falcon.py: vocab_size 65024, hidden_size 4544, 32 layers, 71 heads,
#: multi_query True (one key / value head), parallel_attn True, bias False; the MLP is
#: dense_h_to_4h / dense_4h_to_h, 4 x hidden, GELU, as the falcon-7b module listing in
#: kimborgen/falcon-llm README.md shows: Linear(4544, 18176), GELU, Linear(18176, 4544),
#: LayerNorm((4544,)), one input_layernorm per block); tie_word_embeddings is not set there,
#: so PretrainedConfig's default (True) ties the output layer to the embedding.
#: Falcon 40B: the falcon-40b load log in ggerganov/llama.cpp README.md (the ggllm Falcon
#: port's README as stored: n_vocab 65024, n_embd 8192, n_head 128, n_head_kv 8, n_layer 60,
#: n_ff 32768), the same FalconConfig with new_decoder_architecture (two LayerNorms, one per
#: parallel branch).
_FALCON_BLOCK = (("activation", "gelu"), ("norm", "layernorm"), ("tied_embeddings", True))
_FALCON_UNMODELLED = (
    "Falcon's parallel attention / MLP block (both sub-blocks read one normed input and add to "
    "the residual together: the same GEMMs, timed as the sequential block)"
)
FALCON = (
    OpenModel("Falcon 7B", 7, (*dims(32, 4544, 18176, 71, 1, 65024), *_FALCON_BLOCK),
              f"{_HF} 05585536 src/transformers/models/falcon/configuration_falcon.py "
              "FalconConfig defaults, 'similar ... to tiiuae/falcon-7b' (vocab_size 65024, "
              "hidden_size 4544, 32 layers, 71 heads, multi_query True: 1 key / value head, "
              "parallel_attn True, bias False, tied by PretrainedConfig's default); FFN 18176 "
              "= 4 x hidden, GELU, LayerNorm (kimborgen/falcon-llm README.md falcon-7b "
              "module listing)", unmodelled=_FALCON_UNMODELLED),
    OpenModel("Falcon 40B", 40, (*dims(60, 8192, 32768, 128, 8, 65024), *_FALCON_BLOCK),
              "falcon-40b load log in ggerganov/llama.cpp README.md (the ggllm Falcon port: "
              "n_vocab 65024, n_embd 8192, n_head 128, n_head_kv 8, n_layer 60, n_ff 32768); "
              f"FalconConfig's block ({_HF} configuration_falcon.py: rotary, bias False, "
              "parallel_attn, new_decoder_architecture), GELU, LayerNorm, tied",
              unmodelled=_FALCON_UNMODELLED),
)  # fmt: skip

#: StarCoder2: NeMo 2.0's Starcoder2Config (NVIDIA-NeMo/Speech db1fbd8e nemo/collections/llm/
#: gpt/model/starcoder2.py: normalization LayerNorm, activation_func F.gelu, add_bias_linear
#: True, rope, share_embeddings_and_output_weights False) and its Starcoder2Config3B / 7B /
#: 15B sizes; vocab_size 49152 from Hugging Face Starcoder2Config (huggingface/transformers
#: 008e5743 configuration_starcoder2.py, "Starcoder2 7B style"); the 4,096-token sliding
#: window of every size from the Hugging Face model doc ("All models use Grouped Query
#: Attention, a context window of 16,384 tokens with a sliding window attention of 4,096
#: tokens", huggingface/transformers docs/source/en/model_doc/starcoder2.md), which NeMo's
#: config leaves unset (window_size None).
STARCODER2 = tuple(
    OpenModel(f"StarCoder2 {size}B", size,
              (*dims(*shape, 49152), ("activation", "gelu"), ("norm", "layernorm"),
               ("bias", True), ("tied_embeddings", False), ("layer_pattern", "swa+mlp*"),
               ("sliding_window", 4096)),
              f"NVIDIA-NeMo/Speech nemo/collections/llm/gpt/model/starcoder2.py "
              f"Starcoder2Config{size}B ({shape[0]} layers, hidden {shape[1]}, FFN {shape[2]}, "
              f"{shape[3]} heads, {shape[4]} query groups; Starcoder2Config: LayerNorm, GELU, "
              "add_bias_linear True, rope, untied); vocab_size 49152 (Hugging Face "
              "Starcoder2Config); sliding window 4096 at every size (Hugging Face model doc "
              "starcoder2.md)")
    for size, shape in (
        (3, (30, 3072, 12288, 24, 2)), (7, (32, 4608, 18432, 36, 4)),
        (15, (40, 6144, 24576, 48, 4)),
    )
)  # fmt: skip

#: OLMo 2 13B: allenai/OLMo-2-1124-13B's config.json (copied at mauer4/Attention-From-Scratch
#: 381a295f weights/allenai/OLMo-2-1124-13B/config.json: Olmo2ForCausalLM, 40 layers,
#: hidden_size 5120, intermediate_size 13824, 40 heads, 40 key / value heads, vocab_size
#: 100352, hidden_act silu, attention_bias false, tie_word_embeddings false); the query / key
#: RMSNorm and the norms after each sub-block are OLMo 2's (Hugging Face model doc olmo2.md:
#: "RMSNorm is used instead of standard layer norm. Norm is applied to attention queries and
#: keys. Norm is applied after attention/feedforward layers rather than before").
OLMO2 = (
    OpenModel("OLMo 2 13B", 13, (*dims(40, 5120, 13824, 40, 40, 100352), ("qk_norm", True),
              ("tied_embeddings", False)),
              "allenai/OLMo-2-1124-13B config.json (copied at mauer4/Attention-From-Scratch "
              "381a295f: 40 layers, hidden_size 5120, intermediate_size 13824, 40 heads, 40 "
              "key / value heads, vocab_size 100352, silu, no attention bias, untied); q / k "
              "norm per the Hugging Face olmo2 model doc",
              unmodelled="OLMo 2's norms after (not before) the attention / MLP, as many; its "
              "q / k norm spans all heads' width, timed as a per-head norm of the same size"),
)  # fmt: skip

#: (pattern on the lower-cased model text, why): models refused by name, dims stated or not,
#: whose architecture the generator cannot express and whose cost it would change materially.
REFUSED_BY_NAME: tuple[tuple[str, str], ...] = (
    (r"\bphi[\s_-]*3(?:\.5)?[\s_-]*small\b|\bphi[\s_-]*3(?![.\d])[\s_-]*7\s*b\b",
     "Phi-3 small's blocksparse attention in alternate layers (dense and blocksparse layers "
     "alternate; Phi-3 technical report, arXiv 2404.14219 section 2, and its GEGLU MLP): the "
     "generator times every attention layer as dense or a sliding window"),
)  # fmt: skip
