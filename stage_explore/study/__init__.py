"""Study files: the TOML format, its validated dataclasses and the search space.

Contents:
    :mod:`.spec`     the dataclasses (:class:`StudySpec` and its sections).
    :mod:`.loader`   :func:`load_study` / :func:`parse_study`.
    :mod:`.space`    knob parsing, dp, structural checks, grid enumeration.
"""

from __future__ import annotations

from stage_explore.study.loader import load_study, parse_study
from stage_explore.study.space import derive_dp, grid_points, structural_reason
from stage_explore.study.spec import (
    OBJECTIVE_METRICS,
    PARALLEL_KNOBS,
    BackendSpec,
    Constraints,
    Direction,
    ExecutorKind,
    ExecutorSpec,
    HardwareParam,
    Knob,
    ModelSource,
    Objective,
    SamplerKind,
    SamplerSpec,
    SearchSpace,
    StudySpec,
    SystemSource,
    WorkloadKind,
    WorkloadSpec,
)

__all__ = [
    "OBJECTIVE_METRICS",
    "PARALLEL_KNOBS",
    "BackendSpec",
    "Constraints",
    "Direction",
    "ExecutorKind",
    "ExecutorSpec",
    "HardwareParam",
    "Knob",
    "ModelSource",
    "Objective",
    "SamplerKind",
    "SamplerSpec",
    "SearchSpace",
    "StudySpec",
    "SystemSource",
    "WorkloadKind",
    "WorkloadSpec",
    "derive_dp",
    "grid_points",
    "load_study",
    "parse_study",
    "structural_reason",
]
