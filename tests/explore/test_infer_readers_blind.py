"""The rows of s37 blind read as the Megatron-Kwai ATC '24 artifact ran them (7 Dec 2026).

The artifact's 'origin Megatron-LM' runs launch NVIDIA Megatron-LM's ``pretrain_gpt.py`` with
``--swiglu --normalization RMSNorm --disable-bias-linear --use-rotary-position-embeddings
--untie-embeddings-and-output-weights`` (kwai/Megatron-Kwai 6c1ff864
``examples/atc24/pretrain_llama_using_origin_megatron.sh``) for every model, the 175B one
included: its ``llama-175b`` file takes GPT-3 175B's 96 layers, hidden 12288 and 96 heads with an
FFN of 32768. The first (blind) reading took the GPT-3 175B flavor (LayerNorm, GeLU with two FFN
matrices, learned positions, tied embeddings, biases) because the model cell's description names
GPT-3 for the sizes; a model named a Llama now reads the Llama-style block."""

from __future__ import annotations

from stage_explore.validation.infer_fields import infer_model
from tests.explore.infer_helpers import package_case, package_row

KWAI_175B = "KWAI-H800-LLAMA175B-S8K-TP2CP2PP16VP6-ORIGIN-256"


def test_a_llama_named_model_whose_description_cites_gpt3_sizes_is_a_llama_block() -> None:
    """The 175B row: RMSNorm, SwiGLU (three FFN matrices), rotary, no biases, untied, at the
    CSV's dims; the 7B rows of the same source read the same block."""
    case = package_case(package_row(KWAI_175B))
    assert not case.reason and case.model is not None
    spec = case.model
    assert (spec.family, spec.norm, spec.activation, spec.position) == (
        "llama", "rmsnorm", "swiglu", "rotary",
    )  # fmt: skip
    assert not spec.bias and not spec.tied_embeddings
    assert (spec.layers, spec.hidden, spec.ffn, spec.heads) == (96, 12288, 32768, 96)
    for gpu in ("A800", "H800"):
        seven = package_case(package_row(f"KWAI-{gpu}-LLAMA7B-S12K-PP4VP8-ORIGIN-4")).model
        assert seven is not None and (seven.norm, seven.activation) == ("rmsnorm", "swiglu")


def test_the_model_name_decides_between_llama_and_gpt() -> None:
    """A GPT named as the model keeps the GPT reading whatever its description says; a Llama
    named as the model is not read as a GPT for a GPT in its description."""
    dims = {"layers": "96", "hidden": "12288", "heads": "96", "ffn": "32768", "vocab": "32004",
            "seq_len": "8192"}
    gpt = infer_model({"model": "GPT-3 175B (a Llama-like tokenizer)", **dims}, "megatron-core")
    assert gpt.value.startswith("gpt3-")
    llama = infer_model(
        {"model": "Llama-175B (GPT-3 175B's layers and hidden size)", **dims}, "megatron-core"
    )
    assert not llama.value.startswith(("gpt3-", "megatron-gpt-"))
    assert "Llama-style decoder" in llama.assumption
