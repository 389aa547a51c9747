"""HybridEP's own dispatch and combine rates (``moe_hybridep``; 6 Dec 2026, s21 hybridep).

HybridEP (Megatron-Core ``--moe-token-dispatcher-type flex`` with
``moe_flex_dispatcher_backend="hybridep"``) moves the tokens as DeepEP's normal kernels do — once
per destination rank over NVLink, once per destination node over RDMA (deepseek-ai/DeepEP
``docs/Hybrid-EP_Implementation.md`` 0b18ed2a §2, §4.2, §8) — so ``moe_hybridep`` keeps
``moe_deepep``'s traffic (:mod:`~stage_explore.analytical.deepep`, the levels pipelined). What
differs is the rate: NVIDIA published HybridEP's own per-rank bandwidth (deepseek-ai/DeepEP
``docs/README_Hybrid-EP.md`` 41cad944, "Performance Results": 4,096 tokens, hidden 7,168, top-8,
random uniform router, 8 local experts), and a level of a HybridEP dispatch that one of those
tables covers is timed by it (:data:`HYBRIDEP_RATES`, :func:`hybridep_rate`).

What the tables count. Each figure is bytes a rank moves over the call's time, the call through
the Torch API (``buffer.dispatch`` / ``combine`` with their copies; the "Kernel Only" columns,
1.1–1.4× higher, are not used: they leave out host work Megatron-Core pays too; the copy is
taken out below). On NVLink the bytes are the dispatched
tokens a rank receives, one per (token, destination rank), its own tokens included
(``tests/test_hybrid_ep.py`` 098da2a6: ``dispatched_hidden.numel() * 2``, combine the same). Over
InfiniBand they are one per (token, destination node), the local node included (``tests/utils.py``
``count_rdma_send_from_routing_map``: "To align with the implementation in the DeepEP, we do not
set the local node map to zeros"). So a level's time is ``buffer × share / rate``, where
``buffer × share`` (the NCCL all-to-all's bytes times DeepEP's per-level deduplicated share,
:func:`~stage_explore.analytical.deepep.deepep_level_fractions`) is exactly what the table counts
— no ``(ranks − 1)/ranks`` and no per-step latency, which the counted rate already holds.

Which path Megatron-Core pays (s21 hybridep2). The "Torch API" figure times
``HybridEPBuffer.dispatch`` / ``combine`` without permute (``tests/test_hybrid_ep.py`` 098da2a6,
"Benchmark of the dispatch and combine torch API without permute", the handle cached): beside the
kernel, ``indices_to_map``, a stream synchronisation for the received count, and a
device-to-device copy of every received token out of the shared buffer into a fresh tensor
(``Executor::dispatch_postprocess``, ``cudaMemcpyAsync``) — the combine the mirror copy of its
input into the buffer (``combine_preprocess``). Megatron-Core's flex dispatcher with
``moe_flex_dispatcher_backend="hybridep"`` calls ``dispatch_with_permute`` /
``combine_with_unpermute`` instead (NVIDIA/Megatron-LM ``megatron/core/transformer/moe/
fused_a2a.py`` ``HybridEPDispatch`` / ``HybridEPCombine``; ``_HybridEPManager.
get_permuted_hidden_states_by_experts`` returns the tokens as they come), where the permute kernel
replaces that copy ("Use permute kernel to avoid standalone D2D memory copy",
``csrc/hybrid_ep/executor/executor.cu``) — and that permute is the generator's ``moe.dispatch`` /
``moe.combine`` op, which the model already charges. So on a table whose counted bytes are the
copied ones (NVLink: the received tokens, :func:`megatron_rate`) the copy's read and write of
those bytes at the achieved HBM rate is taken out of the Torch API time; the rest of the gap to
the "Kernel Only" column (the synchronisation, host work) stays, as Megatron-Core pays its own
(the routing map's all-gather and the metadata preprocessing on every forward call). Over
InfiniBand (s21 bridgefix) the same call's copy is taken out too, but the table counts per-node
sends, not the copied tokens: the benchmark times one call and divides both the NVLink bytes
(the received tokens, the copied ones) and the RDMA bytes by it, so the copy's share of that
time is the benchmark's received-to-sent ratio (:func:`copied_per_counted`: its routing is
``torch.randperm(num_experts)[:topk]`` per token, ``NUM_OF_EXPERTS = NUM_LOCAL_EXPERTS ×
ranks``) times two HBM passes.

Which column. The dispatch figures are BF16's (Megatron-Core hands the flex dispatcher the
BF16 hidden states; the model's dispatch messages are 2-byte activations); the FP8 dispatch
columns are not used. The backward of a dispatch runs HybridEP's combine and the backward of a
combine its dispatch (:func:`hybridep_dispatch_kernel`). The SM count is the profile's
``moe_hybridep_sms``: Megatron-Core's default ``moe_hybridep_num_sms`` = 16
(:data:`HYBRIDEP_SMS`), the column every table has, or 32, which Megatron-Bridge's performance
scripts set (s22 bridgeaudit) and only the GB200 table also has (:data:`HYBRIDEP_RATES_BY_SMS`):
a run reads the table of the largest published SM count not above its own (16 for a 32-SM run
on B200 or H100, where no 32-SM figure was published), as it reads rank counts.

Which rank count. A table row is for a group of ``ranks`` GPUs; a group takes the row of the
largest published count not above its own (the smallest row below the first), never a value
between rows.

Where no table exists — B300 (``b300``), GB300 NVL72, H100's NVLink level, any InfiniBand level
but H100's (B200, B300, GB200 / GB300 racks), and any other system — the level falls back to the
dim's own rate as ``moe_deepep`` times it (the preset's bandwidth × ``bus_efficiency``, the
α–β level of :func:`~stage_explore.analytical.collectives.alpha_beta_collective_s`): no
HybridEP figure was published for them, and a rate fitted to rows would not be one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

from stage_core.errors import ConfigError
from stage_explore.system.model import NetworkDim

#: SMs HybridEP's kernels occupy while they run: Megatron-Core's
#: ``TransformerConfig.moe_hybridep_num_sms`` = 16 ("Number of SMs to use for HybridEP. In pure
#: NVL scenarios, 16 SMs can generally achieve good bandwidth."; NVIDIA/Megatron-LM
#: megatron/core/transformer/transformer_config.py), the SM count of every published table.
HYBRIDEP_SMS = 16

_README = "deepseek-ai/DeepEP docs/README_Hybrid-EP.md 41cad94449628adfb1cd1cadd82aeda83d4fbf0f"


@dataclass(frozen=True)
class HybridEpRow:
    """One published row at :data:`HYBRIDEP_SMS` SMs: a group of ``ranks`` GPUs, the Torch API
    BF16 dispatch and combine rates (bytes/s, as the table counts them: module docstring)."""

    ranks: int
    dispatch_bytes_per_s: float
    combine_bytes_per_s: float


#: HybridEP's published rates per (system preset, network dim name), rows by rank count; each
#: value is the Torch API column at 16 SMs of the cited table (GB/s -> bytes/s).
HYBRIDEP_RATES: dict[tuple[str, str], tuple[HybridEpRow, ...]] = {
    # B200 (8 ranks, one NVSwitch node; counts a rank's received tokens, its own included):
    # _README "B200 Platform", HybridEP Torch API 16 SMs: dispatch BF16 535.94, combine 530.86
    ("b200", "nvswitch"): (HybridEpRow(8, 535.94e9, 530.86e9),),
    # GB200 NVL72 (8-36 ranks of one rack over NVLink; the same counting): _README "GB200
    # Platform", HybridEP Torch API at 16 SMs, dispatch BF16 / combine per rank count
    ("gb200-nvl72", "nvlink-nvl72"): (
        HybridEpRow(8, 550.10e9, 538.44e9),
        HybridEpRow(16, 472.84e9, 474.48e9),
        HybridEpRow(24, 441.89e9, 444.40e9),
        HybridEpRow(32, 485.50e9, 423.19e9),
        HybridEpRow(36, 469.96e9, 418.27e9),
    ),
    # H100 over InfiniBand (16/32/64 ranks = 2/4/8 nodes of 8; counts one send per (token,
    # destination node), the local node included): _README "H100 Platform", "IB Bandwidth",
    # Torch API at 16 SMs, dispatch BF16 / combine per rank count
    ("h100-80gb", "infiniband-ndr"): (
        HybridEpRow(16, 54.47e9, 53.35e9),
        HybridEpRow(32, 47.36e9, 52.53e9),
        HybridEpRow(64, 41.24e9, 46.57e9),
    ),
}


#: The tables at other SM counts than :data:`HYBRIDEP_SMS` (keyed as :data:`HYBRIDEP_RATES`):
#: 32 SMs, the SM count Megatron-Bridge's performance scripts set (``scripts/performance/utils/
#: overrides.py`` ``_set_common_perf_overrides``: ``moe_hybridep_num_sms = 32`` under HybridEP).
HYBRIDEP_RATES_BY_SMS: dict[int, dict[tuple[str, str], tuple[HybridEpRow, ...]]] = {
    HYBRIDEP_SMS: HYBRIDEP_RATES,
    32: {
        # _README "GB200 Platform", HybridEP Torch API at 32 SMs, dispatch BF16 / combine per
        # rank count
        ("gb200-nvl72", "nvlink-nvl72"): (
            HybridEpRow(8, 545.71e9, 568.94e9),
            HybridEpRow(16, 523.48e9, 521.55e9),
            HybridEpRow(24, 507.32e9, 483.76e9),
            HybridEpRow(32, 484.22e9, 464.54e9),
            HybridEpRow(36, 479.02e9, 447.89e9),
        ),
    },
}


def hybridep_table(
    system: str, dim_name: str, sms: int = HYBRIDEP_SMS
) -> tuple[HybridEpRow, ...] | None:
    """The published rows for network dim ``dim_name`` of the preset ``system`` at ``sms`` SMs:
    the table of the largest published SM count not above ``sms`` that covers the dim (the
    smallest such count's for fewer SMs), or None where no table covers it."""
    if sms < 1:
        raise ConfigError(f"HybridEP runs on at least 1 SM, but got {sms!r}")
    key = (system, dim_name)
    counts = sorted(c for c, tables in HYBRIDEP_RATES_BY_SMS.items() if key in tables)
    if not counts:
        return None
    below = [c for c in counts if c <= sms]
    return HYBRIDEP_RATES_BY_SMS[below[-1] if below else counts[0]][key]


#: The scale-out dims of :data:`HYBRIDEP_RATES` (a case's ``scale_out`` override replaces them).
SCALE_OUT_DIMS = ("infiniband-ndr",)

#: The benchmark behind the tables (_README "Test Configuration": TopK 8, Local Experts 8;
#: deepseek-ai/DeepEP tests/test_hybrid_ep.py 098da2a6 TOPK, NUM_LOCAL_EXPERTS, each token's
#: experts ``torch.randperm(NUM_OF_EXPERTS)[:TOPK]``) and the H100 table's GPUs per node (16 / 32
#: / 64 ranks = 2 / 4 / 8 DGX H100 nodes of 8 GPUs).
BENCH_TOPK = 8
BENCH_LOCAL_EXPERTS = 8
BENCH_RANKS_PER_NODE = 8


def hybridep_dispatch_kernel(name: str) -> bool:
    """Whether the expert all-to-all ``name`` (``<op>:<tensor>``, a gradient's tensor prefixed
    ``d.``) runs HybridEP's dispatch kernel: the forward dispatch of ``moe.tokens`` and the
    backward of the combine (``d.experts.*``); the combine (``experts.*``) and the dispatch's
    backward (``d.moe.tokens``) run its combine kernel."""
    tensor = name.partition(":")[2] or name
    gradient = tensor.startswith("d.")
    return (tensor.removeprefix("d.") == "moe.tokens") != gradient


def copied_per_counted(ranks: int) -> float:
    """Bytes the Torch API call copies out of (dispatch) or into (combine) the buffer per byte
    an InfiniBand table counts, in the benchmark at ``ranks`` ranks (module docstring): a rank
    receives, per token of any rank, one copy if one of the token's :data:`BENCH_TOPK` distinct
    experts (drawn uniformly from ``E = BENCH_LOCAL_EXPERTS × ranks``) is among its own
    :data:`BENCH_LOCAL_EXPERTS`, and sends each of its own tokens once per node holding one
    (``count_rdma_send_from_routing_map``, the local node included): the ratio of
    ``ranks × P(rank hit)`` to ``nodes × P(node hit)``, exact expectations."""
    nodes, rest = divmod(ranks, BENCH_RANKS_PER_NODE)
    if nodes < 2 or rest:
        raise ConfigError(
            f"an InfiniBand HybridEP table row needs a multiple of {BENCH_RANKS_PER_NODE} ranks "
            f"over at least 2 nodes, but got {ranks!r}"
        )
    experts = BENCH_LOCAL_EXPERTS * ranks
    draws = comb(experts, BENCH_TOPK)
    rank_hit = 1.0 - comb(experts - BENCH_LOCAL_EXPERTS, BENCH_TOPK) / draws
    per_node = BENCH_LOCAL_EXPERTS * BENCH_RANKS_PER_NODE
    node_hit = 1.0 - comb(experts - per_node, BENCH_TOPK) / draws
    return ranks * rank_hit / (nodes * node_hit)


def hybridep_row(
    system: str, dim: NetworkDim, ranks: int, sms: int = HYBRIDEP_SMS
) -> HybridEpRow | None:
    """The published row :func:`hybridep_rate` reads for a group of ``ranks`` GPUs on ``dim``
    of ``system`` at ``sms`` SMs (:func:`hybridep_table`), or None where no table covers it."""
    if ranks < 2:
        raise ConfigError(f"a HybridEP group needs at least 2 ranks, but got {ranks!r}")
    base, *overrides = system.split("+")
    if dim.name in SCALE_OUT_DIMS and any(o.startswith("scale_out=") for o in overrides):
        return None
    rows = hybridep_table(base, dim.name, sms)
    if rows is None:
        return None
    row = rows[0]
    for candidate in rows:
        if candidate.ranks <= ranks:
            row = candidate
    return row


def hybridep_rate(
    system: str, dim: NetworkDim, ranks: int, dispatch: bool, sms: int = HYBRIDEP_SMS
) -> float | None:
    """HybridEP's published rate (bytes/s, module docstring's counting) for a group of
    ``ranks`` GPUs on network dim ``dim`` of ``system`` (a preset's name, or a validation case's
    derived one, ``gb200-nvl72+scale_up=64``: a smaller NVLink domain of the same links): the
    row of the largest published rank count not above ``ranks`` (the smallest row for fewer),
    the dispatch or combine column; None where no table covers that dim (the caller falls back
    to the dim's own rate), and for a scale-out dim whose bandwidth the case overrides
    (``+scale_out=…``: a stated NIC, not the measured one). ``sms``: HybridEP's SM count
    (:func:`hybridep_table`)."""
    row = hybridep_row(system, dim, ranks, sms)
    if row is None:
        return None
    return row.dispatch_bytes_per_s if dispatch else row.combine_bytes_per_s


def megatron_rate(
    rate: float, dim: NetworkDim, hbm_bytes_per_s: float, table_ranks: int = 0
) -> float:
    """The rate (bytes/s, the table's counting) Megatron-Core's ``dispatch_with_permute`` /
    ``combine_with_unpermute`` reach on dim ``dim`` for a published Torch API ``rate``: the
    Torch API call's device-to-device copy (a read and a write at ``hbm_bytes_per_s``, the
    achieved HBM rate) taken out, since the model charges the permute that replaces it as its
    own op (module docstring). On an NVLink table the copied bytes are the counted ones; on a
    scale-out dim :func:`copied_per_counted` of the table row's ``table_ranks`` per counted
    byte (s21 bridgefix)."""
    copied = copied_per_counted(table_ranks) if dim.name in SCALE_OUT_DIMS else 1.0
    seconds_per_byte = 1.0 / rate - 2.0 * copied / hbm_bytes_per_s
    if seconds_per_byte <= 0.0:
        raise ConfigError(
            f"HybridEP's published {rate:.4g} B/s on {dim.name!r} needs an HBM rate above "
            f"twice it to take its copy out, but got {hbm_bytes_per_s!r} B/s"
        )
    return 1.0 / seconds_per_byte


def hybridep_level_rates(
    system: str,
    dims: Sequence[NetworkDim],
    ranks: int,
    dispatch: bool,
    hbm_bytes_per_s: float,
    sms: int = HYBRIDEP_SMS,
) -> tuple[float | None, ...]:
    """Per spanned level (the network dims ``dims``, innermost first) of a HybridEP
    all-to-all over ``ranks`` GPUs on ``sms`` SMs: its published rate as Megatron-Core's path
    pays it (:func:`megatron_rate`, the achieved HBM rate ``hbm_bytes_per_s``), or None where it
    falls back to the dim's own (:func:`hybridep_rate`)."""
    rows = [hybridep_row(system, dim, ranks, sms) for dim in dims]
    return tuple(
        None
        if row is None
        else megatron_rate(
            row.dispatch_bytes_per_s if dispatch else row.combine_bytes_per_s,
            dim,
            hbm_bytes_per_s,
            row.ranks,
        )
        for dim, row in zip(dims, rows, strict=True)
    )
