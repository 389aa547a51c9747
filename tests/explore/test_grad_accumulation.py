"""Per-micro-batch weight-gradient accumulation (issue #11, the ``grad_accumulation`` framework
option): a memory-bound pass over every weight gradient a rank accumulates, charged once per
micro-batch at the achieved HBM bandwidth — 18 bytes per element under DeepSpeed bf16
(``BF16_Optimizer.update_hp_grads``), 6 under DeepSpeed fp16 (autograd's in-place add) from
the second micro-batch of a step on (``FP16_Optimizer.step`` leaves ``.grad`` None),
``2 + 2·grad_bytes`` for a separate add (Megatron-LM 2021's local DDP hook; Megatron-Core:
only for the weights its fused weight-gradient GEMMs do not cover), none when fused into the
weight-gradient GEMM or left untimed; under ZeRO-2/3 only the rank's partition."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Precision, Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.framework_costs import grad_accumulation_bytes
from stage_explore.analytical.frameworks import FRAMEWORKS, get_framework
from stage_explore.system import load_system

GPT = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
A100 = load_system("a100-80gb")


def _rank_weight_elements(tp: int) -> int:
    """Weights one tp rank holds in closed form: GPT layers with biases (column-parallel QKV
    and fc1 with their biases split, row-parallel proj and fc2 with replicated biases, two
    layer norms), the vocabulary-parallel embedding, learned positions and the final norm."""
    h, layers, s = GPT.hidden, GPT.layers, GPT.seq_len
    vocab = -(-GPT.vocab // (128 * tp)) * 128 * tp  # Megatron's padding
    layer = (3 * h * h + 3 * h + 4 * h * h + 4 * h) // tp + (h * h + 4 * h * h) // tp + 2 * h
    layer += 2 * 2 * h
    return layers * layer + vocab * h // tp + s * h + 2 * h


def _pass_s(elements: int, bytes_per_element: float, micro_batches: int) -> float:
    accelerator = A100.accelerator
    bandwidth = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    return micro_batches * elements * bytes_per_element / bandwidth


@pytest.mark.parametrize(
    ("framework", "mode", "dtype", "grad_bytes", "expected"),
    [
        ("deepspeed", None, "bf16", 4, 2 + 2 * 4 + 2 * 4),  # read bf16, cast to fp32, RMW fp32
        ("deepspeed", None, "bf16", 2, 18),  # BF16_Optimizer's accumulators are fp32 anyway
        ("deepspeed", None, "fp16", 4, 3 * 2 * 3 / 4),  # AccumulateGrad's add, 3 of 4 micro-batches
        ("megatron-lm-2021", None, "fp16", 2, 3 * 2),  # local DDP's main_grad.add_, fp16 buffer
        ("megatron-core", "none", "bf16", 4, 0),  # every weight fused or untimed
        ("megatron-core", None, "bf16", 4, 2 + 2 * 4),  # the hook's add (unfused weights only)
        ("fsdp", None, "bf16", 4, 0),  # AccumulateGrad on the shard: untimed
        ("megatron-lm-2021", "add", "bf16", 4, 2 + 2 * 4),  # main_grad.add_ into fp32
        ("megatron-lm-2021", "add", "fp16", 2, 3 * 2),  # in place into a 16-bit buffer
        # InternEvo: AccumulateGrad into the bf16 .grad, 3 of 4 micro-batches, in any dtype
        ("internevo", None, "bf16", 2, 3 * 2 * 3 / 4),
        ("internevo", None, "fp16", 2, 3 * 2 * 3 / 4),
        ("megatron-lm-2021", "autograd", "bf16", 4, 3 * 2 * 3 / 4),  # the mode, not the profile
    ],
)
def test_bytes_per_element_in_closed_form(
    framework: str, mode: str | None, dtype: str, grad_bytes: int, expected: float
) -> None:
    profile = get_framework(framework)
    if mode is not None:
        profile = profile.with_overrides({"grad_accumulation": mode})
    assert grad_accumulation_bytes(profile, dtype, 2, grad_bytes, 4) == pytest.approx(expected)


def test_deepspeed_bf16_charges_every_micro_batch_the_hp_gradient_pass() -> None:
    tp, dp, micro_batches = 2, 2, 8
    parallel = ParallelConfig(
        tp=tp,
        dp=dp,
        global_batch=dp * micro_batches,
        precision=Precision.BF16,
        recompute=Recompute.FULL,
    )
    charged = AnalyticalBackend(framework="deepspeed").evaluate(GPT, parallel, A100)
    fused = AnalyticalBackend(
        framework="deepspeed", overrides={"grad_accumulation": "none"}
    ).evaluate(GPT, parallel, A100)
    expected = _pass_s(_rank_weight_elements(tp), 18, micro_batches)
    assert charged.breakdown["compute"] - fused.breakdown["compute"] == pytest.approx(expected)
    assert charged.step_time_s - fused.step_time_s == pytest.approx(expected)


def test_zero3_accumulates_only_the_partition() -> None:
    tp, dp, micro_batches = 2, 2, 4
    parallel = ParallelConfig(
        tp=tp, dp=dp, zero=3, global_batch=dp * micro_batches, precision=Precision.BF16
    )
    charged = AnalyticalBackend(framework="deepspeed").evaluate(GPT, parallel, A100)
    fused = AnalyticalBackend(
        framework="deepspeed", overrides={"grad_accumulation": "none"}
    ).evaluate(GPT, parallel, A100)
    expected = _pass_s(_rank_weight_elements(tp) // dp, 18, micro_batches)
    gap = charged.breakdown["compute"] - fused.breakdown["compute"]
    assert gap == pytest.approx(expected, rel=1e-4)  # per-weight integer division


@pytest.mark.parametrize("micro_batches", [1, 2, 8])
def test_fp16_deepspeed_charges_autograds_add_from_the_second_micro_batch(
    micro_batches: int,
) -> None:
    """FP16_Optimizer.step sets every fp16 .grad to None, so the step's first micro-batch's
    AccumulateGrad takes the fresh gradient and only the m − 1 later ones add (6 bytes)."""
    tp, dp = 2, 2
    parallel = ParallelConfig(
        tp=tp, dp=dp, global_batch=dp * micro_batches, precision=Precision.FP16
    )
    charged = AnalyticalBackend(framework="deepspeed").evaluate(GPT, parallel, A100)
    untimed = AnalyticalBackend(
        framework="deepspeed", overrides={"grad_accumulation": "none"}
    ).evaluate(GPT, parallel, A100)
    expected = _pass_s(_rank_weight_elements(tp), 6, micro_batches - 1)
    assert charged.step_time_s - untimed.step_time_s == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("micro_batches", [1, 2, 8])
def test_internevo_charges_autograds_add_from_the_second_micro_batch(micro_batches: int) -> None:
    """InternEvo's HybridZeroOptimizer sets every .grad to None after the step
    (zero_grad(set_to_none=True)), so under bf16 too only the m − 1 later micro-batches add
    (the compute charged; the step hides part of it behind the overlapped gradient all-reduce)."""
    tp, dp = 2, 2
    parallel = ParallelConfig(
        tp=tp, dp=dp, global_batch=dp * micro_batches, precision=Precision.BF16
    )
    charged = AnalyticalBackend(framework="internevo").evaluate(GPT, parallel, A100)
    untimed = AnalyticalBackend(
        framework="internevo", overrides={"grad_accumulation": "none"}
    ).evaluate(GPT, parallel, A100)
    expected = _pass_s(_rank_weight_elements(tp), 6, micro_batches - 1)
    gap = charged.breakdown["compute"] - untimed.breakdown["compute"]
    assert gap == pytest.approx(expected, abs=1e-12)


def test_profiles_name_their_accumulation() -> None:
    assert FRAMEWORKS["deepspeed"].grad_accumulation == "deepspeed"
    assert FRAMEWORKS["megatron-core"].grad_accumulation == "fused-linear"
    assert FRAMEWORKS["fsdp"].grad_accumulation == "none"
    assert FRAMEWORKS["megatron-lm-2021"].grad_accumulation == "add"
    assert FRAMEWORKS["internevo"].grad_accumulation == "autograd"


def test_megatron_core_adds_only_what_its_fused_wgrad_gemms_do_not_cover() -> None:
    """--gradient-accumulation-fusion: the linear layers' GEMMs accumulate into main_grad; the
    DDP hook adds the rest (biases, layer norms, the embedding tables) every micro-batch, 10
    bytes per element (bf16 gradient read, fp32 main_grad read and written)."""
    model = GPT.with_overrides(tied_embeddings=False)
    micro_batches = 4
    parallel = ParallelConfig(global_batch=micro_batches, precision=Precision.BF16)
    hooked = AnalyticalBackend(framework="megatron-core").evaluate(model, parallel, A100)
    fused = AnalyticalBackend(
        framework="megatron-core", overrides={"grad_accumulation": "none"}
    ).evaluate(model, parallel, A100)
    h = model.hidden
    vocab = -(-model.vocab // 128) * 128  # Megatron's padding
    # per layer: the qkv (3h), proj (h), fc1 (4h) and fc2 (h) biases and two layer norms (2 x 2h)
    unfused = model.layers * (3 * h + h + 4 * h + h + 2 * 2 * h)
    unfused += vocab * h + model.seq_len * h + 2 * h  # token and position tables, final norm
    expected = _pass_s(unfused, 2 + 2 * 4, micro_batches)
    assert hooked.step_time_s - fused.step_time_s == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("bad", ["fused", "fp32", "", 1, None])
def test_bad_modes_are_refused_in_one_line(bad: object) -> None:
    with pytest.raises(ConfigError, match="grad_accumulation") as error:
        AnalyticalBackend(framework="deepspeed", overrides={"grad_accumulation": bad})
    assert "\n" not in str(error.value)
