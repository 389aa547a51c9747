"""DeepSpeed ZeRO++'s hpZ (``zero_hpz_partition_size``, :mod:`stage_explore.analytical.hpz`):
the step's first forward gathers over the whole data-parallel group, every later gather inside
groups of consecutive ranks from a secondary shard each rank holds; bad combinations are refused;
the reader takes a ``dp_sharding`` cell stating hpZ with quantization off (s34 zeropp)."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.framework_costs import zero3_persistent
from stage_explore.analytical.frameworks import FRAMEWORKS, get_framework
from stage_explore.analytical.hpz import forward_gather_s, hpz_size, hpz_span, secondary_bytes
from stage_explore.analytical.trace_mode import trace_step
from stage_explore.system import load_system
from stage_explore.validation.infer_defaults import recipe_defaults
from stage_explore.validation.infer_errors import Uninferable
from stage_explore.validation.infer_fields import infer_zero
from stage_explore.validation.infer_shard import stated_hpz
from tests.explore.analytical_point import bound_point

DEEPSPEED = get_framework("deepspeed")
MODEL = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
SYSTEM = load_system("a800")  # 8 GPUs per node: dp 64 is 8 nodes
ONE_MB = ParallelConfig(dp=64, global_batch=64, zero=3)
EIGHT_MB = ParallelConfig(dp=64, global_batch=512, zero=3)
#: AMSP's ZeRO++ cell (stage_explore/data/published_runs_no_setup.csv)
AMSP_CELL = (
    "ZeRO++ on ZeRO stage 3 (DeepSpeed-ZeRO++: hpZ secondary parameter shard within 8 GPUs, "
    "zero_hpz_partition_size 8; quantization not enabled)"
)


def _backend(size: int) -> AnalyticalBackend:
    return AnalyticalBackend(framework="deepspeed", overrides={"zero_hpz_partition_size": size})


def _layer_cost(size: int, parallel: ParallelConfig) -> tuple[float, float]:
    """(forward, backward) gather seconds of a decoder layer (its ``BlockCost``)."""
    backend = _backend(size)
    point = bound_point(backend, MODEL, parallel, SYSTEM)
    parts = backend._kind(point, "layer")
    spans = {axes: backend._spans(point, axes)[0] for axes in parts.span_axes}
    cost = backend._block_costs(point, "layer", parts, spans, False)[0]
    return cost.gather_s, cost.bwd_gather_s


def test_every_profile_ships_hpz_off_and_bad_sizes_are_refused() -> None:
    assert all(profile.zero_hpz_partition_size == 1 for profile in FRAMEWORKS.values())
    for bad in (0, -8, True, 2.0):
        with pytest.raises(ConfigError, match="zero_hpz_partition_size"):
            DEEPSPEED.with_overrides({"zero_hpz_partition_size": bad})


@pytest.mark.parametrize(
    ("parallel", "said"),
    [(ParallelConfig(dp=64, global_batch=64, zero=1), "needs ZeRO stage 3"),
     (ParallelConfig(dp=64, global_batch=64, zero=2), "needs ZeRO stage 3"),
     (ParallelConfig(dp=12, global_batch=12, zero=3), "must divide dp 12"),
     (ParallelConfig(dp=32, tp=2, global_batch=32, zero=3), "pure data-parallel"),
     (ParallelConfig(dp=64, dp_shard=16, global_batch=64, zero=3), "hybrid sharding")],
)  # fmt: skip
def test_bad_combinations_are_refused(parallel: ParallelConfig, said: str) -> None:
    profile = DEEPSPEED.with_overrides({"zero_hpz_partition_size": 8})
    with pytest.raises(ConfigError, match=said):
        hpz_size(profile, parallel)
    with pytest.raises(ConfigError, match=said):
        _backend(8).evaluate(MODEL, parallel, SYSTEM)


def test_the_group_is_the_consecutive_ranks_holding_the_rank() -> None:
    shape, members, rank = hpz_span((8, 2), (None, tuple(range(16)), 9), 8)
    assert (members, rank) == (tuple(range(8, 16)), 9)
    assert shape[0] == 8 and shape[1] == (8, 1)  # one node's eight GPUs, no inter-node dim
    assert hpz_span((8, 2), (None, tuple(range(16)), 3), 4)[1] == (0, 1, 2, 3)


def test_forward_gather_is_the_first_whole_then_in_group_mean() -> None:
    assert forward_gather_s(8.0, 1.0, 1) == 8.0
    assert forward_gather_s(8.0, 1.0, 8) == pytest.approx((8.0 + 7 * 1.0) / 8)


def test_the_backward_gathers_inside_the_node() -> None:
    whole_f, whole_b = _layer_cost(1, ONE_MB)
    hpz_f, hpz_b = _layer_cost(8, ONE_MB)
    assert whole_b == whole_f  # hpZ off: the backward gathers as the forward does
    assert hpz_f == whole_f  # one micro-batch: its forward is the step's first, over all 64
    assert 0.0 < hpz_b < whole_f  # the backward on NVLink inside one node
    # the in-group gather is one node's ZeRO-3 gather of the whole layer: each of its 8 ranks
    # sends 1/8 of the weights, as plain ZeRO-3 on dp 8 does
    assert hpz_b == pytest.approx(_layer_cost(1, ParallelConfig(dp=8, global_batch=8, zero=3))[0])
    # eight micro-batches: one whole-group forward gather, seven in-group ones
    many_f, many_b = _layer_cost(8, EIGHT_MB)
    assert many_b == pytest.approx(hpz_b)
    assert many_f == pytest.approx(forward_gather_s(whole_f, hpz_b, 8))


def test_the_step_is_faster_and_holds_the_secondary_shard() -> None:
    off = _backend(1).evaluate(MODEL, ONE_MB, SYSTEM)
    on = _backend(8).evaluate(MODEL, ONE_MB, SYSTEM)
    assert on.step_time_s < off.step_time_s
    point = bound_point(_backend(8), MODEL, ONE_MB, SYSTEM)
    counts = {"layer": 4}
    partitioned = [
        (counts.get(kind, 1), w.elements)
        for kind, block in point.blocks.items()
        for w in block.weights
        if not zero3_persistent(DEEPSPEED, w.elements)
    ]
    secondary = sum(n * secondary_bytes(e, 2, 8) for n, e in partitioned)
    assert secondary == pytest.approx(2 * sum(n * e for n, e in partitioned) / 8, rel=1e-6)
    allocator = 1 + DEEPSPEED.allocator_overhead
    assert on.peak_memory_bytes - off.peak_memory_bytes == pytest.approx(
        secondary * allocator, abs=1
    )


def test_the_plan_of_one_global_batch_does_not_answer_another() -> None:
    backend = _backend(8)
    one = backend.evaluate(MODEL, ONE_MB, SYSTEM)
    eight = backend.evaluate(MODEL, EIGHT_MB, SYSTEM)
    fresh = _backend(8).evaluate(MODEL, EIGHT_MB, SYSTEM)
    assert eight.step_time_s == fresh.step_time_s != one.step_time_s


def test_the_trace_mode_refuses_hpz() -> None:
    with pytest.raises(ConfigError, match="levelled mode only"):
        trace_step(_backend(8), MODEL, ONE_MB, SYSTEM)


def test_the_reader_takes_amsp_zero_pp_cell_as_zero_3_with_hpz() -> None:
    assert stated_hpz(AMSP_CELL) == 8
    zero, shard, why = infer_zero(AMSP_CELL, "deepspeed")
    assert (zero, shard) == (3, None) and "hpZ in groups of 8" in why
    row = {"dp_sharding": AMSP_CELL, "model": "LLaMA-13B"}
    out = recipe_defaults(row, "deepspeed", "bf16", "llama2-13b", {"dp": 1024, "zero": 3}, {})
    assert out.options["zero_hpz_partition_size"] == 8
    assert (
        "zero_hpz_partition_size"
        not in recipe_defaults(
            {"dp_sharding": "ZeRO stage 3"}, "deepspeed", "bf16", "llama2-13b", {"zero": 3}, {}
        ).options
    )


@pytest.mark.parametrize(
    ("cell", "said"),
    [("ZeRO++ (hpZ, qwZ, qgZ)", "not modelled"),
     ("ZeRO-3 (zero_quantized_gradients: true, zero_hpz_partition_size 8)", "qgZ"),
     ("ZeRO++ on ZeRO stage 3", "no hpZ group"),
     ("ZeRO++ on ZeRO stage 3 (zero_hpz_partition_size 8)", "quantization"),
     ("ZeRO++ (zero_hpz_partition_size 8; quantization not enabled)", "not ZeRO stage 3")],
)  # fmt: skip
def test_the_reader_refuses_what_is_not_modelled(cell: str, said: str) -> None:
    with pytest.raises(Uninferable, match=said):
        infer_zero(cell, "deepspeed")


def test_hpz_on_another_framework_is_refused() -> None:
    with pytest.raises(Uninferable, match="expected the deepspeed profile"):
        infer_zero(AMSP_CELL, "fsdp")
