"""Pareto fronts: the vectorised sweep agrees with the definition computed pair by pair."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stage_core.errors import ConfigError
from stage_explore import pareto_front
from stage_explore.pareto import pareto_mask, parse_objectives
from stage_explore.study.spec import Direction


def brute_force(values: np.ndarray, maximize: list[bool]) -> np.ndarray:
    """Row i is on the front iff no row j is >= in every objective and > in one (signed)."""
    signs = np.where(maximize, -1.0, 1.0)
    costs = values * signs
    keep = []
    for i, row in enumerate(costs):
        if np.isnan(row).any():
            keep.append(False)
            continue
        dominated = any(
            not np.isnan(other).any() and (other <= row).all() and (other < row).any()
            for j, other in enumerate(costs)
            if j != i
        )
        keep.append(not dominated)
    return np.array(keep, dtype=bool)


# small integer grids make ties and duplicates frequent
cell = st.one_of(st.integers(0, 6).map(float), st.just(float("nan")))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(data=st.data(), columns=st.integers(1, 4), rows=st.integers(0, 60))
def test_mask_matches_brute_force(data: st.DataObject, columns: int, rows: int) -> None:
    values = np.array(
        data.draw(
            st.lists(
                st.lists(cell, min_size=columns, max_size=columns), min_size=rows, max_size=rows
            )
        ),
        dtype=float,
    ).reshape(rows, columns)
    maximize = data.draw(st.lists(st.booleans(), min_size=columns, max_size=columns))
    assert np.array_equal(pareto_mask(values, maximize), brute_force(values, maximize))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(seed=st.integers(0, 1000))
def test_mask_matches_brute_force_across_blocks(seed: int) -> None:
    values = np.random.default_rng(seed).integers(0, 40, size=(1300, 2)).astype(float)
    assert np.array_equal(pareto_mask(values, [False, True]), brute_force(values, [False, True]))


def test_front_of_a_records_frame_keeps_ok_rows_and_sorts_by_the_first_objective() -> None:
    frame = pd.DataFrame(
        {
            "trial": [0, 1, 2, 3, 4, 5],
            "status": ["ok", "ok", "ok", "infeasible", "ok", "failed"],
            "step_time_s": [2.0, 1.0, 3.0, 0.1, 1.0, np.nan],
            "mfu": [0.5, 0.4, 0.6, 0.9, 0.3, np.nan],
        }
    )
    front = pareto_front(frame, {"step_time_s": "min", "mfu": "max"})
    assert front["trial"].tolist() == [1, 0, 2]
    assert pareto_front(frame, ["step_time_s", "mfu"])["trial"].tolist() == [1, 0, 2]
    everything = pareto_front(frame, ["step_time_s", "mfu"], feasible_only=False)
    assert everything["trial"].tolist() == [3]
    assert pareto_front(frame, {"mfu": "maximize"})["trial"].tolist() == [2]


@pytest.mark.parametrize(
    ("objectives", "message"),
    [
        (["latency"], "objective 'latency' has no default direction"),
        ({"step_time_s": "up"}, 'expected direction "min" or "max", got \'up\''),
        ({"absent": "min"}, "objective column(s) absent not in the records"),
        ([], "expected at least one objective"),
    ],
)
def test_bad_objectives_are_config_errors(objectives: object, message: str) -> None:
    frame = pd.DataFrame({"status": ["ok"], "step_time_s": [1.0]})
    with pytest.raises(ConfigError) as caught:
        pareto_front(frame, objectives)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_parse_objectives_uses_natural_directions() -> None:
    assert parse_objectives(["mfu", "step_time_s", "tokens_per_s_per_gpu"]) == [
        ("mfu", Direction.MAX),
        ("step_time_s", Direction.MIN),
        ("tokens_per_s_per_gpu", Direction.MAX),
    ]
