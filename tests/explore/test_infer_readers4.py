"""The inferred reader on the fourth pass's open models (7 Dec 2026, s30 readers4).

Synthetic rows (tests, not validation rows) pin: each model named alone set up from its cited
config, the published numbers written once below with their source (OLMo 1B / 7B, OLMo 2 7B /
32B, Phi-3 medium, Phi-4, Granite 3.0 / 3.1, Falcon3, DeepSeek-V2 236B), the block fields
each entry sets (OLMo's LayerNorm, OLMo 2's q / k norm, DeepSeek-V2's experts and latent
attention), the published parameter counts the dims give, and what is still left out
(other generations and sizes, the MoE Granites, Falcon3-Mamba)."""

from __future__ import annotations

from functools import partial

import pytest

from stage_explore.validation.infer_open_models import find_open_model
from tests.explore.infer_helpers import (
    megatron_row,
    published_dims,
    synthetic_case,
    synthetic_model,
    synthetic_refusal,
)

#: A Megatron-LM row of 8 GPUs, all data parallel; the model cell is each test's.
BASE = megatron_row("READERS4-TEST")

_case = partial(synthetic_case, BASE, "readers4.csv")
_model = partial(synthetic_model, BASE, "readers4.csv")
_refused = partial(synthetic_refusal, BASE, "readers4.csv")

#: The published configs, copied once from the cited text: (layers, hidden, ffn, heads,
#: kv_heads, head_dim, vocab, tied).
PUBLISHED: dict[str, tuple[int, int, int, int, int, int, int, bool]] = {
    # allenai/OLMo configs/official/OLMo-1B.yaml: d_model 2048, n_heads 16, n_layers 16,
    # mlp_ratio 8 (SwiGLU: 16384 / 2), weight_tying true, embedding_size 50304
    "OLMo 1B": (16, 2048, 16384 // 2, 16, 16, 2048 // 16, 50304, True),
    # allenai/OLMo configs/official/OLMo-7B.yaml: d_model 4096, n_heads 32, n_layers 32,
    # mlp_hidden_size 22016 (SwiGLU: / 2), weight_tying false, embedding_size 50304
    "OLMo 7B": (32, 4096, 22016 // 2, 32, 32, 4096 // 32, 50304, False),
    # huggingface/transformers configuration_olmo2.py Olmo2Config ("Olmo2 7B style"): hidden
    # 4096, intermediate 11008, 32 layers, 32 heads, kv = heads, untied; vocab 100352
    # (huggingface.co/allenai/OLMo-2-1124-7B config.json)
    "OLMo 2 7B": (32, 4096, 11008, 32, 32, 128, 100352, False),
    # huggingface.co/allenai/OLMo-2-0325-32B/raw/cc9d3cf9/config.json: hidden 5120, 40 heads,
    # 8 kv heads, intermediate 27648, 64 layers, vocab 100352
    "OLMo 2 32B": (64, 5120, 27648, 40, 8, 5120 // 40, 100352, False),
    # huggingface.co/microsoft/Phi-3-medium-4k-instruct config.json: hidden 5120, 40 heads,
    # 10 kv heads, head_dim 128, intermediate 17920, 40 layers, vocab 32064
    "Phi-3 medium": (40, 5120, 17920, 40, 10, 128, 32064, False),
    # huggingface.co/microsoft/phi-4/raw/2db69c1c/config.json: hidden 5120, 40 heads, 10 kv
    # heads, head_dim 128, intermediate 17920, 40 layers, vocab 100352, tie false
    "Phi-4": (40, 5120, 17920, 40, 10, 128, 100352, False),
    # foundation-model-stack fms/models/granite.py _8b_config: emb_dim 4096, nheads 32,
    # kvheads 8, nlayers 40, hidden_grow_factor 12800 / 4096, src_vocab 49155, tie_heads True
    "Granite 3.0 8B": (40, 4096, 12800, 32, 8, 4096 // 32, 49155, True),
    # the same file's _3_1_2b_config: emb_dim 2048, nheads 32, kvheads 8, nlayers 40,
    # hidden_grow_factor 8192 / 2048, src_vocab 49155, tie_heads True
    "Granite 3.1 2B": (40, 2048, 8192, 32, 8, 2048 // 32, 49155, True),
    # xxxn3m3s1sxxx/ATLAS-TQ1_0 scripts/release_to_hf.py KNOWN_CONFIGS (Falcon3 1B / 3B / 7B)
    "Falcon3 1B": (18, 2048, 8192, 8, 4, 256, 131072, False),
    "Falcon3 3B": (22, 3072, 9216, 12, 4, 256, 131072, False),
    "Falcon3 7B": (28, 3072, 23040, 12, 4, 256, 131080, False),
    # huggingface.co/tiiuae/Falcon3-10B-Base/raw/34bb99a8/config.json
    "Falcon3 10B": (40, 3072, 23040, 12, 4, 256, 131072, False),
    # huggingface.co/01-ai/Yi-1.5-9B config.json (and 01-ai/Yi-9B's, snapshot a06d5c1b): 48
    # layers, hidden 4096, intermediate 11008, 32 heads, 4 kv heads, vocab 64000, untied
    "Yi-1.5-9B": (48, 4096, 11008, 32, 4, 4096 // 32, 64000, False),
    # huggingface.co/01-ai/Yi-1.5-6B-Chat config.json at dd86db5e: 32 layers, 4096, 11008,
    # 32 / 4 heads, vocab 64000, untied
    "Yi-1.5-6B": (32, 4096, 11008, 32, 4, 4096 // 32, 64000, False),
    # internlm2_5-7b (Tongjilibo/bert4torch_config): 32 layers, 4096, 14336, 32 / 8, 92544
    "InternLM2.5 7B": (32, 4096, 14336, 32, 8, 4096 // 32, 92544, False),
    # internlm2_5-20b-chat config.json (c01zaut copy): 48 layers, 6144, 16384, 48 / 8, 92544
    "InternLM2.5 20B": (48, 6144, 16384, 48, 8, 6144 // 48, 92544, False),
    # tiiuae/falcon-11B model card (60 layers, d_model 4096, head_dim 128, vocab 65024) and the
    # ssmits/Falcon2-5.5B-Swedish config.json derived from it (32 heads, 8 kv heads,
    # ffn_hidden_size 16384, tie_word_embeddings false)
    "Falcon2-11B": (60, 4096, 16384, 4096 // 128, 8, 128, 65024, False),
    # AMD-AIG-AIMA/Primus deepseek_v2.yaml (60 layers, hidden 5120, dense FFN 12288, 128
    # heads, kv_channels 128) and DeepSeek-V2's config.json (vocab 102400, 128 kv heads, untied)
    "DeepSeek-V2": (60, 5120, 12288, 128, 128, 128, 102400, False),
}  # fmt: skip

#: Other spellings a row may use, each the named entry of PUBLISHED.
SPELLINGS = (
    ("allenai/OLMo-1B", "OLMo 1B"), ("OLMo-7B-hf", "OLMo 7B"),
    ("allenai/OLMo-2-1124-7B", "OLMo 2 7B"), ("OLMo-2-0325-32B-Instruct", "OLMo 2 32B"),
    ("Phi-3-medium-128k-instruct", "Phi-3 medium"), ("Phi-3 medium 14B", "Phi-3 medium"),
    ("microsoft/phi-4", "Phi-4"), ("Phi-4 14B", "Phi-4"),
    ("ibm-granite/granite-3.1-8b-base", "Granite 3.0 8B"), ("Granite 3 8B", "Granite 3.0 8B"),
    ("granite-3.1-2b-instruct", "Granite 3.1 2B"),
    ("tiiuae/Falcon3-1B-Base", "Falcon3 1B"), ("Falcon3-3B-Instruct", "Falcon3 3B"),
    ("Falcon 3 7B", "Falcon3 7B"), ("falcon3-10b-base", "Falcon3 10B"),
    ("deepseek-ai/DeepSeek-V2", "DeepSeek-V2"), ("DeepSeek-V2 236B", "DeepSeek-V2"),
    ("DeepSeek V2 Chat", "DeepSeek-V2"),
    ("01-ai/Yi-9B", "Yi-1.5-9B"), ("Yi 1.5 6B", "Yi-1.5-6B"),
    ("internlm/internlm2_5-7b-chat", "InternLM2.5 7B"), ("internlm2_5-20b-chat", "InternLM2.5 20B"),
    ("tiiuae/falcon-11B", "Falcon2-11B"), ("Falcon 2 11B", "Falcon2-11B"),
)  # fmt: skip


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_named_alone_reads_the_cited_config(model: str) -> None:
    assert published_dims(_model(model=model)) == PUBLISHED[model]


@pytest.mark.parametrize(("model", "entry"), SPELLINGS)
def test_other_spellings_read_the_same_config(model: str, entry: str) -> None:
    assert published_dims(_model(model=model)) == PUBLISHED[entry]


@pytest.mark.parametrize(
    ("model", "billions"),
    [
        # the parameter counts stated where the configs were found: DeepSeek-V2 "236B total
        # params" (Primus deepseek_v2.yaml's header), Phi-3 medium "14B parameters" (the
        # Phi-3-medium-128k-instruct model card), Phi-4 "14 billion parameters" (a Phi-4
        # deployment README), Granite 3.x 8B 8,170,864,640 and 2B 2,530,000,000 (a table of
        # Granite configs' num_parameters), Yi-9B "approximately 8.8B" (01.AI's Yi-9B blog
        # post), Falcon2-11B "11B parameters" (its model card)
        ("DeepSeek-V2", 236), ("Phi-3 medium", 14), ("Phi-4", 14), ("Granite 3.0 8B", 8.17),
        ("Granite 3.1 2B", 2.53), ("Yi-1.5-9B", 8.8), ("Falcon2-11B", 11),
    ],
)  # fmt: skip
def test_the_dims_give_the_stated_parameter_count(model: str, billions: float) -> None:
    """Within 5 %: a round figure on a card (Phi-4's 14B is 14.7B) beside a wrong dim, which
    moves the count by far more (a layer of Phi-4 is 2.3 % of it, its FFN 59 %)."""
    assert abs(_model(model=model).params() / 1e9 / billions - 1) < 0.05


def test_deepseek_v2_experts_and_latent_attention() -> None:
    spec = _model(model="DeepSeek-V2")
    moe = (
        spec.num_experts,
        spec.top_k,
        spec.expert_ffn,
        spec.num_shared_experts,
        spec.first_k_dense,
        spec.router_groups,
        spec.router_group_topk,
        spec.mtp_layers,
    )
    # Primus deepseek_v2.yaml / deepseek_v2_base.yaml: 160 experts of 1536, top-6, 2 shared
    # (3072 = 2 x 1536), moe_layer_freq [0]*1 + [1]*59, 8 groups choosing 3; no MTP module
    assert moe == (160, 6, 1536, 2, 1, 8, 3, 0)
    mla = (spec.q_lora_rank, spec.kv_lora_rank, spec.qk_rope_head_dim, spec.v_head_dim)
    assert mla == (1536, 512, 64, 128)
    assert round(spec.active_params() / 1e9) == 21  # "21B active params" (Primus's header)


def test_deepseek_v2_lite_keeps_its_own_flavor() -> None:
    spec = _model(model="DeepSeek-V2-Lite")
    assert (spec.name, spec.layers, spec.num_experts) == ("DeepSeek-V2-Lite", 27, 64)


@pytest.mark.parametrize("model", ["OLMo 1B", "OLMo 7B"])
def test_olmo_block(model: str) -> None:
    spec = _model(model=model)
    assert (spec.norm.value, spec.activation.value, spec.bias, spec.qk_norm) == (
        "layernorm", "swiglu", False, False)  # fmt: skip
    assert "no scale or shift" in " ".join(_case(model=model).assumptions)


@pytest.mark.parametrize("model", ["OLMo 2 7B", "OLMo 2 32B"])
def test_olmo2_block(model: str) -> None:
    spec = _model(model=model)
    assert spec.qk_norm and spec.norm.value == "rmsnorm"


def test_falcon2_block() -> None:
    spec = _model(model="Falcon2-11B")
    assert (spec.norm.value, spec.activation.value, spec.bias) == ("layernorm", "gelu", False)
    assert "parallel attention / MLP block" in " ".join(_case(model="Falcon2-11B").assumptions)


def test_granite_multipliers_are_said() -> None:
    said = " ".join(_case(model="Granite 3.0 8B").assumptions)
    assert "scalar embedding / attention / residual / logits multipliers" in said


def test_a_stated_dim_wins() -> None:
    spec = _model(model="Phi-4", layers="20", vocab="100000")
    assert (spec.layers, spec.vocab, spec.hidden) == (20, 100000, 5120)
    spec = _model(model="DeepSeek-V2", layers="30")
    assert (spec.layers, spec.num_experts) == (30, 160)


@pytest.mark.parametrize(
    "text",
    ["olmo-1.7-7b", "olmo-3-7b", "olmoe-1b-7b", "olmo-2-0425-1b", "phi-4-mini-instruct",
     "phi-4-multimodal-instruct", "granite-3.3-8b-instruct", "granite-3.0-1b-a400m-base",
     "granite-3.1-3b-a800m-instruct", "falcon3-mamba-7b-base", "falcon-11b-vlm",
     "deepseek-v2.5", "deepseek-v2-lite"],  # internlm2.5-1.8b: an entry since s30 readers5
)  # fmt: skip
def test_other_generations_and_sizes_have_no_open_entry(text: str) -> None:
    assert find_open_model(text)[1] is None


def test_a_granite_3_size_not_held_is_refused_naming_the_held_sizes() -> None:
    # Granite 3.0 2B has an entry since s30 readers5 (its own config; test_infer_readers5.py)
    reason = _refused(model="Granite 3.0 20B")
    assert "Granite 3.0 / 3.1 8B, Granite 3.1 2B, Granite 3.0 2B" in reason


def test_phi3_small_is_still_refused_by_name() -> None:
    assert "blocksparse attention" in _refused(model="Phi-3-small-8k-instruct")
