"""Multi-token prediction (DeepSeek-V3, arXiv 2412.19437, Section 2.2): parameter counts against
the closed form and DeepSeek's published totals, lowered weights and FLOPs against the closed
form, the shared embedding and output layer (one copy per pipeline end, synchronised like a tied
embedding), placement on the last stage, the analytical backend, the CLI and the real ASTRA-sim
(skipped without the binary)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stage_core.blocks import MTP_HEAD, mtp_block_name
from stage_core.lower.flops import block_flops, step_flops
from stage_core.lower.fp8 import fp8_block
from stage_core.lower.memory import fp8_weights
from stage_core.lower.program import PIPELINE_ENDS, lower, mtp_blocks
from stage_core.models import ModelSpec, get_flavor, load_hf_config, load_model
from stage_core.parallel import Fp8Recipe, ParallelConfig, Precision, Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.astrasim import AstraSimBackend
from stage_explore.cli import main
from stage_explore.system import load_system
from tests.fixtures import real_astra_sim

BINARY, WHY = real_astra_sim()
H100 = load_system("h100-80gb")


def small(mtp_layers: int = 1, **changes: int) -> ModelSpec:
    """DeepSeek-V3's structure (latent attention, MoE, one shared expert) at a small size."""
    dims = dict(
        layers=4, hidden=256, ffn=512, heads=4, head_dim=32, vocab=1024, seq_len=128,
        num_experts=8, top_k=2, expert_ffn=128, first_k_dense=1, q_lora_rank=64,
        kv_lora_rank=32, qk_rope_head_dim=16, v_head_dim=32, mtp_layers=mtp_layers,
    )  # fmt: skip
    return get_flavor("deepseek-v3").with_overrides(**{**dims, **changes})


def weights_per_stage(model: ModelSpec, parallel: ParallelConfig) -> list[dict[str, int]]:
    """Per pipeline stage, the elements of every weight its rank holds, by (block, weight)."""
    result = []
    for stage in lower(model, parallel).stages:
        held: dict[str, int] = {}
        for chunk in stage.chunks:
            for index, block in enumerate(chunk.blocks):
                for weight in block.weights:
                    held[f"{index}:{block.kind}:{weight.name}"] = weight.elements
        result.append(held)
    return result


def test_deepseek_v3_has_one_mtp_module_and_the_published_parameter_totals() -> None:
    # config.json of deepseek-ai/DeepSeek-V3: num_nextn_predict_layers = 1; report Section 4.2:
    # "we set the MTP depth D to 1". README: 685B on Hugging Face = 671B main + 14B MTP, the
    # MTP figure holding the module's own copies of the shared embedding and output head.
    model = get_flavor("deepseek-v3")
    assert model.mtp_layers == 1
    h, v = model.hidden, model.vocab
    module = 2 * h + 2 * h * h + model.layer_params(model.layers - 1) + h
    assert model.mtp_params() == module
    copies = 2 * v * h
    assert abs((model.mtp_params() + copies) / 1e9 - 14) < 1  # published to the billion
    assert abs((model.params() + model.mtp_params() + copies) / 1e9 - 685) < 1
    assert model.params() / 1e9 == pytest.approx(671, rel=0.005)  # MTP is not in params()
    assert model.with_overrides(mtp_layers=0).mtp_params() == 0
    assert model.with_overrides(mtp_layers=2).mtp_params() == 2 * module


def test_the_hf_key_maps_and_a_bad_value_is_one_line(tmp_path: Path) -> None:
    from tests.core.test_models_deepseek import DEEPSEEK_V3

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**DEEPSEEK_V3, "num_nextn_predict_layers": 2}))
    assert load_hf_config(path).mtp_layers == 2
    with pytest.raises(ValueError, match="mtp_layers"):
        small(mtp_layers=-1)


@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize(
    "parallel",
    [
        ParallelConfig(global_batch=4),
        ParallelConfig(tp=2, sp=True, global_batch=4),
        ParallelConfig(tp=2, pp=2, dp=2, ep=2, etp=1, sp=True, global_batch=8),
    ],
    ids=["single", "tp2-sp", "tp2-pp2-dp2-ep2"],
)
def test_lowered_weights_equal_the_parameter_count(depth: int, parallel: ParallelConfig) -> None:
    """Summed over the tp shards, the weights equal params() + mtp_params(); with pipeline
    stages the last stage holds one more copy of the embedding table (not one per module)."""
    model = small(depth)
    stages = weights_per_stage(model, parallel)
    tp = parallel.tp
    total = 0
    for held in stages:
        for key, elements in held.items():
            name = key.split(":")[2]
            replicated = name.endswith((".scale", "wq_a", "wkv_a", "wk_rope", "router"))
            total += elements * (1 if replicated or "experts." in name else tp)
    vocab = parallel.padded_vocab(model)
    padding = (vocab - model.vocab) * model.hidden * (2 + (parallel.pp > 1))
    copy = vocab * model.hidden if parallel.pp > 1 else 0
    experts = model.num_moe_layers + depth  # expert weights are split over ep·etp
    expert_elements = 3 * model.hidden * model.expert_ffn * model.num_experts * experts
    ep_tp = parallel.ep * parallel.expert_tp
    expected = model.params() + model.mtp_params() + padding + copy
    assert total == expected - expert_elements + expert_elements // ep_tp
    embeds = [k for held in stages for k in held if k.endswith(":embed")]
    assert len(embeds) == (2 if parallel.pp > 1 else 1)  # never one per module


def test_modules_sit_on_the_last_stage_after_the_layers_and_losses_after_the_head() -> None:
    model = small(2)
    programs = lower(model, ParallelConfig(pp=2, dp=2, ep=2, global_batch=4))
    first, last = (tuple(b.kind for b in s.chunks[0].blocks) for s in programs.stages)
    mtp = mtp_block_name("moe_layer")
    assert mtp_blocks(model) == (mtp, mtp)
    assert first == ("embedding", "layer", "moe_layer")
    assert last == ("moe_layer", "moe_layer", mtp, mtp, "head", MTP_HEAD, MTP_HEAD)


@pytest.mark.parametrize("depth", [1, 2])
def test_flops_equal_the_closed_form(depth: int) -> None:
    """Each module adds, per token and forward+backward (3×), its projection 2·(2h)·h, its
    transformer layer (the main model's last layer's FLOPs) and the shared output layer 2·h·V."""
    parallel = ParallelConfig(tp=2, sp=True, global_batch=4, micro_batch=2)
    model = small(depth)
    with_mtp = lower(model, parallel)
    without = lower(model.with_overrides(mtp_layers=0), parallel)
    layer = block_flops(with_mtp.blocks["moe_layer"])[0]  # per micro-batch, per rank
    ranks, micro_batches = with_mtp.workload.world_size, with_mtp.workload.micro_batches
    tokens = parallel.global_batch * model.seq_len
    h, v = model.hidden, parallel.padded_vocab(model)
    per_module = layer * ranks * micro_batches + 3 * 2 * tokens * (2 * h * h + h * v)
    assert step_flops(with_mtp)[0] - step_flops(without)[0] == depth * per_module


@pytest.mark.parametrize("tied", [False, True])
def test_the_shared_embedding_is_all_reduced_between_the_pipeline_ends(tied: bool) -> None:
    model = small(1, tied_embeddings=tied)
    parallel = ParallelConfig(tp=2, pp=2, global_batch=4)
    programs = lower(model, parallel)
    shard = parallel.padded_vocab(model) // 2 * model.hidden
    for stage in programs.stages:
        syncs = [op for op in stage.sync if op.axes == (PIPELINE_ENDS,)]
        assert [op.comm_bytes for op in syncs] == [shard * programs.workload.grad_bytes]
    single = lower(model, ParallelConfig(tp=2, global_batch=4))
    assert not [op for op in single.stages[0].sync if op.axes == (PIPELINE_ENDS,)]


def test_the_mtp_layer_recomputes_and_its_loss_stays_out_of_fp8() -> None:
    """Full recompute re-runs the module's layer, not its loss (Megatron-Core checkpoints the
    MTP layer; the output layer and loss are the model's postprocess); under FP8 the module's
    linear layers hold FP8 copies, its shared output layer does not (not a TE module)."""
    parallel = ParallelConfig(
        global_batch=4,
        recompute=Recompute.FULL,
        precision=Precision.FP8,
        fp8_recipe=Fp8Recipe.BLOCKWISE,
    )
    programs = lower(small(1), parallel)
    module, loss = programs.blocks[mtp_block_name("moe_layer")], programs.blocks[MTP_HEAD]
    assert any(i.phase == "recompute" for i in module.bwd)
    assert not any(i.phase == "recompute" for i in loss.bwd)
    assert fp8_weights(programs.workload, module) > 0
    assert fp8_block(module.kind) and not fp8_block(loss.kind)  # how the timing picks GEMMs


def test_the_analytical_backend_times_and_holds_the_modules() -> None:
    parallel = ParallelConfig(tp=2, pp=2, dp=2, ep=2, etp=1, sp=True, global_batch=16)
    backend = AnalyticalBackend()
    base = backend.evaluate(small(0), parallel, H100)
    with_mtp = backend.evaluate(small(1), parallel, H100)
    assert base.feasible and with_mtp.feasible
    assert with_mtp.step_time_s > base.step_time_s
    assert with_mtp.peak_memory_bytes > base.peak_memory_bytes
    # MFU counts the modules' FLOPs: the same step's model FLOPs as the lowering's.
    flops = step_flops(lower(small(1), parallel))[0]
    peak = H100.accelerator.peak("bf16")
    expected = flops / (with_mtp.step_time_s * parallel.world_size * peak)
    assert with_mtp.mfu == pytest.approx(expected, rel=1e-9)


MODEL_TOML = """\
base = "deepseek-v3"
name = "tiny-deepseek-mtp"
layers = 4
hidden = 256
ffn = 512
heads = 4
head_dim = 32
vocab = 1024
seq_len = 128
num_experts = 8
top_k = 2
expert_ffn = 128
first_k_dense = 1
q_lora_rank = 64
kv_lora_rank = 32
qk_rope_head_dim = 16
v_head_dim = 32
mtp_layers = 1
"""
PARALLEL = ["--tp", "2", "--pp", "2", "--dp", "2", "--ep", "2", "--sp", "--global-batch", "8"]


@pytest.fixture()
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-deepseek-mtp.toml"
    path.write_text(MODEL_TOML)
    return path


def test_trace_check_eval_and_memory_run(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert load_model(model_file) == small(1).with_overrides(name="tiny-deepseek-mtp")
    out = tmp_path / "traces"
    assert main(["trace", "--model", str(model_file), *PARALLEL, "--out", str(out)]) == 0
    assert main(["check", str(out), "--for", "astra-sim", "--json"]) == 0
    capsys.readouterr()
    system = ["--system", "h100-80gb"]
    assert main(["eval", "--model", str(model_file), *PARALLEL, *system, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["feasible"] and result["step_time_s"] > 0
    assert main(["memory", "--model", str(model_file), *PARALLEL, "--json"]) == 0


def test_the_cli_overrides_the_depth(capsys: pytest.CaptureFixture[str]) -> None:
    """``--mtp-layers``: the module's weights sit on the last stage only; a bad depth is a
    one-line error (exit 2)."""
    base = ["memory", "--model", "deepseek-v3", "--layers", "4", "--seq-len", "256", "--json"]
    weights = []
    for depth in ("0", "1"):
        assert main([*base, *PARALLEL, "--etp", "1", "--mtp-layers", depth]) == 0
        stages = json.loads(capsys.readouterr().out)["ranks"]
        weights.append([stage["weights_bytes"] for stage in stages])
    assert weights[1][0] == weights[0][0] and weights[1][1] > weights[0][1]
    assert main([*base, "--mtp-layers", "-1"]) == 2
    assert "mtp_layers=-1" in capsys.readouterr().err


@pytest.mark.skipif(BINARY is None, reason=WHY)
def test_the_real_astra_sim_runs_it(tmp_path: Path) -> None:
    parallel = ParallelConfig(tp=2, pp=2, dp=2, ep=2, sp=True, global_batch=8, micro_batch=1)
    backend = AstraSimBackend(binary=str(BINARY), keep_dir=tmp_path, timeout_s=300)
    evaluation = backend.evaluate(small(1), parallel, H100)
    assert evaluation.feasible and evaluation.step_time_s > 0
    assert evaluation.num_gpus == 8


@pytest.mark.skipif(BINARY is None, reason=WHY)
def test_astra_sim_and_tracesim_agree_on_every_rank(tmp_path: Path) -> None:
    """As the conformance matrix checks its cases: the pp_ends all-reduce of the shared
    embedding and the last stage's modules, every rank's finish and exposed communication."""
    from stage_core.chakra.check import check_trace_set
    from stage_core.chakra.reader import read_trace_set
    from stage_explore.analytical.trace_models import AstraTimingModel
    from stage_explore.analytical.tracesim import simulate
    from stage_explore.astrasim import run_astra_sim
    from stage_explore.system import astra_config_from_files
    from tests.explore.astrasim_matrix import Case, write_case
    from tests.explore.test_astrasim_conformance import _compare

    assert BINARY is not None
    dims = {k: v for k, v in small(1).to_dict().items() if k not in ("name", "family")}
    parallel = {"tp": 2, "pp": 2, "dp": 2, "ep": 2, "sp": True, "global_batch": 8}
    case = Case("deepseek-v3", dims, parallel, preset="h100-80gb", what="MTP on pp 2")
    inputs = write_case(case, tmp_path)
    traces = read_trace_set(tmp_path)
    assert check_trace_set(traces, for_astra_sim=True).violations == ()
    run = run_astra_sim(BINARY, inputs, timeout_s=300)
    config = astra_config_from_files(inputs.system_json, inputs.network_yml)
    sim = simulate(traces.ranks, AstraTimingModel(config), record_nodes=True)
    assert not _compare(run.report, sim)
