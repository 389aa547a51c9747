"""The ``internevo`` framework profile (s35 internevo, 7 Dec 2026): InternEvo / InternLM's own
trainer, each option read from its code (``stage_explore/analytical/profile_internevo.py``), a
row naming it read as that profile with InternEvo's 16-bit gradient all-reduce in
``reduce_bucket_size`` buckets (``stage_explore/validation/infer_internevo.py``), and the
InternEvo settings the profile cannot express refused in one line."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Precision
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system
from stage_explore.validation.infer_fields import infer_framework
from stage_explore.validation.infer_internevo import REDUCE_BUCKET_ELEMENTS
from tests.explore.infer_helpers import package_case, package_row, synthetic_case

GPT = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
A100 = load_system("a100-80gb")
#: A row of the package's InternLM tables (s34 rowsF), 64 GPUs in zero1 groups of 8.
ROW = "INTERNLM-7B-A100-AC-G64-MB8-MN1"


@pytest.mark.parametrize(
    "source",
    [
        "InternEvo 7B benchmark",
        "InternLM-7B with InternLM's own trainer",
        "a run of the HybridZeroOptimizer",
    ],
)
def test_a_row_naming_internevo_reads_the_profile(source: str) -> None:
    read = infer_framework({"id": "x", "source": source, "model": "InternLM-7B"})
    assert read.value == "internevo", read.assumption
    assert "source column" in read.assumption


def test_the_package_rows_take_internevos_reduction() -> None:
    """bf16 gradients (reduce_tensor in the parameters' dtype), 512 Mi-element buckets
    (configs/7B_sft.py) at 2 bytes each, ZeRO-1 in zero1 groups of 8."""
    case = package_case(package_row(ROW))
    assert not case.reason, case.reason
    assert case.framework == "internevo" and case.parallel is not None
    assert case.parallel.grad_fp32 is False
    assert case.parallel.grad_bucket_bytes == REDUCE_BUCKET_ELEMENTS * 2
    assert (case.parallel.zero, case.parallel.dp_shard, case.parallel.dp) == (1, 8, 64)


def test_a_stated_reduce_bucket_size_is_read() -> None:
    row = {**package_row(ROW), "notes": "hybrid_zero_optimizer reduce_bucket_size=1048576"}
    case = synthetic_case(row, "extra.csv")
    assert not case.reason, case.reason
    assert case.parallel is not None
    assert case.parallel.grad_bucket_bytes == 1048576 * 2


@pytest.mark.parametrize(
    ("cells", "named"),
    [
        ({"dp_sharding": "InternEvo zero1=dict(size=8, fsdp=True)"}, "'fsdp=True'"),
        ({"dp_sharding": "InternEvo FSDP (zero1=dict(size=-1, fsdp=True))"}, "'FSDP'"),
        ({"notes": "tensor=dict(size=8, mode='isp')"}, "'isp'"),
        ({"notes": "tensor parallel mode=fsp"}, "'fsp'"),
    ],
)
def test_settings_the_profile_cannot_express_are_refused_in_one_line(
    cells: dict[str, str], named: str
) -> None:
    case = synthetic_case(package_row(ROW), "extra.csv", **cells)
    assert named in case.reason and "InternEvo" in case.reason
    assert "\n" not in case.reason


def test_internevo_all_reduces_the_whole_gradient_at_zero_one() -> None:
    """reduce_rank None: the whole bucket all-reduced over dp, then the zero1 partition kept,
    where Megatron's distributed optimizer reduce-scatters it: more exposed gradient sync."""
    parallel = ParallelConfig(dp=16, zero=1, global_batch=16, precision=Precision.BF16)
    whole = AnalyticalBackend(framework="internevo").evaluate(GPT, parallel, A100)
    scattered = AnalyticalBackend(
        framework="internevo", overrides={"zero1_grad_all_reduce": False}
    ).evaluate(GPT, parallel, A100)
    assert whole.breakdown["compute"] == scattered.breakdown["compute"]
    assert whole.breakdown["exposed_gradient_sync"] > scattered.breakdown["exposed_gradient_sync"]


@pytest.mark.parametrize(
    ("option", "bad"), [("grad_accumulation", "accumulate"), ("attention_kernel", 2)]
)
def test_a_bad_internevo_option_is_refused_in_one_line(option: str, bad: object) -> None:
    with pytest.raises(ConfigError, match=f"'internevo'.*{option}") as error:
        get_framework("internevo").with_overrides({option: bad})
    assert repr(bad) in str(error.value) and "\n" not in str(error.value)
