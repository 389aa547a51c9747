"""The inferred reader on the sixth pass's open models (7 Dec 2026, s31 readers6).

Synthetic rows (tests, not validation rows) pin: the first LLaMA (7B, 13B, 33B / 30B, 65B),
Mistral Large 2 with its vocabulary, InternLM2.5 1.8B spelled with underscores, Phi-3.5-MoE and
DeepSeek-R1 from their cited configs (the published numbers written once below with their
source), the parameter counts the dims give against the counts published beside them, the
names that must not read as the first LLaMA, and the models refused by name in one line."""

from __future__ import annotations

from functools import partial

import pytest

from stage_explore.validation.infer_open_models import find_open_model
from stage_explore.validation.infer_open_sixth import decimal_size
from tests.explore.infer_helpers import (
    megatron_row,
    published_dims,
    synthetic_model,
    synthetic_refusal,
)

#: A Megatron-LM row of 8 GPUs, all data parallel; the model cell is each test's.
BASE = megatron_row("READERS6-TEST")

_model = partial(synthetic_model, BASE, "readers6.csv")
_refused = partial(synthetic_refusal, BASE, "readers6.csv")

#: The published configs, copied once from the cited text: (layers, hidden, ffn, heads,
#: kv_heads, head_dim, vocab, tied).
PUBLISHED: dict[str, tuple[int, int, int, int, int, int, int, bool]] = {
    # huggyllama/llama-7b config.json (musabgultekin/functionary-7b-v0.2 copy): hidden 4096,
    # intermediate 11008, 32 heads, 32 layers, tie false, vocab 32000
    "LLaMA-7B": (32, 4096, 11008, 32, 32, 128, 32000, False),
    # huggyllama/llama-13b (AlexeyChe/llama-13b-lora copy): 5120, 13824, 40 heads, 40 layers
    "LLaMA-13B": (40, 5120, 13824, 40, 40, 128, 32000, False),
    # huggyllama/llama-30b config.json: 6656, 17920, 52 heads, 60 layers (the paper's 33B)
    "LLaMA-33B": (60, 6656, 17920, 52, 52, 128, 32000, False),
    # huggyllama/llama-65b config.json (refs/pr/2): 8192, 22016, 64 heads, 80 layers
    "LLaMA-65B": (80, 8192, 22016, 64, 64, 128, 32000, False),
    # mistralai/Mistral-Large-Instruct-2407 config.json (ModelCloud gptq copy): head_dim 128,
    # hidden 12288, intermediate 28672, 96 heads, 88 layers, 8 kv heads, untied, vocab 32768
    "Mistral-Large-Instruct-2407": (88, 12288, 28672, 96, 8, 128, 32768, False),
    # internlm2_5-1_8b-chat config.json (s30 readers5's entry), named with underscores
    "internlm2_5-1_8b": (24, 2048, 8192, 16, 8, 128, 92544, False),
    # PhiMoEConfig defaults (vocab 32064, hidden 4096, intermediate 6400, 32 layers) and the
    # Phi-3.5-MoE-instruct config.json fields kept at Pearush/phi_moe_30_attn2 (32 heads, 8 kv
    # heads, untied)
    "Phi-3.5-MoE-instruct": (32, 4096, 6400, 32, 8, 128, 32064, False),
    # tiiuae/falcon-180B config.json (TheBloke/Falcon-180B-GPTQ copy): hidden 14848, 232 heads,
    # 8 kv heads, 80 layers, vocab 65024 (FFN: FalconConfig's 4 x hidden; tied: the default)
    "Falcon-180B": (80, 14848, 4 * 14848, 232, 8, 14848 // 232, 65024, True),
    # EleutherAI/gpt-neox-20b config.json (ybelkada copy): hidden 6144, intermediate 24576, 64
    # heads, 44 layers, vocab 50432, tie false
    "GPT-NeoX-20B": (44, 6144, 24576, 64, 64, 6144 // 64, 50432, False),
    # bigscience/bloom config.json (joaoalvarenga/bloom-8bit copy): n_embed 14336, n_layer 70,
    # 112 heads, vocab 250880 (FFN 4 x hidden, tied: BLOOM's block)
    "BLOOM 176B": (70, 14336, 4 * 14336, 112, 112, 14336 // 112, 250880, True),
    # CohereForAI/c4ai-command-r-v01 config.json (TechxGenus AWQ copy): hidden 8192,
    # intermediate 22528, 64 heads, 64 kv heads, 40 layers, vocab 256000; tied (Aratako copy)
    "c4ai-command-r-v01": (40, 8192, 22528, 64, 64, 128, 256000, True),
    # CohereForAI/c4ai-command-r-08-2024 (unsloth copy): intermediate 24576, 8 kv heads
    "c4ai-command-r-08-2024": (40, 8192, 24576, 64, 8, 128, 256000, True),
}  # fmt: skip

#: Other spellings a row may use, each the named entry of PUBLISHED.
SPELLINGS = (
    ("LLaMA 7B", "LLaMA-7B"), ("llama-1-13b", "LLaMA-13B"), ("huggyllama/llama-30b", "LLaMA-33B"),
    ("LLaMA 33B", "LLaMA-33B"), ("huggyllama/llama-65b", "LLaMA-65B"),
    ("Mistral Large 2", "Mistral-Large-Instruct-2407"),
    ("internlm/internlm2_5-1_8b-chat", "internlm2_5-1_8b"),
    ("microsoft/Phi-3.5-MoE-instruct", "Phi-3.5-MoE-instruct"),
    ("tiiuae/falcon-180B", "Falcon-180B"), ("EleutherAI/gpt-neox-20b", "GPT-NeoX-20B"),
    ("bigscience/bloom", "BLOOM 176B"), ("BLOOM (176B)", "BLOOM 176B"),
    ("Command R", "c4ai-command-r-v01"), ("Command R 35B", "c4ai-command-r-v01"),
    ("CohereForAI/c4ai-command-r-08-2024", "c4ai-command-r-08-2024"),
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
        # the LLaMA paper (arXiv 2302.13971) Table 2: 6.7B, 13.0B, 32.5B, 65.2B parameters
        ("LLaMA-7B", 6.7), ("LLaMA-13B", 13.0), ("LLaMA-33B", 32.5), ("LLaMA-65B", 65.2),
        # Mistral Large 2: "123B" (its name); Phi-3.5-MoE: 42B in total (its model card)
        ("Mistral Large 2", 123), ("Phi-3.5-MoE", 42),
        # Falcon-180B "180B", GPT-NeoX-20B "20B", BLOOM "176B" (their names; BLOOM's paper,
        # arXiv 2211.05100: 176B parameters)
        ("Falcon-180B", 180), ("GPT-NeoX-20B", 20), ("BLOOM 176B", 176),
        # Command R "35B" (v01's model card), the 08-2024 release "32B" (its model card)
        ("Command R", 35), ("c4ai-command-r-08-2024", 32),
    ],
)  # fmt: skip
def test_the_dims_give_the_stated_parameter_count(model: str, billions: float) -> None:
    assert abs(_model(model=model).params() / 1e9 / billions - 1) < 0.05


def test_phi35_moe_is_sixteen_experts_choosing_two() -> None:
    # num_local_experts 16, num_experts_per_tok 2; "6.6B active parameters" (Phi-3 technical
    # report, arXiv 2404.14219, the Phi-3.5-MoE section)
    spec = _model(model="Phi-3.5-MoE")
    assert (spec.num_experts, spec.top_k) == (16, 2)
    assert abs(spec.active_params() / 1e9 / 6.6 - 1) < 0.05


def test_deepseek_r1_is_deepseek_v3s_moe() -> None:
    # DeepSeek-R1 config.json (OPEA copy): 61 layers, hidden 7168, intermediate 18432, 256
    # routed experts of 2048, 1 shared, 8 per token, first_k_dense_replace 3, 128 heads
    spec = _model(model="DeepSeek-R1")
    got = (spec.layers, spec.hidden, spec.ffn, spec.num_experts, spec.num_shared_experts,
           spec.top_k, spec.first_k_dense, spec.heads)  # fmt: skip
    assert got == (61, 7168, 18432, 256, 1, 8, 3, 128)
    assert spec.params() == _model(model="DeepSeek-V3").params()


@pytest.mark.parametrize(
    "text",
    ["code llama 7b", "open llama 7b", "llama 3.1 8b (snowflake arctic alst)",
     "deepseek-r1-distill-llama-8b", "llama-2-7b-hf", "llama3-8b", "llama 3.1 8b",
     "llama 3 70b", "tinyllama 1.1b", "llama 4 scout 17b"],
)  # fmt: skip
def test_other_llamas_are_not_the_first_llama(text: str) -> None:
    _, entry = find_open_model(text)
    assert entry is None or not entry.name.startswith("LLaMA ")


@pytest.mark.parametrize(
    ("model", "block"),
    [
        # BLOOM: ALiBi (no position table), LayerNorm, GELU, biases (arXiv 2211.05100)
        ("BLOOM 176B", ("none", "layernorm", "gelu", True)),
        # GPT-NeoX-20B: rotary (rotary_pct 0.25), LayerNorm, gelu_fast, biases
        ("GPT-NeoX-20B", ("rotary", "layernorm", "gelu", True)),
        # Falcon-180B: rotary, LayerNorm, GELU, bias false
        ("Falcon-180B", ("rotary", "layernorm", "gelu", False)),
    ],
)  # fmt: skip
def test_the_block_is_the_model_s(model: str, block: tuple[str, str, str, bool]) -> None:
    spec = _model(model=model)
    got = (spec.position.value, spec.norm.value, spec.activation.value, spec.bias)
    assert got == block


@pytest.mark.parametrize("text", ["bloom-7b1", "bloom-style gpt (176b tr11 candidate)"])
def test_other_blooms_are_not_bloom_176b(text: str) -> None:
    reason = _refused(model=text)
    assert "no flavor of that size" in reason


def test_a_params_b_of_another_llama_size_is_refused() -> None:
    reason = _refused(model="LLaMA 7B", params_b="65")
    assert "params_b '65' is nearer LLaMA 65B" in reason


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ("Qwen3-Next-80B-A3B", "Gated DeltaNet"), ("Qwen3-Coder-Next", "Gated DeltaNet"),
        ("MiniMax-M1", "lightning attention"), ("MiniMax-Text-01", "lightning attention"),
        ("T5-11B", "an encoder-decoder"), ("Flan-T5-XXL", "an encoder-decoder"),
        ("mT5-XXL", "an encoder-decoder"), ("UL2 20B", "an encoder-decoder"),
        ("Snowflake Arctic", "dense residual MLP"), ("snowflake-arctic-instruct", "residual"),
    ],
)  # fmt: skip
def test_what_cannot_be_timed_is_refused_by_name(model: str, said: str) -> None:
    reason = _refused(model=model)
    assert said in reason and repr(model) in reason


@pytest.mark.parametrize(
    ("text", "spelled"),
    [("internlm2_5-1_8b-chat", "internlm2_5-1.8b-chat"), ("qwen2_5-0_5b", "qwen2_5-0.5b"),
     ("qwen2_5_7b", "qwen2_5_7b"), ("llama_3_1_8b", "llama_3_1_8b"), ("gemma 2 9b", "gemma 2 9b")],
)  # fmt: skip
def test_an_underscore_for_the_point_of_a_size_is_the_point(text: str, spelled: str) -> None:
    assert decimal_size(text) == spelled


def test_a_multi_head_entry_s_key_value_heads_follow_the_heads_a_row_states() -> None:
    # BLOOM 176B is multi-head (112 heads, 112 key / value heads): a row stating 32 heads and
    # no kv_heads is 32 of each, not 112 key / value heads over 32 heads (before: refused,
    # "kv_heads must divide heads")
    spec = _model(model="BLOOM 176B", heads="32", hidden="4096")
    assert (spec.heads, spec.kv_heads) == (32, 32)
    # a grouped-query entry keeps its own key / value heads (DBRX: 48 heads, 8 kv heads)
    assert _model(model="DBRX", heads="48").kv_heads == 8
    # the open-model table alike: Gemma 7B is multi-head (16 heads, 16 kv heads: NeMo's
    # GemmaConfig7B), Qwen2.5-7B grouped (28 heads, 4 kv heads: Qwen25Config7B)
    gemma = _model(model="Gemma 7B", heads="8")
    assert (gemma.heads, gemma.kv_heads) == (8, 8)
    assert _model(model="Qwen2.5-7B", heads="28").kv_heads == 4


@pytest.mark.parametrize("name", ["LLaMA-30B", "LLaMA 33B", "huggyllama/llama-30b"])
def test_llama_30b_and_33b_take_the_published_count(name: str) -> None:
    """The paper's 33B is Hugging Face's 30B (one config): a params_b of 32.5 beside either
    name reads that config, not a refusal as "nearer LLaMA 33B" (s31 lead, at the merge)."""
    spec = _model(model=name, params_b="32.5")
    assert published_dims(spec) == PUBLISHED["LLaMA-33B"]


def test_params_nearer_another_size_of_the_family_still_refused() -> None:
    """A params_b nearer another size of another config is still two models named."""
    assert "nearer" in _refused(model="LLaMA-7B", params_b="65.2")
