"""Validation of the analytical backend against every published run (``stage validate``).

- :mod:`~stage_explore.validation.setups` — the published rows and their setups
  (``stage_explore/data/setups.toml``) as :class:`~stage_explore.validation.setups.Case` values;
- :mod:`~stage_explore.validation.run` — evaluating them, the leave-one-source-out figure;
- :mod:`~stage_explore.validation.report` — per-source in-sample and held-out error, vTrain
  ranking quality, the targets of issue #11, text, Markdown and JSON.
"""
