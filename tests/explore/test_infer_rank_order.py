"""The tensor-, context-, pipeline- then data-parallel rank order of an inferred row
(:mod:`stage_explore.validation.infer_rank_order`, 6 Dec 2026, s23 mlperfaudit): NeMo's
use_tp_pp_dp_mapping stated in the text, or NVIDIA's MLPerf NeMo 2.0 implementation of 25.09,
whose config_common.sh exports TP_PP_DP_MAPPING=True; dense models with pp > 1 only."""

from __future__ import annotations

import pytest

from tests.explore.published_rows import inferred_case

DP_LAST = ("dp", "pp", "ep", "cp", "tp")
DEFAULT = ("pp", "dp", "ep", "cp", "tp")
LAYOUT = {"model": "Llama 3.1 405B", "gpu": "GB200", "precision": "FP8", "tp": "4", "pp": "8",
          "cp": "2", "vpp": "8", "num_gpus": "512", "global_batch_seqs": "1152"}  # fmt: skip


@pytest.mark.parametrize(
    ("source", "notes", "cells", "order"),
    [
        # NVIDIA's 25.09 implementation: config_common.sh exports TP_PP_DP_MAPPING=True
        ("MLPerf Training v5.1, X closed division (NeMo 25.09 container)", "", {}, DP_LAST),
        # stated in the text, whatever the release
        ("MLPerf Training v5.0, X closed division (NeMo 25.04 container)",
         "config: TP_PP_DP_MAPPING=True", {}, DP_LAST),
        # the 25.04 implementation without the variable: Megatron-Core's default
        ("MLPerf Training v5.0, X closed division (NeMo 25.04 container)", "", {}, DEFAULT),
        ("MLPerf Training v5.0, X (NeMo 25.04 container)", "TP_PP_DP_MAPPING=False", {},
         DEFAULT),
        # with pp 1 both orders place every rank alike: left at the default
        ("MLPerf Training v5.1, X closed division (NeMo 25.09 container)", "",
         {"model": "Llama 3.1 8B", "tp": "2", "pp": "1", "cp": "4", "vpp": "",
          "global_batch_seqs": "64"}, DEFAULT),
        # not MLPerf: NeMo's own recipes do not set it
        ("NVIDIA NeMo performance summary (NeMo 25.09 container)", "", {}, DEFAULT),
    ],
)  # fmt: skip
def test_the_rank_order_a_row_runs(
    source: str, notes: str, cells: dict[str, str], order: tuple[str, ...]
) -> None:
    case = inferred_case(**{**LAYOUT, "source": source, "notes": notes, **cells})
    assert case.parallel.axis_order == order
    stated = any("tp-cp-ep-pp-dp" in a for a in case.assumptions)
    assert stated is (order == DP_LAST)


def test_an_moe_row_keeps_the_default_order() -> None:
    cells = {"model": "Mixtral 8x22B", "moe": "8 experts, top-2", "tp": "2", "pp": "4",
             "cp": "1", "vpp": "", "ep": "8", "num_gpus": "64", "global_batch_seqs": "64",
             "notes": "TP_PP_DP_MAPPING=True"}  # fmt: skip
    case = inferred_case(**{**LAYOUT, "source": "MLPerf X (NeMo 25.09 container)", **cells})
    assert case.parallel.axis_order == DEFAULT
