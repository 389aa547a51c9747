"""The roles of a block's GEMMs under a mixed-precision FP8 recipe: which einsums are a linear
layer's forward (``fprop``), input-gradient (``dgrad``) or weight-gradient (``wgrad``) GEMM
(:func:`gemm_role`, :func:`is_linear`), which of them an FP8 recipe quantizes (:func:`quantized`:
not the MoE router's), how many FP8 GEMMs of a phase cast the same 16-bit operand
(:func:`cast_shares`), the block-scaled recipes (:data:`BLOCK_SCALED`) and those whose row- and
column-wise copies are scaled apart (:data:`SCALED_APART`), the check that an accelerator has the
recipe's tensor cores (:func:`check_fp8_recipe`, :func:`check_nvfp4`) and that the framework runs
the recipe (:func:`check_fp8_framework`)
and what of a recipe enters the memo keys (:func:`fp8_key`).
:class:`~stage_explore.analytical.kernels.KernelTimer` times the kernels these roles select
(its module docstring, "Precision")."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.lower.fp8 import NON_FP8_WEIGHTS
from stage_explore.analytical.fp8_casts import fp8_cast_elements
from stage_explore.system.accelerator import Accelerator


def is_linear(instr: Instr, weights: Collection[str]) -> bool:
    """An einsum with a weight operand (forward, input gradient) or a weight-gradient result."""
    return gemm_role(instr, weights) is not None


def gemm_role(instr: Instr, weights: Collection[str]) -> str | None:
    """``fprop``, ``dgrad`` or ``wgrad`` for a linear layer's GEMM, None for any other kernel."""
    if instr.kind != "einsum":
        return None
    if any(name in weights for name, _ in instr.inputs):
        return "dgrad" if instr.phase == "bwd" else "fprop"
    if any(name.startswith("d.") and name[2:] in weights for name, _ in instr.outputs):
        return "wgrad"
    return None


def quantized(instr: Instr, weights: Collection[str]) -> bool:
    """Whether an FP8 recipe runs linear GEMM ``instr`` in FP8: its weight (an operand, or the
    weight gradient it writes) is not one of
    :data:`~stage_core.lower.fp8.NON_FP8_WEIGHTS` — the MoE router, a ``torch`` linear outside
    Transformer Engine's ``fp8_autocast`` (Megatron-Core ``Router.gating`` calls
    ``router_gating_linear`` on a plain ``torch.nn.Parameter`` in the input's or
    ``moe_router_dtype``'s 16/32 bits, megatron/core/transformer/moe/router.py, NVIDIA/Megatron-LM
    005742ff; torchtitan's float8 and MX recipes list ``router.gate`` in ``filter_fqns``), timed
    as a 16-bit GEMM without casts, as the memory model keeps its input 16-bit."""
    names = [n for n, _ in instr.inputs if n in weights]
    names += [n[2:] for n, _ in instr.outputs if n.startswith("d.") and n[2:] in weights]
    return bool(names) and not any(n in NON_FP8_WEIGHTS for n in names)


#: Recipes whose FP8 (FP4) data is scaled in blocks: their GEMMs are block-scaled MMAs.
BLOCK_SCALED = frozenset({"blockwise", "mxfp8", "nvfp4"})
#: Recipes whose row-wise and column-wise FP8 (FP4) copies are scaled differently on every GPU,
#: so that each is cast from the 16-bit tensor: the block-scaled ones and ``rowwise`` (torchao
#: scales the weight-gradient GEMM's operands along the other axis, ``axiswise_dim`` 0, in the
#: backward: ``matmul_with_hp_or_float8_args``, torchao/float8/float8_linear.py, pytorch/ao
#: 7ca1bfbe). Nor can FSDP2 gather them as FP8 (``enable_fsdp_float8_all_gather only supports
#: tensorwise scaling granularity``, torchao/float8/config.py c6c388b5).
SCALED_APART = BLOCK_SCALED | {"rowwise"}
#: The recipes only torchao's Float8 training runs (Transformer Engine's recipes,
#: transformer_engine/common/recipe/__init__.py — DelayedScaling, Float8CurrentScaling,
#: Float8BlockScaling 1x128 / 128x128, MXFP8BlockScaling, NVFP4BlockScaling — scale no rows).
TORCHAO_ONLY_RECIPES = frozenset({"rowwise"})


def check_fp8_recipe(accelerator: Accelerator, recipe: str) -> None:
    """A one-line :class:`ConfigError` when ``recipe`` needs tensor cores ``accelerator`` lacks."""
    if recipe == "mxfp8" and "mxfp8" not in accelerator.peak_flops_per_s:
        raise ConfigError(
            f"`fp8_recipe` 'mxfp8' needs MXFP8 tensor cores (Blackwell), but {accelerator.name} "
            "has none: use 'delayed', 'tensorwise' or 'blockwise'"
        )


def check_fp8_framework(framework: str, torchao_float8: bool, recipe: str) -> None:
    """A one-line :class:`ConfigError` when ``recipe`` is torchao's row-wise scaling but the
    framework's FP8 linear layers are not torchao's ``Float8Linear`` (``torchao_float8``: the
    profile's ``fp8_weight_cast_per_use``, torchtitan's): Transformer Engine, which Megatron-Core,
    NeMo and the other profiles run, has no row-wise recipe."""
    if recipe in TORCHAO_ONLY_RECIPES and not torchao_float8:
        raise ConfigError(
            f"`fp8_recipe` {recipe!r} is torchao Float8's row-wise scaling, but framework "
            f"{framework!r} runs FP8 through Transformer Engine, which has no row-wise recipe: "
            "use framework 'torchtitan', or fp8_recipe 'tensorwise', 'delayed' or 'blockwise'"
        )


def check_nvfp4(system: str, accelerator: Accelerator) -> None:
    """A one-line :class:`ConfigError` unless ``accelerator`` (of system ``system``) states an
    NVFP4 peak and a sustained NVFP4 GEMM fraction grounded in a measurement: no FP4 rate is
    made up from another dtype's (a user system file may set both)."""
    kernels = accelerator.kernels
    fractions = kernels.gemm_efficiency if kernels else {}
    missing = [
        key
        for key, table in (
            ("accelerator.peak_flops_per_s.nvfp4", accelerator.peak_flops_per_s),
            ("accelerator.kernels.gemm_efficiency.nvfp4", fractions),
        )
        if "nvfp4" not in table
    ]
    if missing:
        raise ConfigError(
            f"precision 'fp4' (nvfp4) on system {system!r} needs a grounded NVFP4 GEMM rate, but "
            f"it has no `{'` or `'.join(missing)}` (no measured NVFP4 GEMM figure for this part); "
            "set it in a system file or use bf16 / fp8"
        )


def cast_shares(
    instrs: Iterable[Instr], weights: Collection[str], gemms: Collection[str]
) -> dict[tuple[str, str], int]:
    """How many FP8 linear GEMMs of each phase cast the same 16-bit operand (q, k and v read
    one normed input), so that one cast is charged once."""
    shares: dict[tuple[str, str], int] = {}
    for instr in instrs:
        role = gemm_role(instr, weights)
        if role is None or role not in gemms or not quantized(instr, weights):
            continue
        for name, _, _ in fp8_cast_elements(instr, role, weights, gemms):
            shares[instr.phase, name] = shares.get((instr.phase, name), 0) + 1
    return shares


def fp8_key(recipe: str, gemms: tuple[str, ...], dtype: str) -> tuple[str, tuple[str, ...]] | None:
    """What of an FP8 recipe changes a block's timing and states (memo keys): None unless FP8."""
    return (recipe, gemms) if dtype == "fp8" else None
