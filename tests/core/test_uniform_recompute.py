"""Megatron-Core's ``--recompute-granularity full --recompute-method uniform
--recompute-num-layers N`` (``ParallelConfig.recompute_method = "uniform"``): every layer is
recomputed, in groups of N consecutive layers of each model chunk checkpointed as one unit
(``TransformerBlock._checkpointed_forward``). A group keeps only its input; its backward re-runs
the group's forward and holds the N layers' activations at once.

Closed forms (Korthikanti et al. 2022, 16-bit activations, 1-byte dropout masks, tp = 1): a
layer without recompute saves ``F = 34·s·b·h + 5·a·s²·b`` bytes, a group its input ``2·s·b·h``;
a chunk of L layers saves ``ceil(L/N)·2sbh``, and the backward working set grows by the group's
other layers' activations, ``(N−1)·F``, over full recompute's (a group of one layer)."""

from __future__ import annotations

import math

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.memory import memory_report
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.models.layers import (
    base_block_name,
    grouped_block_name,
    is_grouped_block,
    is_layer_block,
)
from stage_core.parallel import ParallelConfig, Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.system import load_system

GPT = get_flavor("megatron-gpt-1.7b").with_overrides(layers=8)  # a=24, h=2304, s=2048
S, H, A, B = GPT.seq_len, GPT.hidden, GPT.heads, 1
FULL_LAYER = 34 * S * B * H + 5 * A * S * S * B  # F: a layer's activations without recompute
LAYER_INPUT = 2 * S * B * H  # a fully recomputed layer's (a group's) saved input


def _parallel(**fields: object) -> ParallelConfig:
    base: dict[str, object] = {"pp": 2, "micro_batch": 1, "global_batch": 8}
    base.update(fields)
    return ParallelConfig(**base)  # type: ignore[arg-type]


def _uniform(n: int, **fields: object) -> ParallelConfig:
    return _parallel(
        recompute=Recompute.FULL, recompute_num_layers=n, recompute_method="uniform", **fields
    )


def _layer_kinds(chunk: object) -> list[str]:
    return [b.kind for b in chunk.blocks if is_layer_block(b.kind)]  # type: ignore[attr-defined]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_each_chunk_is_cut_in_groups_of_n_and_saves_one_input_per_group(n: int) -> None:
    programs = lower(GPT, _uniform(n))  # 2 stages of 4 layers
    expected = ["layer" if i % n == 0 else grouped_block_name("layer") for i in range(4)]
    for stage in programs.stages:
        chunk = stage.chunks[0]
        assert _layer_kinds(chunk) == expected
        saved = sum(b.saved_bytes for b in chunk.blocks if is_layer_block(b.kind))
        assert saved == math.ceil(4 / n) * LAYER_INPUT


def test_groups_start_at_every_virtual_chunk() -> None:
    parallel = _uniform(2, vpp=2, schedule="interleaved")  # 4 global stages of 2 layers
    for stage in lower(GPT, parallel).stages:
        for chunk in stage.chunks:
            assert _layer_kinds(chunk) == ["layer", grouped_block_name("layer")]
    assert is_grouped_block(grouped_block_name("layer")) and not is_grouped_block("layer")
    assert base_block_name(grouped_block_name("moe_layer")) == "moe_layer"


@pytest.mark.parametrize("n", [2, 3, 4])
def test_the_backward_working_set_holds_the_groups_other_layers(n: int) -> None:
    """The largest group (n layers; with 4 layers and n = 3, the groups are 3 and 1) holds
    (n−1)·F more than one fully recomputed layer's backward."""
    full = memory_report(lower(GPT, _parallel(recompute=Recompute.FULL)))
    uniform = memory_report(lower(GPT, _uniform(n)))
    for f, u in zip(full, uniform, strict=True):
        assert u.transient_bytes - f.transient_bytes == (n - 1) * FULL_LAYER


def test_one_layer_groups_are_full_recompute() -> None:
    full = lower(GPT, _parallel(recompute=Recompute.FULL))
    one = lower(GPT, _uniform(1))
    assert [s.chunks for s in full.stages] == [s.chunks for s in one.stages]
    assert memory_report(full) == memory_report(one)


def test_every_layer_recomputes_its_forward_once() -> None:
    programs = lower(GPT, _uniform(3))
    forward = sum(i.flops for i in programs.blocks["layer"].fwd)
    grouped = programs.blocks[grouped_block_name("layer")]
    assert grouped.saved_bytes == 0
    assert sum(i.flops for i in grouped.bwd if i.phase == "recompute") == forward
    for stage in programs.stages:
        recomputed = sum(
            i.flops for b in stage.chunks[0].blocks for i in b.bwd if i.phase == "recompute"
        )
        assert recomputed == 4 * forward


def test_the_analytical_backend_counts_it_as_stage_memory_and_keys_its_memos_on_n() -> None:
    system = load_system("h100-80gb")
    configs = [_uniform(2), _uniform(3), _parallel(recompute=Recompute.FULL), _uniform(4)]
    tensors_only = {"loss_fp32_buffers": 0}  # stage memory counts the generator's 16-bit loss
    shared = AnalyticalBackend(overrides=tensors_only)
    warm = [shared.evaluate(GPT, p, system) for p in configs]
    cold = [AnalyticalBackend(overrides=tensors_only).evaluate(GPT, p, system) for p in configs]
    for w, c, parallel in zip(warm, cold, configs, strict=True):
        assert (w.step_time_s, w.peak_memory_bytes) == (c.step_time_s, c.peak_memory_bytes)
        expected = max(entry.peak_bytes for entry in memory_report(lower(GPT, parallel)))
        assert w.peak_memory_bytes == expected
    two, three, full, four = warm
    # n = 2 and n = 3 save the same inputs (2 groups a chunk): only the working set differs
    assert three.peak_memory_bytes - two.peak_memory_bytes == FULL_LAYER
    assert four.peak_memory_bytes > three.peak_memory_bytes > full.peak_memory_bytes
    assert two.hardware_flops_per_step == full.hardware_flops_per_step


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"recompute_num_layers": 5}, "at most the layers of every pipeline stage chunk"),
        ({"recompute_num_layers": 3, "vpp": 2, "schedule": "interleaved"}, "chunk \\(2\\)"),
    ],
)
def test_more_layers_than_a_chunk_is_a_one_line_config_error(
    fields: dict[str, object], message: str
) -> None:
    base: dict[str, object] = {"recompute": Recompute.FULL, "recompute_method": "uniform"}
    with pytest.raises(ConfigError, match=message) as raised:
        lower(GPT, _parallel(**base, **fields))
    assert "\n" not in str(raised.value)
