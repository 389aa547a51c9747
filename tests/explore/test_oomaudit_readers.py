"""s37 oomaudit: two readers behind runs that ran but were called out of memory.

- A NeMo container with a patch number (``26.02.01 NeMo Container``, ``(26.02.01 container)``)
  names its release: :func:`~stage_explore.validation.infer_release.container` read only
  ``YY.MM container``, so the Megatron-Bridge 26.02.01 rows kept the no-container defaults
  (fp32 gradient buffers, 16-bit parameters).
- A ``selective: ...`` recompute cell that names its modules in prose (the DeepSeek-V3 report's
  "We recompute all RMSNorm operations and MLA up-projections") takes Megatron-Core's module
  names for them (:func:`~stage_explore.validation.infer_recompute.prose_modules`), not the
  default core attention.
"""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_recompute import named_modules, prose_modules
from stage_explore.validation.infer_release import container
from stage_explore.validation.setups import Case, data_dir

NO_SETUP = "published_runs_no_setup.csv"


def _case(row_id: str, **cells: str) -> Case:
    (row,) = [r for r in read_csv(data_dir() / NO_SETUP) if r["id"] == row_id]
    (case, *_) = row_cases({**row, **cells}, NO_SETUP, 1, data_dir())
    return case


@pytest.mark.parametrize(
    ("text", "release"),
    [("Megatron-Bridge performance summary (26.02.01 container)", (26, 2)),
     ("26.02.01 NeMo Container, Pre-Training Performance", (26, 2)),
     ("25.11 NeMo Container", (25, 11)),
     ("NeMo 25.04.01 container", (25, 4))],
)  # fmt: skip
def test_a_container_with_a_patch_number_names_its_release(
    text: str, release: tuple[int, int]
) -> None:
    assert container({"source": text}) == release


@pytest.mark.parametrize(
    "text", ["26.02.011 container", "a 2026.02 container", "26.0201 container"]
)
def test_a_version_that_is_not_yy_mm_or_yy_mm_pp_names_none(text: str) -> None:
    assert container({"source": text}) is None


def test_the_26_02_01_rows_take_their_container_s_gradients_and_parameters() -> None:
    case = _case("MBX-GB300-26.02.01-LLAMA3.1_405B-FP8")
    assert case.parallel is not None and case.parallel.grad_fp32 is False
    assert dict(case.framework_options).get("fp8_param_gather") is True
    assert any("the text names container 26.02" in a for a in case.assumptions)
    assert not any("no NeMo / Megatron-Bridge container named" in a for a in case.assumptions)


@pytest.mark.parametrize(
    ("cell", "modules"),
    [("selective: every RMSNorm and the MLA up-projections recomputed in the backward",
      ("layernorm", "mla_up_proj")),
     ("selective - LayerNorms only", ("layernorm",)),
     ("selective: the core attention", ("core_attn",)),
     ("selective: latent attention's up-projection", ("mla_up_proj",)),
     # the spellings benchmarks/spelling_robustness.py writes for the same cell (s37 lead)
     ("selective recompute: every RMSNorm and the MLA up-projections",
      ("layernorm", "mla_up_proj")),
     ("selective activation recomputation: every RMSNorm", ("layernorm",)),
     ("activation checkpointing: selective: the MLA up-projections", ("mla_up_proj",)),
     ("recompute: selective: every RMSNorm and the MLA up-projections",
      ("layernorm", "mla_up_proj"))],
)  # fmt: skip
def test_prose_module_names_read_as_megatron_s(cell: str, modules: tuple[str, ...]) -> None:
    assert prose_modules(cell) == modules
    assert named_modules(cell) == modules


@pytest.mark.parametrize(
    "cell",
    ["selective", "selective (attention core)", "selective: Megatron's default",
     "full: every RMSNorm", "none: no norms recomputed", "full, not selective: every RMSNorm"],
)  # fmt: skip
def test_a_cell_naming_no_module_in_prose_keeps_the_default(cell: str) -> None:
    assert named_modules(cell) == ()


def test_the_deepseek_v3_row_recomputes_its_norms_and_up_projections_not_the_core() -> None:
    case = _case("DSV3-H800-2048-PRETRAIN")
    assert case.parallel is not None
    assert case.parallel.recompute_modules == ("layernorm", "mla_up_proj")
    assert any("selective recompute of layernorm, mla_up_proj" in a for a in case.assumptions)
