"""State-space (Mamba-2) ops: the causal depthwise convolution, the SSD chunked scan and the
grouped RMSNorm of the gated output.

Mamba-2 (Dao & Gu, "Transformers are SSMs", ICML 2024, arXiv 2405.21060, Section 7) projects
each token to ``z``, ``x``, ``B``, ``C`` and ``dt``, convolves ``x``, ``B``, ``C`` causally over
the last ``W`` tokens (depthwise, with a bias and a SiLU), runs the selective SSM
``h_t = exp(dt_t·A)·h_{t−1} + dt_t·B_t·x_tᵀ``, ``y_t = C_tᵀ·h_t + D·x_t`` per head (a scalar
decay per head; ``B`` and ``C`` shared by the heads of a group), gates ``y·silu(z)``, normalises
each group with an RMSNorm and projects back. Dims: ``Hs`` SSM heads, ``Ps`` head dim, ``Gs``
groups, ``Ns`` state size, ``Ws`` conv width; the chunk length ``Qs`` is a size, not a dim.

Held here:

- :class:`CausalConv1d`: ``out[B, S, c…] = silu(bias + Σ_w weight[c…, w]·x[B, S−W+1+w, c…])``.
- :class:`SSDScan`: the SSD algorithm (Section 6, Listing 1), ``y[B, S, Hs, Ps]`` from ``x``,
  ``dt``, ``B``, ``C`` and the per-head ``A_log``, ``D``, ``dt_bias``; exact chunked FLOPs
  (:func:`ssd_flops`) and the HBM traffic of its five kernels (:func:`ssd_intermediate_bytes`).
- :class:`GroupRMSNorm`: Mamba-2's RMSNorm over each group of ``Hs/Gs`` heads × ``Ps``.
- :class:`StateUpdate`, :func:`state_bytes_per_sequence`: serving's recurrent states (SSM and
  conv), constant in the context length.
- :func:`grad_layouts` and :func:`ssm_backward_flops`: what the derived backward needs from them.

**Sharding (Megatron-Core's ``MambaMixer``).** Heads and groups are split over tp (Megatron
asserts ``tp | heads`` and ``tp | groups``, so every rank holds whole groups and their heads);
the conv channels, ``A_log``, ``D``, ``dt_bias`` and the norm scale follow their heads or groups.
The conv and the scan run over whole sequences: a sequence partitioned over an axis of size
> 1 is a :class:`ShardingError` when the sizes are bound. Under context parallelism the plan
(``plans._mamba_context_parallel``, Megatron-Core's ``MambaContextParallel``) first moves the
cp split from the sequence onto the heads and groups with all-to-alls.

**Memory (Megatron's memory-efficient path, ``mamba_split_conv1d_scan_combined``).** The conv
saves its input (the projected ``x``, ``B``, ``C``); the scan saves only ``dt`` and recomputes
the conv output in its backward (those FLOPs are counted in the conv's backward); the gate and
the norm save their inputs like any element-wise op. That is exactly what Megatron keeps: the
in-projection output, the ungated scan output, the norm input and the out-projection input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stage_core.errors import ShardingError
from stage_core.layout import Layout
from stage_core.mesh import Size
from stage_core.models.layers import Mixer
from stage_core.models.spec import ModelSpec
from stage_core.ops import BaseOp, Cost, Reduction, Sizes, Tensor, axis_product, local_elements
from stage_core.ops import local_extent as _extent

#: SiLU ``x·σ(x)``: exp, add, divide, multiply (the project's SwiGLU count, ``blocks._mlp``).
SILU_OPS = 4
#: Per (query, key) pair of a chunk and head: the segment sum (a subtraction of cumulative
#: sums), its exp, and the product with ``C·Bᵀ`` (Listing 1's ``L = exp(segsum(A))``).
DECAY_MASK_OPS = 3
#: Per token and head: ``softplus(dt + dt_bias)`` (add, exp, add, log), ``dt·A``, the cumulative
#: sum, and the two decays ``exp(A_cum[-1] − A_cum)`` and ``exp(A_cum)`` (subtract, exp; exp).
DT_OPS = 10
#: Per element of ``x``: ``dt·x``, the two decay products (chunk states and state output), the
#: ``D·x`` skip (multiply, add) and ``y_diag + y_off``.
ELEMENT_OPS = 6
#: Bytes per element of the scan's FP32 intermediates (``dA_cumsum``, ``C·Bᵀ``, chunk states).
FP32_BYTES = 4


def _whole_sequences(op: BaseOp, x: Layout, axis_sizes: Sizes) -> None:
    """The conv and the scan run over whole sequences: a sequence split over axes larger than
    one (context parallelism) is a :class:`ShardingError` when the sizes are bound."""
    split = axis_product(x.shards[1], axis_sizes)
    if isinstance(split, int) and split > 1:
        raise ShardingError(
            f"{op.name}: state-space layers run over whole sequences, but the sequence is split "
            f"{split} ways ({x}); context parallelism must move the split onto the heads first"
        )


@dataclass(frozen=True, slots=True)
class CausalConv1d(BaseOp):
    """Depthwise causal convolution of ``x[B, S, c1, c2]`` with ``weight[c1, c2, Ws]`` and
    ``bias[c1, c2]``, then SiLU (``causal_conv1d_fn(activation="silu")``).

    Forward FLOPs per output element: ``Ws`` multiply-adds with the bias as first addend
    (``2·Ws``) and the SiLU (:data:`SILU_OPS`). Backward: the input and weight gradients (one
    forward's multiply-adds each, ``4·Ws``), the bias gradient (1), the SiLU's (4), and one more
    forward, the recompute of the conv output for the scan's backward (module docstring).
    """

    width_dim: str = "Ws"

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        x, weight, bias = layouts
        if any(layout.partial for layout in layouts):
            raise ShardingError(f"{self.name}: the convolution's inputs must not be partial sums")
        if weight.shards[:2] != x.shards[2:] or bias.shards != x.shards[2:] or weight.shards[2]:
            raise ShardingError(
                f"{self.name}: weight {weight} and bias {bias} must shard the channels like {x}"
            )
        out = tensors[self.outputs[0]]
        return [Layout(out.dims, x.shards, (), out.name)]

    def forward_ops_per_element(self, sizes: Sizes) -> Size:
        return 2 * sizes[self.width_dim] + SILU_OPS

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        _whole_sequences(self, layouts[0], axis_sizes)
        elements = local_elements(out_layouts[0], sizes, axis_sizes)
        read, written = self._io_bytes(layouts, out_layouts, tensors, sizes, axis_sizes)
        return Cost(elements * self.forward_ops_per_element(sizes), read, written)

    def backward_flops(self, out_layouts: Sequence[Layout], sizes: Sizes, axes: Sizes) -> Size:
        elements = local_elements(out_layouts[0], sizes, axes)
        per_element = 4 * sizes[self.width_dim] + 1 + SILU_OPS
        return elements * (per_element + self.forward_ops_per_element(sizes))

    @property
    def saved(self) -> tuple[str, ...]:
        return self.inputs[:1]


def _chunking(seq: Size, chunk: Size) -> tuple[Size, Size]:
    """The number of chunks of ``seq`` tokens and ``Σ q²`` over their lengths ``q`` (the last
    chunk shorter when ``chunk`` does not divide ``seq``)."""
    if isinstance(seq, int) and isinstance(chunk, int):
        full, rest = divmod(seq, chunk)
        return full + (1 if rest else 0), full * chunk * chunk + rest * rest
    return seq / chunk, seq * chunk


def ssd_flops(
    batch: Size, seq: Size, heads: Size, groups: Size, head_dim: Size, state: Size, chunk: Size
) -> dict[str, Size]:
    """The forward FLOPs of the SSD algorithm by term (paper Section 6, Listing 1), for
    ``batch`` sequences of ``seq`` tokens cut into chunks of ``chunk`` (the last one shorter
    when ``chunk`` does not divide ``seq``, as the Triton kernels do).

    - ``cb``: ``C·Bᵀ`` within each chunk, once per *group* (mamba_ssm's ``_bmm_chunk_fwd``):
      ``2·Σq²·N`` per group;
    - ``diagonal``: the masked ``(C·Bᵀ ∘ L)·X`` of the diagonal blocks: ``2·Σq²·P`` per head
      (Listing 1 multiplies whole ``q × q`` blocks), plus :data:`DECAY_MASK_OPS` per pair;
    - ``states``: each chunk's final state ``Bᵀ·(decay ∘ X)``: ``2·S·N·P`` per head;
    - ``passing``: the inter-chunk recurrence ``h_c = decay_c·h_{c−1} + s_c``: ``2·N·P`` per
      chunk and head;
    - ``output``: the states' contribution ``C·h``: ``2·S·N·P`` per head;
    - ``elementwise``: :data:`DT_OPS` per token and head, :data:`ELEMENT_OPS` per element of x.
    """
    chunks, square = _chunking(seq, chunk)
    return {
        "cb": batch * groups * 2 * square * state,
        "diagonal": batch * heads * square * (2 * head_dim + DECAY_MASK_OPS),
        "states": batch * heads * 2 * seq * state * head_dim,
        "passing": batch * heads * 2 * chunks * state * head_dim,
        "output": batch * heads * 2 * seq * state * head_dim,
        "elementwise": batch * seq * heads * (DT_OPS + ELEMENT_OPS * head_dim),
    }


def ssd_intermediate_bytes(
    batch: Size, seq: Size, heads: Size, groups: Size, head_dim: Size, state: Size, chunk: Size
) -> Size:
    """HBM bytes the five SSD kernels of mamba_ssm (``_mamba_chunk_scan_combined_fwd``: chunk
    cumsum, ``C·Bᵀ``, chunk state, state passing, chunk scan) write and read back beyond their
    inputs and output: ``dt`` and ``dA_cumsum`` (FP32, written once, read by three kernels),
    ``C·Bᵀ`` (FP32, written, read), the chunk states (FP32, written, read and rewritten by the
    state passing, read by the chunk scan). The original kernels are "mostly bottlenecked by
    memory bandwidth and latency and include writing and reading intermediate data" (PyTorch
    blog, "Accelerating Mamba2 with Kernel Fusion", 2025)."""
    chunks, square = _chunking(seq, chunk)
    dt = 2 * batch * heads * seq * FP32_BYTES * (1 + 3)
    cb = batch * groups * square * FP32_BYTES * 2
    states = batch * chunks * heads * head_dim * state * FP32_BYTES * 4
    return dt + cb + states


@dataclass(frozen=True, slots=True)
class SSDScan(BaseOp):
    """The SSD scan: ``y[B, S, Hs, Ps]`` from ``x[B, S, Hs, Ps]``, ``dt[B, S, Hs]``,
    ``b[B, S, Gs, Ns]``, ``c[B, S, Gs, Ns]`` and the weights ``A_log``, ``D``, ``dt_bias``
    ``[Hs]`` (the ``D·x`` skip included; the ``silu(z)`` gate is a separate op).

    FLOPs: :func:`ssd_flops` on the local sizes; bytes: inputs, output and
    :func:`ssd_intermediate_bytes`. Backward: twice the forward FLOPs (each of Listing 1's
    matmuls gives two of its size, one per operand needing a gradient; the element-wise
    terms likewise) and twice its intermediate bytes (:meth:`backward_intermediate_bytes`).
    Saves ``dt`` only (module docstring: the conv output is recomputed).
    """

    chunk_dim: str = "Qs"

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        x, dt, b, c, *weights = layouts
        if any(layout.partial for layout in layouts):
            raise ShardingError(f"{self.name}: the scan's inputs must not be partial sums")
        tokens, heads = x.shards[:2], x.shards[2]
        if dt.shards != (*tokens, heads) or b.shards[:2] != tokens or c.shards != b.shards:
            raise ShardingError(
                f"{self.name}: x {x}, dt {dt}, B {b} and C {c} must shard tokens alike"
            )
        if b.shards[2] != heads or x.shards[3] or b.shards[3]:
            raise ShardingError(
                f"{self.name}: groups {b} must be split like the heads {x} (each rank holds "
                "whole groups and their heads, as Megatron-Core), with whole head and state dims"
            )
        if any(weight.shards != (heads,) for weight in weights):
            raise ShardingError(f"{self.name}: A_log, D and dt_bias must shard like the heads")
        out = tensors[self.outputs[0]]
        return [Layout(out.dims, x.shards, (), out.name)]

    def _local(
        self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor], sizes: Sizes, axes: Sizes
    ) -> tuple[Size, Size, Size, Size, Size, Size, Size]:
        x, b = layouts[0], layouts[2]
        xd, bd = tensors[self.inputs[0]].dims, tensors[self.inputs[2]].dims
        batch = _extent(xd[0], x.shards[0], sizes, axes)
        heads = _extent(xd[2], x.shards[2], sizes, axes)
        groups = _extent(bd[2], b.shards[2], sizes, axes)
        return (
            batch,
            sizes[xd[1]],
            heads,
            groups,
            sizes[xd[3]],
            sizes[bd[3]],
            sizes[self.chunk_dim],
        )

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        _whole_sequences(self, layouts[0], axis_sizes)
        local = self._local(layouts, tensors, sizes, axis_sizes)
        flops: Size = 0
        for term in ssd_flops(*local).values():
            flops = flops + term
        extra = ssd_intermediate_bytes(*local)
        read, written = self._io_bytes(layouts, out_layouts, tensors, sizes, axis_sizes)
        return Cost(flops, read + extra, written + extra)

    def backward_intermediate_bytes(
        self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor], sizes: Sizes, axes: Sizes
    ) -> Size:
        """HBM bytes the backward kernels write and read back beyond their operands: twice the
        forward's (:func:`ssd_intermediate_bytes`) — mamba_ssm's backward recomputes the chunk
        states, reads them and the FP32 ``dt``/``dA_cumsum`` and ``C·Bᵀ`` again, and writes and
        passes back the states' gradients, each the forward's size."""
        return 2 * ssd_intermediate_bytes(*self._local(layouts, tensors, sizes, axes))

    @property
    def saved(self) -> tuple[str, ...]:
        return self.inputs[1:2]


@dataclass(frozen=True, slots=True)
class GroupRMSNorm(Reduction):
    """Mamba-2's gated-output RMSNorm (``RMSNormGated(group_size = d_inner/ngroups)``): each
    group of ``Hs/Gs`` heads × ``Ps`` normalised on its own, scaled by ``weight[Hs, Ps]``.

    Counted as a reduction over ``Ps`` (the same per-element FLOPs); a rank must hold whole
    groups — ``Gs`` divisible by the product of the axes splitting the heads — else the group's
    statistics would span ranks (Megatron asserts ``tp | ngroups``): a :class:`ShardingError`.
    """

    groups_dim: str = "Gs"

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        groups, split = sizes[self.groups_dim], axis_product(layouts[0].shards[2], axis_sizes)
        if isinstance(groups, int) and isinstance(split, int) and groups % split:
            raise ShardingError(
                f"{self.name}: each rank must hold whole groups, but {self.groups_dim}={groups} "
                f"groups are split {split} ways"
            )
        return Reduction.cost(self, layouts, out_layouts, tensors, sizes, axis_sizes)


@dataclass(frozen=True, slots=True)
class StateUpdate(BaseOp):
    """Serving: a sequence's recurrent state ``state[B, c1, c2, k]`` read and rewritten by a
    step whose new values are ``new[B, S, c1, c2]`` — the SSM state ``[B, Hs, Ps, Ns]`` after
    the scan, or a conv state ``[B, c1, c2, Ws − 1]`` (the last inputs) before the conv
    (Megatron-Core's ``ssm_state`` / ``conv_state``, vLLM's Mamba cache). Its size does not
    grow with the context. No FLOPs (the arithmetic is the scan's and the conv's); reads and
    writes the whole state once. The output is the state: the same layout, which must shard
    batch and channels like ``new``.
    """

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        new, state = layouts
        if new.partial or state.partial:
            raise ShardingError(f"{self.name}: state inputs {new}, {state} must not be partial")
        if (new.shards[0], *new.shards[2:]) != state.shards[:3] or state.shards[3]:
            raise ShardingError(
                f"{self.name}: the state {state} must shard batch and channels like {new}"
            )
        out = tensors[self.outputs[0]]
        return [Layout(out.dims, state.shards, (), out.name)]

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        state = local_elements(layouts[1], sizes, axis_sizes) * tensors[self.inputs[1]].dtype_bytes
        return Cost(0, state, state)


def state_bytes_per_sequence(model: ModelSpec, state_bytes: int) -> int:
    """Serving: the recurrent state one sequence keeps in every Mamba layer, whatever its
    context: the SSM state ``M·P·N`` and the conv states ``(M·P + 2·G·N)·(W − 1)`` elements of
    ``state_bytes`` each, times the Mamba layers."""
    if not model.ssm_heads:
        return 0
    inner, bc = model.ssm_heads * model.ssm_head_dim, 2 * model.ssm_groups * model.ssm_state
    per_layer = inner * model.ssm_state + (inner + bc) * (model.ssm_conv - 1)
    layers = sum(kind.mixer is Mixer.MAMBA for kind in model.layer_kinds())
    return layers * per_layer * state_bytes


#: The ops whose derived backward :func:`grad_layouts` and :func:`ssm_backward_flops` describe.
SSM_OPS = (CausalConv1d, SSDScan)


def grad_layouts(
    op: BaseOp,
    consumed: Sequence[Layout],
    stored: Sequence[Layout],
    out_grad: Layout,
    tensors: Mapping[str, Tensor],
) -> list[Layout]:
    """The natural layouts of the gradients of ``op``'s inputs: activations' as consumed
    (whole sums); weights' sharded as the weight is stored, a partial sum over every other axis
    of the output gradient or of the consumed slice (the token axes; under context parallelism
    also cp, whose ranks each use one slice of the weight and contribute a zero-padded
    gradient, summed with the data-parallel reduction as Megatron-Core's DDP does), reduced
    once per step."""
    result = []
    for name, layout, kept in zip(op.inputs, consumed, stored, strict=True):
        if tensors[name].role == "weight":
            used = (*out_grad.axes_used, *layout.axes_used)
            partial = tuple(dict.fromkeys(a for a in used if a not in kept.axes_used))
            result.append(kept.with_shards(kept.shards, partial))
        else:
            result.append(layout.with_shards(layout.shards, ()))
    return result


def ssm_backward_flops(
    op: BaseOp,
    in_layouts: Sequence[Layout],
    out_layouts: Sequence[Layout],
    tensors: Mapping[str, Tensor],
    sizes: Sizes,
    axis_sizes: Sizes,
) -> Size:
    """The backward FLOPs of a conv or scan (their docstrings)."""
    if isinstance(op, CausalConv1d):
        return op.backward_flops(out_layouts, sizes, axis_sizes)
    assert isinstance(op, SSDScan)
    return 2 * op.cost(in_layouts, out_layouts, tensors, sizes, axis_sizes).flops
