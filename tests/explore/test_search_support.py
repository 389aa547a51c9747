"""Shared helpers of the explorer tests: a deterministic synthetic backend and study files.

``SyntheticBackend`` computes a real function of the parameters (step time from compute,
communication and pipeline bubble; memory from sharded weights and activations), so searches,
constraints and records are really exercised. Options let tests make it slow, raise, or
reject points. ``study_text`` writes a study file that uses it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_explore.evaluation import BaseBackend, Evaluation
from stage_explore.records import Outcome
from stage_explore.search import BaseExecutor, Candidate, EvaluationJob, evaluate_chunk

GIB = 1 << 30
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


class SyntheticBackend(BaseBackend):
    """A closed-form stand-in for the analytical backend."""

    name = "synthetic"

    def __init__(
        self,
        sleep_s: float = 0.0,
        fail_tp: int = 0,
        reject_pp: int = 0,
        capacity_gib: float = 80.0,
        busy_dir: str = "",
        hold_file: str = "",
    ) -> None:
        self.sleep_s = sleep_s
        #: while an evaluation sleeps, a file named after its process id sits in this folder
        #: (a test that kills a node waits until that node is mid-evaluation)
        self.busy_dir = Path(busy_dir) if busy_dir else None
        #: while this file exists, an evaluation that has slept stays busy (at most 60 s): a test
        #: holds the evaluations in flight, so a node it kills is certainly mid-evaluation
        self.hold_file = Path(hold_file) if hold_file else None
        self.fail_tp = fail_tp
        self.reject_pp = reject_pp
        self.capacity_bytes = int(capacity_gib * GIB)

    def build_design_point(self, study: Any, params: Mapping[str, Any]) -> tuple[Any, Any, Any]:
        workload = {
            "global_batch": study.workload.global_batch,
            "sequence_length": study.workload.sequence_length,
        }
        return None, dict(params), workload

    def evaluate(self, model: Any, parallel: Any, system: Any) -> Evaluation:
        p = parallel
        if self.fail_tp and p["tp"] == self.fail_tp:
            raise RuntimeError(f"synthetic failure at tp={p['tp']}")
        if self.reject_pp and p["pp"] == self.reject_pp:
            raise ConfigError(f"pp={p['pp']} does not divide the 30 layers")
        if self.sleep_s:
            if self.busy_dir is None:
                time.sleep(self.sleep_s)
            else:
                busy = self.busy_dir / str(os.getpid())
                busy.touch()
                try:
                    time.sleep(self.sleep_s)
                    deadline = time.monotonic() + 60
                    while self.hold_file is not None and self.hold_file.exists():
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"{self.hold_file} held an evaluation for 60 s")
                        time.sleep(0.01)
                finally:
                    busy.unlink(missing_ok=True)
        gpus, tp, pp, cp = p["num_gpus"], p["tp"], p["pp"], p["cp"]
        dp = gpus // (tp * pp * cp)
        micro_batches = system["global_batch"] // (dp * p["micro_batch"])
        recompute = {"none": 1.0, "selective": 1.05, "full": 1.33}[p["recompute"]]
        bandwidth = p.get("hw_link_gbps", 400.0)
        compute = 512.0 / gpus * recompute * (1.0 + 0.02 * p["micro_batch"] ** -0.5)
        communication = 0.01 * math.log2(tp) * 400.0 / bandwidth + 0.002 * math.log2(max(dp, 1))
        communication *= 0.5 if p["sp"] else 1.0
        bubble = compute * (pp - 1) / (micro_batches * p["vpp"])
        step = compute + communication + bubble + 0.001 * p["zero"]
        weights = 140 * GIB / (tp * pp) * (1.0 if p["zero"] < 3 else 1.0 / dp)
        optimizer = 560 * GIB / (tp * pp) / (dp if p["zero"] >= 1 else 1)
        activations = (
            8
            * GIB
            * p["micro_batch"]
            / (tp * cp)
            / {"none": 1, "selective": 2, "full": 8}[p["recompute"]]
        )
        peak = int(weights + optimizer + activations)
        feasible = peak <= self.capacity_bytes
        ideal = 400.0 / gpus
        return Evaluation(
            step_time_s=step,
            mfu=ideal / step,
            hfu=ideal * recompute / step,
            tokens_per_s_per_gpu=system["global_batch"] * system["sequence_length"] / (step * gpus),
            peak_memory_bytes=peak,
            feasible=feasible,
            reason=""
            if feasible
            else f"out of memory: {peak / GIB:.1f} GiB > {self.capacity_bytes / GIB:.0f} GiB",
            breakdown={
                "compute": compute,
                "exposed_all_reduce": communication,
                "pipeline_bubble": bubble,
                "zero_overhead": 0.001 * p["zero"],
            },
            memory_capacity_bytes=self.capacity_bytes,
            num_gpus=gpus,
            model_flops_per_step=6
            * 8_000_000_000
            * system["global_batch"]
            * system["sequence_length"],
            hardware_flops_per_step=int(6 * 8e9 * recompute)
            * system["global_batch"]
            * system["sequence_length"],
            backend="synthetic",
            extra={"micro_batches": micro_batches},
        )


class InlineExecutor(BaseExecutor):
    """A test executor: evaluates each chunk in this process when polled (fast, deterministic)."""

    def __init__(self, job: EvaluationJob) -> None:
        self.job = job
        self.chunks: list[list[Candidate]] = []
        self.tasks = 0

    def submit(self, candidates: Sequence[Candidate]) -> None:
        self.chunks.append(list(candidates))
        self.tasks += 1

    def poll(self, timeout_s: float) -> list[tuple[int, Outcome]]:
        chunk = self.chunks.pop(0) if self.chunks else []
        return evaluate_chunk(self.job, chunk) if chunk else []

    @property
    def in_flight(self) -> int:
        return len(self.chunks)

    def cancel(self) -> None:
        self.chunks.clear()

    def close(self) -> None:
        pass


BACKEND = f"{SyntheticBackend.__module__}:{SyntheticBackend.__qualname__}"

SPACE = """num_gpus = [8, 16, 32]
tp = [1, 2, 4, 8]
pp = [1, 2, 4]
zero = [0, 1, 3]
recompute = ["none", "full"]
micro_batch = [1, 2]
"""


def params_of(spec: Any, **values: Any) -> dict[str, Any]:
    """A design point of ``spec``'s space (a :class:`~stage_explore.study.StudySpec`): each knob
    at ``values`` where given, else at its first choice."""
    choices = spec.space.choices()
    return {name: values.get(name, choices[name][0]) for name in spec.space.names()}


def study_text(
    *,
    name: str = "demo",
    sampler: str = "random",
    trials: int | None = 60,
    batch_size: int = 16,
    space: str = SPACE,
    objectives: str = 'step_time_s = "min"\nmfu = "max"',
    options: str = "",
    executor: str = 'kind = "local"\nworkers = 2',
    extra: str = "",
) -> str:
    """A study file using the synthetic backend."""
    budget = "" if trials is None else f"trials = {trials}"
    return f"""[study]
name = "{name}"
seed = 7

[model]
flavor = "llama3-8b"

[workload]
global_batch = 64
sequence_length = 4096

[system]
preset = "h100-80gb"
{extra}
[space]
{space}
[objectives]
{objectives}

[sampler]
kind = "{sampler}"
{budget}
batch_size = {batch_size}

[backend]
name = "{BACKEND}"
options = {{ {options} }}

[executor]
{executor}
"""


def subprocess_env() -> dict[str, str]:
    """An environment in which child processes (and their workers) import this module."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(HERE), env.get("PYTHONPATH")]))
    return env


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_synthetic_backend_is_deterministic_and_consistent(tp: int) -> None:
    backend = SyntheticBackend()
    params = {
        "num_gpus": 16,
        "tp": tp,
        "pp": 2,
        "cp": 1,
        "ep": 1,
        "sp": False,
        "zero": 1,
        "recompute": "none",
        "schedule": "1f1b",
        "vpp": 1,
        "micro_batch": 1,
    }
    workload = {"global_batch": 64, "sequence_length": 4096}
    first = backend.evaluate(None, params, workload)
    second = backend.evaluate(None, dict(params), dict(workload))
    assert first == second
    assert math.isclose(sum(first.breakdown.values()), first.step_time_s)
    assert first.feasible == (first.peak_memory_bytes <= first.memory_capacity_bytes)


class ExitingBackend(SyntheticBackend):
    """Kills its worker process on points with tp = 8 (a crash no exception handler sees)."""

    def evaluate(self, model: Any, parallel: Any, system: Any) -> Evaluation:
        if parallel["tp"] == 8:
            os._exit(3)
        return super().evaluate(model, parallel, system)
