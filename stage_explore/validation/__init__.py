"""Validation of the analytical backend against every published run (``stage validate``).

- :mod:`~stage_explore.validation.setups` — the published rows and their setups
  (``stage_explore/data/setups.toml``) as :class:`~stage_explore.validation.setups.Case` values;
- :mod:`~stage_explore.validation.infer` (rules in :mod:`~stage_explore.validation.infer_fields`)
  — rows no ``setups.toml`` source claims, with setups inferred from their CSV columns;
- :mod:`~stage_explore.validation.accounting` — the row count: every row read is evaluated or
  reported;
- :mod:`~stage_explore.validation.run` — evaluating them, the leave-one-source-out figure;
- :mod:`~stage_explore.validation.report` — per-source in-sample and held-out error, vTrain
  ranking quality, the targets of issue #11, text, Markdown and JSON.
"""
