"""What the s32 rowsD rows (the PyTorch / AWS FSDP post of 2022: GPT-3 175B and GPT 1T on p4d)
showed the inference misread: an FSDP row naming PyTorch 1.10 and minGPT read the fsdp profile's
fused (SDPA / flash) attention, which PyTorch only shipped with 2.0; and the 1T rows' CPU
offload is refused by name (since s34 by their activation offload, the part not modelled)."""

from __future__ import annotations

import pytest

from stage_explore.validation.infer_defaults import eager_attention
from tests.explore.infer_helpers import package_case as _case
from tests.explore.infer_helpers import package_row as _row

_FSDP_ROW = {
    "id": "X", "source": "PyTorch blog", "source_table": "", "notes": "", "model": "Llama 2 7B",
}  # fmt: skip


def test_the_pytorch_1_10_mingpt_row_runs_unfused_attention() -> None:
    case = _case(_row("FSDPAWS-A100-40G-GPT175B-128"))
    assert not case.reason and case.model is not None
    assert case.model.core_attention == "unfused"
    assert any("scaled_dot_product_attention" in a for a in case.assumptions)


@pytest.mark.parametrize(
    ("cells", "framework", "eager"),
    [({"source": "PyTorch 1.10 FSDP on AWS"}, "fsdp", True),
     ({"notes": "torch==1.13.1, FSDP FULL_SHARD"}, "fsdp", True),
     ({"model": "GPT-2 XL (minGPT)"}, "fsdp", True),
     ({"source": "PyTorch 2.1 FSDP"}, "fsdp", False),
     ({"source": "PyTorch 1.13 FSDP with FlashAttention"}, "fsdp", False),
     ({"source": "PyTorch 1.13 FSDP, xformers memory-efficient attention"}, "fsdp", False),
     ({"source": "PyTorch 1.10 FSDP on AWS"}, "deepspeed", False),
     ({"source": "torchtitan 1.0 release"}, "fsdp", False)],
)  # fmt: skip
def test_a_pre_2_0_pytorch_or_mingpt_fsdp_row_is_eager(
    cells: dict[str, str], framework: str, eager: bool
) -> None:
    """Only the fsdp profile, only a PyTorch before 2.0 or minGPT, only with no fused kernel
    named."""
    assert eager_attention({**_FSDP_ROW, **cells}, framework) is eager


@pytest.mark.parametrize("row_id", ["FSDPAWS-A100-40G-GPT1T-128", "FSDPAWS-A100-40G-GPT1T-512"])
def test_the_offloading_1t_rows_are_refused_by_name(row_id: str) -> None:
    """Their parameter CPU offload is modelled since s34 (offload.py); their activation CPU
    offload is not, and the reason names it."""
    case = _case(_row(row_id))
    assert "activation offload to host memory is not modelled" in case.reason
    assert "activation cpu offload" in case.reason.lower()
