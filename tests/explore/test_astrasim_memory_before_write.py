"""ASTRA-sim's memory guard before the traces are written (s26 astraguard): the traces' exact
size is counted from the encoded rank templates, so a run this host cannot hold is refused
with no ``.et`` file written — by ``write_inputs``, the backend and the explorer's workers —
with the same one-line reason the check after writing gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.parts import compute_dtype
from stage_explore.astrasim import AstraSettings, AstraSimBackend, memory, write_inputs
from stage_explore.astrasim import run as run_module
from stage_explore.astrasim.memory import HostMemoryError, check_memory, trace_bytes
from stage_explore.records import TrialStatus
from stage_explore.system import load_system

A100 = load_system("a100-80gb")
TINY = 1 << 20  # 1 MiB "available": below any run's fixed 15.5 MiB


def _programs(tp: int = 1, pp: int = 1, dp: int = 4) -> Any:
    model = get_flavor("gpt3-125m").with_overrides(layers=2, seq_len=256)
    parallel = ParallelConfig(dp=dp, tp=tp, pp=pp, global_batch=4 * dp)
    return lower(model, parallel), compute_dtype(parallel, A100)


def _traces(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.et")) if directory.exists() else []


def _tiny_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host with 1 MiB available, for the check before writing and the one after."""
    monkeypatch.setattr(memory, "available_bytes", lambda: TINY)
    monkeypatch.setattr(run_module, "available_bytes", lambda: TINY)


def _stand_in(path: Path, started: Path) -> Path:
    """A binary that records being started (the guard must refuse before that)."""
    path.write_text(f"#!/bin/sh\ntouch {started}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("tp", "pp", "compute"), [(1, 1, "roofline"), (2, 2, "roofline"), (2, 1, "kernels")]
)
def test_the_refusal_comes_before_any_trace_and_matches_the_check_after_writing(
    tmp_path: Path, tp: int, pp: int, compute: str
) -> None:
    programs, dtype = _programs(tp, pp)
    settings = AstraSettings(compute=compute)
    with pytest.raises(HostMemoryError) as caught:
        write_inputs(
            programs, A100, tmp_path / "refused", dtype=dtype, settings=settings,
            available=lambda: TINY,
        )  # fmt: skip
    assert _traces(tmp_path / "refused") == []
    reason = caught.value.reason
    assert reason.startswith("infeasible on this host: ASTRA-sim would need an estimated ")
    assert "\n" not in reason and reason.endswith("and 0.00 GiB is available")
    # The same run written in full: the estimate before writing is the one after, exactly
    # (the traces' bytes are counted, not approximated).
    inputs = write_inputs(programs, A100, tmp_path / "written", dtype=dtype, settings=settings)
    assert trace_bytes(inputs) > 0
    with pytest.raises(HostMemoryError) as after:
        check_memory(inputs, lambda: TINY)
    assert after.value.reason == reason
    assert after.value.estimate_bytes == caught.value.estimate_bytes


def test_a_run_that_fits_is_written_as_before(tmp_path: Path) -> None:
    programs, dtype = _programs(2, 2)
    checked = write_inputs(programs, A100, tmp_path / "a", dtype=dtype, available=lambda: 1 << 40)
    plain = write_inputs(programs, A100, tmp_path / "b", dtype=dtype)
    names = [path.name for path in _traces(tmp_path / "b")]
    assert len(names) == 16 and names == [path.name for path in _traces(tmp_path / "a")]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert checked.groups == plain.groups


def test_the_backend_refuses_before_writing_and_keeps_no_empty_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tiny_host(monkeypatch)
    started = tmp_path / "started"
    binary = _stand_in(tmp_path / "astra-sim", started)
    keep = tmp_path / "runs"
    backend = AstraSimBackend(binary=str(binary), keep_dir=keep)
    model = get_flavor("gpt3-125m").with_overrides(layers=2, seq_len=256)
    with pytest.raises(HostMemoryError) as caught:
        backend.evaluate(model, ParallelConfig(dp=4, global_batch=8), A100)
    assert "\n" not in caught.value.reason
    assert caught.value.reason.startswith("infeasible on this host: ASTRA-sim would need")
    assert not started.exists() and _traces(keep) == []
    assert list(keep.iterdir()) == []  # the refused run's (empty) directory is not kept


STUDY = """[study]
name = "refused"
seed = 0

[model]
file = "model.toml"

[workload]
global_batch = 8
sequence_length = 256

[system]
preset = "a100-80gb"

[space]
num_gpus = [4]
tp = [1, 2]

[objectives]
step_time_s = "min"

[sampler]
kind = "grid"

[backend]
name = "astra-sim"
options = {{ binary = "{binary}", keep_dir = "{keep}" }}
"""


def test_the_explorer_records_the_point_infeasible_for_this_host_with_no_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stage_explore.search.backends import resolve_backend
    from stage_explore.search.worker import Candidate, EvaluationJob, evaluate_chunk
    from stage_explore.study import parse_study
    from stage_explore.study.space import grid_points

    _tiny_host(monkeypatch)
    started = tmp_path / "started"
    binary = _stand_in(tmp_path / "astra-sim", started)
    keep = tmp_path / "runs"
    (tmp_path / "model.toml").write_text('base = "gpt3-125m"\nlayers = 2\n')
    spec = parse_study(STUDY.format(binary=binary, keep=keep), tmp_path / "study.toml")
    points = list(grid_points(spec.space, spec.workload, spec.constraints))
    job = EvaluationJob(
        study=spec, factory=resolve_backend(spec.backend.name), options=spec.backend.options
    )
    candidates = [Candidate(key=key, params=point) for key, point in enumerate(points)]
    outcomes = evaluate_chunk(job, candidates)
    assert len(outcomes) == 2
    for _, outcome in outcomes:
        assert outcome.status == TrialStatus.INFEASIBLE, outcome.reason
        assert outcome.reason.startswith("infeasible on this host: ASTRA-sim would need")
        assert "\n" not in outcome.reason
    assert not started.exists() and _traces(keep) == []
