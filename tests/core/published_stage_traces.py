"""A small trace set in the format of the published STAGE generator, for ``stage check`` tests.

Constructed here, from a description of the format, to mirror what the published STAGE
generator (``symbolic_tensor_graph``, its Chakra 0.0.4 backend) writes; no code of that project
is used. The features mirrored, as read in that project's public source:

- the ``GlobalMetadata`` carries no ``version``, only an attribute ``schema`` =
  ``"symbolic_tensor_network"``;
- tensors are listed in ``inputs``/``outputs`` attributes as string lists of alternating name
  and size, the size written with ``str()`` of an evaluated sympy expression, so a float such as
  ``"4096.0"`` or ``"4096.00000000000"``;
- a node whose tensor list is empty still carries the attribute, with no value at all (no
  ``string_list``): communication nodes have ``outputs`` without a value, receives ``inputs``;
- ``num_ops`` and ``comm_size`` are ``int64_val``, ``tensor_size`` ``uint64_val``, ``comm_tag``,
  ``comm_src``, ``comm_dst`` and ``is_cpu_op`` ``int32_val``; compute nodes carry ``op_type``;
  collectives name their group with ``pg_name`` (a string) listed in ``comm_group.json``;
  sends carry no ``comm_src`` and receives no ``comm_dst``.

The set: 4 ranks, tensor parallel 2 × pipeline 2. Stage 0 (ranks 0, 1) embeds, all-reduces over
its tensor-parallel pair, computes and sends to its stage-1 peer; stage 1 (ranks 2, 3) receives,
computes and all-reduces. ``defect`` plants one real error for the checker to catch.

Run ``python -m tests.core.published_stage_traces DIR [DEFECT]`` to write it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from stage_core.chakra.schema import CollectiveCommType, GlobalMetadata, Node, NodeType
from stage_core.chakra.wire import encode_varint

#: Planted errors: a fractional tensor size (unreadable), a receive whose tag matches no send,
#: collectives of one group with different sizes, a group id missing from comm_group.json.
DEFECTS = ("fractional-size", "unmatched-recv", "collective-size", "unknown-group")
#: Not a defect: the generator's legacy form, groups named by an ``int32_val`` ``comm_group``
#: attribute instead of ``pg_name`` (and no ``is_cpu_op``).
LEGACY = "legacy-comm-group"

HIDDEN = 4096
TOKENS = 2048


def _attr(node: Any, name: str, **value: object) -> None:
    attribute = node.attr.add()
    attribute.name = name
    for field, item in value.items():
        setattr(attribute, field, item)


def _tensors(node: Any, name: str, pairs: list[tuple[str, str]]) -> None:
    """``inputs``/``outputs`` as the published generator writes them; no value when empty."""
    attribute = node.attr.add()
    attribute.name = name
    for tensor, size in pairs:
        attribute.string_list.values.append(tensor)
        attribute.string_list.values.append(size)


def _node(node_id: int, name: str, node_type: NodeType, deps: tuple[int, ...]) -> Any:
    node = Node()
    node.id = node_id
    node.name = name
    node.type = node_type
    node.data_deps.extend(deps)
    return node


def _comp(
    node_id: int,
    name: str,
    deps: tuple[int, ...],
    ins: list[tuple[str, str]],
    outs: list[tuple[str, str]],
    ops: int,
) -> Any:
    node = _node(node_id, name, NodeType.COMP_NODE, deps)
    _tensors(node, "inputs", ins)
    _tensors(node, "outputs", outs)
    _attr(node, "num_ops", int64_val=ops)
    _attr(node, "tensor_size", uint64_val=sum(int(float(size)) for _, size in ins + outs))
    _attr(node, "op_type", string_val="M")
    return node


def rank_nodes(rank: int, defect: str | None = None) -> list[Any]:
    """The nodes of ``rank``'s file (see the module docstring)."""
    act = (f"x@{rank}[{TOKENS},{HIDDEN}]", f"{float(TOKENS * HIDDEN)}")
    weight = (f"w@{rank}[{HIDDEN},{HIDDEN}]", f"{TOKENS * HIDDEN:.11f}")  # sympy Float style
    if defect == "fractional-size" and rank == 1:
        weight = (weight[0], "4096.5")
    pg_name = ("1" if rank < 2 else "2") if defect != "unknown-group" else "9"
    comm_size = HIDDEN * TOKENS + (2 if defect == "collective-size" and rank == 3 else 0)
    coll = _node(2, "X1_COMM", NodeType.COMM_COLL_NODE, (1,))
    _tensors(coll, "inputs", [act])
    _tensors(coll, "outputs", [])
    _attr(coll, "comm_size", int64_val=comm_size)
    _attr(coll, "comm_type", int64_val=int(CollectiveCommType.ALL_REDUCE))
    if defect == LEGACY:
        _attr(coll, "comm_group", int32_val=int(pg_name))
    else:
        _attr(coll, "pg_name", string_val=pg_name)
        _attr(coll, "is_cpu_op", int32_val=0)
    peer_tag = 100 + rank % 2
    if rank < 2:
        send = _node(4, "Y_SEND", NodeType.COMM_SEND_NODE, (3,))
        _tensors(send, "inputs", [act])
        _tensors(send, "outputs", [])
        _attr(send, "comm_size", int64_val=HIDDEN * TOKENS)
        _attr(send, "comm_tag", int32_val=peer_tag)
        _attr(send, "comm_dst", int32_val=rank + 2)
        _attr(send, "is_cpu_op", int32_val=0)
        return [
            _comp(
                1,
                "embedding_COMP",
                (),
                [(f"tokens@{rank}[{TOKENS}]", f"{float(TOKENS)}")],
                [act],
                0,
            ),
            coll,
            _comp(3, "mlp_COMP", (2,), [act, weight], [act], 2 * TOKENS * HIDDEN * HIDDEN),
            send,
        ]
    recv = _node(1, "Y_RECV", NodeType.COMM_RECV_NODE, ())
    _tensors(recv, "inputs", [])
    _tensors(recv, "outputs", [act])
    _attr(recv, "comm_size", int64_val=HIDDEN * TOKENS)
    tag = peer_tag + (1000 if defect == "unmatched-recv" and rank == 3 else 0)
    _attr(recv, "comm_tag", int32_val=tag)
    _attr(recv, "comm_src", int32_val=rank - 2)
    _attr(recv, "is_cpu_op", int32_val=0)
    head = _comp(3, "head_COMP", (1,), [act, weight], [act], 2 * TOKENS * HIDDEN * HIDDEN)
    coll.ClearField("data_deps")
    coll.data_deps.append(3)
    coll.id = 4
    return [recv, head, coll]


def _delimited(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return encode_varint(len(data)) + data


def write_published_trace_set(directory: Path | str, defect: str | None = None) -> Path:
    """Write ``workload.<rank>.et`` for ranks 0-3 and ``comm_group.json`` into ``directory``."""
    if defect is not None and defect not in (*DEFECTS, LEGACY):
        raise ValueError(f"defect must be one of {DEFECTS}, got {defect!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    metadata = GlobalMetadata()
    _attr(metadata, "schema", string_val="symbolic_tensor_network")
    for rank in range(4):
        data = _delimited(metadata) + b"".join(map(_delimited, rank_nodes(rank, defect)))
        (directory / f"workload.{rank}.et").write_bytes(data)
    (directory / "comm_group.json").write_text(json.dumps({"1": [0, 1], "2": [2, 3]}))
    return directory


if __name__ == "__main__":
    write_published_trace_set(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
