"""Megatron's ``sbhd`` layout copies around the flash-attn package (``attention_kernel fa2`` on
the megatron-core profile): the bytes, counted against closed forms written out here from the
Megatron-LM / Transformer Engine code, where they apply, and what they change in an
evaluation."""

from __future__ import annotations

from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.eager_attention import (
    AttentionEager,
    attention_eager_bytes,
    eager_attention,
)
from stage_explore.system import load_system

B = 2  # bytes of a bf16 element
H100 = load_system("h100-80gb")
# q, k, v: rearrange / transpose(0, 1).contiguous() (read, write each); the output's transpose
# back made contiguous (read, write); backward: the output gradient reshaped from a transposed
# view to [(b s), h, d] (read, write)
COPY = B + B
LLAMA = get_flavor("llama2-7b").with_overrides(layers=2, seq_len=1024)


def test_the_flash_package_path_copies_q_k_v_the_output_and_its_gradient() -> None:
    assert eager_attention(LLAMA, "megatron-core", "fa2") == AttentionEager(COPY, COPY, COPY)
    # cuDNN's fused attention reads the sbhd strides; the profile's default kernel: nothing
    assert eager_attention(LLAMA, "megatron-core", "cudnn") == AttentionEager()
    assert eager_attention(LLAMA, "megatron-core", None) == AttentionEager()
    # other frameworks' model code hands flash-attn bshd tensors: not this module's
    assert eager_attention(LLAMA, "generator", "fa2") == AttentionEager()
    assert eager_attention(LLAMA, "torchtitan", "fa2") == AttentionEager()


def test_the_bytes_per_attention_instruction() -> None:
    layer = bind_all(make_workload(LLAMA, ParallelConfig(global_batch=1)))["layer"]
    (fwd,) = [i for i in layer.fwd if i.kind == "attention"]
    (bwd,) = [i for i in layer.bwd if i.kind == "attention" and i.name.endswith(".backward")]
    q, k, v = (size // B for _, size in fwd.inputs[:3])
    out = dict(fwd.outputs)[fwd.name] // B
    assert q == k == v == out == LLAMA.seq_len * LLAMA.heads * LLAMA.head_dim
    per_element = eager_attention(LLAMA, "megatron-core", "fa2")
    assert attention_eager_bytes(fwd, per_element) == (q + k + v + out) * COPY
    assert attention_eager_bytes(bwd, per_element) == out * COPY


def _step(model: ModelSpec, **options: object) -> float:
    backend = AnalyticalBackend(framework="megatron-core", overrides=options)
    return backend.evaluate(model, ParallelConfig(global_batch=8), H100).step_time_s


def test_the_copies_in_an_evaluation() -> None:
    # slower than the same kernel without Megatron's code around it (a backend differing only
    # in the table gives a different result: no stale memo)
    fa2 = {"attention_kernel": "fa2"}
    assert _step(LLAMA, **fa2) > _step(LLAMA, eager_modules="generator", **fa2)
