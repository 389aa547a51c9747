"""Defaults of the PyTorch-native stacks an inferred setup names (:mod:`stage_explore.validation.
infer_defaults`): NeMo AutoModel's model states, expert sharding, recompute and pipeline split,
and torchtitan's selective checkpointing, compile, AsyncTP, 2025 defaults and pipeline
micro-batches. Every default is cited where it is set and reported as the row's assumption.
"""

from __future__ import annotations

import re
from typing import Any

from stage_core.models import get_flavor
from stage_core.models.spec import Activation, ModelSpec, Norm, Position
from stage_explore.validation.infer_compile import names_compile, settled_clauses
from stage_explore.validation.infer_layer_ac import layer_ac_fields
from stage_explore.validation.infer_named import names_used
from stage_explore.validation.infer_release import (
    TEXT_COLUMNS,
    Defaults,
    dated,
    row_text,
    torch_dated,
)

#: NeMo AutoModel's benchmark configs (examples/benchmark/configs/*_te_deepep.yaml):
#: activation_checkpointing per model family, read when the recompute column is empty.
AUTOMODEL_RECOMPUTE = {"deepseek-moe": "full", "qwen3": "full", "gpt-oss": "none"}
#: NeMo AutoModel's dense pretraining configs: activation_checkpointing per model family, read
#: when the recompute column is empty (5 Dec 2026, s14 infer5): examples/llm_pretrain/
#: llama3_70b_pretrain.yaml and every llama3_1_70b_pretrain_benchmark_*.yaml of April 2026
#: (4 and 8 nodes, CP 1 and 2) and qwen3_8b_pretrain.yaml set distributed.activation_checkpointing
#: true (FSDP2 wraps each transformer block in checkpoint_wrapper: full recompute per block).
AUTOMODEL_DENSE_RECOMPUTE = {"llama": "full", "qwen3": "full"}
#: The largest ep_size of NeMo AutoModel's benchmark configs (examples/benchmark/configs:
#: deepseek_v3_te_deepep_1024.yaml on 1024 GPUs and glm_4.5_air_te_deepep.yaml on 64 nodes set
#: 64; every single-node config sets 8, the data-parallel size).
AUTOMODEL_MAX_EP = 64
_LBS = re.compile(r"\bLBS\s*(\d+)", re.IGNORECASE)
#: torchtitan's pipeline micro-batches since pytorch/torchtitan#1073 ("[PP] Add microbatch_size
#: and remove num_microbatches config", merged April 2025): ``pipeline_parallel_microbatch_size``
#: defaults to 1 and the schedule takes local_batch_size / it micro-batches
#: (torchtitan/config/job_config.py 000204a4), where the removed ``pipeline_parallel_microbatches``
#: defaulted to the stage count (6 Dec 2026, s25 hidden14). A run dated from May 2025, or whose
#: text names ``local_batch_size`` / ``LBS`` (the later name of the per-rank batch), is read so.
MICROBATCH_SIZE_ERA = (2025, 5)
_LOCAL_BATCH = re.compile(r"local[\s_-]batch[\s_-]size|\bLBS\b", re.IGNORECASE)
#: A row's text stating fp32 master (main) weights: ``FP32 main weights``, ``FP32-precision main
#: weights``, ``master weights in fp32``, ``master_weights=True`` (6 Dec 2026, s25 hidden14). An
#: AutoModel MoE row that says so did not run the bf16 model states of AutoModel's own MoE
#: classes (bionemo-framework recipes/mixtral_native_te/benchmarks/nemo_automodel/README.md
#: 7b3212e9: Hugging Face MixtralForCausalLM with "TE FusedAdam with FP32-precision main
#: weights"; TransformerEngine transformer_engine/pytorch/optimizers/fused_adam.py FusedAdam
#: ``master_weights``: an fp32 copy of every bf16 parameter, moments in fp32 by default).
FP32_MASTER = re.compile(
    r"\bfp32[\s_-]*(?:precision[\s_-]*)?(?:master|main)[\s_-]*weights?\b"
    r"|\b(?:master|main)[\s_-]*weights?[\s_-]*(?:in[\s_-]*)?fp32\b"
    r"|\bmaster_weights\s*[=:]\s*true\b",
    re.IGNORECASE,
)


def deepep_expert_parallel(dp: int, experts: int) -> int:
    """The expert-parallel size of an AutoModel DeepEP run whose table leaves EP empty: the
    data-parallel size, at most :data:`AUTOMODEL_MAX_EP`, lowered until it divides both the
    data-parallel size and the expert count (FSDP2Manager asserts dp_size % ep_size == 0;
    apply_ep shards dim 0, the experts, over the EP mesh). 1 when nothing above 1 divides both."""
    ep = max(1, min(dp, AUTOMODEL_MAX_EP, experts))
    while ep > 1 and (dp % ep or experts % ep):
        ep -= 1
    return ep


def _deepep_ep(stated: dict[str, int], dp: int, experts: int, out: Defaults) -> None:
    """EP for an AutoModel row that names DeepEP and leaves the EP column empty (5 Dec 2026,
    s14 infer5): AutoModel builds the DeepEP token dispatcher only in apply_ep, which runs on an
    expert-parallel mesh of more than one rank, so a DeepEP run had EP > 1."""
    if "ep" in stated or not out.options.get("moe_deepep") or experts <= 1:
        return
    ep = deepep_expert_parallel(dp, experts)
    if ep <= 1:
        return
    out.parallel["ep"] = ep
    out.notes.append(
        f"expert parallel size {ep} (the EP column is empty; the text names DeepEP): "
        "AutoModel initialises GroupedExpertsDeepEP's token dispatcher only in apply_ep "
        "(nemo_automodel/components/moe/parallelizer.py ExpertParallel._partition_fn: "
        "init_token_dispatcher(ep_mesh)), which asserts ep_mesh.size() > 1 and runs only when "
        "FSDP2Manager's ep_size > 1 builds the moe_mesh (distributed/fsdp2.py; ep_size "
        "defaults to 1 and must divide dp_size); the size is the data-parallel size up to 64, "
        "dividing the experts, as AutoModel's benchmark configs set ep_size "
        "(examples/benchmark/configs/*_te_deepep.yaml: 8 on one node, the GPT-OSS 120B / "
        "DeepSeek-V3 256-GPU / Kimi K2 configs the data-parallel size, 64 on 512-1024 GPUs; "
        "qwen3_moe_235b 32 of 64)"
    )


#: FlashAttention-2 named as the run's attention: ``FlashAttention 2``, ``FlashAttention-2``,
#: Transformers' ``attn_implementation`` value ``flash_attention_2``.
FLASH_ATTENTION_2 = re.compile(r"\bflash[\s_-]?attention[\s_-]?2\b", re.IGNORECASE)
AUTOMODEL_FA2 = (
    "attention on FlashAttention-2 (attention_kernel fa2): the text names FlashAttention 2 for "
    "the run, the flash-attn package a Hugging Face model's attn_implementation "
    "'flash_attention_2' calls (NVIDIA-BioNeMo/bionemo-framework recipes/mixtral_native_te/"
    "benchmarks/nemo_automodel/README.md 7b3212e9: 'the recipe explicitly selects FlashAttention "
    "2 with position-reset variable-length packing'), not the automodel profile's Transformer "
    "Engine cuDNN attention"
)


def automodel_defaults(
    row: dict[str, str],
    flavor: str,
    stated: dict[str, int],
    out: Defaults,
    dp: int = 1,
    experts: int = 0,
) -> None:
    """NeMo AutoModel's PyTorch-backend defaults (nemo_automodel, 2025); ``dp`` is the row's
    data-parallel size (stated or inferred), ``experts`` the routed experts its ``moe`` column
    states (0: the flavor's)."""
    spec = get_flavor(flavor)
    _deepep_ep(stated, dp, experts or int(spec.num_experts or 0), out)
    if FLASH_ATTENTION_2.search(f"{row_text(row)} {settled_clauses(row.get('uncertain', ''))}"):
        out.options["attention_kernel"] = "fa2"  # s33 b200native
        out.notes.append(AUTOMODEL_FA2)
    fp32_master = FP32_MASTER.search(row_text(row))
    if spec.num_experts and fp32_master:
        out.notes.append(
            f"fp32 master weights, as the row states ({fp32_master.group(0)!r}): not the bf16 "
            "model states of AutoModel's own MoE classes (bf16_model_states off)"
        )
    elif spec.num_experts:
        out.options["bf16_model_states"] = True
        out.notes.append(
            "the model states in bf16 (bf16_model_states: no fp32 master, Adam's moments in "
            "bf16): AutoModel's MoE model classes (components/models/deepseek_v3, qwen3_moe, "
            "gpt_oss model.py) cast the FSDP-sharded model with initialize_weights(dtype="
            "torch.bfloat16), and torch.optim.Adam keeps its moments in the parameter's dtype"
        )
    else:
        out.options.update(fsdp2_copies=True, fsdp_root_unit=True)
        out.notes.append(
            "FSDP2's copy-out / copy-in kernels and the root unit (fsdp2_copies, "
            "fsdp_root_unit): a dense model takes AutoModel's DefaultParallelizationStrategy "
            "(nemo_automodel/components/distributed/parallelizer.py: fully_shard per layer, "
            "then the root model with reshard_after_forward=False)"
        )
    if spec.num_experts:
        out.parallel["etp"] = 1
        out.notes.append(
            "expert tensor parallel size 1: AutoModel shards experts over EP only "
            "(nemo_automodel/components/moe/parallelizer.py)"
        )
    if spec.mtp_layers:
        out.model["mtp_layers"] = 0
        out.notes.append(
            "no multi-token-prediction module (mtp_layers 0): AutoModel's Hugging Face model "
            "trains the main model only"
        )
    family = str(spec.family)
    empty = not row.get("recompute", "").strip()
    if family in AUTOMODEL_RECOMPUTE and spec.num_experts and empty:
        out.parallel["recompute"] = AUTOMODEL_RECOMPUTE[family]
        out.notes.append(
            f"recompute {AUTOMODEL_RECOMPUTE[family]} for {family}: AutoModel's benchmark "
            "configs (examples/benchmark/configs/*_te_deepep.yaml activation_checkpointing: "
            "every block for DeepSeek-V3 and Qwen3, none for GPT-OSS; the recompute column is "
            "empty)"
        )
    elif family in AUTOMODEL_DENSE_RECOMPUTE and not spec.num_experts and empty:
        out.parallel["recompute"] = AUTOMODEL_DENSE_RECOMPUTE[family]
        out.notes.append(
            f"recompute {AUTOMODEL_DENSE_RECOMPUTE[family]} for a dense {family} model: "
            "AutoModel's dense pretraining configs (examples/llm_pretrain/"
            "llama3_70b_pretrain.yaml, llama3_1_70b_pretrain_benchmark_*.yaml, "
            "qwen3_8b_pretrain.yaml: distributed.activation_checkpointing true, every block; "
            "the recompute column is empty)"
        )
    if stated.get("pp", 1) > 1:
        out.parallel["pp_split"] = "front"
        out.notes.append(
            "layers split over the pipeline stages as AutoModel splits them (pp_split front: "
            "num_layers // stages each, one more on the first num_layers % stages; "
            "nemo_automodel/components/distributed/pipelining/functional.py "
            "generate_hf_model_fqn_per_model_part)"
        )
        found = next((m for c in ("dp_sharding", "source_table", "notes")
                      if (m := _LBS.search(row.get(c, "")))), None)  # fmt: skip
        if found:
            out.options["local_batch_size"] = int(found.group(1))
            out.notes.append(
                f"each local batch of {found.group(1)} sequences its own pipeline schedule "
                "(local_batch_size; the text's LBS): nemo_automodel train_ft.py "
                "_forward_backward_step steps the schedule once per local batch"
            )


#: torchtitan's 2025 defaults (the torchtitan profile stands for its code of December 2024):
#: (first (year, month), needs torch.compile, field kind, name, value, why).
TORCHTITAN_ERAS: tuple[tuple[tuple[int, int], bool, str, str, Any, str], ...] = (
    ((2025, 4), True, "options", "loss_fp32_buffers", 0,
     "the loss compiled with the blocks (loss_fp32_buffers 0): since pytorch/torchtitan#1033 "
     "(Apr 2025) build_cross_entropy_loss wraps the fp32 cross-entropy in torch.compile when "
     "training.compile is set"),
    ((2025, 4), False, "options", "optimizer_foreach", False,
     "the fused AdamW (optimizer_foreach false): torchtitan's optimizer.implementation "
     "defaults to 'fused' in 2025 (the foreach AdamW of December 2024 was the old default)"),
    ((2025, 12), False, "options", "op_sac_saves_cudnn_attention", True,
     "op-level SAC keeps cuDNN attention's output (op_sac_saves_cudnn_attention): "
     "torchtitan's _op_sac_save_list names every SDPA backend since pytorch/torchtitan#2095 "
     "(Dec 2025)"),
    ((2025, 10), False, "options", "fused_rmsnorm", True,
     "nn.RMSNorm on PyTorch's fused CUDA kernels (fused_rmsnorm): torchtitan's models use "
     "torch.nn.RMSNorm since pytorch/torchtitan#985 (Mar 2025), which dispatches to "
     "aten::_fused_rms_norm and its fused backward from PyTorch 2.9 (Oct 2025; "
     "pytorch/pytorch#153666) and to the op-by-op composite before"),
    ((2025, 4), False, "options", "pipelining_output_fp32", False,
     "the last pipeline stage's logits in bf16 (pipelining_output_fp32 false): torchtitan's "
     "Transformer.forward returns self.output(h) (models/llama3/model.py, pytorch/torchtitan "
     "2519f631), the fp32 upcast inside the loss (build_cross_entropy_loss, "
     "pytorch/torchtitan#1033, Apr 2025), not the December 2024 self.output(h).float()"),
    ((2025, 6), False, "options", "pipelining_output_chunks", "last",
     "only the last pipeline stage keeps its micro-batches' outputs until the step ends "
     "(pipelining_output_chunks last): torch pipelining's forward_one_chunk appends to "
     "output_chunks only on the last stage since pytorch/pytorch#153383 (merged 13 May 2025, "
     "torch 2.8); torchtitan's train.py calls pp_schedule.step without return_outputs "
     "(pytorch/torchtitan 000204a4)"),
    ((2025, 11), False, "options", "pipelining_output_chunks", "none",
     "no pipeline stage keeps its micro-batches' outputs (pipelining_output_chunks none): "
     "torchtitan calls pp_schedule.step(..., return_outputs=False) since pytorch/torchtitan#1922 "
     "(Oct 2025, 'Update PP to release memory earlier'; trainer.py 003fe280), the argument of "
     "pytorch/pytorch#165822 (Oct 2025, torch 2.10) that skips output_chunks"),
)  # fmt: skip

#: The eras set by the PyTorch release rather than torchtitan's code: a named release decides
#: them over the text's date.
_TORCH_RELEASE_ERAS = ("fused_rmsnorm", "pipelining_output_chunks")


def torchtitan_pipeline(
    row: dict[str, str], stated: dict[str, int], dp: int, out: Defaults
) -> None:
    """torchtitan's pipeline defaults when the CSV leaves micro-batch / vpp empty: 2 stages
    per rank for a looped (interleaved) schedule, and as many micro-batches as pipeline ranks
    (as pipeline ranks × stages per rank after pytorch/torchtitan#781, 7 Jan 2025)."""
    pp = stated.get("pp", 1)
    if pp <= 1:
        return
    table = row.get("source_table", "").lower()
    vpp = stated.get("vpp", 1)
    if "vpp" not in stated and re.search(r"interleaved", table):
        vpp = out.parallel["vpp"] = 2
        out.notes.append(
            "two stages per rank (vpp 2) for the interleaved schedule the table names: "
            "torchtitan's generate_split_points default for looped schedules"
        )
    if "micro_batch" in stated or "global_batch_seqs" not in stated:
        return
    when = dated(row)
    local = stated["global_batch_seqs"] // max(dp, 1)
    sized = _LOCAL_BATCH.search(row_text(row))
    if local >= 1 and (sized or (when is not None and when >= MICROBATCH_SIZE_ERA)):
        out.parallel["micro_batch"] = 1
        why = f"the text names {sized.group(0)!r}" if sized else "the text dates the run"
        out.notes.append(
            f"micro-batch 1: {local} micro-batches of the local batch {local} (global batch / "
            "dp): torchtitan's pipeline_parallel_microbatch_size defaults to 1 and the "
            "micro-batches are local_batch_size / it (pytorch/torchtitan#1073, Apr 2025; "
            f"torchtitan/config/job_config.py 000204a4) ({why})"
        )
        return
    after = when is not None and when >= (2025, 1)
    count = pp * vpp if after else pp
    if local % count == 0 and local >= count:
        out.parallel["micro_batch"] = local // count
        out.notes.append(
            f"micro-batch {local // count}: {count} micro-batches of the local batch {local} "
            "(global batch / dp): torchtitan's build_pipeline_schedule takes "
            + (
                "pipeline ranks x stages per rank (pytorch/torchtitan#781, 7 Jan 2025)"
                if after
                else "as many as pipeline ranks (its code before pytorch/torchtitan#781)"
            )
            + " when pipeline_parallel_microbatches is unset"
        )


#: A row's statement that FSDP2 gathered torchao's FP8 weights as FP8 ("f8 all-gather", "float8
#: all-gather", the flag's name); torchtitan's default (every era) and torchao's is off.
FLOAT8_ALL_GATHER = re.compile(
    r"\b(?:f8|fp8|float8)[\s_-]+all[\s_-]*gather|enable_fsdp_float8_all_gather"
)


#: torchtitan's Dist-MoE routed-expert backend named in a row's text (pytorch/torchtitan
#: ``docs/dist_moe.md`` a30ac1bf, "the CuTe DSL ``dist_moe`` backend"; the DeepSeek-V3 report
#: writes "DistMoE").
DIST_MOE = re.compile(r"\bdist[\s_-]?moe\b", re.IGNORECASE)


def torchtitan_defaults(
    row: dict[str, str], recompute: str, tp: int, out: Defaults, pp: int = 1
) -> None:
    """torchtitan's defaults for ``row`` (``recompute``, ``tp``; the eras of
    :data:`TORCHTITAN_ERAS` by its date, the ``pipelining_*`` ones only with pipeline
    parallelism, ``pp`` > 1)."""
    text = row_text(row).lower()
    table = row.get("source_table", "").lower()
    compiled = names_compile(row)
    layer_ac = layer_ac_fields("torchtitan", recompute, f"{row.get('recompute', '')} {text}")
    if layer_ac:
        out.parallel.update(layer_ac[0])
        out.notes.append(layer_ac[1])
    elif recompute == "selective":
        out.parallel["recompute_modules"] = ("op",)
        out.notes.append(
            "torchtitan's selective AC as the op-level policy (recompute_modules ['op']): the "
            "train configs' activation_checkpoint mode 'selective' with selective_ac_option "
            "'op' (torchtitan/models/llama3/train_configs/*.toml; parallelize _save_list)"
        )
    if compiled:
        out.options["fused_elementwise"] = True
        out.notes.append(
            "torch.compile per block (fused_elementwise): the text names torch.compile "
            "(torchtitan --training.compile compiles each transformer block)"
        )
    if FLOAT8_ALL_GATHER.search(text) and not re.search(r"whether[^.;]*all[\s_-]*gather", text):
        out.options["fsdp_float8_all_gather"] = True
        out.notes.append(
            "FSDP2's float8 all-gather (fsdp_float8_all_gather): the text states it "
            "(torchtitan --float8.enable_fsdp_float8_all_gather, torchao Float8LinearConfig."
            "enable_fsdp_float8_all_gather; off by default)"
        )
    if tp > 1 and re.search(r"async[\s_-]*tp", table) and not re.search(r"vanilla\s*tp", table):
        out.options["tp_comm_overlap"] = True
        out.notes.append(
            "asynchronous TP (tp_comm_overlap): the source table names AsyncTP "
            "(torchtitan --parallelism.enable_async_tensor_parallel)"
        )
    if names_used(DIST_MOE, text):  # not 'Dist-MoE disabled', 'than Dist-MoE' (s32 audit)
        out.options["moe_ep_one_domain"] = True
        out.notes.append(
            "each expert-parallel group inside one NVLink domain (moe_ep_one_domain): the text "
            "names torchtitan's Dist-MoE routed experts, whose dispatch and combine kernels "
            "address every peer's symmetric-memory buffer directly (meta-pytorch/dist_moe "
            "dist_moe/_buffers.py 18b4f488, symm_mem.rendezvous buffer_ptrs), which only GPUs "
            "of one NVLink fabric can; the data-parallel and pipeline groups as the preset "
            "places them"
        )
        out.options["moe_fused_expert_comm"] = True
        out.options["moe_sort_chunks"] = False
        out.notes.append(
            "Dist-MoE's fused routed experts (moe_fused_expert_comm; moe_sort_chunks off): its "
            "dispatch kernel gathers peer rows in expert-major order inside the W13 grouped GEMM "
            "and its W2 kernel runs SwiGLU and stores the combine rows to peers from its epilogue "
            "(meta-pytorch/dist_moe docs/mxfp8_execution.md 191b73f3, "
            "docs/mxfp8_kernel_design.md ab56bced warp roles), so neither torchtitan's "
            "ExpertParallel _permute / _unpermute nor separate all-to-alls run (pytorch/torchtitan "
            "docs/dist_moe.md a30ac1bf: 'Dist-MoE fuses dispatch, local expert compute, and "
            "combine into its distributed kernels')"
        )
    when, how = dated(row), "the text dates the run"
    if when is None:  # a run on a stated PyTorch release is no older than that release
        when, how = torch_dated(row), "the PyTorch release the text names dates from"
    release = torch_dated(row)
    for first, needs_compile, _, name, value, why in TORCHTITAN_ERAS:
        if name.startswith("pipelining_") and pp <= 1:
            continue  # torch pipelining's options: nothing to read without stages
        at, source = when, how
        if name in _TORCH_RELEASE_ERAS and release is not None:
            at, source = release, "the PyTorch release the text names dates from"
        if at is not None and at >= first and (compiled or not needs_compile):
            out.options[name] = value
            out.notes.append(f"{why} ({source} {at[0]}-{at[1]:02d})")


#: BioNeMo's ``mixtral_native_te`` recipe named in a row's text: its own training loop
#: (NVIDIA-BioNeMo/bionemo-framework recipes/mixtral_native_te/train_fsdp2_ep.py f89103b2), not
#: the comparison benchmarks kept in the same directory (NeMo AutoModel, the Hugging Face
#: reference), whose rows name the recipe too (:data:`BIONEMO_COMPARISON`).
BIONEMO_NATIVE_TE = re.compile(r"\bmixtral_native_te\b", re.IGNORECASE)
#: The recipe's comparison benchmarks (benchmarks/nemo_automodel, benchmarks/huggingface_ref):
#: other stacks, other gradient precisions (AutoModel's README states FP32 gradient reduction).
BIONEMO_COMPARISON = re.compile(r"hugging\s*face\s+reference|\bautomodel\b", re.IGNORECASE)
BIONEMO_BF16_REDUCE = (
    "gradients reduced in bf16 (grad_fp32 false): BioNeMo mixtral_native_te casts the model to "
    "bfloat16 before wrapping (train_fsdp2_ep.py f89103b2: model.to(device, dtype=torch.bfloat16)) "
    "and calls fully_shard(layer, mesh=dp_mesh) without a mp_policy (distributed_setup.py "
    "66375314), so FSDP2's MixedPrecisionPolicy defaults (param_dtype None: the original dtype; "
    "reduce_dtype None with param_dtype None: the reduction in that dtype; torch/distributed/fsdp/"
    "_fully_shard/_fsdp_api.py) reduce-scatter bf16 gradients; at dp_size 1 the plain bf16 .grad "
    "is all-reduced"
)
BIONEMO_EP_ALLREDUCE = (
    "gradients all-reduced after the backward (overlap_grad_reduce false): at dp_size 1 "
    "mixtral_native_te wraps nothing in FSDP2 and keeps the replicated dense gradients in sync "
    "with all_reduce_dense_grads_over_ep, a loop of one dist.all_reduce and one div_ per dense "
    "parameter over the ep group run by the training loop after loss.backward() (outside "
    "autograd, not overlapped with it; distributed_setup.py 66375314, train_fsdp2_ep.py "
    "f89103b2); the per-parameter calls are timed as one all-reduce"
)


BIONEMO_TE_ATTENTION = (
    "attention on cuDNN's fused attention (attention_kernel cudnn): mixtral_native_te's decoder "
    "layer is Transformer Engine's MultiheadAttention (qkv_format 'thd', 'padding_causal'; "
    "bionemo-recipes/recipes/mixtral_native_te/modeling_mixtral_te.py 2b8763ee), whose "
    "DotProductAttention prefers FusedAttention (cuDNN) over FlashAttention on sm90 and later "
    "(transformer_engine/pytorch/attention/dot_product_attention/utils.py get_attention_backend: "
    "'Disabling FlashAttention to give FusedAttention preference on Hopper+'), not the fsdp "
    "profile's PyTorch SDPA flash backend"
)
BIONEMO_FSDP2_UNITS = (
    "bf16 shards and the root unit (fsdp_fp32_shards false, fsdp_root_unit): mixtral_native_te "
    "shards the bf16-cast model, so the sharded parameters are bf16, and after the per-layer "
    "fully_shard calls wraps the model itself, whose unit holds embed_tokens, norm and lm_head "
    "(distributed_setup.py 66375314 build_mesh_and_wrap: fully_shard(model, mesh=dp_mesh))"
)
#: After ``FSDP 1`` / ``FSDP 2``: not a count (``FSDP, 2 nodes``, ``FSDP 2 x 8 GPUs``, ``FSDP 1.5``)
#: but the version (s32 audit; a sentence's full stop after ``FSDP2.`` still names it).
FSDP_VERSION_END = r"(?!\.?\d|\s*(?:x\b|×|nodes?\b|gpus?\b|hosts?\b|servers?\b))"
#: A row's text naming PyTorch's FSDP2: ``FSDP2``, ``fully_shard`` (its API), the composable
#: FSDP; not FSDP1's ``FullyShardedDataParallel`` / ``FULL_SHARD``.
#: Accelerate's FSDP plugin names the version ``fsdp_version: 2`` (transformers docs 'Accelerate',
#: https://huggingface.co/docs/transformers/v5.13.1/accelerate; s32 audit).
FSDP2_NAMED = re.compile(
    rf"\bfsdp[\s_-]?v?2\b{FSDP_VERSION_END}|\bfully_shard\b|\bfsdp_version\W{{0,3}}2\b",
    re.IGNORECASE,
)
#: Where a row may name FSDP2: its text and the dp_sharding cell.
FSDP2_COLUMNS = (*TEXT_COLUMNS, "dp_sharding")
FSDP2_COPIES = (
    "FSDP2's copy-out / copy-in kernels (fsdp2_copies): the text names FSDP2 (fully_shard), "
    "whose all-gathers are copied out into the unsharded parameters and whose reduce-scatters "
    "first concatenate the gradients, both on the compute stream (torch/distributed/fsdp/"
    "_fully_shard/_fsdp_collectives.py foreach_all_gather_copy_out: split_with_sizes_copy; "
    "foreach_reduce_scatter_copy_in: chunk_cat)"
)


def fsdp2_defaults(row: dict[str, str], zero: int, out: Defaults) -> None:
    """FSDP2's copies (:data:`FSDP2_COPIES`) for a ZeRO-3 row of the ``fsdp`` profile whose
    text names FSDP2 (:data:`FSDP2_NAMED`); the profile's default is FSDP1's flat parameter,
    gathered in place."""
    if zero >= 3 and FSDP2_NAMED.search(row_text(row, FSDP2_COLUMNS)):
        out.options["fsdp2_copies"] = True
        out.notes.append(FSDP2_COPIES)


def bionemo_native_defaults(row: dict[str, str], zero: int, out: Defaults) -> None:
    """The gradient reduction and FSDP units of BioNeMo's ``mixtral_native_te`` training loop,
    for a row of the ``fsdp`` profile whose text names the recipe and not one of its comparison
    benchmarks: bf16 gradients (:data:`BIONEMO_BF16_REDUCE`), Transformer Engine's cuDNN
    attention (:data:`BIONEMO_TE_ATTENTION`, s33 b200native); without FSDP wrapping (``zero``
    0: the recipe's dp_size 1) their all-reduce after the backward
    (:data:`BIONEMO_EP_ALLREDUCE`); with it, bf16 shards and the root unit
    (:data:`BIONEMO_FSDP2_UNITS`)."""
    text = row_text(row)
    if not BIONEMO_NATIVE_TE.search(text) or BIONEMO_COMPARISON.search(text):
        return
    out.parallel["grad_fp32"] = False
    out.notes.append(BIONEMO_BF16_REDUCE)
    out.options["attention_kernel"] = "cudnn"
    out.notes.append(BIONEMO_TE_ATTENTION)
    if zero == 0:
        out.options["overlap_grad_reduce"] = False
        out.notes.append(BIONEMO_EP_ALLREDUCE)
    else:
        out.options.update(fsdp_fp32_shards=False, fsdp_root_unit=True)
        out.notes.append(BIONEMO_FSDP2_UNITS)


#: A row's text naming Hugging Face transformers' training code: the library by name (``Hugging
#: Face transformers``, ``Hugging Face's transformers``, ``HF transformers``), its ``run_clm.py``
#: example or its ``Trainer`` (which ``run_clm.py`` runs: ``HF Trainer``, ``Hugging Face
#: Trainer``, ``transformers Trainer``; the wider names s32 audit).
HF_TRANSFORMERS = re.compile(
    r"(?:hugging\s*face(?:'s)?|\bhf)\W+transformers\b|\brun_clm(?:\.py)?\b|"
    r"(?:\bhf|hugging\s*face(?:'s)?|\btransformers(?:'s?)?)\s+trainer\b",
    re.IGNORECASE,
)
#: Kernels that replace the eager Llama modules a Hugging Face run would otherwise launch: Liger
#: Kernel's ``apply_liger_kernel_to_llama`` patches LlamaRMSNorm, the rotary embedding and the
#: SwiGLU MLP with Triton kernels (linkedin/Liger-Kernel README 'Patching'; transformers
#: TrainingArguments ``use_liger_kernel``), and Unsloth its own (s32 audit).
HF_FUSED_KERNELS = re.compile(r"\bliger\b|\bunsloth\b", re.IGNORECASE)
HF_LLAMA_MODULES = (
    "Hugging Face Llama modules run eager (eager_modules hf-llama): the text names Hugging Face "
    "transformers, whose LlamaRMSNorm (fp32 upcast, pow, mean, rsqrt, cast back, weight), LlamaMLP "
    "(act_fn(gate_proj(x)) * up_proj(x)), residual adds and rotate_half rotary embedding "
    "(torch.cat((-x2, x1)), q * cos + rotate_half(q) * sin) are separate PyTorch kernels "
    "(transformers/models/llama/modeling_llama.py, 4.38-4.40); under flash_attention_2 no "
    "repeat_kv copy"
)
HF_TRAINER_OPTIMIZER = (
    "torch.optim.AdamW with foreach and FSDP's clip_grad_norm_ (optimizer_foreach): the "
    "Trainer's default optim adamw_torch builds torch.optim.AdamW without a foreach argument "
    "(torch's CUDA default, the foreach implementation), and its default max_grad_norm 1.0 "
    "clips through accelerate's clip_grad_norm_, FSDP's model.clip_grad_norm_ (transformers "
    "4.39 training_args.py, trainer.py)"
)
#: A row's text naming PyTorch's FSDP1: ``FSDP1`` / ``FSDP v1`` (not ``FSDP 1 node``, a count:
#: s32 audit), its class ``FullyShardedDataParallel``, or its argument ``use_orig_params``, which
#: FSDP2's ``fully_shard`` does not have (torch/distributed/fsdp/fully_sharded_data_parallel.py;
#: under it the parameters are still views of the FlatParameter, s32 audit).
FSDP1_NAMED = re.compile(
    rf"\bfsdp[\s_-]?v?1\b{FSDP_VERSION_END}|\bfsdp_version\W{{0,3}}1\b|"
    r"\bFullyShardedDataParallel\b|\buse_orig_params\b",
    re.IGNORECASE,
)
FSDP1_FLAT_GRAD = (
    "FSDP1's flat-gradient concatenation (fsdp1_flat_grad): the text names FSDP1, whose "
    "unsharded parameters are views of one FlatParameter (FlatParamHandle._get_unflat_views: "
    "torch.split then .view), so autograd's SplitWithSizesBackward0 concatenates their "
    "gradients into the flat gradient once per backward, on the compute stream"
)


def _llama_like(spec: ModelSpec, fields: dict[str, Any]) -> bool:
    """Whether the row's model, ``spec`` (its flavor) with the row's model ``fields`` (a Falcon
    row is a Llama flavor with ``norm`` layernorm and ``activation`` gelu), is a dense model of
    Llama's modules (RMSNorm, rotary, SwiGLU): the flavor alone misread such rows (s32 audit)."""
    said = {key: str(fields.get(key, "")).lower() for key in ("norm", "position", "activation")}
    return (
        not spec.is_moe
        and (said["norm"] or str(spec.norm.value)) == Norm.RMSNORM.value
        and (said["position"] or str(spec.position.value)) == Position.ROTARY.value
        and (said["activation"] or str(spec.activation.value)) == Activation.SWIGLU.value
    )


def hf_transformers_defaults(
    row: dict[str, str],
    zero: int,
    spec: ModelSpec,
    out: Defaults,
    fields: dict[str, Any] | None = None,
) -> None:
    """Hugging Face transformers' Llama code and Trainer for a row of the ``fsdp`` profile whose
    text names them (:data:`HF_TRANSFORMERS`) on a dense Llama-like model: its eager modules
    (:data:`HF_LLAMA_MODULES`) and optimizer (:data:`HF_TRAINER_OPTIMIZER`); and FSDP1's flat
    gradient (:data:`FSDP1_FLAT_GRAD`) for a ZeRO-3 row whose text names FSDP1 and not FSDP2.
    ``fields``: the row's model fields over the flavor (:func:`_llama_like`);
    a row naming Liger Kernel / Unsloth (:data:`HF_FUSED_KERNELS`) or torch.compile keeps the
    profile's modules."""
    text = row_text(row, FSDP2_COLUMNS)
    if zero >= 3 and FSDP1_NAMED.search(text) and not FSDP2_NAMED.search(text):
        out.options["fsdp1_flat_grad"] = True
        out.notes.append(FSDP1_FLAT_GRAD)
    if (
        not HF_TRANSFORMERS.search(text)
        or HF_FUSED_KERNELS.search(text)
        or names_compile(row)  # compiled modules are not the eager kernels (s32 audit)
        or not _llama_like(spec, fields or {})
    ):
        return
    out.options.update(eager_modules="hf-llama", optimizer_foreach=True)
    out.notes.extend((HF_LLAMA_MODULES, HF_TRAINER_OPTIMIZER))
