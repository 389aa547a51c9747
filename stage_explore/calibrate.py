"""``stage calibrate``: fit a system's declared efficiency parameters to measured runs.

Holds :data:`FITTABLE` (the parameters a fit may change, with their bounds), :func:`apply`
(a system with parameter values), :func:`objective`, :func:`fit` (Nelder–Mead over the
parameters scaled to their bounds — no SciPy), :func:`leave_one_out` and :func:`user_cases`
(a CSV of measured runs, same columns as ``published_runs.csv``); the
fitted system as a TOML file :func:`~stage_explore.system.load_system` reads is
:func:`~stage_explore.calibrate_toml.system_toml`.

Fittable parameters:

- ``matmul_peak`` — the efficiency large matmuls saturate at ([0.2, 1]);
- ``matmul_half_saturation_flops`` — the GEMM size at half of it (log-searched in [1e7, 1e11]);
- ``memory`` — the achieved fraction of HBM bandwidth ([0.2, 1]);
- ``network.<dim name>`` — the achieved fraction of that network dim's link bandwidth
  ([0.2, 1]). The analytical backend multiplies each link by its default efficiency
  (``DEFAULT_NETWORK_EFFICIENCY``); the fitted file therefore holds
  ``bandwidth_bytes_per_s = link × fitted / default``, so the default backend achieves
  ``link × fitted`` (the comment in the file gives the link's own value).

The objective is the mean absolute relative error of the runs' metric (robust to one bad run;
no squared terms); rows the backend cannot evaluate are left out and reported.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stage_core.errors import ConfigError
from stage_core.models import list_flavors
from stage_explore.analytical.backend import DEFAULT_NETWORK_EFFICIENCY
from stage_explore.calibrate_checks import setup_groups
from stage_explore.calibrate_rows import (
    base_sizes_reason,
    derived_dp,
    empty_cell_reason,
    header_problem,
    measured_hint,
)
from stage_explore.system.model import System
from stage_explore.validation.csv_cells import ragged_reason, read_csv
from stage_explore.validation.infer_fields import Uninferable, infer_model, infer_precision
from stage_explore.validation.run import BackendFactory, RowResult, evaluate_cases
from stage_explore.validation.setups import (
    METRICS,
    MODEL_COLUMNS,
    PARALLEL_COLUMNS,
    Case,
    SourceSetup,
    make_case,
)
from stage_explore.wording import counted


@dataclass(frozen=True, slots=True)
class Parameter:
    """A fittable parameter: bounds, and whether it is searched on a log scale."""

    lower: float
    upper: float
    log: bool = False


#: Accelerator efficiencies a fit may change (``[accelerator.efficiency]``).
FITTABLE: dict[str, Parameter] = {
    "matmul_peak": Parameter(0.2, 1.0),
    "matmul_half_saturation_flops": Parameter(1e7, 1e11, log=True),
    "memory": Parameter(0.2, 1.0),
}
#: Per-kernel efficiencies a fit may change when the system has ``[accelerator.kernels]``
#: (``gemm_efficiency.<dtype>`` for each dtype it lists, and these).
KERNEL_FITTABLE: dict[str, Parameter] = {
    "attention_forward": Parameter(0.2, 1.0),
    "attention_backward": Parameter(0.2, 1.0),
}
FRACTION = Parameter(0.2, 1.0)


def network_default(system: System, index: int) -> float:
    """Network dim ``index``'s achieved fraction of its link: its ``bus_efficiency`` when the
    system file gives one, else the backend's default."""
    own = getattr(system.network[index], "bus_efficiency", None)
    if own is not None:
        return float(own)
    return DEFAULT_NETWORK_EFFICIENCY[min(index, len(DEFAULT_NETWORK_EFFICIENCY) - 1)]


def _kernels(system: System) -> Any:
    return getattr(system.accelerator, "kernels", None)


def tied_dtypes(system: System) -> list[tuple[str, ...]]:
    """The GEMM dtypes of ``system``'s kernel model grouped by equal peak FLOP/s (bf16 and fp16
    on one GPU run on the same tensor cores at the same datasheet peak): a fit gives each group
    one efficiency, ``gemm_efficiency.bf16+fp16``, so runs in one dtype inform the other."""
    kernels = _kernels(system)
    if kernels is None:
        return []
    peaks = system.accelerator.peak_flops_per_s
    groups: dict[float, list[str]] = {}
    for dtype in sorted(kernels.gemm_efficiency):
        groups.setdefault(peaks.get(dtype, -1.0), []).append(dtype)
    return [tuple(group) for group in groups.values()]


def _gemm_name(group: Sequence[str]) -> str:
    return "gemm_efficiency." + "+".join(group)


def parameters_of(system: System) -> dict[str, Parameter]:
    """Every parameter of ``system`` a fit may change."""
    params = dict(FITTABLE)
    kernels = _kernels(system)
    if kernels is not None:
        params.update({f"gemm_efficiency.{d}": FRACTION for d in kernels.gemm_efficiency})
        params.update({_gemm_name(g): FRACTION for g in tied_dtypes(system) if len(g) > 1})
        params.update(KERNEL_FITTABLE)
    params.update({f"network.{d.name or i}": FRACTION for i, d in enumerate(system.network)})
    return params


def default_parameters(system: System, dtypes: Iterable[str]) -> list[str]:
    """What ``stage calibrate`` fits unless told: the GEMM efficiency of the runs' dtypes, one
    per group of equal peak (:func:`tied_dtypes`; ``matmul_peak`` without a kernel model), the
    HBM efficiency and every network dim."""
    wanted = set(dtypes)
    if _kernels(system) is None:
        compute = ["matmul_peak"]
    else:
        compute = [_gemm_name(g) for g in tied_dtypes(system) if wanted & set(g)]
    networks = [f"network.{d.name or i}" for i, d in enumerate(system.network)]
    return [*compute, "memory", *networks]


def current_values(system: System) -> dict[str, float]:
    """The system's values of every fittable parameter."""
    efficiency = system.accelerator.efficiency
    values = {
        "matmul_peak": efficiency.matmul_peak,
        "matmul_half_saturation_flops": efficiency.matmul_half_saturation_flops,
        "memory": efficiency.memory,
    }
    kernels = _kernels(system)
    if kernels is not None:
        values.update({f"gemm_efficiency.{d}": v for d, v in kernels.gemm_efficiency.items()})
        for group in tied_dtypes(system):
            values[_gemm_name(group)] = kernels.gemm_efficiency[group[0]]
        values.update({name: getattr(kernels, name) for name in KERNEL_FITTABLE})
    for i, dim in enumerate(system.network):
        values[f"network.{dim.name or i}"] = network_default(system, i)
    return values


def apply(system: System, values: Mapping[str, float]) -> System:
    """``system`` with ``values`` (names of :func:`parameters_of`); others unchanged."""
    known = parameters_of(system)
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"unknown fittable parameter {unknown[0]!r}; known: {sorted(known)}")
    accelerator = system.accelerator
    changes = {k: values[k] for k in FITTABLE if k in values}
    if changes:
        accelerator = replace(accelerator, efficiency=replace(accelerator.efficiency, **changes))
    kernels = _kernels(system)
    if kernels is not None:
        gemm = dict(kernels.gemm_efficiency)
        for name, value in values.items():
            if name.startswith("gemm_efficiency."):
                gemm.update(dict.fromkeys(name.split(".", 1)[1].split("+"), value))
        other = {k: values[k] for k in KERNEL_FITTABLE if k in values}
        kernels = replace(kernels, gemm_efficiency=gemm, **other)
        accelerator = replace(accelerator, kernels=kernels)  # type: ignore[call-arg,unused-ignore]
    dims = []
    for i, dim in enumerate(system.network):
        name = f"network.{dim.name or i}"
        if name in values and values[name] == network_default(system, i):
            pass  # unchanged (a dim without its own bus_efficiency keeps the backend default)
        elif name in values and hasattr(dim, "bus_efficiency"):
            dim = _with_bus_efficiency(dim, values[name])
        elif name in values:  # no per-dim field: scale the link against the backend default
            scale = values[name] / network_default(system, i)
            dim = replace(dim, bandwidth_bytes_per_s=dim.bandwidth_bytes_per_s * scale)
        dims.append(dim)
    return replace(system, accelerator=accelerator, network=tuple(dims))


def _with_bus_efficiency(dim: Any, value: float) -> Any:
    """``dim`` at bus efficiency ``value``; its per-group-size fractions
    (``bus_efficiency_by_ranks``) scaled by the same ratio (at most 1), so a fit moves every
    group size and keeps their measured proportions."""
    pairs = getattr(dim, "bus_efficiency_by_ranks", ())
    old = dim.bus_efficiency
    if pairs and old:
        scaled = tuple((n, min(1.0, f * value / old)) for n, f in pairs)
        return replace(dim, bus_efficiency=value, bus_efficiency_by_ranks=scaled)
    return replace(dim, bus_efficiency=value)


def objective(
    cases: Sequence[Case], system: System, factory: BackendFactory | None = None
) -> tuple[float, list[RowResult]]:
    """Mean |relative error| of ``cases`` on ``system`` (NaN if none evaluates), and the rows."""
    systems = {case.system: system for case in cases}
    results = evaluate_cases(cases, factory, systems)
    errors = [abs(r.error) for r in results if r.evaluated]
    return (sum(errors) / len(errors) if errors else float("nan")), results


def _nelder_mead(
    f: Callable[[list[float]], float],
    start: list[float],
    step: float,
    max_evaluations: int,
    tolerance: float,
) -> tuple[list[float], float, int]:
    """Minimise ``f`` on the unit cube from ``start`` (points are clipped into it) by
    Nelder–Mead (reflection 1, expansion 2, contraction ½, shrink ½); stops when the simplex's
    values agree within ``tolerance`` or after ``max_evaluations``."""

    def clip(x: list[float]) -> list[float]:
        return [min(1.0, max(0.0, v)) for v in x]

    n = len(start)
    simplex = [clip(start)]
    for i in range(n):
        vertex = list(start)
        vertex[i] = vertex[i] + step if vertex[i] + step <= 1 else vertex[i] - step
        simplex.append(clip(vertex))
    values = [f(x) for x in simplex]
    evaluations = len(values)
    while evaluations < max_evaluations:
        order = sorted(range(n + 1), key=lambda i: values[i])
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] <= tolerance:
            break
        centroid = [sum(x[j] for x in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]

        def towards(
            t: float, centroid: list[float] = centroid, worst: list[float] = worst
        ) -> list[float]:
            return clip([c + t * (c - w) for c, w in zip(centroid, worst, strict=True)])

        reflected = towards(1.0)
        fr = f(reflected)
        evaluations += 1
        if fr < values[0]:
            expanded = towards(2.0)
            fe = f(expanded)
            evaluations += 1
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = towards(0.5) if fr < values[-1] else towards(-0.5)
            fc = f(contracted)
            evaluations += 1
            if fc < min(fr, values[-1]):
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                for i in range(1, n + 1):
                    simplex[i] = [b + 0.5 * (x - b) for b, x in zip(best, simplex[i], strict=True)]
                    values[i] = f(simplex[i])
                evaluations += n
    i = min(range(n + 1), key=lambda k: values[k])
    return simplex[i], values[i], evaluations


@dataclass(frozen=True, slots=True)
class Fit:
    """A fit: the values found, the system with them, and the in-sample error."""

    values: dict[str, float]
    system: System
    in_sample_mae: float
    evaluations: int


def _to_unit(p: Parameter, value: float) -> float:
    if p.log:
        return (math.log(value) - math.log(p.lower)) / (math.log(p.upper) - math.log(p.lower))
    return (value - p.lower) / (p.upper - p.lower)


def _from_unit(p: Parameter, x: float) -> float:
    if p.log:
        return math.exp(math.log(p.lower) + x * (math.log(p.upper) - math.log(p.lower)))
    return p.lower + x * (p.upper - p.lower)


def fit(
    cases: Sequence[Case],
    system: System,
    names: Sequence[str],
    factory: BackendFactory | None = None,
    max_evaluations: int = 150,
    tolerance: float = 1e-7,
) -> Fit:
    """Fit parameters ``names`` of ``system`` to ``cases``: Nelder–Mead over the parameters
    scaled to their bounds (log-scaled where declared), from the system's current values,
    minimising the mean squared log ratio of predicted to measured (smooth, scale-free and
    symmetric in over- and under-prediction); the fit reports the mean absolute error."""
    bounds = parameters_of(system)
    for name in names:
        if name not in bounds:
            raise ConfigError(f"unknown fittable parameter {name!r}; known: {sorted(bounds)}")
    if not names:
        raise ConfigError("nothing to fit: name at least one parameter")
    current = current_values(system)
    params = [bounds[name] for name in names]

    def values_at(x: Sequence[float]) -> dict[str, float]:
        return {n: _from_unit(p, v) for n, p, v in zip(names, params, x, strict=True)}

    def cost(x: list[float]) -> float:
        _, rows = objective(cases, apply(system, values_at(x)), factory)
        logs = [
            math.log(r.predicted / r.case.measured) ** 2
            for r in rows
            if r.evaluated and r.predicted > 0 and r.case.measured > 0
        ]
        return sum(logs) / len(logs) if logs else math.inf

    start = [
        min(1.0, max(0.0, _to_unit(p, current[n]))) for n, p in zip(names, params, strict=True)
    ]
    if not math.isfinite(cost(start)):
        _, rows = objective(cases, apply(system, values_at(start)), factory)
        reasons = "; ".join(f"{r.case.id}: {r.note}" for r in rows if not r.evaluated)
        raise ConfigError(f"no run could be evaluated, nothing to fit: {reasons or 'no runs'}")
    best, _, evaluations = _nelder_mead(cost, start, 0.15, max_evaluations, tolerance)
    values = values_at(best)
    fitted = apply(system, values)
    mae, _ = objective(cases, fitted, factory)
    return Fit(values, fitted, mae, evaluations)


def fit_warnings(fitted: Fit, system: System, runs: int) -> list[str]:
    """What makes a fit's values doubtful, one line each: fewer runs than fitted parameters
    (the runs cannot separate them: an in-sample error near zero says nothing), and a value
    pinned at its bound (the optimum lies outside the range the parameter may take)."""
    bounds = parameters_of(system)
    warnings = []
    if runs < len(fitted.values):
        warnings.append(
            f"{counted(len(fitted.values), 'parameter')} fitted on {counted(runs, 'run')}: fewer "
            "runs than "
            "parameters cannot separate them; add runs or name fewer with --fit"
        )
    for name, value in fitted.values.items():
        p = bounds[name]
        x = _to_unit(p, value)
        if x <= 1e-3 or x >= 1 - 1e-3:
            bound = p.lower if x <= 1e-3 else p.upper
            warnings.append(
                f"{name} = {value:.4g} is at its bound {bound:.4g} (allowed [{p.lower:.4g}, "
                f"{p.upper:.4g}]): the runs ask for a value beyond it; check their setup "
                "(framework, recompute, precision)"
            )
    return warnings


def leave_one_out(
    cases: Sequence[Case],
    system: System,
    names: Sequence[str],
    factory: BackendFactory | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    **options: Any,
) -> list[RowResult]:
    """Each case predicted by a fit on all the others but the runs of its own configuration
    (:func:`~stage_explore.calibrate_checks.setup_groups`: a configuration measured twice is
    left out whole, else its twin would predict it in-sample); the rows in order. ``progress``
    is called with (fits done, fits, the runs left out next) before each fit and with an empty
    name after the last."""
    groups = setup_groups(cases)
    predicted: dict[int, RowResult] = {}
    for done, group in enumerate(groups):
        if progress is not None:
            progress(done, len(groups), "without " + ", ".join(cases[i].id for i in group))
        others = [c for j, c in enumerate(cases) if j not in group]
        if not others:  # every run is this configuration: no fit without it
            note = "every run is this configuration: no fit is left to predict it"
            predicted.update((i, RowResult(cases[i], math.nan, note=note)) for i in group)
            continue
        fitted = fit(others, system, names, factory, **options)
        _, rows = objective([cases[i] for i in group], fitted.system, factory)
        predicted.update(zip(group, rows, strict=True))
    if progress is not None:
        progress(len(groups), len(groups), "")
    return [predicted[i] for i in range(len(cases))]


def _precision(row: Mapping[str, str], path: Path, framework: str) -> tuple[str, dict[str, str]]:
    """A run's precision and, for FP8, its recipe as a parallel field, read as ``stage validate``
    reads a row without a setup (``bf16 mixed``, ``amp_bf16``, ``FP8-CS``, ``MXFP8`` …; empty:
    bf16); a cell it cannot read is a one-line error naming the run."""
    try:
        read = infer_precision(row.get("precision", ""), framework)
    except Uninferable as error:
        raise ConfigError(f"{str(path)!r} run {row['id']!r}: {error}") from None
    return read.precision, {"fp8_recipe": read.fp8_recipe} if read.fp8_recipe else {}


def _row_metric(row: Mapping[str, str], columns: Sequence[str]) -> str:
    """The metric a run measures: the first of ``columns`` whose cell in ``row`` is filled, else
    the first column (the case then says the run gives no value)."""
    return next((m for m in columns if row.get(m, "").strip()), columns[0])


def _zero(row: Mapping[str, str], path: Path) -> int:
    """The ``zero`` cell of a run: a ZeRO stage 0-3, else a one-line error naming the run."""
    cell = row["zero"].strip()
    if cell not in {"0", "1", "2", "3"}:
        raise ConfigError(
            f"{str(path)!r} run {row['id']!r}: zero must be a ZeRO stage 0, 1, 2 or 3, "
            f"but got {cell!r}"
        )
    return int(cell)


@dataclass(frozen=True, slots=True)
class ModelRead:
    """How a run's ``model`` cell was read: the base flavor, the model fields the reading adds
    beyond the row's dims (:attr:`~stage_explore.validation.infer_fields.Inferred.model`), and
    the assumption, or why ``--model-base`` stands in (``on_base``)."""

    flavor: str
    fields: tuple[tuple[str, int | str], ...]
    note: str
    on_base: bool


def read_model(row: Mapping[str, str], framework: str, model_base: str) -> ModelRead:
    """A run's base flavor: the ``model`` cell when it is a flavor's name; else the cell read as
    ``stage validate --data`` reads it (``Llama 3.1 8B`` is llama3.1-8b, a family of no flavor
    of its size that family's base, an unknown dense decoder the common Llama-style decoder:
    :func:`~stage_explore.validation.infer_fields.infer_model`); else, for an empty cell or one
    that reading refuses, ``model_base`` (``on_base``, with the reason)."""
    cell = (row.get("model") or "").strip()
    if cell in set(list_flavors()):
        return ModelRead(cell, (), "", on_base=False)
    if not cell:
        return ModelRead(model_base, (), "the model cell is empty", on_base=True)
    try:
        inferred = infer_model({k: str(v or "") for k, v in row.items()}, framework)
    except Uninferable as error:
        return ModelRead(model_base, (), str(error), on_base=True)
    return ModelRead(inferred.value, inferred.model, inferred.assumption, on_base=False)


def model_reads(path: Path, framework: str, model_base: str) -> dict[str, ModelRead]:
    """:func:`read_model` of every run of a runs CSV whose ``model`` cell is not a flavor's
    name, by run id (the ids :func:`user_cases` gives)."""
    flavors = set(list_flavors())
    return {
        row.get("id") or f"run-{i + 1}": read_model(row, framework, model_base)
        for i, row in enumerate(read_csv(path))
        if (row.get("model") or "").strip() not in flavors
    }


def user_cases(path: Path, system: str, framework: str, model_base: str) -> list[Case]:
    """The runs of a user's CSV (``published_runs.csv`` columns; each row's metric is the first
    of ``iter_time_s``, ``tflops_per_gpu`` (Megatron model FLOPs), ``tokens_per_s_per_gpu``
    whose cell it fills, so a file with all three columns may measure each run differently). A
    run's ``model`` cell is read by :func:`read_model`; the row's dims override the flavor's. A
    row with more cells than the header is a one-line :class:`ConfigError` (as a configured
    source's row: :func:`~stage_explore.validation.csv_cells.ragged_reason`)."""
    rows = read_csv(path)
    if not rows:
        raise ConfigError(f"{str(path)!r} has no runs")
    header = [name for name in rows[0] if name is not None]  # None: a long row's extra cells
    problem = header_problem(str(path), header, READ_COLUMNS | set(METRICS[:3]))
    if problem:
        raise ConfigError(problem)
    columns = [m for m in METRICS[:3] if m in rows[0]]
    if not columns:
        raise ConfigError(
            f"{str(path)!r} needs a column iter_time_s, tflops_per_gpu or tokens_per_s_per_gpu"
            + measured_hint(header)
        )
    cases = []
    for i, row in enumerate(rows):
        row.setdefault("id", "")
        row["id"] = row["id"] or f"run-{i + 1}"
        ragged = ragged_reason(row)  # its cells would be read shifted (s22 review: a traceback)
        if ragged:
            raise ConfigError(f"{str(path)!r} row {i + 1} ({row['id']}): {ragged}")
        model = read_model(row, framework, model_base)
        precision, recipe = _precision(row, path, framework)
        source = SourceSetup(
            name="runs", title=str(path), file=path.name, id_prefix="",
            metric=_row_metric(row, columns),
            system=system, framework=framework, precision=precision,
            model_base=model.flavor, in_sample=True, flops="megatron-model",
            model=dict(model.fields),
            assumptions=(f"model: {model.note}",) if model.note else (),
        )  # fmt: skip
        parallel: dict[str, Any] = dict(recipe)
        if (dp := derived_dp(row)) is not None:  # an empty dp beside num_gpus (s27 review)
            parallel["dp"] = dp
        if row.get("zero", "").strip():
            parallel["zero"] = _zero(row, path)
        case = make_case(source, row, {"parallel": parallel} if parallel else {})
        if empty := empty_cell_reason(row, columns):  # in a fit's words, not a source's
            case = replace(case, reason=empty, model=None, parallel=None)
        elif model.on_base and (alien := base_sizes_reason(row, model.note, model_base)):
            case = replace(case, reason=alien, model=None, parallel=None)  # s28 review
        cases.append(case)
    return cases


#: The columns :func:`user_cases` reads (with ``METRICS[:3]``, the measured ones).
READ_COLUMNS = frozenset(
    {"id", "model", "zero", "sp", "recompute", "precision", *MODEL_COLUMNS, *PARALLEL_COLUMNS,
     "num_gpus",  # an empty dp's source (calibrate_rows.derived_dp)
     "gpu"}  # checked against the fitted system (calibrate_checks.gpu_warnings; s30 review3)
)  # fmt: skip


def unread_columns(path: Path) -> list[str]:
    """The columns of a runs CSV that hold a value in some row but that a fit does not read
    (``dp_sharding``, ``source`` …: a row's FSDP or framework is not inferred as
    ``stage validate --data`` infers it; ``zero`` and ``--framework`` say them); ``gpu`` is
    read by ``calibrate_checks.gpu_warnings`` (listed beside its warning until s30 review3)."""
    rows = read_csv(path)
    read = READ_COLUMNS | set(METRICS[:3])
    columns = list(rows[0]) if rows else []
    return [c for c in columns if c not in read and any(str(r.get(c) or "").strip() for r in rows)]
