"""Chakra execution traces: schema, fast encoder, writer, reader, checker.

Modules: :mod:`~stage_core.chakra.schema` (the protobuf schema built in Python),
:mod:`~stage_core.chakra.wire` (wire-format primitives), :mod:`~stage_core.chakra.mapping`
(TraceNode → Chakra attributes, units), :mod:`~stage_core.chakra.encode` (fast encoder and
rank templates), :mod:`~stage_core.chakra.reference` (slow encoder through the message classes),
:mod:`~stage_core.chakra.groups` (group ids and ``comm_group.json``),
:mod:`~stage_core.chakra.traceset` (the in-memory trace set),
:mod:`~stage_core.chakra.writer` (``.et`` files and the JSON form),
:mod:`~stage_core.chakra.filesink` (writing many files, over forked workers),
:mod:`~stage_core.chakra.reader` (decoding), :mod:`~stage_core.chakra.check` (soundness and
totals), :mod:`~stage_core.chakra.dump` (the text dump), :mod:`~stage_core.chakra.examples`
(small ready-made trace sets).
"""

from __future__ import annotations

from stage_core.chakra.check import CheckReport, RankTotals, check_trace_set
from stage_core.chakra.dump import dump_trace_set
from stage_core.chakra.encode import CHAKRA_VERSION, ChakraEncoder, RankTemplate, encode_program
from stage_core.chakra.groups import (
    COMM_GROUP_FILE,
    GroupRegistry,
    read_comm_groups,
    write_comm_groups,
)
from stage_core.chakra.mapping import UnitScale, unit_scale
from stage_core.chakra.reader import DecodedTrace, decode_trace, read_trace_file, read_trace_set
from stage_core.chakra.traceset import ForeignNode, TraceSet, trace_set_from_programs
from stage_core.chakra.writer import (
    ClassColumns,
    RankClass,
    RankMember,
    WrittenTraceSet,
    expand_rank_classes,
    trace_file_name,
    trace_set_json,
    write_class_columns,
    write_rank_classes,
    write_trace_json,
    write_trace_set,
)

__all__ = [
    "CHAKRA_VERSION",
    "COMM_GROUP_FILE",
    "ChakraEncoder",
    "CheckReport",
    "ClassColumns",
    "DecodedTrace",
    "ForeignNode",
    "GroupRegistry",
    "RankClass",
    "RankMember",
    "RankTemplate",
    "RankTotals",
    "TraceSet",
    "UnitScale",
    "WrittenTraceSet",
    "check_trace_set",
    "decode_trace",
    "dump_trace_set",
    "encode_program",
    "expand_rank_classes",
    "read_comm_groups",
    "read_trace_file",
    "read_trace_set",
    "trace_file_name",
    "trace_set_from_programs",
    "trace_set_json",
    "unit_scale",
    "write_class_columns",
    "write_comm_groups",
    "write_rank_classes",
    "write_trace_json",
    "write_trace_set",
]
