"""Rows of NVIDIA's Megatron-Core MoE model zoo (github.com/yanring/Megatron-MoE-ModelZoo) read by
an inferred setup (:mod:`stage_explore.validation.infer_megatron`, the branch of a row that names
no NeMo / Megatron-Bridge container).

The zoo's tables were run by its own launcher, ``sbatch_benchmarking.sh``: Megatron-LM's
``pretrain_gpt.py`` with the flags of ``model_configs/benchmarking/<model>.yaml`` and the command
line of the table's run script, not a NeMo / Megatron-Bridge recipe. So a switch those recipes
turn on and Megatron-LM leaves off is off unless the row's text names it. The one such switch
the megatron-core profile holds on is TP communication overlap (``tp_comm_overlap``): Megatron-LM's
``--tp-comm-overlap`` is ``action='store_true'`` (``megatron/training/arguments.py``), and the zoo
launch of the Qwen3-235B H100 table names it nowhere (:data:`ZOO_NO_TP_OVERLAP`). Keyed on what
the row's text names (the zoo; a ``--tp-comm-overlap`` turning it back on), never on a row id or
a measured value.
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_release import Defaults, row_text

#: A row whose text names the Megatron-Core MoE model zoo ("Megatron-MoE-ModelZoo", "MoE model
#: zoo", the launcher ``sbatch_benchmarking.sh``).
MODEL_ZOO = re.compile(
    r"megatron[\s_-]*moe[\s_-]*model[\s_-]*zoo|\bmoe\s+model\s+zoo\b|sbatch_benchmarking\.sh",
    re.IGNORECASE,
)
#: A row whose text names Megatron's TP communication overlap as on (``--tp-comm-overlap``,
#: ``tp_comm_overlap=True``): not after "no" / "without", nor followed by a value turning it off
#: (``tp_comm_overlap=False``), nor its ``-cfg`` file alone.
TP_OVERLAP_NAMED = re.compile(
    r"(?<!\bno\s)(?<!\bno\s--)(?<!without\s)(?<!without\s--)"
    r"\btp[-_\s]comm[-_\s]overlap(?![-_\s]*cfg)(?![\s:=]*(?:false|off|0|no|disabled?)\b)",
    re.IGNORECASE,
)

ZOO_NO_TP_OVERLAP = (
    "no TP communication overlap (tp_comm_overlap false): the text names the Megatron-Core MoE "
    "model zoo, whose launcher runs Megatron-LM's pretrain_gpt.py, where --tp-comm-overlap is "
    "store_true (megatron/training/arguments.py); the zoo's run script of its Qwen3-235B H100 "
    "table (yanring/Megatron-MoE-ModelZoo 17070963 examples/qwen3/run_235b.sh, beside that "
    "table's readme) passes no --tp-comm-overlap on any of its five commands, nor does the "
    "model yaml of that era (model_configs/benchmarking/Qwen3-235B-A22B.yaml 30631ea5) or "
    "sbatch_benchmarking.sh (every stored version to 78930f0c, which already spells the later "
    "--overlap-moe-expert-parallel-comm); only the later 38ce2ed2 launcher adds it under "
    "PR=bf16; a row whose text names --tp-comm-overlap keeps it"
)


def model_zoo_tp_overlap(row: dict[str, str], tp: int, out: Defaults) -> None:
    """A row of the MoE model zoo (:data:`MODEL_ZOO`) with tensor parallelism whose text does not
    name ``--tp-comm-overlap`` (:data:`TP_OVERLAP_NAMED`): no TP communication overlap."""
    text = row_text(row)
    if tp <= 1 or not MODEL_ZOO.search(text) or TP_OVERLAP_NAMED.search(text):
        return
    out.options["tp_comm_overlap"] = False
    out.notes.append(ZOO_NO_TP_OVERLAP)
