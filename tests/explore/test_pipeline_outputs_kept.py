"""NeMo 1.x's kept pipeline outputs (``pipeline_outputs_kept``: Megatron-Core
``deallocate_pipeline_outputs`` False), against closed forms computed here: one boundary-sized
tensor per chunk micro-batch in flight on every chunk whose output is sent (not the chunk holding
the loss); nothing without pipeline parallelism; memory only. And the setups loader's
source-level ``framework_options``, which turn it on for a NeMo 1.x source's rows."""

from __future__ import annotations

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system
from tests.explore.package_cases import package_cases

#: A small vocabulary keeps the head's weights from making the last stage the busiest.
LLAMA = get_flavor("llama3-8b").with_overrides(layers=8, seq_len=1024, vocab=512)
#: The tensors' own peak (no runtime reserve or allocator estimate on top).
PLAIN = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0}


def _peaks(parallel: ParallelConfig) -> tuple[int, int, float, float]:
    """Peak memory and step time with the option off and on."""
    system = load_system("h100-80gb")
    off = AnalyticalBackend(framework="megatron-core", overrides=PLAIN)
    on = AnalyticalBackend(
        framework="megatron-core", overrides={**PLAIN, "pipeline_outputs_kept": True}
    )
    a, b = off.evaluate(LLAMA, parallel, system), on.evaluate(LLAMA, parallel, system)
    return a.peak_memory_bytes, b.peak_memory_bytes, a.step_time_s, b.step_time_s


@pytest.mark.parametrize(
    ("vpp", "in_flight"),
    [
        # 1F1B: stage 0 runs pp − 1 warm-up forwards, then one more before its first backward
        (1, 2),
        # interleaved: (pp − 1)·2 + (vpp − 1)·pp warm-up chunk forwards, then one more; both of
        # stage 0's chunks send their outputs (the loss is on stage 1's last chunk)
        (2, (2 - 1) * 2 + (2 - 1) * 2 + 1),
    ],
)
def test_stage_0_keeps_one_sent_output_per_chunk_micro_batch_in_flight(
    vpp: int, in_flight: int
) -> None:
    micro_batch, micro_batches, pp = 2, 8, 2
    parallel = ParallelConfig(
        pp=pp, vpp=vpp, schedule="interleaved" if vpp > 1 else "1f1b", dp=2, zero=1,
        micro_batch=micro_batch, global_batch=2 * micro_batch * micro_batches,
    )  # fmt: skip
    off, on, time_off, time_on = _peaks(parallel)
    boundary = micro_batch * LLAMA.seq_len * LLAMA.hidden * 2  # bf16, no tp, no cp
    assert on - off == in_flight * boundary
    assert time_on == time_off  # memory only


def test_nothing_is_kept_without_pipeline_stages_and_megatron_lm_frees_them() -> None:
    parallel = ParallelConfig(dp=4, zero=1, micro_batch=1, global_batch=8)
    off, on, _, _ = _peaks(parallel)
    assert on == off
    for name in ("megatron-core", "megatron-lm-2021"):  # core_transformer_config_from_args: True
        assert not get_framework(name).pipeline_outputs_kept


def test_a_nemo_1_source_keeps_them_on_every_row_and_a_row_s_options_add_to_it() -> None:
    cases = {case.id: case for case in package_cases()}
    nemotron = dict(cases["NEMO2407-H100-NEMOTRON-340B"].framework_options)
    assert nemotron["pipeline_outputs_kept"] is True  # the source's option
    assert nemotron["native_cross_entropy"] is True  # and the row's own
    assert "pipeline_outputs_kept" not in dict(cases["NEMO2502-H100-GPT3-175B"].framework_options)
