"""HybridEP's expert-parallel group inside NVLink domains (``moe_hybridep_domain_ranks``; 7 Dec
2026, s30 epdomain).

DeepEP's ``HybridEPBuffer`` (deepseek-ai/DeepEP ``deep_ep/hybrid_ep_buffer.py`` 098da2a6) splits
its group into ``num_of_nodes = group_size // num_of_ranks_per_nvlink_domain`` NVLink domains of
consecutive group ranks (``local_rank = rank % num_of_ranks_per_nvlink_domain``, ``node_rank =
rank // num_of_ranks_per_nvlink_domain``; it asserts that the count divides the group) and,
under ``USE_MNNVL`` (or more than 8 ranks per domain), maps the domain's buffers with fabric
memory handles (``enable_fabric``): the ranks of one domain must share one NVLink fabric.
Megatron-Core's flex dispatcher takes the count from the environment variable
``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`` (a 2026 ``megatron/core/transformer/moe/fused_a2a.py``
of NVIDIA/Megatron-LM, ``_hybrid_ep_num_nodes``: ``group.size() // ranks_per_nvlink_domain``
domains, asserting divisibility; the index does not name that version's commit), which NVIDIA's
MLPerf and Megatron-Bridge performance configs export. A run that sets it, and ran, had each
block of that many expert-parallel ranks inside one NVLink domain, whatever rank order the
preset's contiguous placement would give it (NVIDIA's MLPerf v6.0 DeepSeek-V3 configs: 32 at
EP 32 with ``USE_MNNVL=1``, on NVL72 racks where the preset's contiguous 72-GPU placement lets
some 32-rank groups straddle two racks).

:func:`domain_group` is the group the analytical backend times such an expert-parallel group
by: ``ep / r`` blocks of ``r`` ranks, each block in a scale-up domain of its own. Only the groups
over the expert-parallel axes move; every other group (data-parallel, pipeline, tensor) keeps
the preset's placement, so the model's other collectives are timed as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from stage_core.errors import ConfigError


def domain_group(
    group: Sequence[int], ranks_per_domain: int, dim_sizes: Sequence[int]
) -> tuple[int, ...]:
    """Ranks standing for expert-parallel ``group`` placed as HybridEP places it: ``len(group)
    // ranks_per_domain`` scale-up domains (``dim_sizes[0]`` GPUs each), ``ranks_per_domain``
    consecutive ranks in each (module docstring). A count that does not divide the group, or
    exceeds a domain, is refused."""
    size, domain = len(group), int(dim_sizes[0])
    if ranks_per_domain < 1 or size % ranks_per_domain:
        raise ConfigError(
            f"moe_hybridep_domain_ranks {ranks_per_domain}: expected a divisor of the "
            f"expert-parallel group's {size} ranks (DeepEP HybridEPBuffer asserts it)"
        )
    if ranks_per_domain > domain:
        raise ConfigError(
            f"moe_hybridep_domain_ranks {ranks_per_domain}: expected at most the scale-up "
            f"domain's {domain} GPUs"
        )
    domains = size // ranks_per_domain
    world = math.prod(int(dim) for dim in dim_sizes)
    if domains * domain > world:
        raise ConfigError(
            f"moe_hybridep_domain_ranks {ranks_per_domain}: {domains} domains of {domain} GPUs "
            f"needed, the system has {world} GPUs"
        )
    return tuple(
        block * domain + slot for block in range(domains) for slot in range(ranks_per_domain)
    )


def one_domain_group(group: Sequence[int], dim_sizes: Sequence[int]) -> tuple[int, ...]:
    """Ranks standing for expert-parallel ``group`` when its dispatch runs through
    peer-addressable symmetric memory (``moe_ep_one_domain``; s31 ppbubble): the whole group
    in one scale-up domain of ``dim_sizes[0]`` GPUs, its ranks consecutive. PyTorch's
    ``symm_mem.rendezvous`` gives the dispatch kernels every peer's buffer pointer, which only
    GPUs sharing one NVLink fabric can address (meta-pytorch/dist_moe ``dist_moe/_buffers.py``
    18b4f488), so a group larger than a domain cannot run and is refused."""
    size, domain = len(group), int(dim_sizes[0])
    if size > domain:
        raise ConfigError(
            f"moe_ep_one_domain: the expert-parallel group's {size} ranks exceed the scale-up "
            f"domain's {domain} GPUs (a symmetric-memory dispatch needs every peer on one "
            "NVLink fabric)"
        )
    return tuple(range(size))
