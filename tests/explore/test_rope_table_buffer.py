"""TorchTitan's rotary table buffer (``rope_table_buffer``: ``freqs_cis`` of ``seq`` positions
× ``head_dim / 2`` complex64 on every model part, cloned by torch's ``context_parallel``), against
closed forms computed here: one table per model part a rank holds, two with context parallelism,
none for a model without rotary positions; memory only."""

from __future__ import annotations

import pytest

from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.framework_costs import rope_table_bytes
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system

#: A small vocabulary keeps the loss small beside the layers.
LLAMA = get_flavor("llama3-8b").with_overrides(layers=8, seq_len=4096, vocab=512)
#: The tensors' own peak (no runtime reserve or allocator estimate on top).
PLAIN = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0}


def test_the_table_is_one_position_per_token_of_complex64_half_heads() -> None:
    seq, head_dim = 8192, 128
    table = seq * (head_dim // 2) * 8  # complex64: two fp32
    assert rope_table_bytes(seq, head_dim, cp=1) == table == 4 * 2**20
    assert rope_table_bytes(seq, head_dim, cp=2) == 2 * table  # context_parallel's clone
    assert rope_table_bytes(seq, head_dim, cp=8) == 2 * table  # one clone whatever the degree


def _peaks(model: ModelSpec, parallel: ParallelConfig) -> tuple[int, int, float, float]:
    """Peak memory and step time under torchtitan with the option off and on."""
    system = load_system("h100-80gb")
    off = AnalyticalBackend(framework="torchtitan", overrides={**PLAIN, "rope_table_buffer": False})
    on = AnalyticalBackend(framework="torchtitan", overrides={**PLAIN, "rope_table_buffer": True})
    a, b = off.evaluate(model, parallel, system), on.evaluate(model, parallel, system)
    return a.peak_memory_bytes, b.peak_memory_bytes, a.step_time_s, b.step_time_s


@pytest.mark.parametrize(
    ("cp", "pp", "vpp", "tables"),
    [
        (1, 1, 1, 1),  # one model part, no clone
        (2, 1, 1, 2),  # context_parallel's clone beside the buffer
        (1, 2, 2, 2),  # two model parts (virtual stages) on each rank
    ],
)
def test_each_model_part_holds_its_table_and_cp_a_clone(
    cp: int, pp: int, vpp: int, tables: int
) -> None:
    parallel = ParallelConfig(
        dp=2, cp=cp, pp=pp, vpp=vpp, schedule="interleaved" if vpp > 1 else "1f1b", zero=3,
        micro_batch=1, global_batch=2 * pp * 2,
    )  # fmt: skip
    off, on, time_off, time_on = _peaks(LLAMA, parallel)
    table = LLAMA.seq_len * (LLAMA.head_dim // 2) * 8
    assert on - off == tables * table
    assert time_on == time_off  # memory only


def test_no_table_without_rotary_positions_and_only_torchtitan_holds_one() -> None:
    gpt = get_flavor("gpt3-1.3b").with_overrides(layers=4, seq_len=2048, vocab=512)
    parallel = ParallelConfig(dp=2, zero=3, micro_batch=1, global_batch=2)
    off, on, _, _ = _peaks(gpt, parallel)
    assert on == off  # learned positions: no rotary table
    assert get_framework("torchtitan").rope_table_buffer
    for name in ("megatron-core", "fsdp", "automodel", "deepspeed"):
        assert not get_framework(name).rope_table_buffer
