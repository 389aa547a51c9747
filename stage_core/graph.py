"""Single-device blocks: a builder, shape validation and a stable text dump.

A :class:`Block` holds named tensors and an ordered list of ops (a topological order: every op
comes after the producers of its inputs). Blocks are written once, for one device, with no
sharding in them; :mod:`stage_core.sharding` assigns layouts separately.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from stage_core.errors import ConfigError
from stage_core.ops import (
    Attention,
    BaseOp,
    CrossEntropy,
    Custom,
    Einsum,
    Elementwise,
    Embedding,
    Reduction,
    Tensor,
)


@dataclass(slots=True)
class Block:
    """A single-device graph: tensors by name, ops in order, declared inputs and outputs."""

    name: str
    tensors: dict[str, Tensor] = field(default_factory=dict)
    ops: list[BaseOp] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    #: Bytes per weight element unless a weight says otherwise (1 for FP8 serving weights).
    weight_bytes: int = 2

    # -- builder ------------------------------------------------------------------------------

    def tensor(
        self, name: str, dims: Iterable[str], dtype_bytes: int = 2, role: str = "activation"
    ) -> str:
        if name in self.tensors:
            raise ConfigError(f"block {self.name!r}: tensor {name!r} is defined twice")
        self.tensors[name] = Tensor(name, tuple(dims), dtype_bytes, role)
        return name

    def input(self, name: str, dims: Iterable[str], dtype_bytes: int = 2) -> str:
        self.inputs.append(self.tensor(name, dims, dtype_bytes, "input"))
        return name

    def weight(self, name: str, dims: Iterable[str], dtype_bytes: int | None = None) -> str:
        width = self.weight_bytes if dtype_bytes is None else dtype_bytes
        return self.tensor(name, dims, width, "weight")

    def output(self, *names: str) -> None:
        self.outputs.extend(names)

    def _known(self, name: str) -> Tensor:
        if name not in self.tensors:
            raise ConfigError(f"block {self.name!r}: unknown tensor {name!r}")
        return self.tensors[name]

    def _add(self, op: BaseOp, out: str, dims: Iterable[str], dtype_bytes: int) -> str:
        unknown = [t for t in op.inputs if t not in self.tensors]
        if unknown:
            raise ConfigError(
                f"block {self.name!r}: op {op.name!r} reads unknown tensor {unknown[0]!r}"
            )
        self.tensor(out, dims, dtype_bytes)
        self.ops.append(op)
        return out

    def einsum(self, subscripts: str, *inputs: str, out: str, name: str = "") -> str:
        """``out = einsum(subscripts, *inputs)``; output dims follow from the subscripts."""
        left, _, right = subscripts.replace(" ", "").partition("->")
        dims_of: dict[str, str] = {}
        for labels, tensor in zip(left.split(","), inputs, strict=True):
            dims = self._known(tensor).dims
            if len(labels) != len(dims):
                raise ConfigError(
                    f"block {self.name!r}: einsum {subscripts!r} gives {len(labels)} labels for "
                    f"{tensor!r}, which has dims {dims}"
                )
            for label, dim in zip(labels, dims, strict=True):
                if dims_of.setdefault(label, dim) != dim:
                    raise ConfigError(
                        f"block {self.name!r}: einsum {subscripts!r} label {label!r} is dim "
                        f"{dims_of[label]} in one input and {dim} in {tensor!r}"
                    )
        out_dims = [dims_of[label] for label in right]
        op = Einsum(name or out, tuple(inputs), (out,), subscripts)
        return self._add(op, out, out_dims, 2)

    def elementwise(
        self,
        *inputs: str,
        out: str,
        ops_per_element: int = 1,
        linear: bool = False,
        saves: tuple[str, ...] = (),
        mask_bytes: int = 0,
        backward_ops_per_element: int = 1,
        name: str = "",
    ) -> str:
        """``out`` element-wise of ``inputs`` (broadcast operands: biases, norm scales).
        ``mask_bytes`` > 0 makes a dropout: like PyTorch's ``native_dropout`` (derivatives.yaml:
        ``native_dropout_backward(grad, result1, scale)``) it also writes a mask ``<out>.mask``
        of ``mask_bytes`` per element (a bool tensor: 1), which its backward reads instead of
        any input; Megatron's fused bias-dropout-add keeps the same mask."""
        dims = self._known(inputs[0]).dims
        for tensor in inputs[1:]:
            other = self._known(tensor)
            broadcast = set(other.dims) < set(dims)  # a bias, a norm scale, positions
            if other.dims != dims and not broadcast:
                raise ConfigError(
                    f"block {self.name!r}: element-wise {out!r} mixes dims {dims} and "
                    f"{self._known(tensor).dims}"
                )
        outputs: tuple[str, ...] = (out,)
        if mask_bytes:  # dropout: its mask is an output of its own, saved for the backward
            mask = f"{out}.mask"
            outputs, saves = (out, mask), (*saves, mask)
        op = Elementwise(
            name or out,
            tuple(inputs),
            outputs,
            ops_per_element,
            linear,
            saves,
            backward_ops_per_element,
        )
        self._add(op, out, dims, self._known(inputs[0]).dtype_bytes)
        if mask_bytes:
            self.tensor(outputs[1], dims, mask_bytes)
        return out

    def reduction(
        self,
        inputs: tuple[str, ...],
        out: str,
        reduce_dims: tuple[str, ...],
        ops_per_element: int = 5,
        saves: tuple[str, ...] = (),
        backward_ops_per_element: int = 8,
        name: str = "",
    ) -> str:
        op = Reduction(
            name or out,
            inputs,
            (out,),
            reduce_dims,
            ops_per_element,
            saves,
            backward_ops_per_element,
        )
        return self._add(op, out, self._known(inputs[0]).dims, 2)

    def attention(
        self,
        q: str,
        k: str,
        v: str,
        out: str,
        causal: bool,
        name: str = "",
        cached: bool = False,
        window: str = "",
        sinks: str = "",
    ) -> str:
        qd, kd, vd = (self._known(t).dims for t in (q, k, v))
        if (
            len(qd) != 4 or len(kd) != 4 or len(vd) != 4 or kd[:3] != vd[:3]
            or qd[0] != kd[0] or qd[3] != kd[3]
        ):  # fmt: skip
            raise ConfigError(
                f"block {self.name!r}: attention needs q[B,S,N,D], k[B,S,K,D], v[B,S,K,Dv]; "
                f"got {qd}, {kd}, {vd}"
            )
        dims = (*qd[:3], vd[3])
        inputs = (q, k, v, sinks) if sinks else (q, k, v)
        op = Attention(name or out, inputs, (out,), causal, cached, window)
        return self._add(op, out, dims, 2)

    def embedding(self, ids: str, table: str, out: str, name: str = "") -> str:
        dims = (*self._known(ids).dims, self._known(table).dims[1])
        return self._add(Embedding(name or out, (ids, table), (out,)), out, dims, 2)

    def cross_entropy(self, logits: str, targets: str, out: str, name: str = "") -> str:
        dims = self._known(logits).dims[:-1]
        op = CrossEntropy(name or out, (logits, targets), (out,))
        return self._add(op, out, dims, 4)

    def custom(self, op: Custom, dims: Iterable[str], dtype_bytes: int = 2) -> str:
        return self._add(op, op.outputs[0], dims, dtype_bytes)

    def add_op(self, op: BaseOp, dims: Iterable[str], dtype_bytes: int = 2) -> str:
        """Add any op with one output of the given dims."""
        return self._add(op, op.outputs[0], dims, dtype_bytes)

    # -- checks and printing ------------------------------------------------------------------

    def producer(self) -> dict[str, BaseOp]:
        return {out: op for op in self.ops for out in op.outputs}

    def validate(self) -> Block:
        """Check the op order, that every tensor exists, and that outputs are produced."""
        available = {n for n, t in self.tensors.items() if t.role in ("input", "weight", "index")}
        names = set()
        for op in self.ops:
            if op.name in names:
                raise ConfigError(f"block {self.name!r}: op name {op.name!r} is used twice")
            names.add(op.name)
            for tensor in op.inputs:
                if tensor not in self.tensors:
                    raise ConfigError(
                        f"block {self.name!r}: op {op.name!r} reads unknown {tensor!r}"
                    )
                if tensor not in available:
                    raise ConfigError(
                        f"block {self.name!r}: op {op.name!r} reads {tensor!r} "
                        "before it is produced"
                    )
            available.update(op.outputs)
        for tensor in self.outputs:
            if tensor not in available:
                raise ConfigError(f"block {self.name!r}: output {tensor!r} is never produced")
        return self

    def dump(self) -> str:
        """A stable, readable text form, one line per tensor and op."""
        lines = [f"block {self.name}"]
        for tensor in self.tensors.values():
            lines.append(
                f"  {tensor.role:10s} {tensor.name}[{', '.join(tensor.dims)}] {tensor.dtype_bytes}B"
            )
        for op in self.ops:
            lines.append(
                f"  {op.kind:12s} {op.name}: {', '.join(op.inputs)} -> {', '.join(op.outputs)}"
            )
        lines.append(f"  outputs {', '.join(self.outputs)}")
        return "\n".join(lines)
