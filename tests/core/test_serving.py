"""Serving workloads: KV-cache bytes and step FLOPs against their closed forms, memory, errors.

Closed forms: the KV cache holds ``2·layers·kv_heads·head_dim·bytes`` per token (keys and values
of every layer); a decode step does ``2·(matmul weights)`` FLOPs per token and layer plus
``4·T·N·D`` for attention over ``T`` cached tokens; a causal prefill of ``P`` tokens attends to
``P(P+1)/2`` keys per head, however the prompt is chunked.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.blocks import Structure
from stage_core.errors import ConfigError
from stage_core.lower.bind import symbolic_block
from stage_core.models import ModelSpec, get_flavor
from stage_core.serving import (
    ServingConfig,
    kv_cache_bytes_per_token,
    lower_step,
    max_batch,
    serving_memory,
)
from stage_core.serving.program import ServingProgram
from stage_core.sharding import dump_steps
from stage_core.trace import CollectiveKind


def small(name: str, layers: int = 4) -> ModelSpec:
    return get_flavor(name).with_overrides(layers=layers)


def decode(**fields: object) -> ServingConfig:
    return ServingConfig(phase="decode", **fields)  # type: ignore[arg-type]


def total_kv(program: ServingProgram) -> int:
    """KV bytes over every GPU of the instance (each stage's ranks hold their share)."""
    per_stage = [m.kv_cache_bytes for m in serving_memory(program)]
    config = program.config
    return sum(per_stage) * config.tp * config.dp


@pytest.mark.parametrize("name", ["llama3-8b", "gpt3-1.3b", "mixtral-8x7b"])
@pytest.mark.parametrize(("tp", "pp", "dp"), [(1, 1, 1), (2, 2, 1), (4, 1, 2)])
@pytest.mark.parametrize("kv_precision", ["bf16", "fp8"])
def test_kv_cache_equals_the_closed_form(
    name: str, tp: int, pp: int, dp: int, kv_precision: str
) -> None:
    model = small(name)
    config = decode(batch=4, context_len=1000, tp=tp, pp=pp, dp=dp, kv_precision=kv_precision)
    program = lower_step(model, config, config.steps()[0])
    tokens = config.batch * (config.context_len + 1)
    per_token = kv_cache_bytes_per_token(model, config.kv_bytes)
    assert per_token == 2 * model.layers * model.kv_heads * model.head_dim * config.kv_bytes
    assert total_kv(program) == tokens * per_token


def test_kv_heads_are_replicated_when_tp_exceeds_them() -> None:
    model = small("llama3-8b")  # 8 kv heads
    config = decode(batch=2, context_len=99, tp=16)
    program = lower_step(model, config, config.steps()[0])
    per_gpu = serving_memory(program)[0].kv_cache_bytes
    one_head = 2 * model.layers * model.head_dim * 2 * config.batch * 100
    assert per_gpu == one_head  # every rank holds one kv head: twice the model's cache in all


def layer_flops(program: ServingProgram) -> int:
    layer = next(b for b in program.stages[0].blocks if b.kind in ("layer", "moe_layer"))
    return sum(i.flops for i in layer.fwd if i.kind in ("einsum", "attention"))


@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("context", [0, 511, 4095])
def test_decode_flops_equal_the_closed_form(tp: int, context: int) -> None:
    model = small("llama3-8b")
    config = decode(batch=8, context_len=context, tp=tp)
    program = lower_step(model, config, config.steps()[0])
    h, n, k, d, f = model.hidden, model.heads, model.kv_heads, model.head_dim, model.ffn
    matmul_weights = h * n * d + 2 * h * k * d + n * d * h + 3 * h * f
    per_sequence = 2 * matmul_weights + 4 * (context + 1) * n * d
    assert layer_flops(program) * tp == config.batch * per_sequence


@pytest.mark.parametrize("chunk", [0, 1, 100, 333, 1000])
def test_chunked_prefill_attends_to_the_same_keys(chunk: int) -> None:
    model = small("llama3-8b", layers=1)
    config = ServingConfig(phase="prefill", batch=2, prompt_len=1000, chunk=chunk)
    attention = 0
    for step in config.steps():
        layer = lower_step(model, config, step).stages[0].blocks[1]
        attention += sum(i.flops for i in layer.fwd if i.kind == "attention")
    prompt = config.prompt_len
    assert attention == 4 * config.batch * model.heads * model.head_dim * prompt * (prompt + 1) // 2
    assert sum(s.new_tokens for s in config.steps()) == prompt


def test_decode_collectives_are_derived_from_layouts() -> None:
    model = small("llama3-8b", layers=2)
    config = decode(batch=4, context_len=10, tp=4)
    program = lower_step(model, config, config.steps()[0])
    layer = program.stages[0].blocks[1]
    kinds = [i.collective for i in layer.fwd if i.is_comm]
    assert kinds == [CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_REDUCE]  # after wo and w2
    head = program.stages[-1].blocks[-1]
    assert [i.collective for i in head.fwd if i.is_comm] == [CollectiveKind.ALL_GATHER]  # logits
    workload = program.workload
    symbolic = symbolic_block(
        "layer", Structure.of(program.model), workload.options, workload.flags, "none"
    )
    text = dump_steps(symbolic.forward.steps)
    assert "kv.k[B/(dp*ep), T, K/tp, D]" in text


def test_fp8_weights_halve_the_layer_weights() -> None:
    model = small("llama3-8b")
    bf16 = decode(batch=1, context_len=10)
    fp8 = replace(bf16, precision="fp8")
    weights = [serving_memory(lower_step(model, c, c.steps()[0]))[0] for c in (bf16, fp8)]
    vocab = lower_step(model, bf16, bf16.steps()[0]).workload.sizes["V"]
    embedding_and_head = 2 * (2 * vocab * model.hidden) + 2 * model.hidden  # bf16, ln_f too
    assert weights[0].weight_bytes - embedding_and_head == 2 * (
        weights[1].weight_bytes - embedding_and_head
    )


def test_max_batch_is_the_largest_that_fits() -> None:
    model = small("llama3-8b")
    config = decode(batch=2, context_len=8191, dp=2)
    capacity = 6 * 2**30
    largest = max_batch(model, config, capacity)
    assert largest > 0 and largest % config.dp == 0

    def peak(batch: int) -> int:
        sized = replace(config, batch=batch)
        program = lower_step(model, sized, sized.steps()[0])
        return max(m.total_bytes for m in serving_memory(program))

    assert peak(largest) <= capacity < peak(largest + config.dp)
    assert max_batch(model, config, 2**20) == 0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"phase": "train"}, "`phase` must be 'prefill' or 'decode'"),
        ({"phase": "decode", "batch": 3, "dp": 2}, "`dp` must divide `batch`"),
        ({"phase": "decode", "batch": 4, "dp": 4, "ep": 3}, "`ep` must divide `dp`"),
        ({"phase": "prefill"}, "prefill needs `prompt_len`"),
        ({"phase": "decode", "context_len": 10**11}, "`context_len` must be an int from 0"),
        ({"phase": "decode", "kv_precision": "int3"}, "`kv_precision` must be one of"),
        ({"phase": "decode", "batch": 0}, "`batch` must be a positive int"),
    ],
)
def test_bad_serving_configs_are_one_line_errors(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        ServingConfig(**fields)  # type: ignore[arg-type]
    assert "\n" not in str(error.value)
