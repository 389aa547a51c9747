"""DeepSpeed ZeRO-3 keeps parameters of at most ``stage3_param_persistence_threshold`` elements
whole on every rank (``zero3_persistence_elements``, ``framework_costs.zero3_persistent``): they
leave the blocks' gathers, are all-gathered once per step after the optimizer step (one NCCL
call each, ``stage3.py`` ``_post_step``), and hold their whole 16-bit copy on every rank
(s33 zero3c)."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.program_node import OPTIMIZER
from stage_core.lower.zero_nodes import zero_collectives
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.framework_costs import zero3_fetch_calls, zero3_persistent
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.trace_mode import trace_step
from stage_explore.system import load_system
from tests.explore.analytical_point import bound_point

DEEPSPEED = get_framework("deepspeed")
#: GPT-1.7B (hidden 2304) at 4 layers: each layer's LayerNorm weights and biases and its four
#: linear biases are below 1e5 elements, its four weights above
MODEL = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
PARALLEL = ParallelConfig(dp=64, global_batch=64, zero=3)


def _backend(persist: int) -> AnalyticalBackend:
    overrides = {"zero3_persistence_elements": persist}
    return AnalyticalBackend(framework="deepspeed", overrides=overrides)


def test_deepspeed_threshold_is_its_code_default_and_fsdp_keeps_none() -> None:
    # deepspeed/runtime/zero/config.py: param_persistence_threshold = Field(pp_int(1e5), ...)
    assert DEEPSPEED.zero3_persistence_elements == 10**5
    assert get_framework("fsdp").zero3_persistence_elements == 0
    assert not zero3_persistent(get_framework("fsdp"), 1)


def test_a_parameter_at_the_threshold_persists() -> None:
    # mark_persistent_parameters: "if param.ds_numel <= param_threshold"
    assert zero3_persistent(DEEPSPEED, 10**5)
    assert not zero3_persistent(DEEPSPEED, 10**5 + 1)
    assert not zero3_persistent(DEEPSPEED, 0)


def test_a_block_of_persistent_parameters_issues_no_gather() -> None:
    assert zero3_fetch_calls(DEEPSPEED, [10**5, 5120]) == 0
    # a block with one partitioned tensor keeps one call for it
    assert zero3_fetch_calls(DEEPSPEED, [10**5, 10**5 + 1]) == 1
    fsdp = get_framework("fsdp")
    assert zero3_fetch_calls(fsdp, [10**5, 5120]) == 1  # FSDP gathers its unit whatever it holds


def test_bad_threshold_is_refused() -> None:
    with pytest.raises(ConfigError, match="zero3_persistence_elements"):
        DEEPSPEED.with_overrides({"zero3_persistence_elements": -1})


def test_persistent_bytes_leave_the_block_gather() -> None:
    backend = _backend(10**5)
    point = bound_point(backend, MODEL, PARALLEL, load_system("a800"))
    block = point.blocks["layer"]
    parts = backend._kind(point, "layer")
    small = [w for w in block.weights if w.elements <= 10**5]
    # two LayerNorms (weight, bias) and the generator's five biases (q, k, v, output, fc1, fc2)
    assert len(parts.persistent) == len(small) == 10
    whole = sum(i.comm_bytes for i in zero_collectives(point.workload, block, True))
    moved = sum(i.comm_bytes for i in parts.gathers)
    assert whole - moved == sum(i.comm_bytes for i in parts.persistent) > 0


def test_the_step_pays_the_persistent_gathers_after_the_optimizer() -> None:
    system = load_system("a800")
    off = _backend(0).evaluate(MODEL, PARALLEL, system)
    on = _backend(10**5).evaluate(MODEL, PARALLEL, system)
    extra = dict(on.breakdown)["optimizer"] - dict(off.breakdown)["optimizer"]
    # 42 calls (10 per layer, the final LayerNorm's two) over 64 ranks on 8 nodes: each at least
    # the ring's 7 inter-node hops of the scale-out latency, at most a millisecond
    latency = system.network[-1].latency_s
    assert 42 * 7 * latency < extra < 42 * 1e-3
    # the blocks' gathers no longer move the small tensors nor issue calls for them
    assert dict(on.breakdown)["exposed_zero_gather"] < dict(off.breakdown)["exposed_zero_gather"]


def test_persistent_parameters_are_held_whole_on_every_rank() -> None:
    system = load_system("a800")
    off = _backend(0).evaluate(MODEL, PARALLEL, system)
    on = _backend(10**5).evaluate(MODEL, PARALLEL, system)
    hidden = 2304
    per_layer = 4 * hidden + (3 * hidden + hidden + 4 * hidden + hidden)  # norms, then biases
    elements = 4 * per_layer + 2 * hidden  # and the final LayerNorm
    allocator = 1 + DEEPSPEED.allocator_overhead
    assert on.peak_memory_bytes - off.peak_memory_bytes == pytest.approx(
        2 * elements * allocator, abs=1
    )


def test_the_trace_mode_times_the_same_gathers_after_its_optimizer_node() -> None:
    """The trace's optimizer node lasts the levelled mode's optimizer seconds, the persistent
    gathers in them, and the two modes end the step together (one stage, no recompute)."""
    system = load_system("a800")
    backend = _backend(10**5)
    levelled = backend.evaluate(MODEL, PARALLEL, system)
    traced = trace_step(backend, MODEL, PARALLEL, system, record_nodes=True)
    rank = min(traced.result.ranks)
    optimizer = [
        item.node.id
        for item in traced.templates[0]
        if item.source is not None and item.source[1] == OPTIMIZER
    ]
    assert len(optimizer) == 1
    start, end = traced.result.node_times[(rank, optimizer[0])]
    assert end - start == pytest.approx(dict(levelled.breakdown)["optimizer"], rel=1e-9)
    assert (
        dict(levelled.breakdown)["optimizer"]
        > dict(_backend(0).evaluate(MODEL, PARALLEL, system).breakdown)["optimizer"]
    )
