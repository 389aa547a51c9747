"""FlashAttention (v1) in CUDA on the A100-class presets and the InternEvo reading that puts
InternLM's rows on it (s35 fa1, 7 Dec 2026): flash-attn v1.0.5, as InternLM / InternEvo's install
docs pin it, at the FA2 fractions over the FlashAttention-2 paper's "around 2x"."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_explore.analytical.kernels import attention_efficiency
from stage_explore.system import load_system
from stage_explore.system.loading import load_system_file
from stage_explore.validation.infer_defaults import preset_has_kernel, recipe_defaults
from stage_explore.validation.infer_internevo import INTERNEVO_KERNEL
from tests.explore.infer_helpers import package_case, package_row, synthetic_case

#: The data folder's A100 cluster files, copies of the a100-80gb preset's kernels.
DATA_SYSTEMS = Path(__file__).parents[2] / "stage_explore" / "data" / "systems"
ROW = "INTERNLM-7B-A100-AC-G64-MB8-MN1"


@pytest.mark.parametrize("system", ["a100-80gb", "a100-40gb", "a800"])
def test_fa1_is_fa2_over_the_papers_two(system: str) -> None:
    """FA2 "is around 2x faster than FlashAttention" (Dao 2023, arXiv 2307.08691, Section 4.1,
    A100 80GB SXM4, forward + backward): the preset's FA2 default over 2, both passes, at the
    default's half-saturation keys; inside the abstract's 25-40 % of peak for FlashAttention."""
    kernels = load_system(system).accelerator.kernels
    assert kernels is not None
    forward, backward = kernels.attention(INTERNEVO_KERNEL)
    fa2_forward, fa2_backward = kernels.attention(None)
    assert forward == pytest.approx(fa2_forward / 2.0, abs=0.005)
    assert backward == pytest.approx(fa2_backward / 2.0, abs=0.005)
    assert 0.25 <= backward <= forward <= 0.40
    assert kernels.half_keys(INTERNEVO_KERNEL) == kernels.attention_half_keys
    assert kernels.grid_family(INTERNEVO_KERNEL) == ""  # no FA1 launch model


@pytest.mark.parametrize("name", ["ibm-a100-400g", "jean-zay-a100", "vtrain-a100"])
def test_the_data_folders_a100_copies_carry_the_presets_fa1(name: str) -> None:
    kernels = load_system_file(DATA_SYSTEMS / f"{name}.toml").accelerator.kernels
    preset = load_system("a100-80gb").accelerator.kernels
    assert kernels is not None and preset is not None
    assert kernels.attention(INTERNEVO_KERNEL) == preset.attention(INTERNEVO_KERNEL)


def test_fa1_halves_the_attention_rate_on_the_a100() -> None:
    kernels = load_system("a100-80gb").accelerator.kernels
    assert kernels is not None
    for backward in (False, True):
        fa2 = attention_efficiency(kernels, 2048, 128, True, backward, None)
        fa1 = attention_efficiency(kernels, 2048, 128, True, backward, INTERNEVO_KERNEL)
        assert fa1 == pytest.approx(fa2 / 2.0, rel=0.02)


@pytest.mark.parametrize(
    ("system", "listed"),
    [("a100-80gb", True), ("a100-40gb", True), ("a800", True), ("h100-80gb", False)],
)
def test_fa1_is_listed_only_on_the_a100_class_presets(system: str, listed: bool) -> None:
    assert preset_has_kernel(system, INTERNEVO_KERNEL) is listed


@pytest.mark.parametrize(
    ("system", "notes", "kernel"),
    [
        ("a100-80gb", "", "fa1"),
        ("h100-80gb", "", None),  # no FA1 figure off the A100: the profile's fa2 stands
        ("a100-80gb", "flash-attn 2.3.3", None),  # a row naming FlashAttention-2 keeps it
        ("a100-80gb", "FlashAttention-2 kernels", None),
    ],
)
def test_internevo_rows_run_flash_attention_one_where_it_is_measured(
    system: str, notes: str, kernel: str | None
) -> None:
    row = {**package_row(ROW), "notes": notes}
    defaults = recipe_defaults(row, "internevo", "bf16", "llama3-8b", {}, {}, system)
    assert defaults.options.get("attention_kernel") == kernel
    assert any("v1.0.5" in n for n in defaults.notes) is (kernel is not None)


def test_the_package_internlm_rows_name_fa1() -> None:
    case = package_case(package_row(ROW))
    assert not case.reason, case.reason
    assert dict(case.framework_options)["attention_kernel"] == "fa1"


def test_a_row_naming_flash_attention_two_keeps_the_profiles_kernel() -> None:
    case = synthetic_case(package_row(ROW), "extra.csv", notes="flash_attn==2.5.0")
    assert not case.reason, case.reason
    assert "attention_kernel" not in dict(case.framework_options)
