"""The ASTRA-sim backend: STAGE's traces and system description run by an installed ASTRA-sim.

- :mod:`~stage_explore.astrasim.discovery` — finding the binary (option, ``ASTRA_SIM_BIN``,
  ``PATH``);
- :mod:`~stage_explore.astrasim.inputs` — the trace set, ``comm_group.json``, ``system.json``,
  ``network.yml`` and ``memory.json`` of one run;
- :mod:`~stage_explore.astrasim.run` — the command line, the timeout, and what counts as a
  failed run (:class:`AstraSimError`);
- :mod:`~stage_explore.astrasim.parse` — reading every rank's result from the output;
- :mod:`~stage_explore.astrasim.backend` — :class:`AstraSimBackend`, returning the same
  :class:`~stage_explore.evaluation.Evaluation` as the analytical backend.

User documentation: ``docs/astra-sim.md``.
"""

from __future__ import annotations

from stage_core.lower.flops import step_flops
from stage_explore.analytical.parts import compute_dtype
from stage_explore.astrasim.backend import AstraSimBackend
from stage_explore.astrasim.discovery import (
    BINARY_NAMES,
    ENV_VAR,
    Variant,
    check_available,
    find_binary,
)
from stage_explore.astrasim.inputs import (
    MEMORY_JSON,
    AstraInputs,
    AstraSettings,
    astra_config,
    memory_json_text,
    system_json_text,
    write_inputs,
)
from stage_explore.astrasim.parse import AstraSimReport, RankReport, parse_output
from stage_explore.astrasim.run import AstraSimError, AstraSimRun, command_line, run_astra_sim

__all__ = [
    "BINARY_NAMES",
    "ENV_VAR",
    "MEMORY_JSON",
    "AstraInputs",
    "AstraSettings",
    "AstraSimBackend",
    "AstraSimError",
    "AstraSimReport",
    "AstraSimRun",
    "RankReport",
    "Variant",
    "astra_config",
    "check_available",
    "command_line",
    "compute_dtype",
    "find_binary",
    "memory_json_text",
    "parse_output",
    "run_astra_sim",
    "step_flops",
    "system_json_text",
    "write_inputs",
]
