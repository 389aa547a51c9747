"""BioNeMo's ``mixtral_native_te`` training loop as the inference reads it (s28 bionemo): bf16
gradient reduction (FSDP2 ``fully_shard`` without a ``mp_policy`` over a model cast to bfloat16:
NVIDIA-BioNeMo/bionemo-framework recipes/mixtral_native_te/distributed_setup.py 66375314,
train_fsdp2_ep.py f89103b2) and, without FSDP wrapping (dp_size 1), the dense gradients'
all-reduce after the backward (``all_reduce_dense_grads_over_ep``), and Transformer Engine's
cuDNN fused attention (its MultiheadAttention, modeling_mixtral_te.py 2b8763ee; s33); not for
the recipe's comparison benchmarks (the Hugging Face reference), whose rows name the recipe
too. FSDP2's copy-out / copy-in kernels for a ZeRO-3 ``fsdp`` row that names FSDP2
(``fully_shard``)."""

from __future__ import annotations

from stage_core.parallel import ParallelConfig
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_release import Defaults
from stage_explore.validation.infer_torch import bionemo_native_defaults, fsdp2_defaults
from stage_explore.validation.setups import Case, data_dir

FILE = "published_runs_no_setup.csv"
EP_ONLY = "BIONEMO-MIXTRAL-8X7B-B200-MXFP8-DP1EP8"
FSDP_EP = "BIONEMO-MIXTRAL-8X7B-B300-BF16-DP2EP4"
HF_REFERENCE = "BIONEMO-HFREF-MIXTRAL-8X7B-B200-BF16-FSDP8"
NATIVE = {"source": "NVIDIA BioNeMo recipes mixtral_native_te (native PyTorch training loop)"}


def _case(row_id: str) -> tuple[Case, ParallelConfig]:
    (row,) = [r for r in read_csv(data_dir() / FILE) if r["id"] == row_id]
    (case, *_) = row_cases(row, FILE, 1)
    assert case.parallel is not None, case.reason
    return case, case.parallel


def test_the_native_recipe_reduces_bf16_gradients_and_all_reduces_them_after_the_backward() -> None:
    out = Defaults()
    bionemo_native_defaults(NATIVE, 0, out)
    assert out.parallel == {"grad_fp32": False}
    assert out.options == {"overlap_grad_reduce": False, "attention_kernel": "cudnn"}
    assert len(out.notes) == 3


def test_with_fsdp_wrapping_the_reduce_scatters_stay_overlapped_beside_a_root_unit() -> None:
    out = Defaults()
    bionemo_native_defaults(NATIVE, 3, out)
    assert out.parallel == {"grad_fp32": False}
    assert out.options == {
        "fsdp_fp32_shards": False,
        "fsdp_root_unit": True,
        "attention_kernel": "cudnn",
    }


def test_a_zero3_row_naming_fsdp2_pays_its_copies() -> None:
    for cell in ("FSDP2 over 8 GPUs", "fully_shard per block", "FSDP-2"):
        out = Defaults()
        fsdp2_defaults({"dp_sharding": cell}, 3, out)
        assert out.options == {"fsdp2_copies": True}, cell
    for cell, zero in (("FSDP FULL_SHARD", 3), ("FullyShardedDataParallel", 3), ("FSDP2", 0)):
        out = Defaults()
        fsdp2_defaults({"dp_sharding": cell}, zero, out)
        assert out.options == {}, cell


def test_the_comparison_benchmarks_and_other_rows_are_not_read_as_the_recipe() -> None:
    for row in (
        {"source": "NVIDIA BioNeMo recipes mixtral_native_te, Hugging Face reference benchmark"},
        {"source": "NVIDIA BioNeMo recipes mixtral_native_te, NeMo AutoModel comparison"},
        {"source": "torchtitan FSDP2"},
    ):
        out = Defaults()
        bionemo_native_defaults(row, 0, out)
        assert (out.parallel, out.options, out.notes) == ({}, {}, [])


def test_the_published_rows_read_so() -> None:
    ep_only, parallel = _case(EP_ONLY)
    assert not parallel.grad_fp32
    assert dict(ep_only.framework_options).get("overlap_grad_reduce") is False
    fsdp_ep, parallel = _case(FSDP_EP)
    assert not parallel.grad_fp32 and parallel.zero == 3
    options = dict(fsdp_ep.framework_options)
    assert "overlap_grad_reduce" not in options and options["fsdp2_copies"] is True
    assert options["attention_kernel"] == "cudnn"  # Transformer Engine's FusedAttention (s33)
    reference, parallel = _case(HF_REFERENCE)
    assert parallel.grad_fp32 and dict(reference.framework_options)["fsdp2_copies"] is True
    assert "attention_kernel" not in dict(reference.framework_options)  # PyTorch SDPA
