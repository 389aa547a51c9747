"""Framework and recipe defaults of an inferred setup (:mod:`stage_explore.validation.infer`):
what a careful user reads from a framework's code and recipes once the row names the framework
and, where the text states one, its release (a NeMo / Megatron-Bridge container ``YY.MM``, a
torchtitan date). One table per framework and era; every default is cited where it is set,
never chosen from a published row, and reported as the row's assumption.

This module holds the defaults every framework shares (gradient-reduction dtypes, Megatron-LM
2021's local DDP, MPT's blocks, the techniques a row's text names) and dispatches to the
framework's own reader: Megatron-Core's containers in
:mod:`~stage_explore.validation.infer_megatron`, AutoModel and torchtitan in
:mod:`~stage_explore.validation.infer_torch`.

A default never overrides what the CSV states (a stated ``recompute`` is kept; the torchtitan
op-level policy only names the modules of a ``selective`` row).
"""

from __future__ import annotations

import re
from typing import Any

from stage_core.errors import ConfigError
from stage_core.lower.compact import UNBUCKETED
from stage_core.models import get_flavor
from stage_explore.system import load_system
from stage_explore.validation.csv_cells import YES, first_word
from stage_explore.validation.infer_compile import (
    FSDP_COMPILE_FRAMEWORKS,
    FSDP_COMPILE_NOTE,
    names_compile,
)
from stage_explore.validation.infer_deepseek import hai_llm_dispatch
from stage_explore.validation.infer_dgxc import dgxc_defaults
from stage_explore.validation.infer_dtensor import bf16_cast_defaults, dtensor_tp_defaults
from stage_explore.validation.infer_internevo import INTERNEVO_KERNEL, internevo_defaults
from stage_explore.validation.infer_kflogits import kempnerforge_loss_defaults
from stage_explore.validation.infer_kfpp import kempnerforge_pipeline_defaults
from stage_explore.validation.infer_kftp import (
    kempnerforge_embedding_defaults,
    one_rank_mesh_defaults,
)
from stage_explore.validation.infer_megatron import megatron_core_defaults
from stage_explore.validation.infer_megatron_lm import named_launch_flags
from stage_explore.validation.infer_named import names_used
from stage_explore.validation.infer_no_sync import automodel_no_sync_defaults, no_sync_defaults
from stage_explore.validation.infer_release import Defaults, row_text
from stage_explore.validation.infer_shard import stated_hpz
from stage_explore.validation.infer_stated import stated_or_inferred
from stage_explore.validation.infer_titan_ac import torchtitan_shipped_ac
from stage_explore.validation.infer_torch import (
    automodel_defaults,
    bionemo_native_defaults,
    fsdp2_defaults,
    hf_transformers_defaults,
    torchtitan_defaults,
    torchtitan_pipeline,
)

#: FSDP stacks whose default mixed-precision policy reduce-scatters gradients in bf16:
#: framework profile → why.
BF16_REDUCE = {
    "llm-foundry-2023": (
        "Composer's FSDP PURE mode (composer/trainer/mosaic_fsdp_utils.py get_mixed_precision: "
        "reduce_dtype = the amp precision), or its DEFAULT before Composer's PR 2047 "
        "(reduce_dtype the amp precision, param_dtype None); a bf16 row not naming PURE takes "
        "Composer's DEFAULT as it ran after PR 2047 (fp32 reduction)"
    ),
    "fms-fsdp": (
        "fms-fsdp's bfSixteen policy (fms_fsdp/policies/mixed_precision.py: param_dtype and "
        "reduce_dtype bfloat16)"
    ),
}
#: Composer's FSDP ``mixed_precision: PURE`` named in a row (llm-foundry's MPT benchmark
#: tables' "MP Mode" column; its first ``submit_benchmarks.py``'s ``--fsdp_config_mixed_precision``
#: default): mosaicml/composer 0099561e composer/trainer/mosaic_fsdp_utils.py
#: ``get_mixed_precision``: ``PURE`` sets param_dtype = reduce_dtype = buffer_dtype = the
#: precision's dtype, where ``DEFAULT`` (the profile's reading) leaves param_dtype None.
COMPOSER_PURE = re.compile(r"\b(?:mixed[\s_]?precision|mp[\s_]mode)\W{0,3}pure\b", re.IGNORECASE)
#: Where a row may name Composer's FSDP mixed-precision mode.
COMPOSER_PURE_COLUMNS = ("precision", "dp_sharding", "source_table", "notes")
COMPOSER_PURE_NOTE = (
    "Composer FSDP mixed_precision PURE (the row names it): parameters all-gathered and used "
    "in bf16 (fsdp_param_fp32 false), so the token embedding and the residual stream are bf16 "
    "and MPT's blocks run as the generator's ops (eager_modules generator, not the fp32 stream "
    "of llm-foundry-2023): mosaicml/composer 0099561e composer/trainer/mosaic_fsdp_utils.py "
    "get_mixed_precision, PURE: param_dtype = reduce_dtype = buffer_dtype = the precision's"
)
#: Composer's FSDP ``mixed_precision: DEFAULT`` — named in a row of llm-foundry (its DEFAULT tables
#: are ``amp_bf16`` runs after its torch 2.0.1 side tables, ``torches.md`` / ``torch2.md``, i.e.
#: Composer 0.15 and later), or not named: ``fsdp_config``'s ``mixed_precision`` defaults to it
#: (``get_mixed_precision(precision, mixed_precision='DEFAULT')``). Since
#: mosaicml/composer#2047 (merged 2023-03-09, "This will make 'DEFAULT' emulate AMP behavior")
#: ``get_mixed_precision`` DEFAULT sets param_dtype = the precision's dtype, reduce_dtype =
#: float32, buffer_dtype = the precision's dtype (the docs' notes/distributed_training.rst;
#: mosaicml/composer#2628, 2023-10-10, restored the fp32 reduce_dtype a refactor had dropped).
#: So parameters are all-gathered and used in bf16, as under PURE (a bf16 embedding, a bf16
#: residual stream), and gradients reduce-scattered in fp32. The profile's fp32 gathers and fp32
#: stream are the DEFAULT before #2047 (param_dtype None, reduce_dtype the precision's): only
#: mosaicml/examples runs of early 2023 (``precision: bf16``) could have run it, and those
#: tables name PURE.
COMPOSER_DEFAULT_NOTE = (
    "Composer FSDP mixed_precision DEFAULT (named, or Composer's default) as Composer ran it from "
    "mosaicml/composer#2047 (2023-03-09) on: param_dtype = buffer_dtype = bf16, reduce_dtype = "
    "float32 (get_mixed_precision; #2628 restored the fp32 reduce_dtype a refactor dropped), so "
    "parameters are all-gathered and used in bf16 (fsdp_param_fp32 false), the residual stream "
    "is bf16 (eager_modules generator) and gradients are reduce-scattered in fp32 (grad_fp32)"
)
#: The attention kernel of llm-foundry's A100 benchmark rows: FlashAttention (v1) in Triton,
#: flash-attn's ``flash_attn_triton.py`` (``attn_impl: triton``). The tables' first runs came from
#: mosaicml/examples' ``examples/llm/throughput/submit_benchmarks.py`` (3bbda73b) and llm-foundry's
#: first ``scripts/train/benchmarking/submit_benchmarks.py`` (12a63191): ``--attn_impl`` default
#: ``triton`` (set as ``parameters['model']['attn_impl']``), image
#: mosaicml/pytorch:1.13.1_cu117; ``triton_flash_attn_fn`` calls
#: ``flash_attn_triton.flash_attn_func`` (examples/llm/src/models/layers/attention.py). The
#: models ran without ALiBi: the tables' NumParams grows with SeqLen (a learned
#: max_seq_len x d_model position embedding, which MPT builds only when ``alibi`` is off), so
#: no bias tensor enters the kernel. The kernel (Triton 2.0 pre-MLIR, "only been tested on
#: A100") is listed only on the A100 presets; elsewhere the profile's ``fa2`` stands.
LLMFOUNDRY_A100_KERNEL = "fa1-triton"
LLMFOUNDRY_A100_KERNEL_NOTE = (
    "attention on FlashAttention (v1) in Triton (attention_kernel fa1-triton): llm-foundry's "
    "A100 benchmark rows ran attn_impl triton, the default of the benchmark's first "
    "submit_benchmarks.py (mosaicml/examples 3bbda73b examples/llm/throughput, llm-foundry "
    "12a63191 scripts/train/benchmarking; image mosaicml/pytorch:1.13.1_cu117), which calls "
    "flash-attn's flash_attn_triton.flash_attn_func; no ALiBi bias (the tables' NumParams grows "
    "with SeqLen: learned position embeddings)"
)
#: Frameworks whose fp16 training reduces gradients in fp16 by default: framework profile → why.
FP16_REDUCE = {
    "megatron-lm-2021": (
        "Megatron-LM's --accumulate-allreduce-grads-in-fp32 is off by default, so the "
        "gradient buffer and its all-reduce are in the fp16 params dtype (megatron/arguments.py "
        "forces fp32 for bf16 only: 'bfloat16 requires gradient accumulation and all-reduce to "
        "be done in fp32')"
    ),
    "deepspeed": (
        "DeepSpeed's communication_data_type default (deepspeed/runtime/engine.py "
        "communication_data_type: the config's value, else torch.float16 when fp16 is enabled)"
    ),
}
#: Megatron-LM 2021's data-parallel gradient reduction: ``--DDP-impl`` defaults to ``local``
#: (megatron/arguments.py, every 2021 version: ``group.add_argument('--DDP-impl',
#: default='local', choices=['local', 'torch'])``), Megatron's own DistributedDataParallel over
#: one contiguous gradient buffer, all-reduced once after the backward (``allreduce_gradients``
#: called from ``train_step``), not torch DDP's 25 MiB buckets during it.
LOCAL_DDP = (
    "gradients all-reduced as one buffer after the backward (grad_bucket_bytes 2^62, one "
    "bucket per model chunk): Megatron-LM 2021's --DDP-impl default 'local' "
    "(megatron/arguments.py; megatron/model/distributed.py allreduce_gradients after the "
    "backward); the SC'21 artifact's run scripts pass --DDP-impl torch for some runs, "
    "which the row does not state"
)
#: The Megatron-LM release of Korthikanti et al. 2022 (arXiv 2205.05198, the sequence-parallelism
#: work), named by the row's text as :data:`~stage_explore.validation.infer_fields.FRAMEWORK_RULES`
#: names the megatron-lm-2021 profile: its ``ColumnParallelLinear`` runs
#: ``ColumnParallelLinearWithAsyncAllreduce`` (the input gradient's all-reduce issued with
#: ``async_op=True``, then the weight-gradient GEMM) unless ``--no-async-tensor-model-parallel-
#: allreduce`` (megatron/mpu/layers.py, NVIDIA/Megatron-LM 02bb1f5c); the SC'21 code does not.
KORTHIKANTI_2022 = r"korthikanti|2205\.05198"
ASYNC_ALLREDUCE = (
    "the backward tensor-parallel all-reduce of input gradients issued asynchronously beside "
    "the weight-gradient GEMM (tp_async_grad_allreduce): the Megatron-LM of Korthikanti et al. "
    "2022 (megatron/mpu/layers.py ColumnParallelLinearWithAsyncAllreduce, on unless "
    "--no-async-tensor-model-parallel-allreduce; NVIDIA/Megatron-LM 02bb1f5c); the text names "
    "that paper, tp > 1 without sequence parallelism"
)
#: MPT's own architecture (mosaicml/mpt-7b … mpt-30b config.json: no_bias true, attn_pdrop,
#: resid_pdrop and emb_pdrop 0), on the GPT base flavor the model reader gives it.
MPT_PATTERN = r"\bmpt\b"
#: llm-foundry's MPT throughput benchmark (``scripts/train/benchmarking``, its README's tables and
#: ``submit_benchmarks.py``), named by a row's text or url. Its models are the pretraining yamls
#: (``scripts/train/yamls/pretrain/mpt-*.yaml``), which do not set ``no_bias``, so MPTConfig's
#: default ``no_bias: False`` (llmfoundry/models/mpt/configuration_mpt.py) keeps a bias on every
#: linear and LayerNorm: the tables' NumParams are exactly L(12d² + 13d) + 2d + (V + S)d (1B-70B,
#: with the learned position table of the row's sequence length S), 9d linear and 4d LayerNorm
#: biases per block over the count without.
LLMFOUNDRY_BENCHMARK = r"scripts/train/benchmarking|llm-foundry MPT training benchmarks"
LLMFOUNDRY_BENCHMARK_NOTE = (
    "MPT blocks with biases (bias true): llm-foundry's benchmark ran the pretraining yamls, which "
    "leave MPTConfig's no_bias at its default False (llmfoundry/models/mpt/configuration_mpt.py); "
    "the tables' NumParams count them (L(12d^2 + 13d) + 2d + (V + S)d exactly); no dropout "
    "(attn_pdrop / resid_pdrop / emb_pdrop 0)"
)
#: A row's text saying dropout is off: ``dropout 0`` / ``dropout=0.0``, not ``dropout 0.1``
#: (a nonzero probability; s34 flagperf: ``\b`` after ``0`` matched before ``.1``).
_NO_DROPOUT = re.compile(
    r"dropout\s*(?:=\s*)?0(?:\.0+)?(?!\.?\d)|no dropout|dropout (?:off|none)", re.I
)
#: A row's text stating the input and output embeddings untied (s36 rowsK): ``untied input and
#: output embeddings``, ``untied input-output embeddings``, ``embeddings untied``, ``untying the
#: input and output embedding weights`` (Vocabulary Parallelism, arXiv 2411.05288 Section 6.1:
#: "in all our experiments, we adapted the more difficult setting, untying the input and output
#: embedding weights"). Not a bare ``untied`` (Zero Bubble's rows: "untied gives 1.55 / 6.30 /
#: 14.80 / 28.48B", a size check), nor the flag named in a list of flags a launch did not pass
#: (FlagPerf's "pass no --position-embedding-type, --untie-embeddings-and-output-weights, ...").
_UNTIED = re.compile(
    r"\buntied\s+(?:input(?:\s+and\s+|\s*-\s*)output\s+)?embeddings?\b|"
    r"\bembeddings?\s+(?:weights\s+)?untied\b|"
    r"\buntying\s+(?:the\s+)?input(?:\s+and\s+|\s*-\s*)output\s+embedding",
    re.I,
)


#: Megatron-Core's expert-parallel all-to-all overlap as a row's text may name it: the flag
#: ``--overlap-moe-expert-parallel-comm``, Megatron-Bridge's ``moe_a2a_overlap``, the launcher
#: variable ``A2A_OVERLAP`` or "1F1B (A2A) overlap"; not when the name is followed by a value
#: that switches it off (``moe_a2a_overlap=False``, ``A2A_OVERLAP=0``, ``off``).
MOE_A2A_OVERLAP = (
    r"(?:overlap[-_\s]moe[-_\s]expert[-_\s]parallel[-_\s]comm|moe[-_\s]a2a[-_\s]overlap|"
    r"\ba2a[-_\s]overlap|1f1b[\s-]+(?:ep[\s-]+)?(?:a2a[\s-]+)?overlap|"
    r"expert[-_\s]parallel[-_\s]communication[-_\s]overlap)"
    r"(?![\s:=]*(?:false|off|0|no|disabled?)\b)"
)
#: The flex dispatcher's HybridEP backend as a row's text may name it (``hybridep``, ``hybrid_ep``,
#: ``Hybrid-EP``); not when followed by a value that switches it off.
MOE_HYBRIDEP = r"\bhybrid[-_\s]?ep\b(?![\s:=]*(?:false|off|0|no|disabled?)\b)"
#: torchtitan's forced MoE load balance as a row's text may name it (``[debug]
#: moe_force_load_balance``, earlier ``training.debug_moe_force_load_balance`` and its
#: ``--training.debug_moe_force_load_balance`` flag); not when followed by a value that switches it
#: off. Not Megatron's ``--moe-router-force-load-balancing`` (random logits: the default routing).
TORCHTITAN_FORCE_BALANCE = (
    r"moe[\s_-]*force[\s_-]*load[\s_-]*balance(?![\s:=]*(?:false|off|0|no)\b)"
)
#: Primus's deterministic forced balance as a row's text may name it: its
#: ``moe_router_force_load_balancing_type`` "even" (AMD-AGI/Primus#875, July 2026: "deterministic
#: round-robin token assignment", ``PrimusTopKRouter._force_even_routing``: token t's k-th slot to
#: expert ``(t*topk + k) % num_experts``), or "even routing" in a row that names Primus (its
#: campaigns' word for it). Not Primus's "uniform" type (Megatron's random logits, the default).
PRIMUS_EVEN_ROUTING = (
    r"force[\s_-]*load[\s_-]*balancing[\s_-]*type[\s:=\"']*even\b|"
    r"^(?=[\s\S]*\bprimus\b)[\s\S]*\beven[\s_-]+routing\b"
)
#: AWS's SageMaker model parallelism library (SMP) as a row's text names it. Its sharded data
#: parallelism is AWS's own implementation of MiCS ("SageMaker AI achieves sharded data
#: parallelism through the implementation of MiCS ... the SageMaker model parallelism library
#: prefetches the upcoming layers in the forward or backward pass, and overlaps the network
#: communication with the computation", https://docs.aws.amazon.com/sagemaker/latest/dg/
#: model-parallel-extended-features-pytorch-sharded-data-parallelism.html), whose collectives run
#: hierarchically over small partition groups (Zhang et al., 'MiCS: Near-linear Scaling for
#: Training Gigantic Model on Public Cloud', VLDB 2022, arXiv 2205.00119, Section 3: hierarchical
#: communication, 2-hop gradient synchronization); SMP's ``sdp_hierarchical_allgather``
#: (smdistributed-modelparallel >= v1.11) defaults to True: "the AllGather operation runs
#: hierarchically: it runs within each node first, and then runs across nodes. For multi-node
#: distributed training jobs, the hierarchical AllGather operation is automatically activated"
#: (aws/sagemaker-python-sdk 91ae4a92 doc/api/training/smd_model_parallel_general.rst). Not the
#: deepspeed profile's flat ring at the per-GPU scale-out bandwidth, a declared calibration of
#: DeepSpeed's own ZeRO-3 of 2021.
#: The library's earlier name, "SageMaker distributed model parallel", and its Python package
#: ``smdistributed.modelparallel`` (https://sagemaker.readthedocs.io/en/stable/api/training/
#: smd_model_parallel.html) name it too (s32 audit).
SMP_SHARDED = (
    r"\bsagemaker(?:'s)?\s+(?:distributed\s+)?model\s+parallel(?:ism)?\b|"
    r"\bsmdistributed\.modelparallel\b|\bsmp\b"
)
#: A FlashAttention kernel as a row's text names it (``FlashAttention-2``, ``flash-attn``,
#: ``--use-flash-attn-v2``, ``flash attention``, and its usual short names ``FA2`` / ``FA3``,
#: s32 audit).
NAMES_FLASH = re.compile(r"flash[-_\s]?att(?:n|ention)|\bfa[-\s]?[23]\b", re.IGNORECASE)
#: Megatron named in a row's text (Megatron-LM, Megatron-DeepSpeed, Megatron-style tensor
#: parallelism); :func:`megatron_attention` keeps only a mention that is the run's own.
NAMES_MEGATRON = re.compile(r"megatron", re.IGNORECASE)
#: Why a non-GPT model under the megatron-lm-2021 profile, or the deepspeed one with Megatron
#: named, runs unfused attention (:func:`megatron_attention`).
MEGATRON_ATTENTION_NOTE = (
    "unfused core attention (core_attention unfused): the profile's attention is Megatron's "
    "ParallelAttention, a scores GEMM, FusedScaleMaskSoftmax and a context GEMM over every "
    "query-key pair (Megatron-DeepSpeed of 2021-22 has no FlashAttention option, microsoft/"
    "Megatron-DeepSpeed 060fb402 megatron/arguments.py; later Megatron-DeepSpeed's "
    "--use-flash-attn-v1 / -v2 are store_true, off unless passed), as for the GPT blocks; the "
    "row names Megatron and no FlashAttention"
)
#: Why a GPT row under the megatron-lm-2021 or deepspeed profile whose text names FlashAttention
#: as the run's own runs fused attention (s37 vocab): Megatron-LM's ``--use-flash-attn``
#: (store_true, off unless passed) makes the legacy ParallelAttention call flash-attn's
#: ``FlashSelfAttention`` (``flash_attn_varlen_func``) for causal self-attention in place of
#: ``CoreAttention``'s scores GEMM, FusedScaleMaskSoftmax and context GEMM (NVIDIA/Megatron-LM
#: 00caa53a ``megatron/legacy/model/transformer.py``: ``self.use_flash_attn = args.use_flash_attn
#: and attention_type == AttnType.self_attn and self.attn_mask_type == AttnMaskType.causal``,
#: ``self.core_attention_flash = FlashSelfAttention(causal=True, ...)``; the same code in
#: ``megatron/model/transformer.py`` before the 2024 move); Megatron-DeepSpeed's
#: ``--use-flash-attn-v1`` / ``-v2`` likewise (:data:`MEGATRON_ATTENTION_NOTE`).
MEGATRON_FLASH_NOTE = (
    "fused causal attention (core_attention fused) on the GPT blocks: the row's text names "
    "FlashAttention as the run's own; Megatron-LM's --use-flash-attn (off unless passed) "
    "replaces the legacy ParallelAttention's CoreAttention (scores GEMM, softmax, context GEMM) "
    "with flash-attn's FlashSelfAttention for causal self-attention (NVIDIA/Megatron-LM "
    "00caa53a megatron/legacy/model/transformer.py), Megatron-DeepSpeed's --use-flash-attn-v1 "
    "/ -v2 likewise"
)
#: A PyTorch release before 2.0 as a row's text names it (``PyTorch 1.10``, ``torch==1.13.1``):
#: PyTorch had no fused attention of its own before 2.0, whose notes introduce it ("Beta includes
#: ... the scaled_dot_product_attention function as part of torch.nn.functional",
#: https://github.com/pytorch/pytorch/releases/tag/v2.0.0).
PRE_SDPA_TORCH = re.compile(r"\b(?:py)?torch[\s_=:-]*1\.\d+", re.IGNORECASE)
#: minGPT, whose ``CausalSelfAttention`` is explicit: ``q @ k.transpose(-2, -1)`` scaled,
#: ``masked_fill``, ``F.softmax``, dropout, ``att @ v`` (karpathy/minGPT 08c08d8d
#: ``mingpt/model.py``).
MINGPT = re.compile(r"\bmin[\s_-]?gpt\b", re.IGNORECASE)
#: A fused attention kernel a row names besides FlashAttention (xFormers' memory-efficient
#: attention, PyTorch's SDPA).
NAMES_FUSED_ATTENTION = re.compile(
    r"xformers|memory[-_\s]efficient attention|scaled_dot_product_attention|\bsdpa\b", re.IGNORECASE
)
#: Why an FSDP row on a PyTorch before 2.0, or on minGPT, runs unfused attention
#: (:func:`eager_attention`).
EAGER_ATTENTION_NOTE = (
    "unfused core attention (core_attention unfused): the row names a PyTorch before 2.0 "
    "(scaled_dot_product_attention first shipped with PyTorch 2.0, "
    "https://github.com/pytorch/pytorch/releases/tag/v2.0.0) or minGPT (its CausalSelfAttention "
    "is q @ k^T, masked_fill, softmax, dropout, att @ v; karpathy/minGPT 08c08d8d "
    "mingpt/model.py), and no fused attention kernel"
)
#: Techniques a row's text names, each a framework option: (frameworks, pattern, option,
#: value, why).
NAMED_TECHNIQUES: tuple[tuple[tuple[str, ...], str, str, bool | str, str], ...] = (
    (("megatron-core", "automodel", "torchtitan"), r"\bdeepep\b", "moe_deepep", True,
     "the expert dispatch on DeepEP (moe_deepep): the text names DeepEP (Megatron "
     "--moe-enable-deepep; AutoModel's DeepEP dispatcher; torchtitan's MoEArgs use_deepep, its "
     "'-deepep' model flavors, torchtitan/distributed/deepep/deepep.py, pytorch/torchtitan "
     "022f885f)"),
    (("megatron-core",), MOE_HYBRIDEP, "moe_hybridep", True,
     "the expert dispatch on HybridEP (moe_hybridep, at Megatron-Core's default 16 SMs): the text "
     "names the flex dispatcher's HybridEP backend (Megatron-Core --moe-flex-dispatcher-backend "
     "hybridep; the MLPerf configs' MOE_FLEX_DISPATCHER_BACKEND=hybridep, mlcommons "
     "training_results_v6.0 NVIDIA deepseekv3_671b / gpt_oss_20b; Megatron-Bridge's "
     "moe_flex_dispatcher_backend), DeepEP's hybrid_ep backend"),
    (("megatron-core",), MOE_A2A_OVERLAP, "moe_comm_overlap", True,
     "the expert-parallel all-to-all overlapped with the other micro-batch's compute "
     "(moe_comm_overlap): the text names Megatron-Core's --overlap-moe-expert-parallel-comm "
     "(its combined 1F1B schedule, megatron/core/pipeline_parallel/combined_1f1b.py, NVIDIA/"
     "Megatron-LM d13e93ff; Megatron-Bridge's moe_a2a_overlap, the MoE model zoo's A2A_OVERLAP=1 "
     "/ '1f1b overlap')"),
    (("torchtitan",), TORCHTITAN_FORCE_BALANCE, "moe_fake_balanced_gate", True,
     "routing by torchtitan's forced load balance (moe_fake_balanced_gate): the text names "
     "moe_force_load_balance, whose TokenChoiceTopKRouter._debug_force_load_balance_routing "
     "gives token t the experts (k*t + j) mod E ('Balanced round-robin expert assignment', "
     "torchtitan/models/moe/moe.py), AutoModel's FakeBalancedGate routing"),
    (("megatron-core",), PRIMUS_EVEN_ROUTING, "moe_fake_balanced_gate", True,
     "routing by Primus's forced 'even' load balance (moe_fake_balanced_gate): the text names "
     "even routing, Primus's moe_router_force_load_balancing_type 'even' (AMD-AGI/Primus#875; "
     "PrimusTopKRouter._force_even_routing gives token t's k-th slot the expert (t*topk + k) mod "
     "E, primus/backends/megatron/core/transformer/moe/router.py), AutoModel's FakeBalancedGate "
     "routing; not Megatron's random logits"),
    (("automodel",), r"fake[\s_-]*balanced[\s_-]*gate", "moe_fake_balanced_gate", True,
     "routing by AutoModel's FakeBalancedGate (moe_fake_balanced_gate): the text names the "
     "fake balanced gate"),
    (("automodel",), r"flex[\s_-]*attn|flex[\s_-]*attention", "attention_kernel", "flex",
     "attention on PyTorch FlexAttention (attention_kernel flex): the text names FlexAttn"),
    (("deepspeed",), SMP_SHARDED, "zero3_flat_ring", False,
     "ZeRO-3 collectives hierarchical over the nodes of a shard group (zero3_flat_ring false): the "
     "text names AWS's SageMaker model parallelism library, whose sharded data parallelism is its "
     "own MiCS implementation (AWS SageMaker docs 'Sharded Data Parallelism'; MiCS, VLDB 2022, "
     "hierarchical communication) with sdp_hierarchical_allgather on by default "
     "(aws/sagemaker-python-sdk smd_model_parallel_general.rst), not DeepSpeed's ZeRO-3 of "
     "2021 (the profile's flat ring)"),
)  # fmt: skip


def recipe_defaults(
    row: dict[str, str],
    framework: str,
    precision: str,
    flavor: str,
    parallel: dict[str, Any],
    stated: dict[str, int],
    system: str = "",
    fp8_recipe: str = "",
    experts: int = 0,
    model_fields: dict[str, Any] | None = None,
) -> Defaults:
    """The framework / recipe defaults of a row read as ``framework`` with ``precision`` on
    the model ``flavor``, given the integer cells the CSV ``stated`` and the ``parallel``
    fields the inference already set (dp, or recompute ``none`` for an empty column);
    ``experts``: the routed experts the ``moe`` column states (0: the flavor's);
    ``model_fields``: the model fields the row states over the flavor (a Falcon row's norm and
    activation), for the rules that ask what the row's model is (s32 audit)."""
    out = Defaults()
    spec = get_flavor(flavor)
    if not spec.core_attention and eager_attention(row, framework):  # s32 rowsD
        out.model["core_attention"] = "unfused"
        out.notes.append(EAGER_ATTENTION_NOTE)
    elif str(spec.family) == "gpt" and not spec.core_attention and framework not in (
        "megatron-lm-2021", "deepspeed",
    ):  # fmt: skip
        out.model["core_attention"] = "fused"
        out.notes.append(
            f"fused causal attention (core_attention fused) on the GPT blocks: the {framework} "
            "profile runs a flash / cuDNN kernel (Megatron-Core's Transformer Engine "
            "DotProductAttention, --transformer-impl transformer_engine; FSDP stacks' SDPA / "
            "flash attn_impl), not Megatron-LM 2021's unfused scores/softmax/context"
        )
    elif (
        str(spec.family) == "gpt"
        and not spec.core_attention
        and names_used(NAMES_FLASH, row_text(row))
    ):  # Megatron-LM's --use-flash-attn on the GPT blocks (s37 vocab)
        out.model["core_attention"] = "fused"
        out.notes.append(MEGATRON_FLASH_NOTE)
    elif (
        str(spec.family) != "gpt" and not spec.core_attention and megatron_attention(row, framework)
    ):  # another family's blocks (s32 bbgpt); a GPT block's own attention is unfused already
        out.model["core_attention"] = "unfused"
        out.notes.append(MEGATRON_ATTENTION_NOTE)
    said = row.get("recompute", "").strip().lower().split(" ")
    recompute = str(parallel.get("recompute", said[0] or "none"))
    composer_default = (
        framework == "llm-foundry-2023" and precision == "bf16" and not names_composer_pure(row)
    )
    if composer_default:
        out.options.update(fsdp_param_fp32=False, eager_modules="generator")
        out.parallel["grad_fp32"] = True
        out.notes.append(COMPOSER_DEFAULT_NOTE)
    elif framework in BF16_REDUCE and precision == "bf16":
        out.parallel["grad_fp32"] = False
        out.notes.append(f"gradients reduced in bf16 (grad_fp32 false): {BF16_REDUCE[framework]}")
    if precision == "fp16" and framework in FP16_REDUCE:
        out.parallel["grad_fp32"] = False
        out.notes.append(f"gradients reduced in fp16 (grad_fp32 false): {FP16_REDUCE[framework]}")
    if framework == "megatron-lm-2021":
        out.parallel["grad_bucket_bytes"] = UNBUCKETED
        out.notes.append(LOCAL_DDP)
        sp = first_word(row.get("sp", "")) in YES or bool(parallel.get("sp"))
        if stated.get("tp", 1) > 1 and not sp and re.search(KORTHIKANTI_2022, row_text(row), re.I):
            out.options["tp_async_grad_allreduce"] = True
            out.notes.append(ASYNC_ALLREDUCE)
    if re.search(MPT_PATTERN, row.get("model", ""), re.IGNORECASE):
        benchmark = re.search(LLMFOUNDRY_BENCHMARK, f"{row_text(row)} {row.get('url', '')}", re.I)
        out.model.update(bias=bool(benchmark), dropout=False)
        out.notes.append(
            LLMFOUNDRY_BENCHMARK_NOTE
            if benchmark
            else "MPT blocks without biases or dropout (mosaicml/mpt-* config.json: no_bias "
            "true, attn_pdrop / resid_pdrop / emb_pdrop 0)"
        )
    elif _NO_DROPOUT.search(f"{row_text(row)} {row.get('uncertain', '')}"):
        out.model["dropout"] = False
        out.notes.append("no dropout (the row's text says dropout 0)")
    tied = (model_fields or {}).get("tied_embeddings", spec.tied_embeddings)
    if tied and _UNTIED.search(f"{row_text(row)} {row.get('uncertain', '')}"):
        out.model["tied_embeddings"] = False
        out.notes.append(
            f"input and output embeddings untied (tied_embeddings false): the row's text says "
            f"so, over flavor {flavor}'s tied embedding (no first-to-last-stage embedding "
            "gradient all-reduce under pipeline parallelism; an output matrix of its own)"
        )
    if framework == "llm-foundry-2023" and names_composer_pure(row):
        out.options.update(fsdp_param_fp32=False, eager_modules="generator")
        out.notes.append(COMPOSER_PURE_NOTE)
    if framework == "llm-foundry-2023" and preset_has_kernel(system, LLMFOUNDRY_A100_KERNEL):
        out.options["attention_kernel"] = LLMFOUNDRY_A100_KERNEL
        out.notes.append(LLMFOUNDRY_A100_KERNEL_NOTE)
    text = row_text(row).lower()
    for frameworks, pattern, option, value, why in NAMED_TECHNIQUES:
        if framework in frameworks and re.search(pattern, text):
            out.options[option] = value
            out.notes.append(why)
    hai_llm_dispatch(row, spec, precision, out)  # DeepSeek's framework (infer_deepseek)
    hpz = stated_hpz(row.get("dp_sharding", "")) if framework == "deepspeed" else None
    if hpz is not None and hpz > 1:  # ZeRO++'s hpZ (infer_shard, analytical/hpz.py; s34 zeropp)
        out.options["zero_hpz_partition_size"] = hpz
        out.notes.append(
            f"DeepSpeed ZeRO++'s hpZ in groups of {hpz} (zero_hpz_partition_size {hpz}): the "
            "dp_sharding column states it, quantization (qwZ, qgZ) off"
        )
    if framework in FSDP_COMPILE_FRAMEWORKS and names_compile(row):
        out.options["fused_elementwise"] = True
        out.notes.append(FSDP_COMPILE_NOTE)
    if framework == "megatron-core":
        megatron_core_defaults(row, flavor, precision, fp8_recipe, parallel, stated, system, out)
        dgxc_defaults(row, precision, out, stated, (spec.top_k, experts or spec.num_experts))
        named_launch_flags(row, out)
    elif framework == "automodel":
        dp = stated_or_inferred(stated, parallel, "dp")
        automodel_defaults(row, flavor, stated, out, dp, experts)
        dense = not (experts or spec.num_experts)  # its benchmark's dense configs (s37)
        automodel_no_sync_defaults(row, int(parallel.get("zero", 0)), dense, out)
    elif framework == "torchtitan":
        shipped = torchtitan_shipped_ac(row, flavor)  # empty cell: the shipped config's (s35)
        if shipped is not None:
            recompute = shipped[0]
            out.parallel["recompute"] = recompute
            out.notes.append(shipped[1])
        pp = stated_or_inferred(stated, parallel, "pp")
        torchtitan_defaults(row, recompute, stated.get("tp", 1), out, pp)
        torchtitan_pipeline(row, stated, stated_or_inferred(stated, parallel, "dp"), out)
    elif framework == "internevo":
        internevo_defaults(row, out, preset_has_kernel(system, INTERNEVO_KERNEL))
    elif framework == "fsdp":
        fsdp2_defaults(row, int(parallel.get("zero", 0)), out)
        dtensor_tp_defaults(row, parallel, stated, out)
        bf16_cast_defaults(row, out)
        kempnerforge_loss_defaults(row, parallel, stated, out)  # after the bf16 cast's rule
        kempnerforge_embedding_defaults(row, parallel, stated, out)  # its whole token table
        no_sync_defaults(row, int(parallel.get("zero", 0)), out)
        one_rank_mesh_defaults(row, parallel, stated, out)  # KempnerForge tp > 1 at dp 1
        kempnerforge_pipeline_defaults(row, parallel, stated, out)  # its PP stage (s36 kfpp)
        bionemo_native_defaults(row, int(parallel.get("zero", 0)), out)
        hf_transformers_defaults(row, int(parallel.get("zero", 0)), spec, out, model_fields or {})
    return out


def megatron_attention(row: dict[str, str], framework: str) -> bool:
    """Whether ``row`` runs Megatron's own unfused attention: the megatron-lm-2021 profile, or
    the deepspeed profile with Megatron named (Megatron-DeepSpeed, Megatron-style tensor
    parallelism: a Hugging Face model under DeepSpeed ZeRO runs its own attention), and no
    FlashAttention named (:data:`MEGATRON_ATTENTION_NOTE`)."""
    text = row_text(row)
    if names_used(NAMES_FLASH, text):  # not 'flash attention disabled' (s32 audit)
        return False
    return framework == "megatron-lm-2021" or (
        framework == "deepspeed" and names_used(NAMES_MEGATRON, text)
    )  # a DeepSpeed run 'faster than Megatron-LM' names Megatron as its baseline (s32 audit)


def eager_attention(row: dict[str, str], framework: str) -> bool:
    """Whether an FSDP-profile ``row`` runs its model's own unfused attention: its text (or
    ``model`` cell) names a PyTorch release before 2.0 or minGPT, and no FlashAttention,
    xFormers or SDPA kernel (:data:`EAGER_ATTENTION_NOTE`). The fsdp profile's fused default
    stands for the SDPA / flash ``attn_impl`` of 2023-and-later stacks."""
    if framework != "fsdp":
        return False
    text = row_text(row, ("source", "source_table", "notes", "model"))
    if NAMES_FLASH.search(text) or NAMES_FUSED_ATTENTION.search(text):
        return False
    return PRE_SDPA_TORCH.search(text) is not None or MINGPT.search(text) is not None


def names_composer_pure(row: dict[str, str]) -> bool:
    """Whether a row's text names Composer's FSDP ``mixed_precision`` mode ``PURE``
    (:data:`COMPOSER_PURE`, in :data:`COMPOSER_PURE_COLUMNS`)."""
    return any(COMPOSER_PURE.search(row.get(c, "")) for c in COMPOSER_PURE_COLUMNS)


def preset_has_kernel(system: str, kernel: str) -> bool:
    """Whether the system preset ``system`` lists a figure for the attention ``kernel`` (its
    ``attention_kernels``); False for an unknown system."""
    try:
        kernels = load_system(system).accelerator.kernels
    except ConfigError:
        return False
    return kernels is not None and kernel in kernels.attention_kernels
