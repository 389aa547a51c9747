"""torchtitan's op-level selective activation checkpointing (recompute module ``op``): a Llama
layer keeps its input and the outputs of the attention kernel and of every other matmul (q, v,
gate, down projections), and re-runs the rest — against closed forms computed here."""

from __future__ import annotations

import pytest

from stage_core.blocks import Structure
from stage_core.errors import ConfigError
from stage_core.lower.bind import symbolic_block
from stage_core.lower.program import lower, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_core.recompute import op_sac_saved

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=2048)
H, KV, FFN = 4096, 8 * 128, 14336  # hidden, kv heads x head dim, MLP width


def _op_sac(tp: int, micro_batch: int) -> ParallelConfig:
    return ParallelConfig(
        tp=tp, dp=2, sp=tp > 1, micro_batch=micro_batch, global_batch=4,
        recompute=Recompute.SELECTIVE, recompute_modules=("op",),
    )  # fmt: skip


def test_the_pinned_ops_are_the_attention_and_every_other_matmul() -> None:
    layer = lower(LLAMA, _op_sac(1, 1)).blocks["layer"]
    recomputed = {instr.name for instr in layer.bwd if instr.phase == "recompute"}
    pinned = {"q", "v", "attn.core", "mlp.gate", "mlp.fc2"}  # torchtitan's wq, wv, SDPA, w1, w2
    assert pinned.isdisjoint(recomputed)
    assert {"ln1", "k", "q.rope", "k.rope", "attn.proj", "ln2", "mlp.up", "mlp.act"} <= recomputed


def test_sp_reduce_scatters_are_saved_and_their_projections_not_rerun() -> None:
    """torchtitan's _save_list names reduce_scatter_tensor: under SP the output projection's
    scatter is saved, so neither it nor the projection (read only through it) re-runs."""
    recomputed = {}
    for tp in (1, 2):
        layer = lower(LLAMA, _op_sac(tp, 1)).blocks["layer"]
        recomputed[tp] = {i.name for i in layer.bwd if i.phase == "recompute"}
    assert "attn.proj" in recomputed[1] and "attn.proj" not in recomputed[2]
    assert not any(n.startswith("reduce_scatter:") for n in recomputed[2])
    assert recomputed[1] - recomputed[2] == {"attn.proj"}


@pytest.mark.parametrize(("tp", "micro_batch"), [(1, 1), (1, 2), (2, 1)])
def test_a_layer_saves_its_input_and_the_pinned_outputs(tp: int, micro_batch: int) -> None:
    layer = lower(LLAMA, _op_sac(tp, micro_batch)).blocks["layer"]
    tokens = micro_batch * 2048
    # x and the down projection's output: sequence-sharded under SP (the output as stored,
    # after its reduce-scatter, which torchtitan's policy saves too; it also keeps the GEMM's
    # partial output before it, which the generator, keeping one copy per tensor, does not);
    # under SP also the output projection's reduce-scattered output (saved by the policy, read
    # by the recomputed residual add); q, v, attention output, gate: head- or column-sharded
    scattered = H // tp if tp > 1 else 0
    expected = 2 * tokens * (H // tp + H // tp + scattered + (H + KV + H + FFN) // tp)
    assert layer.saved_bytes == expected


def test_op_sac_recomputes_more_and_keeps_less_than_the_attention_core() -> None:
    core = ParallelConfig(dp=2, global_batch=4, recompute=Recompute.SELECTIVE)
    default = lower(LLAMA, core).blocks["layer"]
    op = lower(LLAMA, _op_sac(1, 1)).blocks["layer"]
    flops = [sum(i.flops for i in b.bwd if i.phase == "recompute") for b in (default, op)]
    assert op.saved_bytes < default.saved_bytes and flops[1] > flops[0]


def test_the_pinned_set_of_a_layer_block() -> None:
    workload = make_workload(LLAMA, _op_sac(1, 1))
    forward = symbolic_block(
        "layer", Structure.of(workload.model), workload.options, workload.flags, "none"
    ).forward
    assert op_sac_saved(forward.block) == {"q", "v", "attn.core", "mlp.gate", "mlp.fc2"}


def test_op_needs_selective_recompute() -> None:
    with pytest.raises(ConfigError, match="recompute_modules"):
        ParallelConfig(dp=2, global_batch=4, recompute=Recompute.FULL, recompute_modules=("op",))


def test_op_takes_no_other_module() -> None:
    with pytest.raises(ConfigError, match="'op'"):
        ParallelConfig(
            dp=2, global_batch=4, recompute=Recompute.SELECTIVE, recompute_modules=("op", "mlp")
        )


def _sdpa_recomputed(tp: int, micro_batch: int) -> ParallelConfig:
    return ParallelConfig(
        tp=tp, dp=2, sp=tp > 1, micro_batch=micro_batch, global_batch=4,
        recompute=Recompute.SELECTIVE, recompute_modules=("op_recompute_sdpa",),
    )  # fmt: skip


def test_op_recompute_sdpa_pins_every_other_matmul_but_not_the_attention() -> None:
    """torchtitan's save list without the SDPA kernel that ran (cuDNN's, before
    pytorch/torchtitan#2095): the attention kernel re-runs in the backward too."""
    workload = make_workload(LLAMA, _sdpa_recomputed(1, 1))
    forward = symbolic_block(
        "layer", Structure.of(workload.model), workload.options, workload.flags, "none"
    ).forward
    assert op_sac_saved(forward.block, attention=False) == {"q", "v", "mlp.gate", "mlp.fc2"}
    layer = lower(LLAMA, _sdpa_recomputed(1, 1)).blocks["layer"]
    recomputed = {instr.name for instr in layer.bwd if instr.phase == "recompute"}
    assert "attn.core" in recomputed
    assert {"q", "v", "mlp.gate", "mlp.fc2"}.isdisjoint(recomputed)


@pytest.mark.parametrize(("tp", "micro_batch"), [(1, 1), (1, 2), (2, 1)])
def test_op_recompute_sdpa_keeps_the_attention_output_less(tp: int, micro_batch: int) -> None:
    """The block no longer keeps the attention output (heads sharded: tokens x H / tp bf16
    elements); the generator counts the kernel's log-sum-exp with it (fp32, one per query
    row and head: 32 heads / tp)."""
    op = lower(LLAMA, _op_sac(tp, micro_batch)).blocks["layer"]
    sdpa = lower(LLAMA, _sdpa_recomputed(tp, micro_batch)).blocks["layer"]
    tokens = micro_batch * 2048
    output = 2 * tokens * (H // tp)
    assert output <= op.saved_bytes - sdpa.saved_bytes <= output + 4 * tokens * (32 // tp)
    flops = [sum(i.flops for i in b.bwd if i.phase == "recompute") for b in (op, sdpa)]
    attention = next(i for i in op.fwd if i.name == "attn.core")
    assert flops[1] - flops[0] == attention.flops


def test_op_recompute_sdpa_takes_no_other_module() -> None:
    with pytest.raises(ConfigError, match="'op_recompute_sdpa'"):
        ParallelConfig(
            dp=2, global_batch=4, recompute=Recompute.SELECTIVE,
            recompute_modules=("op_recompute_sdpa", "mlp"),
        )  # fmt: skip
