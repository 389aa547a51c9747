"""The held-out DGX Cloud Benchmarking rows of ``published_runs_held_out.csv`` (the Llama 3.1,
Nemotron-4, GPT3 175B, Grok-1 and DeepSeek-V3 recipes of 24.11 to 25.05): each row takes its
recipe's layout, batch and settings, and its twin's setup where a later release repeats it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_explore.validation.setups import Case
from tests.explore.held_out import HELD_OUT, csv_rows, held_out_cases


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return held_out_cases()


def test_dgx_cloud_rows_weak_scale_one_layout_per_model(cases: list[Case]) -> None:
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    by_id = {c.id: c for c in cases if c.source in ("DGXC-H100-BF16", "DGXC-H100-FP8")}
    assert len(by_id) == 60
    # the READMEs' (TP, PP, CP, VP, MBS) per model, and the full model's layer count
    layouts = {
        "8B": ((1, 1, 2, 1, 1), 32),
        "70B": ((4, 4, 2, 5, 1), 80),
        "405B": ((8, 9, 2, 7, 1), 126),
        "15B": ((4, 1, 1, 1, 4), 32),
        "340B": ((8, 8, 1, 12, 1), 96),
    }
    for row_id, case in by_id.items():
        parallel, model, row = case.parallel, case.model, rows[row_id]
        assert parallel is not None and model is not None
        gpus, gbs = int(row["num_gpus"]), int(row["global_batch_seqs"])
        # the table's throughput is sequence x GBS / step time, over all GPUs
        tokens = model.seq_len * gbs / float(row["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(row["tokens_per_s_per_gpu"]), rel=0.02), row_id
        assert parallel.dp * parallel.tp * parallel.pp * parallel.cp == gpus
        layout, layers = layouts[row_id.split("-")[-2]]
        if model.layers == layers:  # the full models (the 405B proxies differ in pp)
            got = (parallel.tp, parallel.pp, parallel.cp, parallel.vpp, parallel.micro_batch)
            assert got == layout, row_id
        # the 340B recipe's own config (nemotron4-340b-synth.yaml) recomputes core attention
        recompute = "selective" if row_id.split("-")[-2] == "340B" else "none"
        assert parallel.zero == 1 and str(parallel.recompute) == recompute, row_id
        assert parallel.sp == (parallel.tp > 1) and str(parallel.cp_style) == "ring"
        assert str(parallel.precision) == ("fp8" if "-FP8-" in row_id else "bf16")
        # the recipes' memory settings: configure.sh's +model.fp8_params=$FP8_ENABLED, and the
        # 340B config's distributed_fused_adam with a bf16 state (nemotron4-340b-synth.yaml)
        options = dict(case.framework_options)
        assert options.get("fp8_param_gather", False) == ("-FP8-" in row_id), row_id
        adam = "bf16" if row_id.split("-")[-2] == "340B" else "off"
        assert options.get("distributed_fused_adam", "off") == adam, row_id
    # the 405B recipe's GPT-2 BPE proxy tokenizer; Nemotron-4's 256k vocabulary and 4k sequences
    vocab = {i.split("-")[-2]: c.model.vocab for i, c in by_id.items() if c.model is not None}
    assert vocab == {"8B": 128256, "70B": 128256, "405B": 50257, "15B": 256000, "340B": 256000}


def test_dgx_cloud_gpt3_rows_take_the_recipes_layout_and_settings(cases: list[Case]) -> None:
    """nemo_megatron/README_175b.md (GSW 24.11): TP 4, PP 8, VP 12, MBS 1, sequence 2048, GBS
    2 per GPU; gpt3_175b_hydra.yaml and launch.sh at the same commit give the rest."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    mine = [c for c in cases if c.source in ("DGXC-GPT3-BF16", "DGXC-GPT3-FP8")]
    assert len(mine) == 10
    for case in mine:
        parallel, model, row = case.parallel, case.model, rows[case.id]
        assert parallel is not None and model is not None
        gpus = int(row["num_gpus"])
        assert parallel.global_batch == 2 * gpus and model.seq_len == 2048
        # the table's throughput is sequence x GBS / step time, over all GPUs
        tokens = model.seq_len * parallel.global_batch / float(row["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(row["tokens_per_s_per_gpu"]), rel=0.005), case.id
        got = (parallel.tp, parallel.pp, parallel.vpp, parallel.micro_batch, parallel.dp)
        assert got == (4, 8, 12, 1, gpus // 32), case.id
        assert (model.layers, model.hidden, model.heads, model.vocab) == (96, 12288, 96, 50257)
        assert parallel.sp and parallel.zero == 1 and str(parallel.recompute) == "none"
        assert not parallel.grad_fp32  # optim.grad_sync_dtype bf16
        fp8 = case.source.endswith("FP8")
        assert str(parallel.precision) == ("fp8" if fp8 else "bf16"), case.id
        options = dict(case.framework_options)
        assert options["attention_kernel"] == "fa2"  # launch.sh: NVTE_FUSED_ATTN=0
        assert options["distributed_fused_adam"] == "fp32" and not options["ub_bulk_sm_margin"]
        assert options.get("fp8_param_gather", False) == fp8, case.id
        if fp8:
            assert str(parallel.fp8_recipe) == "delayed"


def test_the_dgx_cloud_25_02_rows_take_their_earlier_twins_setup(cases: list[Case]) -> None:
    """GSW 25.02 (dgxc-benchmarking 8f5cbb37, NeMo 24.12) republished the Llama 3.1 and GPT3 175B
    tables with the 24.09 / 24.11 tables' layouts: each row is set up as its earlier twin, apart
    from the GPT3 recipe's attention (configure.sh NVTE_FUSED_ATTN=1, where 24.11 exported 0)."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    by_id = {c.id: c for c in cases}
    new = sorted(i for i in by_id if i.startswith("DGXC2502-"))
    assert new == sorted(r for r in rows if r.startswith("DGXC2502-"))  # every row is a case
    assert any("-GROK1-" in i for i in new) and any("-LLAMA3.1-" in i for i in new)
    for row_id in new:
        case = by_id[row_id]
        twin = by_id[row_id.replace("DGXC2502-", "DGXC-")]
        assert case.parallel == twin.parallel and case.model == twin.model, row_id
        assert not case.in_sample and case.system == twin.system == "h100-80gb"
        for column in ("num_gpus", "global_batch_seqs", "tp", "pp", "cp", "vpp", "layers"):
            assert rows[row_id][column] == rows[twin.id][column], (row_id, column)
        assert case.measured != twin.measured, row_id  # a second measurement, not a copy
        options, earlier = dict(case.framework_options), dict(twin.framework_options)
        if "-GPT3-" in row_id:
            assert (options.pop("attention_kernel"), earlier.pop("attention_kernel")) == (
                "cudnn",
                "fa2",
            )
        assert options == earlier, row_id


def test_the_dgx_cloud_grok1_rows_take_the_recipes_layout_and_moe_setup(cases: list[Case]) -> None:
    """Grok-1 314B (dgxc-benchmarking grok1/README_314b.md at 35a9aecc and 8f5cbb37; the
    per-scale branches of grok1/configure.sh): TP 4, EP 2/4/8, CP 2 and sequence 8192 from 64
    GPUs, PP 1-8 with VP 8 from 128, proxies of 2-32 layers below 512 GPUs, GBS 1024 (2048 and
    4096 at 1024 and 2048 GPUs); 8 experts, top-2, FlashAttention-2 (NVTE_FUSED_ATTN=0)."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    mine = [c for c in cases if "-GROK1-" in c.id and not c.id.startswith("DGXC2505-")]
    earlier = sorted(i for i in rows if "-GROK1-" in i and not i.startswith("DGXC2505-"))
    assert sorted(c.id for c in mine) == earlier
    layout = {  # GPUs: (layers, seq, pp, cp, ep, vpp, gbs), configure.sh per node count
        8: (2, 4096, 1, 1, 2, 1, 1024), 16: (4, 4096, 1, 1, 4, 1, 1024),
        32: (4, 4096, 1, 1, 8, 1, 1024), 64: (8, 8192, 1, 2, 8, 1, 1024),
        128: (16, 8192, 2, 2, 8, 8, 1024), 256: (32, 8192, 4, 2, 8, 8, 1024),
        512: (64, 8192, 8, 2, 8, 8, 1024), 1024: (64, 8192, 8, 2, 8, 8, 2048),
        2048: (64, 8192, 8, 2, 8, 8, 4096),
    }  # fmt: skip
    assert {int(rows[c.id]["num_gpus"]) for c in mine} == set(layout)
    for case in mine:
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None and not case.in_sample
        gpus = int(rows[case.id]["num_gpus"])
        layers, seq, pp, cp, ep, vpp, gbs = layout[gpus]
        got = (model.layers, model.seq_len, parallel.pp, parallel.cp, parallel.ep, parallel.vpp)
        assert got == (layers, seq, pp, cp, ep, vpp), case.id
        assert parallel.tp == parallel.expert_tp == 4 and parallel.global_batch == gbs
        assert parallel.dp * parallel.tp * parallel.pp * parallel.cp == gpus
        assert parallel.expert_dp == gpus // (4 * pp * ep)  # experts folded over tp·cp·dp
        assert (model.num_experts, model.top_k, model.expert_ffn) == (8, 2, 32768)
        assert (model.hidden, model.heads, model.kv_heads, model.vocab) == (6144, 48, 8, 128256)
        # grok1_314b.yaml (dgxc-benchmarking 35a9aecc): moe_expert_capacity_factor 1.0 with
        # moe_pad_expert_input_to_capacity, drop-and-pad to capacity (not dropless)
        assert model.capacity_factor == 1.0, case.id
        assert parallel.sequence_parallel and not parallel.grad_fp32 and parallel.zero == 1
        options = dict(case.framework_options)
        assert options["attention_kernel"] == "fa2"
        assert options.get("fp8_param_gather", False) == ("-FP8-" in case.id), case.id
        tokens = seq * gbs / float(rows[case.id]["iter_time_s"]) / gpus
        # the published throughput, within 1 % of SeqLen·GBS/step (25.02 FP8 1024: 0.5 %)
        assert tokens == pytest.approx(float(rows[case.id]["tokens_per_s_per_gpu"]), rel=0.01)


def test_the_dgx_cloud_25_05_grok1_rows_take_the_launch_scripts_layout(cases: list[Case]) -> None:
    """GSW 25.05.04 (dgxc-benchmarking 1f6d9f40 grok1/README.md and launch.sh, NeMo 2.0): the
    full 64-layer model, GBS 2 per GPU; H100 TP 4, PP 8, CP 2, EP 8, ETP 1, VP 8; GB200 TP 4,
    EP 8, ETP 4 (gb200-nvl72). The 512-GB200 throughput cells are SeqLen·512/step, half the
    layout's GBS: those rows carry SeqLen·GBS/step. FP8: delayed scaling with FP8 parameters; the
    script's userbuffers config has no SM margin on its bulk overlaps."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    mine = [c for c in cases if c.id.startswith("DGXC2505-GROK1-")]
    assert sorted(c.id for c in mine) == sorted(i for i in rows if i.startswith("DGXC2505-GROK1-"))
    for case in mine:
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None and not case.in_sample
        gpus, h100 = int(rows[case.id]["num_gpus"]), "-H100-" in case.id
        got = (parallel.tp, parallel.pp, parallel.cp, parallel.ep, parallel.expert_tp, parallel.vpp)
        assert got == ((4, 8, 2, 8, 1, 8) if h100 else (4, 1, 1, 8, 4, 1)), case.id
        assert case.system == ("h100-80gb" if h100 else "gb200-nvl72")
        assert parallel.global_batch == 2 * gpus and model.layers == 64 and model.seq_len == 8192
        moe = (model.num_experts, model.top_k, model.expert_ffn, model.vocab)
        assert moe == (8, 2, 32768, 128256), case.id
        # pretrain_grok1_314b.py's MegatronTokenDropCallback: capacity 1.0, padded to capacity
        assert model.capacity_factor == 1.0, case.id
        options, fp8 = dict(case.framework_options), "-FP8-" in case.id
        assert options.get("fp8_param_gather", False) == fp8
        # bf16_with_fp8_mixed(): delayed scaling; pretrain_grok1_314b.py names
        # userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192 on every GPU and dtype, whose bulk
        # overlaps have set_sm_margin=False
        assert options["ub_bulk_sm_margin"] is False, case.id
        assert not fp8 or str(parallel.fp8_recipe) == "delayed"
        tokens = 8192 * parallel.global_batch / float(rows[case.id]["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(rows[case.id]["tokens_per_s_per_gpu"]), rel=0.002)


def test_the_dgx_cloud_25_05_deepseek_rows_take_the_scripts_pipeline_split(
    cases: list[Case],
) -> None:
    """GSW 25.05.04 DeepSeek-V3 BF16 (dgxc-benchmarking 1f6d9f40 deepseek_v3/pretraining/launch.sh,
    NeMo's pretrain_deepseek_v3.py): TP 2, ETP 1, GBS 8 per GPU; H100 PP 8 (512) / 16 (1024),
    EP 64, recompute mla_up_proj; GB200 PP 4, EP 32 (128) / 64, recompute core_attn; decoder
    layers per stage 64/PP with one fewer on the first stage and two fewer on the last."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    mine = [c for c in cases if c.id.startswith("DGXC2505-DSV3-")]
    assert sorted(c.id for c in mine) == sorted(i for i in rows if i.startswith("DGXC2505-DSV3-"))
    for case in mine:
        parallel, model = case.parallel, case.model
        assert parallel is not None and model is not None and not case.in_sample
        gpus, h100 = int(rows[case.id]["num_gpus"]), "-H100-" in case.id
        pp = (8 if gpus == 512 else 16) if h100 else 4
        ep = 64 if h100 or gpus > 128 else 32
        got = (parallel.tp, parallel.pp, parallel.ep, parallel.expert_tp, parallel.global_batch)
        assert got == (2, pp, ep, 1, 8 * gpus), case.id
        middle = 64 // pp
        assert (parallel.pp_first_layers, parallel.pp_last_layers) == (middle - 1, middle - 2)
        assert middle - 1 + (pp - 2) * middle + middle - 2 == model.layers == 61
        assert parallel.recompute_modules == (("mla_up_proj",) if h100 else ("core_attn",))
        assert (model.num_experts, model.top_k, model.mtp_layers, model.seq_len) == (
            256,
            8,
            1,
            4096,
        )
        # pretrain_deepseek_v3.py (USE_TOKEN_DROP) adds NeMo's MegatronTokenDropCallback:
        # moe_expert_capacity_factor 1.0 with moe_pad_expert_input_to_capacity (not dropless)
        assert model.capacity_factor == 1.0, case.id
        # NeMo's DeepSeekV3Config make_vocab_size_divisible_by 1280, padded x TP by
        # GPTConfig.configure_model (get_vocab_size): 129280 -> 130560 at TP 2
        assert parallel.vocab_divisible_by == 1280, case.id
        assert parallel.padded_vocab(model) == 130560, case.id
        assert case.system == ("h100-80gb" if h100 else "gb200-nvl72")
        tokens = 4096 * parallel.global_batch / float(rows[case.id]["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(rows[case.id]["tokens_per_s_per_gpu"]), rel=0.002)


def test_the_dgx_cloud_25_05_dense_rows_take_their_25_04_twins_setup(cases: list[Case]) -> None:
    """GSW 25.05.04's Nemotron-4 and Llama 3.1 405B tables (dgxc-benchmarking 1f6d9f40
    nemotron/ and llama3.1/ README.md and launch.sh, NeMo 25.04): set up as the GSW 25.04 rows of
    the same recipes (Nemotron-4 15B-16 / 340B-256, Llama 3.1 405B-512); on GB200 the 340B at TP 8,
    PP 4, VP 12 with GBS GPUs/4 (weak) or 512 (strong scaling), the 405B at TP 4, GBS GPUs/2, both
    with the b200 userbuffers configs NeMo's pretrain_nemotron4_340b.py / pretrain_llama31_405b.py
    name on gb200 (bulk overlaps set_sm_margin=False: ub_bulk_sm_margin false)."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    by_id = {c.id: c for c in cases}
    prefixes = ("DGXC2505-H100-", "DGXC2505-GB200-")
    new = sorted(i for i in by_id if i.startswith(prefixes))
    assert new and new == sorted(r for r in rows if r.startswith(prefixes))
    twins = {"15B": "NEMOTRON4-15B-16", "340B": "NEMOTRON4-340B-256", "405B": "LLAMA3.1-405B-512"}
    for row_id in new:
        case = by_id[row_id]
        precision, size = row_id.split("-")[2], row_id.split("-")[4]
        twin = by_id[f"DGXC2504-H100-{precision}-{twins[size]}"]
        assert case.parallel is not None and twin.parallel is not None and case.model is not None
        assert case.model == twin.model, row_id
        gpus = int(rows[row_id]["num_gpus"])
        # the loss: NeMo 25.04's performance scripts set cross_entropy_fusion_impl 'te', the
        # 25.02 twin keeps GPTConfig's native fused loss; every other option is the twin's
        mine, theirs = dict(case.framework_options), dict(twin.framework_options)
        assert mine.pop("te_cross_entropy") is True and "native_cross_entropy" not in mine
        assert theirs.pop("native_cross_entropy") is True and "te_cross_entropy" not in theirs
        if "-H100-" in row_id:
            assert case.parallel == twin.parallel and case.system == "h100-80gb", row_id
            if row_id == "DGXC2505-H100-FP8-LLAMA3.1-405B-512":
                # the FP8 reduce-scatter buffers of userbuffers_fp8_h100_h16384_tp8_cp2 (fp8_buf),
                # which TE honours again from 2.2 (#1633, NeMo 25.04), not in the twin's 25.02
                for option in ("ub_proj_fprop_fp8_buf", "ub_fc2_fprop_fp8_buf"):
                    assert mine.pop(option) is True and option not in theirs
            assert mine == theirs
            continue
        assert case.system == "gb200-nvl72"
        # the scripts' GB200 userbuffers configs (userbuffers_{bf16,fp8}_b200_h18432_tp8_... for
        # the 340B, _b200_h16384_tp4_cp2_... for the 405B): bulk overlaps without an SM margin;
        # forward reduce-scatters as ring exchanges where the config names them (s12 ubrs): the
        # FP8 configs both, the BF16 340B proj_fprop only, the BF16 405B none
        ring = "ring_exchange"
        methods = {
            ("FP8", "340B"): {"ub_proj_fprop_method": ring, "ub_fc2_fprop_method": ring},
            ("FP8", "405B"): {"ub_proj_fprop_method": ring, "ub_fc2_fprop_method": ring},
            ("BF16", "340B"): {"ub_proj_fprop_method": ring},
        }.get((precision, size), {})
        assert mine == theirs | {"ub_bulk_sm_margin": False} | methods, row_id
        if size == "405B":
            got = (case.parallel.tp, case.parallel.pp, case.parallel.cp, case.parallel.vpp)
            assert got == (4, 8, 2, 8) and case.parallel.global_batch == gpus // 2, row_id
            changed = {"tp": 8, "dp": twin.parallel.dp, "global_batch": 256}
            assert replace(case.parallel, **changed) == twin.parallel
            continue
        got = (case.parallel.tp, case.parallel.pp, case.parallel.vpp, case.parallel.dp)
        assert got == (8, 4, 12, gpus // 32), row_id
        gbs = 512 if row_id.endswith("-STRONG") else gpus // 4
        assert case.parallel.global_batch == gbs
        assert replace(case.parallel, pp=8, dp=twin.parallel.dp, global_batch=64) == twin.parallel


def test_the_dgx_cloud_24_11_nemotron_rows_take_their_later_twins_setup(cases: list[Case]) -> None:
    """GSW 24.11's own Nemotron-4 15B table (dgxc-benchmarking 35a9aecc, NeMo 24.09): the layouts
    of the DGXC-H100-* 15B rows (the 0b71cfda table), set up as those twins."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    by_id = {c.id: c for c in cases}
    new = sorted(i for i in by_id if i.startswith("DGXC2411-"))
    assert new and new == sorted(r for r in rows if r.startswith("DGXC2411-"))
    for row_id in new:
        case, twin = by_id[row_id], by_id[row_id.replace("DGXC2411-", "DGXC-")]
        assert case.parallel == twin.parallel and case.model == twin.model, row_id
        assert case.framework_options == twin.framework_options and not case.in_sample
        for column in ("num_gpus", "global_batch_seqs", "tp", "pp", "micro_batch", "layers"):
            assert rows[row_id][column] == rows[twin.id][column], (row_id, column)
    # a second measurement, not a copy (the FP8 512-GPU step is 2.12 s in both tables)
    earlier = {i: by_id[i.replace("DGXC2411-", "DGXC-")].measured for i in new}
    assert sum(by_id[i].measured != earlier[i] for i in new) > 1


def test_the_dgx_cloud_25_04_rows_take_the_readmes_layout_table(cases: list[Case]) -> None:
    """GSW 25.04 (dgxc-benchmarking 741c8860, NeMo 2.0 on nemo:25.02.01): llama3.1/README.md's
    layout table gives (Layers, TP, PP, CP, VP) per model, precision and GPU count, GBS 16 / 2 /
    0.5 per GPU (8B / 70B / 405B; the 405B proxies 64, 64, 128 on 32, 64, 128 GPUs)."""
    rows = {r["id"]: r for r in csv_rows(HELD_OUT)}
    mine = [c for c in cases if c.source in ("DGXC2504-H100-BF16", "DGXC2504-H100-FP8")]
    assert len(mine) == 58
    nemotron = [c for c in mine if "-NEMOTRON4-" in c.id]
    assert len(nemotron) == 24
    for case in nemotron:
        # nemotron/launch.sh: 15B TP 2, MBS 2, GBS 4 per GPU; 340B TP 8, PP 8, VP 12 (the
        # layout table's "VP NA" corrected from it), GBS a quarter of the GPUs; 4k sequences
        assert case.parallel is not None and case.model is not None
        gpus = int(rows[case.id]["num_gpus"])
        small = "-15B-" in case.id
        got = (case.parallel.tp, case.parallel.pp, case.parallel.vpp, case.parallel.micro_batch)
        assert got == ((2, 1, 1, 2) if small else (8, 8, 12, 1)), case.id
        assert case.parallel.global_batch == (4 * gpus if small else gpus // 4)
        assert case.model.seq_len == 4096 and case.model.vocab == 256000
    mine = [c for c in mine if "-LLAMA3.1-" in c.id]
    assert len(mine) == 34
    proxies = {32: (8, 1, 1, 64), 64: (30, 4, 8, 64), 128: (62, 4, 8, 128)}
    for case in mine:
        parallel, model, row = case.parallel, case.model, rows[case.id]
        assert parallel is not None and model is not None
        size, gpus = case.id.split("-")[-2], int(row["num_gpus"])
        fp8 = case.source.endswith("FP8")
        if size == "8B":
            layout, batch = (32, 1, 1, 2, 1), 16 * gpus
        elif size == "70B":
            layout = (80, 4, 8, 1, 5) if fp8 else (80, 4, 4, 2, 5)
            batch = 2 * gpus
        else:
            layers, pp, vp, batch = proxies.get(gpus, (126, 8, 8, gpus // 2))
            layout = (layers, 8, pp, 2, vp)
        got = (model.layers, parallel.tp, parallel.pp, parallel.cp, parallel.vpp)
        assert got == layout and parallel.global_batch == batch, case.id
        assert parallel.micro_batch == 1 and model.seq_len == 8192 and model.vocab == 128256
        # the table's throughput is sequence x GBS / step time, over all GPUs
        tokens = model.seq_len * batch / float(row["iter_time_s"]) / gpus
        assert tokens == pytest.approx(float(row["tokens_per_s_per_gpu"]), rel=0.005), case.id
        assert not parallel.grad_fp32 and parallel.sp == (parallel.tp > 1)
        assert str(parallel.precision) == ("fp8" if fp8 else "bf16")
        if parallel.pp > 1 and model.layers % (parallel.pp * parallel.vpp):
            # the embedding and the loss each take a layer's slot of the pipeline split
            assert parallel.pp_layers is not None and sum(parallel.pp_layers) == model.layers
            assert len(parallel.pp_layers) == parallel.pp * parallel.vpp, case.id
        options = dict(case.framework_options)
        assert options.get("fp8_param_gather", False) == fp8, case.id
        assert options.get("ub_bulk_sm_margin", True) == (size == "8B"), case.id
