"""Megatron-Bridge's full-iteration MXFP8 MoE recipes for an inferred row (6 Dec 2026, s26
mbvergap): :func:`bridge_full_iteration`.

From the 26.06 containers Megatron-Bridge's performance recipes (the ``perf_recipes`` package,
``src/megatron/bridge/perf_recipes/<model>/<gpu>/*.py``) run the MXFP8 MoE configs on GB200 /
GB300 under one helper per model — ``qwen/common.py`` ``_enable_hybridep_full_iteration_mxfp8``
(NVIDIA-NeMo/Megatron-Bridge 134e903a), ``deepseek/common.py``
``_enable_deepseek_full_iteration_mxfp8`` (267f7562), ``gpt_oss/common.py``
``_apply_gpt_oss_120b_full_iter_fp8mx_configs`` — which set, beside ``cuda_graph_impl =
"full_iteration"``:

- ``use_transformer_engine_op_fuser = True`` and ``moe_mlp_glu_interleave_size = 32``, with
  ``NVTE_CUTEDSL_FUSED_GROUPED_MLP = 1`` in the recipe's environment (``qwen/gb200/qwen3_moe.py``
  03573ca6, ``deepseek/gb200/deepseek_v3.py`` 0ed32959, ``deepseek/gb300/deepseek_v3.py``
  000853c8): the routed experts run as Transformer Engine's fused grouped MLP, one launch over
  every local expert with the per-expert counts read on the device — the only expert path the
  whole-iteration graph can capture (``moe_paged_stash`` with ``moe_expert_rank_capacity_factor``
  1.5: "HybridEP + TE fused grouped experts are required whenever
  moe_expert_rank_capacity_factor is set", Megatron-Core developer guide 0.20.0
  ``paged_stash``). Framework option ``moe_grouped_kernel``.
- ``CommOverlapConfig(overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=True)``: the
  expert-parallel dispatch and combine beside the other micro-batch's compute. Framework option
  ``moe_comm_overlap``.

What the model does not carry of them, stated in the row's note: the graph's removal of host
launch work (the model charges none to remove: 5 Dec 2026, s17 bwgraph), FP8 dot-product
attention (``fp8_dot_product_attention``; the DeepSeek-V3 GB300 and Qwen3 recipes) and the expert
buffers sized at 1.5× the balanced rank load (whether the grouped kernel's work follows the
routed or the padded rows is not stated). ``fp8_output_proj`` (the MXFP8 LM head), which the
DeepSeek-V3 and GPT-OSS-120B recipes set and the Qwen3 helper does not, is read since 7 Dec
2026 (s31 dsv3pp; :attr:`FullIterationRecipe.output_proj`).

The 26.04 and earlier containers ran ``scripts/performance`` configs with Transformer Engine
graphs of the router and preprocessing only (6 Dec 2026, s21 mbxrecipe), so only a row of a
26.06 or later container takes them; a row whose text names Transformer Engine graph scopes (the
functional recipes: "Transformer Engine CUDA graphs for moe_router and moe_preprocess") ran those
instead and is left alone.

Which recipes call the helper is a matter of model and GPU, not of layout (6 Dec 2026, s26
mbvergen): every stored MXFP8 recipe of Qwen3-30B-A3B / Qwen3-235B-A22B / DeepSeek-V3 /
GPT-OSS-120B on GB200 / GB300 calls it at each layout it sets (the GB300 Qwen3-235B recipes at
PP 4 VP 12 and a 128-GPU one at PP 1 EP 64; GPT-OSS-120B at EP 16 on GB300, EP 64 on GB200),
and so does B300 Qwen3-30B; the MXFP8 recipes that do not are whole model × GPU pairs (B300
Qwen3-235B at PP 8 EP 8, B300 DeepSeek-V3 and GPT-OSS-120B; Qwen3-Next-80B and Kimi K2 on
GB200 / GB300, with Transformer Engine scoped graphs or none). A
row of a listed model and GPU therefore takes the options at any layout (:data:`FULL_ITERATION`),
e.g. a card that states PP 4 EP 32 of the GB300 Qwen3-235B recipe without its virtual pipeline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stage_explore.validation.infer_release import Defaults

#: The first container whose Megatron-Bridge MoE recipes run the full-iteration MXFP8 path
#: (NVIDIA-NeMo/Megatron-Bridge#4211 / #4249, June 2026, "for 26.06"; 6 Dec 2026, s20 moegraph).
FIRST_FULL_ITERATION = (26, 6)

#: A row text naming Transformer Engine's scoped CUDA graphs (Megatron-Bridge ``cuda_graph_impl
#: = "transformer_engine"`` with ``cuda_graph_scope``), i.e. not the whole-iteration graph.
TE_GRAPH_SCOPES = re.compile(
    r"transformer[\s_-]engine\s+cuda[\s_-]graphs?|cuda[\s_-]graph[\s_-]scopes?|\bmoe_preprocess\b",
    re.IGNORECASE,
)

PERF = "NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/perf_recipes"


@dataclass(frozen=True)
class FullIterationRecipe:
    """One model × GPU whose every stored MXFP8 perf recipe runs a full-iteration helper,
    whatever its layout (6 Dec 2026, s26 mbvergen); ``model`` matches the row's model name
    (the flavor alone is not enough: Kimi K2 reads as the DeepSeek-V3 architecture and its
    recipes run no such helper); ``why`` names the recipes read, their layouts and commits."""

    flavor: str
    system: str
    model: re.Pattern[str]
    why: str
    output_proj: str = ""  # the recipe line that sets fp8_output_proj = True; "": it does not


QWEN3_30B = re.compile(r"qwen[\s_-]*3[\s_-]*30b", re.IGNORECASE)
QWEN3_235B = re.compile(r"qwen[\s_-]*3[\s_-]*235b", re.IGNORECASE)
DEEPSEEK_V3 = re.compile(r"deepseek[\s_-]*v3", re.IGNORECASE)
GPT_OSS_120B = re.compile(r"gpt[\s_-]*oss[\s_-]*120b", re.IGNORECASE)

#: Where GPT-OSS-120B's full-iteration helper turns on the MXFP8 LM head.
_GPT_OSS_OUTPUT_PROJ = (
    "_apply_gpt_oss_120b_full_iter_fp8mx_configs: cfg.model.fp8_output_proj = True "
    "(gpt_oss/common.py 3564acfd)"
)

#: Every model × GPU whose stored MXFP8 recipes all run the full-iteration helper (module
#: docstring). Layouts do not decide: within a model × GPU every MXFP8 recipe read calls the
#: helper at each layout it sets, and where a GPU's MXFP8 recipe of a model does not (B300
#: Qwen3-235B / DeepSeek-V3 / GPT-OSS-120B, Kimi K2 and Qwen3-Next-80B on GB200 / GB300) no
#: layout of it does.
FULL_ITERATION: tuple[FullIterationRecipe, ...] = (
    FullIterationRecipe("qwen3-30b-a3b", "gb200-nvl72", QWEN3_30B,
                        f"{PERF}/qwen/gb200/qwen3_moe.py qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_"
                        "config, EP 8 MBS 4 (03573ca6, 442c9898)"),
    FullIterationRecipe("qwen3-30b-a3b", "gb300-nvl72", QWEN3_30B,
                        f"{PERF}/qwen/gb300/qwen3_moe.py qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_"
                        "config, EP 8 MBS 8 (442c9898)"),
    FullIterationRecipe("qwen3-30b-a3b", "b300", QWEN3_30B,
                        f"{PERF}/qwen/b300/qwen3_moe.py qwen3_30b_a3b_pretrain_8gpu_b300_fp8mx_"
                        "config, EP 8 MBS 8 (0ed32959; the B300 Qwen3-235B MXFP8 recipes at PP 8 "
                        "EP 8 run none)"),
    FullIterationRecipe("qwen3-235b-a22b", "gb200-nvl72", QWEN3_235B,
                        f"{PERF}/qwen/gb200/qwen3_moe.py qwen3_235b_a22b_pretrain_64gpu_ and "
                        "_256gpu_gb200_fp8mx_config, PP 8 VP 3 EP 32 MBS 1 (03573ca6, 442c9898)"),
    FullIterationRecipe("qwen3-235b-a22b", "gb300-nvl72", QWEN3_235B,
                        f"{PERF}/qwen/gb300/qwen3_moe.py qwen3_235b_a22b_pretrain_64gpu_ and "
                        "_256gpu_gb300_fp8mx_config, PP 4 VP 12 EP 32 MBS 2, and the 128-GPU "
                        "paged-stash recipe's full-iteration graph at PP 1 EP 64 MBS 1 "
                        "(442c9898)"),
    FullIterationRecipe("deepseek-v3", "gb200-nvl72", DEEPSEEK_V3,
                        f"{PERF}/deepseek/gb200/deepseek_v3.py deepseek_v3_pretrain_256gpu_gb200_"
                        "fp8mx_config, PP 4 VP 4 EP 64 MBS 1 (0ed32959)",
                        "_enable_deepseek_full_iteration_mxfp8(cfg, fp8_output_proj=True) "
                        "(gb200/deepseek_v3.py 0ed32959; deepseek/common.py 267f7562)"),
    FullIterationRecipe("deepseek-v3", "gb300-nvl72", DEEPSEEK_V3,
                        f"{PERF}/deepseek/gb300/deepseek_v3.py deepseek_v3_pretrain_256gpu_gb300_"
                        "fp8mx_config, PP 2 VP 8 EP 32 MBS 1 (000853c8; an earlier stored "
                        "version at MBS 2 ran no full-iteration helper)",
                        "cfg.model.fp8_output_proj = True (gb300/deepseek_v3.py 000853c8)"),
    FullIterationRecipe("gpt-oss-120b", "gb200-nvl72", GPT_OSS_120B,
                        f"{PERF}/gpt_oss/gb200/gpt_oss.py gpt_oss_120b_pretrain_64gpu_gb200_fp8mx"
                        "_config, EP 64 MBS 4 (65f1882d, _apply_gpt_oss_120b_full_iter_fp8mx_"
                        "configs)", _GPT_OSS_OUTPUT_PROJ),
    FullIterationRecipe("gpt-oss-120b", "gb300-nvl72", GPT_OSS_120B,
                        f"{PERF}/gpt_oss/gb300/gpt_oss.py gpt_oss_120b_pretrain_64gpu_gb300_fp8mx"
                        "_config, EP 16 MBS 4 (007282ea, _apply_gpt_oss_120b_full_iter_fp8mx_"
                        "configs)", _GPT_OSS_OUTPUT_PROJ),
)  # fmt: skip


def bridge_full_iteration(
    row: dict[str, str],
    flavor: str,
    system: str,
    release: tuple[int, int],
    recipe: str,
    out: Defaults,
) -> bool:
    """Set ``moe_grouped_kernel`` and ``moe_comm_overlap`` (and ``fp8_output_proj`` where the
    recipe sets it: :attr:`FullIterationRecipe.output_proj`) for a Megatron-Bridge MXFP8 row of a
    26.06 or later container of a model and GPU whose recipes run the full-iteration helper
    (:data:`FULL_ITERATION`, at any layout); whether it did (the caller checks the text names
    Megatron-Bridge). A row whose text names Transformer Engine graph scopes, or that sets
    ``moe_grouped_kernel`` itself, is left alone."""
    if release < FIRST_FULL_ITERATION or recipe != "mxfp8":
        return False
    if "moe_grouped_kernel" in out.options:
        return False
    if any(TE_GRAPH_SCOPES.search(value) for value in row.values()):
        return False
    model = row.get("model", "")
    for entry in FULL_ITERATION:
        if entry.flavor == flavor and entry.system == system and entry.model.search(model):
            out.options["moe_grouped_kernel"] = True
            out.options["moe_comm_overlap"] = True
            out.notes.append(
                "Megatron-Bridge's full-iteration MXFP8 MoE recipe (the text names container "
                f"{release[0]}.{release[1]:02d}; every stored MXFP8 recipe of this model on "
                f"{system} runs the helper, whatever its layout: {entry.why}): the routed "
                "experts as Transformer Engine's fused grouped MLP, one launch over the local "
                "experts with device-side counts (moe_grouped_kernel: "
                "use_transformer_engine_op_fuser, NVTE_CUTEDSL_FUSED_GROUPED_MLP=1), and the "
                "expert-parallel dispatch and combine beside the other micro-batch's compute "
                "(moe_comm_overlap: overlap_moe_expert_parallel_comm, delay_wgrad_compute); not "
                "modelled: the whole-iteration CUDA graph's host savings, FP8 dot-product "
                "attention, the expert buffers at capacity factor 1.5 (paged stash)"
            )
            if entry.output_proj:
                out.options["fp8_output_proj"] = True
                out.notes.append(
                    "the output layer (and any MTP loss that shares it) as a Transformer Engine "
                    f"linear under MXFP8 (fp8_output_proj): the recipe's {entry.output_proj} "
                    "(Megatron-Core megatron/core/transformer/mxfp8_output_proj.py, "
                    "NVIDIA/Megatron-LM 620cf750)"
                )
            return True
    return False
