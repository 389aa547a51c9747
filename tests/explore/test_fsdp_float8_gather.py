"""FSDP2's float8 all-gather (``fsdp_float8_all_gather``, torchao / torchtitan
``enable_fsdp_float8_all_gather``): under ZeRO-3 with a per-tensor FP8 recipe the FP8 linear
weights are cast to FP8 on the rank's shard and all-gathered at 1 byte per element, the byte
accounting Megatron's ``fp8_param_gather`` uses; the per-use weight casts of torchao's
``Float8Linear`` become one cast of the shard per gather. Closed forms from the lowered blocks,
the option's effect on a timed point, the inference's reading of a row and the hand-written
setups that set it."""

from __future__ import annotations

import math
from dataclasses import replace

from stage_core.lower.experts import data_axes
from stage_core.lower.fp8 import fp8_block, linear_weights
from stage_core.lower.program import lower
from stage_core.lower.zero_nodes import zero_collectives
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Fp8Recipe, Precision
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_gathers import (
    fp8_shard_elements,
    fp8_zero3_gathers,
    fsdp_float8_gathers,
)
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system
from stage_explore.validation.infer_release import Defaults
from stage_explore.validation.infer_torch import torchtitan_defaults
from tests.explore.package_cases import package_cases

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
FSDP_FP8 = ParallelConfig(
    dp=8, zero=3, precision=Precision.FP8, fp8_recipe=Fp8Recipe.TENSORWISE, global_batch=8
)

TITAN = get_framework("torchtitan")
ON = replace(TITAN, fsdp_float8_all_gather=True)


def test_the_fp8_linear_weights_are_gathered_at_one_byte_under_zero_3() -> None:
    programs = lower(LLAMA, FSDP_FP8)
    workload = programs.workload
    sizes = workload.axis_sizes
    seen = 0
    for kind, block in programs.blocks.items():
        gathers = tuple(zero_collectives(workload, block, True))
        if not fsdp_float8_gathers(ON, workload, kind):
            assert not (fp8_block(kind) and linear_weights(block))
            continue
        assert not fsdp_float8_gathers(TITAN, workload, kind)  # torchtitan's default: off
        fp8 = linear_weights(block)
        expected: dict[tuple[str, ...], int] = {}
        for weight in block.weights:
            data = data_axes(sizes, workload.expert_axes, weight.expert)
            shard = weight.elements // math.prod(sizes[a] for a in data)
            expected[data] = expected.get(data, 0) + shard * (1 if weight.name in fp8 else 2)
        narrowed = fp8_zero3_gathers(workload, block, gathers)
        assert {i.axes: i.comm_bytes for i in narrowed} == expected
        assert sum(expected.values()) < sum(i.comm_bytes for i in gathers)
        shards, whole = fp8_shard_elements(workload, block)
        assert whole == sum(w.elements for w in block.weights if w.name in fp8)
        assert shards == whole // 8
        seen += 1
    assert seen  # the decoder layers


def test_only_per_tensor_fp8_under_zero_3_gathers_fp8() -> None:
    kind = next(k for k in lower(LLAMA, FSDP_FP8).blocks if fp8_block(k))
    for parallel in (
        replace(FSDP_FP8, fp8_recipe=Fp8Recipe.MXFP8),  # torchao's MX recipes gather bf16
        replace(FSDP_FP8, precision=Precision.BF16),
        replace(FSDP_FP8, zero=1),
    ):
        workload = lower(LLAMA, parallel).workload
        assert not fsdp_float8_gathers(ON, workload, kind)


def test_the_option_shortens_an_fsdp2_float8_step_and_leaves_bf16_alone() -> None:
    system = load_system("h100-80gb")
    on = AnalyticalBackend(framework="torchtitan", overrides={"fsdp_float8_all_gather": True})
    off = AnalyticalBackend(framework="torchtitan")
    fast = on.evaluate(LLAMA, FSDP_FP8, system).step_time_s
    slow = off.evaluate(LLAMA, FSDP_FP8, system).step_time_s
    assert fast < slow  # half the gathered bytes, a shard cast per gather instead of per use
    bf16 = replace(FSDP_FP8, precision=Precision.BF16)
    assert on.evaluate(LLAMA, bf16, system).step_time_s == (
        off.evaluate(LLAMA, bf16, system).step_time_s
    )


def _titan_row(table: str, notes: str = "") -> Defaults:
    out = Defaults()
    row = {"source": "torchtitan", "source_table": table, "notes": notes}
    torchtitan_defaults(row, "selective", 1, out)
    return out


def test_the_inference_turns_it_on_only_where_the_row_states_it() -> None:
    for stated in (
        "torchtitan: float8 tensorwise (f8 all-gather)",
        "tensorwise with float8 all-gather",
        "Float8 with --float8.enable_fsdp_float8_all_gather",
    ):
        assert _titan_row(stated).options.get("fsdp_float8_all_gather") is True, stated
    for silent in (
        "rowwise with bfloat16 all-gather",
        "FSDP + torch.compile + Float8",
    ):
        assert "fsdp_float8_all_gather" not in _titan_row(silent).options, silent
    doubt = _titan_row("Float8", "whether FSDP float8 all-gather was on is not stated")
    assert "fsdp_float8_all_gather" not in doubt.options


def test_the_hand_written_torchtitan_setups_follow_their_commands() -> None:
    options = {case.id: dict(case.framework_options) for case in package_cases()}
    trainy = [k for k in options if k.startswith("TRAINY-H200-")]
    assert trainy and all(options[k].get("fsdp_float8_all_gather") for k in trainy)
    others = [k for k in options if k.startswith(("TTITAN-", "TTASYNC-"))]
    assert others and not any(options[k].get("fsdp_float8_all_gather") for k in others)


def test_the_gathered_fp8_layers_hold_one_byte_per_element() -> None:
    # a small vocabulary so that two decoder layers, not the root unit (embedding and output),
    # are the largest gathered units: their FP8 linear weights held at 1 byte instead of 2
    model = LLAMA.with_overrides(layers=4, vocab=1024)
    system = load_system("h100-80gb")
    on = AnalyticalBackend(framework="torchtitan", overrides={"fsdp_float8_all_gather": True})
    off = AnalyticalBackend(framework="torchtitan")
    programs = lower(model, FSDP_FP8)
    kind = next(k for k in programs.blocks if fp8_block(k) and linear_weights(programs.blocks[k]))
    _, whole = fp8_shard_elements(programs.workload, programs.blocks[kind])
    saved = (
        off.evaluate(model, FSDP_FP8, system).peak_memory_bytes
        - on.evaluate(model, FSDP_FP8, system).peak_memory_bytes
    )
    assert abs(saved - 2 * whole * (1 + TITAN.allocator_overhead)) < 2
