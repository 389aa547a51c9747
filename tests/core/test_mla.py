"""Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, Section 2.1; DeepSeek-V3).

Closed forms checked: the parameter counts from the Hugging Face checkpoints' tensor shapes and
the papers' totals; the forward FLOPs of a layer (2 per multiply-accumulate of every projection,
plus attention over a query/key dim of ``D + R`` and a value dim of ``U``); the collectives the
layouts derive under tensor and sequence parallelism; traces that pass ``stage check``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_core.chakra.check import check_trace_set
from stage_core.chakra.reader import read_trace_set
from stage_core.errors import ConfigError
from stage_core.lower.emit import write_chakra
from stage_core.lower.program import lower
from stage_core.models import ModelSpec, get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.serving import (
    ServingConfig,
    kv_cache_bytes_per_token,
    lower_step,
    serving_memory,
)
from stage_core.serving.trace import serving_program_set
from stage_core.trace import CollectiveKind


def checkpoint_params(m: ModelSpec) -> int:
    """Parameters as the DeepSeek checkpoints' tensors list them (config.json names)."""
    h, a, d, r, u = m.hidden, m.heads, m.head_dim, m.qk_rope_head_dim, m.v_head_dim
    q_rank, kv_rank = m.q_lora_rank, m.kv_lora_rank
    if q_rank:  # q_a_proj, q_a_layernorm, q_b_proj
        attention = h * q_rank + q_rank + q_rank * a * (d + r)
    else:  # q_proj
        attention = h * a * (d + r)
    attention += h * (kv_rank + r) + kv_rank  # kv_a_proj_with_mqa, kv_a_layernorm
    attention += kv_rank * a * (d + u) + a * u * h  # kv_b_proj, o_proj
    dense = 3 * h * m.ffn
    moe = h * m.num_experts + (m.num_experts + m.num_shared_experts) * 3 * h * m.expert_ffn
    layers = m.layers * (attention + 2 * h) + m.first_k_dense * dense
    layers += (m.layers - m.first_k_dense) * moe
    return 2 * m.vocab * h + h + layers  # embed_tokens, lm_head, final norm


@pytest.mark.parametrize(
    ("name", "total_b", "active_b"), [("deepseek-v3", 671, 37), ("deepseek-v2-lite", 15.7, 2.4)]
)
def test_parameters_match_the_checkpoints_and_the_papers(
    name: str, total_b: float, active_b: float
) -> None:
    model = get_flavor(name)
    assert model.params() == checkpoint_params(model)
    assert model.params() / 1e9 == pytest.approx(total_b, rel=0.005)
    # DeepSeek counts activated parameters without the input embedding (a lookup).
    active = (model.active_params() - model.vocab * model.hidden) / 1e9
    assert active == pytest.approx(active_b, rel=0.025)


def small() -> ModelSpec:
    return get_flavor("deepseek-v2-lite").with_overrides(layers=3, seq_len=512)


def test_layer_weights_and_forward_flops_equal_the_closed_forms() -> None:
    model = get_flavor("deepseek-v3").with_overrides(layers=4, seq_len=256)
    programs = lower(model, ParallelConfig(micro_batch=2, global_batch=2))
    layer = programs.blocks["layer"]
    h, s, b = model.hidden, 256, 2
    assert layer.weight_elements == model.mla_params() + 2 * h + 3 * h * model.ffn
    projections = model.mla_params() - model.q_lora_rank - model.kv_lora_rank  # no norm scales
    attention = next(i for i in layer.fwd if i.kind == "attention")
    a, qk, v = model.heads, model.head_dim + model.qk_rope_head_dim, model.v_head_dim
    assert attention.flops == 2 * b * s * s * a * (qk + v) // 2  # causal: the unmasked half
    einsums = sum(i.flops for i in layer.fwd if i.kind == "einsum")
    assert einsums == 2 * b * s * (projections + 3 * h * model.ffn)


def test_tensor_parallel_collectives_are_derived() -> None:
    model = small()
    parallel = ParallelConfig(tp=2, sp=True, micro_batch=1, global_batch=1)
    layer = lower(model, parallel).blocks["layer"]
    s, h = 512, model.hidden
    forward = [(i.collective, i.comm_bytes) for i in layer.fwd if i.is_comm]
    # ln1 gathered once for every projection; the output projection reduce-scattered (SP).
    assert (CollectiveKind.ALL_GATHER, s * h * 2 // 2) in forward
    assert (CollectiveKind.REDUCE_SCATTER, s * h * 2) in forward
    reduced = {i.name: i.comm_bytes for i in layer.bwd if i.collective == CollectiveKind.ALL_REDUCE}
    # The latent's and the shared RoPE key's gradients are partial over tp: all-reduced.
    assert reduced["all_reduce:d.kv.latent.norm"] == s * model.kv_lora_rank * 2
    assert reduced["all_reduce:d.k.pe.rope"] == s * model.qk_rope_head_dim * 2


def test_traces_of_a_latent_attention_moe_pass_the_checker(tmp_path: Path) -> None:
    parallel = ParallelConfig(dp=2, tp=2, pp=2, ep=2, sp=True, micro_batch=1, global_batch=4)
    written = write_chakra(lower(small(), parallel), tmp_path)
    assert written.world_size == 8
    report = check_trace_set(read_trace_set(tmp_path), for_astra_sim=True)
    assert report.sound, report.violations


@pytest.mark.parametrize(("tp", "dp"), [(1, 1), (2, 1), (1, 2)])
def test_serving_caches_the_compressed_latent(tp: int, dp: int) -> None:
    model = small()
    config = ServingConfig(phase="decode", batch=2, context_len=99, tp=tp, dp=dp)  # type: ignore[arg-type]
    program = lower_step(model, config, config.steps()[0])
    per_token = kv_cache_bytes_per_token(model, 2)
    assert per_token == model.layers * (model.kv_lora_rank + model.qk_rope_head_dim) * 2
    per_gpu = sum(m.kv_cache_bytes for m in serving_memory(program))
    # Each dp rank holds its sequences; the latent is replicated over tp (shared by the heads).
    assert per_gpu * dp == config.batch * 100 * per_token


def test_decode_absorbs_and_prefill_up_projects() -> None:
    model = small()
    n, d, r = model.heads, model.head_dim, model.qk_rope_head_dim
    rank, u = model.kv_lora_rank, model.v_head_dim
    decode = ServingConfig(phase="decode", batch=2, context_len=99)  # type: ignore[arg-type]
    layer = lower_step(model, decode, decode.steps()[0]).blocks["layer"]
    latent = next(i for i in layer.fwd if i.kind == "latentattention")
    assert latent.flops == 2 * 2 * 100 * n * ((rank + r) + rank)
    assert {"q.absorbed", "attn.core"} <= {i.name for i in layer.fwd}  # absorbed W_uk, W_uv
    prefill = ServingConfig(phase="prefill", batch=2, prompt_len=64)  # type: ignore[arg-type]
    layer = lower_step(model, prefill, prefill.steps()[0]).blocks["layer"]
    attention = next(i for i in layer.fwd if i.kind == "attention")
    assert attention.flops == 2 * 2 * (64 * 65 // 2) * n * ((d + r) + u)


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_serving_traces_of_latent_attention_pass_the_checker(phase: str, tmp_path: Path) -> None:
    config = ServingConfig(  # type: ignore[arg-type]
        phase=phase, batch=4, context_len=32, prompt_len=64, tp=2, pp=1, dp=2, ep=2
    )
    write_chakra(serving_program_set(small(), config), tmp_path)
    report = check_trace_set(read_trace_set(tmp_path), for_astra_sim=True)
    assert report.sound, report.violations


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"qk_rope_head_dim": 64}, "latent-attention fields need `kv_lora_rank` > 0"),
        ({"kv_lora_rank": 512}, "needs `qk_rope_head_dim` > 0"),
        ({"kv_lora_rank": 512, "qk_rope_head_dim": 64, "kv_heads": 8}, "one key and value per"),
    ],
)
def test_bad_latent_attention_fields_are_one_line_errors(
    fields: dict[str, int], message: str
) -> None:
    base = get_flavor("llama3-8b").with_overrides(kv_heads=32)
    with pytest.raises(ConfigError, match=message):
        base.with_overrides(**fields)
