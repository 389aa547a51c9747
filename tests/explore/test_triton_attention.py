"""FlashAttention (v1) in Triton on the A100 presets and the inference rule that puts
llm-foundry's A100 benchmark rows on it (s15 mptattn)."""

from __future__ import annotations

import pytest

from stage_explore.system import load_system
from stage_explore.validation.infer_defaults import (
    LLMFOUNDRY_A100_KERNEL,
    preset_has_kernel,
    recipe_defaults,
)
from tests.explore.published_rows import inferred_case as _case
from tests.explore.published_rows import minimal_row as _row

FOUNDRY = "MosaicML llm-foundry MPT training benchmarks, A100 80GB tables"
MPT_1B = {"layers": "24", "hidden": "2048", "heads": "16", "ffn": "8192", "vocab": "50368"}


@pytest.mark.parametrize("system", ["a100-80gb", "a100-40gb"])
def test_triton_flash_attention_is_fa2_over_the_papers_ratios(system: str) -> None:
    """FA2 is 1.3-1.5x faster forward and ~2x faster backward than FlashAttention in Triton
    (Dao 2023, arXiv 2307.08691, Section 4.1, A100): the preset's FA2 default over 1.4 and 2."""
    kernels = load_system(system).accelerator.kernels
    assert kernels is not None
    forward, backward = kernels.attention(LLMFOUNDRY_A100_KERNEL)
    fa2_forward, fa2_backward = kernels.attention(None)
    assert forward == pytest.approx(fa2_forward / 1.4, abs=0.005)
    assert backward == pytest.approx(fa2_backward / 2.0, abs=0.005)
    assert kernels.half_keys(LLMFOUNDRY_A100_KERNEL) == kernels.attention_half_keys


@pytest.mark.parametrize(("system", "listed"), [("a100-80gb", True), ("a100-40gb", True),
                                                ("h100-80gb", False), ("no-such-system", False)])
def test_the_triton_kernel_is_listed_only_on_the_a100_presets(system: str, listed: bool) -> None:
    assert preset_has_kernel(system, LLMFOUNDRY_A100_KERNEL) is listed


@pytest.mark.parametrize(
    ("framework", "system", "kernel"),
    [
        ("llm-foundry-2023", "a100-80gb", "fa1-triton"),
        ("llm-foundry-2023", "a100-40gb", "fa1-triton"),
        ("llm-foundry-2023", "h100-80gb", None),  # the profile's fa2 stands off the A100
        ("fsdp", "a100-80gb", None),
    ],
)
def test_llm_foundry_a100_rows_run_the_triton_kernel(
    framework: str, system: str, kernel: str | None
) -> None:
    row = _row(model="MPT-1B", source=FOUNDRY, precision="amp_bf16")
    defaults = recipe_defaults(row, framework, "bf16", "gpt3-1.3b", {}, {}, system)
    assert defaults.options.get("attention_kernel") == kernel
    assert any("flash_attn_triton" in n for n in defaults.notes) is (kernel is not None)


def test_an_inferred_llm_foundry_a100_case_names_the_kernel() -> None:
    case = _case(model="MPT-1B", source=FOUNDRY, gpu="A100 80GB", precision="amp_bf16", **MPT_1B)
    assert case.backend_key.split("+")[0] == "llm-foundry-2023"
    assert dict(case.framework_options)["attention_kernel"] == "fa1-triton"
