"""The rank order of an inferred ``megatron-core`` row whose run maps ranks tensor-, context-,
pipeline- then data-parallel (NeMo's ``use_tp_pp_dp_mapping``): Megatron-Core's
``order="tp-cp-ep-pp-dp"``, the model's ``axis_order`` ``("dp", "pp", "ep", "cp", "tp")``, so a
pipeline's stages sit on neighbouring ranks (inside an NVLink domain) and the data-parallel
groups span the domains, in place of the default ``"tp-cp-ep-dp-pp"``.

NeMo 2.0 passes the flag to Megatron-Core's ``initialize_model_parallel`` as that order
(NVIDIA/NeMo ``nemo/lightning/_strategy_lib.py`` 00fdee33 ``init_model_parallel``: ``order=
"tp-cp-ep-pp-dp" if app_state.use_tp_pp_dp_mapping else "tp-cp-ep-dp-pp"``); NVIDIA's MLPerf
NeMo 2.0 implementation hands ``conf/custom.yaml``'s ``use_tp_pp_dp_mapping:
${oc.env:TP_PP_DP_MAPPING,False}`` to ``MegatronStrategy(use_tp_pp_dp_mapping=...)``
(``pretrain.py`` ``get_strategy``, prishajain1/training_results_v5.0 0fdc28f0
``IBM+CoreWeave+NVIDIA/benchmarks/llama31_405b/implementations/carina_ngpu512_ngc25.04_nemo``),
and from the 25.09 release its ``config_common.sh`` exports ``TP_PP_DP_MAPPING=True``
(mlcommons/training_results_v5.1 4da2d1cd ``NVIDIA/benchmarks/llama31_405b/implementations/
theia_ngpu512_ngc25.09_nemo/config_common.sh``; ``Lambda/benchmarks/llama31_8b/implementations/
gb300_0922/config_common.sh``).

Only with pipeline parallelism (with pp 1 both orders place every rank alike) and only for a
dense model (an MoE model's expert layers refold the dp×cp ranks, which needs them adjacent).
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_mlperf2509 import mlperf_2509_applies
from stage_explore.validation.infer_release import CONTAINER_COLUMNS, Defaults, row_text

#: Megatron-Core's ``"tp-cp-ep-pp-dp"`` as the model's ``axis_order`` (outermost first).
TP_PP_DP_ORDER = ("dp", "pp", "ep", "cp", "tp")
#: ``TP_PP_DP_MAPPING=True`` / ``use_tp_pp_dp_mapping: true`` stated in a row's text.
_STATED = re.compile(
    r"\b(?:TP_PP_DP_MAPPING|use_tp_pp_dp_mapping)\s*[=:]\s*['\"]?(true|1)\b", re.IGNORECASE
)


def tp_pp_dp_rank_order(row: dict[str, str], moe: bool, pp: int, out: Defaults) -> None:
    """``axis_order`` :data:`TP_PP_DP_ORDER` for a dense row with pp > 1 whose text states
    ``TP_PP_DP_MAPPING=True`` (or ``use_tp_pp_dp_mapping``), or that runs NVIDIA's MLPerf NeMo
    2.0 implementation of 25.09 or later (its config_common.sh exports it)."""
    if moe or pp <= 1:
        return
    if _STATED.search(row_text(row, CONTAINER_COLUMNS)):
        why = "the text states TP_PP_DP_MAPPING=True"
    elif mlperf_2509_applies(row):
        why = (
            "NVIDIA's MLPerf NeMo 2.0 implementation of 25.09: config_common.sh exports "
            "TP_PP_DP_MAPPING=True (mlcommons/training_results_v5.1 4da2d1cd, "
            "theia_ngpu512_ngc25.09_nemo and Lambda's gb300_0922 copy)"
        )
    else:
        return
    out.parallel["axis_order"] = TP_PP_DP_ORDER
    out.notes.append(
        "ranks ordered tensor-, context-, pipeline- then data-parallel (axis_order dp, pp, ep, "
        "cp, tp: Megatron-Core's order 'tp-cp-ep-pp-dp', which NeMo 2.0's use_tp_pp_dp_mapping "
        "selects, nemo/lightning/_strategy_lib.py init_model_parallel; pretrain.py passes "
        f"custom.yaml's use_tp_pp_dp_mapping to MegatronStrategy): {why}"
    )
