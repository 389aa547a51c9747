"""Transformer Engine's current-scaling quantizer (framework option ``te_current_scaling``):
each ``tensorwise`` cast's amax is a kernel of its own, or part of a fused norm + linear
layer's norm kernel; under sequence parallelism the column-parallel layers' inputs and the
row-parallel layers' output gradients all-reduce their amax over the tensor-parallel group
before the cast, on the compute stream. Expected values are computed here from the cast bytes,
the kernel model and the latency-bound all-reduce, not copied from a run."""

from __future__ import annotations

import pytest

from stage_core.lower.fp8 import FP8_BYTES, cast_bytes
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Fp8Recipe, Precision
from stage_explore.analytical.amax_costing import AMAX_BYTES
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.collectives import latency_bound_all_reduce_s
from stage_explore.analytical.fp8_casts import quantize_cost
from stage_explore.analytical.fp8_gather import amax_reductions, fp8_gathered
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.system import load_system
from tests.explore.analytical_point import bound_point

E = 2048 * 4096
H100 = load_system("h100-80gb")
LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=2048)
LABEL = "exposed_fp8_amax_reduction"


def _parallel(tp: int = 4, recipe: Fp8Recipe = Fp8Recipe.TENSORWISE) -> ParallelConfig:
    return ParallelConfig(
        tp=tp, dp=8, sp=tp > 1, zero=1, global_batch=16, precision=Precision.FP8,
        fp8_recipe=recipe,
    )  # fmt: skip


def _backend(current_scaling: bool) -> AnalyticalBackend:
    return AnalyticalBackend(
        framework="megatron-core",
        overrides={"fp8_amax_reduction": "off", "te_current_scaling": current_scaling},
    )


def test_quantize_cost_of_a_current_scaling_cast() -> None:
    once = cast_bytes(E, "delayed", 1)  # one 16-bit read, the row-wise FP8 write
    # a cast of its own: the amax kernel reads the tensor (the recipe's second read), then the cast
    assert quantize_cost(E, "tensorwise", 1, 1, False, amax_kernel=True) == (
        cast_bytes(E, "tensorwise", 1),
        2,
    )
    assert quantize_cost(E, "tensorwise", 1, 1, False) == (cast_bytes(E, "tensorwise", 1), 1)
    # a norm's output: the amax is the norm's, the cast reads once and writes both usages
    assert quantize_cost(E, "tensorwise", 1, 4, True, amax_kernel=True) == (once / 4, 1)
    both = cast_bytes(E, "delayed", 2)
    assert quantize_cost(E, "tensorwise", 2, 1, True, amax_kernel=True) == (both, 1)
    # gathered by userbuffers: the local shard's cast, then the gathered data transposed
    gathered = once / 4 + (both - once) + E * FP8_BYTES
    assert quantize_cost(E, "tensorwise", 2, 4, True, amax_kernel=True) == (gathered, 2)


def test_the_gathered_inputs_and_output_gradients_reduce_their_amax() -> None:
    backend = _backend(True)
    point = bound_point(backend, LLAMA, _parallel(), H100)
    block = point.blocks["layer"]
    weights = frozenset(w.name for w in block.weights)
    instrs = backend._timed_instrs(block, weights)
    gathered = fp8_gathered(instrs, weights, point.workload.parallel.fp8_gemms, "tensorwise")
    # forward: the QKV and FC1 inputs (ln1, ln2); backward: the output gradients of the
    # attention projection and FC2, not the saved inputs gathered again for the weight gradients
    forward = {name for phase, name in gathered if phase == "fwd"}
    assert forward == {"ln1", "ln2"}
    assert amax_reductions(gathered) == (2, 2)
    assert amax_reductions(frozenset({("bwd", "ln1"), ("recompute", "ln2")})) == (0, 1)


def test_the_reductions_are_timed_on_the_compute_stream() -> None:
    parallel = _parallel()
    on = _backend(True).evaluate(LLAMA, parallel, H100)
    off = _backend(False).evaluate(LLAMA, parallel, H100)
    network = _backend(True).achieved_network(H100)
    each = latency_bound_all_reduce_s(network, AMAX_BYTES, [0, 1, 2, 3])  # tp fastest
    micro_batches = 16 // 8
    expected = micro_batches * LLAMA.layers * (2 + 2) * each
    assert dict(on.breakdown)[LABEL] == pytest.approx(expected)
    assert LABEL not in dict(off.breakdown)
    assert on.step_time_s > off.step_time_s


@pytest.mark.parametrize(
    "parallel",
    [_parallel(tp=1), _parallel(recipe=Fp8Recipe.MXFP8), _parallel(recipe=Fp8Recipe.DELAYED)],
    ids=["tp1", "mxfp8", "delayed"],
)
def test_no_current_scaling_reduction_elsewhere(parallel: ParallelConfig) -> None:
    system = load_system("b200") if parallel.fp8_recipe == Fp8Recipe.MXFP8 else H100
    assert LABEL not in dict(_backend(True).evaluate(LLAMA, parallel, system).breakdown)


def test_the_option_is_megatron_cores() -> None:
    on = {name for name, profile in FRAMEWORKS.items() if profile.te_current_scaling}
    assert on == {"megatron-core"}
