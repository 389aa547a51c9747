"""The held-out rows of ``published_runs_held_out.csv`` other than DGX Cloud's
(``test_validate_held_out_dgxc.py``): TorchTitan's tables (H100, A100 and the async-TP
benchmark), the Megatron-Bridge performance summaries, the PyTorch/IBM FSDP blog and the
fms-fsdp README, NeMo 24.07's and NeMo's Long Input Sequences tables, the MLPerf submissions,
the third-party NeMo B200 rows, the BLOOM and Llama 3 405B rows: each row takes its table's or
recipe's layout, batch and settings."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_explore.validation.setups import Case
from tests.explore.held_out import HELD_OUT, csv_rows, held_out_cases
from tests.explore.package_cases import package_cases


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return held_out_cases()


def test_recipes_switch_compile_and_async_tp_per_row(cases: list[Case]) -> None:
    by_id = {c.id: c for c in cases if c.source == "TORCHTITAN"}
    assert by_id["TTITAN-T1-1"].backend_key == "torchtitan"  # "FSDP": eager, no Float8
    assert by_id["TTITAN-T1-2"].backend_key == "torchtitan+fused_elementwise=true"
    assert "tp_comm_overlap=true" in by_id["TTITAN-T4-2"].backend_key
    assert "tp_comm_overlap" not in by_id["TTITAN-T4-1"].backend_key
    one, interleaved = by_id["TTITAN-T5-1"].parallel, by_id["TTITAN-T5-2"].parallel
    assert one is not None and interleaved is not None
    # the table's local batch 32 per FSDP rank, split into the default number of micro-batches
    assert one.global_batch == 32 * one.dp and one.global_batch // (one.dp * one.micro_batch) == 8
    assert interleaved.vpp == 2 and str(interleaved.schedule) == "interleaved"
    for case in by_id.values():
        assert case.parallel is not None and case.model is not None
        assert case.parallel.zero == 3
        precision = "bf16" if case.id in {"TTITAN-T1-1", "TTITAN-T1-2", "TTITAN-T3-1",
                                          "TTITAN-T3-2"} else "fp8"  # fmt: skip
        assert str(case.parallel.precision) == precision, case.id


def test_megatron_bridge_rows_take_the_tables_layout_and_recipe(cases: list[Case]) -> None:
    by_id = {c.id: c for c in cases}
    fsdp = by_id["MBD-H100-25.11-LLAMA3_8B"].parallel
    assert fsdp is not None and fsdp.zero == 3 and fsdp.dp == 8  # the table's FSDP 8
    big = by_id["MBD-H100-25.11-LLAMA3.1_405B"].parallel
    assert big is not None
    assert (big.tp, big.pp, big.cp, big.vpp, big.dp) == (8, 8, 2, 8, 1024 // (8 * 8 * 2))
    assert big.sp and big.zero == 1 and not big.grad_fp32
    for row_id, recipe in (("MBD-B200-25.11-LLAMA3_8B-CS", "tensorwise"),
                           ("MBD-B200-25.11-LLAMA3_8B-MX", "mxfp8")):  # fmt: skip
        parallel = by_id[row_id].parallel
        assert parallel is not None and str(parallel.fp8_recipe) == recipe
    # the 25.09 tables state the same layouts as the 25.11 ones for these rows (same recipes)
    older = [i for i in by_id if i.startswith("MBD-") and "-25.09-" in i]
    assert len(older) == 9
    for row_id in older:
        new, old = by_id[row_id.replace("-25.09-", "-25.11-")].parallel, by_id[row_id].parallel
        assert new is not None and old is not None
        fields = ("tp", "pp", "cp", "vpp", "dp", "micro_batch", "global_batch", "zero", "sp")
        assert [getattr(old, f) for f in fields] == [getattr(new, f) for f in fields], row_id
        assert str(old.fp8_recipe) == ("mxfp8" if row_id.endswith("-MX") else "tensorwise")
        assert dict(by_id[row_id].framework_options) == dict(
            by_id[row_id.replace("-25.09-", "-25.11-")].framework_options
        )


def test_the_fsdp_blog_rows_take_two_sequences_of_4096_per_gpu(cases: list[Case]) -> None:
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    blog = ("IBMFSDP-H100", "IBMFSDP-A100")
    evaluated = [c for c in cases if c.source in blog and c.parallel is not None]
    sizes = ["13B", "13B", "34B", "34B", "70B", "70B", "7B", "7B"]  # 13B since s34 fmssel
    assert sorted(c.id.rsplit("-", 1)[1] for c in evaluated) == sizes
    for case in evaluated:
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None
        gpus = int(rows[case.id]["num_gpus"])
        # the blog: batch 2 per GPU, 4k sequences, 1M tokens per batch on 128 GPUs
        assert (parallel.dp, parallel.micro_batch, parallel.global_batch) == (gpus, 2, 2 * gpus)
        assert parallel.zero == 3 and not parallel.grad_fp32  # FSDP, bfSixteen reduce dtype
        assert model.seq_len == 4096 and model.vocab == 32000 and str(parallel.precision) == "bf16"
        if case.id.endswith("-7B"):  # fms-fsdp's scripts/7b.sh: HSDP over 8-GPU nodes, no AC
            assert parallel.dp_shard == 8 and str(parallel.recompute) == "none"
            assert model.kv_heads == model.heads == 32
        elif case.id.endswith("-13B"):  # HSDP as 7B; 'Selective': one block in every 2
            assert parallel.dp_shard == 8 and str(parallel.recompute) == "full"
            assert (parallel.recompute_method, parallel.recompute_num_layers) == ("every", 2)
            assert model.kv_heads == model.heads == 40
        else:  # FSDP (FULL_SHARD), activation checkpointing of every block
            assert parallel.dp_shard is None and str(parallel.recompute) == "full"
            assert model.kv_heads == 8
    assert rows["IBMFSDP-A100-LLAMA2-7B"]["tokens_per_s_per_gpu"] == "3700"
    assert 128 * 2 * 4096 == 1_048_576  # the blog's "1 million tokens per batch for 128 GPUs"


def test_nemo_2407_rows_take_each_models_launcher_recipe(cases: list[Case]) -> None:
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    by_id = {c.id: c for c in cases if c.source == "NEMO2407-H100"}
    assert len(by_id) == 12
    for row_id, case in by_id.items():
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None
        row = rows[row_id]
        gpus = int(row["num_gpus"])
        assert parallel.dp * parallel.tp * parallel.pp * parallel.cp == gpus
        assert (parallel.global_batch, parallel.micro_batch) == (
            int(row["global_batch_seqs"]),
            int(row["micro_batch"]),
        )
        assert str(parallel.precision) == "fp8" and str(parallel.fp8_recipe) == "delayed"
        assert parallel.zero == 1 and parallel.sp == (parallel.tp > 1)
        gpt3 = "GPT3" in row_id  # *_fp8_performance.yaml: selective, grad_sync_dtype bf16
        assert str(parallel.recompute) == ("selective" if gpt3 else "none"), row_id
        # bf16 gradients: the GPT-3 yamls, nemotron_340b.yaml, and the launcher's H100 example
        # scripts of every Llama row (grad_sync_dtype=bf16; Llama 2 7B / 13B since s18 infer9);
        # the Nemotron 8B / 22B scripts pass none
        bf16_grads = {"NEMOTRON-340B", "LLAMA2-7B", "LLAMA2-13B", "LLAMA2-70B", "LLAMA3-8B",
                      "LLAMA3-70B"}  # fmt: skip
        bf16 = gpt3 or row_id.removeprefix("NEMO2407-H100-") in bf16_grads
        assert parallel.grad_fp32 == (not bf16), row_id
    nemotron = by_id["NEMO2407-H100-NEMOTRON-8B"].model
    assert nemotron is not None and nemotron.kv_heads == nemotron.heads == 32  # no GQA
    assert str(nemotron.activation) == "squared-relu" and nemotron.vocab == 256000


def test_nemo_long_sequence_rows_are_4m_tokens_per_step_with_k_of_1024(cases: list[Case]) -> None:
    """NeMo's Long Input Sequences table (Llama 2 7B, 4K-1024K): every row's layout fills its
    GPUs, steps carry 4M tokens, and the published model FLOPs per token grow as NeMo's attention
    term 12·l·h·s with s = K·1024 (within 0.5 %; K·1000 is off by 2 % at 1024K)."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    mine = [c for c in cases if c.source == "NEMO2403-LONGSEQ-H100"]
    assert len(mine) == 9
    layers, hidden = 32, 4096

    def flops_per_token(row: dict[str, str]) -> float:
        return float(row["tflops_per_gpu"]) * 1e12 / float(row["tokens_per_s_per_gpu"])

    first = rows[mine[0].id]
    base = flops_per_token(first) - 12 * layers * hidden * int(first["seq_len"])
    for case in mine:
        parallel, model, row = case.parallel, case.model, rows[case.id]
        assert parallel is not None and model is not None
        k = int(case.id.rsplit("-", 1)[1].rstrip("K"))
        assert model.seq_len == 1024 * k and (model.layers, model.hidden) == (layers, hidden)
        assert parallel.global_batch * model.seq_len == 4 * 2**20 and parallel.micro_batch == 1
        gpus = parallel.tp * parallel.pp * parallel.cp * parallel.dp
        assert gpus == int(row["num_gpus"]) == k  # one GPU per 1K tokens of sequence
        assert parallel.sp == (parallel.tp > 1) and str(parallel.cp_style) == "ring"
        assert str(parallel.recompute) == "none" and str(parallel.fp8_recipe) == "delayed"
        expected = base + 12 * layers * hidden * model.seq_len
        assert flops_per_token(row) == pytest.approx(expected, rel=0.005), case.id
    last = rows[mine[-1].id]
    assert abs(flops_per_token(last) / (base + 12 * layers * hidden * 1024 * 1000) - 1) > 0.01


def test_the_26_02_moe_rows_take_their_25_11_twins_setup_but_the_batch() -> None:
    """The 26.02 tables' H100 GPT-OSS 120B and Qwen3-235B rows run the recipes' V2 variants,
    which change only the global batch of the 25.11 rows' V1 (published_runs_more.csv)."""
    by_id = {c.id: c for c in package_cases() if c.source == "MBRIDGE"}
    for new_id, batch in (
        ("MBRIDGE26.02-DGX-H100-GPTOSS120B-64", 1280),
        ("MBRIDGE26.02-DGX-H100-Qwen3_235B_a22B-256", 8192),
    ):
        new, old = by_id[new_id], by_id[new_id.replace("26.02", "25.11")]
        assert new.parallel is not None and old.parallel is not None
        assert new.parallel.global_batch == batch != old.parallel.global_batch
        assert replace(new.parallel, global_batch=old.parallel.global_batch) == old.parallel
        assert new.model == old.model and new.framework_options == old.framework_options
        assert not new.in_sample and new.system == old.system == "h100-80gb"


def test_the_b200_moe_rows_take_the_tables_layout(cases: list[Case]) -> None:
    """Megatron-Bridge's DGX-B200 MoE rows: GPUs, GBS, MBS, PP, VP, EP as the tables state
    (expert DP = GPUs / (EP x PP)) but the 25.11 GPT-OSS row's EP, which its recipe sets to 64
    (a csv correction), 26.02 / 26.04 rows on cuDNN 9.17's attention, MXFP8 for Qwen3."""
    by_id = {c.id: c for c in cases if c.source == "MBRIDGE-MOE-B200"}
    layouts = {  # GPUs, GBS, MBS, PP, VP, EP (the tables; the 25.11 GPT-OSS EP the recipe's)
        "MBM-B200-25.11-GPTOSS120B-64": (64, 512, 4, 1, 1, 64),
        "MBM-B200-26.02-GPTOSS120B-64": (64, 1280, 4, 1, 1, 64),
        "MBM-B200-25.11-QWEN3_235B_A22B-64": (64, 1024, 1, 8, 2, 8),
        "MBM-B200-26.02-QWEN3_235B_A22B-256": (256, 8192, 1, 8, 1, 8),
        "MBM-B200-26.04-GPTOSS120B-64": (64, 1280, 4, 1, 1, 8),
    }
    assert set(by_id) == set(layouts)
    for row_id, (gpus, gbs, mbs, pp, vpp, ep) in layouts.items():
        parallel = by_id[row_id].parallel
        assert parallel is not None
        got = (parallel.tp * parallel.pp * parallel.cp * parallel.dp, parallel.global_batch)
        assert got == (gpus, gbs), row_id
        assert (parallel.micro_batch, parallel.pp, parallel.vpp, parallel.ep) == (mbs, pp, vpp, ep)
        assert parallel.expert_tp == 1 and not parallel.grad_fp32 and parallel.zero == 1
        qwen = "QWEN3" in row_id
        assert str(parallel.fp8_recipe) == "mxfp8" if qwen else str(parallel.precision) == "bf16"
        options = dict(by_id[row_id].framework_options)
        later = "-26.02-" in row_id or "-26.04-" in row_id
        assert (options.get("attention_kernel") == "cudnn-9.17") == later
    corrected = by_id["MBM-B200-25.11-GPTOSS120B-64"].assumptions
    assert any(a.startswith("ep 64 instead of the published '8'") for a in corrected)


def test_the_torchtitan_a100_rows_run_fsdp2_over_64_gpus(cases: list[Case]) -> None:
    """docs/performance.md (2024): FSDP2 alone on 64 A100, global batch = local batch x 64, the
    table's AC per row, Llama 3 at 8192 tokens and Llama 2 at 4096."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    mine = [c for c in cases if c.source == "TORCHTITAN-A100"]
    assert len(mine) == 8
    recompute = {"SELOP": "selective", "FULL": "full", "NOAC": "none", "SELLAYER": "full"}
    for case in mine:
        parallel, model, row = case.parallel, case.model, rows[case.id]
        assert parallel is not None and model is not None
        local = int(case.id.split("-BS")[1].split("-")[0])
        assert (parallel.dp, parallel.zero, parallel.micro_batch) == (64, 3, local), case.id
        assert parallel.global_batch == 64 * local and parallel.grad_fp32
        assert model.seq_len == (8192 if "-L3-" in case.id else 4096), case.id
        assert str(parallel.recompute) == recompute[case.id.rsplit("-", 1)[1]], case.id
        if case.id.endswith("SELOP"):
            assert parallel.recompute_modules == ("op",)
        if case.id.endswith("SELLAYER"):  # every 2nd block whole: torchtitan's default interval
            assert (parallel.recompute_method, parallel.recompute_num_layers) == ("every", 2)
            assert any("'selective layer' AC as every 2nd" in a for a in case.assumptions)
        else:
            assert parallel.recompute_num_layers is None, case.id
        assert float(row["mfu_pct"]) > 50 and not dict(case.framework_options)  # eager, bf16


def test_the_fms_fsdp_readme_rows_take_the_tables_strategy_batch_and_checkpointing(
    cases: list[Case],
) -> None:
    """fms-fsdp's README table on 128 A100: 13b HSDP (shard groups of a node) without
    checkpointing at batch 1, 34b / 70b FSDP with every block checkpointed at batch 8 / 6."""
    by_id = {c.id: c for c in cases if c.source == "FMSFSDP-A100"}
    expected = {  # dp_shard (None: FULL_SHARD over all of dp), micro-batch, recompute
        "FMSFSDP-A100-LLAMA2-13B-HSDP-BS1": (8, 1, "none"),
        "FMSFSDP-A100-LLAMA2-34B-FSDP-BS8": (None, 8, "full"),
        "FMSFSDP-A100-LLAMA2-70B-FSDP-BS6": (None, 6, "full"),
    }
    assert set(by_id) == set(expected)
    for row_id, (shard, batch, recompute) in expected.items():
        parallel, model = by_id[row_id].parallel, by_id[row_id].model
        assert parallel is not None and model is not None
        assert (parallel.dp, parallel.zero, parallel.dp_shard) == (128, 3, shard), row_id
        assert (parallel.micro_batch, parallel.global_batch) == (batch, 128 * batch)
        assert str(parallel.recompute) == recompute and not parallel.grad_fp32
        assert model.seq_len == 4096 and model.vocab == 32000


def test_the_async_tp_rows_run_fsdp_x_tp8_compiled(cases: list[Case]) -> None:
    """asyncTP_llama3_h100_2025-06: 70B on 256 GPUs (FSDP 32, local batch 16, full AC), 8B on
    64 (FSDP 8, local batch 12, per-op SAC), TP 8, compile, bf16 / float8, vanilla / async TP."""
    mine = [c for c in cases if c.source == "TORCHTITAN-ASYNCTP"]
    assert len(mine) == 8
    for case in mine:
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None
        big = "-70B-" in case.id
        dp, local, recompute = (32, 16, "full") if big else (8, 12, "selective")
        got = (parallel.tp, parallel.dp, parallel.micro_batch, parallel.global_batch)
        assert got == (8, dp, local, local * dp) and parallel.sp and parallel.zero == 3
        assert str(parallel.recompute) == recompute and model.seq_len == 8192
        assert model.layers == (80 if big else 32)
        assert str(parallel.precision) == ("fp8" if "-FP8-" in case.id else "bf16")
        options = dict(case.framework_options)
        assert options.get("tp_comm_overlap", False) == case.id.endswith("-ASYNC")
        assert options["fused_elementwise"] and options["loss_fp32_buffers"] == 0


def test_the_26_04_rows_take_their_26_02_twins_setup() -> None:
    """The Megatron-Bridge 26.04 tables' rows whose 26.02 twins are here state the same layouts
    (GPT-OSS 120B on DGX-B200 at EP 8 instead of 64; Qwen3-235B on DGX-B300 at MBS 2 without the
    26.02 table's VP 4): each is set up as its twin, except that the B300 twin's recipe ran
    the expert all-to-all overlap its VP 4 was for (moe_comm_overlap; the 26.04 recipe has
    neither)."""
    by_id = {c.id: c for c in package_cases()}
    # (the NVFP4 rows of published_runs_no_setup.csv have no setup: inferred, not twins)
    new = sorted(i for i in by_id if "26.04" in i and not by_id[i].source.startswith("INFERRED"))
    assert len(new) == 11
    for row_id in new:
        case, twin = by_id[row_id], by_id[row_id.replace("26.04", "26.02")]
        assert case.parallel is not None and twin.parallel is not None
        assert case.source == twin.source and not case.in_sample
        options, twin_options = dict(case.framework_options), dict(twin.framework_options)
        if row_id.startswith("MBM-B300-"):
            assert (options["moe_comm_overlap"], twin_options["moe_comm_overlap"]) == (False, True)
            twin_options["moe_comm_overlap"] = False
        assert case.model == twin.model and options == twin_options
        if row_id.startswith("MBM-B200-"):
            assert (case.parallel.ep, twin.parallel.ep) == (8, 64), row_id
            assert replace(case.parallel, ep=64) == twin.parallel
        elif row_id.startswith("MBM-B300-"):
            assert (case.parallel.micro_batch, case.parallel.vpp, twin.parallel.vpp) == (2, 1, 4)
            unchanged = replace(
                case.parallel, micro_batch=1, vpp=4, schedule=twin.parallel.schedule
            )
            assert unchanged == twin.parallel, row_id
        else:
            assert case.parallel == twin.parallel, row_id


def test_the_mlperf_gpt3_rows_take_the_submissions_layout(cases: list[Case]) -> None:
    """NVIDIA's MLPerf GPT-3 175B submissions: config_<system>_<nodes>x8x<MINIBS>x<TP>x<PP>
    states TP, PP and the per-replica batch MINIBS (GBS = MINIBS x DP, conf/custom.yaml),
    INTERLEAVED_PIPELINE and MICRO_BATCH_SIZE; the rate is GBS x 2048 tokens per step time."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    layouts = {  # GPUs, MINIBS, TP, PP, VP, MBS (the configs; the 512-GPU run's MINIBS is 144:
        # its log's gradient_accumulation_steps 72 x MBS 2)
        "MLPERF-GPT3-H100-V41-256": (256, 256, 4, 8, 6, 2),
        "MLPERF-GPT3-H100-V40-512": (512, 144, 4, 8, 4, 2),
        "MLPERF-GPT3-H100-V40-10752": (10752, 6, 4, 6, 8, 1),
        "MLPERF-GPT3-H100-V40-11616": (11616, 6, 4, 6, 8, 1),
        "MLPERF-GPT3-H100-V41-512": (512, 128, 4, 8, 6, 2),
        "MLPERF-GPT3-B200-V41-64": (64, 1024, 4, 8, 6, 2),
    }
    mine = {c.id: c for c in cases if c.source.startswith("MLPERF-GPT3-")}
    assert set(mine) == set(layouts)
    for row_id, (gpus, minibs, tp, pp, vpp, mbs) in layouts.items():
        case, row = mine[row_id], rows[row_id]
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None
        dp = gpus // (tp * pp)
        assert (parallel.tp, parallel.pp, parallel.vpp, parallel.micro_batch) == (tp, pp, vpp, mbs)
        assert parallel.dp == dp and parallel.global_batch == minibs * dp, row_id
        assert model.layers % (pp * vpp) == 0 and model.seq_len == 2048 and not model.dropout
        tokens = model.seq_len * parallel.global_batch / float(row["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(row["tokens_per_s_per_gpu"]), rel=0.001), row_id
        assert parallel.sp and parallel.zero == 1 and not parallel.grad_fp32
        assert str(parallel.precision) == "fp8" and str(parallel.fp8_recipe) == "delayed"
        options = dict(case.framework_options)
        assert options["distributed_fused_adam"] == "fp32" and not options["ub_bulk_sm_margin"]
        assert "attention_kernel" not in options  # TE's cuDNN fused attention (the default)


def test_the_mlperf_llama_405b_rows_take_the_submissions_layout(cases: list[Case]) -> None:
    """MLPerf v5.0 Llama 3.1 405B on H100: TP 8, PP 8, CP 2, VP 8, MBS 1; 'global batch size will
    be DGXNNODES*MINIBS/16' (config_DGXH100_1024x8x24xtp8pp8cp2.sh); ASYM_PP_EMBED / _LOSS give
    the embedding and the loss a layer's slot: 64 chunks of 2 over 126 layers + 2."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    layouts = {"MLPERF-L405B-H100-V50-512": (64, 288), "MLPERF-L405B-H100-V50-2048": (256, 72),
               "MLPERF-L405B-H100-V50-2432": (304, 64), "MLPERF-L405B-H100-V50-2560": (320, 56),
               "MLPERF-L405B-H100-V50-8192": (1024, 24)}  # fmt: skip
    mine = {c.id: c for c in cases if c.source == "MLPERF-L405B-H100"}
    assert set(mine) == set(layouts)
    for row_id, (nodes, minibs) in layouts.items():
        case, row = mine[row_id], rows[row_id]
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None
        gpus = 8 * nodes
        assert (parallel.tp, parallel.pp, parallel.cp, parallel.vpp) == (8, 8, 2, 8)
        assert parallel.dp == gpus // 128 and parallel.global_batch == nodes * minibs // 16
        chunks = parallel.pp_layers
        assert len(chunks) == parallel.pp * parallel.vpp and sum(chunks) == model.layers == 126
        assert chunks[0] == chunks[-1] == 1 and set(chunks[1:-1]) == {2}
        tokens = model.seq_len * parallel.global_batch / float(row["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(row["tokens_per_s_per_gpu"]), rel=0.001), row_id
        assert str(parallel.fp8_recipe) == "delayed" and not parallel.grad_fp32
        assert dict(case.framework_options)["fp8_param_gather"]


def test_the_third_party_b200_rows_differ_only_in_precision(cases: list[Case]) -> None:
    """vuiseng9/nemo-perf-nvfp4: one 8xB200 node, GBS 128, MBS 2, sequence 8192, TP/PP/CP 1;
    BF16, FP8 delayed scaling ('--fp8_recipe ds') and MXFP8 of NeMo's pretrain_llama3_8b.py."""
    mine = {c.id.rsplit("-", 1)[-1]: c for c in cases if c.source == "NEMOPERF-B200"}
    assert set(mine) == {"BF16", "FP8DS", "MXFP8"}
    layouts = set()
    for name, case in mine.items():
        parallel = case.parallel
        assert parallel is not None and case.model is not None and case.model.seq_len == 8192
        layouts.add((parallel.tp, parallel.pp, parallel.cp, parallel.dp, parallel.micro_batch,
                     parallel.global_batch, parallel.zero, str(parallel.recompute)))  # fmt: skip
        fp8 = name != "BF16"
        assert str(parallel.precision) == ("fp8" if fp8 else "bf16"), name
        assert dict(case.framework_options).get("fp8_param_gather", False) == fp8, name
        if fp8:
            assert str(parallel.fp8_recipe) == {"FP8DS": "delayed", "MXFP8": "mxfp8"}[name]
    assert layouts == {(1, 1, 1, 8, 2, 128, 1, "none")}


def test_the_mlperf_llama_405b_gb200_rows_take_the_submissions_layout(cases: list[Case]) -> None:
    """MLPerf v5.0 Llama 3.1 405B on GB200 (4 GPUs per tray; NVIDIA's Tyche and CoreWeave's
    Carina): TP 4, PP 8, CP 2, VP 8, MBS 1, MINIBS sequences per data-parallel replica (the
    config names' third field), the H100 rows' pipeline split; the ranks in Megatron-Core's
    'tp-cp-ep-pp-dp' order on the runs whose config sets TP_PP_DP_MAPPING=True (all but the
    256-GPU one; s23 mlperfaudit)."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    mine = {c.id: c for c in cases if c.source == "MLPERF-L405B-GB200"}
    minibs = {"MLPERF-L405B-GB200-V50-256": 112, "MLPERF-L405B-GB200-V50-512": 112,
              "MLPERF-L405B-GB200-CARINA-V50-512": 112, "MLPERF-L405B-GB200-CARINA-V50-1536": 48,
              "MLPERF-L405B-GB200-CARINA-V50-2496": 32}  # fmt: skip
    assert set(mine) == set(minibs)
    for row_id, case in mine.items():
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None
        gpus = int(row_id.rsplit("-", 1)[-1])
        assert (parallel.tp, parallel.pp, parallel.cp, parallel.vpp) == (4, 8, 2, 8)
        assert parallel.dp == gpus // 64 and parallel.global_batch == minibs[row_id] * parallel.dp
        assert sum(parallel.pp_layers) == model.layers and len(parallel.pp_layers) == 64
        tokens = model.seq_len * parallel.global_batch / float(rows[row_id]["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(rows[row_id]["tokens_per_s_per_gpu"]), rel=0.001)
        assert str(parallel.fp8_recipe) == "delayed"
        dp_last = row_id != "MLPERF-L405B-GB200-V50-256"
        assert parallel.axis_order == (
            ("dp", "pp", "ep", "cp", "tp") if dp_last else ("pp", "dp", "ep", "cp", "tp")
        ), row_id


def test_the_bloom_row_takes_the_tr11_layout(cases: list[Case]) -> None:
    """BigScience tr11-176B-ml (bigscience-workshop/bigscience train/tr11-176B-ml/README.md):
    TP 4, PP 12, DP 8, MBS 2, GBS 2048, sequence 2048, BF16_Optimizer's ZeRO-1, full
    checkpointing, the embedding counted as a layer at both pipeline ends; the rate is the
    logged iteration time's (104.70 s)."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    [case] = [c for c in cases if c.source == "BLOOM"]
    parallel, model = case.parallel, case.model
    assert parallel is not None and model is not None and not case.in_sample
    assert (parallel.tp, parallel.pp, parallel.dp, parallel.micro_batch) == (4, 12, 8, 2)
    assert parallel.global_batch == 2048 and model.seq_len == 2048 and model.layers == 70
    assert parallel.zero == 1 and str(parallel.recompute) == "full"
    assert case.framework == "deepspeed"
    assert str(model.position) == "none" and model.core_attention == "unfused"
    tokens = 2048 * 2048 / float(rows[case.id]["iter_time_s"]) / 384
    assert tokens == pytest.approx(float(rows[case.id]["tokens_per_s_per_gpu"]), rel=0.001)


def test_the_llama3_405b_rows_are_reported_with_their_reason() -> None:
    """Llama 3 Table 4's 8K rows: the derived rate is TFLOPs/GPU over PaLM's 6N + 12·L·H·Q·T
    model FLOPs per token; the rows are reported as not evaluated (Meta's tunable interleaved
    schedule), never dropped."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT) if r["id"].startswith("LLAMA3-405B-")}
    assert set(rows) == {"LLAMA3-405B-8192", "LLAMA3-405B-16384"}
    per_token = 6 * 405.9e9 + 12 * 126 * 16384 * 8192
    for row in rows.values():
        derived = float(row["tflops_per_gpu"]) * 1e12 / per_token
        assert derived == pytest.approx(float(row["tokens_per_s_per_gpu"]), abs=0.05)
        assert int(row["dp"]) * int(row["tp"]) * int(row["pp"]) == int(row["num_gpus"])
        assert int(row["global_batch_seqs"]) * int(row["seq_len"]) == 2**24
    reported = {c.id: c for c in package_cases() if c.source == "LLAMA3-405B"}
    assert set(reported) == set(rows)
    assert all("tunable" in c.reason and c.parallel is None for c in reported.values())
