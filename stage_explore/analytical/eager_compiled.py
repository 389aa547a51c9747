"""What ``torch.compile`` (Inductor) runs for the modules of an eager table, counted from code.

Under ``fused_elementwise`` a torch-native framework's compiled module is not the generator's
one kernel reading its inputs and writing its outputs once at a large kernel's bandwidth: it is
the kernels Inductor generates, moving bytes at about the rate the eager chain of the same
module does on the same GPU. linkedin/Liger-Kernel's paired benchmark times HuggingFace's
``LlamaRMSNorm`` (torchtitan's and FMS' RMSNorm op for op) eager and ``torch.compile``'d on one
board (``benchmark/data/h100_all_benchmark_data.csv``, H100 NVL, and
``a100_all_benchmark_data.csv``, A100 80GB PCIe, the same day and code; 2048 rows × 8192-32768,
bf16). Over forward and backward the compiled module takes 20-26 bytes' worth of the eager
chain's time per element (the chain's 128 bytes at 4.9-6.4 × the compiled time), where the model
charged the generator's 10 bytes at ``efficiency.memory``, a single large kernel's fraction
(1.56 × ``eager_memory`` on H100, 1.47 × on A100): 6-7 bytes' worth, about a third. Counted
from Inductor's code (below) the compiled RMSNorm moves 6 + 14 = 20 bytes; at the eager rate
that is the benchmark's figure within −25 % (forward 3.8-6.2 bytes' worth measured against 6,
backward 16-20 against 14). So the instructions this table names are timed like an eager
table's: their bytes at ``kernels.eager_memory`` (:class:`~stage_explore.analytical.kernels.
KernelTimer`), whose measured fraction carries their launches (no ``memory_kernel_s``). A
looped RMSNorm (Llama's hidden rows) is timed at the bytes' worth the benchmark measures
(:func:`looped_rmsnorm_worth`: 5 forward, 18 backward; s27 compile2) rather than the 6 and 14 its
kernels move: the measured ratios are what the eager / compiled difference is made of.

Inductor's kernels per module, per element of the module's output (``B`` 16-bit):

- RMSNorm (torchtitan ``RMSNorm``, FMS ``LayerNormParameterized``; a row of ``width``
  elements): Inductor keeps a row in registers only for a reduction of at most
  :data:`PERSISTENT_RNUMEL` elements (``should_use_persistent_reduction``, ``threshold =
  {ReductionHint.INNER: 1024}``, torch/_inductor/codegen/triton.py); a wider row (Llama's hidden
  size) is a looped reduction that reads it once for the sum of squares and again to normalise:
  forward 6 bytes (read x twice, write y), 4 in one pass. The backward is two reductions Inductor
  cannot fuse, "the reduction computing dx which reduce across the hidden dimension" and "the
  reduction computing dw/db which reduce across the BxT dimension" with "common input buffers"
  (pytorch/pytorch#165370, Oct 2025, which added the fused form; #168209: "a INNER_RED fused with
  a PW (pointwise) to compute dx; a OUTER_RED computing dw"): dx reads the gradient and x (twice
  when looped) and writes dx, dw reads both once more — 14 bytes looped, 10 in one pass.
- SwiGLU ``silu(w1(x)) * w3(x)``: one pointwise kernel each way, 6 and 10 bytes (the two GEMM
  outputs read, the product written; backward the gradient and both inputs read, two gradients
  written) — the generator's count, at the eager rate.
- A residual add: 6 bytes forward, nothing backward (``AddBackward0`` passes the gradient).
- FMS's real-valued RoPE: one pointwise kernel each way, 4 and 4 bytes. torchtitan's complex
  RoPE and the repeated keys and values SDPA reads run as in eager
  (:func:`~stage_explore.analytical.eager._compiled_op_bytes`).

What torchtitan does not compile stays eager: ``apply_compile`` compiles each transformer block
alone (``torch.compile(transformer_block, fullgraph=True)``, ``parallelize_llama.py``), so the
final norm ``ln_f`` runs torchtitan's eager RMSNorm (36 / 92 bytes); fms-fsdp compiles the whole
model (``model = torch.compile(model)``, graph breaks at FSDP units), ``ln_f`` included.
torchtitan's MoE experts are left out of its compile too; their activation keeps the
generator's count here as before (not re-counted).

Not counted: Inductor fusing a residual add into the next norm's kernel, or the backward's
gradient sums into the norm's ``dx`` kernel (a few bytes fewer each), and the split
reduction's partial sums for ``dw`` (a float per column and block).
"""

from __future__ import annotations

from stage_core.models.spec import Activation, ModelSpec, Norm, Position
from stage_explore.analytical.eager import (
    BF16,
    RESIDUAL_ADD,
    TORCHTITAN_RMSNORM,
    EagerModule,
    Kernel,
    module_op_bytes,
)

#: The widest row Inductor reduces in one pass (a persistent reduction) for an inner reduction:
#: ``should_use_persistent_reduction``'s ``threshold = {ReductionHint.INNER: 1024}`` with
#: ``multi_kernel`` off, its default (torch/_inductor/codegen/triton.py, PyTorch 2.2-2.5).
PERSISTENT_RNUMEL = 1024


def inductor_rmsnorm(width: int) -> EagerModule:
    """Inductor's RMSNorm over rows of ``width`` elements (module docstring): forward one
    reduction kernel, backward the ``dx`` and ``dw`` reductions; a row wider than
    :data:`PERSISTENT_RNUMEL` is read twice by each row reduction."""
    passes = 1 if width <= PERSISTENT_RNUMEL else 2
    return EagerModule(
        name="rmsnorm-inductor",
        source="torch.compile of RMSNorm (torch/_inductor/codegen/triton.py; pytorch#165370)",
        forward=(Kernel("sum of squares, normalise, scale", passes * BF16, BF16),),
        backward=(
            Kernel("dx: row reduction of grad * weight * x, then dx", passes * 2 * BF16, BF16),
            Kernel("dw: reduction of grad * x_hat over the rows", 2 * BF16, 0),
        ),
        compiled_bytes=TORCHTITAN_RMSNORM.compiled_bytes,
    )


INDUCTOR_SWIGLU = EagerModule(
    name="swiglu-inductor",
    source="torch.compile of silu(w1(x)) * w3(x): one pointwise kernel each way",
    forward=(Kernel("silu(a) * b", 2 * BF16, BF16),),
    backward=(Kernel("d(a), d(b) from grad, a, b", 3 * BF16, 2 * BF16),),
    compiled_bytes=(3 * BF16, 5 * BF16),
)

INDUCTOR_ROPE_REAL = EagerModule(
    name="rope-real-inductor",
    source="torch.compile of fms RotaryEmbedding (real-valued): one pointwise kernel each way",
    forward=(Kernel("q * cos / sin, summed pairs", BF16, BF16),),
    backward=(Kernel("its transpose", BF16, BF16),),
    compiled_bytes=(2 * BF16, 2 * BF16),
)

#: linkedin/Liger-Kernel's paired RMSNorm runs (benchmark/data, ``rms_norm``, 2048 rows × H 8192 /
#: 16384 / 32768, bf16, median ms): (eager forward, compiled forward, eager backward, compiled
#: backward) of HuggingFace's ``LlamaRMSNorm`` (``huggingface``) and of it under ``torch.compile``
#: (``torchcompile``), on an H100 NVL (``h100_all_benchmark_data.csv``, 3534d446, the
#: ``gpu_name`` column of every row "NVIDIA H100 NVL") and an A100 80GB PCIe
#: (``a100_all_benchmark_data.csv``, bdbfeadf), the same day (2025-01-25) and code (Liger 0.5.2).
LIGER_RMSNORM_MS: tuple[tuple[float, float, float, float], ...] = (
    (0.32608, 0.034816, 0.80995, 0.172992),  # H100 NVL, H 8192
    (0.60947, 0.067648, 1.58019, 0.276880),  # H100 NVL, H 16384
    (1.21926, 0.155904, 3.02906, 0.587792),  # H100 NVL, H 32768
    (0.52326, 0.079872, 1.37626, 0.260096),  # A100 PCIe, H 8192
    (0.99226, 0.156672, 2.62451, 0.490496),  # A100 PCIe, H 16384
    (1.93331, 0.331776, 5.11898, 1.119232),  # A100 PCIe, H 32768
)


def looped_rmsnorm_worth(backward: bool) -> int:
    """The bytes per element of the eager chain's rate that Inductor's looped RMSNorm (a row
    wider than :data:`PERSISTENT_RNUMEL`) takes, one direction: the eager chain's bytes
    (``TORCHTITAN_RMSNORM``: 36 forward, 92 backward) over the mean eager / compiled time ratio
    of :data:`LIGER_RMSNORM_MS`, to the nearest byte: forward 36 / 7.49 = 5 (the code counts 6:
    the second read of a row comes partly from L2 — 4.1 bytes' worth on the H100 NVL, 5.8 on
    the A100), backward 92 / 5.13 = 18 (the code counts 14: the ``dx`` row reduction and the
    ``dw`` column reduction over the tokens run below the chain's rate; 17.8 on the H100 NVL,
    18.1 on the A100). Measured on a microbenchmark, not chosen on a validation row."""
    eager, compiled = (2, 3) if backward else (0, 1)
    ratios = [run[eager] / run[compiled] for run in LIGER_RMSNORM_MS]
    chain = TORCHTITAN_RMSNORM.bytes_per_element(backward=backward)
    return round(chain * len(ratios) / sum(ratios))


#: The generator's block-level op names (stage_core/blocks.py) of each compiled module.
_BLOCK_NORMS = ("ln1", "ln2")
_HEAD_NORM = "ln_f"
_QK_NORMS = ("q.norm", "k.norm")
_DENSE_ACTS = ("mlp.act", "shared.act")  # not experts.act: module docstring
_RESIDUALS = ("attn.residual", "y")
_REAL_ROPES = ("q.rope", "k.rope", "q.pe.rope", "k.pe.rope")


def inductor_op_bytes(model: ModelSpec, eager_modules: str) -> dict[str, int]:
    """Bytes per element of each generator op (and its ``<op>.backward``) as the compiled
    module code of ``eager_modules`` (``"torchtitan"`` or ``"fms"``) runs it, to be timed at the
    eager rate (module docstring), a looped RMSNorm at its measured bytes' worth
    (:func:`looped_rmsnorm_worth`); empty for any other table. The caller adds what Inductor
    leaves to ATen (torchtitan's complex RoPE, the repeated keys and values)."""
    if eager_modules not in ("torchtitan", "fms"):
        return {}
    modules: list[tuple[tuple[str, ...], EagerModule]] = [(_RESIDUALS, RESIDUAL_ADD)]
    if model.norm is Norm.RMSNORM:
        compiled_head = eager_modules == "fms"  # torchtitan compiles the blocks alone
        head = inductor_rmsnorm(model.hidden) if compiled_head else TORCHTITAN_RMSNORM
        head_dim = model.head_dim or model.hidden // model.heads
        modules += [
            (_BLOCK_NORMS, inductor_rmsnorm(model.hidden)),
            ((_HEAD_NORM,), head),
            (_QK_NORMS, inductor_rmsnorm(head_dim)),
        ]
    if model.activation is Activation.SWIGLU:
        modules.append((_DENSE_ACTS, INDUCTOR_SWIGLU))
    if model.position is Position.ROTARY and eager_modules == "fms":
        modules.append((_REAL_ROPES, INDUCTOR_ROPE_REAL))
    table = module_op_bytes(modules)
    if model.norm is Norm.RMSNORM and model.hidden > PERSISTENT_RNUMEL:  # looped: as measured
        for name in (*_BLOCK_NORMS, *((_HEAD_NORM,) if eager_modules == "fms" else ())):
            table[name] = looped_rmsnorm_worth(backward=False)
            table[f"{name}.backward"] = looped_rmsnorm_worth(backward=True)
    return table
