"""AMD's MLPerf Training v5.1 Llama 3.1 8B implementation for an inferred ``megatron-core`` row
whose text names that round and AMD's implementation (AMD's own submission, or another
submitter's run of it on AMD Instinct GPUs): what its ``src/train.py`` sets.

Read in mlcommons/training_results_v5.1 4da2d1cd, the submitters' copies of the implementation
(AMD's own folder stores only its configs and README; the image is
``rocm/amd-mlperf:llama31_8b_training_5.1``):

- ``Dell/benchmarks/llama31_8b/implementations/AMD/src/train.py`` and
  ``GigaComputing/benchmarks/llama31_8b/implementations/MI355X/nemo/src/train.py`` (NeMo 2.x on
  ``nemo.lightning``; the Dockerfile beside the latter: NeMo v2.5.0rc0, ROCm/Megatron-LM
  075b4c00, ROCm/TransformerEngine 849b6f40): ``get_strategy`` builds
  ``MegatronStrategy(ddp=DistributedDataParallelConfig(grad_reduce_in_fp32=False,
  average_in_collective=True, use_distributed_optimizer=True, fp8_param_gather=True))`` with no
  ``overlap_grad_reduce`` / ``overlap_param_gather``, whose Megatron-Core defaults are False
  (``megatron/core/distributed/distributed_data_parallel_config.py``, ROCm/Megatron-LM
  5b976d27 as stored; NeMo's ``MegatronStrategy`` uses a given config as it is,
  ``nemo/lightning/pytorch/strategies/megatron_strategy.py``); ``get_pretrain_config`` sets
  ``Llama31Config8B`` with ``fp8 = "hybrid"``, ``fp8_amax_history_len = 4``,
  ``fp8_amax_compute_algo = "most_recent"``, ``tp_only_amax_red = True`` and
  ``MegatronMixedPrecision(grad_reduce_in_fp32=False, fp8_params=args.fp8_params,
  fp8_dot_product_attention=False)``;
- ``GigaComputing/.../MI355X/nemo/run_and_time.sh``: ``--fp8_params`` when ``FP8_PARAMS`` > 0,
  which every stored MI355X config exports (``AMD/benchmarks/llama31_8b/implementations/
  MI355X_EPYC_9575F_pytorch_llama3_8b/config_MI355X_1x8x1_8b.sh``: ``FP8_PARAMS=1``, TP / PP /
  CP 1, ``TP_COMM_OVERLAP=False``, ``NVTE_FUSED_ATTN_CK=1``).

The loss: NeMo 2.0's ``GPTConfig`` sets ``cross_entropy_loss_fusion = True`` and train.py names
no ``cross_entropy_fusion_impl`` (Megatron-Core's default ``'native'``).
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_mlperf_round import mlperf_training_round
from stage_explore.validation.infer_release import Defaults, row_text

#: The MLPerf Training round of the implementation (its first; the v6.0 configs read since run
#: MXFP4, another implementation's settings).
MLPERF_AMD_ROUND = (5, 1)
#: AMD's implementation named in a row's text: "AMD's Llama 3.1 8B implementation" (another
#: submitter's run of it) or AMD's own closed-division submission.
_AMD_IMPLEMENTATION = re.compile(
    r"\bAMD(?:'s)?\s+(?:[^;()]*?\s)?implementation\b|\bAMD\s+closed\s+division\b",
    re.IGNORECASE,
)
#: The Llama 3.1 8B benchmark (the implementation's only model: train.py ``--size`` "8b").
_LLAMA31_8B = re.compile(r"llama[\s_-]*3\.1[\s_-]*8b", re.IGNORECASE)
_WHERE = (
    "AMD's MLPerf Training v5.1 Llama 3.1 8B implementation (mlcommons/training_results_v5.1 "
    "4da2d1cd, Dell/benchmarks/llama31_8b/implementations/AMD/src/train.py and "
    "GigaComputing/.../MI355X/nemo/src/train.py, run_and_time.sh; AMD's "
    "config_MI355X_1x8x1_8b.sh FP8_PARAMS=1)"
)


def mlperf_amd_implementation(row: dict[str, str], precision: str, out: Defaults) -> bool:
    """Whether the row runs AMD's MLPerf Training v5.1 Llama 3.1 8B implementation (its text
    names that round and AMD's implementation or AMD's closed-division submission, its model
    Llama 3.1 8B); if so, that implementation's settings into ``out``: bf16 gradient
    reduction, no overlap of the gradient reduce-scatter or the parameter all-gather (the
    DistributedDataParallelConfig sets neither), the native fused loss, and on FP8 the FP8
    parameters and the tensor-parallel-only amax reduction (delayed scaling in the HYBRID
    format with an amax history of 4: the precision's default recipe)."""
    if mlperf_training_round(row_text(row)) != MLPERF_AMD_ROUND:
        return False
    if not _AMD_IMPLEMENTATION.search(row_text(row)):
        return False
    if not _LLAMA31_8B.search(row.get("model", "")):
        return False
    out.parallel["grad_fp32"] = False
    out.options["overlap_grad_reduce"] = False
    out.options["overlap_param_gather"] = False
    out.options["native_cross_entropy"] = True
    out.notes.append(
        "gradients reduced in bf16 (grad_fp32 false), the gradient reduce-scatter after the "
        "step's last backward and the parameter all-gather after the optimizer step, neither "
        "overlapped (overlap_grad_reduce false, overlap_param_gather false), the loss as "
        "Megatron-Core's native fused cross-entropy (native_cross_entropy): train.py's "
        "DistributedDataParallelConfig(grad_reduce_in_fp32=False, use_distributed_optimizer="
        "True, fp8_param_gather=True) sets no overlap (Megatron-Core's defaults False), NeMo "
        f"2.0's GPTConfig cross_entropy_loss_fusion True with no impl named ({_WHERE})"
    )
    out.notes.append(
        "attention on Transformer Engine's CK fused attention with its v3 kernels "
        "(NVTE_FUSED_ATTN_CK=1, NVTE_CK_USES_FWD_V3 / BWD_V3=1), timed at the preset's "
        f"attention figures, which stand for it ({_WHERE})"
    )
    if precision == "fp8":
        out.options["fp8_param_gather"] = True
        out.options["fp8_amax_reduction"] = "tp_cp"
        out.notes.append(
            "FP8 parameters (fp8_param_gather) and FP8 amaxes reduced over the tensor- and "
            "context-parallel group only (fp8_amax_reduction tp_cp): train.py's "
            "fp8_param_gather=True, MegatronMixedPrecision(fp8_params=--fp8_params) and "
            "Llama31Config8B tp_only_amax_red = True; delayed scaling (fp8 'hybrid', amax "
            f"history 4, most_recent) ({_WHERE})"
        )
    return True
