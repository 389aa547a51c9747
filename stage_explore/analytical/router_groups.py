"""How many ranks or nodes a token reaches under group-limited routing (6 Dec 2026, s27 mbvrest).

DeepSeek-V3 routes a token to its ``top_k`` = 8 experts among the best ``group_topk`` = 4 of
``groups`` = 8 expert groups ("node-limited routing": DeepSeek-V3 report, arXiv 2412.19437,
Section 2.1.2, "each token will be sent to at most M nodes", M = 4; config.json ``n_group`` 8,
``topk_group`` 4). Megatron-Core does it in ``group_limited_topk`` (NVIDIA/Megatron-LM
``megatron/core/transformer/moe/moe_utils.py`` 00611e6e): each group scored by the sum of its
best ``top_k // group_topk`` expert scores, the ``group_topk`` best groups kept, the ``top_k``
best experts taken among them. Under ``--moe-router-force-load-balancing`` the router's logits
are replaced by standard normal ones (``apply_random_logits``) *before* that selection
(``TopKRouter.forward`` then ``self.routing``), so a force-balanced benchmark still routes
group-limited. With Megatron-Core's expert placement (``E / ep`` consecutive experts per rank)
and ``groups`` equal to the nodes of the expert group, a token reaches at most ``group_topk``
nodes — fewer than the ~5.3 of 8 that unrestricted random routing reaches, which DeepEP's and
HybridEP's per-node deduplication turn into fewer scale-out bytes.

The expected number of distinct units has no closed form (a group's score is a sum of order
statistics), so :func:`group_limited_destinations` evaluates it on :data:`SAMPLES` tokens of
standard normal logits from a fixed seed: deterministic, exact for the sampled tokens, its
standard error about 0.001 units (a destination count's standard deviation is below 0.7).
Checks (tested): with ``group_topk == groups`` it is unrestricted random routing's
``units · (1 − C(E − E/units, k) / C(E, k))`` within sampling; with the units the groups it is
at most ``group_topk``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from stage_core.errors import ConfigError

#: Tokens sampled per evaluation (module docstring).
SAMPLES = 16384
#: The generator's seed: a fixed stream, so every evaluation gives the same number.
SEED = 20261206


@lru_cache(maxsize=64)
def group_limited_destinations(
    experts: int, top_k: int, groups: int, group_topk: int, units: int
) -> float:
    """The expected number of distinct units (each holding ``experts / units`` consecutive
    experts) a token's ``top_k`` experts fall on when they are the best ``top_k`` of the best
    ``group_topk`` of ``groups`` equal expert groups, under random (standard normal) logits."""
    if not (0 < top_k <= experts and 0 < group_topk <= groups and experts % groups == 0):
        raise ConfigError(
            "group-limited routing needs 0 < top_k <= experts, 0 < group_topk <= groups and "
            f"groups dividing experts, but got ({experts=}, {top_k=}, {groups=}, {group_topk=})"
        )
    if units < 1 or experts % units:
        raise ConfigError(f"`units` must divide the {experts} experts, but got {units=}")
    per_group = experts // groups
    pick = max(1, top_k // group_topk)
    logits = np.random.default_rng(SEED).standard_normal((SAMPLES, groups, per_group))
    scores = np.sort(logits, axis=2)[:, :, per_group - pick :].sum(axis=2)
    chosen = np.argsort(-scores, axis=1, kind="stable")[:, :group_topk]
    kept = np.zeros((SAMPLES, groups), dtype=bool)
    np.put_along_axis(kept, chosen, True, axis=1)
    masked = np.where(kept[:, :, None], logits, -np.inf).reshape(SAMPLES, experts)
    best = np.argpartition(-masked, top_k - 1, axis=1)[:, :top_k]
    unit = np.sort(best // (experts // units), axis=1)
    distinct = 1 + np.count_nonzero(np.diff(unit, axis=1), axis=1)
    return float(distinct.mean())
