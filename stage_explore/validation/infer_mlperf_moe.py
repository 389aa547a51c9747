"""What an NVIDIA MLPerf Training row's config states of its MoE layers and pipeline, read for an
inferred setup (6 Dec 2026, s28 bwmoe): :func:`mlperf_moe_switches`.

NVIDIA's v6.0 DeepSeek-V3 submissions (mlcommons training_results_v6.0, stored as
Richardyu114/training_results_v6.0 eabf23a0, ``NVIDIA/benchmarks/deepseekv3_671b/implementations/
*/config_GB*_*_mxfp8_full_cg.sh``) export, and the rows' notes state:

- ``PIPELINE_LAYOUT="Et*4|(t*4|)*14tmL"`` — Megatron-Core's ``pipeline_model_parallel_layout``
  (each virtual stage's layers, the embedding, the MTP layer and the loss), the string STAGE's
  ``pp_layout`` reads. Without it the inferred setup splits DeepSeek-V3's 61 layers by STAGE's
  own rule, which puts the loss and MTP module with a different count of layers.
- ``USE_TE_OPS=True`` with ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1`` — Megatron-Core's
  ``use_transformer_engine_op_fuser`` and Transformer Engine's CuTe DSL fused grouped MLP on
  SM100: the routed experts run as one launch over every local expert, the counts read on the
  device (framework option ``moe_grouped_kernel``; the same recipe switch the Megatron-Bridge
  full-iteration rows take, :mod:`~stage_explore.validation.infer_bridge_graphs`).

- ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=32`` (with ``USE_MNNVL=1``) at ``EXPERT_PARALLEL=32``
  — HybridEP's ranks per NVLink domain (7 Dec 2026, s30 epdomain): DeepEP's ``HybridEPBuffer``
  runs the expert-parallel group as ``ep / n`` NVLink domains of ``n`` consecutive ranks, so
  each 32-rank group sat in one NVL72 rack (framework option ``moe_hybridep_domain_ranks``,
  :mod:`~stage_explore.analytical.ep_domain`). The GPT-OSS 20B config's ``=$EXPERT_PARALLEL``
  reads as the row's ep.

- ``FP8_OUTPUT_PROJ=True`` ("# MXFP8 LM-head output projection"; the GB300 configs export it, the
  GB200 ones do not and take ``conf/model/671b.yaml``'s default ``${oc.env:FP8_OUTPUT_PROJ,
  False}``) — Megatron-Core's ``fp8_output_proj``: the output layer, which the MTP layer's loss
  shares, runs as a Transformer Engine linear under MXFP8 (7 Dec 2026, s31 dsv3pp; framework
  option ``fp8_output_proj``, read under an MXFP8 row only: :func:`output_proj`).

All are read only where the row's text states them: nothing is assumed for an MLPerf row that
does not.
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_release import Defaults, row_text

#: ``PIPELINE_LAYOUT 'Et*4|(t*4|)*14tmL'`` or ``PIPELINE_LAYOUT="..."`` as a row's text states the
#: config's export (the layout's own characters only: stage letters, counts, groups, ``|``).
_LAYOUT = re.compile(r"\bPIPELINE_LAYOUT\s*=?\s*[\"']([EtmL0-9*|()]+)[\"']")
#: The config's switch of Transformer Engine's fused grouped MLP (``=1`` or ``=True``).
_FUSED_GROUPED_MLP = re.compile(r"\bNVTE_CUTEDSL_FUSED_GROUPED_MLP\s*=\s*(?:1|True)\b")
#: HybridEP's ranks per NVLink domain as the config exports it: a count or ``$EXPERT_PARALLEL``.
_DOMAIN_RANKS = re.compile(
    r"\bNUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN\s*=\s*(\d+|\$\{?EXPERT_PARALLEL\}?)"
)

#: The config's switch of the MXFP8 LM head (``=1`` or ``=True``).
_OUTPUT_PROJ = re.compile(r"\bFP8_OUTPUT_PROJ\s*=\s*(?:1|True)\b")


def mlperf_moe_switches(
    row: dict[str, str], stated: dict[str, int], out: Defaults, moe: bool, recipe: str = ""
) -> None:
    """Set ``pp_layout`` (pipelined rows, one layout stated) and ``moe_grouped_kernel`` (rows of
    an MoE model, ``moe``, whatever their expert parallelism: at EP 1 every expert is local and
    the fused grouped MLP runs over all of them) on ``out`` from what the MLPerf row's text
    states of its config, each with its assumption; a row stating two different layouts keeps
    STAGE's split. An MoE row's HybridEP ranks per NVLink domain: :func:`hybridep_domain`; the
    MXFP8 LM head of a row whose FP8 recipe is ``recipe`` ("" outside FP8): :func:`output_proj`."""
    text = row_text(row)
    layouts = set(_LAYOUT.findall(text))
    if len(layouts) == 1 and stated.get("pp", 1) > 1 and "pp_layout" not in out.parallel:
        (layout,) = layouts
        out.parallel["pp_layout"] = layout
        out.notes.append(
            f"pipeline layout {layout!r} (pp_layout): the text states the config's "
            "PIPELINE_LAYOUT (Megatron-Core's pipeline_model_parallel_layout)"
        )
    if moe and _FUSED_GROUPED_MLP.search(text):
        out.options["moe_grouped_kernel"] = True
        out.notes.append(
            "the routed experts as Transformer Engine's fused grouped MLP, one launch over the "
            "local experts with device-side counts (moe_grouped_kernel): the text states the "
            "config's NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 (with USE_TE_OPS, Megatron-Core's "
            "use_transformer_engine_op_fuser)"
        )
    if moe:
        hybridep_domain(text, stated.get("ep", 1), out)
    output_proj(text, recipe, out)


def output_proj(text: str, recipe: str, out: Defaults) -> None:
    """Set ``fp8_output_proj`` on ``out`` when ``text`` states the config's
    ``FP8_OUTPUT_PROJ=True`` and the row runs the ``mxfp8`` recipe (``recipe``; "" outside
    FP8), with its assumption. Megatron-Core uses the Transformer Engine head only
    then (``is_te_mxfp8_output_proj_active``, ``megatron/core/transformer/mxfp8_output_proj.py``
    NVIDIA/Megatron-LM 620cf750); under another recipe the flag is noted and not taken."""
    if not _OUTPUT_PROJ.search(text):
        return
    if recipe != "mxfp8":
        out.notes.append(
            f"the config's FP8_OUTPUT_PROJ=True not read: the row's FP8 recipe is {recipe!r}, "
            "and Megatron-Core runs the Transformer Engine LM head only under mxfp8"
        )
        return
    out.options["fp8_output_proj"] = True
    out.notes.append(
        "the output layer (and the MTP loss that shares it) as a Transformer Engine linear "
        "under MXFP8 (fp8_output_proj): the text states the config's FP8_OUTPUT_PROJ=True "
        "(Megatron-Core fp8_output_proj, megatron/core/transformer/mxfp8_output_proj.py "
        "TELinearCrossEntropyModule, NVIDIA/Megatron-LM 620cf750)"
    )


def hybridep_domain(text: str, ep: int, out: Defaults) -> None:
    """Set ``moe_hybridep_domain_ranks`` on ``out`` when ``text`` states one value of HybridEP's
    ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`` (a count, or ``$EXPERT_PARALLEL``: ``ep``) that
    divides ``ep`` > 1 (DeepEP's ``HybridEPBuffer`` asserts it), with its assumption; a count
    that does not divide ``ep`` is noted and not taken. The backend reads the option only
    where the dispatch runs on HybridEP (``moe_hybridep``, read from the row elsewhere)."""
    if ep <= 1:
        return
    values = {ep if value.startswith("$") else int(value) for value in _DOMAIN_RANKS.findall(text)}
    if len(values) != 1:
        return
    (ranks,) = values
    if ranks < 1 or ep % ranks:
        out.notes.append(
            f"HybridEP's NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN={ranks} does not divide ep "
            f"{ep}: not read (DeepEP's HybridEPBuffer asserts it divides the group)"
        )
        return
    out.options["moe_hybridep_domain_ranks"] = ranks
    out.notes.append(
        f"each expert-parallel group as HybridEP places it, {ep // ranks} NVLink domain(s) of "
        f"{ranks} consecutive ranks (moe_hybridep_domain_ranks {ranks}), the data-parallel and "
        "pipeline groups as the preset places them: the text states the config's "
        f"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN={ranks} (deepseek-ai/DeepEP "
        "deep_ep/hybrid_ep_buffer.py 098da2a6 HybridEPBuffer: num_of_nodes = group_size // "
        "num_of_ranks_per_nvlink_domain, fabric memory handles under USE_MNNVL)"
    )
