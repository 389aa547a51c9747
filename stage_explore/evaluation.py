"""The result of evaluating one design point, and the contract every backend fulfils.

An :class:`Evaluation` is what the analytical backend and the ASTRA-sim backend return and
what the explorer records: step time and its breakdown, utilisation, throughput, memory and a
feasibility verdict. Times are seconds (floats: they are model outputs, not counts); memory is
exact bytes.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the types only: the system model and the generator import nothing from here
    from stage_core.models.spec import ModelSpec
    from stage_core.parallel import ParallelConfig
    from stage_explore.system.model import System


@dataclass(frozen=True, slots=True, kw_only=True)
class Evaluation:
    """The numbers users decide by, for one (model, parallel config, system) point.

    ``breakdown`` maps a component (``compute``, ``exposed_all_reduce``, ``pipeline_bubble``,
    ``idle`` …) to seconds; its values add up to ``step_time_s``. ``feasible`` is false when the
    point does not fit (``reason`` says why); the timing fields are still filled when known.
    """

    step_time_s: float
    mfu: float
    hfu: float
    tokens_per_s_per_gpu: float
    peak_memory_bytes: int
    feasible: bool
    reason: str = ""
    breakdown: Mapping[str, float] = field(default_factory=dict)
    memory_capacity_bytes: int = 0
    num_gpus: int = 0
    model_flops_per_step: int = 0
    hardware_flops_per_step: int = 0
    cost_per_step: float | None = None
    cost_per_million_tokens: float | None = None
    backend: str = "analytical"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the keys of ``stage eval --json``)."""
        result = asdict(self)
        result["breakdown"] = dict(self.breakdown)
        result["extra"] = dict(self.extra)
        return result


class BaseBackend(abc.ABC):
    """An evaluator of design points.

    Contract (checked for every backend by ``tests/explore/test_backend_contract.py``; a new
    backend joins by one line in its ``BACKENDS`` list):
        ``evaluate(model: ModelSpec, parallel: ParallelConfig, system: System) -> Evaluation``.

        - *Breakdown*: for a feasible point, the values of ``breakdown`` add up to
          ``step_time_s``.
        - *Infeasible is a result*: a valid but infeasible point (out of memory, more GPUs than
          the system has, indivisible sizes) is returned with ``feasible=False`` and a
          ``reason``, never raised.
        - *Bad input*: invalid input — a configuration the model cannot run, a precision the
          accelerator has no peak for — raises :class:`~stage_core.errors.ConfigError` with a
          one-line message.
        - *Deterministic*: the same point gives the same :class:`Evaluation` (``extra`` aside:
          diagnostics such as a simulator's wall time), on this instance and on a fresh one.
        - *Picklable*: backends hold no mutable module state; a pickled copy evaluates the same
          (worker processes receive them so).
    """

    name: str = "base"

    @abc.abstractmethod
    def evaluate(self, model: ModelSpec, parallel: ParallelConfig, system: System) -> Evaluation:
        """Evaluate one design point."""
