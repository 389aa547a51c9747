"""Mamba-2 layers in a hybrid stack (blocks._mamba_mixer, ops_ssm, the ``mamba`` layer kind).

Closed forms checked, per rank: the parameters (the checkpoints' tensor shapes: ``in_proj``,
``conv1d``, ``A_log``, ``D``, ``dt_bias``, the gated norm, ``out_proj``), the forward FLOPs of
every op of the layer, the backward's (matmuls twice the forward), the activation bytes saved
for the backward (exactly Megatron's memory-efficient path), and the collectives the layouts
derive under tensor and sequence parallelism (Megatron-Core's ``MambaMixer``: the same as an
attention block's); a hybrid's traces pass ``stage check`` and run in the real ASTRA-sim.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_core.chakra.check import check_trace_set
from stage_core.chakra.reader import read_trace_set
from stage_core.errors import ConfigError
from stage_core.lower.bind import BoundBlock
from stage_core.lower.emit import write_chakra
from stage_core.lower.program import lower
from stage_core.models import ModelSpec
from stage_core.ops_ssm import SILU_OPS, ssd_flops, ssd_intermediate_bytes
from stage_core.parallel import ParallelConfig
from tests.fixtures import real_astra_sim

MAMBA = "layer_mamba_none"


def hybrid(**changes: object) -> ModelSpec:
    """A small Nemotron-H-like stack: Mamba-2, MLP-only and attention-only layers."""
    fields: dict[str, object] = dict(
        name="hybrid-small", family="nemotron", layers=4, hidden=64, ffn=128, heads=4,
        kv_heads=2, vocab=256, seq_len=32, norm="rmsnorm", activation="squared-relu",
        position="rotary", layer_pattern="mamba, mlp, attn, mlp", ssm_heads=8,
        ssm_head_dim=16, ssm_state=8, ssm_groups=4, ssm_chunk=8,
    )  # fmt: skip
    fields.update(changes)
    return ModelSpec(**fields)  # type: ignore[arg-type]


def mamba_block(tp: int = 1, sp: bool = False, **parallel: int) -> BoundBlock:
    config = ParallelConfig(tp=tp, sp=sp, micro_batch=2, global_batch=4, **parallel)  # type: ignore[arg-type]
    return lower(hybrid(), config).blocks[MAMBA]


def test_parameters_are_the_checkpoint_shapes() -> None:
    m = hybrid()
    h, heads, p, g, n, w = 64, 8, 16, 4, 8, 4
    inner, conv_dim = heads * p, heads * p + 2 * g * n
    mixer = h * (2 * inner + 2 * g * n + heads)  # in_proj.weight
    mixer += conv_dim * w + conv_dim  # conv1d.weight [conv_dim, 1, W], conv1d.bias
    mixer += 3 * heads + inner + inner * h  # A_log, D, dt_bias, norm.weight, out_proj.weight
    assert m.mamba_params() == mixer
    assert m.layer_params(0) == mixer + h  # with the layer's pre-norm
    assert mamba_block().weight_elements == mixer + h
    assert mamba_block(tp=2).weight_elements == mixer // 2 + h  # every mixer tensor split


def forward_flops(b: int, s: int, tp: int, sp: bool) -> dict[str, int]:
    h, heads, p, g, n, w, q = 64, 8 // tp, 16, 4 // tp, 8, 4, 8
    inner, conv_dim = heads * p, heads * p + 2 * g * n
    tokens = b * s
    seq_shard = tokens // tp if sp else tokens
    return {
        "ln1": 3 * seq_shard * h,
        "in_proj": 2 * tokens * h * (2 * inner + 2 * g * n + heads),
        "conv": tokens * conv_dim * (2 * w + SILU_OPS),
        "scan": sum(ssd_flops(b, s, heads, g, p, n, q).values()),
        "gate": 5 * tokens * inner,
        "norm": 3 * tokens * inner,
        "out_proj": 2 * tokens * inner * h,
        "residual": seq_shard * h,
    }


@pytest.mark.parametrize(("tp", "sp"), [(1, False), (2, False), (2, True), (4, True)])
def test_forward_and_backward_flops(tp: int, sp: bool) -> None:
    block = mamba_block(tp, sp)
    expected = forward_flops(2, 32, tp, sp)
    fwd = [i for i in block.fwd if not i.is_comm]
    by_kind: dict[str, int] = {}
    for instr in fwd:
        by_kind[instr.kind] = by_kind.get(instr.kind, 0) + instr.flops
    assert by_kind["einsum"] == expected["in_proj"] + expected["out_proj"]
    assert by_kind["ssdscan"] == expected["scan"]
    assert by_kind["causalconv1d"] == expected["conv"]
    assert sum(by_kind.values()) == sum(expected.values())
    assert block.fwd_model_flops == expected["in_proj"] + expected["out_proj"] + expected["scan"]
    bwd: dict[str, int] = {}
    for instr in block.bwd:
        bwd[instr.kind] = bwd.get(instr.kind, 0) + instr.flops
    assert bwd["einsum"] == 2 * by_kind["einsum"]
    assert bwd["ssdscan"] == 2 * by_kind["ssdscan"]
    (scan,) = [i for i in block.bwd if i.kind == "ssdscan"]
    extra = ssd_intermediate_bytes(2, 32, 8 // tp, 4 // tp, 16, 8, 8)
    operands = sum(size for _, size in (*scan.inputs, *scan.outputs))
    assert scan.bytes_read + scan.bytes_written == operands + 4 * extra


def test_saved_activations_are_megatrons() -> None:
    """Megatron's memory-efficient path keeps the layer input and its norm, the in-projection
    output (z, x, B, C, dt), the ungated scan output, the norm input and the out-projection
    input: ``2·b·s·(2·h + 5·d_in + 2·G·N + M)`` bytes at tp 1, all of it ``/tp`` with
    sequence parallelism."""
    b, s, h, heads, p, g, n = 2, 32, 64, 8, 16, 4, 8
    whole = 2 * b * s * (2 * h + 5 * heads * p + 2 * g * n + heads)
    assert mamba_block().saved_bytes == whole
    assert mamba_block(tp=2, sp=True).saved_bytes == whole // 2
    no_sp = 2 * b * s * (2 * h + (5 * heads * p + 2 * g * n + heads) // 2)
    assert mamba_block(tp=2).saved_bytes == no_sp


def collectives(block: BoundBlock) -> list[tuple[str, str, int]]:
    return [
        (i.phase, str(i.collective), i.comm_bytes) for i in (*block.fwd, *block.bwd) if i.is_comm
    ]


def test_tensor_parallel_collectives_are_an_attention_blocks() -> None:
    bsh = 2 * 32 * 64 * 2  # bytes of the micro-batch's hidden states
    assert collectives(mamba_block(tp=2)) == [
        ("fwd", "all_reduce", bsh),  # out_proj's partial sums (Megatron's g)
        ("bwd", "all_reduce", bsh),  # d.ln1 from the column-parallel in_proj (Megatron's f)
    ]
    assert collectives(mamba_block(tp=2, sp=True)) == [
        ("fwd", "all_gather", bsh // 2),  # ln1 gathered for in_proj
        ("fwd", "reduce_scatter", bsh),  # out_proj back to sequence shards
        ("bwd", "all_gather", bsh // 2),  # d.ssm.out
        ("bwd", "all_gather", bsh // 2),  # ln1 re-gathered for the weight gradients
        ("bwd", "reduce_scatter", bsh),  # d.ln1
    ]
    assert collectives(mamba_block(dp=2)) == []  # weight gradients reduce once per step


@pytest.mark.parametrize(("tp", "sp"), [(1, False), (2, True)])
def test_context_parallelism_is_megatrons_all_to_all(tp: int, sp: bool) -> None:
    """Megatron-Core's MambaContextParallel: z, x, B, C, dt go from sequence to head shards
    over cp (one all-to-all each), the gated output comes back; the backward has the
    conjugates; every rank does half the work and keeps half the activations at cp 2; the
    weights (each cp rank uses a slice) reduce their gradients over dp and cp."""
    one = mamba_block(tp, sp)
    two = mamba_block(tp, sp, cp=2)
    b, s, heads, p, g, n = 2, 32, 8 // tp, 16, 4 // tp, 8
    shard = b * (s // 2) * 2  # bytes per channel of a cp rank's sequence shard
    pre = [shard * c for c in (heads * p, heads * p, g * n, g * n, heads)]  # z, x, B, C, dt
    cp_steps = [
        (i.phase, str(i.collective), i.comm_bytes)
        for i in (*two.fwd, *two.bwd)
        if i.is_comm and i.axes == ("cp",)
    ]
    forward = [("fwd", "all_to_all", size) for size in (*pre, shard * heads * p)]
    backward = [("bwd", "all_to_all", size) for size in (shard * heads * p, *pre[::-1])]
    assert cp_steps == forward + backward
    compute = [sum(i.flops for i in phase if not i.is_comm) for phase in (one.fwd, one.bwd)]
    assert [sum(i.flops for i in phase if not i.is_comm) for phase in (two.fwd, two.bwd)] == [
        c // 2 for c in compute
    ]
    assert two.saved_bytes * 2 == one.saved_bytes
    mixer = [w for w in mamba_block(tp, sp, cp=2, dp=2).weights if w.name.startswith("ssm.")]
    assert len(mixer) == 16
    assert all(set(w.grad_axes) == {"dp", "cp"} for w in mixer)


def test_weight_gradients_reduce_over_the_data_axes_once_per_step() -> None:
    block = mamba_block(tp=2, dp=2)
    for weight in block.weights:
        assert weight.grad_axes == ("dp",), weight


def test_full_recompute_reruns_the_mixer() -> None:
    config = ParallelConfig(micro_batch=2, global_batch=2, recompute="full")  # type: ignore[arg-type]
    block = lower(hybrid(), config).blocks[MAMBA]
    recomputed = [i for i in block.bwd if i.phase == "recompute" and not i.is_comm]
    assert sum(i.flops for i in recomputed) == sum(i.flops for i in block.fwd if not i.is_comm)
    assert block.saved_bytes == 2 * 2 * 32 * 64  # the layer input only


def test_selective_recompute_leaves_the_mixer_alone() -> None:
    """Selective recompute re-runs the attention core only (Korthikanti et al. 2022); a Mamba
    layer has none, so it saves what it saves without recompute."""
    config = ParallelConfig(micro_batch=2, global_batch=2, recompute="selective")  # type: ignore[arg-type]
    block = lower(hybrid(), config).blocks[MAMBA]
    assert block.saved_bytes == mamba_block().saved_bytes
    assert not [i for i in block.bwd if i.phase == "recompute"]


@pytest.mark.parametrize(
    ("changes", "parallel", "message"),
    [
        ({}, {"tp": 8}, "`tp`·`cp` must divide `ssm_heads` and `ssm_groups`"),
        ({"ssm_groups": 1}, {"tp": 2}, "`tp`·`cp` must divide `ssm_heads` and `ssm_groups`"),
        ({}, {"tp": 2, "cp": 4}, "`tp`·`cp` must divide `ssm_heads` and `ssm_groups`"),
    ],
)
def test_layouts_megatron_refuses_are_config_errors(
    changes: dict[str, int], parallel: dict[str, int], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        lower(hybrid(**changes), ParallelConfig(global_batch=4, **parallel))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"ssm_heads": 0}, "Mamba layers and the `ssm_\\*` fields go together"),
        ({"layer_pattern": "attn+mlp*"}, "needs mamba layers"),
        ({"ssm_groups": 3}, "`ssm_groups` must divide `ssm_heads`"),
        ({"ssm_state": 0}, "`ssm_head_dim` and `ssm_state` > 0"),
        ({"ssm_chunk": -1}, "`ssm_chunk` must be a non-negative int"),
    ],
)
def test_bad_ssm_fields_are_one_line_errors(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        hybrid(**changes)
    assert "\n" not in str(error.value)


def test_defaults_are_the_reference_implementations() -> None:
    m = hybrid(ssm_groups=0, ssm_conv=0, ssm_chunk=0)
    assert (m.ssm_groups, m.ssm_conv, m.ssm_chunk) == (1, 4, 128)


PARALLEL = ParallelConfig(dp=2, tp=2, pp=2, sp=True, micro_batch=1, global_batch=4)


@pytest.mark.parametrize("parallel", [PARALLEL, ParallelConfig(cp=2, tp=2, pp=2, global_batch=2)])
def test_hybrid_traces_pass_the_checker(parallel: ParallelConfig, tmp_path: Path) -> None:
    written = write_chakra(lower(hybrid(), parallel), tmp_path)
    assert written.world_size == 8
    report = check_trace_set(read_trace_set(tmp_path), for_astra_sim=True)
    assert report.sound, report.violations


BINARY, WHY = real_astra_sim()


@pytest.mark.skipif(BINARY is None, reason=WHY)
@pytest.mark.parametrize("cp", [1, 2])
def test_hybrid_runs_in_the_real_astra_sim(cp: int, tmp_path: Path) -> None:
    from stage_explore.analytical.trace_models import AstraTimingModel
    from stage_explore.analytical.tracesim import simulate
    from stage_explore.astrasim import AstraSimBackend
    from stage_explore.system import astra_config_from_files, load_system

    backend = AstraSimBackend(binary=str(BINARY), keep_dir=str(tmp_path), timeout_s=600)
    parallel = PARALLEL if cp == 1 else ParallelConfig(cp=2, tp=2, pp=2, global_batch=2)
    evaluation = backend.evaluate(hybrid(), parallel, load_system("h100-80gb"))
    kept = Path(str(evaluation.extra["astra_sim_dir"]))
    config = astra_config_from_files(kept / "system.json", kept / "network.yml")
    expected = simulate(read_trace_set(kept).ranks, AstraTimingModel(config)).makespan
    assert evaluation.step_time_s == expected * 1e-9, f"inputs and output kept in {kept}"
    assert evaluation.step_time_s > 0
