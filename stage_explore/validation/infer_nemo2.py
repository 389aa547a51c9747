"""NeMo 2.0's DeepSeek-V3 and Grok-1 pre-training as their performance scripts run them, for
inferred setups (rows without a ``setups.toml`` entry): :func:`nemo2_deepseek_v3`,
:func:`nemo2_token_drop`.

A DeepSeek-V3 row on a NeMo 2.0 container (the text names the container and not
Megatron-Bridge, nor MLPerf) runs ``scripts/performance/llm/pretrain_deepseek_v3.py`` on NeMo's
``deepseek_v3`` recipe and ``DeepSeekV3Config``, as the DGX Cloud Benchmarking recipes' launch
scripts call it. Read in the stored versions (NVIDIA/NeMo ``pretrain_deepseek_v3.py`` 0349f235,
``nemo/collections/llm/gpt/model/deepseek.py`` 04e9360c, ``recipes/deepseek_v3.py`` 00f65ddf), the
versions the DGX Cloud recipes' 25.04 container pins (dgxc-benchmarking 1f6d9f40 ``launch.sh``
``FW_VERSION=25.04.01``); later containers' copies were not read, so the rule stops at 25.04.
A Grok-1 row on the same containers runs ``pretrain_grok1_314b.py`` (01b83a7c), whose
``pretrain_performance_optimizations`` adds the same ``MegatronTokenDropCallback``; so do the
Mixtral 8x7B / 8x22B recipes the Mixtral scripts run (s22 nemoaudit).
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_dgxc import aligned_fp8_padding
from stage_explore.validation.infer_fields import names_bridge
from stage_explore.validation.infer_release import Defaults, row_text

#: Containers whose NeMo 2.0 DeepSeek-V3 script and config were read (first, last).
DEEPSEEK_V3_CONTAINERS = ((25, 1), (25, 4))
#: The script's pipeline split: ``num_layers_in_middle_pipeline_stages = 64 // pp_size``, the first
#: stage one layer fewer, the last two fewer (embedding and the MTP module with the loss).
PIPELINE_LAYERS = 64
WHY = (
    "NeMo 2.0's DeepSeek-V3 performance script and config (NVIDIA/NeMo pretrain_deepseek_v3.py "
    "0349f235: USE_TOKEN_DROP adds MegatronTokenDropCallback, capacity 1.0 padded to capacity; "
    "num_layers_in_first / last_pipeline_stage = 64 // pp - 1 / - 2; deepseek.py 04e9360c "
    "DeepSeekConfig apply_rope_fusion False, DeepSeekV3Config make_vocab_size_divisible_by 1280; "
    "recipes/deepseek_v3.py 00f65ddf MegatronCommOverlapCallback tp_comm_overlap False)"
)


def nemo2_deepseek_v3(
    row: dict[str, str],
    flavor: str,
    release: tuple[int, int],
    pp: int,
    out: Defaults,
) -> None:
    """The NeMo 2.0 DeepSeek-V3 script's settings for a ``deepseek-v3`` row on a read container
    (:data:`DEEPSEEK_V3_CONTAINERS`): the rotary embedding unfused, the vocabulary padded to a
    multiple of 1280, no TP-communication overlap, experts padded to capacity factor 1.0, and
    the script's pipeline split when ``pp`` divides 64."""
    if flavor != "deepseek-v3" or not _nemo2(row, release):
        return
    out.options["rope_fusion"] = False
    out.options["tp_comm_overlap"] = False
    out.parallel["vocab_divisible_by"] = 1280
    out.model["capacity_factor"] = 1.0
    split = ""
    if pp > 1 and PIPELINE_LAYERS % pp == 0:
        middle = PIPELINE_LAYERS // pp
        out.parallel["pp_first_layers"] = middle - 1
        out.parallel["pp_last_layers"] = middle - 2
        split = f", {middle - 1} / {middle - 2} decoder layers on the first / last stage"
    out.notes.append(
        "the rotary embedding unfused (rope_fusion false), no TP-communication overlap "
        "(tp_comm_overlap false), the vocabulary padded to a multiple of 1280 "
        "(vocab_divisible_by), experts padded to capacity factor 1.0 (model capacity_factor)"
        f"{split}: {WHY} (the text names container {release[0]}.{release[1]:02d}, not "
        "Megatron-Bridge)"
    )


def _nemo2(row: dict[str, str], release: tuple[int, int]) -> bool:
    """Whether the row runs NeMo 2.0's performance scripts on a read container."""
    first, last = DEEPSEEK_V3_CONTAINERS
    text = row_text(row).lower()
    return first <= release <= last and not names_bridge(row) and "mlperf" not in text


#: NeMo 2.0 MoE recipes whose ``pretrain_performance_optimizations`` (run by the performance
#: scripts' ``pretrain_recipe(performance_mode=True)``) add ``MegatronTokenDropCallback``
#: (moe_expert_capacity_factor 1.0, moe_pad_expert_input_to_capacity True): (model pattern, what
#: was read).
TOKEN_DROP_RECIPES: tuple[tuple[str, str], ...] = (
    (r"\bgrok",
     "scripts/performance/llm/pretrain_grok1_314b.py (NVIDIA/NeMo 01b83a7c) adds "
     "MegatronTokenDropCallback"),
    (r"\bmixtral",
     "scripts/performance/llm/pretrain_mixtral_8x7b.py / pretrain_mixtral_8x22b.py (NVIDIA/NeMo "
     "073426cc) call the recipe's pretrain_recipe(performance_mode=True), whose "
     "pretrain_performance_optimizations adds MegatronTokenDropCallback "
     "(nemo/collections/llm/recipes/mixtral_8x7b.py 8611d291, mixtral_8x22b.py 00138e21)"),
    (r"\bllama[\s_-]*4",
     "scripts/performance/llm/pretrain_llama4_e128.py (NVIDIA/NeMo 058b3bda) calls the recipe's "
     "pretrain_recipe(performance_mode=True), whose pretrain_performance_optimizations adds "
     "MegatronTokenDropCallback (nemo/collections/llm/recipes/llama4_e128.py 0e449b1a, "
     "llama4_e16.py 06878db3)"),
)  # fmt: skip


def nemo2_token_drop(
    row: dict[str, str],
    release: tuple[int, int],
    precision: str,
    stated: dict[str, int],
    routing: tuple[int, int],
    out: Defaults,
) -> None:
    """A Grok-1, Mixtral or Llama 4 row on a read NeMo 2.0 container (:data:`TOKEN_DROP_RECIPES`):
    experts padded to capacity factor 1.0 (``MegatronTokenDropCallback``:
    moe_expert_capacity_factor 1.0, moe_pad_expert_input_to_capacity True,
    nemo/lightning/pytorch/callbacks/moe_token_drop.py), and in FP8 no row padding when every
    expert's capacity is aligned."""
    if not _nemo2(row, release):
        return
    model = row.get("model", "")
    why = next((w for p, w in TOKEN_DROP_RECIPES if re.search(p, model, re.IGNORECASE)), "")
    if not why:
        return
    out.model["capacity_factor"] = 1.0
    out.notes.append(
        f"experts padded to capacity factor 1.0 (model capacity_factor): NeMo 2.0's {why} "
        "(moe_expert_capacity_factor 1.0, moe_pad_expert_input_to_capacity True) (the text "
        f"names container {release[0]}.{release[1]:02d}, not Megatron-Bridge)"
    )
    if precision == "fp8":
        aligned_fp8_padding(stated, routing, 1.0, out)
