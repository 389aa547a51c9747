"""The inferred reader on MoE models (7 Dec 2026, s33 readers8).

Synthetic rows (tests, not validation rows) pin: Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B, OLMoE-1B-7B,
Qwen3-Coder-480B-A35B, GLM-4.5 and GLM-4.5-Air read from their cited configs (the published
numbers written once below with their source) and the parameter counts those give against the
counts published beside them; Mixtral named by its total size; other sizes refused in one line;
the common MoE block a row of no known MoE family gets from its stated dims, and the one-line
refusal naming what it leaves unstated."""

from __future__ import annotations

from functools import partial

import pytest

from stage_core.models import ModelSpec, get_flavor
from tests.explore.infer_helpers import (
    megatron_row,
    package_case,
    package_row,
    published_dims,
    synthetic_model,
    synthetic_refusal,
)

#: A Megatron-LM row of 8 GPUs, all data parallel; the model cell is each test's.
BASE = megatron_row("READERS8-TEST")

_model = partial(synthetic_model, BASE, "readers8.csv")
_refused = partial(synthetic_refusal, BASE, "readers8.csv")

#: The published configs, copied once from the cited text: (layers, hidden, ffn, heads,
#: kv_heads, head_dim, vocab, tied), then (experts, top-k, expert FFN, shared experts in units
#: of the expert FFN, dense first layers, query / key norm, MTP layers).
PUBLISHED: dict[str, tuple[tuple[int, int, int, int, int, int, int, bool], tuple[int, ...]]] = {
    # Qwen/Qwen1.5-MoE-A2.7B config.json: 24 layers, hidden 2048, intermediate 5632, 16 / 16
    # heads, vocab 151936, untied; 60 experts of 1408 choosing 4, one shared expert of 5632
    "Qwen1.5-MoE-A2.7B": ((24, 2048, 5632, 16, 16, 128, 151936, False),
                          (60, 4, 1408, 5632 // 1408, 0, False, 0)),
    # Qwen/Qwen2-57B-A14B config.json (TensorRT-LLM's test copy): 28 layers, hidden 3584,
    # intermediate 18944, 28 / 4 heads; 64 experts of 2560 choosing 8, shared 20480
    "Qwen2-57B-A14B": ((28, 3584, 18944, 28, 4, 128, 151936, False),
                       (64, 8, 2560, 20480 // 2560, 0, False, 0)),
    # Megatron-Bridge OlMoEModelProvider: 16 layers, hidden 2048, 16 / 16 heads, vocab 50304,
    # 64 experts of 1024 choosing 8, qk_layernorm
    "OLMoE-1B-7B": ((16, 2048, 1024, 16, 16, 128, 50304, False), (64, 8, 1024, 0, 0, True, 0)),
    # miles scripts/models/qwen3-coder-480B-A35B.sh: 62 layers, hidden 6144, ffn 8192, 96 heads,
    # 8 query groups, kv-channels 128, 160 experts of 2560 choosing 8, qk-layernorm
    "Qwen3-Coder-480B-A35B": ((62, 6144, 8192, 96, 8, 128, 151936, False),
                              (160, 8, 2560, 0, 0, True, 0)),
    # Megatron-Bridge GLM45ModelProvider355B: 92 layers, hidden 5120, dense FFN 12288 in the
    # first 3, 96 heads, 8 query groups, kv_channels 128, vocab 151552, 160 experts of 1536,
    # shared 1536, top-8, qk_layernorm, mtp_num_layers 1
    "GLM-4.5": ((92, 5120, 12288, 96, 8, 128, 151552, False), (160, 8, 1536, 1, 3, True, 1)),
    # GLM45AirModelProvider106B: 46 layers, hidden 4096, dense FFN 10944 in the first, 128
    # experts of 1408, shared 1408, no qk_layernorm
    "GLM-4.5-Air": ((46, 4096, 10944, 96, 8, 128, 151552, False), (128, 8, 1408, 1, 1, False, 1)),
}  # fmt: skip

#: Other spellings a row may use, each the named entry of PUBLISHED.
SPELLINGS = (
    ("Qwen/Qwen1.5-MoE-A2.7B-Chat", "Qwen1.5-MoE-A2.7B"), ("Qwen1.5-MoE", "Qwen1.5-MoE-A2.7B"),
    ("qwen1.5 moe a2.7b", "Qwen1.5-MoE-A2.7B"),
    ("Qwen/Qwen2-57B-A14B-Instruct", "Qwen2-57B-A14B"), ("Qwen2-MoE-57B", "Qwen2-57B-A14B"),
    ("allenai/OLMoE-1B-7B-0924", "OLMoE-1B-7B"), ("OLMoE", "OLMoE-1B-7B"),
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "Qwen3-Coder-480B-A35B"),
    ("zai-org/GLM-4.5", "GLM-4.5"), ("GLM 4.5 Air", "GLM-4.5-Air"),
)  # fmt: skip


def _moe(spec: ModelSpec) -> tuple[int, ...]:
    return (spec.num_experts, spec.top_k, spec.expert_ffn, spec.num_shared_experts,
            spec.first_k_dense, spec.qk_norm, spec.mtp_layers)  # fmt: skip


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_named_alone_reads_the_cited_config(model: str) -> None:
    spec = _model(model=model)
    assert (published_dims(spec), _moe(spec)) == PUBLISHED[model]


@pytest.mark.parametrize(("model", "entry"), SPELLINGS)
def test_other_spellings_read_the_same_config(model: str, entry: str) -> None:
    spec = _model(model=model)
    assert (published_dims(spec), _moe(spec)) == PUBLISHED[entry]


@pytest.mark.parametrize(
    ("model", "total", "active"),
    [
        # the Qwen1.5-MoE model card: "14.3B parameters in total and 2.7B activated"
        ("Qwen1.5-MoE-A2.7B", 14.3, 2.7),
        # its name: 57B in total, 14B active
        ("Qwen2-57B-A14B", 57, 14),
        # OLMoE (arXiv 2409.02060): 6.9B total, 1.3B active
        ("OLMoE-1B-7B", 6.9, 1.3),
        # its name: 480B in total, 35B active
        ("Qwen3-Coder-480B-A35B", 480, 35),
        # Mixtral 8x22B: 141B in total, 39B active (Mistral AI's release post); 8x7B: 47B and
        # 13B (arXiv 2401.04088 section 2)
        ("Mixtral 141B", 141, 39), ("Mixtral 47B", 47, 13),
    ],
)  # fmt: skip
def test_the_dims_give_the_published_parameter_counts(
    model: str, total: float, active: float
) -> None:
    spec = _model(model=model)
    assert abs(spec.params() / 1e9 / total - 1) < 0.03
    assert abs(spec.active_params() / 1e9 / active - 1) < 0.05


@pytest.mark.parametrize(
    ("model", "total", "active"), [("GLM-4.5", 355, 32), ("GLM-4.5-Air", 106, 12)]
)
def test_glm_45_gives_its_published_parameter_counts(model: str, total: int, active: int) -> None:
    # the GLM-4.5 model doc (huggingface/transformers glm4_moe.md): 355B total / 32B active,
    # 4.5-Air 106B / 12B; the main model's parameters (params(), the MTP layer apart: 352.8B /
    # 106.9B, with it 356.8B / 109.2B) and the active ones without the embedding and output
    # layers (as the 32B / 12B count them: 33.6B / 13.4B with them)
    spec = _model(model=model)
    assert abs(spec.params() / 1e9 / total - 1) < 0.02
    body = spec.active_params() - spec.embedding_params() - spec.output_params()
    assert abs(body / 1e9 / active - 1) < 0.03


def test_glm_45_without_mtp_drops_its_mtp_layer() -> None:
    assert _model(model="GLM-4.5 (w/o MTP)").mtp_layers == 0
    assert _model(model="GLM-4.5-Air, MTP disabled").mtp_layers == 0


@pytest.mark.parametrize(
    ("model", "flavor"),
    [("Mixtral 141B", "mixtral-8x22b"), ("Mixtral 46.7B", "mixtral-8x7b"),
     ("Mixtral 47B", "mixtral-8x7b"), ("Mixtral-8x22B-Instruct-v0.1", "mixtral-8x22b"),
     ("Mixtral 8×22B", "mixtral-8x22b"), ("Mixtral 8 x 7B", "mixtral-8x7b"),
     ("mixtral_8x22b", "mixtral-8x22b")],
)  # fmt: skip
def test_mixtral_spellings_and_total_sizes(model: str, flavor: str) -> None:
    spec, want = _model(model=model), get_flavor(flavor)
    assert published_dims(spec) == published_dims(want) and _moe(spec) == _moe(want)


def test_a_mixtral_params_b_of_its_total_reads_that_size() -> None:
    assert _model(model="Mixtral", params_b="141").layers == get_flavor("mixtral-8x22b").layers


@pytest.mark.parametrize(
    "model",
    ["Qwen1.5-MoE-A14B", "Qwen2-57B-A7B", "OLMoE-1B-14B", "Qwen3-Coder-480B-A30B",
     "Qwen3-Coder-400B-A35B", "GLM-4.5-Airr", "Mixtral 8x13B", "Arctic 480B"],
)  # fmt: skip
def test_another_size_or_a_misspelling_is_refused_in_one_line(model: str) -> None:
    assert repr(model) in _refused(model=model)


#: A row of an MoE family the inference does not know, stating its dims.
GENERIC = {
    "model": "FooMoE-16B-A3B", "layers": "24", "hidden": "2048", "heads": "16",
    "vocab": "151936", "seq_len": "4096", "ffn": "1408 per expert",
    "moe": "60 routed experts (ffn 1408) + 1 gated shared expert (ffn 5632), top-4",
}  # fmt: skip


def test_an_unknown_moe_stating_its_dims_is_the_common_moe_block() -> None:
    spec = _model(**GENERIC)
    got = (spec.family.value, spec.layers, spec.hidden, spec.heads, spec.kv_heads)
    assert got == ("mixtral", 24, 2048, 16, 16)
    # one shared expert of 5632 is four of the experts' 1408: one always-active MLP of 5632
    assert _moe(spec) == (60, 4, 1408, 4, 0, False, 0)
    # the same numbers as the Qwen1.5-MoE entry's: the same parameters
    assert spec.params() == _model(model="Qwen1.5-MoE-A2.7B").params()


@pytest.mark.parametrize(
    ("cells", "want"),
    [
        # the experts' width in the moe cell, grouped-query attention, no shared expert
        ({"ffn": "", "moe": "64 experts (ffn 1024), top-8", "kv_heads": "4"},
         (64, 8, 1024, 0, 4)),
        # the width beside the word expert
        ({"ffn": "expert FFN 1408", "moe": "60 experts, top-4"}, (60, 4, 1408, 0, 16)),
        # an integer ffn; two shared experts of the experts' width
        ({"ffn": "1024", "moe": "64 experts top-8, 2 shared experts"}, (64, 8, 1024, 2, 16)),
        # shared experts counted with their width: 2 of 2048 are 4 of 1024
        ({"ffn": "1024", "moe": "64 experts top-6, 2 shared experts (ffn 2048)"},
         (64, 6, 1024, 4, 16)),
    ],
)  # fmt: skip
def test_the_common_moe_block_reads_what_the_row_states(
    cells: dict[str, str], want: tuple[int, ...]
) -> None:
    spec = _model(**{**GENERIC, **cells})
    assert (spec.num_experts, spec.top_k, spec.expert_ffn, spec.num_shared_experts,
            spec.kv_heads) == want  # fmt: skip


@pytest.mark.parametrize(
    ("model", "read"),
    [("StableLM 12B", False), ("Qwen3 50B", False), ("Granite-3.0-3B-A800M", True),
     ("MiniCPM-MoE-8x2B", True), ("Gemma-4-26B-A4B", True)],
)  # fmt: skip
def test_a_dense_family_s_name_with_an_moe_cell_must_say_moe(model: str, read: bool) -> None:
    # a family the generic reader knows as dense, named with no mixture of experts in the name,
    # is a contradiction with the moe cell, not an MoE of that family
    cells = {**GENERIC, "model": model}
    if read:
        assert _model(**cells).num_experts == 60
    else:
        assert "a dense family" in _refused(**cells)


def test_the_common_moe_block_keeps_a_known_family_s_traits() -> None:
    # a Qwen3 MoE of no flavor's size: Qwen3's query / key norm and head dim 128
    spec = _model(**{**GENERIC, "model": "Qwen3-MoE-50B-A5B", "moe": "96 experts, top-8"})
    assert (spec.qk_norm, spec.head_dim, spec.num_experts) == (True, 128, 96)


@pytest.mark.parametrize(
    ("cells", "named"),
    [
        ({"vocab": ""}, "does not state vocab"),
        ({"layers": "", "heads": ""}, "does not state layers, heads"),
        ({"moe": "60 experts"}, "top_k in the moe column"),
        ({"moe": "top-4"}, "num_experts in the moe column"),
        ({"ffn": "", "moe": "60 experts, top-4"}, "does not state ffn, the experts' FFN width"),
        ({"ffn": "1408 per expert, 10944 dense"}, "one number"),
        ({"ffn": "1024", "moe": "64 experts (ffn 768), top-8"}, "one expert FFN width"),
        ({"moe": "60 experts top-4, first 3 layers dense"}, "'dense' layers"),
        ({"moe": "60 experts top-4, MoE every other layer"}, "'every other layer' layers"),
        ({"moe": "60 experts top-4, 1 shared expert (ffn 2000)"}, "not a multiple"),
        ({"moe": "60 experts top-4, shared experts"}, "not how many"),
        ({"kv_heads": "MLA"}, "kv_heads 'MLA'"),
    ],
)  # fmt: skip
def test_the_common_moe_block_refuses_naming_what_is_missing(
    cells: dict[str, str], named: str
) -> None:
    reason = _refused(**{**GENERIC, **cells})
    assert "a mixture of experts of no known family" in reason and named in reason


def test_the_swift_qwen15_moe_row_is_read_as_the_entry() -> None:
    # published_runs_no_setup.csv's Megatron-SWIFT Qwen1.5-MoE-A2.7B row (s32 rowsC) was
    # refused "of no known family" before this reader; its moe cell and dims are the entry's
    case = package_case(package_row("SWIFT-A800-QWEN15-MOE-A27B-MEGATRON-8"))
    assert not case.reason and case.model is not None
    assert _moe(case.model) == PUBLISHED["Qwen1.5-MoE-A2.7B"][1]
