"""The inferred reader on Falcon, StarCoder2, OLMo 2 and Phi-3 small (7 Dec 2026, s29 readers3).

Synthetic rows (tests, not validation rows) pin: each model named alone set up from its cited
config (dims, head dim, vocabulary, tie, norm, activation, biases, window, q / k norm), a dim
the row states winning, the family's other generations left to the common decoder, and the
one-line refusals (Phi-3 small by name; Jamba as a hybrid state-space model)."""

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
BASE = megatron_row("READERS3-TEST")


_case = partial(synthetic_case, BASE, "readers3.csv")
_model = partial(synthetic_model, BASE, "readers3.csv")
_refused = partial(synthetic_refusal, BASE, "readers3.csv")


@pytest.mark.parametrize(
    ("model", "dims"),
    [
        # (layers, hidden, ffn, heads, kv_heads, head_dim, vocab, tied)
        ("Falcon 7B", (32, 4544, 18176, 71, 1, 64, 65024, True)),
        ("tiiuae/falcon-7b", (32, 4544, 18176, 71, 1, 64, 65024, True)),
        ("Falcon-40B", (60, 8192, 32768, 128, 8, 64, 65024, True)),
        ("StarCoder2-3B", (30, 3072, 12288, 24, 2, 128, 49152, False)),
        ("bigcode/starcoder2-7b", (32, 4608, 18432, 36, 4, 128, 49152, False)),
        ("StarCoder 2 15B", (40, 6144, 24576, 48, 4, 128, 49152, False)),
        ("OLMo-2-1124-13B", (40, 5120, 13824, 40, 40, 128, 100352, False)),
    ],
)
def test_named_alone_reads_the_cited_config(
    model: str, dims: tuple[int, int, int, int, int, int, int, bool]
) -> None:
    spec = _model(model=model)
    assert published_dims(spec) == dims


@pytest.mark.parametrize("model", ["Falcon 7B", "Falcon 40B"])
def test_falcon_block(model: str) -> None:
    spec = _model(model=model)
    assert (spec.norm.value, spec.activation.value, spec.bias) == ("layernorm", "gelu", False)
    assert spec.sliding_window == 0 and not spec.qk_norm
    assumption = _case(model=model).assumptions
    assert "parallel attention / MLP block" in " ".join(assumption)


@pytest.mark.parametrize("model", ["StarCoder2 3B", "StarCoder2 7B", "StarCoder2 15B"])
def test_starcoder2_block(model: str) -> None:
    spec = _model(model=model)
    assert (spec.norm.value, spec.activation.value, spec.bias) == ("layernorm", "gelu", True)
    assert spec.sliding_window == 4096
    assert all(kind.token == "swa+mlp" for kind in spec.layer_kinds())


def test_olmo2_block() -> None:
    spec = _model(model="OLMo 2 13B")
    assert spec.qk_norm and spec.norm.value == "rmsnorm" and spec.activation.value == "swiglu"
    assert "norms after (not before)" in " ".join(_case(model="OLMo 2 13B").assumptions)


def test_a_stated_dim_wins() -> None:
    spec = _model(model="Falcon 40B", vocab="65536", layers="30")
    assert (spec.vocab, spec.layers, spec.hidden) == (65536, 30, 8192)


@pytest.mark.parametrize(
    "text",
    # falcon-2-11b, falcon3-7b, olmo-7b, olmo-2-1124-7b, olmo-2-0325-32b have entries since s30
    # readers4, falcon-180b since s31 readers6
    ["falcon-11b-vlm", "falcon3-mamba-7b", "falcon-mamba-7b", "falcon-h1-7b", "starcoder-15b",
     "starcoder2-1b", "olmo-3-7b", "olmo-2-0425-1b", "falcon-2-7b"],
)  # fmt: skip
def test_other_generations_and_sizes_have_no_entry(text: str) -> None:
    assert find_open_model(text)[1] is None


def test_falcon_named_with_dims_at_a_size_not_held_is_the_common_decoder() -> None:
    spec = _model(model="Falcon 180B", layers="80", hidden="14848", ffn="59392", heads="232",
                  kv_heads="8", vocab="65024")  # fmt: skip
    assert (spec.layers, spec.hidden, spec.activation.value) == (80, 14848, "gelu")


@pytest.mark.parametrize(
    "model", ["Phi-3-small-8k-instruct", "Phi-3 small", "phi3 7B", "Phi-3.5-small"]
)
def test_phi3_small_is_refused_by_name(model: str) -> None:
    reason = _refused(model=model)
    assert "blocksparse attention" in reason and repr(model) in reason


def test_phi3_small_is_refused_with_its_dims_stated() -> None:
    reason = _refused(model="Phi-3 small", layers="32", hidden="4096", ffn="14336",
                      heads="32", kv_heads="8", vocab="100352")  # fmt: skip
    assert "blocksparse attention" in reason


def test_phi3_mini_still_reads() -> None:
    assert _model(model="Phi-3 mini").hidden == 3072


def test_jamba_is_refused_as_a_hybrid() -> None:
    reason = _refused(model="Jamba 52B", layers="32", hidden="4096", ffn="14336", heads="32",
                      kv_heads="8", vocab="65536")  # fmt: skip
    assert "hybrid state-space model" in reason
