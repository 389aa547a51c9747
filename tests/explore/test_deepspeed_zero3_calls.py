"""DeepSpeed ZeRO-3 gathers a block's parameters as several NCCL calls, one per prefetch batch of
``stage3_prefetch_bucket_size`` elements (``framework_costs.zero3_fetch_calls``;
``PartitionedParameterCoordinator.fetch_sub_module``), each paying the per-call cost and its
ring's latency; FSDP's whole units stay one call (s32 zero3)."""

from __future__ import annotations

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.framework_costs import zero3_fetch_calls
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system

DEEPSPEED = get_framework("deepspeed")
#: LLaMA-13B's layer as the generator fuses it (QKV, output projection, gate+up, down)
LLAMA13B_LAYER = [3 * 5120 * 5120, 5120 * 5120, 2 * 5120 * 13824, 5120 * 13824, 5120, 5120]


def test_deepspeed_default_prefetch_bucket_is_its_code_default() -> None:
    # deepspeed/runtime/zero/config.py: prefetch_bucket_size = Field(pp_int(5e7), ...)
    assert DEEPSPEED.zero3_prefetch_elements == 5 * 10**7


def test_batches_close_once_they_reach_the_bucket() -> None:
    # [QKV 78.6M] reaches 5e7 alone; [out 26.2M + gate/up 141.6M]; [down 70.8M]; norms persistent
    assert zero3_fetch_calls(DEEPSPEED, LLAMA13B_LAYER) == 3
    small = DEEPSPEED.with_overrides({"zero3_prefetch_elements": 10**6})
    assert zero3_fetch_calls(small, LLAMA13B_LAYER) == 4  # every partitioned tensor alone
    huge = DEEPSPEED.with_overrides({"zero3_prefetch_elements": 10**12})
    assert zero3_fetch_calls(huge, LLAMA13B_LAYER) == 1  # one partial batch


def test_persistent_parameters_are_not_gathered() -> None:
    # stage3_param_persistence_threshold (1e5): "param.ds_numel <= param_threshold" persists;
    # a block of nothing else issues no call (s33 zero3c: it was one before)
    threshold = DEEPSPEED.zero3_persistence_elements
    assert zero3_fetch_calls(DEEPSPEED, [threshold - 1, threshold]) == 0
    assert zero3_fetch_calls(DEEPSPEED, [threshold + 1] * 2) == 1
    assert zero3_fetch_calls(DEEPSPEED, []) == 0


def test_fsdp_gathers_a_unit_in_one_call() -> None:
    assert zero3_fetch_calls(get_framework("fsdp"), LLAMA13B_LAYER) == 1


def test_more_calls_cost_ring_latency_on_a_flat_ring_of_many_ranks() -> None:
    """1,024 ranks on one flat ring (DeepSpeed's ``zero3_flat_ring``) at micro-batch 1: the
    gathers are exposed, and each extra call per layer and pass adds the ring's 1,023 steps of
    InfiniBand latency (5 us on the a800 preset) at least."""
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)
    parallel = ParallelConfig(dp=1024, global_batch=1024, zero=3)
    system = load_system("a800")

    def step(prefetch: int) -> float:
        backend = AnalyticalBackend(
            framework="deepspeed", overrides={"zero3_prefetch_elements": prefetch}
        )
        return backend.evaluate(model, parallel, system).step_time_s

    # one call per layer; one per weight (4: QKV, output projection, fc1, fc2)
    one, each = step(10**12), step(10**5)
    latency = 1023 * system.network[-1].latency_s
    assert each - one >= 3 * 4 * 2 * latency  # 3 extra calls, 4 layers, forward and backward
    assert each - one < 3 * 4 * 3 * 2 * latency  # and no more than a few of them
