"""What s32 bbgpt found the inference misread in the BloombergGPT and GLM-130B rows: a row
naming AWS's SageMaker model parallelism library (SMP), whose sharded data parallelism is AWS's
MiCS, took the deepspeed profile's flat ZeRO-3 ring at the per-GPU scale-out bandwidth instead of
MiCS's hierarchical collectives; a non-GPT model under the deepspeed / megatron-lm-2021 profiles
ran a FlashAttention kernel that Megatron-DeepSpeed does not run unless told to."""

from __future__ import annotations

import pytest

from stage_core.trace import CollectiveKind
from stage_explore.analytical.collectives import alpha_beta_collective_s
from stage_explore.analytical.overlap import flat_ring_s
from stage_explore.validation.setup_systems import case_system
from stage_explore.validation.setups import parse_backend_key
from tests.explore.infer_helpers import package_case as _case
from tests.explore.infer_helpers import package_row as _row
from tests.explore.infer_helpers import synthetic_case

BLOOMBERG = "BLOOMBERGGPT-A100-40G-512"
GLM = "GLM130B-A100-40G-768"
AMSP_ZERO3 = "AMSP-A800-ZERO3-LLAMA13B-1024"


def _options(row_id: str, **cells: str) -> dict[str, bool | int | float | str]:
    case = synthetic_case(_row(row_id), "published_runs_no_setup.csv", **cells)
    assert not case.reason, case.reason
    return parse_backend_key(case.backend_key)[1]


def test_smp_sharding_runs_hierarchically() -> None:
    """BloombergGPT's SMP ZeRO-3 (MiCS): the profile's flat ring is off, and the assumption
    says why."""
    case = _case(_row(BLOOMBERG))
    assert parse_backend_key(case.backend_key) == ("deepspeed", {"zero3_flat_ring": False})
    assert any("SageMaker model parallelism" in a for a in case.assumptions)


def test_deepspeed_zero3_keeps_its_flat_ring() -> None:
    """A DeepSpeed ZeRO-3 row that names no SMP keeps the profile's declared flat ring."""
    assert "zero3_flat_ring" not in _options(AMSP_ZERO3)


@pytest.mark.parametrize("text", ["trained with SMP on SageMaker", "SageMaker Model Parallelism"])
def test_smp_named_in_a_deepspeed_row(text: str) -> None:
    assert _options(AMSP_ZERO3, notes=text)["zero3_flat_ring"] is False


def test_the_hierarchical_gather_is_the_faster_one_across_nodes() -> None:
    """What the option changes on BloombergGPT's 16-node shard group: one layer's bf16
    all-gather, hierarchical (each node's NICs carry the data once) against the flat ring at
    one GPU's share of a node's 400 Gb/s."""
    system = case_system(_case(_row(BLOOMBERG)))
    shard = 12 * 7680**2 * 2 // 128
    group = list(range(128))
    hierarchical = alpha_beta_collective_s(system, CollectiveKind.ALL_GATHER, shard, group)
    flat = flat_ring_s(system, CollectiveKind.ALL_GATHER, shard, group)
    assert 4 * hierarchical < flat


def test_glm130b_runs_unfused_attention() -> None:
    """GLM-130B under the deepspeed profile, no FlashAttention named: Megatron's unfused
    attention (before: the Llama-style block's fused kernel)."""
    case = _case(_row(GLM))
    assert case.model is not None and case.model.core_attention == "unfused"
    assert any("core_attention unfused" in a for a in case.assumptions)


def test_a_named_flash_kernel_stays_fused() -> None:
    """AMSP's DeepSpeed baselines name FlashAttention-2; GLM-130B's row with one named too."""
    amsp = _case(_row(AMSP_ZERO3))
    assert amsp.model is not None and amsp.model.core_attention == ""
    named = synthetic_case(
        _row(GLM), "published_runs_no_setup.csv", notes="FlashAttention-2 kernels"
    )
    assert named.model is not None and named.model.core_attention == ""


def test_a_deepspeed_row_without_megatron_keeps_its_kernel() -> None:
    """A DeepSpeed row that names no Megatron (a Hugging Face model under ZeRO runs its own
    attention) keeps the family's fused kernel."""
    plain = "a DeepSpeed pipeline run"
    case = synthetic_case(
        _row(GLM), "published_runs_no_setup.csv", source=plain, source_table=plain, notes=plain
    )
    assert case.model is not None and case.model.core_attention == ""
