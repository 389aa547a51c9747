"""STAGE core: the symbolic tensor-graph generator.

Holds symbols and meshes, sharding layouts and the redistribution table, ops and graphs with
derived backward passes, model families, parallel configurations, lowering to exact per-rank
programs, memory accounting, and Chakra trace emission. It has no dependency on
``stage_explore``.
"""

from __future__ import annotations

from stage_core.errors import ConfigError, InfeasibleError, ShardingError, StageError

__all__ = ["ConfigError", "InfeasibleError", "ShardingError", "StageError"]
__version__ = "0.1.0"
