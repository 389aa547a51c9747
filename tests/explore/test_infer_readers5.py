"""The inferred reader on the fifth pass's open models (7 Dec 2026, s30 readers5).

Synthetic rows (tests, not validation rows) pin: Phi-3 mini / medium 4k with their config's
2,047-token sliding window on every layer and the 128k variants without one, Phi-3.5 mini,
Mistral Small 22B (2409), Codestral 22B, SmolLM2, InternLM2.5 1.8B, Granite 3.0 2B and
DeepSeek-V2.5 from their cited configs (the published
numbers written once below with their source), the parameter counts the dims give, that the
window changes the step only when the row's sequence exceeds it, and what is still left out."""

from __future__ import annotations

from functools import partial

import pytest

from stage_core.models.layers import Mixer
from stage_explore.validation.infer_open_models import find_open_model
from stage_explore.validation.run import evaluate_cases
from tests.explore.infer_helpers import (
    megatron_row,
    published_dims,
    synthetic_case,
    synthetic_model,
    synthetic_refusal,
)

#: A Megatron-LM row of 8 GPUs, all data parallel; the model cell is each test's.
BASE = megatron_row("READERS5-TEST")

_case = partial(synthetic_case, BASE, "readers5.csv")
_model = partial(synthetic_model, BASE, "readers5.csv")
_refused = partial(synthetic_refusal, BASE, "readers5.csv")

#: The published configs, copied once from the cited text: (layers, hidden, ffn, heads,
#: kv_heads, head_dim, vocab, tied).
PUBLISHED: dict[str, tuple[int, int, int, int, int, int, int, bool]] = {
    # microsoft/Phi-3.5-mini-instruct config.json (twelcone/pii-phi copy): hidden 3072,
    # intermediate 8192, 32 layers, 32 heads, 32 kv heads; vocab 32064, tie false
    # (ihughes15234/phi_3_5_mini_3k_each)
    "Phi-3.5-mini-instruct": (32, 3072, 8192, 32, 32, 3072 // 32, 32064, False),
    # microsoft/Phi-3-mini-128k-instruct config.json: hidden 3072, intermediate 8192, 32
    # layers, 32 heads, 32 kv heads, vocab 32064, tie false
    "Phi-3-mini-128k-instruct": (32, 3072, 8192, 32, 32, 3072 // 32, 32064, False),
    # microsoft/Phi-3-medium-128k-instruct config.json (refs/pr/5): hidden 5120, intermediate
    # 17920, 40 layers, 40 heads, 10 kv heads (vocab 32064, untied: the 4k's)
    "Phi-3-medium-128k-instruct": (40, 5120, 17920, 40, 10, 5120 // 40, 32064, False),
    # mistralai/Mistral-Small-Instruct-2409 config.json (minchyeom/letta copy): head_dim 128,
    # hidden 6144, intermediate 16384, 48 heads, 56 layers, 8 kv heads, vocab 32768, untied
    "Mistral-Small-Instruct-2409": (56, 6144, 16384, 48, 8, 128, 32768, False),
    # mistralai/Codestral-22B-v0.1 config.json (MrezaPRZ/codestral_bird_train copy): the same
    "Codestral-22B-v0.1": (56, 6144, 16384, 48, 8, 6144 // 48, 32768, False),
    # HuggingFaceTB/SmolLM2-1.7B-Instruct config.json (real-jiakai copy): head_dim 64,
    # hidden 2048, intermediate 8192, 32 heads, 24 layers, 32 kv heads, tied, vocab 49152
    "SmolLM2-1.7B": (24, 2048, 8192, 32, 32, 64, 49152, True),
    # HuggingFaceTB/SmolLM2-360M-Instruct (eduardoworrel copy): 960, 2560, 15 heads, 32
    # layers, 5 kv heads, head_dim 64, tied, vocab 49152
    "SmolLM2-360M": (32, 960, 2560, 15, 5, 64, 49152, True),
    # HuggingFaceTB/SmolLM2-135M (Rea-per/smol_course_module1 copy): 576, 1536, 9 heads, 30
    # layers, 3 kv heads, head_dim 64, tied, vocab 49152
    "SmolLM2-135M": (30, 576, 1536, 9, 3, 64, 49152, True),
    # internlm2_5-1_8b-chat config.json (Alannikos768/BanterBot_1_8b-chat copy): hidden 2048,
    # intermediate 8192, 16 heads, 24 layers, 8 kv heads, untied, vocab 92544
    "InternLM2.5 1.8B": (24, 2048, 8192, 16, 8, 2048 // 16, 92544, False),
    # huggingface.co/ibm-granite/granite-3.0-2b-instruct config.json: hidden 2048,
    # intermediate 8192, 32 heads, 40 layers, 8 kv heads, tied, vocab 49155
    "Granite 3.0 2B": (40, 2048, 8192, 32, 8, 2048 // 32, 49155, True),
    # deepseek-ai/DeepSeek-V2.5 config.json (nm-testing/DeepSeek-V2.5-W4A16 copy): 60 layers,
    # hidden 5120, intermediate 12288, 128 heads, 128 kv heads (vocab, tie: V2's)
    "DeepSeek-V2.5": (60, 5120, 12288, 128, 128, 128, 102400, False),
}  # fmt: skip

#: Other spellings a row may use, each the named entry of PUBLISHED.
SPELLINGS = (
    ("microsoft/Phi-3.5-mini-instruct", "Phi-3.5-mini-instruct"),
    ("Phi-3.5 mini 3.8B", "Phi-3.5-mini-instruct"),
    ("Phi-3 mini 128k", "Phi-3-mini-128k-instruct"),
    ("Phi-3 medium 14B 128K", "Phi-3-medium-128k-instruct"),
    ("Mistral Small 22B", "Mistral-Small-Instruct-2409"),
    ("mistral-small-2409", "Mistral-Small-Instruct-2409"),
    ("Codestral 22B", "Codestral-22B-v0.1"),
    ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "SmolLM2-1.7B"), ("SmolLM2 360M", "SmolLM2-360M"),
    ("smollm2-135m-instruct", "SmolLM2-135M"),
    ("internlm2.5-1.8b-chat", "InternLM2.5 1.8B"), ("granite-3.0-2b-instruct", "Granite 3.0 2B"),
    ("deepseek-ai/DeepSeek-V2.5-1210", "DeepSeek-V2.5"),
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
        # the parameter counts stated beside the configs: Phi-3.5-mini "3.8B parameters"
        # (its model card), Mistral Small (2409) "22B" and Codestral "22B" (their names),
        # SmolLM2 "1.7B" / "360M" / "135M" (their names)
        ("Phi-3.5 mini", 3.8), ("Mistral-Small-Instruct-2409", 22), ("Codestral 22B", 22),
        ("SmolLM2-1.7B", 1.7), ("SmolLM2-360M", 0.36), ("SmolLM2-135M", 0.135),
        # InternLM2.5 "1.8B" (its name); Granite 3.0 2B 2.53B as the 3.1 2B (the same dims)
        ("InternLM2.5 1.8B", 1.8), ("Granite 3.0 2B", 2.53),
    ],
)  # fmt: skip
def test_the_dims_give_the_stated_parameter_count(model: str, billions: float) -> None:
    assert abs(_model(model=model).params() / 1e9 / billions - 1) < 0.05


@pytest.mark.parametrize(
    "model", ["Phi-3 mini", "Phi-3-mini-4k-instruct", "Phi-3 medium", "Phi-3-medium-4k-instruct"]
)
def test_phi3_4k_slides_every_layer_over_2047_tokens(model: str) -> None:
    # "sliding_window": 2047 in the Phi-3 mini / medium 4k config.json copies
    spec = _model(model=model)
    assert spec.sliding_window == 2047
    assert {kind.mixer for kind in spec.layer_kinds()} == {Mixer.SLIDING}
    assert "sliding_window 2047" in " ".join(_case(model=model).assumptions)


@pytest.mark.parametrize(
    "model",
    ["Phi-3-mini-128k-instruct", "Phi-3-medium-128k-instruct", "Phi-3.5-mini-instruct",
     "Mistral-Small-Instruct-2409", "Codestral-22B-v0.1", "SmolLM2-1.7B"],
)  # fmt: skip
def test_the_others_attend_in_full(model: str) -> None:
    spec = _model(model=model)
    assert spec.sliding_window == 0
    assert {kind.mixer for kind in spec.layer_kinds()} == {Mixer.ATTENTION}


def _throughput(model: str, seq_len: str) -> float:
    (result,) = evaluate_cases([_case(model=model, seq_len=seq_len, global_batch_seqs="8",
                                      micro_batch="1")])  # fmt: skip
    assert result.evaluated, result.note
    return result.predicted


def test_the_window_matters_only_past_it() -> None:
    """At 4,096 tokens the 4k model's capped keys make its step faster than the 128k variant's
    (the same dims, full attention); at 2,048 the window (2,047 keys) leaves one key out of the
    last query only."""
    long = _throughput("Phi-3-mini-4k-instruct", "4096") / _throughput(
        "Phi-3-mini-128k-instruct", "4096")  # fmt: skip
    short = _throughput("Phi-3-mini-4k-instruct", "2048") / _throughput(
        "Phi-3-mini-128k-instruct", "2048")  # fmt: skip
    assert long > 1.01
    assert abs(short - 1) < 0.005


@pytest.mark.parametrize(
    "text",
    ["phi-3.5-moe-instruct", "phi-3.5-vision-instruct", "codestral-mamba-7b", "smollm-1.7b",
     "olmo-2-0425-1b", "mistral small 3.1 24b 2503"],
)  # fmt: skip
def test_other_generations_have_no_fifth_pass_entry(text: str) -> None:
    _, entry = find_open_model(text)
    assert entry is None or entry.name == "Mistral Small 3 24B"


def test_phi35_small_is_refused_by_name() -> None:
    assert "blocksparse attention" in _refused(model="Phi-3.5-small")


def test_a_params_b_of_another_smollm2_size_is_refused() -> None:
    reason = _refused(model="SmolLM2-360M", params_b="1.7")
    assert "params_b '1.7' is nearer SmolLM2 1.7B" in reason


def test_deepseek_v25_is_v2s_moe() -> None:
    # n_routed_experts 160, num_experts_per_tok 6, n_shared_experts 2, first_k_dense_replace 1,
    # n_group 8, q_lora_rank 1536, kv_lora_rank 512, qk_rope_head_dim 64 (the V2.5 config)
    spec = _model(model="DeepSeek-V2.5")
    got = (
        spec.num_experts,
        spec.top_k,
        spec.num_shared_experts,
        spec.first_k_dense,
        spec.router_groups,
        spec.q_lora_rank,
        spec.kv_lora_rank,
        spec.qk_rope_head_dim,
    )
    assert got == (160, 6, 2, 1, 8, 1536, 512, 64)  # fmt: skip
