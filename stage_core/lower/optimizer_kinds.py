"""The optimizer's kind (the framework option ``optimizer``, 7 Dec 2026, s37 optim): the state a
rank holds per parameter before ZeRO's sharding (:func:`optimizer_state_bytes`) and the bytes
the fused update step reads and writes per parameter (:func:`optimizer_step_bytes`). In
``stage_core`` (s37 optim2) so that the lowering's optimizer instruction and model-state bytes
(:func:`stage_core.lower.program.make_workload`'s ``optimizer``) follow the same kind as the
analytical backend's costs: one model, every backend.

Kinds (:data:`OPTIMIZERS`) and their moments — per-parameter state tensors besides the master:

===================== ======= ==================================================================
kind                  moments what it is
===================== ======= ==================================================================
``adam``              2 fp32  Adam / AdamW (``exp_avg``, ``exp_avg_sq``), the default
``adam_bf16_moments`` 2 bf16  AdamW with its moments stored in BF16 (DeepSeek-V3 report §3.3,
                              "Low-Precision Optimizer States": "we adopt the BF16 data format
                              instead of FP32 to track the first and second moments in the
                              AdamW optimizer", the master weights staying FP32)
``sgd_momentum``      1       ``torch.optim.SGD(momentum > 0)``: one ``momentum_buffer``
``sgd``               0       ``torch.optim.SGD`` at its default ``momentum=0``: no state
                              (``torch/optim/sgd.py``, pytorch/pytorch 0113c318: ``momentum=0``,
                              a ``momentum_buffer`` = ``torch.zeros_like(p.data)`` only when
                              momentum is not 0)
===================== ======= ==================================================================

The master-weight rule: a mixed-precision run keeps an fp32 master of every parameter (4
bytes: Megatron's ``Float16OptimizerWithFloat16Params``, Apex O2, FSDP's fp32 shard) and its
moments in fp32 (``torch.optim`` keeps a state tensor in its parameter's dtype,
``torch.zeros_like(p)``); a run whose parameters are 16-bit when the optimizer is built
(``bf16_model_states``: AutoModel's bf16 cast; the PyTorch FSDP 1T blog's "All experiments
were run with fp16, including SGD optimizer") keeps no master and its moments in the 16-bit
type. ``adam`` with a master is Megatron's 12 bytes; nothing else changes a default run.

The step (memory-bound, :func:`~stage_explore.analytical.costs.optimizer_step_s`) reads the
master (or the 16-bit parameter without one), the main gradient and each moment, and writes
the master, each moment and the 16-bit weight copy: Adam's 16 read and 14 written
(:data:`ADAM_BYTES_READ_PER_PARAM`), fewer for fewer or narrower
moments. FLOPs per parameter: Adam's 12; SGD's 2 (``p -= lr·g``), 4 with momentum
(``buf = μ·buf + g``).
"""

from __future__ import annotations

from stage_core.errors import ConfigError

#: Adam: FLOPs per parameter of the update, bytes read and written per parameter (fp32 master
#: weight, gradient, two moments read; master, moments and the 16-bit weight written).
ADAM_FLOPS_PER_PARAM = 12
ADAM_BYTES_READ_PER_PARAM = 16
ADAM_BYTES_WRITTEN_PER_PARAM = 14

#: The values of the framework option ``optimizer``.
OPTIMIZERS = ("adam", "adam_bf16_moments", "sgd_momentum", "sgd")
#: Moments (state tensors besides the master) per parameter of each kind.
MOMENTS = {"adam": 2, "adam_bf16_moments": 2, "sgd_momentum": 1, "sgd": 0}
#: FLOPs per parameter of each kind's update (module docstring).
STEP_FLOPS = {"adam": ADAM_FLOPS_PER_PARAM, "adam_bf16_moments": ADAM_FLOPS_PER_PARAM,
              "sgd_momentum": 4, "sgd": 2}  # fmt: skip
#: Bytes of an fp32 master weight, moment or main gradient.
FP32_BYTES = 4
#: Bytes of a 16-bit (bf16 / fp16) parameter, moment or weight copy.
HALF_BYTES = 2


def check_optimizer(kind: str) -> None:
    """A :class:`ConfigError` naming ``kind`` unless it is one of :data:`OPTIMIZERS`."""
    if kind not in OPTIMIZERS:
        raise ConfigError(f"`optimizer` must be one of {', '.join(OPTIMIZERS)}, but got {kind!r}")


def moment_bytes(kind: str, master: bool) -> int:
    """Bytes of one moment element: bf16 for ``adam_bf16_moments`` or without a master (the
    moments take the 16-bit parameter's dtype), else fp32."""
    return FP32_BYTES if master and kind != "adam_bf16_moments" else HALF_BYTES


def optimizer_state_bytes(kind: str, master: bool) -> int:
    """The state per parameter before sharding: the fp32 master when ``master`` and the kind's
    moments (module docstring); ``adam`` with a master is 12, without one 4."""
    check_optimizer(kind)
    return (FP32_BYTES if master else 0) + MOMENTS[kind] * moment_bytes(kind, master)


def optimizer_step_bytes(kind: str, master: bool = True) -> tuple[int, int, int]:
    """``(flops, read, written)`` per parameter of the fused update: the master (or the 16-bit
    parameter) and the fp32 main gradient read, each moment read and written, the master and
    its 16-bit weight copy written (module docstring); ``adam`` with a master: (12, 16, 14)."""
    check_optimizer(kind)
    moments = MOMENTS[kind] * moment_bytes(kind, master)
    weight = FP32_BYTES if master else HALF_BYTES
    copy = HALF_BYTES if master else 0
    read = weight + FP32_BYTES + moments
    return STEP_FLOPS[kind], read, weight + moments + copy
