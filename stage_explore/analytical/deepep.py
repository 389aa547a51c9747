"""What DeepEP's expert dispatch and combine send, level by level.

Holds :data:`ROUTINGS`, :func:`deepep_destinations` (the distinct ranks or nodes a token's top-k
experts fall on) and :func:`deepep_level_fractions` (the share of an NCCL expert all-to-all's
bytes each network level of a DeepEP dispatch carries).

An NCCL all-to-all dispatcher (Megatron-Core ``--moe-token-dispatcher-type alltoall``) permutes
every token once per selected expert and sends every (token, expert) pair. DeepEP's normal
kernels send a token once per destination *rank* inside a node (``get_dispatch_layout`` returns
``is_token_in_rank`` [tokens × ranks]; the receiving rank gets the token once, with the indices
of its local experts, and permutes it to them locally) and once per destination *node* across
nodes (RDMA to the node, NVLink forwarding to its ranks there: DeepEP README, "normal kernels";
``num_tokens_per_rdma_rank``). Combine mirrors dispatch. So each level of the dispatch carries
``destinations / top_k`` of NCCL's bytes, where ``destinations`` counts the distinct units —
ranks for the NVLink level, nodes for the scale-out level — that hold one of the token's experts,
with the experts placed contiguously, ``E / units`` per unit, as Megatron-Core and AutoModel
place them (``local_expert_indices = ep_rank · E/ep + i``).

Which units a token reaches depends on the router:

- ``"random"``: ``top_k`` distinct experts uniform over the ``E`` — Megatron-Core's
  ``--moe-router-force-load-balancing`` replaces the router logits by random ones
  (``apply_random_logits``). A unit is hit with probability ``1 − C(E − E/u, k) / C(E, k)``.
  With group-limited routing (``groups`` > ``group_topk`` > 0: DeepSeek-V3's 8 / 4) the
  random logits are selected within the best groups, as Megatron-Core's ``group_limited_topk``
  does after ``apply_random_logits``: :func:`~stage_explore.analytical.router_groups.
  group_limited_destinations` (s27 mbvrest).
- ``"round_robin"``: token ``t`` of a rank goes to experts ``(k·t + j) mod E``, ``j < k`` —
  NeMo AutoModel's ``FakeBalancedGate`` (``fake_balanced_gate: true`` in its benchmark configs:
  ``indices = arange(T·k).view(T, k) % E``), which every rank applies to its own tokens. The k
  experts are consecutive, so they fall on one or two neighbouring ranks of one node; the
  average over a period of ``E / gcd(k, E)`` tokens is exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from stage_core.errors import ConfigError
from stage_explore.analytical.router_groups import group_limited_destinations

#: The routers :func:`deepep_destinations` knows (module docstring).
ROUTINGS = ("random", "round_robin")


def deepep_destinations(
    experts: int,
    top_k: int,
    units: int,
    routing: str = "random",
    groups: tuple[int, int] = (0, 0),
) -> float:
    """The expected number of distinct units (each holding ``experts / units`` consecutive
    experts) a token's ``top_k`` experts fall on under ``routing`` (module docstring); ``top_k``
    when the experts do not divide evenly over the units (no deduplication is assumed).
    ``groups``: the model's group-limited routing, (groups, groups kept per token); (0, 0) or
    all groups kept: none."""
    if routing not in ROUTINGS:
        raise ConfigError(f"`routing` must be one of {', '.join(ROUTINGS)}, but got {routing!r}")
    if not 0 < top_k <= experts:
        raise ConfigError(f"`top_k` must be in [1, experts], but got ({top_k=}, {experts=})")
    if units <= 1:
        return 1.0
    if experts % units:
        return float(top_k)
    per_unit = experts // units
    count, kept = groups
    if routing == "random" and 0 < kept < count and experts % count == 0 and kept <= top_k:
        return group_limited_destinations(experts, top_k, count, kept, units)
    if routing == "random":
        miss = math.comb(experts - per_unit, top_k) / math.comb(experts, top_k)
        return units * (1.0 - miss)
    period = experts // math.gcd(top_k, experts)  # token t and t + period start alike
    hits = 0
    for token in range(period):
        start = top_k * token
        hits += len({((start + j) % experts) // per_unit for j in range(top_k)})
    return hits / period


def deepep_level_fractions(
    experts: int,
    top_k: int,
    counts: Sequence[int],
    routing: str = "random",
    groups: tuple[int, int] = (0, 0),
) -> tuple[float, ...]:
    """The share of an NCCL expert all-to-all's bytes DeepEP sends on each level of a group
    with ``counts`` ranks per spanned network level (innermost first, each > 1): level ``i``
    reaches ``prod(counts[i:])`` units (ranks for the innermost, nodes for the next), each
    holding the same number of consecutive experts, and carries
    ``deepep_destinations(...) / top_k`` of the bytes (at most all of them); ``groups`` as
    :func:`deepep_destinations`."""
    fractions = []
    for level in range(len(counts)):
        units = math.prod(counts[level:])
        reached = deepep_destinations(experts, top_k, units, routing, groups)
        fractions.append(min(1.0, reached / top_k))
    return tuple(fractions)
