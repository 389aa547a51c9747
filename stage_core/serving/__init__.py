"""Inference workloads: prefill and decode steps over a KV cache, written with the training
blocks, layouts and derived collectives (forward only).

- :mod:`~stage_core.serving.config`: :class:`ServingConfig` (phase, batch, prompt/context
  lengths, KV precision, serving parallelism) and the steps a phase runs.
- :mod:`~stage_core.serving.program`: :func:`lower_step` binds one step to exact per-stage
  instructions; :func:`serving_memory` gives weights, KV cache and activation workspace per
  GPU, and :func:`max_batch` the largest batch that fits.
"""

from stage_core.serving.config import Phase, ServingConfig, ServingStep
from stage_core.serving.program import (
    ServingMemory,
    ServingProgram,
    kv_cache_bytes_per_token,
    lower_step,
    max_batch,
    serving_memory,
)

__all__ = [
    "Phase",
    "ServingConfig",
    "ServingMemory",
    "ServingProgram",
    "ServingStep",
    "kv_cache_bytes_per_token",
    "lower_step",
    "max_batch",
    "serving_memory",
]
