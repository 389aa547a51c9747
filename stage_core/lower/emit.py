"""Emitting a program set: Chakra files for every rank, readable JSON, and the symmetric form.

The ranks of one pipeline stage run one template (:mod:`stage_core.lower.nodes`); they differ
only in their communicator groups and peers. :func:`class_columns` computes every group once per
(axes, group) with numpy — never once per rank — and hands the Chakra writer one class per
stage with the members' groups and peers as integer columns; the writer encodes each class once
and re-emits it per rank with the differing fields patched.

The symmetric form (``symmetric.json``, documented in ``docs/trace-formats.md``) stores the
mesh, one node list per stage with groups as mesh axes and peers as shifts, and the rank map:
it is as small as the number of distinct programs, whatever the number of GPUs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from stage_core.arguments import expect
from stage_core.chakra.filesink import write_file
from stage_core.chakra.writer import (
    ClassColumns,
    RankClass,
    RankMember,
    WrittenTraceSet,
    write_class_columns,
    write_trace_json,
)
from stage_core.lower.nodes import materialize, stage_nodes
from stage_core.lower.program import PIPELINE_ENDS, PIPELINE_MIRROR, ProgramSet
from stage_core.lower.program_node import ProgramNode
from stage_core.mesh import Mesh
from stage_core.trace import NodeKind, TraceNode

#: How to make the program set the writers take.
_PROGRAMS = "lower(model, parallel)"

ProgressCallback = Callable[[int, int], None]


class GroupTable:
    """Communicator groups of a mesh, computed per axes set with numpy and shared as tuples.

    Every group gets an index in :attr:`table` (index 0 is ``None``, all ranks), so the ranks'
    groups can be handed to the Chakra writer as columns of small integers.
    """

    def __init__(self, mesh: Mesh) -> None:
        self.names = mesh.names
        self.shape = tuple(int(mesh.size(n)) for n in self.names)
        self.ranks = np.arange(int(np.prod(self.shape)), dtype=np.int64).reshape(self.shape)
        self.table: list[tuple[int, ...] | None] = [None]
        self._groups: dict[tuple[str, ...], tuple[int, np.ndarray]] = {}

    def _rows(self, axes: tuple[str, ...]) -> tuple[list[tuple[int, ...]], np.ndarray]:
        """The groups of ``axes`` and, per rank, the row of its group."""
        if axes == (PIPELINE_ENDS,):
            stages = self.names.index("pp")
            by_stage = np.moveaxis(self.ranks, stages, 0).reshape(self.shape[stages], -1)
            first, last = by_stage[0].tolist(), by_stage[-1].tolist()
            row_of = np.empty(self.ranks.size, dtype=np.int64)
            row_of[by_stage] = np.arange(by_stage.shape[1])
            return list(zip(first, last, strict=True)), row_of
        if axes == (PIPELINE_MIRROR,):  # stage s with stage p − 1 − s (DualPipe's two copies)
            stages = self.names.index("pp")
            by_stage = np.moveaxis(self.ranks, stages, 0).reshape(self.shape[stages], -1)
            count, width = by_stage.shape
            pairs: list[tuple[int, ...]] = []
            row_of = np.empty(self.ranks.size, dtype=np.int64)
            for stage in range(count // 2):
                low, high = by_stage[stage], by_stage[count - 1 - stage]
                numbers = np.arange(len(pairs), len(pairs) + width)
                row_of[low], row_of[high] = numbers, numbers
                pairs += list(zip(low.tolist(), high.tolist(), strict=True))
            return pairs, row_of
        inside = [self.names.index(a) for a in self.names if a in axes]
        outside = [i for i in range(len(self.names)) if i not in inside]
        size = int(np.prod([self.shape[i] for i in inside])) if inside else 1
        rows = self.ranks.transpose(outside + inside).reshape(-1, size)
        row_of = np.empty(self.ranks.size, dtype=np.int64)
        row_of[rows.reshape(-1)] = np.repeat(np.arange(rows.shape[0]), size)
        return [tuple(row) for row in rows.tolist()], row_of

    def _index(self, axes: tuple[str, ...]) -> tuple[int, np.ndarray]:
        if axes not in self._groups:
            groups, row_of = self._rows(axes)
            self._groups[axes] = (len(self.table), row_of)
            self.table.extend(groups)
        return self._groups[axes]

    def group(self, rank: int, axes: tuple[str, ...]) -> tuple[int, ...]:
        """The group of ``rank`` over ``axes`` (sorted ranks)."""
        offset, row_of = self._index(axes)
        group = self.table[offset + int(row_of[rank])]
        assert group is not None
        return group

    def column(self, ranks: np.ndarray, axes: tuple[str, ...]) -> list[int]:
        """The :attr:`table` index of the group over ``axes`` of each of ``ranks``."""
        offset, row_of = self._index(axes)
        return (row_of[ranks] + offset).tolist()  # type: ignore[no-any-return]

    def shifted(self, ranks: np.ndarray, axis: str, shift: int) -> list[int]:
        """The rank ``shift`` steps along ``axis`` (wrapping) from each of ``ranks``."""
        coords = list(np.unravel_index(ranks, self.shape))
        position = self.names.index(axis)
        coords[position] = (coords[position] + shift) % self.shape[position]
        return np.ravel_multi_index(tuple(coords), self.shape).tolist()  # type: ignore[no-any-return]

    def stage_ranks(self, stage: int) -> np.ndarray:
        """The ranks of pipeline stage ``stage``, ascending."""
        ranks: np.ndarray = np.moveaxis(self.ranks, self.names.index("pp"), 0)[stage]
        return np.sort(ranks.reshape(-1))


def _bind(template: list[ProgramNode], rank: int, table: GroupTable, world: int) -> list[TraceNode]:
    """:func:`~stage_core.lower.nodes.materialize` with the groups and peers of ``table``."""
    groups: dict[tuple[str, ...], tuple[int, ...] | None] = {}
    peers: dict[tuple[str, int], int] = {}
    nodes = []
    for item in template:
        node = item.node
        if node.kind == NodeKind.COLL:
            if item.group_axes not in groups:
                group = table.group(rank, item.group_axes)
                groups[item.group_axes] = None if len(group) == world else group
            node = replace(node, group=groups[item.group_axes])
        elif node.kind in (NodeKind.SEND, NodeKind.RECV):
            key = (item.peer_axis, item.peer_shift)
            if key not in peers:
                peers[key] = table.shifted(np.array([rank]), *key)[0]
            node = replace(node, peer=peers[key])
        nodes.append(node)
    return nodes


def class_columns(
    programs: ProgramSet, progress: ProgressCallback | None = None
) -> tuple[list[ClassColumns], list[tuple[int, ...] | None]]:
    """One Chakra rank class per pipeline stage, in column form, and the group table;
    ``progress`` is called with (stages done, stages) after each stage."""
    expect(programs, ProgramSet, "programs", _PROGRAMS)
    mesh = programs.workload.mesh
    table = GroupTable(mesh)
    world = programs.workload.world_size
    classes = []
    for stage in programs.stages:
        template = stage_nodes(programs, stage)
        ranks = table.stage_ranks(stage.stage)
        representative = int(ranks[0])
        program = _bind(template, representative, table, world)
        # A group of every rank is written without pg_name (None), the same for every member.
        by_group: dict[tuple[int, ...] | None, list[int]] = {}
        for item in template:
            if item.node.kind == NodeKind.COLL:
                group = table.group(representative, item.group_axes)
                if len(group) < world and group not in by_group:
                    by_group[group] = table.column(ranks, item.group_axes)
        if any(node.kind == NodeKind.COLL and node.group is None for node in program):
            by_group[None] = [0] * len(ranks)
        by_peer: dict[int, list[int]] = {}
        for item in template:
            if item.node.kind in (NodeKind.SEND, NodeKind.RECV):
                key = (item.peer_axis, item.peer_shift)
                column = table.shifted(ranks, *key)
                by_peer.setdefault(column[0], column)
        classes.append(ClassColumns(program, representative, ranks.tolist(), by_group, by_peer))
        if progress is not None:
            progress(len(classes), len(programs.stages))
    return classes, table.table


def rank_classes(programs: ProgramSet) -> list[RankClass]:
    """The classes of :func:`class_columns` with one :class:`RankMember` per rank (the general
    form of the Chakra writer; slower for many ranks, kept to cross-check the column form)."""
    columns, table = class_columns(programs)
    classes = []
    for rank_class in columns:
        members = []
        for member, rank in enumerate(rank_class.ranks):
            groups = {group: table[column[member]] for group, column in rank_class.groups.items()}
            peers = {peer: column[member] for peer, column in rank_class.peers.items()}
            members.append(RankMember(rank, groups, peers))
        classes.append(RankClass(rank_class.program, rank_class.rank, members))
    return classes


def write_chakra(
    programs: ProgramSet,
    out_dir: Path | str,
    prefix: str = "workload",
    *,
    units: str = "bytes",
    progress: ProgressCallback | None = None,
    workers: int | None = None,
    stage_progress: ProgressCallback | None = None,
    transform: Callable[[list[ClassColumns]], list[ClassColumns]] | None = None,
) -> WrittenTraceSet:
    """``<prefix>.<rank>.et`` for every rank and ``comm_group.json``.

    ``transform``: applied to the rank classes (:func:`class_columns`, one per pipeline stage)
    before they are written, e.g. to set each compute node's ``duration_micros``
    (``stage_explore.astrasim.kernel_times.with_durations``).

    ``workers``: processes writing files (``None``: one per CPU, up to 4); the bytes written do
    not depend on it. ``progress`` is called with (ranks written, ranks); ``stage_progress``
    with (steps done, steps) while each pipeline stage's nodes are built and encoded, before
    the first file (most of a large set's time: 18 of 22 s for Llama 3.1 405B on 1,024 ranks,
    s24 review, where nothing showed).
    """
    stages = len(programs.stages) if isinstance(programs, ProgramSet) else 0

    def step(offset: int) -> ProgressCallback | None:
        """Building (offset 0), then encoding (offset ``stages``), as one count of 2·stages."""
        report = stage_progress
        if report is None:
            return None
        return lambda done, _total: report(offset + done, 2 * stages)

    classes, table = class_columns(programs, step(0))
    if transform is not None:
        classes = transform(classes)
    return write_class_columns(
        out_dir,
        classes,
        table,
        prefix,
        units=units,
        bytes_per_element=2 if units == "stage" else None,
        progress=progress,
        workers=workers,
        compile_progress=step(stages),
    )


def write_json(programs: ProgramSet, path: Path | str, *, units: str = "bytes") -> None:
    """The readable JSON form of every rank's trace (small configurations)."""
    expect(programs, ProgramSet, "programs", _PROGRAMS)
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
    expect(programs, ProgramSet, "programs", _PROGRAMS)
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
    expect(path, (str, os.PathLike), "path", "the JSON file to write")
    text = json.dumps(symmetric_form(programs), separators=(",", ":"))
    write_file(path, text.encode())  # a failed write leaves no truncated file (s24 review)
    return len(text)
