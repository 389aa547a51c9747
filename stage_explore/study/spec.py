"""The parsed form of a study file: frozen dataclasses, the one source of truth.

Contents:
    :class:`WorkloadKind`, :class:`SamplerKind`, :class:`ExecutorKind`, :class:`Direction`
        closed vocabularies.
    :class:`ModelSource`, :class:`WorkloadSpec`, :class:`SystemSource`
        what is evaluated.
    :class:`Knob`, :class:`HardwareParam`, :class:`SearchSpace`
        what is searched (see :mod:`stage_explore.study.space` for enumeration and checks).
    :class:`Objective`, :class:`Constraints`, :class:`SamplerSpec`, :class:`BackendSpec`,
    :class:`ExecutorSpec`, :class:`StudySpec`
        how it is searched.

Every class has ``to_dict()``; :meth:`StudySpec.fingerprint` is the part of a study that must
not change when a study is resumed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

#: Parallel knobs in record-column order; ``dp`` is derived from them and never searched.
PARALLEL_KNOBS: tuple[str, ...] = (
    "num_gpus",
    "tp",
    "pp",
    "cp",
    "ep",
    "sp",
    "zero",
    "recompute",
    "schedule",
    "vpp",
    "micro_batch",
    "pp_split",
    "dp_shard",
    "recompute_num_layers",
    "recompute_method",
    "precision",
    "fp8_recipe",
)

#: Metrics a study may optimise, with their natural direction.
OBJECTIVE_METRICS: Mapping[str, str] = {
    "step_time_s": "min",
    "peak_memory_bytes": "min",
    "cost_per_step": "min",
    "cost_per_million_tokens": "min",
    "mfu": "max",
    "hfu": "max",
    "tokens_per_s_per_gpu": "max",
    # inference studies (stage_explore.study.serving_space)
    "time_to_first_token_s": "min",
    "time_per_output_token_s": "min",
    "requests_per_s": "max",
    "tokens_per_s": "max",
}
#: Objectives of inference studies (the others are training's).
SERVING_OBJECTIVES: frozenset[str] = frozenset(
    {
        "time_to_first_token_s",
        "time_per_output_token_s",
        "requests_per_s",
        "tokens_per_s",
        "tokens_per_s_per_gpu",
        "cost_per_million_tokens",
        "peak_memory_bytes",
    }
)


class WorkloadKind(StrEnum):
    """What one step is: a training step (forward, backward, optimizer) or inference."""

    TRAINING = "training"
    INFERENCE = "inference"


class SamplerKind(StrEnum):
    """How candidates are proposed. ``auto`` enumerates the canonical space when it fits the
    budget and the backend is fast, else uses TPE (one objective) or NSGA-II (several)."""

    AUTO = "auto"
    GRID = "grid"
    RANDOM = "random"
    TPE = "tpe"
    NSGA2 = "nsga2"


class ExecutorKind(StrEnum):
    """Where evaluations run."""

    RAY = "ray"
    LOCAL = "local"


class Direction(StrEnum):
    """Whether an objective is minimised or maximised."""

    MIN = "min"
    MAX = "max"


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSource:
    """The model: exactly one of a registered flavor, a model file, or inline dims."""

    flavor: str | None = None
    file: Path | None = None
    dims: Mapping[str, Any] | None = None

    def argument(self) -> Any:
        """What the model registry's ``load_model`` receives (a flavor, a path or a mapping)."""
        if self.flavor is not None:
            return self.flavor
        if self.file is not None:
            return self.file
        return dict(self.dims or {})

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "flavor": self.flavor,
            "file": None if self.file is None else str(self.file),
            "dims": None if self.dims is None else dict(self.dims),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSpec:
    """One step of the workload: its kind, the global batch in sequences, the sequence length.

    An inference workload has ``requests`` instead (prompt and output lengths, arrival rate or
    concurrency: :func:`stage_explore.study.serving_space.parse_requests`); its global batch
    and sequence length are 0.
    """

    kind: WorkloadKind
    global_batch: int
    sequence_length: int
    requests: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        if self.requests is not None:
            return {"kind": str(self.kind), "requests": dict(self.requests)}
        return {
            "kind": str(self.kind),
            "global_batch": self.global_batch,
            "sequence_length": self.sequence_length,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemSource:
    """The system: exactly one of a preset name, a system file, or an inline table."""

    preset: str | None = None
    file: Path | None = None
    inline: Mapping[str, Any] | None = None

    def argument(self) -> Any:
        """What ``load_system`` receives (a preset name, a path or a mapping)."""
        if self.preset is not None:
            return self.preset
        if self.file is not None:
            return self.file
        return dict(self.inline or {})

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "preset": self.preset,
            "file": None if self.file is None else str(self.file),
            "inline": None if self.inline is None else dict(self.inline),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Knob:
    """One searched parallel knob and the values it may take (one value: fixed)."""

    name: str
    values: tuple[Any, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"name": self.name, "values": list(self.values)}


@dataclass(frozen=True, slots=True, kw_only=True)
class HardwareParam:
    """A searched system parameter: a dotted ``path`` into the system and its values.

    ``column`` is its name in trial parameters and records (``hw_`` + the path's words).
    """

    path: str
    column: str
    values: tuple[Any, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"path": self.path, "column": self.column, "values": list(self.values)}


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSpace:
    """Every parallel knob (in :data:`PARALLEL_KNOBS` order) plus the hardware parameters."""

    knobs: tuple[Knob, ...]
    hardware: tuple[HardwareParam, ...] = ()
    #: An inference space (:data:`~stage_explore.study.serving_space.SERVING_KNOBS`).
    serving: bool = False

    def choices(self) -> dict[str, tuple[Any, ...]]:
        """Parameter name → its values, knobs first, then hardware columns."""
        result = {knob.name: knob.values for knob in self.knobs}
        result.update({param.column: param.values for param in self.hardware})
        return result

    def size(self) -> int:
        """The number of points of the full Cartesian product (before structural checks)."""
        return math.prod(len(values) for values in self.choices().values())

    def names(self) -> tuple[str, ...]:
        """Parameter names in order."""
        return tuple(self.choices())

    def __iter__(self) -> Iterator[Knob]:
        return iter(self.knobs)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "knobs": {knob.name: list(knob.values) for knob in self.knobs},
            "hardware": [param.to_dict() for param in self.hardware],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Objective:
    """One objective: a metric column of the records and its direction."""

    metric: str
    direction: Direction

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"metric": self.metric, "direction": str(self.direction)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Constraints:
    """Limits a point must satisfy to be feasible (``None``: no limit beyond the backend's)."""

    max_memory_bytes: int | None = None
    max_gpus: int | None = None
    #: Inference latency bounds: mean time to first token and per output token (seconds).
    max_ttft_s: float | None = None
    max_tpot_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the latency bounds only when set)."""
        result: dict[str, Any] = {
            "max_memory_bytes": self.max_memory_bytes,
            "max_gpus": self.max_gpus,
        }
        for name in ("max_ttft_s", "max_tpot_s"):
            if getattr(self, name) is not None:
                result[name] = getattr(self, name)
        return result


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplerSpec:
    """The sampler and the budget.

    ``trials`` is the study's budget of distinct configurations (resumed trials included);
    ``None`` means "the whole grid" for the grid sampler and must be given on the command line
    for the others. ``batch_size`` bounds the evaluations in flight; it never changes which
    trials a study runs (model-based samplers ask in generations of their own size).
    """

    kind: SamplerKind
    trials: int | None = None
    time_limit_s: float | None = None
    batch_size: int = 64

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "kind": str(self.kind),
            "trials": self.trials,
            "time_limit_s": self.time_limit_s,
            "batch_size": self.batch_size,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendSpec:
    """The evaluator: a built-in or registered name, or ``module:attribute``; its options.

    With ``screen`` set, the study is two-stage: the search runs on the ``screen`` backend
    (with ``screen_options``) and the Pareto front is then re-evaluated with ``name``.
    """

    name: str = "analytical"
    options: Mapping[str, Any] = field(default_factory=dict)
    screen: str | None = None
    screen_options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def search_name(self) -> str:
        """The backend the search itself runs on."""
        return self.screen if self.screen is not None else self.name

    @property
    def search_options(self) -> Mapping[str, Any]:
        return self.screen_options if self.screen is not None else self.options

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "name": self.name,
            "options": dict(self.options),
            "screen": self.screen,
            "screen_options": dict(self.screen_options),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorSpec:
    """Where evaluations run and how they are batched into tasks.

    ``workers``: processes of the local executor, CPUs of a Ray instance started for the study
    (``None``: all CPUs). ``chunk_size``: candidates per task (``None``: chosen from the batch
    size and the parallelism). ``connect_timeout_s``: how long joining the Ray cluster at
    ``address`` may wait for it to answer. ``retries``: further attempts at a trial lost to an
    infrastructure failure (a node or worker died, ASTRA-sim was killed) before it is recorded
    as ``infrastructure_failed``.
    """

    kind: ExecutorKind = ExecutorKind.RAY
    address: str | None = None
    workers: int | None = None
    chunk_size: int | None = None
    connect_timeout_s: float = 30.0
    retries: int = 3

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "kind": str(self.kind),
            "address": self.address,
            "workers": self.workers,
            "chunk_size": self.chunk_size,
            "connect_timeout_s": self.connect_timeout_s,
            "retries": self.retries,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class StudySpec:
    """A whole study file, validated. ``path`` is the file it came from (for messages)."""

    name: str
    seed: int
    path: Path
    model: ModelSource
    workload: WorkloadSpec
    system: SystemSource
    space: SearchSpace
    objectives: tuple[Objective, ...]
    constraints: Constraints
    sampler: SamplerSpec
    backend: BackendSpec
    executor: ExecutorSpec

    def fingerprint(self) -> dict[str, Any]:
        """The sections that define the results; a resumed study must match them exactly."""
        full = self.to_dict()
        keys = (
            "name",
            "model",
            "workload",
            "system",
            "space",
            "objectives",
            "constraints",
            "backend",
        )
        return {key: full[key] for key in keys}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "name": self.name,
            "seed": self.seed,
            "path": str(self.path),
            "model": self.model.to_dict(),
            "workload": self.workload.to_dict(),
            "system": self.system.to_dict(),
            "space": self.space.to_dict(),
            "objectives": [objective.to_dict() for objective in self.objectives],
            "constraints": self.constraints.to_dict(),
            "sampler": self.sampler.to_dict(),
            "backend": self.backend.to_dict(),
            "executor": self.executor.to_dict(),
        }
