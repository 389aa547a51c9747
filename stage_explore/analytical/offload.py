"""CPU offload of model states (7 Dec 2026, s34 offload): the framework-profile options
(:data:`OFFLOAD_FLAGS`, :class:`OffloadOptions`), what they take off the GPU and put in host
memory (:func:`offload_states`), and what the transfers over PCIe and the optimizer step on the
CPU cost (:func:`offload_zero_s`, :func:`offload_step_s`).

Options:

- ``offload_optimizer`` — the optimizer state (fp32 master, moments) lives in host memory and
  the optimizer step runs on the CPU: DeepSpeed ``zero_optimization.offload_optimizer.device =
  "cpu"`` (ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840), and FSDP1
  ``CPUOffload(offload_params=True)``, whose flat parameters and their gradients are CPU tensors
  the user's optimizer steps. Needs ZeRO ≥ 1.
- ``offload_params`` — ZeRO-3's parameter shards live in host memory and are copied to the
  GPU before every all-gather: DeepSpeed ``offload_param`` (ZeRO-3 only) and FSDP1
  ``CPUOffload(offload_params=True)`` (set both options for FSDP1). Needs ZeRO-3 and
  ``offload_optimizer`` (a CPU parameter with the optimizer on the GPU is not modelled).
- ``cpu_optimizer`` (str) — the CPU optimizer's code: ``"deepspeed"`` (``DeepSpeedCPUAdam``,
  the SIMD Adam of ZeRO-Offload) or ``"torch"`` (a ``torch.optim`` optimizer on CPU tensors).

What the frameworks' code does (read in the stored sources):

- DeepSpeed ZeRO-1/2 (``deepspeed/runtime/zero/stage_1_and_2.py``, deepspeedai/DeepSpeed):
  after each bucket's reduction, ``async_inplace_copy_grad_to_fp32_buffer_from_gpu`` copies
  the rank's gradient partition, cast to fp32, into the CPU fp32 gradient buffer with
  ``copy_(…, non_blocking=True)`` and frees the GPU gradient: on the reduction stream, beside
  the backward when ``overlap_comm``. ``step()`` then runs the CPU optimizer
  (``self._optimizer_step``) and copies the updated partition back to the GPU's 16-bit
  partition (``bit16_partitions[partition_id].data.copy_(fp32_partition.data)``: a blocking
  copy) before the parameter all-gather. The GPU keeps the 16-bit parameters.
- FSDP1 with ``CPUOffload(offload_params=True)`` (``torch/distributed/fsdp``: ``_offload_grad``
  in the post-reduce callback copies the reduced gradient shard to the CPU gradient with
  ``non_blocking=True`` on the post-backward stream; the unshard copies the CPU shard to the
  GPU on the unshard stream before the all-gather; the optimizer steps the CPU flat
  parameters): each gather of a unit is preceded by the H2D copy of its shard, each
  reduce-scatter followed by the D2H copy of its gradient shard, both on the streams of the
  collectives they serve — so they extend those collectives' time and overlap compute as the
  collectives do. The unsharded working copy stays on the GPU while the unit runs (the
  ZeRO-3 gathered buffers the model already counts).

Not modelled: activation offload (``save_on_cpu`` / checkpoint offload), NVMe offload
(ZeRO-Infinity), DeepSpeed's per-micro-batch CPU gradient accumulation under
``gradient_accumulation_steps`` > 1 with ZeRO-1/2 (``async_accumulate_grad_in_cpu_via_gpu``,
treated as hidden beside the backward as the reductions it follows), several GPUs sharing one
PCIe switch (the bandwidths are one GPU copying alone), and a host-memory capacity check (no
system file states host memory: the host bytes per node are reported in ``extra``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stage_core.errors import ConfigError
from stage_core.lower.memory import shard_factors
from stage_core.lower.optimizer_kinds import optimizer_step_bytes

if TYPE_CHECKING:
    from stage_core.lower.program import Workload
    from stage_explore.analytical.parts import Point
    from stage_explore.system.model import System

#: Each option and the framework flag it stands for.
OFFLOAD_FLAGS: dict[str, str] = {
    "offload_optimizer": "DeepSpeed offload_optimizer.device=cpu / FSDP1 CPUOffload",
    "offload_params": "DeepSpeed offload_param.device=cpu / FSDP1 CPUOffload",
    "cpu_optimizer": "DeepSpeedCPUAdam (deepspeed) / torch.optim on CPU tensors (torch)",
}

#: The CPU optimizers with a cited throughput.
CPU_OPTIMIZERS = ("deepspeed", "torch")

#: Parameters a host's CPU optimizer updates per second, by ``cpu_optimizer``. DeepSpeed
#: PR #735 (deepspeedai/DeepSpeed, "CPU-Adam fix for scalar mode", R. Yazdani Aminabadi,
#: 2021-02-08, https://github.com/deepspeedai/DeepSpeed/pull/735): "it reduces the optimizer
#: time from 56 seconds to 8.2 seconds to an 11.6B parameter GPT2 model" — DeepSpeedCPUAdam
#: 11.6e9 / 8.2 s, torch.optim.Adam 11.6e9 / 56 s, the whole model's parameters on one host (the
#: 5-7x the ZeRO-Offload tutorial and paper state). A memory-bound step: the node's GPUs'
#: optimizer processes share it (:func:`offload_step_s`). Both figures are Adam's; another kind
#: (the profile's ``optimizer``) is charged them scaled by its update's bytes over Adam's
#: (:func:`cpu_step_scale`, s37 optim2).
CPU_OPTIMIZER_PARAMS_PER_S: dict[str, float] = {
    "deepspeed": 11.6e9 / 8.2,
    "torch": 11.6e9 / 56.0,
}

#: Achieved host-to-device and device-to-host copy bandwidth of one GPU (bytes/s), by the
#: prefix of the preset's accelerator name.
HOST_DEVICE_BYTES_PER_S: dict[str, tuple[float, float]] = {
    # PCIe Gen4 x16 (A100 SXM4; A800 the same board). H2D: nvbandwidth v0.8
    # host_to_device_memcpy_sm on an A100-SXM4-40GB, 25.13 GB/s at 512 MiB and 1 GiB buffers
    # (NVIDIA/nvbandwidth#42). D2H: ~25 GB/s on A100 (device 20b2) in NVIDIA/nvbandwidth#53;
    # "the peak x16 PCIe Gen4 is 25GBps ... it is measured peak" (ZaidQureshi/bam#54).
    "A100-SXM4": (25.13e9, 25.0e9),
    "A800-SXM4": (25.13e9, 25.0e9),
    # PCIe Gen5 x16 (Hopper SXM). nvbandwidth on an H100 cluster: host_to_device_memcpy_sm
    # 35.2 GB/s, device_to_host_memcpy_sm 52.8 GB/s (NVIDIA/nvbandwidth#24; "similar results
    # with H20 and H800" in the same thread).
    "H100": (35.2e9, 52.8e9),
    "H800-SXM5": (35.2e9, 52.8e9),
}

#: Bytes of an fp32 element: DeepSpeed's CPU gradient partition.
FP32_BYTES = 4


@dataclass(frozen=True, kw_only=True)
class OffloadOptions:
    """The fields of the offload options (module docstring); off by default in every profile
    but ``cpu_optimizer``, the profile's framework's CPU optimizer."""

    offload_optimizer: bool = False
    offload_params: bool = False
    cpu_optimizer: str = "torch"


def offloads(profile: Any) -> bool:
    """Whether ``profile`` offloads anything to host memory."""
    return bool(profile.offload_optimizer or profile.offload_params)


def host_device_bytes_per_s(system: System) -> tuple[float, float]:
    """(H2D, D2H) bytes/s of one GPU of ``system`` (:data:`HOST_DEVICE_BYTES_PER_S`); a
    one-line error for an accelerator without a cited figure."""
    name = system.accelerator.name
    for prefix, rates in HOST_DEVICE_BYTES_PER_S.items():
        if name.startswith(prefix):
            return rates
    known = ", ".join(HOST_DEVICE_BYTES_PER_S)
    raise ConfigError(
        f"CPU offload: no cited host-device bandwidth for accelerator {name!r} "
        f"(expected an accelerator named {known}…)"
    )


def check_offload(profile: Any, workload: Workload, system: System) -> None:
    """One-line errors for the combinations the model does not cover (module docstring)."""
    if not offloads(profile):
        return
    zero = workload.parallel.zero
    if profile.offload_params and zero < 3:
        raise ConfigError(
            f"offload_params needs ZeRO-3 / FSDP full sharding (zero 3), but got zero {zero}"
        )
    if profile.offload_params and not profile.offload_optimizer:
        raise ConfigError(
            "offload_params without offload_optimizer is not modelled (expected both: FSDP1 "
            "CPUOffload(offload_params=True) steps the optimizer on the CPU)"
        )
    if profile.offload_params and profile.zero_hpz_partition_size > 1:
        raise ConfigError(
            "offload_params with ZeRO++ hpZ (zero_hpz_partition_size "
            f"{profile.zero_hpz_partition_size}) is not modelled (expected one of them)"
        )
    sgd = profile.optimizer.startswith("sgd")
    if profile.offload_optimizer and profile.cpu_optimizer == "deepspeed" and sgd:
        raise ConfigError(
            f"offload_optimizer with optimizer {profile.optimizer!r} needs cpu_optimizer "
            "'torch' (DeepSpeed's CPU optimizers are Adam, Adagrad and Lion; a torch.optim.SGD "
            "steps on the CPU with zero_force_ds_cpu_optimizer false), but got 'deepspeed'"
        )
    if profile.offload_optimizer and zero < 1:
        raise ConfigError(
            f"offload_optimizer needs ZeRO >= 1 (DeepSpeed ZeRO-Offload), but got zero {zero}"
        )
    host_device_bytes_per_s(system)


def _cpu_grad_bytes(profile: Any, workload: Workload) -> int:
    """Bytes per element of the gradient the CPU holds: fp32 under DeepSpeed (its fp32
    gradient partition), the workload's gradient under torch (FSDP1's ``_cpu_grad``)."""
    return FP32_BYTES if profile.cpu_optimizer == "deepspeed" else workload.grad_bytes


def _shard_bytes(profile: Any, workload: Workload) -> int:
    """Bytes per element of the parameter shard the CPU holds and copies in before a gather:
    fp32 under ``fsdp_fp32_shards`` (FSDP1 ``MixedPrecision`` keeps the flat parameter in fp32;
    ``_use_low_precision_shard`` copies it to the GPU, then casts it), else the workload's
    16-bit weights (DeepSpeed's ``ds_tensor``)."""
    fp32 = profile.fsdp_fp32_shards and not profile.bf16_model_states
    return FP32_BYTES if fp32 else workload.weight_bytes


def offload_states(
    profile: Any, workload: Workload, block: Any, weights: int, grads: int, optimizer: int
) -> tuple[int, int, int, int]:
    """(weights, grads, optimizer) one rank's GPU keeps of ``block`` and the bytes its host
    holds for them. ``offload_optimizer``: the optimizer state leaves; the gradient too under
    ZeRO ≥ 2 (DeepSpeed frees it once copied; FSDP1's lives on the CPU), while the host holds
    the gradient partition (fp32 under DeepSpeed, whose ZeRO-1 also keeps the GPU gradient
    until the boundary's reduction). ``offload_params``: the ZeRO-3 shard leaves (the gathered
    working copy stays, counted with the ZeRO-3 buffers)."""
    if not offloads(profile):
        return weights, grads, optimizer, 0
    zero = workload.parallel.zero
    shards = shard_factors(workload, block)
    grad_bytes = _cpu_grad_bytes(profile, workload)
    host = 0
    if profile.offload_optimizer:
        host += optimizer + sum(w.elements * grad_bytes // shards[w.expert] for w in block.weights)
        optimizer = 0
        if zero >= 2:
            grads = 0
    if profile.offload_params:
        host += weights
        weights = 0
    return weights, grads, optimizer, host


def shard_transfer_s(profile: Any, point: Point, kind: str) -> tuple[float, float]:
    """Seconds added to one ZeRO-3 gather of ``point``'s block ``kind`` (the H2D copy of its
    parameter shard under ``offload_params``) and to one reduce-scatter (the D2H copy of its
    gradient shard under ``offload_optimizer``), each on the stream of the collective it serves
    (module docstring); (0, 0) without offload or below ZeRO-3 (no gathers nor scatters per
    block)."""
    workload, block, system = point.workload, point.blocks[kind], point.system
    if not offloads(profile) or workload.parallel.zero < 3:
        return 0.0, 0.0
    h2d, d2h = host_device_bytes_per_s(system)
    shards = shard_factors(workload, block)
    elements = sum(w.elements // shards[w.expert] for w in block.weights)
    gather = elements * _shard_bytes(profile, workload) / h2d if profile.offload_params else 0.0
    scatter = elements * _cpu_grad_bytes(profile, workload) / d2h
    return gather, (scatter if profile.offload_optimizer else 0.0)


def cpu_step_scale(profile: Any) -> float:
    """The CPU step of the profile's optimizer kind over Adam's, both memory-bound: the bytes
    its update reads and writes per parameter over Adam's with the same master
    (:func:`~stage_core.lower.optimizer_kinds.optimizer_step_bytes`; no master under
    ``bf16_model_states``): 1 for Adam, 14/30 for SGD with an fp32 master."""
    master = not profile.bf16_model_states
    _, read, written = optimizer_step_bytes(profile.optimizer, master)
    _, adam_read, adam_written = optimizer_step_bytes("adam", master)
    return (read + written) / (adam_read + adam_written)


def offload_step_s(profile: Any, workload: Workload, system: System, params: int) -> float:
    """The optimizer step of a rank updating ``params`` under ``offload_optimizer``: the CPU
    step at the host's throughput shared by the node's GPUs (one optimizer process each,
    :data:`CPU_OPTIMIZER_PARAMS_PER_S`, scaled to the profile's kind by
    :func:`cpu_step_scale`), then — when the parameters stay on the GPU (no
    ``offload_params``) — the blocking H2D copy of the updated 16-bit partition; below ZeRO-3
    without ``overlap_grad_reduce`` also the D2H copy of the fp32 gradient partition after the
    reduction (with it, the copies follow each bucket's reduction beside the backward)."""
    h2d, d2h = host_device_bytes_per_s(system)
    node_gpus = system.network[0].size
    rate = CPU_OPTIMIZER_PARAMS_PER_S[profile.cpu_optimizer]
    seconds = params * node_gpus / rate * cpu_step_scale(profile)
    if not profile.offload_params:
        seconds += params * workload.weight_bytes / h2d
    if workload.parallel.zero < 3 and not profile.overlap_grad_reduce:
        seconds += params * _cpu_grad_bytes(profile, workload) / d2h
    return seconds


def offload_extra(profile: Any, host_bytes: int, system: System) -> dict[str, Any]:
    """``extra`` of an offloading evaluation: the host bytes one rank holds and a node's (the
    rank's times the GPUs of a node: the most any stage's ranks hold, an upper bound under
    pipeline parallelism); nothing without offload."""
    if not offloads(profile):
        return {}
    node = system.network[0].size
    return {
        "host_memory_bytes_per_gpu": host_bytes,
        "host_memory_bytes_per_node": host_bytes * node,
    }
