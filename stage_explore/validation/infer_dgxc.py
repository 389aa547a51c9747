"""Defaults of NVIDIA's DGX Cloud Benchmarking recipes (NVIDIA/dgxc-benchmarking) that an
inferred setup reads when a Megatron-Core row names them (:mod:`stage_explore.validation.
infer_defaults`; 5 Dec 2026, s14 infer5).

The recipes of the NeMo 1.x era (GSW 24.11 to 25.02: NeMo Launcher's megatron_gpt_pretraining.py
driven by each model's ``configure.sh`` and model yaml) set per model what no container default
reaches: Transformer Engine's attention backend in the job's environment (``NVTE_FUSED_ATTN=0``
turns off cuDNN's fused attention, so Transformer Engine runs the flash-attn package,
FlashAttention-2), and the yaml's optimizer, gradient-reduction dtype, recompute, loss fusion
and experts' MLP (``moe_grouped_gemm``; s17 infer8).
The NeMo 2.0 recipes (GSW 25.04 on) run NeMo's performance scripts instead; their rows keep the
container's defaults.
"""

from __future__ import annotations

import re
from typing import Any

from stage_explore.validation.infer_release import Defaults, container, row_text

_DGXC = re.compile(r"dgx\s*cloud\s*benchmarking|dgxc[\s_-]*benchmarking", re.IGNORECASE)
_NEMO_LAUNCHER = re.compile(r"nemo[\s_-]*(?:framework[\s_-]*)?launcher", re.IGNORECASE)
_NEMO_2 = re.compile(r"nemo\s*2\.0", re.IGNORECASE)
#: The first container of the NeMo 2.0 recipes (DGX Cloud Benchmarking GSW 25.04: NeMo 25.02.01).
FIRST_NEMO_2 = (25, 1)

#: What a NeMo 1.x recipe's ``configure.sh`` and model yaml set per model: (model pattern,
#: framework options, parallel fields (a recompute only where the column is empty), model
#: fields, why).
DGXC_NEMO1_MODELS: tuple[
    tuple[str, dict[str, bool | str], dict[str, Any], dict[str, Any], str], ...
] = (
    (r"\bgrok[\s_-]*1\b", {"attention_kernel": "fa2", "moe_sequential_mlp": True},
     {"grad_fp32": False}, {"capacity_factor": 1.0},
     "attention on FlashAttention-2, the experts as Megatron-Core's SequentialMLP, gradients "
     "reduced in bf16 and the experts' tokens dropped and padded to capacity factor 1.0 "
     "(attention_kernel fa2, moe_sequential_mlp, grad_fp32 false, model capacity_factor 1.0): "
     "grok1/configure.sh (NVIDIA/dgxc-benchmarking 143b90dd, the GSW 24.11 / 25.02 recipe) "
     "exports NVTE_FUSED_ATTN=0 at every scale, so Transformer Engine runs the flash-attn "
     "package; grok1/grok1_314b.yaml (35a9aecc) moe_grouped_gemm false (Megatron-Core's "
     "get_gpt_layer_with_transformer_engine_spec builds SequentialMLP: one MLP per local "
     "expert on torch.split slices, torch.cat of their outputs), optim mcore_distributed_optim "
     "with grad_sync_dtype bf16, moe_expert_capacity_factor 1.0 with "
     "moe_pad_expert_input_to_capacity true"),
    (r"\bnemotron[\s_-]*4?[\s_-]*340\s*b\b",
     {"attention_kernel": "fa2", "distributed_fused_adam": "bf16", "native_cross_entropy": True},
     {"grad_fp32": False, "recompute": "selective"}, {},
     "attention on FlashAttention-2, Apex's DistributedFusedAdam with bf16 state, gradients "
     "reduced in bf16, selective recompute and the fused loss (attention_kernel fa2, "
     "distributed_fused_adam bf16, grad_fp32 false, recompute selective, native_cross_entropy): "
     "nemotron/configure.sh (NVIDIA/dgxc-benchmarking 35a9aecc) exports NVTE_FUSED_ATTN=0 in "
     "its 340b branch; nemotron/nemotron4-340b-synth.yaml (8f5cbb37) optim "
     "distributed_fused_adam with dtype bf16 and grad_sync_dtype bf16, "
     "activations_checkpoint_granularity selective, cross_entropy_loss_fusion true (NeMo 1.0 "
     "sets no cross_entropy_fusion_impl: Megatron-Core's 'native')"),
    (r"\bgpt[\s_-]*3\b.*\b175\s*b\b", {"distributed_fused_adam": "fp32"}, {"grad_fp32": False},
     {},
     "Apex's DistributedFusedAdam with its default fp32 state and gradients reduced in bf16 "
     "(distributed_fused_adam fp32, grad_fp32 false): nemo_megatron/gpt3_175b_hydra.yaml "
     "(NVIDIA/dgxc-benchmarking 35a9aecc and 8f5cbb37) optim distributed_fused_adam with no "
     "dtype and grad_sync_dtype bf16"),
    (r"\bnemotron[\s_-]*4?[\s_-]*15\s*b\b", {"native_cross_entropy": True}, {}, {},
     "the fused loss (native_cross_entropy): nemotron/nemotron4-15b-synth.yaml "
     "(NVIDIA/dgxc-benchmarking 8f5cbb37) sets cross_entropy_loss_fusion true (NeMo 1.0 sets no "
     "cross_entropy_fusion_impl: Megatron-Core's 'native'); its configure.sh 15b branch exports "
     "NVTE_FUSED_ATTN=1 (cuDNN attention, the profile's) and the yaml's optimizer is "
     "mcore_distributed_optim without grad_sync_dtype (fp32 reduction, the default)"),
)  # fmt: skip
#: FP8 GEMM row alignment of Transformer Engine's Fp8Padding for the delayed / current
#: scaling recipes of the NeMo 1.x era (transformer_engine/pytorch/module/fp8_padding.py).
FP8_ALIGN = 16
#: NeMo 1.x's pipeline outputs (as the container eras of infer_megatron for NeMo 1.x
#: containers): the launcher's megatron_gpt_pretraining.py builds NeMo 1.x's MegatronGPTModel.
NEMO1_OUTPUTS = (
    "each pipeline stage keeps the outputs it sent until their backward "
    "(pipeline_outputs_kept): the recipe runs NeMo 1.x's megatron_gpt_pretraining.py, whose "
    "MegatronBaseModel.build_model_parallel_config sets Megatron-Core's "
    "deallocate_pipeline_outputs False ('not supported in NeMo')"
)

#: FP8 parameters of the NeMo 1.x recipes' FP8 runs.
NEMO1_FP8_PARAMS = (
    "FP8 parameters (fp8_param_gather): the recipes' configure.sh pass +model.fp8_params="
    "$FP8_ENABLED with model.fp8=$FP8_ENABLED (NVIDIA/dgxc-benchmarking llama3.1/configure.sh "
    "and grok1/configure.sh at 143b90dd, nemotron/configure.sh at 35a9aecc), NeMo 1.x's "
    "fp8_params: the linear layers' parameters held and all-gathered in FP8"
)


def nemo1_recipe(row: dict[str, str]) -> bool:
    """Whether the row names a DGX Cloud Benchmarking recipe of the NeMo 1.x era: the text
    names the recipes and either NeMo Launcher or a container before 25.01, and not NeMo 2.0."""
    text = row_text(row)
    if not _DGXC.search(text) or _NEMO_2.search(text):
        return False
    release = container(row)
    if release is not None:
        return release < FIRST_NEMO_2
    return bool(_NEMO_LAUNCHER.search(text))


def capacity_rows(stated: dict[str, int], top_k: int, experts: int, factor: float) -> int:
    """Rows each expert computes per source rank when the router pads every expert to its
    capacity: the rank's micro-batch tokens (sequence-parallel over TP and split over CP) times
    top-k over the experts, times the capacity factor (0 when the layout is not stated)."""
    tokens = stated.get("micro_batch", 1) * stated.get("seq_len", 0)
    tokens //= max(stated.get("tp", 1) * stated.get("cp", 1), 1)
    return int(tokens * top_k * factor) // max(experts, 1)


def aligned_fp8_padding(
    stated: dict[str, int], routing: tuple[int, int], factor: float, out: Defaults
) -> None:
    """No FP8 row padding of the experts' tokens when a router padding every expert to its
    ``factor`` capacity gives each a multiple of :data:`FP8_ALIGN` rows (``routing``: the
    model's top-k and experts)."""
    rows = capacity_rows(stated, *routing, factor) if all(routing) else 0
    if rows and rows % FP8_ALIGN == 0:
        out.options["moe_fp8_padding"] = False
        out.notes.append(
            f"no FP8 row padding of the experts' tokens (moe_fp8_padding false): "
            f"padded to capacity, every expert computes {rows} rows per source "
            f"rank, a multiple of {FP8_ALIGN}, so Megatron-Core's "
            "SequentialMLP._pad_tensor_for_fp8 / Transformer Engine's Fp8Padding "
            "copy nothing ('no padding needed' when every count is aligned)"
        )


def dgxc_defaults(
    row: dict[str, str],
    precision: str,
    out: Defaults,
    stated: dict[str, int] | None = None,
    routing: tuple[int, int] = (0, 0),
) -> None:
    """What a NeMo 1.x DGX Cloud Benchmarking recipe sets for the row's model
    (:data:`DGXC_NEMO1_MODELS`, :data:`NEMO1_OUTPUTS`, :data:`NEMO1_FP8_PARAMS` when
    ``precision`` is fp8), into ``out``; ``stated`` the row's integer cells and ``routing``
    the model's (top-k, experts) for an FP8 MoE row padded to capacity."""
    if not nemo1_recipe(row):
        return
    said = "the text names a DGX Cloud Benchmarking recipe of the NeMo 1.x launcher"
    out.options["pipeline_outputs_kept"] = True
    out.notes.append(f"{NEMO1_OUTPUTS} ({said})")
    if precision == "fp8":
        out.options["fp8_param_gather"] = True
        out.notes.append(f"{NEMO1_FP8_PARAMS} ({said})")
    empty = not row.get("recompute", "").strip()
    for pattern, options, parallel, model, why in DGXC_NEMO1_MODELS:
        if re.search(pattern, row.get("model", ""), re.IGNORECASE):
            out.options.update(options)
            out.parallel.update({k: v for k, v in parallel.items() if k != "recompute" or empty})
            out.model.update(model)
            out.notes.append(f"{why} ({said})")
            factor = float(model.get("capacity_factor", 0.0))
            if precision == "fp8" and factor:
                aligned_fp8_padding(stated or {}, routing, factor, out)
            return
