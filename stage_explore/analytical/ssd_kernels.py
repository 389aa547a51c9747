"""Mamba-2's SSD scan timed as the kernels mamba_ssm launches: :func:`ssd_kernels`.

The generator's scan op (:class:`stage_core.ops_ssm.SSDScan`) counts the SSD algorithm's FLOPs
and a rough figure for its FP32 intermediates; the training step runs mamba_ssm's Triton kernels.
**What runs.** Megatron-Core's ``MambaMixer`` trains through the memory-efficient path
(``use_mem_eff_path``, the default): ``mamba_split_conv1d_scan_combined(zxBCdt, conv weight,
conv bias, dt_bias, A, D, chunk_size, headdim, ngroups, norm_before_gate)`` with no
``rmsnorm_weight`` — so the ``silu(z)`` gate is applied inside ``_chunk_scan_fwd`` — then
``self.norm(y)`` (``RMSNormGated`` without ``z``, one Triton kernel each way, timed as the
generator's group norm) and ``out_proj`` (NVIDIA/Megatron-LM ``megatron/core/ssm/
mamba_mixer.py``, the mid-2025 stored copy). The NeMo 25.04 container (NeMo 2.3.0) builds
mamba_ssm at 2e16fc30 (``reinstall.sh``, NVIDIA/NeMo 0050c414: ``MAMBA_TAG``, causal-conv1d
v1.2.2.post1); that commit is not stored, the kernel list is read at state-spaces/mamba
d757aef1 (``mamba_ssm/ops/triton/ssd_combined.py``: ``MambaSplitConv1dScanCombinedFn``,
``_mamba_chunk_scan_combined_fwd`` / ``_bwd``; ``ssd_chunk_state.py``, ``ssd_chunk_scan.py``,
``ssd_state_passing.py``, ``ssd_bmm.py``).

**Forward** (``_mamba_chunk_scan_combined_fwd``): ``_chunk_cumsum_fwd`` (``dt`` → FP32 ``dt``
and ``dA_cumsum``), ``_chunk_state_fwd`` (FP32 chunk states), ``_state_passing_fwd`` (FP32 in,
16-bit out: ``out_dtype=C.dtype``), ``_bmm_chunk_fwd`` (FP32 ``C·Bᵀ`` per chunk and group),
``_chunk_scan_fwd`` (reads ``z``; writes the gated output and ``out_x``, saved for the
backward). **Backward** (``MambaSplitConv1dScanCombinedFn.backward``): the conv output
recomputed (``causal_conv1d_fwd``), then ``_mamba_chunk_scan_combined_bwd``: ``dt.clone()``,
the forward's cumsum, ``C·Bᵀ`` and chunk states again, ``_state_passing_fwd`` with FP32 output,
``_chunk_scan_bwd_dz`` (the gate's gradient and ``dout_x``), ``_chunk_scan_bwd_dstates`` (FP32),
``_state_passing_bwd`` (16-bit ``dstates`` and states), ``_chunk_scan_chunk_state_bwd_dx``,
``_chunk_state_bwd_db`` and ``_chunk_scan_bwd_dC`` (FP32 partial gradients over ``nsplits``
head splits, summed after), ``_chunk_scan_bwd_dcb`` (likewise), two ``_bmm_chunk_bwd``,
``_chunk_scan_bwd_ddAcs_stable`` (per-block FP32 partials, summed), the torch ops on ``ddA``
(add, flip, cumsum, flip; two adds) and ``_chunk_cumsum_bwd``; the small reductions of the
``dD`` and ``ddA`` partials and the ``init_to_zero`` pre-hooks of the atomic outputs are
kernels of their own. Each kernel's bytes are the tensors it reads and writes once: operands
re-read by every head of a group (``B``, ``C``, ``C·Bᵀ``: ≤ a few MB) or by neighbouring tiles
are taken as L2 hits (H100: 50 MB L2).

**Timing** (:class:`~stage_explore.analytical.kernels.KernelTimer`): each kernel the larger of
its bytes at the SSD kernels' achieved HBM bandwidth (the preset's ``kernels.ssd_memory``,
measured on H100 from these kernels' forward timings; else ``efficiency.memory``) and its FLOPs
at the SSD rate, plus the preset's ``memory_kernel_s``; the generator's gate op (``ssm.gate``,
forward and backward) is inside ``_chunk_scan_fwd`` / ``_chunk_scan_bwd_dz`` and takes no time of
its own (:data:`FUSED_GATE`).
The conv's forward and backward stay the generator's ops, its three (``x``, ``B``, ``C``) one
kernel each way (:data:`FUSED_CONV`). Not modelled: the transposed
copies Megatron's ``rearrange(...).contiguous()`` makes of ``zxBCdt`` and ``y`` when the
micro-batch is above 1 (no-ops at micro-batch 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Bytes of an FP32 intermediate (``dt``, ``dA_cumsum``, states, ``C·Bᵀ``, partial gradients).
FP32 = 4
#: The generator's gate op of a Mamba-2 mixer, forward and backward: run inside mamba_ssm's
#: ``_chunk_scan_fwd`` (``z`` given) and ``_chunk_scan_bwd_dz``.
FUSED_GATE = frozenset({"ssm.gate", "ssm.gate.backward"})
#: The generator's ``B`` and ``C`` convs, forward and backward: mamba_ssm convolves ``xBC`` (one
#: channel-last tensor) in one ``causal_conv1d_fwd`` / ``causal_conv1d_bwd`` launch, so their
#: bytes are moved inside the ``x`` conv's kernel (no per-kernel fixed time of their own).
FUSED_CONV = frozenset({"ssm.conv.b", "ssm.conv.c", "ssm.conv.b.backward", "ssm.conv.c.backward"})
#: ``_state_passing_bwd``'s ``BLOCK_SIZE_min``: one FP32 ``ddA_chunk_cumsum`` partial per
#: 64 state elements of a head.
STATE_PASSING_BLOCK_MIN = 64
#: ``_chunk_scan_bwd_ddAcs_stable``'s ``BLOCK_SIZE_M_min``: its FP32 partials per chunk row.
DDACS_BLOCK_MIN = 32


@dataclass(frozen=True, slots=True)
class SSDShape:
    """One rank's scan: ``batch`` sequences of ``seq`` tokens, ``heads`` heads of ``head_dim``
    in ``groups`` groups sharing ``B`` and ``C`` of ``state`` values, chunks of ``chunk``
    tokens, 16-bit activations of ``element`` bytes."""

    batch: int
    seq: int
    heads: int
    groups: int
    head_dim: int
    state: int
    chunk: int
    element: int = 2

    @property
    def chunks(self) -> int:
        return math.ceil(self.seq / self.chunk)


@dataclass(frozen=True, slots=True)
class SSDKernel:
    """One kernel launch: its name in mamba_ssm or torch, HBM bytes read and written, and its
    tensor-core FLOPs (the ``tl.dot`` products; element-wise work is left to the bytes)."""

    name: str
    bytes_read: int
    bytes_written: int
    flops: int = 0


def head_splits(shape: SSDShape, sm_count: int) -> int:
    """``nsplits`` of ``_chunk_state_bwd_db`` / ``_chunk_scan_bwd_dC`` / ``_chunk_scan_bwd_dcb``:
    ``nheads_per_program = max(min(ceil(batch·nchunks·nheads / sm_count), nheads/ngroups), 1)``,
    ``nsplits = ceil(nheads/ngroups / nheads_per_program)`` FP32 partials summed after."""
    ratio = shape.heads // shape.groups
    per_program = max(min(math.ceil(shape.batch * shape.chunks * shape.heads / sm_count), ratio), 1)
    return math.ceil(ratio / per_program)


def _sizes(s: SSDShape) -> tuple[int, int, int, int, int, int, int]:
    """Element counts: ``x`` (tokens × heads × head dim), ``B`` or ``C``, ``dt`` per token and
    head, the chunked FP32 ``dt`` / ``dA_cumsum`` (padded to whole chunks), the chunk states,
    ``C·Bᵀ``, and ``Σ q²`` over the chunks (the last one shorter)."""
    x = s.batch * s.seq * s.heads * s.head_dim
    bc = s.batch * s.seq * s.groups * s.state
    dt = s.batch * s.seq * s.heads
    chunked = s.batch * s.heads * s.chunks * s.chunk
    states = s.batch * s.chunks * s.heads * s.head_dim * s.state
    cb = s.batch * s.chunks * s.groups * s.chunk * s.chunk
    full, rest = divmod(s.seq, s.chunk)
    square = s.batch * (full * s.chunk * s.chunk + rest * rest)
    return x, bc, dt, chunked, states, cb, square


def forward_kernels(s: SSDShape, gated: bool = True) -> tuple[SSDKernel, ...]:
    """``_mamba_chunk_scan_combined_fwd`` with ``z`` (module docstring); ``gated`` False: with
    ``z=None`` (``_chunk_scan_fwd`` reads no ``z`` and writes the output only)."""
    e = s.element
    outputs = 2 if gated else 1  # out (and out_x); the z read likewise
    x, bc, dt, chunked, states, cb, square = _sizes(s)
    matmul = 2 * s.batch * s.seq * s.heads * s.head_dim * s.state  # one (L·P)×N product
    return (
        SSDKernel("_chunk_cumsum_fwd", dt * e, 2 * chunked * FP32),
        SSDKernel("_chunk_state_fwd", (x + bc) * e + 2 * chunked * FP32, states * FP32, matmul),
        SSDKernel(
            "_state_passing_fwd",
            states * FP32 + chunked // s.chunk * FP32,
            states * e + states // s.chunks * FP32,  # the 16-bit states and the final state
            2 * states,
        ),
        SSDKernel("_bmm_chunk_fwd", 2 * bc * e, cb * FP32, 2 * square * s.groups * s.state),
        SSDKernel(
            "_chunk_scan_fwd",  # C·Bᵀ, x, C, states, dt, dA_cumsum, z → out, out_x
            cb * FP32 + (outputs * x + bc + states) * e + 2 * chunked * FP32,
            outputs * x * e,
            matmul + square * s.heads * 2 * s.head_dim,
        ),
    )


def backward_kernels(s: SSDShape, sm_count: int) -> tuple[SSDKernel, ...]:
    """``MambaSplitConv1dScanCombinedFn.backward`` without the norm or out-projection: the
    conv recompute and ``_mamba_chunk_scan_combined_bwd`` with ``z`` (module docstring);
    ``sm_count`` sets the partial-gradient splits (:func:`head_splits`)."""
    e = s.element
    x, bc, dt, chunked, states, cb, square = _sizes(s)
    splits = head_splits(s, sm_count)
    matmul = 2 * s.batch * s.seq * s.heads * s.head_dim * s.state
    diagonal = square * s.heads * 2 * s.head_dim
    per_chunk = chunked // s.chunk  # dA_cumsum[..., -1]: one value per chunk and head
    channels = x + 2 * bc  # xBC
    forward = {k.name: k for k in forward_kernels(s)}
    passing_partials = per_chunk * math.ceil(s.head_dim * s.state / STATE_PASSING_BLOCK_MIN)
    ddacs_partials = chunked * math.ceil(s.chunk / DDACS_BLOCK_MIN)
    small = chunked * FP32  # one FP32 value per token and head
    bmm_bwd = SSDKernel(
        "_bmm_chunk_bwd", bc * e + cb * FP32 + bc * FP32, bc * e, 2 * square * s.groups * s.state
    )
    return (
        SSDKernel("causal_conv1d_fwd", channels * e, channels * e),
        SSDKernel("dt.clone", dt * e, dt * e),
        forward["_chunk_cumsum_fwd"],
        forward["_bmm_chunk_fwd"],
        forward["_chunk_state_fwd"],
        SSDKernel(  # out_dtype None: the states stay FP32
            "_state_passing_fwd",
            states * FP32 + per_chunk * FP32,
            states * FP32 + states // s.chunks * FP32,
            2 * states,
        ),
        SSDKernel("_chunk_scan_bwd_dz", 4 * x * e, 2 * x * e),  # x, z, out_x, dout
        SSDKernel("_chunk_scan_bwd_dstates", bc * e + x * e + 2 * small, states * FP32, matmul),
        SSDKernel(
            "_state_passing_bwd",
            2 * states * FP32 + per_chunk * FP32,
            2 * states * e + passing_partials * FP32,  # dstates, states (16-bit); ddA partials
            4 * states,
        ),
        SSDKernel("ddA_chunk_cumsum.sum", passing_partials * FP32, per_chunk * FP32),
        SSDKernel("ddt.zero_", 0, small),  # init_to_zero(["ddt_ptr"])
        SSDKernel(
            "_chunk_scan_chunk_state_bwd_dx",  # x, C·Bᵀ, dout_x, B, dstates, dt, dA → dx, ddt
            cb * FP32 + (2 * x + bc + states) * e + 2 * small,
            x * e + small,
            matmul + diagonal,
        ),
        SSDKernel("ddA_cumsum.zero_", 0, small),  # "the Triton kernel will call init_to_zero"
        SSDKernel(
            "_chunk_state_bwd_db",  # x, dstates, B, dt, dA → dB partials, ddA_next
            (x + states + bc) * e + 2 * small,
            splits * bc * FP32 + small,
            matmul,
        ),
        SSDKernel("dB.sum", splits * bc * FP32, bc * FP32),
        SSDKernel("ddA_next.cumsum", small, small),
        SSDKernel(
            "_chunk_scan_bwd_dC",  # states (16-bit), dout_x, C, dA → dC partials, ddA_prev
            (states + x + bc) * e + small,
            splits * bc * FP32 + small,
            matmul,
        ),
        SSDKernel("dC.sum", splits * bc * FP32, bc * FP32),
        SSDKernel(
            "_chunk_scan_bwd_dcb", 2 * x * e + 2 * small, splits * cb * FP32, diagonal
        ),  # x, dout_x, dt, dA → dCB partials
        SSDKernel("dCB.sum", splits * cb * FP32, cb * FP32),
        bmm_bwd,  # dB = its FP32 partial sum + C·dCB, into the 16-bit dxBC
        bmm_bwd,  # dC likewise from B and dCBᵀ
        SSDKernel("ddA_prev[..., -1] +=", 2 * per_chunk * FP32, per_chunk * FP32),
        SSDKernel("ddA_prev.flip", small, small),
        SSDKernel("ddA_prev.cumsum", small, small),
        SSDKernel("ddA_prev.flip", small, small),
        SSDKernel(
            "_chunk_scan_bwd_ddAcs_stable",  # x, dout_x, C·Bᵀ, dt, dA → per-block partials
            2 * x * e + cb * FP32 + 2 * small,
            ddacs_partials * FP32,
            diagonal,
        ),
        SSDKernel("ddA.sum", ddacs_partials * FP32, small),
        SSDKernel("ddA_next + ddA_prev", 2 * small, small),
        SSDKernel("ddA +=", 2 * small, small),
        SSDKernel("_chunk_cumsum_bwd", 2 * small + dt * e, dt * e),  # ddA, ddt, dt → ddt
    )


def ssd_kernels(shape: SSDShape, sm_count: int) -> dict[str, tuple[SSDKernel, ...]]:
    """The kernels of one scan instruction by phase (``fwd``, ``bwd``)."""
    return {
        "fwd": forward_kernels(shape),
        "bwd": backward_kernels(shape, sm_count),
    }
