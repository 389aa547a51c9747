"""Emitting a program set: Chakra files for every rank, readable JSON, and the symmetric form.

The ranks of one pipeline stage run one template (:mod:`stage_core.lower.nodes`); they differ
only in their communicator groups and peers. :func:`rank_classes` computes every group once per
(axes, group) with numpy — never once per rank — and hands the Chakra writer one class per
stage, which it encodes once and re-emits per rank with the differing fields patched.

The symmetric form (``symmetric.json``, documented in ``docs/trace-formats.md``) stores the
mesh, one node list per stage with groups as mesh axes and peers as shifts, and the rank map:
it is as small as the number of distinct programs, whatever the number of GPUs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from stage_core.chakra.writer import (
    RankClass,
    RankMember,
    WrittenTraceSet,
    write_rank_classes,
    write_trace_json,
)
from stage_core.lower.nodes import ProgramNode, materialize, pipeline_ends, stage_nodes
from stage_core.lower.program import PIPELINE_ENDS, ProgramSet
from stage_core.mesh import Mesh
from stage_core.trace import NodeKind

ProgressCallback = Callable[[int, int], None]


class GroupTable:
    """Communicator groups of a mesh, computed per axes set with numpy and shared as tuples."""

    def __init__(self, mesh: Mesh) -> None:
        self.names = mesh.names
        self.shape = tuple(int(mesh.size(n)) for n in self.names)
        self.ranks = np.arange(int(np.prod(self.shape)), dtype=np.int64).reshape(self.shape)
        self._groups: dict[tuple[str, ...], tuple[list[tuple[int, ...]], np.ndarray]] = {}

    def _table(self, axes: tuple[str, ...]) -> tuple[list[tuple[int, ...]], np.ndarray]:
        if axes not in self._groups:
            inside = [self.names.index(a) for a in self.names if a in axes]
            outside = [i for i in range(len(self.names)) if i not in inside]
            size = int(np.prod([self.shape[i] for i in inside])) if inside else 1
            rows = self.ranks.transpose(outside + inside).reshape(-1, size)
            groups = [tuple(int(r) for r in row) for row in rows]
            row_of = np.empty(self.ranks.size, dtype=np.int64)
            row_of[rows.reshape(-1)] = np.repeat(np.arange(rows.shape[0]), size)
            self._groups[axes] = (groups, row_of)
        return self._groups[axes]

    def group(self, rank: int, axes: tuple[str, ...]) -> tuple[int, ...]:
        if axes == (PIPELINE_ENDS,):
            return pipeline_ends(rank, self.names, self.shape)
        groups, row_of = self._table(axes)
        return groups[int(row_of[rank])]

    def shifted(self, rank: int, axis: str, shift: int) -> int:
        index = list(np.unravel_index(rank, self.shape))
        position = self.names.index(axis)
        index[position] = (index[position] + shift) % self.shape[position]
        return int(self.ranks[tuple(index)])


def rank_classes(programs: ProgramSet) -> list[RankClass]:
    """One Chakra rank class per pipeline stage."""
    table = GroupTable(programs.workload.mesh)
    classes = []
    for stage in programs.stages:
        template = stage_nodes(programs, stage)
        ranks = programs.ranks(stage.stage)
        representative = ranks[0]
        program = list(materialize(template, representative, programs.workload.mesh))
        group_axes = sorted(
            {item.group_axes for item in template if item.node.kind == NodeKind.COLL}
        )
        peer_keys = sorted(
            {
                (item.peer_axis, item.peer_shift)
                for item in template
                if item.node.kind in (NodeKind.SEND, NodeKind.RECV)
            }
        )
        world = programs.workload.world_size
        # Groups of every rank are written without pg_name (None): the same for every member.
        group_axes = [a for a in group_axes if len(table.group(representative, a)) < world]
        rep_groups = {axes: table.group(representative, axes) for axes in group_axes}
        rep_peers = {key: table.shifted(representative, *key) for key in peer_keys}
        members = []
        for rank in ranks:
            groups: dict[tuple[int, ...] | None, tuple[int, ...] | None] = (
                {rep_groups[a]: table.group(rank, a) for a in group_axes}
                if rank != representative
                else {}
            )
            peers = (
                {rep_peers[k]: table.shifted(rank, *k) for k in peer_keys}
                if rank != representative
                else {}
            )
            members.append(RankMember(rank, groups, peers))
        classes.append(RankClass(program, representative, members))
    return classes


def write_chakra(
    programs: ProgramSet,
    out_dir: Path | str,
    prefix: str = "workload",
    *,
    units: str = "bytes",
    progress: ProgressCallback | None = None,
) -> WrittenTraceSet:
    """``<prefix>.<rank>.et`` for every rank and ``comm_group.json``."""
    return write_rank_classes(
        out_dir,
        rank_classes(programs),
        prefix,
        units=units,
        bytes_per_element=2 if units == "stage" else None,
        progress=progress,
    )


def write_json(programs: ProgramSet, path: Path | str, *, units: str = "bytes") -> None:
    """The readable JSON form of every rank's trace (small configurations)."""
    ranks = {}
    for stage in programs.stages:
        template = stage_nodes(programs, stage)
        for rank in programs.ranks(stage.stage):
            ranks[rank] = tuple(materialize(template, rank, programs.workload.mesh))
    write_trace_json(
        path,
        dict(sorted(ranks.items())),
        units=units,
        bytes_per_element=2 if units == "stage" else None,
    )


def _node_json(item: ProgramNode) -> dict[str, Any]:
    node = item.node
    entry: dict[str, Any] = {"id": node.id, "name": node.name, "type": node.kind.name}
    if node.data_deps:
        entry["data_deps"] = list(node.data_deps)
    if node.ctrl_deps:
        entry["ctrl_deps"] = list(node.ctrl_deps)
    if node.kind == NodeKind.COMP:
        entry["flops"] = node.flops
        entry["tensor_bytes"] = node.tensor_bytes
    elif node.kind == NodeKind.COLL:
        entry["collective"] = str(node.collective)
        entry["comm_bytes"] = node.comm_bytes
        entry["group_axes"] = list(item.group_axes)
    else:
        entry["comm_bytes"] = node.comm_bytes
        entry["tag"] = node.tag
        entry["peer"] = {"axis": item.peer_axis, "shift": item.peer_shift}
    return entry


def symmetric_form(programs: ProgramSet) -> dict[str, Any]:
    """One program per rank class plus the rank map (see ``docs/trace-formats.md``)."""
    workload = programs.workload
    mesh = workload.mesh
    classes = []
    for stage in programs.stages:
        template = stage_nodes(programs, stage)
        classes.append(
            {
                "class": stage.stage,
                "select": {"pp": stage.stage},
                "nodes": [_node_json(item) for item in template],
            }
        )
    return {
        "format": "stage-symmetric",
        "version": 1,
        "mesh": [{"axis": name, "size": int(mesh.size(name))} for name in mesh.names],
        "rank_order": "row-major over mesh axes, last axis fastest",
        "model": workload.model.to_dict(),
        "parallel": workload.parallel.to_dict(),
        "world_size": workload.world_size,
        "classes": classes,
    }


def write_symmetric(programs: ProgramSet, path: Path | str) -> int:
    """Write the symmetric form; returns the bytes written."""
    text = json.dumps(symmetric_form(programs), separators=(",", ":"))
    Path(path).write_text(text)
    return len(text)
