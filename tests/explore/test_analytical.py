"""The analytical backend: Evaluation fields (breakdown adds up, MFU's definition), memory equal
to ``stage memory``, memoised equal to fresh, infeasible and invalid points, options, and
monotonicity in bandwidth and memory capacity (hypothesis, derandomized)."""

from __future__ import annotations

import dataclasses
import math
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stage_core.errors import ConfigError, InfeasibleError
from stage_core.lower.memory import memory_report
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, PipelineSplit
from stage_explore.analytical import costing as costing_module
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.evaluation import Evaluation
from stage_explore.system import load_system
from stage_explore.system.model import System

A100 = load_system("a100-80gb")
SMALL = get_flavor("megatron-gpt-1.7b").with_overrides(layers=8)

POINTS = {
    "dp": (SMALL, ParallelConfig(dp=8, global_batch=32)),
    "tp-sp-selective": (
        SMALL,
        ParallelConfig(tp=4, dp=2, sp=True, recompute="selective", global_batch=8),
    ),
    "pp-1f1b-full": (SMALL, ParallelConfig(tp=2, pp=4, dp=2, recompute="full", global_batch=32)),
    "pp-gpipe": (SMALL, ParallelConfig(pp=2, dp=4, schedule="gpipe", global_batch=32)),
    "interleaved": (
        SMALL,
        ParallelConfig(tp=2, pp=2, dp=2, schedule="interleaved", vpp=2, global_batch=16),
    ),
    "zero1": (SMALL, ParallelConfig(tp=2, dp=4, zero=1, global_batch=16)),
    "zero2": (SMALL, ParallelConfig(tp=2, dp=4, zero=2, global_batch=16)),
    "zero3-pp": (SMALL, ParallelConfig(pp=2, dp=4, zero=3, global_batch=16)),
    "cp-ring": (
        get_flavor("llama3-8b").with_overrides(layers=4),
        ParallelConfig(tp=2, cp=2, dp=2, cp_style="ring"),
    ),
    "moe-ep": (
        get_flavor("mixtral-8x7b").with_overrides(layers=4),
        ParallelConfig(tp=2, dp=4, ep=2, global_batch=8),
    ),
    "gpt3-175b": (
        get_flavor("gpt3-175b"),
        ParallelConfig(tp=8, pp=8, dp=4, sp=True, recompute="selective", global_batch=256),
    ),
}


def evaluate(name: str, backend: AnalyticalBackend | None = None) -> Evaluation:
    model, parallel = POINTS[name]
    return (backend or AnalyticalBackend()).evaluate(model, parallel, A100)


@pytest.mark.parametrize("name", sorted(POINTS))
def test_breakdown_adds_up_to_the_step_time(name: str) -> None:
    result = evaluate(name)
    assert math.isfinite(result.step_time_s) and result.step_time_s > 0
    assert sum(result.breakdown.values()) == pytest.approx(result.step_time_s, rel=1e-9)
    assert all(seconds >= 0 for seconds in result.breakdown.values())
    assert result.breakdown["compute"] > 0


@pytest.mark.parametrize("name", sorted(POINTS))
def test_utilisation_and_throughput_follow_their_definitions(name: str) -> None:
    model, parallel = POINTS[name]
    result = evaluate(name)
    peak = A100.accelerator.peak(str(parallel.precision))
    denominator = result.step_time_s * result.num_gpus * peak
    assert result.num_gpus == parallel.world_size
    assert result.mfu == pytest.approx(result.model_flops_per_step / denominator, rel=1e-12)
    assert result.hfu == pytest.approx(result.hardware_flops_per_step / denominator, rel=1e-12)
    assert 0 < result.mfu <= result.hfu < 1
    tokens = parallel.global_batch * model.seq_len
    assert result.tokens_per_s_per_gpu == pytest.approx(
        tokens / result.step_time_s / result.num_gpus
    )


def test_model_flops_without_recompute_follow_the_gpt_formula() -> None:
    # Narayanan et al. 2021: 72·B·s·L·h²·(1 + s/6h + V/12Lh) per step (the head's logits GEMMs;
    # the formula counts the unpadded vocabulary and no embedding lookup).
    model = get_flavor("gpt3-175b")
    parallel = ParallelConfig(tp=8, pp=8, dp=2, global_batch=64, vocab_divisible_by=1)
    result = AnalyticalBackend().evaluate(model, parallel, A100)
    b, s, layers, h, v = 64, model.seq_len, model.layers, model.hidden, model.vocab
    formula = 72 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (12 * layers * h))
    assert result.model_flops_per_step == pytest.approx(formula, rel=0.01)


@pytest.mark.parametrize("name", sorted(POINTS))
def test_peak_memory_is_that_of_stage_memory(name: str) -> None:
    model, parallel = POINTS[name]
    expected = max(entry.peak_bytes for entry in memory_report(lower(model, parallel)))
    # stage memory counts the generator's 16-bit loss, no framework's fp32 logits
    tensors_only = AnalyticalBackend(overrides={"loss_fp32_buffers": 0})
    assert evaluate(name, tensors_only).peak_memory_bytes == expected


def test_a_memoised_backend_gives_what_fresh_backends_give() -> None:
    shared = AnalyticalBackend()
    names = sorted(POINTS)
    first = {name: evaluate(name, shared) for name in names}
    again = {name: evaluate(name, shared) for name in reversed(names)}
    for name in names:
        fresh = evaluate(name)
        assert first[name] == fresh == again[name]
    stats = shared.cache_stats()
    assert stats["plans"]["hits"] >= len(names) and stats["steps"]["hits"] >= len(names)


def test_a_tiny_cache_gives_the_same_results() -> None:
    tiny = AnalyticalBackend(cache_size=1)
    for name in sorted(POINTS):
        assert evaluate(name, tiny) == evaluate(name)


def test_the_backend_pickles_without_its_memos() -> None:
    backend = AnalyticalBackend(cache_size=7, network_efficiency=(0.5, 0.6))
    evaluate("dp", backend)
    copy = pickle.loads(pickle.dumps(backend))
    assert (copy.cache_size, copy.network_efficiency) == (7, (0.5, 0.6))
    assert copy.cache_stats()["plans"]["entries"] == 0
    assert evaluate("dp", copy) == evaluate("dp", backend)


# -- infeasible and invalid points ----------------------------------------------------------------


def test_out_of_memory_is_infeasible_with_its_reason_and_timing() -> None:
    result = AnalyticalBackend().evaluate(get_flavor("gpt3-175b"), ParallelConfig(tp=8, dp=4), A100)
    assert not result.feasible
    assert result.reason.startswith("out of memory: peak")
    assert result.peak_memory_bytes > A100.accelerator.memory_bytes
    assert math.isfinite(result.step_time_s) and result.step_time_s > 0
    assert sum(result.breakdown.values()) == pytest.approx(result.step_time_s, rel=1e-9)


def test_more_gpus_than_the_system_has_is_infeasible() -> None:
    small = dataclasses.replace(A100, network=(dataclasses.replace(A100.network[0], size=8),))
    result = AnalyticalBackend().evaluate(SMALL, ParallelConfig(dp=16), small)
    assert not result.feasible
    assert result.reason == "16 GPUs exceed the system's 8"
    assert math.isnan(result.step_time_s)


def test_an_indivisible_binding_is_infeasible_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def indivisible(workload: object) -> None:
        raise InfeasibleError("layer: dim S over cp*tp: 2050 is not divisible by 4")

    monkeypatch.setattr(costing_module, "bind_all", indivisible)
    result = AnalyticalBackend().evaluate(SMALL, ParallelConfig(tp=4), A100)
    assert not result.feasible
    assert result.reason == "layer: dim S over cp*tp: 2050 is not divisible by 4"


@pytest.mark.parametrize(
    ("parallel", "message"),
    [
        (ParallelConfig(tp=5), "`tp` must divide `heads`"),
        (ParallelConfig(pp=3, pp_split=PipelineSplit.EVEN), "`pp`·`vpp` must divide `layers`"),
        (ParallelConfig(ep=2, dp=2), "`ep` > 1 needs an MoE model"),
    ],
)
def test_an_invalid_config_raises_config_error(parallel: ParallelConfig, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AnalyticalBackend().evaluate(SMALL, parallel, A100)


@pytest.mark.parametrize(
    "options",
    [{"network_efficiency": ()}, {"network_efficiency": (0.5, 1.5)}, {"network_efficiency": (0,)},
     {"cache_size": 0}, {"cache_size": True}],
)  # fmt: skip
def test_bad_backend_options_raise_config_error(options: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        AnalyticalBackend(**options)  # type: ignore[arg-type]


def test_network_efficiency_slows_communication_only() -> None:
    """The backend option applies to dims whose system file gives no ``bus_efficiency``; a
    dim's own ``bus_efficiency`` wins over it."""
    model, parallel = POINTS["tp-sp-selective"]
    plain = dataclasses.replace(
        A100,
        network=tuple(
            dataclasses.replace(d, bus_efficiency=None, bus_efficiency_by_ranks=())
            for d in A100.network
        ),
    )
    # without the issue-order rule: under it the sequence-parallel reduce-scatter runs beside
    # the weight gradients, whose GEMMs lose NCCL's SMs for a share of its (network-dependent)
    # time (async_tp.nccl_sm_share_s), so compute would move with the network too
    ready = {"collectives_wait_for_issued_compute": False}
    slow = AnalyticalBackend(network_efficiency=(0.35, 0.45), overrides=ready).evaluate(
        model, parallel, plain
    )
    fast = AnalyticalBackend(network_efficiency=(1.0,), overrides=ready).evaluate(
        model, parallel, plain
    )
    assert slow.step_time_s > fast.step_time_s
    assert slow.breakdown["compute"] == pytest.approx(fast.breakdown["compute"], rel=1e-12)
    on_preset = AnalyticalBackend(network_efficiency=(0.35, 0.45)).evaluate(model, parallel, A100)
    assert on_preset.step_time_s == AnalyticalBackend().evaluate(model, parallel, A100).step_time_s
    assert on_preset.step_time_s < slow.step_time_s


# -- monotonicity ----------------------------------------------------------------------------------


def _config(
    tp: int,
    pp: int,
    dp: int,
    micro_batch: int,
    sp: bool,
    recompute: str,
    schedule: tuple[str, int],
    zero: int,
) -> ParallelConfig:
    kind, vpp = schedule if pp > 1 else ("1f1b", 1)
    return ParallelConfig(
        tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, global_batch=micro_batch * dp * pp * 2,
        sp=sp, recompute=recompute, schedule=kind, vpp=vpp, zero=zero,
    )  # fmt: skip


CONFIG = st.builds(
    _config,
    st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2]), st.booleans(), st.sampled_from(["none", "selective", "full"]),
    st.sampled_from([("1f1b", 1), ("gpipe", 1), ("interleaved", 2)]), st.sampled_from([0, 1, 2, 3]),
)  # fmt: skip


def scaled(system: System, dim: int, factor: float) -> System:
    network = list(system.network)
    network[dim] = dataclasses.replace(
        network[dim], bandwidth_bytes_per_s=network[dim].bandwidth_bytes_per_s * factor
    )
    return dataclasses.replace(system, network=tuple(network))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(CONFIG, st.sampled_from([0, 1]), st.floats(min_value=1.0, max_value=8.0))
def test_more_bandwidth_is_never_slower(parallel: ParallelConfig, dim: int, factor: float) -> None:
    backend = AnalyticalBackend()
    base = backend.evaluate(SMALL, parallel, A100)
    faster = backend.evaluate(SMALL, parallel, scaled(A100, dim, factor))
    assert faster.step_time_s <= base.step_time_s * (1 + 1e-12)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(CONFIG, st.integers(min_value=1, max_value=200))
def test_more_memory_capacity_is_never_less_feasible(
    parallel: ParallelConfig, extra_gib: int
) -> None:
    backend = AnalyticalBackend()
    model = get_flavor("megatron-gpt-22b")
    small = dataclasses.replace(
        A100, accelerator=dataclasses.replace(A100.accelerator, memory_bytes=16 * 2**30)
    )
    large = dataclasses.replace(
        small,
        accelerator=dataclasses.replace(small.accelerator, memory_bytes=(16 + extra_gib) * 2**30),
    )
    try:
        tight, roomy = (
            backend.evaluate(model, parallel, small),
            backend.evaluate(model, parallel, large),
        )
    except ConfigError:
        return  # not a valid config for this model
    assert roomy.feasible or not tight.feasible
    assert roomy.peak_memory_bytes == tight.peak_memory_bytes
    assert roomy.step_time_s == tight.step_time_s
