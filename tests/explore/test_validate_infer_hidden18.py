"""The inferred reader on the AMD Instinct rows of s26 hidden18 (6 Dec 2026): Primus beside its
MaxText backend is read as MaxText (JAX, no profile of the model: not evaluated), not as Primus's
Megatron backend, and a JAX run's "FSDP" (XLA sharding) not as PyTorch FSDP; the MLPerf v6.0
MI325X row is set up on the mi325x preset with the FP8 recipe
its cell names and its throughput as derived from the result log's last block; the Primus 70B
BF16 row's 12 recomputed layers of 80 are read as such."""

from __future__ import annotations

import pytest

from stage_explore.validation.infer_fields import (
    FRAMEWORK_DEFAULT,
    infer_framework,
    unmodelled_framework,
)
from tests.explore.package_cases import package_cases

#: The Primus convergence README's MaxText rows as a row's columns may name the backend.
MAXTEXT_ROWS = [
    {"source": "AMD-AGI/Primus convergence test (Primus MaxText backend (JAX), 8x MI325X)"},
    {
        "source": "AMD Primus, 8x MI325X",
        "url": "https://github.com/AMD-AGI/Primus/blob/0e6fcd8e/tools/convergence_test/configs/"
        "maxtext/llama3.2_1B-convergence.yaml",
    },
    {"source": "rocm/primus:v26.7", "notes": "framework maxtext, per_device_batch_size 16"},
    {"source": "MaxText Llama 2 7B", "dp_sharding": "FSDP over 8 GPUs (ici_fsdp_parallelism -1)"},
    {"source": "Pax on JAX", "dp_sharding": "fsdp"},
]


@pytest.mark.parametrize("row", MAXTEXT_ROWS)
def test_primus_or_fsdp_beside_a_jax_framework_is_that_framework(row: dict[str, str]) -> None:
    framework = infer_framework(row)
    assert framework == FRAMEWORK_DEFAULT  # before: megatron-core ("primus") or fsdp ("FSDP")
    assert "(JAX) is no framework profile of the model" in unmodelled_framework(row, framework)


@pytest.mark.parametrize(
    ("row", "profile"),
    [
        ({"source": "AMD-AGI/Primus convergence test (Primus Megatron backend, 8x MI325X)"},
         "megatron-core"),
        ({"source": "AMD Primus with the TorchTitan backend, compared with MaxText"}, "torchtitan"),
        ({"source": "torchtune full finetune recipe", "dp_sharding": "FSDP2"}, "fsdp"),
    ],
)  # fmt: skip
def test_primus_without_maxtext_keeps_its_backend(row: dict[str, str], profile: str) -> None:
    assert infer_framework(row).value == profile


def test_the_mi325x_mlperf_row_is_read_from_its_cells() -> None:
    cases = {c.id: c for c in package_cases()}
    case = cases["MLPERF-L31-8B-MI325X-V60-MITAC-8"]
    assert case.source.startswith("INFERRED") and not case.in_sample and not case.reason
    assert case.system == "mi325x" and case.framework == "megatron-core"
    assert case.parallel is not None and case.parallel.fp8_recipe == "delayed"
    # the last 12,288-sample block of result_0.txt: 969.586 s (time_ms 1778465661039 to
    # 1778466630625), 8,192 tokens per sample, 8 GPUs
    assert case.measured == pytest.approx(12288 * 8192 / 969.586 / 8, abs=0.1)
    for model in ("LLAMA32-1B", "LLAMA2-7B"):
        reason = cases[f"PRIMUS-CONV-MI325X-MAXTEXT-{model}"].reason
        assert "MaxText (JAX) is no framework profile" in reason


def test_the_primus_70b_bf16_row_recomputes_12_of_its_80_layers() -> None:
    """AMD's 8-node command runs --recompute_num_layers 12 on a block-method config, read by s26
    hidden19's count reading (infer_recompute.named_num_layers): every other layer keeps its
    activations."""
    case = {c.id: c for c in package_cases()}["PRIMUS-PERF-MI325X-L31-70B-BF16-N8"]
    assert case.parallel is not None and not case.reason
    assert (case.parallel.recompute_method, case.parallel.recompute_num_layers) == ("block", 12)
    assert str(case.parallel.recompute) == "full" and case.parallel.zero == 3
