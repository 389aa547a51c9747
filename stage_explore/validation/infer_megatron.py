"""Megatron-Core's defaults of an inferred setup by the NeMo / Megatron-Bridge container a row
names (:mod:`stage_explore.validation.infer_defaults` dispatches a ``megatron-core`` row here).

Holds the container-era tables (:data:`MEGATRON_CORE_ERAS`, the fused loss in
:data:`LOSS_ERAS` and :data:`LAUNCHER_LOSS`), the userbuffers methods and bulk SM margin a
recipe's overlap config sets (tables in :mod:`~stage_explore.validation.infer_userbuffers`),
NVIDIA's MLPerf implementations on NeMo 1.x and 2.0 (in
:mod:`~stage_explore.validation.infer_mlperf`), MLA's attention on Blackwell before cuDNN
9.11, and Megatron-Bridge's per-model performance recipes (in
:mod:`~stage_explore.validation.infer_bridge_recipes`). Every default is cited where it is set,
never chosen from a published row, and reported as the row's assumption.
"""

from __future__ import annotations

import re
from typing import Any

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_explore.system import load_system
from stage_explore.validation.infer_bridge_dispatch import (
    bridge_hybridep,
    qwen3_a2a_overlap,
)
from stage_explore.validation.infer_bridge_drop import bridge_token_drop
from stage_explore.validation.infer_bridge_graphs import bridge_full_iteration
from stage_explore.validation.infer_bridge_layout import bridge_deepseek_layout
from stage_explore.validation.infer_bridge_moe import bridge_moe_recompute
from stage_explore.validation.infer_bridge_recipes import (
    NVFP4_NO_TP_OVERLAP,
    NVFP4_NO_TP_OVERLAP_WHY,
    bridge_connections,
    bridge_options,
    bridge_recipe,
    is_blackwell,
)
from stage_explore.validation.infer_buckets import stated_bucket
from stage_explore.validation.infer_fields import NO_MTP, infer_framework, names_bridge
from stage_explore.validation.infer_launcher import (
    launcher_config,
    launcher_grad_sync,
    launcher_loss,
    launcher_yaml_grad_sync,
)
from stage_explore.validation.infer_loss_impl import stated_loss_impl
from stage_explore.validation.infer_mcore08 import r08_userbuffers, readme_interleaving
from stage_explore.validation.infer_megatron_lm import (
    launch_model_defaults,
    launch_options,
    megatron_lm_launch,
)
from stage_explore.validation.infer_mlperf import (
    MLPERF_GPT3_V40,
    MLPERF_NEMO2,
    cell,
    mlperf_gpt3,
    mlperf_gpt3_round,
    mlperf_nemo2_implementation,
    mlperf_stated_switches,
)
from stage_explore.validation.infer_mlperf2509 import mlperf_2509_loss, mlperf_2509_recipe
from stage_explore.validation.infer_mlperf_amd import mlperf_amd_implementation
from stage_explore.validation.infer_mlperf_gptoss import mlperf_gptoss_defaults
from stage_explore.validation.infer_mlperf_moe import mlperf_moe_switches
from stage_explore.validation.infer_modelzoo import model_zoo_tp_overlap
from stage_explore.validation.infer_nemo2 import nemo2_deepseek_v3, nemo2_token_drop
from stage_explore.validation.infer_qkv_rope import single_qkv_rope
from stage_explore.validation.infer_rank_order import tp_pp_dp_rank_order
from stage_explore.validation.infer_release import (
    Defaults,
    container,
    row_text,
)
from stage_explore.validation.infer_stated import stated_or_inferred
from stage_explore.validation.infer_userbuffers import (
    bulk_config,
    bulk_note,
    fp8_buf_config,
    fp8_buf_options,
    mlperf_gpt3_forward_scatters,
    ring_config,
    ring_options,
)

#: FP8 recipes whose NeMo 2.0 / Megatron-Bridge precision config sets fp8_param_gather
#: (bf16_with_fp8_mixed, bf16_with_fp8_current_scaling_mixed, bf16_with_mxfp8_mixed).
FP8_PARAM_RECIPES = ("delayed", "tensorwise", "mxfp8")
#: Era defaults an MLPerf submission does not take (its own scripts and model configs, not the
#: NeMo launcher's environment; its configs naming deallocate_pipeline_outputs were not read).
NOT_MLPERF = (("attention_kernel", "fa2"), ("pipeline_outputs_kept", True))
#: Megatron-Core releases by container (``YY.MM``), each default with its source:
#: (first container, last container, field kind, name, value, why).
MEGATRON_CORE_ERAS: tuple[tuple[tuple[int, int], tuple[int, int], str, str, Any, str], ...] = (
    ((0, 0), (24, 7), "options", "attention_kernel", "fa2",
     "attention on FlashAttention-2 (attention_kernel fa2): NeMo-Framework-Launcher's "
     "launcher_scripts/conf/config.yaml exports NVTE_FUSED_ATTN: 0 into every job of the NeMo "
     "1.x containers up to 24.07 (NVIDIA/NeMo-Framework-Launcher 01d0773 at nemo:24.03.01; "
     "launcher copies at nemo:24.05.01), so Transformer Engine runs the flash-attn package"),
    ((0, 0), (24, 7), "options", "pipeline_outputs_kept", True,
     "each pipeline stage keeps the outputs it sent until their backward "
     "(pipeline_outputs_kept): NeMo 1.x's MegatronBaseModel.build_model_parallel_config sets "
     "Megatron-Core's deallocate_pipeline_outputs False ('not supported in NeMo'), so "
     "deallocate_output_tensor leaves a sent output's data in place; the NeMo 1.x containers "
     "up to 24.07 (NeMo 2.0's GPTConfig, from 24.09, sets it True)"),
    ((24, 5), (24, 7), "options", "ub_bulk_sm_margin", False,
     "userbuffers bulk overlaps without an SM margin (ub_bulk_sm_margin false): the NeMo "
     "1.x containers 24.05 / 24.07 ship Transformer Engine 1.6.0.dev0 / 1.8.0.dev0 (NeMo "
     "Framework user guide 24.09, 'Software Component Versions'), whose initialize_ub builds "
     "every overlap without a config by add_ub(..., set_sm_margin=0) (TE 1.6-1.9, before the "
     "userbuffers refactor TransformerEngine#1067), and every NeMo-Framework-Launcher "
     "conf/training/tp_overlap/ub_cfg_*.yaml a model yaml names sets set_sm_margin 0 on its "
     "bulk overlaps (qkv/fc1 dgrad and wgrad): no margin either way"),
    ((25, 1), (99, 12), "parallel", "grad_fp32", False,
     "gradients reduced in bf16 (grad_fp32 false): NeMo 2.0's performance scripts "
     "(scripts/performance/utils.py set_precision_configs: grad_reduce_in_fp32 = False) and "
     "Megatron-Bridge's (scripts/performance/configs set_*_common_configs: "
     "grad_reduce_in_fp32 False)"),
    ((25, 1), (99, 12), "fp8", "fp8_param_gather", True,
     "FP8 parameters (framework option fp8_param_gather): NeMo 2.0's bf16_with_fp8_mixed and "
     "Megatron-Bridge's mixed_precision.py (NVIDIA-NeMo/Megatron-Bridge 0509780) set "
     "fp8_param_gather = True in the FP8-CS and MXFP8 precision configs"),
    ((25, 1), (99, 12), "moe", "etp", 1,
     "expert tensor parallel size 1 (etp 1): the Megatron-Bridge MoE performance base configs "
     "(scripts/performance/configs: BASE_GPT_OSS_120B_CONFIG, the Qwen3 and DeepSeek-V3 "
     "base configs) set expert_tensor_parallel_size 1"),
    ((26, 1), (99, 12), "options", "attention_kernel", "cudnn-9.17",
     "attention on cuDNN 9.17's fused attention (attention_kernel cudnn-9.17): a 26.xx "
     "container, after cuDNN 9.17 (cudnn-frontend v1.17.0's SDPA release, after v1.16.0 of "
     "7 Nov 2025); Transformer Engine's get_attention_backend prefers FusedAttention on sm90+"),
)  # fmt: skip


#: The loss by container (``YY.MM``): NeMo 2.0's GPTConfig (nemo/collections/llm/gpt/model/base.py,
#: every stored version from 2024) and Megatron-Bridge's GPTModelProvider (src/megatron/bridge/
#: models/gpt_provider.py) set cross_entropy_loss_fusion = True, so Megatron-Core's GPTModel
#: calls its fused cross-entropy; which one is cross_entropy_fusion_impl: Megatron-Core's
#: default 'native' in the early-2025 performance scripts (NVIDIA/NeMo 013fdca7
#: scripts/performance/utils.py set_primary_perf_configs sets no impl), 'te' in every later
#: one (scripts/performance/utils.py 07ed46e0, helpers.py 0349f235 set_perf_optimization_configs:
#: cross_entropy_fusion_impl = 'te') and in Megatron-Bridge's performance scripts, which reset
#: a recipe's 'native' (the GPT-OSS recipes') to 'te' after building it
#: (helpers.set_common_perf_overrides at NVIDIA-NeMo/Megatron-Bridge 0fa501ac). (first, last,
#: option, why). The NeMo 1.x launcher configs of 24.xx name cross_entropy_loss_fusion in some
#: model yamls only (the llama2_7b / llama3_70b / nemotron_340b ones, not gpt3 175b / grok1 /
#: llama3_8b): :data:`LAUNCHER_LOSS` reads the families whose stored yamls all name it (Llama
#: 3.1); elsewhere the unfused fp32 loss stays the default.
LOSS_ERAS: tuple[tuple[tuple[int, int], tuple[int, int], str, str], ...] = (
    ((25, 1), (25, 2), "native_cross_entropy",
     "the loss as Megatron-Core's native fused cross-entropy (native_cross_entropy): NeMo 2.0's "
     "GPTConfig cross_entropy_loss_fusion = True with Megatron-Core's default "
     "cross_entropy_fusion_impl 'native' (the early-2025 performance scripts set no impl)"),
    ((25, 3), (99, 12), "te_cross_entropy",
     "the loss as Transformer Engine's fused cross-entropy (te_cross_entropy): "
     "cross_entropy_loss_fusion = True (NeMo 2.0 GPTConfig, Megatron-Bridge GPTModelProvider) "
     "and cross_entropy_fusion_impl = 'te' (NeMo's later set_perf_optimization_configs, "
     "Megatron-Bridge's set_common_perf_overrides)"),
)  # fmt: skip


def _loss(release: tuple[int, int], mlperf: bool, said: str, out: Defaults) -> None:
    """The fused loss a NeMo 2.0 / Megatron-Bridge container's recipes run (:data:`LOSS_ERAS`);
    an MLPerf submission runs its own pretrain.py on NeMo 2.0's configs, not NeMo's
    performance scripts, so it keeps the default impl 'native'."""
    for first, last, option, why in LOSS_ERAS:
        if not first <= release <= last:
            continue
        if mlperf and option != "native_cross_entropy":
            option = "native_cross_entropy"
            why = (
                "the loss as Megatron-Core's native fused cross-entropy (native_cross_entropy): "
                "an MLPerf submission's own pretrain.py builds NeMo 2.0's GPTConfig "
                "(cross_entropy_loss_fusion = True; conf/custom.yaml "
                "CROSS_ENTROPY_LOSS_FUSION default True) and sets no cross_entropy_fusion_impl "
                "(Megatron-Core's default 'native'); NeMo's performance scripts' 'te' is not run"
            )
        out.options[option] = True
        out.notes.append(f"{why} ({said})")


def _measured_kernel(system: str, kernel: str) -> bool:
    """Whether the preset ``system`` has a figure for the attention ``kernel`` (else the
    backend falls back to the preset's best kernel, not the software's)."""
    try:
        kernels = load_system(system).accelerator.kernels
        return kernels is not None and kernel in kernels.attention_kernels
    except ConfigError:
        return False


def _megatron_core(
    row: dict[str, str],
    precision: str,
    recipe: str,
    moe: bool,
    system: str,
    out: Defaults,
    family: str = "",
    shape: tuple[int, int] = (0, 1),
) -> None:
    """``shape``: the model's hidden size (the row's cell, else the flavor's) and the row's
    tensor-parallel size."""
    release = container(row)
    if (
        release is None
        and family == "gpt"
        and mlperf_gpt3_round(row, precision, _gpus(system) == "blackwell", shape[1], out)
    ):
        return
    said = "" if release is None else f"the text names container {release[0]}.{release[1]:02d}"
    if release is None:
        implementation = mlperf_nemo2_implementation(row)
        if implementation:
            release, said = MLPERF_NEMO2, implementation
    if release is None and mlperf_amd_implementation(row, precision, out):
        return
    if release is None:
        attention = (
            "cuDNN attention" if _measured_kernel(system, "cudnn")
            else f"cuDNN attention, which {system} has no figure for: its best kernel"
        )  # fmt: skip
        out.notes.append(
            "no NeMo / Megatron-Bridge container named: the megatron-core profile's defaults "
            f"({attention}, fp32 gradient reduction, 16-bit parameters)"
        )
        r08_userbuffers(row, out)
        model_zoo_tp_overlap(row, shape[1], out)
        if megatron_lm_launch(infer_framework(row).assumption):
            launch_options(row, out)
            launch_model_defaults(row, out)
        return
    mlperf = "mlperf" in row_text(row).lower()
    for first, last, kind, name, value, why in MEGATRON_CORE_ERAS:
        if not first <= release <= last:
            continue
        if mlperf and (name, value) in NOT_MLPERF:
            continue  # the launcher's environment, NeMo's model config: MLPerf runs its own
        if name == "attention_kernel" and value != "fa2" and not _measured_kernel(system, value):
            out.notes.append(
                f"attention on the profile's cudnn kernel: {system} has no {value} figure "
                f"({said}; the generation before it is the measured one)"
            )
            continue
        if kind == "fp8" and (precision != "fp8" or recipe not in FP8_PARAM_RECIPES):
            continue
        if kind == "moe" and not moe:
            continue
        if kind in ("options", "fp8"):
            out.options[name] = value
        else:
            out.parallel[name] = value
        out.notes.append(f"{why} ({said})")
    if mlperf:
        mlperf_stated_switches(row, out)
    if precision == "fp4" and not mlperf and shape[1] > 1 and family in NVFP4_NO_TP_OVERLAP:
        out.options["tp_comm_overlap"] = False
        out.notes.append(f"{NVFP4_NO_TP_OVERLAP_WHY} ({said})")
    _loss(release, mlperf, said, out)
    if release < MLPERF_NEMO2 and not mlperf:
        launcher_loss(row, said, out)
        launcher_config(row, said, out)
        launcher_grad_sync(row, family, release, system, out)
        launcher_yaml_grad_sync(family, shape[0], said, out)
    if release >= (25, 1) and not mlperf and shape[1] > 1:
        _userbuffers_methods(row, family, shape[0], system, precision, said, out)
    if precision == "fp8" and not mlperf and shape[1] > 1 and _gpus(system) == "hopper":
        _fp8_buffers(row, family, shape[0], release, said, out)
    if mlperf and family == "gpt" and release < MLPERF_NEMO2:
        mlperf_gpt3(precision, release, said, out)
        hopper_fp8 = precision == "fp8" and _gpus(system) == "hopper" and shape[1] > 1
        if hopper_fp8 and release >= MLPERF_GPT3_V40:
            options, note = mlperf_gpt3_forward_scatters(cell(row, "micro_batch"))
            out.options.update(options)
            out.notes.append(f"{note} ({said}; the text names MLPerf)")
    if release >= MLPERF_NEMO2:
        _nemo2_amax_and_dropout(row, family, shape[0], precision, mlperf, said, out)
    if shape[1] > 1 and "ub_bulk_sm_margin" not in out.options:
        _bulk_margin(row, family, shape[0], system, release, mlperf, said, out)


def _userbuffers_methods(
    row: dict[str, str],
    family: str,
    hidden: int,
    system: str,
    precision: str,
    said: str,
    out: Defaults,
) -> None:
    """The forward reduce-scatters' userbuffers method of a NeMo 2.0 / Megatron-Bridge
    performance recipe (:mod:`~stage_explore.validation.infer_userbuffers`); an MLPerf
    submission names its own conf/tp_overlap configs, not read here."""
    gpus = _gpus(system)
    if not gpus:
        return
    bridge = names_bridge(row)
    if re.search(r"\bgrok", row.get("model", ""), re.IGNORECASE):
        family = "grok-1"  # read on the mixtral base flavor; its recipe is its own
    entry = ring_config(family, hidden, gpus, system, precision, bridge)
    if entry is None or out.options.get("tp_comm_overlap") is False:
        return
    options, note = ring_options(entry)
    out.options.update(options)
    who = "the text names Megatron-Bridge" if bridge else "NeMo 2.0's recipes"
    out.notes.append(f"{note} ({said}; {who})")


def _fp8_buffers(
    row: dict[str, str],
    family: str,
    hidden: int,
    release: tuple[int, int],
    said: str,
    out: Defaults,
) -> None:
    """The FP8 buffers of an H100 FP8 row's pipelined forward reduce-scatters where the
    recipe's userbuffers config sets ``fp8_buf``
    (:data:`~stage_explore.validation.infer_userbuffers.FP8_BUF_CONFIGS`)."""
    entry = fp8_buf_config(family, hidden, cell(row, "seq_len"), release)
    if entry is None or out.options.get("tp_comm_overlap") is False:
        return
    options, note = fp8_buf_options(entry, dict(out.options))
    if options:
        out.options.update(options)
        out.notes.append(f"{note} ({said})")


def _gpus(system: str) -> str:
    """The GPU generation of a preset as the userbuffers tables key it ("" for neither)."""
    if is_blackwell(system):
        return "blackwell"
    return "hopper" if system.startswith("h100") else ""


def _bulk_margin(
    row: dict[str, str],
    family: str,
    hidden: int,
    system: str,
    release: tuple[int, int],
    mlperf: bool,
    said: str,
    out: Defaults,
) -> None:
    """The bulk overlaps' SM margin of a recipe's userbuffers config
    (:data:`~stage_explore.validation.infer_userbuffers.BULK_CONFIGS`): off in every config a
    NeMo 1.x launcher (24.09 on), NeMo 2.0 or Megatron-Bridge recipe names for the model."""
    if re.search(r"\bgrok", row.get("model", ""), re.IGNORECASE):
        family = "grok-1"  # read on the mixtral base flavor; its recipe is its own
    entry = bulk_config(family, hidden, _gpus(system), release)
    if entry is None or out.options.get("tp_comm_overlap") is False:
        return
    out.options["ub_bulk_sm_margin"] = False
    mine = (
        "; an MLPerf submission names its own conf/tp_overlap file, and every stored NVIDIA "
        "MLPerf one sets set_sm_margin 0 on the four bulk overlaps too (GPT-3 v4.0 "
        "h100tp4mbs2.yaml, mlcommons/training_results_v4.0 62f111b7; v4.1 h100tp8mbs1.yaml)"
        if mlperf else ""
    )  # fmt: skip
    out.notes.append(f"{bulk_note(entry)}{mine} ({said})")


def _nemo2_amax_and_dropout(
    row: dict[str, str],
    family: str,
    hidden: int,
    precision: str,
    mlperf: bool,
    said: str,
    out: Defaults,
) -> None:
    """NeMo 2.0 (25.01 on): GPT-3 175B's config without dropout and its performance script's
    FP8 amax reduction over the tensor-parallel group; an MLPerf submission on NeMo 2.0
    (pretrain.py) reduces its amaxes the same way by its conf/custom.yaml default."""
    gpt3_175b = family == "gpt" and hidden == 12288 and not names_bridge(row)
    if gpt3_175b and not mlperf:
        out.model["dropout"] = False
        out.notes.append(
            "no dropout (dropout false): NeMo 2.0's GPTConfig175B sets hidden_dropout and "
            "attention_dropout 0.0 (nemo/collections/llm/gpt/model/base.py; GPTConfig's other "
            f"sizes keep Megatron-Core's 0.1) ({said}; GPT-3 175B)"
        )
    if precision != "fp8" or not (gpt3_175b or mlperf):
        return
    out.options["fp8_amax_reduction"] = "tp_cp"
    why = (
        "an MLPerf submission on NeMo 2.0: pretrain.py sets the model config's "
        "tp_only_amax_red from conf/custom.yaml, ${oc.env:TP_ONLY_AMAX_RED,True} "
        "(tyche_ngpu256_ngc25.04_nemo, MLPerf Training v5.0)"
        if mlperf
        else "NeMo 2.0's scripts/performance/llm/pretrain_gpt3_175b.py sets "
        "recipe.model.config.tp_only_amax_red = True (every stored version)"
    )  # fmt: skip
    out.notes.append(
        "FP8 amaxes reduced over the tensor- and context-parallel group only "
        f"(fp8_amax_reduction tp_cp, Megatron-Core --tp-only-amax-red): {why} ({said})"
    )


#: The last container before cuDNN 9.11, the first cuDNN whose fused attention trains MLA's
#: unequal head dims on Blackwell (cudnn-frontend PR #145, 11 Jun 2025: "d_qk = 192, d_v = 128
#: + Blackwell + bprop"; TransformerEngine issue #2285: FusedAttention refused for DeepSeek-V3
#: on B200 at cuDNN 9.10.1).
MLA_SM100_UNFUSED_UNTIL = (25, 5)


def _mla_on_blackwell(row: dict[str, str], flavor: str, system: str, out: Defaults) -> None:
    """Transformer Engine's attention for an MLA model (q/k head dim != v head dim, above 128)
    on Blackwell in a container before cuDNN 9.11: get_attention_backend finds no fused
    backend (FlashAttention-2 needs equal q/k and v head dims, FlashAttention-3 is sm90 only,
    nvte_get_fused_attn_backend admits head dims > 128 in training on Blackwell only from cuDNN
    9.11) and runs UnfusedDotProductAttention (sm100_attention_kernel unfused; Hopper keeps
    cuDNN's FusedAttention, cuDNN 9.5)."""
    release = container(row)
    spec = get_flavor(flavor)
    if release is None or release > MLA_SM100_UNFUSED_UNTIL or not spec.kv_lora_rank:
        return
    if not is_blackwell(system):
        return
    qk = spec.head_dim + spec.qk_rope_head_dim
    if qk == spec.v_head_dim or max(qk, spec.v_head_dim) <= 128:
        return
    out.options["sm100_attention_kernel"] = "unfused"
    out.notes.append(
        f"attention on Transformer Engine's UnfusedDotProductAttention "
        f"(sm100_attention_kernel unfused): MLA's q/k head dim {qk} and v head dim "
        f"{spec.v_head_dim} have no fused training backend on sm100 before cuDNN 9.11 "
        "(transformer_engine/common/fused_attn/fused_attn.cpp nvte_get_fused_attn_backend; "
        "cudnn-frontend PR #145 of 11 Jun 2025; TransformerEngine issue #2285), after the "
        f"container {release[0]}.{release[1]:02d} the text names"
    )


def megatron_core_defaults(
    row: dict[str, str],
    flavor: str,
    precision: str,
    fp8_recipe: str,
    parallel: dict[str, Any],
    stated: dict[str, int],
    system: str,
    out: Defaults,
) -> None:
    """The defaults of a row read as Megatron-Core on the model ``flavor``, into ``out``: the
    container's eras and recipes, MLA on Blackwell, and from 25.01 Megatron-Bridge's
    per-model recipes (its options and launcher settings when the text names it)."""
    spec = get_flavor(flavor)
    tp = stated_or_inferred(stated, parallel, "tp")
    _megatron_core(
        row, precision, fp8_recipe, bool(spec.num_experts), system, out, str(spec.family),
        (int(stated.get("hidden", spec.hidden)), tp),
    )  # fmt: skip
    mlperf_2509_recipe(row, precision, out)
    mlperf_2509_loss(row, out)
    stated_loss_impl(row, out)
    pp = stated_or_inferred(stated, parallel, "pp")
    tp_pp_dp_rank_order(row, bool(spec.num_experts), pp, out)
    _mla_on_blackwell(row, flavor, system, out)
    stated_bucket(row, out)
    single_qkv_rope(row, flavor, out)
    if "mlperf" in row_text(row).lower():
        recipe = fp8_recipe if precision == "fp8" else ""
        mlperf_moe_switches(row, stated, out, bool(spec.num_experts), recipe)
        mlperf_gptoss_defaults(row, flavor, precision, fp8_recipe, out)
    layers = int(stated.get("layers", spec.layers))
    readme_interleaving(row, stated, parallel, layers, out)
    release = container(row)
    if release is not None and release >= (25, 1):
        empty = not row.get("recompute", "").strip()
        bridge_recipe(flavor, str(spec.family), system, empty, out)
        nemo2_deepseek_v3(row, flavor, release, int(stated.get("pp", 1)), out)
        nemo2_token_drop(row, release, precision, stated, (spec.top_k, spec.num_experts), out)
        if names_bridge(row):
            named = f"the text names container {release[0]}.{release[1]:02d}"
            bridge_options(flavor, system, release, named, out)
            bridge_connections({**parallel, **stated}, system, out)
            recipe = fp8_recipe if precision == "fp8" else ""
            bridge_full_iteration(row, flavor, system, release, recipe, out)
            qwen3_a2a_overlap(
                str(spec.family), bool(spec.num_experts), stated, system, out, release
            )
            bridge_hybridep(flavor, system, release, stated, out, recipe)
            bridge_token_drop(row, precision, stated, (spec.top_k, spec.num_experts), out)
            no_mtp = NO_MTP.search(row.get("model", "").strip().lower())
            bridge_deepseek_layout(flavor, system, 0 if no_mtp else spec.mtp_layers, stated, out)
            if empty:
                bridge_moe_recompute(flavor, system, release, recipe, stated, out)
