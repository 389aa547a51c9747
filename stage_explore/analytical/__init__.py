"""The analytical backend and its parts.

- :mod:`~stage_explore.analytical.backend` — :class:`AnalyticalBackend`: step time, breakdown,
  MFU, memory and feasibility of one design point (``stage eval``, the explorer's default);
- :mod:`~stage_explore.analytical.frameworks` — :class:`FrameworkProfile` and
  :data:`FRAMEWORKS`: what Megatron-LM, Megatron-Core, DeepSpeed and FSDP overlap and hold;
- :mod:`~stage_explore.analytical.kernels` — per-kernel compute time (GEMM shape and dtype,
  fused attention, memory-bound operators);
- :mod:`~stage_explore.analytical.overlap` — the communication a framework overlaps, as
  rewrites of a block's instructions;
- :mod:`~stage_explore.analytical.blocktime` — one block's instructions on a compute and a
  communication stream;
- :mod:`~stage_explore.analytical.pipeline` — the pipeline schedule simulated across stages;
- :mod:`~stage_explore.analytical.collectives` — collective and point-to-point times over the
  network dims a group spans, α–β mode (s); ASTRA-sim mode (ns, exact) in
  :mod:`~stage_explore.analytical.astra_collectives`;
- :mod:`~stage_explore.analytical.tracesim` — per-rank traces simulated with ASTRA-sim's
  execution semantics under a timing model (:mod:`~stage_explore.analytical.trace_models`);
- :mod:`~stage_explore.analytical.trace_mode` — a whole step's traces timed with the analytical
  backend's policy and costs (the oracle of its levelled timing).
"""

from __future__ import annotations

from stage_explore.analytical.astra_collectives import (
    astra_collective_member_ns,
    astra_collective_ns,
    astra_point_to_point_ns,
)
from stage_explore.analytical.collectives import (
    GroupSpan,
    alpha_beta_collective_s,
    alpha_beta_point_to_point_s,
    group_span,
)
from stage_explore.analytical.framework_profile import FrameworkProfile
from stage_explore.analytical.frameworks import FRAMEWORKS, get_framework
from stage_explore.analytical.trace_models import (
    AlphaBetaTimingModel,
    AstraTimingModel,
    BaseTimingModel,
)
from stage_explore.analytical.tracesim import (
    RankTiming,
    SimulationResult,
    astra_config_from_files,
    astra_config_from_system,
    simulate,
)

__all__ = [
    "FRAMEWORKS",
    "AlphaBetaTimingModel",
    "AstraTimingModel",
    "BaseTimingModel",
    "FrameworkProfile",
    "GroupSpan",
    "RankTiming",
    "SimulationResult",
    "alpha_beta_collective_s",
    "alpha_beta_point_to_point_s",
    "astra_collective_member_ns",
    "astra_collective_ns",
    "astra_config_from_files",
    "astra_config_from_system",
    "astra_point_to_point_ns",
    "get_framework",
    "group_span",
    "simulate",
]
