"""Derived backward passes, activation recompute and the tensors saved for backward.

:func:`derive_backward` walks a sharded forward in reverse and builds, for every op, its
gradient ops with their layouts:

- einsum gradients are einsums with permuted subscripts (``dA = einsum(dY, B)``), so a
  contracted partitioned dim again yields a partial sum;
- element-wise, reduction, attention, embedding and cross-entropy gradients are
  :class:`BackwardOp` s costed by the forward op's documented backward cost;
- a gradient arrives in its tensor's stored layout and is redistributed to the layout the
  backward op needs; a saved input whose consumed layout differs from its stored one is
  re-gathered (Megatron's sequence parallelism does exactly this); an input gradient is
  redistributed from its natural layout to the tensor's stored layout, and contributions of
  several consumers (residual streams) are summed;
- weight gradients keep their natural layout: the axes over which they are partial sums are the
  ones the step-level gradient synchronisation reduces over (once per step, not per micro-batch).

Recompute: ``none`` saves what each op needs; ``selective`` drops what the ops of the
recompute region save (Korthikanti et al. 2022: the attention core) and re-runs the region
before its backward; ``full`` saves only the block inputs and re-runs the whole forward.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stage_core.errors import ShardingError
from stage_core.layout import Layout
from stage_core.mesh import Size
from stage_core.ops import (
    Attention,
    BaseOp,
    Cost,
    CrossEntropy,
    Custom,
    Einsum,
    Elementwise,
    Embedding,
    Reduction,
    Sizes,
    Tensor,
    layout_bytes,
    local_elements,
)
from stage_core.ops_mla import HeadConcat
from stage_core.ops_moe import Combine, Dispatch
from stage_core.ops_ssm import SSM_OPS, SSDScan, grad_layouts, ssm_backward_flops
from stage_core.sharding import (
    CommStep,
    OpStep,
    ShardedForward,
    Step,
    _comm_steps,
    same_layout,
    strip_partial,
)

NO_GRAD_ROLES = ("index",)


@dataclass(frozen=True, slots=True)
class BackwardOp(BaseOp):
    """The gradient of a non-einsum forward op; outputs are the gradients of ``grads_of``."""

    forward: BaseOp | None = None
    forward_in: tuple[Layout, ...] = ()
    forward_out: tuple[Layout, ...] = ()
    grad_layouts: tuple[Layout, ...] = ()

    def infer(self, layouts: Sequence[Layout], tensors: Mapping[str, Tensor]) -> list[Layout]:
        return list(self.grad_layouts)

    @property
    def kind(self) -> str:
        """``attention`` for the attention backward and ``ssdscan`` for Mamba-2's scan (their
        FLOPs are model FLOPs, like the forward's); ``backwardop`` for the other gradients."""
        if isinstance(self.forward, SSDScan):
            return "ssdscan"
        return "attention" if isinstance(self.forward, Attention) else "backwardop"

    def cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        if isinstance(self.forward, Elementwise) and self.forward.linear:
            return self._add_cost(layouts, out_layouts, tensors, sizes, axis_sizes)
        flops = backward_flops(
            self.forward, self.forward_in, self.forward_out, tensors, sizes, axis_sizes
        )
        read, written = self._io_bytes(layouts, out_layouts, tensors, sizes, axis_sizes)
        if isinstance(self.forward, SSDScan):  # the backward kernels' HBM intermediates
            extra = self.forward.backward_intermediate_bytes(
                self.forward_in, tensors, sizes, axis_sizes
            )
            read, written = read + extra, written + extra
        return Cost(flops, read, written)

    def _add_cost(
        self,
        layouts: Sequence[Layout],
        out_layouts: Sequence[Layout],
        tensors: Mapping[str, Tensor],
        sizes: Sizes,
        axis_sizes: Sizes,
    ) -> Cost:
        """The backward of an add (residual, bias, embedding sum): an operand of the output's
        shape receives the output gradient itself — derivatives.yaml ``add.Tensor``: ``self:
        grad``, ``other: maybe_multiply(grad, alpha)``, which returns ``grad`` for ``alpha``
        1 — so no kernel runs for it; a broadcast operand (a bias) gets the gradient summed
        to its shape (autograd's ``sum_to``, or ``grad_output.sum(dim=0)`` in Megatron's
        linear layers): one reduction reading the gradient and writing the small one."""
        dout = tensors[self.inputs[0]]
        small = [
            (layout, tensors[name])
            for name, layout in zip(self.outputs, out_layouts, strict=True)
            if set(tensors[name].dims) < set(dout.dims)
        ]
        if not small:
            return Cost(0, 0, 0)
        elements = local_elements(layouts[0], sizes, axis_sizes)
        written: Size = 0
        for layout, tensor in small:
            written = written + layout_bytes(layout, tensor, sizes, axis_sizes)
        return Cost(len(small) * elements, len(small) * elements * dout.dtype_bytes, written)


def backward_flops(
    op: BaseOp | None,
    in_layouts: Sequence[Layout],
    out_layouts: Sequence[Layout],
    tensors: Mapping[str, Tensor],
    sizes: Sizes,
    axis_sizes: Sizes,
) -> Size:
    """The documented backward FLOPs of a non-einsum op."""
    assert op is not None
    if isinstance(op, Elementwise):
        return op.backward_ops_per_element * local_elements(out_layouts[0], sizes, axis_sizes)
    if isinstance(op, Reduction):
        return op.backward_ops_per_element * local_elements(in_layouts[0], sizes, axis_sizes)
    if isinstance(op, Attention):
        return 2 * op.cost(in_layouts, out_layouts, tensors, sizes, axis_sizes).flops
    if isinstance(op, CrossEntropy):
        return 2 * local_elements(in_layouts[0], sizes, axis_sizes)
    if isinstance(op, Embedding):
        return local_elements(out_layouts[0], sizes, axis_sizes)
    if isinstance(op, Custom):
        return 2 * op.cost(in_layouts, out_layouts, tensors, sizes, axis_sizes).flops
    if isinstance(op, Dispatch):
        return 0
    if isinstance(op, HeadConcat):
        return op.shared_grad_flops(in_layouts, out_layouts, sizes, axis_sizes)
    if isinstance(op, Combine):
        return 2 * op.cost(in_layouts, out_layouts, tensors, sizes, axis_sizes).flops
    if isinstance(op, SSM_OPS):
        return ssm_backward_flops(op, in_layouts, out_layouts, tensors, sizes, axis_sizes)
    raise ShardingError(f"no backward rule for op {op.name!r} of kind {op.kind}")


@dataclass(frozen=True, slots=True)
class SavedTensor:
    """A tensor kept from forward to backward, in ``layout``, ``bytes_per_element`` each."""

    name: str
    layout: Layout
    bytes_per_element: int

    def bytes(self, sizes: Sizes, axis_sizes: Sizes) -> object:
        return local_elements(self.layout, sizes, axis_sizes) * self.bytes_per_element


@dataclass(frozen=True, slots=True)
class ShardedBackward:
    """The backward steps of a block, the weight-gradient layouts and the saved tensors."""

    steps: tuple[Step, ...]
    weight_grads: Mapping[str, Layout]
    saved: tuple[SavedTensor, ...]
    tensors: Mapping[str, Tensor]


def grad_name(tensor: str) -> str:
    return f"d.{tensor}"


def _saved_tensors(
    fwd: ShardedForward,
    recompute: str,
    region: frozenset[str],
    discard: frozenset[str] = frozenset(),
) -> tuple[SavedTensor, ...]:
    tensors = fwd.tensors
    result: dict[str, SavedTensor] = {}

    def keep(name: str, bytes_per_element: int | None = None) -> None:
        tensor = tensors[name]
        if tensor.role == "weight" or name in result:
            return
        per = tensor.dtype_bytes if bytes_per_element is None else bytes_per_element
        result[name] = SavedTensor(name, fwd.stored[name], per)

    if recompute == "full":
        for name in fwd.block.inputs:
            if tensors[name].role != "index":
                keep(name)
        return tuple(result.values())
    produced_in_region = {
        o for s in fwd.steps if isinstance(s, OpStep) and s.op.name in region for o in s.op.outputs
    }
    for step in fwd.steps:
        if not isinstance(step, OpStep):
            continue
        op = step.op
        if recompute == "selective" and op.name in region:
            for name in op.inputs:
                if name not in produced_in_region:
                    keep(name)
            continue
        for name in op.saved:
            keep(name)
    if recompute == "selective":  # output-discarding regions: outputs freed once consumed
        for name in _outputs_of(fwd, discard):
            result.pop(name, None)
    return tuple(result.values())


def _outputs_of(fwd: ShardedForward, ops: frozenset[str]) -> set[str]:
    return {
        o for s in fwd.steps if isinstance(s, OpStep) and s.op.name in ops for o in s.op.outputs
    }


class _Builder:
    """State of one reverse walk."""

    def __init__(self, fwd: ShardedForward) -> None:
        self.fwd = fwd
        self.tensors: dict[str, Tensor] = dict(fwd.tensors)
        self.steps: list[Step] = []
        self.grad: dict[str, Layout] = {}
        self.pending: dict[str, list[Layout]] = {}
        self.weight_grads: dict[str, Layout] = {}
        self.regathered: set[tuple[str, str]] = set()

    def comm(self, tensor: str, src: Layout, dst: Layout, reason: str) -> None:
        if not same_layout(src, dst):
            dtype = self.tensors[tensor].dtype_bytes
            self.steps += _comm_steps(tensor, src, dst, self.fwd.mesh, "bwd", reason, dtype)

    def grad_tensor(self, name: str) -> str:
        gname = grad_name(name)
        if gname not in self.tensors:
            base = self.tensors[name]
            self.tensors[gname] = Tensor(gname, base.dims, base.dtype_bytes, "gradient")
        return gname

    def deliver(self, name: str, natural: Layout, op: str) -> None:
        """Record a gradient contribution to ``name``; contributions are summed in their
        natural layout and redistributed once, when the gradient is needed (so the three
        projections reading one normalised input cost one reduce-scatter, as a fused QKV)."""
        tensor = self.tensors[name]
        if tensor.role in NO_GRAD_ROLES:
            return
        if tensor.role == "weight":
            if name in self.weight_grads and not same_layout(self.weight_grads[name], natural):
                raise ShardingError(f"weight {name!r} gets gradients in two layouts")
            self.weight_grads[name] = natural
            return
        self.pending.setdefault(name, []).append(natural)

    def _accumulate(self, gname: str, layout: Layout, op: str) -> None:
        add = Elementwise(f"{op}.accumulate.{gname}", (gname, gname), (gname,), 1, True)
        self.steps.append(OpStep(add, (layout, layout), (layout,), "bwd"))

    def settle(self, name: str, op: str, target: Layout | None = None) -> None:
        """Sum the pending contributions to ``name`` and bring them to ``target`` (default: the
        stored layout)."""
        contributions = self.pending.pop(name, [])
        if not contributions:
            return
        gname = grad_name(name)
        if target is None:
            target = _renamed(strip_partial(self.fwd.stored[name]), gname)
        groups: list[Layout] = []
        for layout in contributions:
            if any(same_layout(layout, seen) for seen in groups):
                self._accumulate(gname, layout, op)
            else:
                groups.append(layout)
        for index, layout in enumerate(groups):
            self.comm(gname, layout, target, f"grad:{op}")
            if index or name in self.grad:
                self._accumulate(gname, target, op)
        self.grad[name] = target

    def need_output_grad(
        self, name: str, natural: Layout, op: str, keep_partial: bool = False
    ) -> Layout:
        """The gradient of ``name`` in the layout its producer's backward needs. Contributions
        not yet summed go straight there (e.g. the routed tokens' gradient, partial over tp, is
        reduce-scattered into the slots the dispatch filled instead of all-reduced into the
        stored layout and sliced). ``keep_partial``: contributions partial over some axes in
        the natural shards stay partial (the all-gather dispatcher's reduce-scatter sums them
        with the experts' partial sums)."""
        need = _renamed(strip_partial(natural), grad_name(name))
        pending = self.pending.get(name, [])
        if (  # a local dispatch's backward sums partial slot gradients into its own reduction
            keep_partial
            and name not in self.grad
            and pending
            and all(same_layout(c, pending[0]) for c in pending)
            and pending[0].shards == need.shards
        ):
            need = _renamed(pending[0], grad_name(name))
        self.settle(name, op, None if name in self.grad else need)
        self.comm(self.grad_tensor(name), self.grad[name], need, f"dout:{op}")
        return need

    def regather(self, step: OpStep, name: str) -> None:
        stored = self.fwd.stored[name]
        consumed = self.fwd.consumed[(step.op.name, name)]
        key = (name, str(consumed))
        if self.tensors[name].role != "weight" and key not in self.regathered:
            self.regathered.add(key)
            self.comm(name, stored, consumed, f"regather:{step.op.name}")


def _einsum_grads(b: _Builder, step: OpStep, dout_layout: Layout) -> None:
    op = step.op
    assert isinstance(op, Einsum)
    left, _, right = op.subscripts.replace(" ", "").partition("->")
    subs = left.split(",")
    dout = b.grad_tensor(op.outputs[0])
    wanted = [i for i, n in enumerate(op.inputs) if b.tensors[n].role not in NO_GRAD_ROLES]
    needed = {o for i in wanted for o in range(len(op.inputs)) if o != i}
    for other in sorted(needed):
        b.regather(step, op.inputs[other])
    for index in wanted:
        name = op.inputs[index]
        others = [i for i in range(len(op.inputs)) if i != index]
        gname = b.grad_tensor(name)
        grad_subs = ",".join([right] + [subs[i] for i in others]) + "->" + subs[index]
        grad_op = Einsum(
            f"{op.name}.d{name}", (dout, *(op.inputs[i] for i in others)), (gname,), grad_subs
        )
        layouts = (dout_layout, *(step.in_layouts[i] for i in others))
        natural = _renamed(grad_op.infer(layouts, b.tensors)[0], gname)
        b.steps.append(OpStep(grad_op, layouts, (natural,), "bwd"))
        b.deliver(name, natural, op.name)


def _broadcast_grad_layout(activation: Layout, weight: Tensor) -> Layout:
    """Gradient of a weight broadcast against ``activation``: partial over the other axes."""
    shards = []
    for dim in weight.dims:
        shards.append(
            activation.shards[activation.dims.index(dim)] if dim in activation.dims else ()
        )
    used = {a for axes in shards for a in axes}
    partial = tuple(a for a in activation.axes_used if a not in used)
    return Layout(weight.dims, tuple(shards), partial, weight.name)


def _local_experts(op: BaseOp, step: OpStep, consumed: Layout) -> tuple[str, ...]:
    """The axes partitioning the experts of a dispatch's slots or a combine's, when the token
    input ``consumed`` (tokens or gates, not the slots) is whole over them; else ()."""
    if isinstance(op, Dispatch):
        slots = step.out_layouts[0]
    elif isinstance(op, Combine):
        slots = step.in_layouts[0]
    else:
        return ()
    if consumed.dims == slots.dims:
        return ()
    return tuple(a for a in slots.shards[0] if a not in consumed.axes_used)


def _generic_grads(b: _Builder, step: OpStep, dout_layout: Layout) -> None:
    op = step.op
    wanted = [n for n in op.inputs if b.tensors[n].role not in NO_GRAD_ROLES]
    if not wanted:
        return
    for name in op.inputs:
        if name in op.saved:
            b.regather(step, name)
    layouts: list[Layout] = []
    for name in wanted:
        index = op.inputs.index(name)
        consumed = step.in_layouts[index]
        tensor = b.tensors[name]
        if isinstance(op, SSM_OPS):  # Mamba-2's conv and scan: weight gradients reduced per step
            stored = [b.fwd.stored[n] for n in op.inputs]
            every = grad_layouts(op, step.in_layouts, stored, dout_layout, b.tensors)
            layouts.append(every[index])
            continue
        if isinstance(op, Attention) and index in (1, 2):
            # dK, dV: every query chunk contributes; with ring attention the ring returns them.
            q_axes = tuple(a for a in step.in_layouts[0].shards[1] if a not in consumed.shards[1])
            layouts.append(consumed.with_shards(consumed.shards, q_axes))
        elif isinstance(op, HeadConcat) and index == 1 and len(tensor.dims) == 3:
            # MLA's RoPE key, shared by the heads: its gradient sums over the local heads.
            layouts.append(_broadcast_grad_layout(dout_layout, tensor))
        elif isinstance(op, Embedding) and tensor.role == "weight":
            layouts.append(consumed.with_shards(consumed.shards, step.in_layouts[0].axes_used))
        elif set(tensor.dims) < set(b.tensors[op.outputs[0]].dims):
            layouts.append(_broadcast_grad_layout(dout_layout, tensor))
        elif local := _local_experts(op, step, consumed):
            # tokens gathered over the expert group (all-gather dispatcher): a rank's local
            # experts give a partial gradient of every gathered token, reduce-scattered back
            partial = local + tuple(a for a in dout_layout.partial if a not in local)
            layouts.append(consumed.with_shards(consumed.shards, partial))
        else:
            layouts.append(strip_partial(consumed))
    grads = tuple(b.grad_tensor(n) for n in wanted)
    layouts = [_renamed(layout, g) for layout, g in zip(layouts, grads, strict=True)]
    # The backward reads the output gradient and what the forward saved, inputs or outputs:
    # softmax its output (derivatives.yaml: _softmax_backward_data(grad, result, dim, dtype);
    # Megatron's scaled_masked_softmax_backward(output_grads, softmax_results, scale)), dropout
    # its mask (native_dropout_backward(grad, result1, scale)), flash attention q, k, v and its
    # output (_flash_attention_backward(grad_out, query, key, value, out, logsumexp, ...)).
    saved_in = tuple(n for n in op.inputs if n in op.saved)
    saved_out = tuple(n for n in op.outputs if n in op.saved and n not in op.inputs)
    reads = (b.grad_tensor(op.outputs[0]), *saved_in, *saved_out)
    read_layouts = (
        dout_layout,
        *(step.in_layouts[op.inputs.index(n)] for n in saved_in),
        *(step.out_layouts[op.outputs.index(n)] for n in saved_out),
    )
    grad_op = BackwardOp(
        f"{op.name}.backward", reads, grads, op, step.in_layouts, step.out_layouts, tuple(layouts)
    )
    b.steps.append(OpStep(grad_op, read_layouts, tuple(layouts), "bwd"))
    for name, layout in zip(wanted, layouts, strict=True):
        b.deliver(name, layout, op.name)


def derive_backward(
    fwd: ShardedForward,
    output_grads: Mapping[str, Layout] | None = None,
    recompute: str = "none",
    region: frozenset[str] = frozenset(),
    discard: frozenset[str] = frozenset(),
) -> ShardedBackward:
    """The backward pass of ``fwd``; block outputs receive gradients in their stored layouts
    (or ``output_grads``). Under selective recompute the ops in ``region`` re-run (once, before
    the first backward op that is in the region or reads an output of a ``discard`` op); the
    outputs of ``discard`` ops (output-discarding checkpoints, :mod:`stage_core.recompute`) are
    not kept."""
    b = _Builder(fwd)
    for name in fwd.block.outputs:
        b.grad_tensor(name)
        seed = (output_grads or {}).get(name, strip_partial(fwd.stored[name]))
        b.grad[name] = _renamed(seed, grad_name(name))
    if recompute == "full":
        b.steps += [_as_recompute(s) for s in fwd.steps]
    op_steps = [s for s in fwd.steps if isinstance(s, OpStep)]
    recomputed = recompute != "selective"
    discarded = _outputs_of(fwd, discard)
    for step in reversed(op_steps):
        op = step.op
        live = [o for o in op.outputs if o in b.grad or o in b.pending]
        if not live:
            continue
        if not recomputed and (op.name in region or discarded.intersection(op.saved)):
            b.steps += [_as_recompute(s) for s in fwd.steps if _in_region(s, region)]
            recomputed = True
        local = isinstance(op, Dispatch) and bool(step.out_layouts[0].shards[0])
        dout_layout = b.need_output_grad(live[0], step.out_layouts[0], op.name, local)
        if isinstance(op, Einsum):
            _einsum_grads(b, step, dout_layout)
        else:
            _generic_grads(b, step, dout_layout)
    for name in fwd.block.inputs:
        b.settle(name, "inputs")
    saved = _saved_tensors(fwd, recompute, region, discard)
    return ShardedBackward(tuple(b.steps), b.weight_grads, saved, b.tensors)


def _renamed(layout: Layout, name: str) -> Layout:
    return Layout(layout.dims, layout.shards, layout.partial, name, layout.sizes)


def _in_region(step: Step, region: frozenset[str]) -> bool:
    if isinstance(step, OpStep):
        return step.op.name in region
    return step.reason.partition(":")[2] in region


def _as_recompute(step: Step) -> Step:
    if isinstance(step, OpStep):
        return OpStep(step.op, step.in_layouts, step.out_layouts, "recompute", step.region)
    return CommStep(step.tensor, step.step, "recompute", step.reason)


def saved_bytes(bwd: ShardedBackward, sizes: Sizes, axis_sizes: Sizes) -> int:
    """Activation bytes one block keeps per micro-batch, exact."""
    total = 0
    for item in bwd.saved:
        total += int(item.bytes(sizes, axis_sizes))  # type: ignore[call-overload]
    return total


__all__ = [
    "BackwardOp",
    "SavedTensor",
    "ShardedBackward",
    "derive_backward",
    "grad_name",
    "layout_bytes",
    "saved_bytes",
]
