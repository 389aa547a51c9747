"""PyTorch's fused RMSNorm kernels for torchtitan's ``nn.RMSNorm`` run eagerly (s32 rmsnorm).

torchtitan's models of 2024 wrote RMSNorm op for op (``models/norms.py``: ``x.float()``,
``pow``, ``mean``, ``rsqrt``, two multiplies, ``type_as``; :data:`~stage_explore.analytical.
eager.TORCHTITAN_RMSNORM`, 36 bytes forward, 92 backward per element). pytorch/torchtitan#985
("Switch RMSNorm implementation to native PyTorch version", merged March 2025) replaced it with
``torch.nn.RMSNorm`` for every model (Llama, and DeepSeek-V3 / Qwen3 written after it). What that
module runs depends on the PyTorch release:

- up to 2.8, ``F.rms_norm`` is ATen's ``rms_norm_composite`` (``aten/src/ATen/native/
  layer_norm.cpp``): the same chain of ATen ops in fp32 (upcast, ``pow``, ``mean``, ``rsqrt``,
  a multiply by it and by the weight, the cast back), about as many bytes — the PR's own
  Llama 3 8B run went 5,233 -> 5,173 tokens/s with it. The model keeps torchtitan's op-by-op
  count for these runs (the composite's weight multiply in fp32 moves a few bytes more: not
  counted);
- from 2.9 (released October 2025), ``rms_norm_symint`` dispatches a CUDA input whose weight
  has its dtype to ``aten::_fused_rms_norm`` (pytorch/pytorch#153666, "Fused RMSNorm
  implementation", not landed on 9 Jul 2025 — pytorch/pytorch#157345: "This will be solved by
  #153666 when it lands" — and in the nightlies by August 2025, after the 2.8 branch), whose
  autograd formula is ``_fused_rms_norm_backward`` (``tools/autograd/derivatives.yaml``) —
  fp16, bf16 and fp32, on CUDA (and ROCm, hipified); another device or a weight of another
  dtype falls back to the composite. FSDP2's ``MixedPrecisionPolicy(param_dtype=bfloat16)``
  gathers the norm's weight in bf16, the activations' dtype, so torchtitan's runs take it.

The fused kernels are ``layer_norm_kernel.cu``'s row kernels without the mean: forward one
block per row reads the row for its sum of squares and again to normalise and scale, writing
``y`` (6 bytes per element of a 16-bit row: :data:`PYTORCH_FUSED_RMSNORM`); backward one block
per row reads the gradient and ``x`` for the row's dot product and again to write ``dx`` (10),
and a column reduction reads both once more for the weight's gradient (4): 14 bytes, where the
op-by-op chain moves 92. These are the bytes Inductor's looped RMSNorm moves too
(:func:`~stage_explore.analytical.eager_compiled.inductor_rmsnorm`; the PR measured its forward
"slightly faster vs inductor compile"); timed, like every eager-table op, at the accelerator's
``kernels.eager_memory`` fraction. A compiled torchtitan block's norms are Inductor's whatever
the module (``_fused_rms_norm`` is decomposed by Inductor like the composite): only the final
norm, outside the compiled blocks, runs the fused kernel there.

The profile option ``fused_rmsnorm`` (off in the torchtitan profile, its code of December
2024) selects it; the torchtitan reader sets it for a run dated from PyTorch 2.9's release
(``TORCHTITAN_ERAS``; torchtitan's own CI and install instructions take the PyTorch nightly).
"""

from __future__ import annotations

from stage_core.models.spec import ModelSpec, Norm
from stage_explore.analytical.eager import (
    BF16,
    TORCHTITAN_RMSNORM,
    EagerModule,
    Kernel,
    module_op_bytes,
)

#: ATen's fused RMSNorm on a 16-bit row (module docstring), per element of the output.
PYTORCH_FUSED_RMSNORM = EagerModule(
    name="rmsnorm-fused",
    source="torch.nn.RMSNorm -> aten::_fused_rms_norm / _fused_rms_norm_backward "
    "(pytorch/pytorch#153666, PyTorch 2.9)",
    forward=(
        Kernel("_fused_rms_norm: the row's sum of squares", BF16, 0),
        Kernel("_fused_rms_norm: x * rstd * weight written", BF16, BF16),
    ),
    backward=(
        Kernel("_fused_rms_norm_backward dx: the row's sum of dy * weight * x", 2 * BF16, 0),
        Kernel("_fused_rms_norm_backward dx: written from dy, x, rstd", 2 * BF16, BF16),
        Kernel("_fused_rms_norm_backward dweight: column sums of dy * x * rstd", 2 * BF16, 0),
    ),
    compiled_bytes=TORCHTITAN_RMSNORM.compiled_bytes,
)

#: The generator's norm ops torchtitan's ``nn.RMSNorm`` modules run as (``eager._NORM_OPS``):
#: the blocks' two, the final one, and Qwen3's query / key norms.
_BLOCK_NORMS = ("ln1", "ln2", "q.norm", "k.norm")
_HEAD_NORM = "ln_f"


def fused_rmsnorm_op_bytes(model: ModelSpec, eager_modules: str, compiled: bool) -> dict[str, int]:
    """Bytes per element of each norm op (and its ``.backward``) that runs PyTorch's fused
    RMSNorm kernels under the profile option ``fused_rmsnorm`` (module docstring): every norm
    of an eager torchtitan model, only the final norm of a compiled one (its blocks are
    compiled alone); empty for another module table or a LayerNorm model."""
    if eager_modules != "torchtitan" or model.norm is not Norm.RMSNORM:
        return {}
    names = (_HEAD_NORM,) if compiled else (*_BLOCK_NORMS, _HEAD_NORM)
    return module_op_bytes([(names, PYTORCH_FUSED_RMSNORM)])
