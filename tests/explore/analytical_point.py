"""A test helper: the analytical backend's per-evaluation :class:`Point` (bound blocks, the
network, the compute dtype, the group table) for one model, parallel config and system, built as
``AnalyticalBackend.evaluate`` builds it, for tests that call the backend's cost methods."""

from __future__ import annotations

from stage_core.lower.emit import GroupTable
from stage_core.lower.program import make_workload
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.parts import Point, compute_dtype
from stage_explore.system.model import System


def bound_point(
    backend: AnalyticalBackend, model: ModelSpec, parallel: ParallelConfig, system: System
) -> Point:
    """The point at which ``backend`` costs ``model`` under ``parallel`` on ``system``."""
    workload = make_workload(model, parallel)
    key, blocks = backend._bound(workload)
    net, token = backend._network(system)
    dtype = compute_dtype(parallel, system)
    return Point(workload, key, blocks, net, token, dtype, GroupTable(workload.mesh), None)
