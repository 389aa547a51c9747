"""Rows naming a common open model without its dims (6 Dec 2026, s28 readers): Gemma / Gemma 2 /
Gemma 3, Mistral 7B / NeMo 12B / Small 3 / Large 2, Qwen2 / Qwen2.5, Phi-3 mini and Baichuan 2
are set up from their published configs (stage_explore/validation/infer_open_models.py, each
cited); before, a row leaving the architecture columns empty was refused, and one stating them
was timed with head dim hidden / heads and untied embeddings."""

from __future__ import annotations

from functools import partial

import pytest

from stage_explore.validation.infer_open_models import OPEN_MODELS, find_open_model
from tests.explore.infer_helpers import published_dims, synthetic_case, synthetic_model

#: A torchtitan row of 8 GPUs, all data parallel, naming only its model.
BASE = {
    "id": "OPEN-TEST", "source": "torchtitan benchmark", "gpu": "H100", "num_gpus": "8",
    "tp": "1", "pp": "1", "dp": "8", "seq_len": "4096", "global_batch_seqs": "16",
    "micro_batch": "2", "precision": "bf16", "tokens_per_s_per_gpu": "4000",
}  # fmt: skip


_case = partial(synthetic_case, BASE, "open.csv")
_model = partial(synthetic_model, BASE, "open.csv")


@pytest.mark.parametrize(
    ("model", "dims"),
    [
        # (layers, hidden, ffn, heads, kv_heads, head_dim, vocab, tied)
        ("Gemma 7B", (28, 3072, 24576, 16, 16, 256, 256000, True)),
        ("google/gemma-2b", (18, 2048, 16384, 8, 1, 256, 256000, True)),
        ("Gemma 2 27B", (46, 4608, 36864, 32, 16, 128, 256000, True)),
        ("gemma-3-12b-pt", (48, 3840, 15360, 16, 8, 256, 262208, True)),
        ("Gemma 3 1B", (26, 1152, 6912, 4, 1, 256, 262144, True)),
        ("Mistral 7B", (32, 4096, 14336, 32, 8, 128, 32000, False)),
        ("Mistral-7B-v0.3", (32, 4096, 14336, 32, 8, 128, 32768, False)),
        ("Mistral NeMo 12B", (40, 5120, 14336, 32, 8, 128, 131072, False)),
        ("Mistral-Small-24B-Base-2501", (40, 5120, 32768, 32, 8, 128, 131072, False)),
        ("Qwen2.5-7B", (28, 3584, 18944, 28, 4, 128, 152064, False)),
        ("Qwen2 0.5B", (24, 896, 4864, 14, 2, 64, 151936, True)),
        ("Qwen2.5 72B", (80, 8192, 29568, 64, 8, 128, 152064, False)),
        ("Phi-3-mini-4k-instruct", (32, 3072, 8192, 32, 32, 96, 32064, False)),
        ("Baichuan2-7B-Base", (32, 4096, 11008, 32, 32, 128, 125696, False)),
        ("Yi-1.5-34B", (60, 7168, 20480, 56, 8, 128, 64000, False)),
        ("internlm2-20b", (48, 6144, 16384, 48, 8, 128, 92544, False)),
    ],
)
def test_a_named_model_takes_its_published_config(
    model: str, dims: tuple[int, int, int, int, int, int, int, bool]
) -> None:
    spec = _model(model=model)
    assert published_dims(spec) == dims


def test_gemma_2_alternates_local_and_global_layers() -> None:
    spec = _model(model="Gemma 2 9B")
    kinds = [kind.token for kind in spec.layer_kinds()]
    assert kinds[:4] == ["attn+mlp", "swa+mlp", "attn+mlp", "swa+mlp"] and len(kinds) == 42
    assert spec.sliding_window == 4096


def test_gemma_3_has_five_local_layers_to_one_global_and_qk_norm() -> None:
    spec = _model(model="Gemma 3 27B")
    kinds = [kind.token for kind in spec.layer_kinds()]
    assert kinds.count("attn+mlp") == 10 and kinds[5] == "attn+mlp" and len(kinds) == 62
    assert spec.sliding_window == 1024 and spec.qk_norm


def test_the_first_mistral_7b_slides_its_window_in_every_layer() -> None:
    spec = _model(model="Mistral 7B v0.1")
    assert {kind.token for kind in spec.layer_kinds()} == {"swa+mlp"}
    assert spec.sliding_window == 4096
    assert _model(model="Mistral 7B v0.2").sliding_window == 0


def test_baichuan_2_13b_has_no_position_table() -> None:
    spec = _model(model="Baichuan 2 13B")
    assert str(spec.position) == "none" and spec.vocab == 125696


def test_dims_the_row_states_win() -> None:
    spec = _model(model="Gemma 7B", layers="20", vocab="32000", notes="head_dim 128")
    assert (spec.layers, spec.vocab, spec.head_dim, spec.hidden) == (20, 32000, 128, 3072)


def test_the_assumption_cites_the_config() -> None:
    case = _case(model="Qwen2.5-14B")
    said = " ".join(case.assumptions)
    assert "Qwen25Config14B" in said and "q / k / v projection biases" in said


@pytest.mark.parametrize(
    ("cells", "said"),
    [
        ({"model": "Gemma 7B", "moe": "8 experts, top-2"}, "is the dense Gemma 7B"),
        ({"model": "Gemma 7B head_dim 256", "notes": "kv_channels 128"}, "head dims 128, 256"),
        ({"model": "Mistral 7B", "kv_heads": "MLA"}, "the kv_heads column says 'MLA'"),
    ],
)
def test_what_cannot_be_read_is_refused_in_one_line(cells: dict[str, str], said: str) -> None:
    case = _case(**cells)
    assert case.model is None and said in case.reason and "\n" not in case.reason


@pytest.mark.parametrize(
    "model",
    # Phi-3 medium, Yi-1.5-6B have entries since s30 readers4 (test_infer_readers4.py),
    # InternLM2.5 1.8B since s30 readers5 (test_infer_readers5.py)
    ["Gemma 3n E4B", "Qwen2.5-VL-7B", "OLMo 2 1B", "Gemma 2 13B", "CodeGemma 7B",
     "InternLM2.5-3B"],
)  # fmt: skip
def test_a_size_or_variant_the_table_lacks_is_the_common_decoder_as_before(model: str) -> None:
    """Without the architecture columns the common decoder refuses the row, as it did."""
    case = _case(model=model)
    assert case.model is None and "the CSV does not state layers" in case.reason


@pytest.mark.parametrize(
    ("model", "held"),
    # Phi-3 medium has an entry since s30 readers4 (Phi-3 7B, small, is refused by name)
    # (Yi-1.5-9B has an entry since s30 readers4)
    # (and the 128k variants since s30 readers5: the 4k entries carry the 4k window)
    [("Phi-3 5B", "Phi-3 mini 3.8B, Phi-3 medium 14B, Phi-3 mini 3.8B 128k, Phi-3 medium 14B "
      "128k"),
     ("Yi 3B", "Yi 6B, Yi 34B, Yi 9B / Yi-1.5 9B"),
     ("Gemma 2 13B", "Gemma 2 2B, Gemma 2 9B, Gemma 2 27B")],
)  # fmt: skip
def test_a_family_at_a_size_not_held_names_the_sizes_held(model: str, held: str) -> None:
    """The refusal names the family's sizes the table holds (s28 review: it listed only the
    flavor families, as if the model's family were unknown)."""
    case = _case(model=model)
    assert case.model is None and f"the open-model table holds {held} (expected" in case.reason
    assert "\n" not in case.reason


@pytest.mark.parametrize(
    ("text", "name"),
    [("mistral large 2", "Mistral Large 2 123B"), ("mistral-large-instruct-2407",
      "Mistral Large 2 123B"), ("mistral nemo", "Mistral NeMo 12B"),
     ("mistral-nemo-base-2407", "Mistral NeMo 12B"), ("internlm2-chat-7b", "InternLM2 7B")],
)  # fmt: skip
def test_a_one_size_model_named_without_its_size(text: str, name: str) -> None:
    """Mistral NeMo (12B) and Mistral Large 2 (123B, mistral-large-2407) come in one size, so
    a row may name them without it (s28 review)."""
    _, entry = find_open_model(text)
    assert entry is not None and entry.name == name


def test_a_params_b_naming_another_size_of_the_family_is_refused() -> None:
    """params_b was not read beside an entry: "Gemma 2 9B" with params_b 27 ran as 9B (s28
    review). A published count above the round size stays its own entry."""
    case = _case(model="Gemma 2 9B", params_b="27")
    assert case.model is None and "params_b '27' is nearer Gemma 2 27B" in case.reason
    assert "\n" not in case.reason
    for model, params in (("Gemma 7B", "8.54"), ("Qwen2.5-7B", "7.61"), ("Phi-3 mini", "3.82")):
        assert _case(model=model, params_b=params).model is not None
    # Phi-3 was a family of one size until s30 readers4 added Phi-3 medium 14B
    case = _case(model="Phi-3 mini", params_b="14")
    assert case.model is None and "params_b '14' is nearer Phi-3 medium 14B" in case.reason


@pytest.mark.parametrize(
    ("text", "name"),
    [("internlm2 5-7b", "InternLM2.5 7B"), ("internlm2.5 7b", "InternLM2.5 7B"),
     ("mistral large", None)],
)  # fmt: skip
def test_a_later_or_earlier_release_is_not_taken_for_the_entry(text: str, name: str | None) -> None:
    """InternLM2.5 ("internlm2_5-7b", "_" read as a space) is not InternLM2: it was read as
    InternLM2 7B in one spelling and refused in the other (s28 review); since s30 readers4 it
    has its own entries, from its configs, in both spellings. The first Mistral Large (2402)
    has no published config: not Large 2."""
    _, entry = find_open_model(text)
    assert (entry.name if entry else None) == name


@pytest.mark.parametrize(
    ("text", "name"),
    [("gemma 2b", "Gemma 2B"), ("gemma-2-2b", "Gemma 2 2B"), ("gemma 1.1 7b", "Gemma 7B"),
     ("gemma2-27b", "Gemma 2 27B"), ("qwen2-7b-instruct", "Qwen2 / Qwen2.5 7B"),
     ("mistral-small-3.1-24b", "Mistral Small 3 24B"), ("baichuan 2 13b", "Baichuan 2 13B")],
)  # fmt: skip
def test_generations_and_sizes_are_told_apart(text: str, name: str) -> None:
    _, entry = find_open_model(text)
    assert entry is not None and entry.name == name


def test_no_family_pattern_names_an_existing_flavor_family() -> None:
    """The table reads no model the flavors already read (the visible rows stay unmoved)."""
    for text in ("llama 3.1 8b", "mixtral 8x7b", "qwen3-30b-a3b", "gpt-oss-120b", "deepseek-v3"):
        assert find_open_model(text) == ("", None)
    assert all(entries for _, entries in OPEN_MODELS)


def test_dbrx_is_mixtral_s_block_with_its_own_sizes() -> None:
    """DBRX (databricks/dbrx-base config.json): 16 experts of 10752 choosing 4 in every layer."""
    spec = _model(model="DBRX 132B")
    got = (spec.layers, spec.hidden, spec.heads, spec.kv_heads, spec.vocab, spec.num_experts,
           spec.top_k, spec.expert_ffn, spec.num_shared_experts)  # fmt: skip
    assert got == (40, 6144, 48, 8, 100352, 16, 4, 10752, 0)
