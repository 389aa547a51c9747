"""Framework and recipe defaults of inferred setups (:mod:`stage_explore.validation
.infer_defaults`): a row's text in, the setup field and its assumption out; and, on the
package rows, the defaults agree with what the hand-written setups.toml gives."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_defaults import recipe_defaults
from stage_explore.validation.infer_release import container, dated, torch_dated
from stage_explore.validation.setups import data_dir
from tests.explore.package_cases import package_cases
from tests.explore.published_rows import inferred_case as _case
from tests.explore.published_rows import minimal_row as _row

BRIDGE = "NVIDIA Megatron-Bridge performance summary (25.11 container)"


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("MLPerf Training v4.1 (eos_n32_ngc24.09_nemo, NeMo 24.09)", (24, 9)),
        ("MLPerf Training v5.0, NVIDIA (tyche_ngpu256_ngc25.04_nemo)", (25, 4)),
        (BRIDGE, (25, 11)),
        ("26.02 NeMo Container, Pre-Training Performance", (26, 2)),
        ("Container NeMo24.03.01.framework", (24, 3)),
        ("whose container is nvcr.io/nvidia/nemo:24.05 (launch.sh FW_VERSION)", (24, 5)),
        ("the nvcr.io/nvidia/nemo:dev container", None),
        ("NeMo Framework 24.12 user guide", None),
        ("DGX Cloud recipes (GSW 24.11)", None),
    ],
)
def test_the_container_a_text_names(text: str, release: tuple[int, int] | None) -> None:
    assert container({"source": text}) == release


@pytest.mark.parametrize(
    ("text", "when"),
    [("torchtitan 9dec370, 2024/12", (2024, 12)), ("Trainy team, June 2025", (2025, 6)),
     ("last updated 2025-10-02", (2025, 10)), ("no date", None)],
)  # fmt: skip
def test_the_date_a_text_states(text: str, when: tuple[int, int] | None) -> None:
    assert dated({"source": text}) == when


def test_a_bridge_fp8_row_reduces_in_bf16_and_gathers_fp8_parameters() -> None:
    case = _case(source=BRIDGE, precision="FP8-CS")
    assert case.parallel.grad_fp32 is False
    assert dict(case.framework_options) == {"fp8_param_gather": True, "te_cross_entropy": True}
    said = "\n".join(case.assumptions)
    assert "grad_reduce_in_fp32 = False" in said and "container 25.11" in said
    assert "fp8_param_gather" in said


def test_a_bridge_bf16_row_has_no_fp8_parameters() -> None:
    case = _case(source=BRIDGE, precision="BF16")
    assert case.parallel.grad_fp32 is False
    assert dict(case.framework_options) == {"te_cross_entropy": True}


def test_a_26_container_runs_cudnn_917_where_the_preset_measured_it() -> None:
    source = "NVIDIA Megatron-Bridge performance summary (26.02 container)"
    assert dict(_case(source=source, gpu="B200").framework_options) == {
        "attention_kernel": "cudnn-9.17", "te_cross_entropy": True,
    }  # fmt: skip
    hopper = _case(source=source)
    assert dict(hopper.framework_options) == {"te_cross_entropy": True}
    assert "h100-80gb has no cudnn-9.17 figure" in "\n".join(hopper.assumptions)


def test_the_container_an_uncertain_cell_names_when_the_text_columns_name_none() -> None:
    said = "the heading's '24.11' is the release, whose container is nvcr.io/nvidia/nemo:24.05"
    assert container({"source": "DGX Cloud recipes (GSW 24.11)", "uncertain": said}) == (24, 5)
    both = {"source": "GSW 25.02, NeMo 24.12", "uncertain": said}
    assert container(both) == (24, 12)  # the text columns first


def test_the_nemo_launcher_of_24_07_runs_flash_attention_2_but_not_mlperf() -> None:
    source = "NVIDIA NeMo performance summary (NeMo 24.07 container)"
    case = _case(source=source, precision="fp8")
    assert dict(case.framework_options) == {
        "attention_kernel": "fa2",
        "pipeline_outputs_kept": True,
        "ub_bulk_sm_margin": False,
    }
    assert "NVTE_FUSED_ATTN: 0" in "\n".join(case.assumptions)
    assert "deallocate_pipeline_outputs False" in "\n".join(case.assumptions)
    mlperf = _case(source="MLPerf Training v4.0, NVIDIA (eos_ngc24.04_nemo)", precision="fp8")
    assert dict(mlperf.framework_options) == {}
    assert mlperf.parallel.grad_fp32 is True  # 24.xx: the profile's fp32 reduction


@pytest.mark.parametrize(
    ("source", "margin"),
    [("NeMo 24.03.01 container", None), ("DGX Cloud, nvcr.io/nvidia/nemo:24.05", False),
     ("NeMo 24.07 container", False), ("DGX Cloud Benchmarking (NeMo 24.09)", None)],
)  # fmt: skip
def test_nemo_containers_with_te_1_6_to_1_8_run_userbuffers_bulk_overlaps_without_a_margin(
    source: str, margin: bool | None
) -> None:
    case = _case(source=source, tp="4", num_gpus="8")
    assert dict(case.framework_options).get("ub_bulk_sm_margin") == margin
    assert ("add_ub(..., set_sm_margin=0)" in "\n".join(case.assumptions)) is (margin is False)


def test_a_row_without_a_container_keeps_the_profile_defaults() -> None:
    case = _case(source="a cluster of ours, Megatron-Core")
    assert case.parallel.grad_fp32 is True and dict(case.framework_options) == {}
    assert "no NeMo / Megatron-Bridge container named" in "\n".join(case.assumptions)


def test_bridge_moe_recipes_fold_experts_and_recompute_as_the_recipe_states() -> None:
    case = _case(
        source=BRIDGE, model="GPT OSS 120B", moe="128 experts, top-4", num_gpus="64", ep="8",
        global_batch_seqs="512",
    )  # fmt: skip
    assert case.parallel.etp == 1
    assert str(case.parallel.recompute) == "selective"
    assert case.parallel.recompute_modules == ("layernorm", "moe_act")
    assert dict(case.framework_options) == {"rope_fusion": False, "te_cross_entropy": True}
    stated = _case(
        source=BRIDGE, model="GPT OSS 120B", moe="128 experts, top-4", num_gpus="64", ep="8",
        global_batch_seqs="512", recompute="none",
    )  # fmt: skip
    assert str(stated.parallel.recompute) == "none"  # the CSV's cell wins


@pytest.mark.parametrize(
    ("framework", "fused"),
    [("megatron-core", True), ("megatron-lm-2021", False), ("deepspeed", False)],
)
def test_gpt_blocks_run_fused_attention_outside_megatron_lm_2021(
    framework: str, fused: bool
) -> None:
    defaults = recipe_defaults(_row(model="GPT3 175B"), framework, "bf16", "gpt3-175b", {}, {})
    assert (defaults.model.get("core_attention") == "fused") is fused


def test_mpt_blocks_have_no_bias_and_no_dropout_and_composer_default_reduces_in_fp32() -> None:
    defaults = recipe_defaults(
        _row(model="MPT-7B"), "llm-foundry-2023", "bf16", "gpt3-6.7b", {}, {}
    )
    assert defaults.model == {"core_attention": "fused", "bias": False, "dropout": False}
    assert defaults.parallel == {"grad_fp32": True}
    assert any("get_mixed_precision" in n for n in defaults.notes)


FOUNDRY = "MosaicML llm-foundry MPT training benchmarks, A100 40GB table"
BENCHMARK_README = "scripts/train/benchmarking/README.md"


@pytest.mark.parametrize(
    "cells",
    [
        {"source": FOUNDRY},
        {"url": f"https://github.com/mosaicml/llm-foundry/blob/main/{BENCHMARK_README}"},
    ],
)
def test_the_llm_foundry_benchmark_ran_mpt_with_biases(cells: dict[str, str]) -> None:
    """The benchmark's pretraining yamls leave MPTConfig's no_bias at False: a row that names
    llm-foundry's benchmark (its text or its url) gets biased blocks, other MPT rows not."""
    row = _row(model="MPT-7B", **cells)
    defaults = recipe_defaults(row, "llm-foundry-2023", "bf16", "gpt3-6.7b", {}, {})
    assert defaults.model["bias"] is True and defaults.model["dropout"] is False
    assert any("no_bias at its default False" in n for n in defaults.notes)
    mpt_7b = {"layers": "32", "hidden": "4096", "heads": "32", "ffn": "16384", "vocab": "50368"}
    case = _case(model="MPT-7B", gpu="A100 40GB", **mpt_7b, **cells)
    assert case.model is not None and case.model.bias


@pytest.mark.parametrize(
    ("cells", "default"),
    [
        ({"precision": "amp_bf16 (FSDP mixed_precision DEFAULT)"}, True),
        ({"notes": "Precision amp_bf16, MP Mode DEFAULT (Composer FSDP mixed_precision)"}, True),
        ({"precision": "bf16 (FSDP mixed_precision PURE)"}, False),
        ({"precision": "bf16", "notes": "a run naming no mode"}, True),
    ],
)
def test_composer_default_of_2023_gathers_bf16_and_reduces_in_fp32(
    cells: dict[str, str], default: bool
) -> None:
    """Composer's DEFAULT since mosaicml/composer#2047 (named, or fsdp_config's default):
    param_dtype bf16 (bf16 gathers, a bf16 residual stream, as PURE), reduce_dtype float32; the
    profile's fp32 gathers are the DEFAULT before it, which no llm-foundry table ran."""
    row = _row(model="MPT-7B", source=FOUNDRY, **cells)
    defaults = recipe_defaults(row, "llm-foundry-2023", "bf16", "gpt3-6.7b", {}, {})
    assert defaults.options == {"fsdp_param_fp32": False, "eager_modules": "generator"}
    assert defaults.parallel["grad_fp32"] is default
    assert any("composer#2047" in n for n in defaults.notes) is default


@pytest.mark.parametrize(
    ("cells", "pure"),
    [
        ({"precision": "bf16 (FSDP mixed_precision PURE)"}, True),
        ({"notes": "Precision bf16, MP Mode PURE (Composer FSDP mixed_precision)"}, True),
        ({"precision": "bf16", "notes": "a pure throughput run"}, False),
    ],
)
def test_composer_pure_gathers_bf16_parameters_on_a_bf16_stream(
    cells: dict[str, str], pure: bool
) -> None:
    """Composer's get_mixed_precision PURE casts parameters to the precision's dtype: no fp32
    all-gathers and casts, no fp32 residual stream (mosaicml/composer 0099561e)."""
    row = _row(model="MPT-7B", source=FOUNDRY, **cells)
    defaults = recipe_defaults(row, "llm-foundry-2023", "bf16", "gpt3-6.7b", {}, {})
    # both modes gather and use bf16 parameters (DEFAULT since Composer's PR 2047)
    expected = {"fsdp_param_fp32": False, "eager_modules": "generator"}
    assert defaults.options == expected
    assert defaults.parallel["grad_fp32"] is not pure
    assert any("mixed_precision PURE" in n for n in defaults.notes) is pure
    mpt_7b = {"layers": "32", "hidden": "4096", "heads": "32", "ffn": "16384", "vocab": "50368"}
    case = _case(model="MPT-7B", source=FOUNDRY, gpu="A100 40GB", **mpt_7b, **cells)
    assert case.backend_key.split("+")[0] == "llm-foundry-2023"
    # an A100 row of llm-foundry also runs the Triton FlashAttention (test_triton_attention.py)
    assert dict(case.framework_options) == {**expected, "attention_kernel": "fa1-triton"}


def test_pure_named_beside_another_framework_changes_nothing() -> None:
    row = _row(source=TITAN, precision="bf16 (FSDP mixed_precision PURE)")
    assert recipe_defaults(row, "torchtitan", "bf16", "llama3-8b", {}, {}).options == {}


def test_a_text_saying_dropout_0_turns_dropout_off() -> None:
    row = _row(model="GPT3 175B", uncertain="dims from conf/custom.yaml (dropout 0)")
    defaults = recipe_defaults(row, "megatron-core", "bf16", "gpt3-175b", {}, {})
    assert defaults.model["dropout"] is False


def test_fms_fsdp_reduces_in_bf16() -> None:
    defaults = recipe_defaults(_row(), "fms-fsdp", "bf16", "llama3-8b", {}, {})
    assert defaults.parallel == {"grad_fp32": False}


TITAN = "TorchTitan docs/performance.md (torchtitan 9dec370, 2024/12)"


def test_torchtitan_selective_ac_compile_and_async_tp() -> None:
    table = "Table 4: 2D (FSDP 32 + TP 8) + torch.compile + Float8: 2D + AsyncTP"
    case = _case(
        source=TITAN, source_table=table, recompute="selective", tp="8", num_gpus="64",
        dp_sharding="FSDP2",
    )  # fmt: skip
    assert case.parallel.recompute_modules == ("op",)
    assert dict(case.framework_options) == {"fused_elementwise": True, "tp_comm_overlap": True}
    vanilla = _case(source=TITAN, source_table="torch.compile, Vanilla TP", tp="8")
    assert "tp_comm_overlap" not in dict(vanilla.framework_options)
    layer = _case(source=TITAN, source_table="activation checkpointing 'selective layer'",
                  recompute="selective")  # fmt: skip
    assert layer.parallel.recompute_modules == ()  # not the op policy: every 2nd block whole
    assert str(layer.parallel.recompute) == "full"
    assert (layer.parallel.recompute_method, layer.parallel.recompute_num_layers) == ("every", 2)
    assert any("torchtitan's default selective_ac_option '2'" in a for a in layer.assumptions)
    third = _case(source=TITAN, source_table="'selective layer' AC, selective_ac_option = 3",
                  recompute="selective")  # fmt: skip
    assert third.parallel.recompute_num_layers == 3


@pytest.mark.parametrize(
    ("source", "table", "micro_batch", "vpp"),
    [
        (TITAN, "3D (FSDP 8 + TP 8 + PP 8): 1F1B", 4, 1),
        (TITAN, "3D (FSDP 8 + TP 8 + PP 8): Interleaved 1F1B", 4, 2),
        ("torchtitan run of March 2025", "3D: Interleaved 1F1B", 2, 2),
    ],
)
def test_torchtitan_pipeline_micro_batches_by_its_release(
    source: str, table: str, micro_batch: int, vpp: int
) -> None:
    case = _case(
        source=source, source_table=table, tp="8", pp="8", dp="8", num_gpus="512",
        global_batch_seqs="256",
    )  # fmt: skip
    assert (case.parallel.micro_batch, case.parallel.vpp) == (micro_batch, vpp)
    assert not any("micro-batch 1 (Megatron" in a for a in case.assumptions)


def test_torchtitan_of_mid_2025_compiles_the_loss_and_uses_the_fused_adamw() -> None:
    source = "TorchTitan benchmarks (PyTorch team, June 2025)"
    case = _case(source=source, source_table="torch.compile, FSDP")
    assert dict(case.framework_options) == {
        "fused_elementwise": True, "loss_fp32_buffers": 0, "optimizer_foreach": False,
    }  # fmt: skip
    eager = _case(source=source, source_table="FSDP")
    assert dict(eager.framework_options) == {"optimizer_foreach": False}


@pytest.mark.parametrize(
    ("text", "when"),
    [("reproduced on NVIDIA B200, PyTorch 2.9.0+cu128", (2025, 10)),
     ("torch==2.7.1 and torchao", (2025, 4)), ("PyTorch 2.4 (not in the table)", None),
     ("torchtitan 0596be3, torch.compile", None)],
)  # fmt: skip
def test_the_pytorch_release_a_text_names(text: str, when: tuple[int, int] | None) -> None:
    assert torch_dated({"notes": text}) == when


def test_an_undated_torchtitan_row_dates_from_the_pytorch_release_it_names() -> None:
    source = "TorchTitan README (PyTorch torchtitan)"
    notes = "reproduced on NVIDIA B200, PyTorch 2.9.0+cu128"
    case = _case(source=source, source_table="torch.compile, FSDP", notes=notes)
    assert dict(case.framework_options) == {
        "fused_elementwise": True, "loss_fp32_buffers": 0, "optimizer_foreach": False,
        "fused_rmsnorm": True,
    }  # fmt: skip
    assert any("PyTorch release the text names dates from 2025-10" in a for a in case.assumptions)
    older = _case(source=source, source_table="FSDP", notes="PyTorch 2.6.0")
    assert "optimizer_foreach" not in dict(older.framework_options)


def test_torchtitan_from_december_2025_saves_cudnn_attention_under_op_sac() -> None:
    """pytorch/torchtitan#2095 (December 2025) added every SDPA backend to
    ``_op_sac_save_list``: a torchtitan row dated after it keeps the cuDNN attention's output
    under op-level SAC (``op_sac_saves_cudnn_attention``), an older one re-runs it."""
    source = "TorchTitan benchmarks (PyTorch team, %s)"
    newer = _case(source=source % "February 2026", gpu="B200", source_table="FSDP")
    older = _case(source=source % "August 2025", gpu="B200", source_table="FSDP")
    assert dict(newer.framework_options).get("op_sac_saves_cudnn_attention") is True
    assert "op_sac_saves_cudnn_attention" not in dict(older.framework_options)
    assert any("pytorch/torchtitan#2095" in a for a in newer.assumptions)


def test_automodel_moe_defaults_and_the_named_techniques() -> None:
    case = _case(
        source="NeMo AutoModel performance summary", model="DeepSeek V3 671B",
        moe="256 routed + 1 shared, top-8", pp="4", dp="64", ep="64", vpp="8",
        num_gpus="256", global_batch_seqs="512", dp_sharding="FSDP2 (64; LBS 8, GA 1)",
        notes="kernels: TE + DeepEP; fake balanced gate (ideal routing)",
    )  # fmt: skip
    assert (case.parallel.etp, str(case.parallel.recompute)) == (1, "full")
    assert str(case.parallel.pp_split) == "front" and case.model.mtp_layers == 0
    assert dict(case.framework_options) == {
        "local_batch_size": 8, "moe_deepep": True, "moe_fake_balanced_gate": True,
        "bf16_model_states": True,
    }  # fmt: skip


def test_a_megatron_paper_table_counts_recompute_flops_for_its_zero3_rows() -> None:
    (row,) = [r for r in read_csv(data_dir() / "published_runs_more.csv")
              if r["id"] == "NAR21-T2-1"]  # fmt: skip
    (case, *_) = row_cases(row, "published_runs_more.csv", 1)
    assert (case.framework, case.flops) == ("deepspeed", "megatron-recompute")


#: (row id prefix, field) where the inference keeps the framework's default and the
#: hand-written setup departs from it for a reason the CSV does not carry.
DEPARTURES = {
    ("KOR22-", "grad_fp32"): "the hand-written KOR22 setups take fp32 gradient accumulation "
    "from the paper's Figure 1 accounting (18 bytes of state per parameter); the inference "
    "takes Megatron-LM's fp16 default (--accumulate-allreduce-grads-in-fp32 off)",
}


def _departs(row_id: str, field: str) -> bool:
    return any(row_id.startswith(p) and field == f for p, f in DEPARTURES)


def test_the_defaults_agree_with_the_hand_written_setups() -> None:
    """On every claimed package row, each framework option and each of grad_fp32,
    recompute_modules and the attention core the inference sets is what the hand-written
    setup gives (the H100 Qwen3-235B rows, which left fp8_param_gather and grad_fp32 unset
    until 4 Dec 2026, set them from the recipe: see their setups.toml assumptions), but for
    the :data:`DEPARTURES`."""
    cases = package_cases()
    rows = {
        (name, i): row
        for name in {c.file for c in cases if c.file.startswith("published_runs")}
        for i, row in enumerate(read_csv(data_dir() / name), start=1)
    }
    checked = 0
    for hand in cases:
        if (hand.file, hand.line) not in rows or hand.metric == "peak_mem_gib":
            continue
        (mine, *_) = row_cases(rows[(hand.file, hand.line)], hand.file, hand.line)
        if mine.parallel is None or hand.parallel is None or hand.framework != mine.framework:
            continue
        assert mine.model is not None and hand.model is not None
        theirs = dict(hand.framework_options)
        for option, value in mine.framework_options:
            assert theirs.get(option) == value or _departs(hand.id, option), (hand.id, option)
        if not mine.parallel.grad_fp32 and not _departs(hand.id, "grad_fp32"):
            assert not hand.parallel.grad_fp32, hand.id
        if mine.parallel.recompute_modules:
            assert mine.parallel.recompute_modules == hand.parallel.recompute_modules, hand.id
        if mine.model.core_attention:
            assert mine.model.core_attention == hand.model.core_attention, hand.id
        checked += 1
    assert checked > 250


@pytest.mark.parametrize(
    ("source", "model", "loss"),
    [
        ("DGX Cloud Benchmarking (GSW 25.04, NeMo 25.02.01, NeMo 2.0)", "Llama 3 8B",
         "native_cross_entropy"),
        ("DGX Cloud Benchmarking (GSW 25.05, NeMo 25.04.01)", "Llama 3 8B", "te_cross_entropy"),
        (BRIDGE, "Llama 3 8B", "te_cross_entropy"),
        ("MLPerf Training v5.0, NVIDIA (tyche_ngpu256_ngc25.04_nemo, NeMo 25.04)", "Llama 3 8B",
         "native_cross_entropy"),
        ("NVIDIA NeMo performance summary (NeMo 24.07 container)", "Llama 3 8B", ""),
        ("a cluster of ours, Megatron-Core", "Llama 3 8B", ""),
    ],
)  # fmt: skip
def test_the_fused_loss_a_nemo_2_or_bridge_container_runs(
    source: str, model: str, loss: str
) -> None:
    options = dict(_case(source=source, model=model).framework_options)
    fused = {o for o in ("native_cross_entropy", "te_cross_entropy") if options.get(o)}
    assert fused == ({loss} if loss else set())


def test_a_gpt_oss_recipe_s_native_loss_is_reset_to_te_by_the_performance_scripts() -> None:
    case = _case(
        source=BRIDGE, model="GPT OSS 120B", moe="128 experts, top-4", num_gpus="64", ep="8",
        global_batch_seqs="512", gpu="B200",
    )  # fmt: skip
    options = dict(case.framework_options)
    assert options.get("te_cross_entropy") is True and "native_cross_entropy" not in options


@pytest.mark.parametrize(
    ("framework", "precision", "fp32"),
    [("megatron-lm-2021", "fp16", False), ("megatron-lm-2021", "bf16", True),
     ("deepspeed", "fp16", False), ("deepspeed", "bf16", True), ("megatron-core", "fp16", True)],
)  # fmt: skip
def test_fp16_training_reduces_gradients_in_fp16_where_the_framework_does(
    framework: str, precision: str, fp32: bool
) -> None:
    defaults = recipe_defaults(_row(model="GPT3 175B"), framework, precision, "gpt3-175b", {}, {})
    assert defaults.parallel.get("grad_fp32", True) is fp32
    if not fp32:
        assert any("gradients reduced in fp16" in n for n in defaults.notes)


def test_automodel_dense_models_take_the_default_parallelizer_fsdp2_mechanisms() -> None:
    case = _case(source="NeMo AutoModel performance summary", model="Llama 3 70B",
                 dp_sharding="FSDP2", num_gpus="64")  # fmt: skip
    # s37 fsdpsync: a dense row of AutoModel's performance summary reduce-scatters every
    # micro-batch, as AutoModel's dense benchmark configs set (defer_fsdp_grad_sync: False).
    assert dict(case.framework_options) == {
        "fsdp2_copies": True,
        "fsdp_root_unit": True,
        "fsdp_no_sync_accumulation": False,
    }
    assert "DefaultParallelizationStrategy" in "\n".join(case.assumptions)


QWEN3 = {
    "model": "Qwen3_235B_a22B", "moe": "128 experts, top-8", "tp": "2", "pp": "8", "ep": "32",
    "num_gpus": "256", "global_batch_seqs": "2048", "precision": "FP8-CS",
}  # fmt: skip
DSV3 = {
    "model": "DeepSeekV3", "moe": "256 routed + 1 shared, top-8", "tp": "2", "pp": "8",
    "ep": "64", "num_gpus": "1024", "global_batch_seqs": "8192", "precision": "FP8-CS",
}  # fmt: skip


def test_bridge_h100_moe_recipes_switch_their_overlaps() -> None:
    qwen = dict(_case(source=BRIDGE, **QWEN3).framework_options)
    assert (qwen["moe_comm_overlap"], qwen["tp_comm_overlap"]) == (True, False)
    on_b200 = dict(_case(source=BRIDGE, gpu="B200", **QWEN3).framework_options)
    assert "moe_comm_overlap" not in on_b200 and "tp_comm_overlap" not in on_b200
    old = "NVIDIA Megatron-Bridge performance summary (25.09 container)"
    dsv3 = dict(_case(source=old, **DSV3).framework_options)
    assert (dsv3["moe_deepep"], dsv3["overlap_grad_reduce"], dsv3["moe_comm_overlap"]) == (
        True, False, True,
    )  # fmt: skip
    later = dict(_case(source=BRIDGE, **DSV3).framework_options)
    assert later["moe_deepep"] is True and "moe_comm_overlap" not in later
    nemo = dict(_case(source="NeMo 25.09 container, DGX Cloud", **DSV3).framework_options)
    assert "moe_deepep" not in nemo  # a NeMo (not Megatron-Bridge) text: no Bridge recipe


@pytest.mark.parametrize(
    ("source", "amax"),
    [("MLPerf Training v4.0, NVIDIA (eos-dfw_n1344_ngc24.04_nemo, NeMo 24.04)", None),
     ("MLPerf Training v4.1, NVIDIA (eos_n32_ngc24.09_nemo, NeMo 24.09)", "tp_cp")],
)  # fmt: skip
def test_mlperf_gpt3_on_nemo_1_runs_its_own_optimizer_and_fp8_settings(
    source: str, amax: str | None
) -> None:
    case = _case(source=source, model="GPT3 175B", precision="fp8", tp="4", pp="8",
                 num_gpus="512", global_batch_seqs="512")  # fmt: skip
    options = dict(case.framework_options)
    assert case.parallel.grad_fp32 is False
    assert options["distributed_fused_adam"] == "fp32" and options["fp8_param_gather"] is True
    assert options["ub_bulk_sm_margin"] is False and options.get("fp8_amax_reduction") == amax
    bf16 = _case(source=source, model="GPT3 175B", tp="4", pp="8", num_gpus="512",
                 global_batch_seqs="512")  # fmt: skip
    assert "fp8_param_gather" not in dict(bf16.framework_options)
    llama = _case(source=source, model="Llama 3 8B", precision="fp8")
    assert "distributed_fused_adam" not in dict(llama.framework_options)


@pytest.mark.parametrize(
    ("source", "gpu", "unfused"),
    [("DGX Cloud Benchmarking (GSW 25.05.04, NeMo 25.04.01)", "GB200", True),
     ("DGX Cloud Benchmarking (GSW 25.05.04, NeMo 25.04.01)", "H100-SXM5-80GB", False),
     (BRIDGE, "B200", False)],
)  # fmt: skip
def test_mla_trains_on_te_unfused_attention_on_blackwell_before_cudnn_9_11(
    source: str, gpu: str, unfused: bool
) -> None:
    cells = {**DSV3, "precision": "bf16", "tp": "2", "pp": "4", "ep": "32", "num_gpus": "256"}
    options = dict(_case(source=source, gpu=gpu, **cells).framework_options)
    assert (options.get("sm100_attention_kernel") == "unfused") is unfused


@pytest.mark.parametrize(
    ("source", "model", "precision", "dropout", "amax"),
    [
        # NeMo 2.0's GPTConfig175B and pretrain_gpt3_175b.py
        ("NVIDIA NeMo performance summary (NeMo 25.02 container)", "GPT3 175B", "fp8", False,
         "tp_cp"),
        ("NVIDIA NeMo performance summary (NeMo 25.02 container)", "GPT3 175B", "bf16", False,
         None),
        # a NeMo 1.x container keeps GPT-3's dropout and the data-parallel amax reduction
        ("DGX Cloud Benchmarking (NeMo 24.12)", "GPT3 175B", "fp8", True, None),
        # another GPT size keeps GPTConfig's dropout; Llama has none either way
        ("NVIDIA NeMo performance summary (NeMo 25.02 container)", "GPT3 20B", "fp8", True, None),
        # an MLPerf submission on NeMo 2.0 reduces amaxes over tp / cp by its custom.yaml
        ("MLPerf Training v5.0, NVIDIA (tyche_ngpu256_ngc25.04_nemo)", "Llama 3.1 405B", "fp8",
         False, "tp_cp"),
    ],
)  # fmt: skip
def test_nemo_2_gpt3_175b_without_dropout_and_its_tp_only_amax_reduction(
    source: str, model: str, precision: str, dropout: bool, amax: str | None
) -> None:
    dims = {"layers": "44", "hidden": "6144", "heads": "48"} if "20B" in model else {}
    case = _case(source=source, model=model, precision=precision, tp="4", pp="8",
                 num_gpus="512", global_batch_seqs="512", **dims)  # fmt: skip
    assert case.model is not None
    assert case.model.dropout is (dropout and "Llama" not in model)
    assert dict(case.framework_options).get("fp8_amax_reduction") == amax


@pytest.mark.parametrize(
    ("source", "model", "fused"),
    [
        # the launcher's llama3_1_*.yaml set cross_entropy_loss_fusion
        ("DGX Cloud Benchmarking (NeMo 24.09)", "Llama 3.1 70B", True),
        ("DGX Cloud Benchmarking (NeMo 24.12)", "Llama 3.1 8B", True),
        # other launcher yamls: no rule (the unfused loss stays)
        ("NVIDIA NeMo performance summary (NeMo 24.07 container)", "Llama 3 8B", False),
        ("DGX Cloud Benchmarking (NeMo 24.12)", "GPT3 175B", False),
        # MLPerf GPT-3 on NeMo 1.x: v4.1's custom.yaml (24.09) fuses it, v4.0's (24.04) not
        ("MLPerf Training v4.1 (eos_n32_ngc24.09_nemo, NeMo 24.09)", "GPT3 175B", True),
        ("MLPerf Training v4.0 (eos_n64_ngc24.04_nemo, NeMo 24.04)", "GPT3 175B", False),
    ],
)  # fmt: skip
def test_the_fused_loss_of_the_nemo_1_launcher_yamls_and_mlperf_gpt3(
    source: str, model: str, fused: bool
) -> None:
    case = _case(source=source, model=model, tp="4", pp="8", num_gpus="512",
                 global_batch_seqs="512")  # fmt: skip
    assert dict(case.framework_options).get("native_cross_entropy", False) is fused


@pytest.mark.parametrize(
    ("source", "nemo2"),
    [
        # another submitter's copy of NVIDIA's NeMo 2.0 implementation on its own image
        ("MLPerf Training v5.1, Cisco closed division (the NVIDIA NeMo Llama 3.1 8B "
         "implementation)", True),
        ("MLPerf Training v5.0, X closed division (NVIDIA's NeMo implementation)", True),
        # NVIDIA's NeMo implementations before v5.0 are NeMo 1.x ones: no rule
        ("MLPerf Training v4.1, X closed division (the NVIDIA NeMo GPT-3 implementation)", False),
        # MLPerf on NeMo without naming NVIDIA's implementation: none (AMD's own scripts have
        # their rule, tests/explore/test_infer_mlperf_amd.py)
        ("MLPerf Training v5.1, X closed division (its own scripts on NeMo 2.3)", False),
    ],
)  # fmt: skip
def test_an_mlperf_nemo_2_implementation_without_a_container(source: str, nemo2: bool) -> None:
    case = _case(source=source, model="Llama 3.1 8B", precision="fp8", num_gpus="64",
                 global_batch_seqs="64")  # fmt: skip
    options = dict(case.framework_options)
    assert (case.parallel.grad_fp32 is False) is nemo2
    assert (options.get("fp8_param_gather") is True) is nemo2
    assert (options.get("fp8_amax_reduction") == "tp_cp") is nemo2
    assert ("NVIDIA's NeMo implementation of MLPerf" in "\n".join(case.assumptions)) is nemo2


@pytest.mark.parametrize(
    ("source", "model", "precision", "notes", "recipe", "loss"),
    [
        # NVIDIA's 25.09 implementation: custom.yaml's tensorwise default, config_common_8b.sh's
        # CE_FUSION_IMPL=te for the 8B benchmark
        ("MLPerf Training v5.1, X closed division (NeMo 25.09 container)", "Llama 3.1 8B",
         "FP8", "", "tensorwise", "te_cross_entropy"),
        # a stated recipe wins; a stated CE_FUSION_IMPL=native keeps the native loss
        ("MLPerf Training v5.1, X closed division (NeMo 25.09 container)", "Llama 3.1 8B",
         "FP8 (delayed)", "CE_FUSION_IMPL=native", "delayed", "native_cross_entropy"),
        # not the 8B benchmark, no CE_FUSION_IMPL stated: custom.yaml's default, native
        ("MLPerf Training v5.1, X closed division (NeMo 25.09 container)", "Llama 3.1 405B",
         "FP8", "", "tensorwise", "native_cross_entropy"),
        # ... unless the text states it
        ("MLPerf Training v5.1, X closed division (NeMo 25.09 container)", "Llama 3.1 405B",
         "FP8", "config: CE_FUSION_IMPL=te", "tensorwise", "te_cross_entropy"),
        # the earlier implementation (NeMo 25.04; Cisco's copy names no container): delayed, native
        ("MLPerf Training v5.0, NVIDIA (tyche_ngpu256_ngc25.04_nemo)", "Llama 3.1 8B",
         "FP8", "", "delayed", "native_cross_entropy"),
        ("MLPerf Training v5.1, Cisco closed division (the NVIDIA NeMo Llama 3.1 8B "
         "implementation)", "Llama 3.1 8B", "FP8", "", "delayed", "native_cross_entropy"),
        # not MLPerf: NeMo's own 25.09 recipes are another rule's
        ("NVIDIA NeMo performance summary (NeMo 25.09 container)", "Llama 3.1 8B",
         "FP8", "", "delayed", "te_cross_entropy"),
    ],
)  # fmt: skip
def test_the_mlperf_implementation_of_25_09_recipe_and_loss(
    source: str, model: str, precision: str, notes: str, recipe: str, loss: str
) -> None:
    case = _case(source=source, model=model, precision=precision, notes=notes, num_gpus="64",
                 global_batch_seqs="64")  # fmt: skip
    options = dict(case.framework_options)
    other = {"te_cross_entropy", "native_cross_entropy"} - {loss}
    assert case.parallel.fp8_recipe.value == recipe
    assert options.get(loss) is True
    assert not any(options.get(o) for o in other)


MOEZOO = "Megatron-MoE-ModelZoo (NVIDIA Megatron-Core MoE team), Qwen3-235B-A22B on 256 H100"
QWEN3_EP32 = {
    "model": "Qwen3-235B-A22B", "moe": "128 experts, top-8", "tp": "2", "pp": "8", "vpp": "4",
    "ep": "32", "num_gpus": "256", "global_batch_seqs": "2048",
}  # fmt: skip


@pytest.mark.parametrize(
    ("notes", "overlap"),
    [("Notes cell: '+1f1b overlap'", True),
     ("runs --overlap-moe-expert-parallel-comm --delay-wgrad-compute", True),
     ("A2A_OVERLAP=1", True),
     ("moe_a2a_overlap=True in the recipe", True),
     ("A2A_OVERLAP=0", None),
     ("the later configs set moe_a2a_overlap=False", None),
     ("Dispatcher DeepEP", None)],
)  # fmt: skip
def test_a_megatron_core_row_naming_the_ep_all_to_all_overlap_runs_it(
    notes: str, overlap: bool | None
) -> None:
    options = dict(_case(source=MOEZOO, notes=notes, **QWEN3_EP32).framework_options)
    assert options.get("moe_comm_overlap") is overlap


def test_the_ep_all_to_all_overlap_named_on_another_framework_changes_nothing() -> None:
    source = "NeMo AutoModel performance summary"
    options = dict(_case(source=source, notes="+1f1b overlap", **QWEN3_EP32).framework_options)
    assert "moe_comm_overlap" not in options


def test_a_torchtitan_row_naming_deepep_dispatches_on_it() -> None:
    cells = {
        "model": "Qwen3-30B-A3B", "moe": "128 experts, top-8", "ep": "8", "gpu": "B200",
        "source": "TorchTitan, Qwen3-30B-A3B on B200",
    }  # fmt: skip
    named = dict(_case(notes="flavor 30B-A3B-deepep (DeepEP)", **cells).framework_options)
    assert named["moe_deepep"] is True
    assert "moe_deepep" not in dict(_case(notes="default EP", **cells).framework_options)


@pytest.mark.parametrize(
    ("notes", "balanced"),
    [
        ("the configs set debug moe_force_load_balance true", True),
        ("--training.debug_moe_force_load_balance", True),
        ("[debug] moe_force_load_balance = false", None),
        ("--moe-router-force-load-balancing (random logits)", None),
        ("", None),
    ],
)
def test_torchtitan_forced_load_balance_routes_round_robin(
    notes: str, balanced: bool | None
) -> None:
    """torchtitan's ``moe_force_load_balance`` (``_debug_force_load_balance_routing``: token t
    to experts (k*t + j) mod E) is the model's round-robin gate when a torchtitan row names it;
    Megatron's random-logit forced balance, a value that switches it off or silence do not
    (6 Dec 2026, s23 ttaudit)."""
    case = _case(
        source="TorchTitan DeepEP README", model="Qwen3-30B-A3B", moe="128 experts, top-8",
        dp="8", ep="8", num_gpus="8", global_batch_seqs="64", dp_sharding="FSDP2",
        notes=f"DeepEP; {notes}",
    )  # fmt: skip
    assert case.framework == "torchtitan"
    assert dict(case.framework_options).get("moe_fake_balanced_gate") is balanced
    said = "\n".join(case.assumptions)
    assert ("torchtitan's forced load balance" in said) is bool(balanced)
