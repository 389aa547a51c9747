"""Megatron-Bridge's per-model performance recipes as an inferred setup's defaults (split from
:mod:`~stage_explore.validation.infer_megatron`, s33 simplify, which applies them to a row
naming Megatron-Bridge).

Holds :data:`BRIDGE_RECIPES` (a recipe's selective recompute modules) and :func:`bridge_recipe`
(with the rotary embedding of the providers that leave it unfused,
:data:`UNFUSED_ROPE_FAMILIES`), :data:`BRIDGE_OPTIONS` and :func:`bridge_options` (a recipe's
framework options by container), :func:`bridge_connections` (the launcher's
CUDA_DEVICE_MAX_CONNECTIONS on Blackwell, :func:`is_blackwell`) and
:data:`NVFP4_NO_TP_OVERLAP` (the families whose NVFP4 configs turn TP overlap off). Every
default is cited where it is set.
"""

from __future__ import annotations

from typing import Any

from stage_core.errors import ConfigError
from stage_explore.system import load_system
from stage_explore.validation.infer_bridge_dispatch import LAST_EARLY_QWEN3_FAMILY
from stage_explore.validation.infer_release import Defaults

#: Megatron-Bridge's per-model performance recipes (scripts/performance/configs, container 25.xx
#: on): (flavor, system presets, recompute modules, why). A row whose ``recompute`` column is
#: empty takes the recipe's selective modules (those on a layout of their own:
#: :data:`~stage_explore.validation.infer_bridge_moe.BRIDGE_MOE_RECIPES`).
BRIDGE_RECIPES: tuple[tuple[str, tuple[str, ...], tuple[str, ...], str], ...] = (
    ("gpt-oss-120b", ("h100-80gb", "b200"), ("layernorm", "moe_act"),
     "gpt_oss_workload_base_configs.py (NVIDIA-NeMo/Megatron-Bridge 07eea52d): "
     "GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V1 / _B200_BF16_V1 / V2 recompute_modules "
     "['layernorm', 'moe_act'] (the B300 configs recompute nothing)"),
    ("deepseek-v3", ("h100-80gb",), ("mla_up_proj", "mlp"),
     "deepseek_llm_pretrain.py deepseek_v3_h100 configs: recompute_granularity selective, "
     "recompute_modules [mla_up_proj, mlp]"),
)  # fmt: skip
#: Framework options of Megatron-Bridge's per-model performance recipes, for a row that names
#: Megatron-Bridge: (flavor, system presets, first container, last container, options, why).
BRIDGE_OPTIONS: tuple[
    tuple[str, tuple[str, ...], tuple[int, int], tuple[int, int], dict[str, bool], str], ...
] = (
    ("qwen3-235b-a22b", ("h100-80gb",), (25, 1), LAST_EARLY_QWEN3_FAMILY,
     {"moe_comm_overlap": False, "tp_comm_overlap": True},
     "no --overlap-moe-expert-parallel-comm and TP communication overlap on (moe_comm_overlap "
     "false, tp_comm_overlap): the 25.09 runs read the earlier scripts/performance/configs/qwen3/ "
     "family (infer_bridge_dispatch module docstring, s29 qwen2509): qwen3_235b_a22b_llm_"
     "pretrain.py (27dfb3df) qwen3_235b_a22b_h100_fp8_config and qwen3_llm_pretrain.py "
     "(0fa501ac) qwen3_235b_a22b_h100_config build CommOverlapConfig(tp_comm_overlap=True) and "
     "set no moe_a2a_overlap"),
    ("qwen3-235b-a22b", ("h100-80gb",), (25, 10), (99, 12),
     {"moe_comm_overlap": True, "tp_comm_overlap": False},
     "--overlap-moe-expert-parallel-comm on and no TP communication overlap (moe_comm_overlap, "
     "tp_comm_overlap false): Megatron-Bridge scripts/performance/configs/qwen/"
     "qwen3_llm_pretrain.py (05c0c90f) qwen3_235b_a22b_pretrain_config_h100: "
     "CommOverlapConfig(tp_comm_overlap=False); qwen3_workload_base_configs.py "
     "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V1 moe_a2a_overlap=True"),
    ("deepseek-v3", ("h100-80gb",), (25, 1), (25, 12),
     {"moe_deepep": True, "overlap_grad_reduce": False},
     "the dispatch on DeepEP and no gradient-reduce overlap (moe_deepep, overlap_grad_reduce "
     "false): Megatron-Bridge scripts/performance/configs/deepseek/deepseek_llm_pretrain.py "
     "deepseek_v3_h100_1024gpus_fp8_config: pretrain_config(..., enable_deepep=True) "
     "(NVIDIA-NeMo 01328424), overlap_grad_reduce False"),
    ("deepseek-v3", ("h100-80gb",), (26, 1), (99, 12),
     {"overlap_grad_reduce": False},
     "no gradient-reduce overlap (overlap_grad_reduce false): Megatron-Bridge scripts/"
     "performance/configs/deepseek/deepseek_llm_pretrain.py deepseek_v3_pretrain_config_h100 "
     "(NVIDIA-NeMo 69655bff), whose dispatcher backend is the workload base config's "
     "moe_flex_dispatcher_backend (HybridEP on every H100 config of 04264182 / f0e2c37e: "
     "infer_bridge_dispatch.BRIDGE_HYBRIDEP), no longer pretrain_config(enable_deepep=True)"),
    ("deepseek-v3", ("h100-80gb",), (25, 1), (25, 9),
     {"moe_comm_overlap": True},
     "--overlap-moe-expert-parallel-comm on (moe_comm_overlap): the 25.09-era "
     "deepseek_llm_pretrain.py set_moe_a2a_overlap_overrides (overlap_moe_expert_parallel_comm "
     "True); the later deepseek_workload_base_configs.py H100_V1 sets moe_a2a_overlap=False"),
)  # fmt: skip


def bridge_options(
    flavor: str, system: str, release: tuple[int, int], said: str, out: Defaults
) -> None:
    """The framework options of the Megatron-Bridge performance recipe of ``flavor`` on
    ``system`` in container ``release`` (:data:`BRIDGE_OPTIONS`), for a row naming
    Megatron-Bridge (``said``: where)."""
    for name, systems, first, last, options, why in BRIDGE_OPTIONS:
        if name == flavor and system in systems and first <= release <= last:
            out.options.update(options)
            out.notes.append(f"{why} ({said}; the text names Megatron-Bridge)")


def bridge_connections(layout: dict[str, Any], system: str, out: Defaults) -> None:
    """``CUDA_DEVICE_MAX_CONNECTIONS`` of Megatron-Bridge's performance launcher on Blackwell:
    32 when the row runs tensor or context parallelism beside data or pipeline parallelism."""
    sizes = {k: int(layout.get(k, 1)) for k in ("tp", "cp", "dp", "pp")}
    split = sizes["tp"] > 1 or sizes["cp"] > 1
    if not (is_blackwell(system) and split and (sizes["dp"] > 1 or sizes["pp"] > 1)):
        return
    out.options["cuda_device_max_connections"] = 32
    out.notes.append(
        "CUDA_DEVICE_MAX_CONNECTIONS 32 (cuda_device_max_connections 32: userbuffers' pipelined "
        "GEMM chunks run concurrently on Transformer Engine's streams): Megatron-Bridge "
        "scripts/performance perf_plugins.py PerfEnvPlugin._set_num_cuda_device_max_connections "
        "sets 32 on sm100 or newer when (tp > 1 or cp > 1) and (dp > 1 or pp > 1) ('We need "
        "extra connections to avoid serialization of streams'; 1 on Hopper), the launcher of "
        "the performance summary's runs (the text names Megatron-Bridge; a Blackwell GPU)"
    )


#: Model families whose Megatron-Bridge performance configs turn TP communication overlap off under
#: NVFP4, and where that is read.
NVFP4_NO_TP_OVERLAP = ("llama", "gpt-oss")
NVFP4_NO_TP_OVERLAP_WHY = (
    "no TP communication overlap under NVFP4 (tp_comm_overlap false): Megatron-Bridge "
    "scripts/performance/configs/llama/llama3_llm_pretrain.py (55387ccb), llama31_llm_pretrain.py "
    "and gpt_oss_llm_pretrain.py set cfg.comm_overlap.tp_comm_overlap = False if precision == "
    "'nvfp4' in every per-GPU config"
)


#: Model providers of Megatron-Bridge that leave Megatron-Core's apply_rope_fusion at its
#: default False (megatron/core/transformer/transformer_config.py); the Llama and Nemotron
#: providers enable it (fusions.can_enable_apply_rope_fusion).
UNFUSED_ROPE_FAMILIES = ("gpt-oss",)


def bridge_recipe(
    flavor: str, family: str, system: str, recompute_empty: bool, out: Defaults
) -> None:
    """A Megatron-Bridge row's rotary embedding unfused for the providers that leave it so
    (:data:`UNFUSED_ROPE_FAMILIES`) and, when its ``recompute`` column is empty, the selective
    recompute of its performance recipe (:data:`BRIDGE_RECIPES`)."""
    if family in UNFUSED_ROPE_FAMILIES:
        out.options["rope_fusion"] = False
        out.notes.append(
            "the rotary embedding unfused (rope_fusion false): Megatron-Core's apply_rope_fusion "
            f"defaults to False and Megatron-Bridge's {family} provider (GPTOSSProvider) does "
            "not set it"
        )
    for name, systems, modules, why in BRIDGE_RECIPES:
        if name == flavor and system in systems and recompute_empty:
            out.parallel["recompute"] = "selective"
            out.parallel["recompute_modules"] = modules
            out.notes.append(
                f"selective recompute of {', '.join(modules)}, the Megatron-Bridge recipe of "
                f"{flavor} on {system}: {why} (the recompute column is empty)"
            )


def is_blackwell(system: str) -> bool:
    """Whether the preset ``system`` is Blackwell or later (an ``mxfp8`` peak, as the framework
    profile's attention_kernel_on tells)."""
    try:
        return "mxfp8" in load_system(system).accelerator.peak_flops_per_s
    except ConfigError:
        return False
