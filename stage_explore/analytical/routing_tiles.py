"""Row tiles of an expert GEMM when the tokens per expert are those of random routing.

The generator gives every routed expert the mean number of token slots (``k·tokens/E``), and the
kernel model (:func:`~stage_explore.analytical.gemm_tiles.gemm_efficiency`) quantizes a GEMM's rows
into ``ceil(M / tile)`` output tiles. A framework's dropless grouped GEMM does not see the mean:
it runs one GEMM per local expert on that expert's own token count (Transformer Engine's
``GroupedLinear`` takes ``m_splits = tokens_per_expert.tolist()``; the ``grouped_gemm`` package
takes ``batch_sizes``), and each expert's last row tile is partly empty. When the mean is a
multiple of the tile — GPT-OSS-120B on 8 H100 ranks: 16 local experts of exactly 1,024 slots,
8 tiles of 128 — the model sees no partial tile at all, while about half the real experts need a
ninth.

The benchmarks route at random. Megatron-Core's ``--moe-router-force-load-balancing``
(``megatron/core/transformer/moe/router.py``: ``apply_random_logits`` / ``RandomSTE``,
"random logits of router for load-balanced benchmark": ``logits.clone().normal_()``) replaces
the router's logits with i.i.d. normal ones before the top-k, and every Megatron-Bridge MoE
performance recipe sets it (``scripts/performance``: ``set_gpt_oss_common_configs``, the
Qwen3 / DeepSeek recipes, and the common overrides' ``if num_moe_experts:
moe_router_force_load_balancing = True``). The top-k of i.i.d. logits is a uniformly random
k-subset of the E experts, so a given expert is picked by each of the group's ``n`` tokens
independently with probability ``p = k/E``: its count is Binomial(n, p), mean ``n·p`` (the
generator's slots), standard deviation ``sqrt(n·p·(1−p))`` — 31 tokens for GPT-OSS above.
:func:`expected_row_tiles` is ``E[ceil(X / tile)]`` for that count, computed from the exact
binomial probabilities; no constant. :func:`routing_share` says when a run routes this way.
NeMo AutoModel's ``FakeBalancedGate`` (framework option
``moe_fake_balanced_gate``) routes token ``t`` to experts ``k·t … k·t+k−1 mod E``, which gives
every expert exactly the mean: no correction there.
"""

from __future__ import annotations

import math
from functools import lru_cache

from stage_core.models.spec import ModelSpec

#: Standard deviations either side of the mean summed over (the binomial's tail beyond is
#: below 1e-20 of its mass).
_SIGMAS = 12.0


@lru_cache(maxsize=4096)
def expected_row_tiles(mean: int, share: float, tile: int) -> float:
    """``E[ceil(X / tile)]`` for ``X ~ Binomial(n, share)`` with ``n = round(mean / share)``:
    the expected row tiles of one expert's GEMM when each of the ``n`` tokens routed over the
    expert group picks the expert with probability ``share`` (``k/E``). ``share`` 1 (or a
    degenerate count) is ``ceil(mean / tile)``."""
    if mean <= 0 or tile <= 0:
        raise ValueError(f"expected_row_tiles: mean and tile must be > 0, got {mean=}, {tile=}")
    if not 0.0 < share <= 1.0:
        raise ValueError(f"expected_row_tiles: share must be in (0, 1], got {share=}")
    n = max(1, round(mean / share))
    variance = n * share * (1.0 - share)
    if variance <= 0.0:
        return float(-(-mean // tile))
    sigma = math.sqrt(variance)
    centre = n * share
    low = max(0, math.floor(centre - _SIGMAS * sigma))
    high = min(n, math.ceil(centre + _SIGMAS * sigma))
    log_p, log_q = math.log(share), math.log1p(-share)
    log_n = math.lgamma(n + 1)
    mass = expected = 0.0
    for x in range(low, high + 1):
        weight = math.exp(
            log_n - math.lgamma(x + 1) - math.lgamma(n - x + 1) + x * log_p + (n - x) * log_q
        )
        mass += weight
        expected += weight * -(-x // tile)
    return expected / mass


def routing_share(model: ModelSpec, fake_balanced_gate: bool) -> float:
    """``k/E`` for a dropless MoE model routed at random (the Megatron-Core benchmarks'
    forced load balancing above), 0 when every expert gets exactly the mean: a dense model,
    capacity-bounded slots (``capacity_factor``: the generator's padded capacity), or
    AutoModel's ``FakeBalancedGate``."""
    if model.num_experts <= 0 or model.top_k <= 0 or model.capacity_factor is not None:
        return 0.0
    if fake_balanced_gate:
        return 0.0
    return model.top_k / model.num_experts
