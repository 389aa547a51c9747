"""Pareto fronts of trial records, vectorised with numpy.

Contents:
    :func:`parse_objectives`
        ``{"step_time_s": "min", "mfu": "max"}`` or ``["step_time_s", "mfu"]`` (default
        directions) → ordered ``(column, Direction)`` pairs.
    :func:`pareto_mask`
        the non-dominated rows of a value matrix.
    :func:`pareto_front`
        the non-dominated rows of a records DataFrame, one row per configuration.

A row *dominates* another when it is at least as good in every objective and strictly better
in one; rows that are equal in every objective do not dominate each other, so all of them
stay on the front. Rows with a missing (NaN) objective are never on it. Rows that are the same
configuration (the same canonical point, see :func:`~stage_explore.study.space.canonical_params`,
e.g. ``sp`` true and false at tp = 1 in records written before the space was canonical, or a
repeated trial) count once: the first by trial number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from stage_core.arguments import expect
from stage_core.errors import ConfigError
from stage_explore.study.space import KNOB_DEFAULTS, canonical_params
from stage_explore.study.spec import OBJECTIVE_METRICS, PARALLEL_KNOBS, Direction

if TYPE_CHECKING:
    import pandas as pd

#: Rows of the sorted matrix compared at once against the front found so far.
_BLOCK_ROWS = 512

Objectives = Mapping[str, str] | Sequence[str]


def parse_objectives(objectives: Objectives) -> list[tuple[str, Direction]]:
    """Objective columns and directions; a bare name takes its natural direction."""
    if isinstance(objectives, str):
        objectives = [objectives]
    if isinstance(objectives, Mapping):
        pairs = list(objectives.items())
    else:
        pairs = []
        for name in objectives:
            if name not in OBJECTIVE_METRICS:
                known = ", ".join(OBJECTIVE_METRICS)
                raise ConfigError(
                    f"objective {name!r} has no default direction; give it as "
                    f'{{"{name}": "min"}} or use one of: {known}'
                )
            pairs.append((name, OBJECTIVE_METRICS[name]))
    if not pairs:
        raise ConfigError("expected at least one objective, got none")
    parsed = []
    for name, direction in pairs:
        word = {"minimize": "min", "minimise": "min", "maximize": "max", "maximise": "max"}.get(
            str(direction), str(direction)
        )
        if word not in ("min", "max"):
            raise ConfigError(
                f'objective {name!r}: expected direction "min" or "max", got {direction!r}'
            )
        parsed.append((str(name), Direction(word)))
    return parsed


def pareto_mask(
    values: npt.ArrayLike, maximize: Sequence[bool] | None = None
) -> npt.NDArray[np.bool_]:
    """Which rows of ``values`` (rows × objectives) are non-dominated.

    ``maximize[j]`` says objective ``j`` is maximised (default: all minimised).

    Method: sort the rows lexicographically (a row can only be dominated by rows before it in
    that order), then sweep blocks of rows in order, keeping a row when no row of the front so
    far and no earlier row of its block dominates it. Cost O(n·|front|·m).
    """
    matrix = np.asarray(values, dtype=np.float64)
    if matrix.ndim == 1:
        matrix = matrix[:, None]
    rows, columns = matrix.shape
    signs = (
        np.ones(columns) if maximize is None else np.where(np.asarray(maximize, bool), -1.0, 1.0)
    )
    if signs.shape != (columns,):
        raise ConfigError(f"expected {columns} directions, got {len(signs)}")
    costs = matrix * signs  # rows × objectives, all minimised
    mask = np.zeros(rows, dtype=bool)
    valid = np.flatnonzero(~np.isnan(costs).any(axis=1))
    if valid.size == 0:
        return mask
    order = valid[np.lexsort(costs[valid].T[::-1])]  # lexicographic, first objective first
    front = np.empty((0, columns))
    for start in range(0, order.size, _BLOCK_ROWS):
        block_index = order[start : start + _BLOCK_ROWS]
        block = costs[block_index]
        # against the front: front × block × objectives
        no_worse = (front[:, None, :] <= block[None, :, :]).all(axis=2)
        better = (front[:, None, :] < block[None, :, :]).any(axis=2)
        dominated = (no_worse & better).any(axis=0)
        # within the block, earlier rows only: block × block
        no_worse = (block[:, None, :] <= block[None, :, :]).all(axis=2)
        better = (block[:, None, :] < block[None, :, :]).any(axis=2)
        earlier = np.tri(len(block), k=-1, dtype=bool).T  # earlier[i, j]: i before j
        dominated |= (no_worse & better & earlier).any(axis=0)
        kept = block_index[~dominated]
        mask[kept] = True
        front = np.concatenate([front, costs[kept]])
    return mask


def pareto_front(
    df: pd.DataFrame, objectives: Objectives, *, feasible_only: bool = True
) -> pd.DataFrame:
    """The rows of ``df`` on the Pareto front of ``objectives``, sorted by the first objective.

    ``objectives``: ``{"step_time_s": "min", "mfu": "max"}`` or a list of metric names with
    their natural directions. With ``feasible_only`` (the default) and a ``status`` column, only
    rows whose status is ``"ok"`` compete.
    """
    import pandas as pd  # noqa: F811 - imported here: the CLI starts faster without it

    expect(df, pd.DataFrame, "df", "load_results(folder)")
    pairs = parse_objectives(objectives)
    missing = [name for name, _ in pairs if name not in df.columns]
    if missing:
        raise ConfigError(
            f"objective column(s) {', '.join(missing)} not in the records; "
            f"columns are: {', '.join(map(str, df.columns))}"
        )
    text = [
        f"{name} ({df[name].dtype})"
        for name, _ in pairs
        if not pd.api.types.is_numeric_dtype(df[name]) or pd.api.types.is_bool_dtype(df[name])
    ]
    if text:
        raise ConfigError(f"objective column(s) {', '.join(text)}: expected numbers to rank")
    candidates = df[df["status"] == "ok"] if feasible_only and "status" in df.columns else df
    candidates = distinct_configurations(candidates)
    values = (
        np.column_stack(
            [candidates[name].to_numpy(dtype=np.float64, na_value=np.nan) for name, _ in pairs]
        )
        if len(candidates)
        else np.empty((0, len(pairs)))
    )
    mask = pareto_mask(values, [direction is Direction.MAX for _, direction in pairs])
    front = candidates[mask]
    first, direction = pairs[0]
    return front.sort_values(first, ascending=direction is Direction.MIN, kind="stable")


def distinct_configurations(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with one row per canonical configuration (the lowest trial number of each) of
    each study (the ``study`` column, when there is one).

    Needs every parallel knob as a column (hardware ``hw_*`` columns join the key); a frame
    without them is returned as it is.
    """
    # records written before the pp_split knob existed ran STAGE's default split, "auto", and
    # those before the dp_shard knob sharded over all of dp (0), those before the
    # recompute_num_layers knob recomputed every layer under full recompute (0), and those
    # before the recompute_method knob picked Megatron-Core's "block" layers, and those before
    # the precision and fp8_recipe knobs ran ParallelConfig's defaults (bf16; delayed scaling):
    # each knob's KNOB_DEFAULTS value
    later = ("pp_split", "dp_shard", "recompute_num_layers", "recompute_method", "precision",
             "fp8_recipe")  # fmt: skip
    defaults = {name: KNOB_DEFAULTS[name] for name in later}
    if not len(df) or not set(PARALLEL_KNOBS) - set(defaults) <= set(df.columns):
        return df
    ordered = df.sort_values("trial", kind="stable") if "trial" in df.columns else df
    names = [*PARALLEL_KNOBS, *sorted(c for c in df.columns if str(c).startswith("hw_"))]
    missing = {k: v for k, v in defaults.items() if k not in ordered.columns}
    records = ordered.assign(**missing)[names].to_dict("records")
    # rows of different studies (an output folder's, concatenated) are different points even
    # with the same knobs: another model, system or workload (s23 review: one study's were dropped)
    studies = ordered["study"].tolist() if "study" in ordered.columns else [None] * len(records)
    keys = [
        (study, *(canonical_params(record, {}, moe=None)[name] for name in names))
        for study, record in zip(studies, records, strict=True)
    ]
    first: dict[tuple[object, ...], int] = {}
    for position, key in enumerate(keys):
        first.setdefault(key, position)
    if len(first) == len(keys):
        return df
    kept = ordered.iloc[sorted(first.values())]
    return df.loc[df.index.isin(kept.index)]
