"""The fused attention kernel's grid in waves on the SMs: how much of the SMs' time a
FlashAttention-2 / -3 launch keeps busy, against the full-grid benchmark its figures come from.

**Launch.** FlashAttention-2 (``csrc/flash_attn/src``) launches one CTA per block of ``block_m``
query rows and (batch, head) in the forward — ``grid(⌈q/kBlockM⌉, b, h)``, the query block
fastest — and one per block of ``block_n`` keys in the backward (``grid_n(⌈k/kBlockN⌉, b, h)``,
``run_flash_bwd_seqk_parallel``); FlashAttention-3 (``hopper/``) runs the same tiles from a
persistent grid of one CTA per SM, the causal forward's tiles handed out longest first
(``DynamicPersistentTileScheduler``), the causal backward's likewise
(``SingleTileBwdLPTScheduler``). :func:`attention_launch` holds the tile sizes and CTAs per SM
read from that code (each figure cited at :data:`FA2_FORWARD` … :data:`FA3_BACKWARD`).

**Work per CTA.** A forward CTA of query block ``i`` visits the key blocks up to
``⌈((i + 1)·M + k − q)/N⌉`` under a causal mask (the mask aligned to the bottom right, as
``compute_attn_1rowblock``'s ``n_block_max``), all ``⌈k/N⌉`` without; a backward CTA of key
block ``j`` the query blocks from ``⌊(j·N + q − k)/M⌋`` to the end. Work is counted in
``M × N`` blocks.

**Waves.** The CTAs are placed as slots free (``sm_count × ctas_per_sm`` slots, the hardware's
block scheduler or FA3's tile counter), in grid order or longest first: a greedy list schedule
whose makespan is the kernel's time. The grid's efficiency is the useful (query, key) pairs
over the slots' time in pairs; :func:`grid_factor` divides it by the same efficiency of the
benchmark grid the kernel's figures were measured on — flash-attention's
``benchmarks/benchmark_flash_attention.py`` (and the FA2 / FA3 papers' §4.1): 16,384 tokens
(``batch = 16384 // seqlen``), hidden 2,048 (``heads = 2048 // head_dim``) — so a full grid
keeps the preset's fraction and a short one loses what its last wave leaves idle. The factor
can also exceed 1: the benchmark's own grid is short at long sequences (16 (batch, head) pairs at
16,384 keys), so a call with more pairs fills its waves better than the figure's measurement did
(FlashAttention-2's causal forward at head dim 128, 1,024 pairs of 16,384 keys: 1.158 on 132
SMs, 1.128 on 108). No fitted constant: tile sizes, CTAs per SM and SM counts only.

**Split-KV.** FlashAttention-2's ``mha_fwd`` splits the keys when the grid is short
(``set_params_splitkv`` → ``num_splits_heuristic``, dropout 0): :func:`fa2_splits`; the split
kernel runs 64-row query blocks. Its combine kernel (memory-bound) is not charged.

Not modelled: cuDNN's fused attention (its kernels and tiles are not public), FA4 (CuTe DSL,
Blackwell), ROCm's kernels, a varlen / THD grid (``⌈max_seqlen/M⌉`` CTAs per document, those
past a document's end exiting at once: the generator has no document lengths), FA3's PackGQA
and split heuristics (off at training shapes: ``num_splits = 1`` from ``flash_attn_func``,
sequences a multiple of ``kBlockM``), and a CTA running alone on an SM faster than beside
another.
"""

from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass

from stage_core.lower.bind import Instr
from stage_explore.system.accelerator import ATTENTION_GRID_FAMILIES, KernelModel

#: The kernel families with a launch model (a preset's ``attention_grids`` names them).
FA2 = "fa2"
FA3 = "fa3"
GRID_FAMILIES = ATTENTION_GRID_FAMILIES

#: The benchmark grid the presets' attention figures come from: flash-attention
#: ``benchmarks/benchmark_flash_attention.py`` (Dao-AILab/flash-attention 0469c727:
#: ``bs_seqlen_vals = [(32, 512), …, (1, 16384)]``, ``dim = 2048``, ``nheads = dim // headdim``),
#: the setting of Dao 2023 (arXiv 2307.08691) and Shah et al. 2024 (arXiv 2407.08608), §4.1.
BENCHMARK_TOKENS = 16384
BENCHMARK_HIDDEN = 2048


@dataclass(frozen=True, slots=True)
class AttentionLaunch:
    """One attention kernel's launch: its tile, CTAs resident per SM, whether it runs one CTA
    per key block (a backward) and whether its tiles are issued longest first."""

    block_m: int
    block_n: int
    ctas_per_sm: int
    over_keys: bool = False
    longest_first: bool = False
    split_kv: bool = False


#: FlashAttention-2 forward, by the largest head dim of each branch: (kBlockM, kBlockN, warps)
#: of ``run_mha_fwd_hdim*`` (Dao-AILab/flash-attention c1f0be2f
#: ``csrc/flash_attn/src/flash_fwd_launch_template.h``, dropout 0, sm80 / sm90; 256: A100's
#: branch, ``max_smem_per_sm < 4·256·(64 + 128)``). Two 4-warp CTAs per SM: "We multiply number
#: of SMs by 2 to hard-code the fact that we're using 128 threads per block"
#: (``csrc/flash_attn/flash_api.cpp`` 00979f57, ``set_params_splitkv``); an 8-warp CTA is taken
#: to hold its SM alone (an assumption: the register use is not in the code).
FA2_FORWARD = ((64, 128, 128, 4), (96, 128, 64, 4), (128, 128, 64, 4), (192, 128, 64, 8),
               (256, 128, 64, 8))  # fmt: skip
#: FlashAttention-2 backward (``run_mha_bwd_hdim*`` of ``flash_bwd_launch_template.h``,
#: 37e32feb, shared memory per block ≥ 144 KiB: A100, H100): (kBlockM, kBlockN), 8 warps,
#: one CTA per SM (144 KiB of shared memory at head dim 128: ``kSmemSize1colblock``).
FA2_BACKWARD = ((64, 128, 128), (128, 64, 128), (256, 64, 64))
#: FlashAttention-2's split-KV forward: kBlockM 64, kBlockN 256 / 128 / 64 by head dim, 4 warps
#: (``run_mha_fwd_splitkv_dispatch``, flash_fwd_launch_template.h c1f0be2f).
FA2_SPLIT_BLOCK_M = 64
FA2_MAX_SPLITS = 128
#: FlashAttention-3 forward on sm90, 16-bit: (kBlockM, kBlockN causal, kBlockN otherwise) of
#: ``tile_size_fwd_sm90`` (Dao-AILab/flash-attention 07602adc ``hopper/tile_size.h``); one
#: CTA per SM (a persistent grid of ``num_sm`` CTAs; ``hopper/flash_fwd_launch_template.h``).
FA3_FORWARD = ((64, 192, 128, 192), (96, 192, 144, 144), (128, 128, 128, 176),
               (192, 128, 128, 128), (256, 128, 80, 80))  # fmt: skip
#: FlashAttention-3 backward on sm90: (kBlockM causal, kBlockM otherwise, kBlockN) of
#: ``run_mha_bwd_hdim96`` / ``hdim128`` (``hopper/flash_bwd_launch_template.h`` 000786d2);
#: causal tiles longest first (``SingleTileBwdLPTScheduler``); one CTA per SM.
FA3_BACKWARD = ((96, 64, 64, 128), (128, 64, 80, 128))


def attention_launch(
    family: str, head_dim: int, causal: bool, backward: bool
) -> AttentionLaunch | None:
    """The launch of kernel ``family`` (:data:`GRID_FAMILIES`) at ``head_dim``; None when the
    tables do not cover it (an unknown family, a head dim above the largest row)."""
    if family == FA2 and not backward:
        for dims, m, n, warps in FA2_FORWARD:
            if head_dim <= dims:
                return AttentionLaunch(m, n, 2 if warps == 4 else 1, split_kv=True)
    elif family == FA2:
        for dims, m, n in FA2_BACKWARD:
            if head_dim <= dims:
                return AttentionLaunch(m, n, 1, over_keys=True)
    elif family == FA3 and not backward:
        for dims, m, n_causal, n_full in FA3_FORWARD:
            if head_dim <= dims:
                return AttentionLaunch(m, n_causal if causal else n_full, 1, longest_first=causal)
    elif family == FA3:
        for dims, m_causal, m_full, n in FA3_BACKWARD:
            if head_dim <= dims:
                m = m_causal if causal else m_full
                return AttentionLaunch(m, n, 1, over_keys=True, longest_first=causal)
    return None


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _works(launch: AttentionLaunch, queries: int, keys: int, causal: bool) -> tuple[int, ...]:
    """The ``M × N`` blocks each CTA of one (batch, head) runs, in grid order."""
    m, n = launch.block_m, launch.block_n
    m_blocks, n_blocks = _ceil(queries, m), _ceil(keys, n)
    if launch.over_keys:
        if not causal:
            return (m_blocks,) * n_blocks
        return tuple(
            max(0, m_blocks - max(0, (j * n + queries - keys) // m)) for j in range(n_blocks)
        )
    if not causal:
        return (n_blocks,) * m_blocks
    return tuple(
        max(0, min(n_blocks, _ceil((i + 1) * m + keys - queries, n))) for i in range(m_blocks)
    )


def _split_works(
    launch: AttentionLaunch, queries: int, keys: int, causal: bool, splits: int
) -> tuple[int, ...]:
    """The blocks each CTA of FlashAttention-2's split-KV forward runs for one (batch, head):
    ``grid(⌈q/64⌉, splits, b·h)``, each split a contiguous share of the key blocks."""
    m, n = launch.block_m, launch.block_n
    n_blocks = _ceil(keys, n)
    per_split = _ceil(n_blocks, splits)
    works = []
    for split in range(splits):
        low = split * per_split
        for i in range(_ceil(queries, m)):
            top = n_blocks
            if causal:
                top = min(top, _ceil((i + 1) * m + keys - queries, n))
            works.append(max(0, min(top, low + per_split) - low))
    return tuple(works)


def fa2_splits(batch_heads: int, queries: int, keys: int, head_dim: int, sm_count: int) -> int:
    """How many key splits FlashAttention-2's forward runs (``num_splits_heuristic`` as
    ``set_params_splitkv`` calls it, csrc/flash_attn/flash_api.cpp 00979f57): 64-row query
    blocks against ``2 · sm_count`` slots; 1 when they fill 80 % of them; else the fewest
    eligible splits whose wave efficiency is within 85 % of the best."""
    block_n = 256 if head_dim <= 64 else 128 if head_dim <= 128 else 64
    n_blocks = _ceil(keys, block_n)
    total = batch_heads * _ceil(queries, FA2_SPLIT_BLOCK_M)
    slots = 2 * sm_count
    if total >= 0.8 * slots:
        return 1
    efficiency: dict[int, float] = {}
    for splits in range(1, min(FA2_MAX_SPLITS, slots, n_blocks) + 1):
        if splits > 1 and _ceil(n_blocks, splits) == _ceil(n_blocks, splits - 1):
            continue  # not eligible: the same blocks per split as one fewer
        waves = total * splits / slots
        efficiency[splits] = waves / _ceil(total * splits, slots)
    best = max(efficiency.values(), default=0.0)
    return next((s for s, e in efficiency.items() if e >= 0.85 * best), 1)


def _makespan(works: tuple[int, ...], copies: int, slots: int, longest_first: bool) -> int:
    """The greedy list schedule's makespan, in blocks, of ``copies`` (batch, head) pairs'
    CTAs (``works`` each, the pair outermost) on ``slots`` slots.

    Each CTA goes to a least-loaded slot, so only the multiset of the slots' loads matters, and
    adding one number to every load commutes with the schedule. That gives the same makespan
    as placing the CTAs one by one without visiting each (s36 review9: a micro-batch of 2^20
    sequences listed 2·10^9 CTAs, hours and tens of GB): longest first, ``count`` CTAs of one
    size ``w`` on loads within ``w`` of each other add ``w`` to every slot per ``slots`` of them
    (:func:`_place_equal`); in grid order the loads after each pair, less their least, repeat
    with a period, and the pairs past it add the period's rise (:func:`_place_copies`)."""
    if copies * len(works) <= slots:
        return max(works, default=0) if copies > 0 else 0
    free = [0] * slots
    if longest_first:
        counts: dict[int, int] = {}
        for work in works:
            counts[work] = counts.get(work, 0) + 1
        top = 0
        for work in sorted(counts, reverse=True):
            top = _place_equal(free, work, counts[work] * copies, top)
        return max(free)
    return _place_copies(free, works, copies)


def _place_equal(free: list[int], work: int, count: int, top: int) -> int:
    """Place ``count`` CTAs of ``work`` blocks each on the heap of loads ``free`` (in place),
    whose largest load is ``top``; return the new largest. Once the loads are within ``work``
    of each other, ``slots`` CTAs in a row go one to each slot (each placed CTA lifts its slot
    to at least the largest), so whole rounds are one addition."""
    slots = len(free)
    while count > 0:
        if count >= slots and top - free[0] <= work:
            rounds = count // slots
            free[:] = [load + rounds * work for load in free]  # a uniform shift keeps the heap
            top += rounds * work
            count -= rounds * slots
            continue
        placed = free[0] + work
        heapq.heapreplace(free, placed)
        top = max(top, placed)
        count -= 1
    return top


#: How many pairs' states :func:`_place_copies` remembers while it looks for the period.
_PERIOD_SEARCH = 4096


def _place_copies(free: list[int], works: tuple[int, ...], copies: int) -> int:
    """The makespan of ``copies`` pairs of ``works`` placed in grid order on the loads
    ``free``: each pair placed CTA by CTA until the loads less their least repeat an earlier
    pair's (within :data:`_PERIOD_SEARCH` pairs), then the remaining whole periods added."""
    seen: dict[tuple[int, ...], tuple[int, int]] = {}
    history: list[tuple[tuple[int, ...], int]] = []
    for done in range(copies):
        for work in works:
            heapq.heapreplace(free, free[0] + work)
        if done < _PERIOD_SEARCH:
            low = free[0]
            shape = tuple(sorted(load - low for load in free))
            if shape in seen:
                first, first_low = seen[shape]
                period, rise = done - first, low - first_low
                rounds, rest = divmod(copies - 1 - done, period)
                end_shape, end_low = history[first + rest]
                return end_shape[-1] + end_low + (rounds + 1) * rise
            seen[shape] = (done, low)
            history.append((shape, low))
    return max(free)


def _pairs(queries: int, keys: int, causal: bool) -> int:
    """The (query, key) pairs of one (batch, head), the causal mask aligned bottom right."""
    if not causal:
        return queries * keys
    return sum(max(0, min(keys, keys - queries + row + 1)) for row in range(queries))


@functools.lru_cache(maxsize=4096)
def grid_efficiency(
    launch: AttentionLaunch,
    batch_heads: int,
    queries: int,
    keys: int,
    causal: bool,
    sm_count: int,
    head_dim: int,
) -> float:
    """The useful share of the slots' time a launch of ``batch_heads`` (batch, head) pairs of
    ``queries`` × ``keys`` keeps (module docstring); a split-KV forward with the splits
    :func:`fa2_splits` picks."""
    if min(batch_heads, queries, keys) <= 0:
        return 1.0
    m, n = launch.block_m, launch.block_n
    works = _works(launch, queries, keys, causal)
    if launch.split_kv:
        splits = fa2_splits(batch_heads, queries, keys, head_dim, sm_count)
        if splits > 1:
            m, n = FA2_SPLIT_BLOCK_M, 256 if head_dim <= 64 else 128 if head_dim <= 128 else 64
            split = AttentionLaunch(m, n, 2)
            works = _split_works(split, queries, keys, causal, splits)
            launch = split
    slots = sm_count * launch.ctas_per_sm
    blocks = _makespan(works, batch_heads, slots, launch.longest_first)
    if blocks <= 0:
        return 1.0
    return batch_heads * _pairs(queries, keys, causal) / (slots * blocks * m * n)


def benchmark_grid(keys: int, head_dim: int) -> int:
    """The (batch, head) pairs of the benchmark grid at ``keys`` (:data:`BENCHMARK_TOKENS`,
    :data:`BENCHMARK_HIDDEN`; batch 1 past 16,384 keys)."""
    return max(1, BENCHMARK_TOKENS // keys) * max(1, BENCHMARK_HIDDEN // head_dim)


def grid_factor(
    family: str,
    sm_count: int,
    batch_heads: int,
    queries: int,
    keys: int,
    head_dim: int,
    causal: bool,
    backward: bool,
) -> float:
    """The grid's efficiency over the benchmark grid's at the same keys (``queries = keys``):
    1 for the benchmark's grid, less for a shorter one, more than 1 for a grid whose waves are
    fuller than the benchmark's (module docstring); 1 when ``family`` has no launch model or a
    size is 0."""
    launch = attention_launch(family, head_dim, causal, backward)
    if launch is None or min(batch_heads, queries, keys) <= 0:
        return 1.0
    call = grid_efficiency(launch, batch_heads, queries, keys, causal, sm_count, head_dim)
    bench = grid_efficiency(
        launch, benchmark_grid(keys, head_dim), keys, keys, causal, sm_count, head_dim
    )
    return call / bench


def _query_bytes(instr: Instr) -> int:
    """Bytes of the query operand of an attention instruction: the forward's first input, the
    backward's first that is not a gradient (``d.``)."""
    for name, size in instr.inputs:
        if not name.startswith("d."):
            return size
    return 0


def call_grids(
    kernels: KernelModel,
    kernel: str | None,
    instr: Instr,
    queries: int,
    keys: int,
    head_dim: int,
    causal: bool,
    element_bytes: int,
    ring_cp: int,
) -> tuple[float, float]:
    """The grid factors (:func:`grid_factor`) of attention instruction ``instr`` on one rank:
    ``queries`` rows per kernel call against ``keys`` (0: no grid term), its (batch, head)
    pairs from the query operand's bytes. Under ring context parallelism (``ring_cp`` > 1,
    causal) the first step's causal kernel on the rank's ``queries = keys`` rows, and the later
    steps' non-causal kernels on half blocks — both query chunks against one key chunk, or the
    second query chunk against both, whichever grid is worse, since some rank runs each at
    every step (:func:`~stage_explore.analytical.te_context_parallel.te_ring_time_factor`);
    else the kernel's own factor twice. (1, 1) without a launch model."""
    family = kernels.grid_family(kernel)
    per_head = element_bytes * queries * head_dim
    moved = _query_bytes(instr)
    if not family or queries <= 0 or keys <= 0 or per_head <= 0 or moved % per_head:
        return 1.0, 1.0
    pairs = moved // per_head
    backward = instr.phase == "bwd"
    sms = kernels.sm_count
    if ring_cp <= 1 or not causal:
        factor = grid_factor(family, sms, pairs, queries, keys, head_dim, causal, backward)
        return factor, factor
    first = grid_factor(family, sms, pairs, queries, keys, head_dim, True, backward)
    half_keys = grid_factor(family, sms, pairs, queries, keys // 2, head_dim, False, backward)
    half_rows = grid_factor(family, sms, pairs, queries // 2, keys, head_dim, False, backward)
    return first, min(half_keys, half_rows)
