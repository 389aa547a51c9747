"""Ops of the symbolic tensor graph: what they compute, cost, and which layouts they produce.

Every op names its input and output tensors; tensors have named dims (``B``, ``S``, ``H`` …)
whose sizes are given by a mapping at costing time (sympy symbols before lowering, exact ints
after). Ops infer their *natural* output layouts from their input layouts and report FLOPs
(a multiply-accumulate is 2 FLOPs), bytes read and bytes written for one rank.

Held here: :class:`Tensor`, :class:`Cost`, :class:`BaseOp` and the op kinds :class:`Einsum`,
:class:`Elementwise`, :class:`Reduction`, :class:`Attention`, :class:`Embedding`,
:class:`CrossEntropy`, :class:`Custom`, plus :func:`local_extent`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sympy

from stage_core.errors import ShardingError
from stage_core.layout import Layout
from stage_core.mesh import Size

Sizes = Mapping[str, Size]


@dataclass(frozen=True, slots=True)
class Tensor:
    """A named tensor with named dims; ``role`` is activation, weight, input or buffer."""

    name: str
    dims: tuple[str, ...]
    dtype_bytes: int = 2
    role: str = "activation"


@dataclass(frozen=True, slots=True)
class Cost:
    """Per-rank cost of one op: FLOPs, bytes read and written (exact after binding)."""

    flops: Size = 0
    bytes_read: Size = 0
    bytes_written: Size = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.flops + other.flops,
            self.bytes_read + other.bytes_read,
            self.bytes_written + other.bytes_written,
        )


def _div(numerator: Size, denominator: Size, what: str) -> Size:
    if isinstance(numerator, int) and isinstance(denominator, int):
        if numerator % denominator:
            raise ShardingError(f"{what}: {numerator} is not divisible by {denominator}")
        return numerator // denominator
    return sympy.sympify(numerator) / denominator


def axis_product(axes: Sequence[str], axis_sizes: Sizes) -> Size:
    result: Size = 1
    for axis in axes:
        result = result * axis_sizes[axis]
    return result


def local_extent(dim: str, axes: Sequence[str], sizes: Sizes, axis_sizes: Sizes) -> Size:
    """The local size of ``dim`` partitioned over ``axes``."""
    return _div(sizes[dim], axis_product(axes, axis_sizes), f"dim {dim} over {'*'.join(axes)}")


def local_elements(layout: Layout, sizes: Sizes, axis_sizes: Sizes) -> Size:
    """The product of the local extents of ``layout``'s dims (:func:`local_extent`'s, with its
    all-integer case inlined: binding calls this for every tensor of every op)."""
    result: Size = 1
    for dim, axes in zip(layout.dims, layout.shards, strict=True):
        size = sizes[dim]
        if not axes and isinstance(size, int):  # an unsharded dim: itself
            result = result * size
            continue
        shards: Size = 1
        for axis in axes:
            shards = shards * axis_sizes[axis]
        if isinstance(size, int) and isinstance(shards, int) and not size % shards:
            result = result * (size // shards)
        else:  # symbolic, or not divisible (local_extent says so)
            result = result * local_extent(dim, axes, sizes, axis_sizes)
    return result


def layout_bytes(layout: Layout, tensor: Tensor, sizes: Sizes, axis_sizes: Sizes) -> Size:
    """Bytes one rank holds of ``tensor`` in ``layout``."""
    return local_elements(layout, sizes, axis_sizes) * tensor.dtype_bytes


@dataclass(frozen=True, slots=True)
class BaseOp(abc.ABC):
    """An op of the graph.

    Contract:
        ``infer`` returns the natural layouts of the outputs for the given input layouts, or
        raises :class:`ShardingError` when the inputs' shardings are inconsistent. ``cost``
        returns the per-rank cost for the given layouts and sizes. ``saved`` names the tensors
        the backward pass needs (inputs or outputs); the derived backward reads those and the
        output gradient (:mod:`stage_core.autodiff`).
    """

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @abc.abstractmethod
    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        """Natural output layouts."""

    @abc.abstractmethod
    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        """Per-rank cost."""

    @property
    def saved(self) -> tuple[str, ...]:
        return ()

    @property
    def kind(self) -> str:
        return type(self).__name__.lower()

    def _per_element(
        self,
        ops_per_element: int,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        """``ops_per_element`` FLOPs per element of the first output, and the I/O bytes."""
        elements = local_elements(out_layouts[0], sizes, axis_sizes)
        read, written = self._io_bytes(layouts, out_layouts, tensors, sizes, axis_sizes)
        return Cost(ops_per_element * elements, read, written)

    def _io_bytes(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> tuple[Size, Size]:
        read: Size = 0
        for name, layout in zip(self.inputs, layouts, strict=True):
            read = read + layout_bytes(layout, tensors[name], sizes, axis_sizes)
        written: Size = 0
        for name, layout in zip(self.outputs, out_layouts, strict=True):
            written = written + layout_bytes(layout, tensors[name], sizes, axis_sizes)
        return read, written


def _label_axes(
    subscripts: Sequence[str], layouts: Sequence[Layout], op: str
) -> tuple[dict[str, tuple[str, ...]], set[str]]:
    """Axes partitioning each einsum label, checked consistent across inputs; partial axes."""
    axes_of: dict[str, tuple[str, ...]] = {}
    for labels, layout in zip(subscripts, layouts, strict=True):
        for label, axes in zip(labels, layout.shards, strict=True):
            if label in axes_of and axes_of[label] != axes:
                raise ShardingError(
                    f"{op}: inconsistent input shardings for dim {layout.dims[labels.index(label)]}"
                    f" ({'*'.join(axes_of[label]) or 'whole'} vs {'*'.join(axes) or 'whole'})"
                )
            axes_of.setdefault(label, axes)
    partial: set[str] = set()
    for index, layout in enumerate(layouts):
        for axis in layout.partial:
            for other_index, other in enumerate(layouts):
                if other_index != index and axis in other.axes_used:
                    raise ShardingError(
                        f"{op}: input {index} is a partial sum over {axis!r} that input "
                        f"{other_index} also uses; a product of partial sums is not linear"
                    )
            partial.add(axis)
    return axes_of, partial


@dataclass(frozen=True, slots=True)
class Einsum(BaseOp):
    """``out = einsum(subscripts, *inputs)``: matmuls and batched contractions.

    A contracted label partitioned over axes makes the output a partial sum over them.
    FLOPs are ``2 · Π(local extent of every label)``.
    """

    subscripts: str = ""

    def _split(self) -> tuple[list[str], str]:
        left, _, right = self.subscripts.replace(" ", "").partition("->")
        return left.split(","), right

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        ins, out = self._split()
        axes_of, partial = _label_axes(ins, layouts, self.name)
        contracted = {label for labels in ins for label in labels} - set(out)
        for label in sorted(contracted):
            partial.update(axes_of.get(label, ()))
        shards = [axes_of.get(label, ()) for label in out]
        used = [a for axes in shards for a in axes]
        clash = sorted(set(used) & partial) or sorted({a for a in used if used.count(a) > 1})
        if clash:
            raise ShardingError(
                f"{self.name}: the output would use axis {clash[0]!r} twice; "
                "redistribute an input first"
            )
        tensor = tensors[self.outputs[0]]
        order = [a for layout in layouts for a in layout.partial] + sorted(partial)
        ordered_partial = tuple(dict.fromkeys(a for a in order if a in partial))
        return [Layout(tensor.dims, tuple(shards), ordered_partial, tensor.name)]

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        ins, out = self._split()
        axes_of, _ = _label_axes(ins, layouts, self.name)
        dims_of: dict[str, str] = {}
        for labels, name in zip(ins, self.inputs, strict=True):
            for label, dim in zip(labels, tensors[name].dims, strict=True):
                dims_of.setdefault(label, dim)
        macs: Size = 1
        for label, dim in dims_of.items():
            macs = macs * local_extent(dim, axes_of.get(label, ()), sizes, axis_sizes)
        read, written = self._io_bytes(layouts, out_layouts, tensors, sizes, axis_sizes)
        return Cost(2 * macs, read, written)

    @property
    def saved(self) -> tuple[str, ...]:
        return self.inputs


def _same_layouts(op: BaseOp, layouts: Sequence[Layout], linear: bool) -> Layout:
    first = layouts[0]
    for layout in layouts[1:]:
        if layout.shards != first.shards or set(layout.partial) != set(first.partial):
            raise ShardingError(f"{op.name}: inputs have different layouts {first} and {layout}")
    if first.partial and not linear:
        raise ShardingError(
            f"{op.name}: a non-linear op cannot take the partial sum {first}; reduce it first"
        )
    return first


def _check_broadcast(op: BaseOp, full: Layout, small: Layout) -> None:
    """A broadcast operand (a bias, a norm scale) must be sharded like the dims it matches."""
    if small.partial:
        raise ShardingError(f"{op.name}: broadcast operand {small} is a partial sum")
    for dim, axes in zip(small.dims, small.shards, strict=True):
        if dim not in full.dims or full.shards[full.dims.index(dim)] != axes:
            raise ShardingError(f"{op.name}: broadcast operand {small} does not match {full}")


@dataclass(frozen=True, slots=True)
class Elementwise(BaseOp):
    """Element-wise op on same-shaped inputs; ``ops_per_element`` FLOPs per output element.

    ``linear`` ops (add, scale) accept partial sums; ``saves`` lists the tensors the backward
    needs (inputs or outputs: a dropout's second output is its mask, saved and read by its
    backward, :meth:`stage_core.graph.Block.elementwise`). ``backward_ops_per_element`` is the
    FLOPs per element of the derived backward. FLOPs count the first output's elements; bytes
    every input and output (a dropout's mask at its own width).
    """

    ops_per_element: int = 1
    linear: bool = False
    saves: tuple[str, ...] = ()
    backward_ops_per_element: int = 1

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        dims = tensors[self.inputs[0]].dims
        full = [
            lay
            for name, lay in zip(self.inputs, layouts, strict=True)
            if tensors[name].dims == dims
        ]
        layout = _same_layouts(self, full, self.linear)
        for name, lay in zip(self.inputs, layouts, strict=True):
            if tensors[name].dims != dims:
                _check_broadcast(self, layout, lay)
        return [Layout(tensors[o].dims, layout.shards, layout.partial, o) for o in self.outputs]

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        return self._per_element(
            self.ops_per_element, layouts, out_layouts, tensors, sizes, axis_sizes
        )

    @property
    def saved(self) -> tuple[str, ...]:
        return self.saves


@dataclass(frozen=True, slots=True)
class Reduction(BaseOp):
    """Normalisation-style op reducing over ``reduce_dims`` of its input (LayerNorm, RMSNorm,
    softmax). A partitioned reduced dim is a :class:`ShardingError`; where a dim name repeats,
    the last dim of that name is the reduced one. The output keeps the input's shape and layout;
    ``saves`` as for :class:`Elementwise`."""

    reduce_dims: tuple[str, ...] = ()
    ops_per_element: int = 5
    saves: tuple[str, ...] = ()
    backward_ops_per_element: int = 8

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        layout = _same_layouts(self, layouts[:1], linear=False)
        for dim in self.reduce_dims:
            # A dim name may repeat (attention scores [B, N, S, S]): the last one is reduced.
            index = len(layout.dims) - 1 - layout.dims[::-1].index(dim)
            if layout.shards[index]:
                raise ShardingError(
                    f"{self.name}: reduces over {dim}, which is partitioned over "
                    f"{'*'.join(layout.shards[index])}"
                )
        return [Layout(tensors[o].dims, layout.shards, (), o) for o in self.outputs]

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        return self._per_element(
            self.ops_per_element, layouts, out_layouts, tensors, sizes, axis_sizes
        )

    @property
    def saved(self) -> tuple[str, ...]:
        return self.saves


@dataclass(frozen=True, slots=True)
class Attention(BaseOp):
    """Fused (flash-style) attention core: ``o = softmax(q·kᵀ/√d)·v``.

    Inputs q ``[B, Sq, N, D]``, k ``[B, Skv, K, D]`` and v ``[B, Skv, K, Dv]`` (K kv heads, N a
    multiple of K; ``Dv = D`` except in latent attention); output ``[B, Sq, N, Dv]``. Forward
    FLOPs ``2·B·Sq·Skv·N·(D + Dv)`` — ``4·B·Sq·Skv·N·D`` for ``Dv = D`` — (two matmuls), halved when
    ``causal``; the backward costs twice the forward (dQ, dK, dV and dP: four matmuls), as in
    Narayanan et al. 2021. Kv heads must be partitioned like the query heads; Skv may be whole
    while Sq is partitioned (all-gather context parallelism), or partitioned like Sq (ring
    attention: :meth:`ring_axes`; the K/V chunks then travel around the ring, and lowering adds
    those point-to-point steps). Saves q, k, v and the output (the softmax
    statistics, O(S) per head, are counted as ``4·B·Sq·N`` bytes of the output's size class).
    """

    causal: bool = False
    #: Serving: the keys are the ``Skv`` cached tokens of each sequence, the queries its last
    #: ``Sq``; query ``i`` sees the ``Skv − Sq + i + 1`` keys up to its own position (exact
    #: count, FlashAttention/paged kernels skip the masked blocks).
    cached: bool = False
    #: Sliding-window attention: the dim whose size is the window ``w`` (query ``p`` sees the
    #: ``min(p + 1, w)`` keys up to its own position); "" for full attention.
    window: str = ""

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        q, k, v = layouts[:3]
        if len(layouts) == 4 and layouts[3].shards[0] != q.shards[2]:
            raise ShardingError(
                f"{self.name}: attention sinks {layouts[3]} must be partitioned like the heads "
                f"of {q}"
            )
        for layout in layouts:
            if layout.partial:
                raise ShardingError(f"{self.name}: attention input {layout} is a partial sum")
        if k.shards != v.shards:
            raise ShardingError(f"{self.name}: k {k} and v {v} must share a layout")
        if q.shards[0] != k.shards[0] or q.shards[2] != k.shards[2] or q.shards[3] != k.shards[3]:
            raise ShardingError(f"{self.name}: q {q} and k {k} differ in batch, heads or head dim")
        if k.shards[1] and k.shards[1] != q.shards[1]:
            raise ShardingError(
                f"{self.name}: keys {k} must hold the whole sequence, or be partitioned like the "
                f"queries {q} (ring attention)"
            )
        out = tensors[self.outputs[0]]
        return [Layout(out.dims, q.shards, (), out.name)]

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        q = layouts[0]
        qt, kt = tensors[self.inputs[0]], tensors[self.inputs[1]]
        batch = local_extent(qt.dims[0], q.shards[0], sizes, axis_sizes)
        sq = local_extent(qt.dims[1], q.shards[1], sizes, axis_sizes)
        skv = sizes[kt.dims[1]]  # every key: whole, or visited around the ring
        heads = local_extent(qt.dims[2], q.shards[2], sizes, axis_sizes)
        head_dim = local_extent(qt.dims[3], q.shards[3], sizes, axis_sizes)
        vt = tensors[self.inputs[2]]
        value_dim = local_extent(vt.dims[3], layouts[2].shards[3], sizes, axis_sizes)
        # Q·Kᵀ over the query/key dim, P·V over the value dim (equal except in MLA).
        if self.window:
            flops = 2 * batch * self._window_pairs(sq, skv, sizes[self.window]) * heads
            flops *= head_dim + value_dim
        elif self.cached:
            visible = sq * (skv - sq) + _div(sq * (sq + 1), 2, f"{self.name} cached keys")
            flops = 2 * batch * visible * heads * (head_dim + value_dim)
        else:
            flops = 2 * batch * sq * skv * heads * (head_dim + value_dim)
        if self.causal and not self.cached and not self.window:
            flops = _div(flops, 2, f"{self.name} causal FLOPs")
        if len(self.inputs) == 4:  # sinks: exp of one logit per (query, head), added to the sum
            flops += 2 * batch * sq * heads
        read, written = self._io_bytes(layouts, out_layouts, tensors, sizes, axis_sizes)
        return Cost(flops, read, written)

    def _window_pairs(self, queries: Size, keys: Size, window: Size) -> Size:
        """(query, key) pairs inside a causal window: the ``queries`` last of ``keys`` positions
        when cached; else all ``keys`` positions' pairs, the local ``queries``' share of them
        (context parallelism: the mean over the ranks, exact when ``queries == keys``)."""
        if self.cached:
            return window_pairs(keys, window) - window_pairs(keys - queries, window)
        total = window_pairs(keys, window)
        return total if queries == keys else total * queries // keys

    @property
    def saved(self) -> tuple[str, ...]:
        return (*self.inputs, *self.outputs)

    @staticmethod
    def ring_axes(layouts: Sequence[Layout]) -> tuple[str, ...]:
        """The axes K/V chunks circulate over (empty unless keys are partitioned)."""
        return layouts[1].shards[1]


def window_pairs(positions: Size, window: Size) -> Size:
    """Causal (query, key) pairs of ``positions`` tokens when each sees at most ``window`` keys:
    ``Σ_{p<n} min(p + 1, w)`` = ``n(n+1)/2`` for ``n ≤ w``, else ``w(w+1)/2 + (n − w)·w``."""
    if not isinstance(positions, int) or not isinstance(window, int):
        raise ShardingError(f"window pairs need bound sizes, got ({positions}, {window})")
    if positions <= window:
        return positions * (positions + 1) // 2
    return window * (window + 1) // 2 + (positions - window) * window


@dataclass(frozen=True, slots=True)
class Embedding(BaseOp):
    """Token embedding lookup ``out[B, S, H] = table[ids[B, S], H]``: a gather, not a matmul.

    A vocabulary partitioned over axes (vocab-parallel) makes the output a partial sum over them
    (each rank contributes the rows it owns). Zero FLOPs; bytes are the rows read and written.
    """

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        ids, table = layouts
        out = tensors[self.outputs[0]]
        if table.shards[1]:
            raise ShardingError(f"{self.name}: the embedding's hidden dim must be whole: {table}")
        return [Layout(out.dims, (*ids.shards, ()), tuple(table.shards[0]), out.name)]

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        out_bytes = layout_bytes(out_layouts[0], tensors[self.outputs[0]], sizes, axis_sizes)
        ids_bytes = layout_bytes(layouts[0], tensors[self.inputs[0]], sizes, axis_sizes)
        return Cost(0, ids_bytes + out_bytes, out_bytes)


@dataclass(frozen=True, slots=True)
class CrossEntropy(BaseOp):
    """Softmax cross-entropy ``loss[B, S]`` of ``logits[B, S, V]`` against targets ``[B, S]``.

    About 5 FLOPs per logit (max, subtract, exp, sum, log-prob). A vocabulary partitioned over
    axes is vocab-parallel: the max, the sum of exponentials and the target logit are all-reduced
    (``stat_collectives`` of ``B·S`` fp32 each), which lowering adds.
    """

    ops_per_logit: int = 5
    stat_collectives: int = 3

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        logits = layouts[0]
        if logits.partial:
            raise ShardingError(f"{self.name}: logits {logits} are a partial sum")
        out = tensors[self.outputs[0]]
        return [Layout(out.dims, logits.shards[:-1], (), out.name)]

    def vocab_axes(self, layouts: Sequence[Layout]) -> tuple[str, ...]:
        return layouts[0].shards[-1]

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        elements = local_elements(layouts[0], sizes, axis_sizes)
        read, written = self._io_bytes(layouts, out_layouts, tensors, sizes, axis_sizes)
        return Cost(self.ops_per_logit * elements, read, written)

    @property
    def saved(self) -> tuple[str, ...]:
        return self.inputs[:1]


@dataclass(frozen=True, slots=True)
class Custom(BaseOp):
    """An op with explicit costs: ``flops``, ``bytes_read``, ``bytes_written`` are expressions
    in dim names (``"2*B*S*H"``), evaluated at the given sizes divided by the axes in
    ``divide_by`` (the per-rank share). Output layouts copy the first input's."""

    flops: str = "0"
    bytes_read: str = "0"
    bytes_written: str = "0"
    divide_by: tuple[str, ...] = ()
    saves: tuple[str, ...] = field(default=())

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        first = layouts[0]
        return [Layout(tensors[o].dims, first.shards, first.partial, o) for o in self.outputs]

    def _eval(self, text: str, sizes: Sizes, axis_sizes: Sizes) -> Size:
        expr = sympy.sympify(text, locals={k: sympy.Symbol(k) for k in sizes})
        value = expr.subs({sympy.Symbol(k): v for k, v in sizes.items()})
        if isinstance(value, sympy.Expr) and value.is_Integer:
            value = int(value)  # bound sizes: let _div check divisibility exactly
        per_rank = _div(value, axis_product(self.divide_by, axis_sizes), f"{self.name} cost")
        if isinstance(per_rank, sympy.Expr) and per_rank.is_Integer:
            return int(per_rank)
        return per_rank

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        return Cost(
            self._eval(self.flops, sizes, axis_sizes),
            self._eval(self.bytes_read, sizes, axis_sizes),
            self._eval(self.bytes_written, sizes, axis_sizes),
        )

    @property
    def saved(self) -> tuple[str, ...]:
        return self.saves
