"""NeMo AutoModel's eager expert biases: the kernels ``GroupedExpertsDeepEP._apply_bias`` runs.

AutoModel's DeepEP experts (``nemo_automodel/components/moe/layers.py``,
``GroupedExpertsDeepEP.forward``) run the two grouped GEMMs with ``grouped_gemm``'s ``ops.gmm``,
which take no bias, and add a biased model's expert biases (GPT-OSS: ``gate_up_proj_bias``,
``down_proj_bias``) in eager PyTorch with ``_apply_bias``::

    torch.cat([t + b for t, b in zip(torch.split(value.view(-1, H), tokens_per_expert.tolist()),
                                     bias)]).view(shape).to(value.dtype)

and, for the down projection, ``t + b * p`` with ``p`` the tokens' routing probabilities,
split the same way. The probabilities come out of DeepEP's dispatch in fp32 ("DeepEP only
supports float32 probs": the dispatcher casts ``token_probs.float()`` before
``buffer.dispatch``, ``components/moe/megatron/token_dispatcher.py``), so ``b * p`` and the sum
are fp32 tensors of the output's size, concatenated in fp32 and cast back to bf16. The
generator emits each bias add as one element-wise op reading and writing its tensor once (4
bytes per element); here every kernel is counted, in bytes per element of the biased output
(``B`` 16-bit, ``F`` fp32):

- gate/up bias (no probabilities) — forward ``t + b`` (B in, B out), ``torch.cat`` (B, B);
  ``.to(value.dtype)`` of a bf16 tensor is no kernel. Backward: ``AddBackward0`` hands the
  gradient to ``t`` unchanged and reduces it to the bias (``sum_to_size``: B read);
  ``CatBackward0`` narrows (views); ``SplitWithSizesBackward0`` concatenates the per-expert
  gradients back into one tensor (B, B).
- down bias with the fp32 probabilities — forward ``b * p`` (F written), ``t + (b * p)`` (B + F
  in, F out), ``torch.cat`` (F, F), ``.to(bf16)`` (F, B). Backward: ``ToCopyBackward0`` casts the
  gradient up (B, F); ``AddBackward0``'s gradient of the bf16 ``t`` is cast down by the engine
  (F, B) and concatenated by ``SplitWithSizesBackward0`` (B, B); ``MulBackward0``'s bias
  gradient ``grad * p`` (F, F) reduced to the bias (F read); when the probabilities carry a
  gradient (a trained router) also ``grad * b`` (F, F) reduced to ``p`` (F read). Under
  ``FakeBalancedGate`` (``weights = torch.ones(...) / k``) they carry none.

Its FlexAttention path (``attn: flex``, the GPT-OSS benchmark configs) runs outside the kernel
(``components/attention/utils.py``, ``components/attention/flex_attention.py``): the query, key
and value transposed to ``[B, H, S, D]`` and made contiguous (a copy each: B, B), the output
transposed back and made contiguous (B, B); with attention sinks (``sink_weights``) the kernel
returns its log-sum-exp and the output is rescaled, ``out * sigmoid(lse - w)`` — a bf16 output
times an fp32 per-row factor is an fp32 tensor (B in, F out) — and cast back ``.to(q.dtype)``
(F, B). Backward of the rescale: ``ToCopyBackward0`` (B, F); ``MulBackward0``'s output gradient
``grad * scale`` (F, F) cast to the bf16 output by the engine (F, B), and the factor's gradient
``grad * out`` (F + B, F) reduced over the head dim (F read); the per-row ``sigmoid`` and
``lse - w`` are a head dim's share of that and not counted. The copies' backwards
(``CloneBackward0``, transposes) pass the gradient through.

Backward formulas: PyTorch ``tools/autograd/derivatives.yaml`` (``add``, ``mul``, ``cat``,
``split_with_sizes``, ``_to_copy``) and the engine's cast of a gradient to its input's dtype
(``validate_outputs``). Without DeepEP AutoModel's ``GroupedExperts`` adds the biases inside its
``torch.compile``'d activation (``swiglu`` / ``quick_geglu``): the generator's count, no table.
"""

from __future__ import annotations

from stage_core.models.spec import ModelSpec
from stage_explore.analytical.eager import BF16, FP32, EagerModule, Kernel, module_op_bytes

AUTOMODEL_EXPERT_BIAS = EagerModule(
    name="expert-bias",
    source="nemo_automodel/components/moe/layers.py GroupedExpertsDeepEP._apply_bias (no probs)",
    forward=(
        Kernel("t + b per expert", BF16, BF16),
        Kernel("torch.cat", BF16, BF16),
    ),
    backward=(
        Kernel("AddBackward0: grad.sum_to_size(b)", BF16, 0),
        Kernel("SplitWithSizesBackward0: torch.cat of the experts' gradients", BF16, BF16),
    ),
    compiled_bytes=(BF16 + BF16, BF16 + BF16),
)


def automodel_expert_bias_probs(trained_router: bool) -> EagerModule:
    """``_apply_bias`` of the down projection, ``t + b * p`` with DeepEP's fp32 routing
    probabilities ``p`` (module docstring); ``trained_router``: ``p`` carries a gradient."""
    router = (
        (
            Kernel("MulBackward0 (p): grad * b", FP32, FP32, per_expert=True),
            Kernel("MulBackward0 (p): .sum_to_size(p)", FP32, 0, per_expert=True),
        )
        if trained_router
        else ()
    )
    return EagerModule(
        name="expert-bias-probs",
        source="nemo_automodel/components/moe/layers.py GroupedExpertsDeepEP._apply_bias (probs)",
        forward=(
            Kernel("b * p: bf16 bias times fp32 probabilities", 0, FP32, per_expert=True),
            Kernel("t + (b * p): bf16 + fp32 -> fp32", BF16 + FP32, FP32, per_expert=True),
            Kernel("torch.cat (fp32)", FP32, FP32),
            Kernel(".to(value.dtype)", FP32, BF16),
        ),
        backward=(
            Kernel("ToCopyBackward0: grad.to(fp32)", BF16, FP32),
            Kernel("validate_outputs: t's fp32 gradient cast to bf16", FP32, BF16, per_expert=True),
            Kernel("SplitWithSizesBackward0: torch.cat of the experts' gradients", BF16, BF16),
            Kernel("MulBackward0 (b): grad * p", FP32, FP32, per_expert=True),
            Kernel("MulBackward0 (b): .sum_to_size(b)", FP32, 0, per_expert=True),
            *router,
        ),
        compiled_bytes=(BF16 + BF16, BF16 + BF16),
    )


#: The generator's expert bias adds (``stage_core/blocks.py`` ``_moe``: ``_linear`` of a biased
#: model) AutoModel adds with ``_apply_bias`` without the probabilities ...
_BIAS_OPS = ("experts.gate", "experts.up", "experts.fc1")
#: ... and with them (the down projection).
_PROBS_BIAS_OPS = ("experts.fc2",)


def automodel_op_bytes(model: ModelSpec, deepep: bool, trained_router: bool) -> dict[str, int]:
    """Bytes per element of the generator's expert bias adds (and their ``.backward``) under
    AutoModel's DeepEP experts; empty for a model without experts or biases, or without DeepEP
    (module docstring)."""
    if not (deepep and model.bias and model.num_experts):
        return {}
    return module_op_bytes(
        (
            (_BIAS_OPS, AUTOMODEL_EXPERT_BIAS),
            (_PROBS_BIAS_OPS, automodel_expert_bias_probs(trained_router)),
        )
    )


#: FlexAttention's layout copies, per element of each of q, k, v and of the output (forward).
FLEX_LAYOUT_COPY = BF16 + BF16
AUTOMODEL_FLEX_SINKS = EagerModule(
    name="flex-sinks",
    source="nemo_automodel/components/attention/flex_attention.py FlexAttention.forward (sinks)",
    forward=(
        Kernel("out * sigmoid(lse - w): bf16 times an fp32 per-row factor", BF16, FP32),
        Kernel("out.to(q.dtype)", FP32, BF16),
    ),
    backward=(
        Kernel("ToCopyBackward0: grad.to(fp32)", BF16, FP32),
        Kernel("MulBackward0 (out): grad * scale", FP32, FP32),
        Kernel("validate_outputs: the output's fp32 gradient cast to bf16", FP32, BF16),
        Kernel("MulBackward0 (scale): grad * out", FP32 + BF16, FP32),
        Kernel("MulBackward0 (scale): .sum_to_size(scale) over the head dim", FP32, 0),
    ),
    compiled_bytes=(0, 0),
)


def automodel_attention_eager(
    model: ModelSpec, attention_kernel: str | None
) -> tuple[int, int, int]:
    """Bytes per element (q/k/v copied in, output, output gradient) AutoModel's FlexAttention
    path moves outside the kernel (module docstring; the argument of
    :func:`~stage_explore.analytical.eager_attention.attention_eager_bytes`); zeros for another
    kernel."""
    if attention_kernel != "flex":
        return (0, 0, 0)
    if not model.attention_sinks:
        return (FLEX_LAYOUT_COPY, FLEX_LAYOUT_COPY, 0)
    return (
        FLEX_LAYOUT_COPY,
        FLEX_LAYOUT_COPY + AUTOMODEL_FLEX_SINKS.bytes_per_element(backward=False),
        AUTOMODEL_FLEX_SINKS.bytes_per_element(backward=True),
    )
