"""The analytical backend's memos are keyed on everything their values depend on: a run's
prediction is the same, to the last bit, evaluated alone or after another run that shares
some of its parts (s30 memo: a plan or block cost averaged over the step's micro-batches was
answered from a run with another global batch)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Precision, Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.system import load_system
from stage_explore.validation.run import analytical_factory, evaluate_cases
from stage_explore.validation.setup_systems import case_system
from stage_explore.validation.setups import Case
from tests.explore.package_cases import package_cases

MODEL = get_flavor("megatron-gpt-1.7b").with_overrides(layers=4)


def _step_s(backend: AnalyticalBackend, parallel: ParallelConfig) -> float:
    return backend.evaluate(MODEL, parallel, load_system("a100-80gb")).step_time_s


@pytest.mark.parametrize(
    ("framework", "overrides", "precision", "pp"),
    [
        ("deepspeed", {}, Precision.FP16, 2),  # fp16 AccumulateGrad: (m - 1) / m passes
        ("deepspeed", {}, Precision.FP16, 1),
        ("deepspeed", {"grad_accumulation": "torch-ddp"}, Precision.FP16, 2),  # + 1/m copies
        ("deepspeed", {"grad_accumulation": "torch-ddp"}, Precision.BF16, 1),
    ],
)
def test_second_global_batch_predicts_as_alone(
    framework: str, overrides: dict[str, str], precision: Precision, pp: int
) -> None:
    """Evaluating B after A (same layout, another global batch) in one backend gives B's
    prediction alone exactly; the two global batches predict different per-micro-batch
    accumulation, so a memo that left the micro-batches out would answer B with A's."""
    first = ParallelConfig(
        dp=2, tp=2, pp=pp, micro_batch=1, global_batch=2 * 3, precision=precision,
        recompute=Recompute.FULL,
    )  # fmt: skip
    second = replace(first, global_batch=2 * 8)
    alone = _step_s(AnalyticalBackend(framework=framework, overrides=overrides), second)
    shared = AnalyticalBackend(framework=framework, overrides=overrides)
    _step_s(shared, first)
    assert _step_s(shared, second) == alone


def test_fp8_shard_amax_spread_predicts_as_alone() -> None:
    """torchao's per-step amax of the FP8 shards (``fsdp_float8_all_gather``) is spread over
    the step's micro-batches at pp 1: B after A equals B alone."""
    system = load_system("h100-80gb")
    overrides = {"fsdp_float8_all_gather": True}
    first = ParallelConfig(
        dp=4, tp=1, pp=1, micro_batch=1, global_batch=12, precision=Precision.FP8, zero=3
    )
    second = replace(first, global_batch=32)
    fresh = AnalyticalBackend(framework="torchtitan", overrides=overrides)
    alone = fresh.evaluate(MODEL, second, system).step_time_s
    shared = AnalyticalBackend(framework="torchtitan", overrides=overrides)
    shared.evaluate(MODEL, first, system)
    assert shared.evaluate(MODEL, second, system).step_time_s == alone


def test_bigscience_181b_rows_do_not_depend_on_order() -> None:
    """The published rows s30's spelling fuzz found order-dependent (BigScience 181B, same
    layout, global batch 1568 then 2048: 102.811 instead of 102.806 tokens/s)."""
    cases = {case.id: case for case in package_cases()}
    a = cases["BSPRE25-A100-H14336-L72-TP8PP6DP8-MBS4-GBS1568"]
    b = cases["BSPRE25-A100-H14336-L72-TP8PP6DP8-MBS4-GBS2048"]
    alone = evaluate_cases([b], analytical_factory())[0].predicted
    after = evaluate_cases([a, b], analytical_factory())[1].predicted
    assert after == alone


def test_first_dense_layer_binds_its_own_kind() -> None:
    """Two models of one structure and sizes that lay out different layer kinds (a first dense
    layer before the MoE layers) bind different blocks: B after A binds B's (s31 memo2: the
    bound-blocks key left the kinds out, and B after A had no ``layer`` block, a KeyError)."""
    moe = get_flavor("mixtral-8x7b").with_overrides(layers=2)
    first_dense = replace(moe, first_k_dense=1)
    parallel = ParallelConfig(dp=4, tp=2, ep=4, micro_batch=1, global_batch=8, sp=True)
    system = load_system("h100-80gb")
    alone = AnalyticalBackend(framework="megatron-core").evaluate(first_dense, parallel, system)
    shared = AnalyticalBackend(framework="megatron-core")
    shared.evaluate(moe, parallel, system)
    after = shared.evaluate(first_dense, parallel, system)
    assert after.step_time_s == alone.step_time_s
    assert after.peak_memory_bytes == alone.peak_memory_bytes


@pytest.fixture(scope="module")
def deepseek_v3_row() -> Case:
    """MLPerf's DeepSeek-V3 on GB200 (a dropless MoE row, Megatron-Core with its weight
    gradients accumulated into bf16 buffers by the GEMM)."""
    return next(c for c in package_cases() if c.id == "MBX-GB200-26.04-DSV3-MX")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("capacity_factor", 1.0),  # dropless routing's per-expert tiles vs padded capacity
        ("grad_fp32", True),  # the fused weight-gradient accumulator's bytes
    ],
)
def test_compute_timer_inputs_are_in_the_block_key(
    deepseek_v3_row: Case, field: str, value: object
) -> None:
    """A run that differs from a published row only in what the blocks' compute timer reads
    beyond the bound blocks (dropless routing's expected tiles, the fp32 or bf16 gradient the
    weight-gradient GEMM accumulates into) predicts after that row as alone, both ways round
    (s31 memo2: capacity 1.0 after dropless was 3.4 % off, fp32 gradients after bf16 ones 3e-8)."""
    row = deepseek_v3_row
    assert row.model is not None and row.parallel is not None
    model, parallel = row.model, row.parallel
    if field == "capacity_factor":
        assert model.capacity_factor is None  # the row is dropless
        model = replace(model, capacity_factor=value)
    else:
        assert not parallel.grad_fp32  # bf16 gradients (Megatron-Bridge's MLPerf recipe)
        parallel = replace(parallel, grad_fp32=value)
    system = case_system(row)
    pairs = [((row.model, row.parallel), (model, parallel)),
             ((model, parallel), (row.model, row.parallel))]  # fmt: skip
    for first, second in pairs:
        alone = analytical_factory()(row.backend_key).evaluate(*second, system)
        shared = analytical_factory()(row.backend_key)
        shared.evaluate(*first, system)
        after = shared.evaluate(*second, system)
        assert (after.step_time_s, after.breakdown) == (alone.step_time_s, alone.breakdown)
