"""Models of Megatron-Bridge's verification cards the inference misread (6 Dec 2026, s26
hidden17): "Nemotron 3 Nano 4B" was read as the dense 2023 Nemotron-3 8B's family (Nemotron-4,
a plain decoder), and "Moonlight-16B-A3B" was refused as an MoE of no known family. The
Nemotron 3 / 3.5 family (Nano, Super, Ultra, Lightning) is a hybrid Mamba-2 / attention stack:
its 4B takes the flavor built from Megatron-Bridge's recipe, its MoE sizes are refused as
hybrids of no flavor; Moonlight is DeepSeek-V2-Lite's shape with its own dense FFN and
vocabulary (stage_explore/validation/infer_architectures.py, cited)."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_fields import Uninferable, infer_model
from stage_explore.validation.setups import data_dir

DATA = data_dir()


@pytest.mark.parametrize(
    "model", ["Nemotron 3 Nano 4B", "nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16", "Nemotron-3-Nano 4B"]
)
def test_nemotron_3_nano_4b_is_the_hybrid_flavor(model: str) -> None:
    inferred = infer_model({"model": model}, "megatron-core")
    assert inferred.value == "nemotron-3-nano-4b"
    assert "21 Mamba-2, 4 attention, 17 MLP" in inferred.assumption
    stated = {"model": model, "layers": "42", "hidden": "3136", "ffn": "12544", "heads": "40"}
    assert infer_model(stated, "megatron-core").value == "nemotron-3-nano-4b"


@pytest.mark.parametrize(
    "model",
    [
        "NVIDIA-Nemotron-3-Super-120B-A12B-BF16",
        "Nemotron 3.5 Lightning 30B-A3B",
        "Nemotron 3 Nano 30B-A3B",
        "Nemotron 3 Ultra",
    ],
)
def test_the_other_nemotron_3_models_are_refused_as_hybrids(model: str) -> None:
    """Before: read as the Nemotron-4 family (a dense decoder) or refused for another reason."""
    with pytest.raises(Uninferable, match="a hybrid state-space model") as error:
        infer_model({"model": model, "layers": "52", "hidden": "2688", "heads": "32"}, "x")
    assert "nemotron-3-nano-4b" in str(error.value)


def test_the_2023_nemotron_3_8b_stays_a_dense_decoder() -> None:
    row = {"model": "Nemotron-3 8B", "layers": "32", "hidden": "4096", "heads": "32"}
    inferred = infer_model(row, "megatron-core")
    assert inferred.value == "nemotron-4-340b"
    assert "Mamba" not in inferred.assumption


def test_moonlight_is_deepseek_v2_lite_with_its_own_ffn_and_vocabulary() -> None:
    inferred = infer_model({"model": "Moonlight-16B-A3B", "moe": "natural routing"}, "x")
    assert inferred.value == "deepseek-v2-lite"
    assert dict(inferred.model) == {"ffn": 11264, "vocab": 163842, "mtp_layers": 0}
    assert "MoonlightModelProvider16B" in inferred.assumption


@pytest.mark.parametrize(
    ("row_id", "fields"),
    [
        (
            "MBVER-H100-MOONLIGHT-16B-A3B-16-RP2",
            {"ffn": 11264, "num_experts": 64, "kv_lora_rank": 512},
        ),
        ("MBVER-H100-NEMOTRON3-NANO-4B-8", {"layers": 42, "ssm_heads": 96, "ssm_head_dim": 80}),
    ],
)
def test_the_card_rows_are_set_up(row_id: str, fields: dict[str, int]) -> None:
    """The two card rows (published_runs_no_setup.csv) are evaluated on their model."""
    (row,) = [r for r in read_csv(DATA / "published_runs_no_setup.csv") if r["id"] == row_id]
    case, *_ = row_cases(row, "published_runs_no_setup.csv", 1, DATA)
    assert case.reason == ""
    for name, value in fields.items():
        assert getattr(case.model, name) == value
