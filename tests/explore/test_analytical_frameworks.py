"""Framework profiles: the registry, option validation and overrides, selection by the
analytical backend (keyword, pickling, study options, ``stage eval --framework``), and what each
profile changes in an evaluation."""

from __future__ import annotations

import dataclasses
import json
import pickle

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Precision, Recompute
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import BlockTiming, time_block
from stage_explore.analytical.collectives import alpha_beta_collective_s
from stage_explore.analytical.framework_costs import zero3_gathered_bytes
from stage_explore.analytical.framework_profile import OPTION_FLAGS
from stage_explore.analytical.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS, get_framework
from stage_explore.analytical.overlap import flat_ring_s, overlap_collectives, overlap_rule
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.cli import main
from stage_explore.evaluation import Evaluation
from stage_explore.search.backends import create_backend, resolve_backend
from stage_explore.system import load_system

MODEL = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
PARALLEL = ParallelConfig(tp=2, pp=2, dp=2, global_batch=16, sp=True, recompute=Recompute.SELECTIVE)


def test_the_registry_holds_the_four_frameworks_the_validation_maps_rows_to() -> None:
    assert {"megatron-lm-2021", "megatron-core", "deepspeed", "fsdp"} <= set(FRAMEWORKS)
    assert DEFAULT_FRAMEWORK in FRAMEWORKS
    for name, profile in FRAMEWORKS.items():
        assert profile.name == name and profile.source.startswith("https://")
        assert set(OPTION_FLAGS) <= set(profile.to_dict())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tp_comm_overlap": 1}, "`tp_comm_overlap`"),
        ({"zero3_gathers": 4}, "`zero3_gathers` must be 2 or 3"),
        ({"allocator_overhead": -0.1}, "`allocator_overhead`"),
        ({"runtime_reserved_bytes": 1.5}, "`runtime_reserved_bytes`"),
        ({"zero3_live_elements": -1}, "`zero3_live_elements` must be an int >= 0"),
        ({"overlap_everything": True}, "unknown framework option 'overlap_everything'"),
    ],
)
def test_bad_options_are_config_errors_naming_the_option(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        get_framework("megatron-core").with_overrides(overrides)
    with pytest.raises(ConfigError, match=message):
        AnalyticalBackend(framework="megatron-core", overrides=overrides)


def test_an_unknown_framework_lists_the_known_ones() -> None:
    known = "known: automodel, deepspeed"
    with pytest.raises(ConfigError, match=f"unknown framework 'megatron'; {known}"):
        AnalyticalBackend(framework="megatron")


def test_overrides_replace_one_option_and_survive_pickling() -> None:
    backend = AnalyticalBackend(framework="megatron-core", overrides={"tp_comm_overlap": False})
    assert backend.framework.name == "megatron-core"
    assert backend.framework.tp_comm_overlap is False
    assert get_framework("megatron-core").tp_comm_overlap is True
    copy = pickle.loads(pickle.dumps(backend))
    assert copy.framework == backend.framework


def test_study_backend_options_select_the_framework() -> None:
    backend = create_backend(resolve_backend("analytical"), {"framework": "fsdp"})
    assert isinstance(backend, AnalyticalBackend) and backend.framework.name == "fsdp"


def test_process_memory_adds_the_runtime_and_the_allocator_reserve() -> None:
    system = load_system("h100-80gb")
    base = AnalyticalBackend(
        framework="megatron-core",
        overrides={"runtime_reserved_bytes": 0, "allocator_overhead": 0.0},
    ).evaluate(MODEL, PARALLEL, system)
    profile = get_framework("megatron-core")
    held = AnalyticalBackend(framework="megatron-core").evaluate(MODEL, PARALLEL, system)
    expected = (
        base.peak_memory_bytes
        + int(base.peak_memory_bytes * profile.allocator_overhead)
        + profile.runtime_reserved_bytes
    )
    assert held.peak_memory_bytes == expected


def test_eval_framework_flag(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "eval", "--model", "megatron-gpt-1.7b", "--layers", "4", "--tp", "2", "--pp", "2",
        "--dp", "2", "--global-batch", "16", "--sp", "--recompute", "selective",
        "--system", "h100-80gb", "--json",
    ]  # fmt: skip
    assert main([*argv, "--framework", "megatron-core"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = AnalyticalBackend(framework="megatron-core").evaluate(
        MODEL, PARALLEL, load_system("h100-80gb")
    )
    assert data["peak_memory_bytes"] == expected.peak_memory_bytes
    assert data["step_time_s"] == pytest.approx(expected.step_time_s, rel=1e-12)
    assert main([*argv, "--framework", "nope"]) == 2
    assert "unknown framework 'nope'" in capsys.readouterr().err


# -- overlap rewrites ------------------------------------------------------------------------------

AG = CollectiveKind.ALL_GATHER


def _gemm(name: str, seconds: float, deps: tuple[int, ...] = ()) -> Instr:
    return Instr(name, "fwd", "einsum", flops=int(seconds * 1000), deps=deps)


def _gather(seconds: float, deps: tuple[int, ...], axes: tuple[str, ...] = ("tp",)) -> Instr:
    return Instr(
        "ag", "fwd", "comm", collective=AG, axes=axes, comm_bytes=int(seconds * 1000), deps=deps
    )


def _timed(instrs: tuple[Instr, ...] | list[Instr]) -> BlockTiming:
    return time_block(instrs, lambda i: i.flops / 1000, lambda i: i.comm_bytes / 1000)


def test_chunked_overlap_leaves_one_chunk_on_the_path() -> None:
    block = [_gemm("a", 1), _gather(4, (0,)), _gemm("b", 8, (1,))]
    assert _timed(block).duration_s == 13.0
    rule = overlap_rule(TimingPolicy.from_profile(get_framework("megatron-core")), tp=4, sp=True)
    assert rule is not None
    rewritten = overlap_collectives(block, rule)
    assert [i.comm_bytes for i in rewritten if i.collective] == [1000, 3000]
    assert _timed(rewritten).duration_s == 10.0  # 1 + 4/4 + 8; the other 3 hide behind "b"


def test_full_overlap_hides_a_collective_up_to_the_block_end() -> None:
    block = [_gemm("a", 1), _gather(4, (0,), ("ep",)), _gemm("b", 2, (1,))]
    block[1] = dataclasses.replace(block[1], collective=CollectiveKind.ALL_TO_ALL)
    profile = get_framework("megatron-core").with_overrides({"moe_comm_overlap": True})
    rule = overlap_rule(TimingPolicy.from_profile(profile), tp=1, sp=False)
    assert rule is not None
    assert _timed(overlap_collectives(block, rule)).duration_s == 5.0  # the comm stream ends last
    assert (
        overlap_rule(TimingPolicy.from_profile(get_framework("megatron-lm-2021")), tp=8, sp=True)
        is None
    )
    assert (
        overlap_rule(TimingPolicy.from_profile(get_framework("megatron-core")), tp=8, sp=False)
        is None
    )


def test_a_flat_ring_over_nodes_is_slower_than_the_hierarchical_collective() -> None:
    system = load_system("a100-80gb")
    group = list(range(64))
    size = 2**30
    assert flat_ring_s(system, AG, size, group) > alpha_beta_collective_s(system, AG, size, group)
    assert flat_ring_s(system, AG, size, [3]) == 0.0


# -- what each profile changes ---------------------------------------------------------------------


def _tflops(framework: str, dp: int, micro_batch: int) -> float:
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
    parallel = ParallelConfig(
        dp=dp, micro_batch=micro_batch, global_batch=512, zero=3, recompute=Recompute.FULL,
        precision=Precision.FP16,
    )  # fmt: skip
    result = AnalyticalBackend(framework=framework).evaluate(
        model, parallel, load_system("a100-80gb")
    )
    return result.hardware_flops_per_step / result.step_time_s / dp


def test_deepspeed_zero3_throughput_collapses_as_gpus_double_at_a_fixed_batch() -> None:
    """NAR21-T2's mechanism: each GPU gathers the whole model per micro-batch whatever the
    number of GPUs, over a flat ring at the scale-out bandwidth; its compute halves."""
    deepspeed = [_tflops("deepspeed", dp, 512 // dp) for dp in (128, 256, 512)]
    assert deepspeed[0] > 1.6 * deepspeed[1] > 2.5 * deepspeed[2]
    hierarchical = [_tflops("fsdp", dp, 512 // dp) for dp in (128, 256, 512)]
    assert all(h > d for h, d in zip(hierarchical, deepspeed, strict=True))


def _gpt_on_h100(framework: str, **overrides: object) -> Evaluation:
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
    parallel = ParallelConfig(tp=8, dp=16, sp=True, zero=1, global_batch=32)
    backend = AnalyticalBackend(framework=framework, overrides=overrides)
    return backend.evaluate(model, parallel, load_system("h100-80gb"))


def test_megatron_core_overlaps_tp_communication_and_the_parameter_gather() -> None:
    on = _gpt_on_h100("megatron-core")
    off = _gpt_on_h100("megatron-core", tp_comm_overlap=False, overlap_param_gather=False)
    exposed = ("exposed_all_gather", "exposed_reduce_scatter")
    assert sum(on.breakdown.get(k, 0.0) for k in exposed) < sum(
        off.breakdown.get(k, 0.0) for k in exposed
    )
    assert on.breakdown["parameter_gather"] < off.breakdown["parameter_gather"]
    # the same kernels, but userbuffers cut the GEMMs before a reduce-scatter into 4 row
    # chunks, each a smaller GEMM (tests/explore/test_userbuffers.py)
    assert on.breakdown["compute"] == pytest.approx(off.breakdown["compute"], rel=0.1)
    for result in (on, off):
        assert sum(result.breakdown.values()) == pytest.approx(result.step_time_s, rel=1e-9)


def test_gradient_reduction_without_overlap_is_exposed_after_the_backward() -> None:
    # 25 MiB buckets: Megatron-Core's own (40M parameters at dp 16) hold this small model's
    # gradients per rank in one bucket, reduced after the backward with or without overlap
    on = _gpt_on_h100("megatron-core", ddp_bucket_scales_with_dp=False)
    off = _gpt_on_h100("megatron-core", overlap_grad_reduce=False)
    assert off.breakdown["exposed_gradient_sync"] > on.breakdown["exposed_gradient_sync"]


def test_without_scatter_gather_every_tp_rank_sends_the_whole_activation() -> None:
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=8)
    parallel = ParallelConfig(tp=8, pp=4, dp=1, global_batch=16)
    system = load_system("a100-80gb")
    megatron = AnalyticalBackend(framework="megatron-lm-2021").evaluate(model, parallel, system)
    whole = AnalyticalBackend(
        framework="megatron-lm-2021", overrides={"pipeline_scatter_gather": False}
    ).evaluate(model, parallel, system)
    assert whole.breakdown["pipeline_p2p"] > megatron.breakdown["pipeline_p2p"]


def test_eager_frameworks_pay_for_every_elementwise_round_trip() -> None:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=2, dp=2, sp=True, global_batch=4)
    system = load_system("h100-80gb")
    fused = AnalyticalBackend(framework="fsdp", overrides={"fused_elementwise": True})
    eager = AnalyticalBackend(framework="fsdp")
    assert not eager.framework.fused_elementwise
    slow = eager.evaluate(model, parallel, system).breakdown["compute"]
    assert slow > fused.evaluate(model, parallel, system).breakdown["compute"]


def test_the_evaluation_names_its_framework() -> None:
    result = AnalyticalBackend(framework="fsdp").evaluate(MODEL, PARALLEL, load_system("h100-80gb"))
    assert result.extra["framework"] == "fsdp"


def test_fsdp_holds_two_gathered_blocks_deepspeed_its_live_bound() -> None:
    blocks = [10_000, 30_000, 20_000]  # full weight bytes of three blocks
    fsdp, deepspeed = get_framework("fsdp"), get_framework("deepspeed")
    assert zero3_gathered_bytes(fsdp, blocks, 4_000, 2) == 50_000
    # DeepSpeed: max(largest tensor, stage3_max_live_parameters) + prefetch bucket, in bytes,
    # unless two whole blocks are smaller
    small = deepspeed.with_overrides({"zero3_live_elements": 1_000, "zero3_prefetch_elements": 500})
    assert zero3_gathered_bytes(small, blocks, 4_000, 2) == (4_000 + 500) * 2
    assert zero3_gathered_bytes(small, blocks, 400, 2) == (1_000 + 500) * 2
    assert zero3_gathered_bytes(deepspeed, blocks, 4_000, 2) == 50_000
    assert deepspeed.zero3_live_elements == 10**9  # stage3_max_live_parameters default
    assert deepspeed.zero3_prefetch_elements == 5 * 10**7  # stage3_prefetch_bucket_size


def test_deepspeed_zero3_peak_holds_the_largest_tensor_not_two_layers() -> None:
    """NAR21-T2-4 ran (530B, ZeRO-3, micro-batch 4 on 80 GB) where two gathered layers of
    10 GB each did not fit: DeepSpeed gathers per sub-module."""
    # a small vocabulary, so that the layers are the largest blocks
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4, vocab=128)
    parallel = ParallelConfig(dp=8, global_batch=8, zero=3, recompute=Recompute.FULL)
    system = load_system("a100-80gb")
    bare = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0, "zero3_prefetch_elements": 0}
    whole = AnalyticalBackend(
        framework="deepspeed", overrides={**bare, "zero3_live_elements": 0}
    ).evaluate(model, parallel, system)
    one = AnalyticalBackend(
        framework="deepspeed", overrides={**bare, "zero3_live_elements": 1}
    ).evaluate(model, parallel, system)
    h = model.hidden
    layer_bytes = 2 * (12 * h * h + 13 * h)  # GPT layer: QKV, proj, 2 MLP, biases, 2 norms
    largest_tensor_bytes = 2 * 4 * h * h  # an MLP matrix
    assert whole.peak_memory_bytes - one.peak_memory_bytes == 2 * layer_bytes - (
        largest_tensor_bytes
    )
    assert whole.step_time_s == one.step_time_s


def test_deepspeed_pipeline_engine_partitions_activations_over_tp_like_megatron() -> None:
    """DeepSpeed's PipelineEngine sends 1/tp of a stage's output and all-gathers it on the
    receiver (is_pipe_partitioned / is_grad_partitioned when the model-parallel group has more
    than one rank), as Megatron's scatter/gather does."""
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=8)
    parallel = ParallelConfig(tp=8, pp=4, dp=1, global_batch=16)
    system = load_system("a100-80gb")
    # Megatron's batched exchange; DeepSpeed's separate blocking send and receive
    # (pipeline_p2p_separate) are tests/explore/test_deepspeed_pipeline.py's
    batched = {"pipeline_p2p_separate": False}
    deepspeed = AnalyticalBackend(framework="deepspeed", overrides=batched).evaluate(
        model, parallel, system
    )
    megatron = AnalyticalBackend(framework="megatron-lm-2021").evaluate(model, parallel, system)
    whole = AnalyticalBackend(
        framework="deepspeed", overrides={**batched, "pipeline_scatter_gather": False}
    ).evaluate(model, parallel, system)
    assert deepspeed.breakdown["pipeline_p2p"] == pytest.approx(megatron.breakdown["pipeline_p2p"])
    assert whole.breakdown["pipeline_p2p"] > deepspeed.breakdown["pipeline_p2p"]


def test_a_misspelt_option_names_the_close_one_first() -> None:
    # s27 review: 'moe_grouped_kernl' listed all 90 options and named no close one
    with pytest.raises(ConfigError, match="did you mean 'moe_grouped_kernel'\\? known: "):
        get_framework("megatron-core").with_overrides({"moe_grouped_kernl": True})
    with pytest.raises(ConfigError) as error:
        get_framework("megatron-core").with_overrides({"xyzzy": True})
    assert "did you mean" not in str(error.value)


def test_two_expert_paths_at_once_are_refused() -> None:
    # s27 review: SequentialMLP and TE's single-launch grouped experts (s26) were both taken
    # without a word, as moe_deepep and moe_hybridep are not
    with pytest.raises(ConfigError, match="`moe_sequential_mlp` .* `moe_grouped_kernel` .* two"):
        get_framework("megatron-core").with_overrides(
            {"moe_sequential_mlp": True, "moe_grouped_kernel": True}
        )
    for one in ("moe_sequential_mlp", "moe_grouped_kernel"):
        assert getattr(get_framework("megatron-core").with_overrides({one: True}), one)
