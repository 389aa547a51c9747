"""Hardware as data: accelerators, network dims, systems, presets and ASTRA-sim's view of them.

- :mod:`~stage_explore.system.accelerator` — :class:`Accelerator`, its
  :class:`EfficiencyModel` and per-kernel figures;
- :mod:`~stage_explore.system.model` — :class:`NetworkDim`, :class:`System` and their
  vocabularies (the number checks both share in :mod:`~stage_explore.system.checks`);
- :mod:`~stage_explore.system.loading` — TOML files and presets (:func:`load_system`);
- :mod:`~stage_explore.system.ranks` — rank coordinates and the dims a group spans;
- :mod:`~stage_explore.system.astra` — ASTRA-sim's network dims and settings, both ways.
- :mod:`~stage_explore.system.borrowed` — constants one system file borrows from another
  (``as <name>`` / ``from <name> x <factor>`` in their comments), checked against the source.
"""

from __future__ import annotations

from stage_explore.system.accelerator import Accelerator, EfficiencyModel
from stage_explore.system.astra import (
    AstraAlgorithm,
    AstraConfig,
    AstraDim,
    AstraTopology,
    astra_config_from_files,
    astra_config_from_system,
    astra_dims_from_system,
)
from stage_explore.system.loading import (
    list_presets,
    load_system,
    load_system_file,
    system_from_mapping,
)
from stage_explore.system.model import (
    CollectiveAlgorithm,
    CollectiveAlgorithms,
    NetworkDim,
    System,
    Topology,
)
from stage_explore.system.ranks import GroupSpan, coordinates, group_span

__all__ = [
    "Accelerator",
    "AstraAlgorithm",
    "AstraConfig",
    "AstraDim",
    "AstraTopology",
    "CollectiveAlgorithm",
    "CollectiveAlgorithms",
    "EfficiencyModel",
    "GroupSpan",
    "NetworkDim",
    "System",
    "Topology",
    "astra_config_from_files",
    "astra_config_from_system",
    "astra_dims_from_system",
    "coordinates",
    "group_span",
    "list_presets",
    "load_system",
    "load_system_file",
    "system_from_mapping",
]
