"""How TensorRT-LLM sizes the KV cache of a ``trtllm-bench throughput`` run.

The serving validator's default memory rule is vLLM's: the engine's tensors may take
``gpu_memory_utilization`` (0.9) of the GPU's total memory. TensorRT-LLM's rule differs in two
ways, both read from its source (NVIDIA/TensorRT-LLM, the commits named below):

1. **A fraction of the memory left free after the engine is loaded**, not of the total. The C++
   runtime gives the KV cache ``free_gpu_memory_fraction`` of ``cudaMemGetInfo``'s free bytes
   (plus the memory pool's free bytes), measured once the weights and the TensorRT engine's
   activation memory are resident (``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``,
   ``BaseKVCacheManager::calculateFreeMemBytes`` at 002ba6a7: ``freePrimaryMemBytes =
   (freeMem + memoryPoolFree) * freeMemFraction``; ``docs/source/reference/memory.md`` at
   5a211b91: the activation memory is pre-computed at build time for the maximum shapes, "close
   to max number of input tokens * some constant factor", and the KV cache takes a share of "the
   remaining free GPU memory"). The PyTorch backend does the same after a profiling forward of
   ``max_num_tokens`` tokens (``tensorrt_llm/_torch/pyexecutor/_util.py``, ``KvCacheCreator``:
   ``available_kv_mem = (total_gpu_memory - peak_memory + allocated_bytes) * fraction``).
   trtllm-bench's default fraction is 0.90 (``--kv_cache_free_gpu_mem_fraction``,
   ``tensorrt_llm/bench/benchmark/throughput.py`` at 000a01de); the performance-overview page
   says its tables mostly ran at 0.95, falling back to 0.90 on an out-of-memory (258c7540 and
   00f37686, ``docs/source/performance/perf-overview.md``) — the row's ``kv_free_fraction``
   cell. The activation term here is the model's activation workspace of one prefill step of
   the engine's ``max_num_tokens`` (:func:`engine_max_num_tokens`).
2. **Blocks reserved to completion.** trtllm-bench's default scheduler policy is
   ``guaranteed_no_evict`` (``throughput.py``, ``--scheduler_policy``; the page's sample output
   "Scheduling Policy: Guaranteed No Evict"): the capacity scheduler admits a request only when
   the free blocks cover every in-flight request's blocks to completion
   (``cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp`` at cf6abc45,
   ``reservedBlocks += getRemainingBlocksToCompletion(*req)``; ``kvCacheManager.cpp``: prompt
   plus ``maxNewTokens``). So a uniform ``isl``/``osl`` run keeps at most
   ``KV tokens / (isl + osl)`` sequences in flight, not ``KV tokens / (isl + osl/2)``.

Not modelled (each lowers the free memory a little; none is stated per row): the CUDA context,
NCCL's buffers, the decoder's and sampler's buffers, ``cudaMemGetInfo``'s total being a few
hundred MiB below the preset's nominal memory.
"""

from __future__ import annotations

import math
from dataclasses import replace

from stage_core.errors import ConfigError
from stage_core.limits import MAX_GLOBAL_BATCH
from stage_core.models import ModelSpec
from stage_core.serving import Phase, ServingConfig, ServingStep
from stage_core.serving.program import kv_cache_bytes_per_token, lower_step, serving_memory

#: trtllm-bench build's default KV share of the memory left after the weights when it sizes the
#: engine (``calc_engine_setting(..., kv_cache_gpu_mem_fraction=0.95)``,
#: ``tensorrt_llm/bench/build/tuning.py`` at 04cba882).
BUILD_KV_FRACTION = 0.95
#: ``finetune_setting``'s caps: at most 4,096 sequences (over pp) and 32,768 tokens per step, at
#: least 2,048 tokens per step (``tuning.py`` at 04cba882: 'Cap total batch size to avoid decoder
#: buffer size becoming too large', 'Cap num tokens to avoid TRT activation buffer becoming too
#: large', 'Set min to 2048 to ensure Ctx/Gen overlap efficiency').
BUILD_MAX_BATCH = 4096
BUILD_MAX_TOKENS = 32768
BUILD_MIN_TOKENS = 2048


def kv_free_fraction(cell: str | None, line: int) -> float | None:
    """The row's ``kv_free_fraction`` cell: a float in (0, 1), or None (empty or absent: the
    vLLM rule)."""
    text = (cell or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value < 1.0:  # TensorRT-LLM: 'freeMemFraction ... must be smaller than 1.0f'
        raise ConfigError(
            f"serving_runs.csv line {line}: `kv_free_fraction` must be a number in (0, 1) (the "
            f"share of the memory free after the engine loads), got {text!r}"
        )
    return value


def _round_up(value: float, step: int) -> int:
    return step * math.ceil(value / step)


def engine_max_num_tokens(
    model: ModelSpec, base: ServingConfig, memory_bytes: int, isl: int, osl: int
) -> int:
    """trtllm-bench build's ``max_num_tokens`` for a uniform ``isl``/``osl`` dataset
    (``tuning.py`` at 04cba882, ``calc_engine_setting`` then ``finetune_setting``): the
    requests its estimate fits, ``0.95 x (GPUs x memory - weights) / (KV bytes per token x
    (isl + osl))``, capped at 4,096 / pp; tokens ``requests x (1 + isl / osl)``, capped at
    32,768, rounded up to 256 below 4,096 (at least 2,048), to 512 below 8,192, else to 1,024.
    The weights are the lowering's (per GPU, times the GPUs); the v0.17 file is not stored, the
    later one is used."""
    gpus = base.tp * base.pp
    weights = sum(m.weight_bytes for m in serving_memory(lower_step(model, base, base.steps()[0])))
    weights_total = weights * base.tp  # every stage's GPUs hold their shard
    per_token = kv_cache_bytes_per_token(model, base.kv_bytes)
    requests = BUILD_KV_FRACTION * (memory_bytes * gpus - weights_total) / (per_token * (isl + osl))
    raw_batch = min(max(requests, 0.0), BUILD_MAX_BATCH) / base.pp
    raw_tokens = min(raw_batch * (1 + isl / osl), BUILD_MAX_TOKENS)
    if raw_tokens < 4096:
        return max(BUILD_MIN_TOKENS, _round_up(raw_tokens, 256))
    if raw_tokens < 8192:
        return _round_up(raw_tokens, 512)
    return _round_up(raw_tokens, 1024)


def kv_footprint(model: ModelSpec, base: ServingConfig, tokens: int) -> list[tuple[int, int]]:
    """Per pipeline stage, what an engine sizes its KV cache from: the bytes held before any
    KV (the weights and the activation workspace of one prefill step of ``tokens`` tokens) and
    one sequence's KV bytes at ``base.context_len`` (two lowerings, one sequence apart). Shared
    by TensorRT-LLM's rule (:func:`trtllm_batch`) and vLLM's (``serving_vllm.kv_blocks``)."""
    prefill = ServingConfig(
        phase=Phase.PREFILL, batch=1, prompt_len=tokens, tp=base.tp, pp=base.pp, ep=base.ep,
        precision=base.precision, kv_precision=base.kv_precision,
    )  # fmt: skip
    held = serving_memory(lower_step(model, prefill, ServingStep(tokens, tokens)))
    step = base.steps()[0]
    one = serving_memory(lower_step(model, replace(base, batch=1), step))
    two = serving_memory(lower_step(model, replace(base, batch=2), step))
    return [
        (
            engine.weight_bytes + engine.activation_bytes,
            second.kv_cache_bytes - first.kv_cache_bytes,
        )
        for engine, first, second in zip(held, one, two, strict=True)
    ]


def trtllm_batch(
    model: ModelSpec, base: ServingConfig, memory_bytes: int, fraction: float, tokens: int
) -> int:
    """The sequences TensorRT-LLM keeps in flight: on every GPU, ``fraction x (memory - W - A)``
    of KV cache (``W`` the weights, ``A`` the engine's activation memory: the workspace of one
    prefill step of ``tokens`` tokens) over one sequence's KV bytes at ``base.context_len``
    (the caller passes ``isl + osl``: blocks reserved to completion); the smallest over the
    pipeline stages (the runtime all-reduces the block count with MIN). 0 when none fits."""
    batch = MAX_GLOBAL_BATCH
    for held, per_sequence in kv_footprint(model, base, tokens):
        free = max(memory_bytes - held, 0)
        if per_sequence > 0:
            batch = min(batch, int(fraction * free) // per_sequence)
    return batch
