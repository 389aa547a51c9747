"""The framework-profile type: :class:`FrameworkProfile` (one framework's behaviours as data),
:data:`OPTION_FLAGS` (each option and the framework flag it stands for) and their checks.
The shipped profiles are in :mod:`stage_explore.analytical.frameworks`, what their options imply
in bytes and micro-batches in :mod:`stage_explore.analytical.framework_costs`.

The same parallel configuration runs differently under Megatron-LM, Megatron-Core, DeepSpeed
and PyTorch FSDP: which communication each overlaps with compute, how ZeRO-3 / FSDP gathers
parameters, whether pipeline transfers block, what memory the process holds beyond the tensors.
A profile states those behaviours as data, each option under the framework's own flag name
(:data:`OPTION_FLAGS`) with the default that framework ships; the analytical backend reads it
(``AnalyticalBackend(framework="deepspeed")``, ``[backend.options] framework = "fsdp"`` in a
study, ``stage eval --framework fsdp``) and one option can be overridden
(``AnalyticalBackend(framework="megatron-core", overrides={"tp_comm_overlap": False})``).

The options are grouped by area, each module holding its options' documentation, framework
flags (merged here into :data:`OPTION_FLAGS`) and fields (:class:`FrameworkProfile` inherits
them):

- :mod:`~stage_explore.analytical.profile_tp` — tensor parallelism: how its all-gathers and
  reduce-scatters overlap the GEMMs (Transformer Engine's userbuffers, PyTorch's async TP,
  Megatron's asynchronous all-reduce) and what DTensor's and torchao's tensor parallelism add;
- :mod:`~stage_explore.analytical.profile_moe` — mixture-of-experts layers: the expert dispatch and
  its overlap, routing, and the expert GEMMs' inputs;
- :mod:`~stage_explore.analytical.profile_sharding` — data parallelism and sharded model states:
  gradient buckets and their overlap, ZeRO-3 / FSDP gathers, what FSDP copies and keeps, the
  optimizer and gradient accumulation;
- :mod:`~stage_explore.analytical.profile_kernels` — the kernels a block runs: attention, fusion and
  eager module code, the loss, FP8 casts and amax reductions, and context-parallel attention;
- :mod:`~stage_explore.analytical.profile_runtime` — the pipeline's transfers, buffers and
  schedules, when a collective starts on its stream, and the memory the process holds beyond the
  tensors;
- :mod:`~stage_explore.analytical.offload` — CPU offload of the optimizer state and the ZeRO-3
  parameter shards (DeepSpeed ZeRO-Offload / ``offload_param``, FSDP1 ``CPUOffload``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from stage_core.errors import ConfigError
from stage_core.lower.optimizer_kinds import OPTIMIZERS
from stage_explore.analytical.eager import EAGER_MODULES
from stage_explore.analytical.fused_fc1 import FC1_SCOPES
from stage_explore.analytical.offload import CPU_OPTIMIZERS, OFFLOAD_FLAGS, OffloadOptions
from stage_explore.analytical.output_chunks import OUTPUT_CHUNKS
from stage_explore.analytical.profile_kernels import FP8_AMAX_REDUCTION, KERNEL_FLAGS, KernelOptions
from stage_explore.analytical.profile_moe import MOE_FLAGS, MoeOptions
from stage_explore.analytical.profile_runtime import RUNTIME_FLAGS, RuntimeOptions
from stage_explore.analytical.profile_sharding import (
    DISTRIBUTED_FUSED_ADAM,
    GRAD_ACCUMULATION,
    SHARDING_FLAGS,
    ShardingOptions,
)
from stage_explore.analytical.profile_tp import TP_FLAGS, UB_RS_METHODS, TensorParallelOptions

#: Each option and the flag (or config key) the framework exposes it under.
OPTION_FLAGS: dict[str, str] = {
    **TP_FLAGS,
    **MOE_FLAGS,
    **SHARDING_FLAGS,
    **KERNEL_FLAGS,
    **RUNTIME_FLAGS,
    **OFFLOAD_FLAGS,
}

# The options whose value is one of a fixed set of names (checked by ``__post_init__``).
OPTION_CHOICES: dict[str, tuple[str, ...]] = {
    "eager_modules": EAGER_MODULES,
    "distributed_fused_adam": DISTRIBUTED_FUSED_ADAM,
    "optimizer": OPTIMIZERS,
    "fused_fc1": FC1_SCOPES,
    "fp8_amax_reduction": FP8_AMAX_REDUCTION,
    "cpu_optimizer": CPU_OPTIMIZERS,
    "grad_accumulation": GRAD_ACCUMULATION,
    "pipelining_output_chunks": OUTPUT_CHUNKS,
    "ub_proj_fprop_method": UB_RS_METHODS,
    "ub_fc2_fprop_method": UB_RS_METHODS,
}

GIB = 2**30
MIB = 2**20
#: Bytes of an fp32 element (``fsdp_param_fp32``: the sharded master parameters gathered as is).
FP32_BYTES = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameworkProfile(
    TensorParallelOptions,
    MoeOptions,
    ShardingOptions,
    KernelOptions,
    RuntimeOptions,
    OffloadOptions,
):
    """One framework's behaviours (module docstring); ``source`` names where they come from."""

    name: str
    description: str
    source: str

    def __post_init__(self) -> None:
        for option in OPTION_FLAGS:
            value = getattr(self, option)
            if option == "zero3_gathers":
                if isinstance(value, bool) or value not in (2, 3):
                    raise ConfigError(
                        f"framework {self.name!r}: `zero3_gathers` must be 2 or 3, "
                        f"but got {value!r}"
                    )
            elif option in (
                "runtime_reserved_bytes",
                "zero3_live_elements",
                "zero3_prefetch_elements",
                "zero3_prefetch_units",
                "zero3_persistence_elements",
                "loss_fp32_buffers",
                "loss_16bit_buffers",
                "local_batch_size",
                "train_metric_losses",
                "moe_hybridep_domain_ranks",
            ):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ConfigError(
                        f"framework {self.name!r}: `{option}` must be an int >= 0, "
                        f"but got {value!r}"
                    )
            elif option == "zero_hpz_partition_size":
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ConfigError(
                        f"framework {self.name!r}: `zero_hpz_partition_size` (ranks of a hpZ "
                        f"group) must be an int >= 1, but got {value!r}"
                    )
            elif option == "moe_hybridep_sms":
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ConfigError(
                        f"framework {self.name!r}: `moe_hybridep_sms` (HybridEP's SMs) must be "
                        f"an int >= 1, but got {value!r}"
                    )
            elif option == "cuda_device_max_connections":
                if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 32:
                    raise ConfigError(  # CUDA's hardware work queues per device: 1 to 32
                        f"framework {self.name!r}: `cuda_device_max_connections` must be an int "
                        f"from 1 to 32, but got {value!r}"
                    )
            elif option in ("attention_kernel", "sm100_attention_kernel"):
                if value is not None and not (isinstance(value, str) and value):
                    raise ConfigError(
                        f"framework {self.name!r}: `{option}` must be a kernel name or "
                        f"None, but got {value!r}"
                    )
            elif option == "allocator_overhead":
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not (0 <= value < 1)
                ):
                    raise ConfigError(
                        f"framework {self.name!r}: `allocator_overhead` must be a number in "
                        f"[0, 1), but got {value!r}"
                    )
            elif option == "moe_load_imbalance":
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not (1 <= value < float("inf"))
                ):
                    raise ConfigError(
                        f"framework {self.name!r}: `moe_load_imbalance` (max/mean tokens per "
                        f"expert-parallel rank) must be a finite number >= 1, but got {value!r}"
                    )
            elif option in OPTION_CHOICES:
                choices = OPTION_CHOICES[option]
                if value not in choices:
                    raise ConfigError(
                        f"framework {self.name!r}: `{option}` must be one of "
                        f"{', '.join(choices)}, but got {value!r}"
                    )
            elif not isinstance(value, bool):
                raise ConfigError(
                    f"framework {self.name!r}: `{option}` ({OPTION_FLAGS[option]}) must be "
                    f"true or false, but got {value!r}"
                )
        if self.moe_deepep and self.moe_hybridep:
            raise ConfigError(
                f"framework {self.name!r}: `moe_deepep` and `moe_hybridep` are two backends "
                "of one flex dispatcher; expected at most one of them True, but got both"
            )
        if self.moe_fp8_dispatch and not self.moe_deepep:
            raise ConfigError(
                f"framework {self.name!r}: `moe_fp8_dispatch` (FP8 messages of DeepEP's dispatch "
                "kernel) needs `moe_deepep` True, but got moe_deepep False"
            )
        if self.moe_sequential_mlp and self.moe_grouped_kernel:  # s27 review: both were taken
            raise ConfigError(
                f"framework {self.name!r}: `moe_sequential_mlp` (SequentialMLP, one MLP module per "
                "local expert) and `moe_grouped_kernel` (Transformer Engine's fused grouped "
                "experts, one launch) are two expert paths; expected at most one of them True"
            )
        if self.distributed_fused_adam != "off" and self.optimizer != "adam":
            raise ConfigError(
                f"framework {self.name!r}: `distributed_fused_adam` is Apex's Adam (its state "
                f"dtype); expected optimizer 'adam' with it, but got optimizer={self.optimizer!r}"
            )
        if self.te_cross_entropy and self.native_cross_entropy:
            raise ConfigError(
                f"framework {self.name!r}: `te_cross_entropy` and `native_cross_entropy` are two "
                "values of Megatron-Core's cross_entropy_fusion_impl; set at most one"
            )
        if self.xentropy_cross_entropy and (self.te_cross_entropy or self.native_cross_entropy):
            raise ConfigError(
                f"framework {self.name!r}: `xentropy_cross_entropy` (flash-attn's loss) and "
                "Megatron-Core's fused losses are different losses; set at most one"
            )
        if not self.rope_fusion and self.eager_modules != "megatron-core":
            # only Megatron-Core's module code runs the unfused RoPE op by op (eager_megatron);
            # every other eager table counts its framework's own rotary code already
            raise ConfigError(
                f"framework {self.name!r}: `rope_fusion` false needs eager_modules "
                f"'megatron-core' (Megatron-Core's unfused rope_utils), but got eager_modules="
                f"{self.eager_modules!r}"
            )

    def with_overrides(self, overrides: Mapping[str, Any]) -> FrameworkProfile:
        """This profile with some options replaced (validated like the profile itself)."""
        if not isinstance(overrides, Mapping):
            raise ConfigError(
                f"framework overrides must be a table of option = value, but got {overrides!r}"
            )
        unknown = sorted(set(overrides) - set(OPTION_FLAGS))
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), list(OPTION_FLAGS), n=1)
            known = ", ".join(OPTION_FLAGS)  # 90 names: the close one first (s27 review)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(f"unknown framework option {unknown[0]!r}; {hint}known: {known}")
        if not overrides:
            return self
        return replace(self, **dict(overrides))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
