"""The inferred setup of the Megatron-LM README's scaling runs (5 Dec 2026, s16 infer7): a row
naming Megatron-Core r0.8 keeps TE's mid-2024 userbuffers defaults (no SM margin), and a README
scaling row with pp > 1 and no vpp stated runs the interleaved schedule with the smallest
divisor >= 4 of its layers per stage, as the hand-written MCORE08 setup has them."""

from __future__ import annotations

import pytest

from stage_explore.validation.infer_mcore08 import smallest_vpp
from stage_explore.validation.setups import Case
from tests.explore.published_rows import assert_inferred_as_hand
from tests.explore.published_rows import inferred_case as _case

README = "NVIDIA Megatron-LM README (Megatron-Core r0.8.0 weak scaling)"


def _gpt(**cells: str) -> Case:
    """The README's 177B row's cells (tp 8, pp 6, 48 replicas, batch 1152)."""
    return _case(**{
        "source": README, "model": "GPT-177B", "layers": "96", "hidden": "12288",
        "heads": "96", "vocab": "131072", "seq_len": "4096", "global_batch_seqs": "1152",
        "tp": "8", "pp": "6", "dp": "48", "num_gpus": "2304", "gpu": "H100-SXM5-80GB",
        "precision": "bf16", "tokens_per_s_per_gpu": "", "tflops_per_gpu": "432.8",
        "dp_sharding": "distributed optimizer (assumed)", **cells,
    })  # fmt: skip


@pytest.mark.parametrize(("per_stage", "vpp"), [(16, 4), (12, 4), (42, 6), (23, 23), (7, 7),
                                                (3, None), (1, None)])  # fmt: skip
def test_the_smallest_divisor_of_the_layers_per_stage_from_four(per_stage: int, vpp: int) -> None:
    assert smallest_vpp(per_stage) == vpp


def test_a_readme_scaling_row_with_pipeline_stages_runs_interleaved() -> None:
    case = _gpt()
    assert case.parallel is not None and case.parallel.vpp == 4
    assert any("strong-scaling sentence" in a for a in case.assumptions)
    assert not any(a.startswith("inferred: no interleaving") for a in case.assumptions)


@pytest.mark.parametrize(
    "cells",
    [{"vpp": "1"},  # stated: kept
     {"pp": "1", "dp": "288"},  # no pipeline
     {"global_batch_seqs": "1104"},  # 23 micro-batches per replica: not a multiple of pp
     {"source": "Megatron-LM weak scaling (a blog)"}],  # not the README
)  # fmt: skip
def test_the_readme_rule_keeps_a_stated_or_impossible_schedule(cells: dict[str, str]) -> None:
    case = _gpt(**cells)
    assert case.parallel is not None and case.parallel.vpp == 1


@pytest.mark.parametrize(("source", "off"), [(README, True),
                                             ("NVIDIA Megatron-LM README (Megatron-Core r0.9.0)",
                                              False)])  # fmt: skip
def test_megatron_core_r08_keeps_te_mid_2024_userbuffers_without_a_margin(
    source: str, off: bool
) -> None:
    options = dict(_gpt(source=source).framework_options)
    assert ("ub_bulk_sm_margin" in options) is off
    assert ("ub_pipeline_sm_margin" in options) is off
    if off:
        assert options["ub_bulk_sm_margin"] is False
        assert options["ub_pipeline_sm_margin"] is False


def test_the_inferred_mcore08_rows_take_the_hand_written_schedule_and_margins() -> None:
    assert_inferred_as_hand(
        "published_runs_more.csv",
        "MCORE08",
        ("parallel.vpp", "parallel.schedule"),
        ("ub_bulk_sm_margin", "ub_pipeline_sm_margin"),
    )
