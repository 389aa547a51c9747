"""Test helpers: the analytical backend's per-evaluation :class:`Point` (bound blocks, the
network, the compute dtype, the group table) for one model, parallel config and system, built as
``AnalyticalBackend.evaluate`` builds it, for tests that call the backend's cost methods; and the
tensor-parallel all-gathers of a layer's phase programs, for the FP8 gather tests."""

from __future__ import annotations

from collections.abc import Iterator

from stage_core.lower.bind import Instr
from stage_core.lower.emit import GroupTable
from stage_core.lower.program import make_workload
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
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


def layer_tp_gathers(
    backend: AnalyticalBackend, model: ModelSpec, parallel: ParallelConfig, system: System
) -> Iterator[tuple[str, Instr]]:
    """``(phase, instruction)`` for every tensor-parallel all-gather of the decoder layer's
    forward and backward phase programs as ``backend`` runs them (``phase`` the program's,
    ``fwd`` or ``bwd``)."""
    point = bound_point(backend, model, parallel, system)
    parts = backend._kind(point, "layer")
    spans = {axes: backend._spans(point, axes)[0] for axes in parts.span_axes}
    for phase in ("fwd", "bwd"):
        for instr in backend._phase_program(point, "layer", phase, spans).instrs:
            if instr.collective is CollectiveKind.ALL_GATHER and instr.axes == ("tp",):
                yield phase, instr
