"""The Megatron-Bridge MoE rows in ``stage validate`` (issues #11, #12): per-row model bases,
the recipe's framework options, and Qwen3-235B's folded expert parallelism (held out)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_explore.validation.run import describe, evaluate_cases
from stage_explore.validation.setups import data_dir, load_cases, parse_backend_key
from tests.explore.package_cases import package_cases

QWEN_ROW = "MBRIDGE25.11-DGX-H100-Qwen3_235B_a22B-256"
DEEPSEEK_ROW = "MBRIDGE25.09-DGX-H100-DeepSeekV3-1024"


def test_the_qwen3_row_names_its_own_base_and_megatron_bridge_layout() -> None:
    (case,) = [c for c in package_cases() if c.id == QWEN_ROW]
    assert case.reason == "" and not case.in_sample
    assert case.model is not None and case.parallel is not None
    base = get_flavor("qwen3-235b-a22b")
    assert (case.model.num_experts, case.model.top_k, case.model.expert_ffn) == (128, 8, 1536)
    assert case.model.qk_norm == base.qk_norm and case.model.layers == 94
    p = case.parallel
    assert (p.tp, p.pp, p.vpp, p.dp, p.ep, p.etp, p.sp) == (2, 8, 4, 16, 32, 1, True)
    assert case.backend_key == (
        "megatron-core+fp8_param_gather=true,moe_comm_overlap=true,te_cross_entropy=true,"
        "tp_comm_overlap=false"
    )
    assert str(p.fp8_recipe) == "tensorwise"  # FP8-CS: current scaling
    assert not p.grad_fp32  # set_qwen3_common_configs: grad_reduce_in_fp32 False
    # the H100 recipe's switches (bf16_with_fp8_current_scaling_mixed: fp8_param_gather)
    options = {
        "fp8_param_gather": True,
        "moe_comm_overlap": True,
        "te_cross_entropy": True,
        "tp_comm_overlap": False,
    }
    assert parse_backend_key(case.backend_key) == ("megatron-core", options)


def test_the_qwen3_row_is_evaluated_with_one_all_to_all_over_the_folded_group() -> None:
    (case,) = [c for c in package_cases() if c.id == QWEN_ROW]
    (result,) = evaluate_cases([case])
    assert result.evaluated and result.predicted > 0
    assert result.case.parallel is not None and result.case.parallel.expert_dp == 1


def test_the_deepseek_row_runs_megatron_bridges_layout_with_its_mtp_module() -> None:
    """pp_layout 'Et|(tt|)*30mL': one layer on the first chunk, two on each of the next 30, the
    multi-token-prediction module and the loss on the last; ep 64 folded over tp 2 x dp 64."""
    (case,) = [c for c in package_cases() if c.id == DEEPSEEK_ROW]
    assert case.reason == "" and case.model is not None and case.parallel is not None
    assert case.model.mtp_layers == 1 and case.model.is_mla
    p = case.parallel
    assert (p.tp, p.pp, p.vpp, p.dp, p.ep, p.etp) == (2, 8, 4, 64, 64, 1)
    assert p.stage_layers(case.model) == (1, *[2] * 30, 0)
    assert p.pp_layout == "Et|(tt|)*30mL"
    assert str(p.fp8_recipe) == "blockwise"


def test_an_unknown_row_model_base_is_an_error_not_a_reason(tmp_path: Path) -> None:
    for name in ("published_runs.csv", "published_runs_more.csv", "vtrain_multi.csv"):
        source = data_dir() / name
        if source.exists():
            (tmp_path / name).write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    text = (data_dir() / "setups.toml").read_text(encoding="utf-8")
    text = text.replace('model_base = "qwen3-235b-a22b"', 'model_base = "qwen9-1t"', 1)
    (tmp_path / "setups.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="qwen9-1t"):
        load_cases(tmp_path)


def test_the_row_description_names_the_expert_tensor_parallel_size() -> None:
    (case,) = [c for c in package_cases() if c.id == QWEN_ROW]
    assert case.parallel is not None
    assert "etp1" in describe(case.parallel).split()
    assert "etp" not in describe(replace(case.parallel, etp=None, ep=16))  # etp = tp


GPT_OSS_ROW = "MBRIDGE25.11-DGX-H100-GPTOSS120B-64"


def test_the_gpt_oss_row_runs_the_recipes_micro_batch_and_recompute_modules() -> None:
    """The page's MBS 4 contradicts its own GA 2 (512 / (4 x 16) = 8): the recipe's MBS 1 is
    used and said so among the assumptions; its recompute_modules are layernorm and moe_act."""
    (case,) = [c for c in package_cases() if c.id == GPT_OSS_ROW]
    assert case.parallel is not None
    p = case.parallel
    assert (p.micro_batch, p.global_batch, p.pp, p.ep, p.dp) == (1, 512, 4, 8, 16)
    assert (str(p.recompute), p.recompute_modules) == ("selective", ("layernorm", "moe_act"))
    assert any("instead of the published '4'" in a for a in case.assumptions)


def test_the_deepseek_row_recomputes_the_recipes_modules() -> None:
    (case,) = [c for c in package_cases() if c.id == DEEPSEEK_ROW]
    assert case.parallel is not None
    assert case.parallel.recompute_modules == ("mla_up_proj", "mlp")


def test_the_moe_runs_that_ran_are_not_called_out_of_memory() -> None:
    """All three ran on 80 GB H100s (the page's measurements): with the recipes' micro-batch and
    recompute modules and FP8 activations saved as TE saves them, none is predicted to OOM."""
    rows = (GPT_OSS_ROW, QWEN_ROW, DEEPSEEK_ROW)
    results = evaluate_cases([c for c in package_cases() if c.id in rows])
    assert len(results) == 3
    for result in results:
        assert result.evaluated and result.feasible, (result.case.id, result.note)


@pytest.mark.parametrize(
    ("correction", "message"),
    [
        ("micro_batch = { value = 1 }", "csv_corrections.micro_batch must correct"),
        ('micro_batchez = { value = 1, why = "x" }', "csv_corrections.micro_batchez"),
    ],
)
def test_a_malformed_csv_correction_is_an_error(
    tmp_path: Path, correction: str, message: str
) -> None:
    for name in ("published_runs.csv", "published_runs_more.csv", "vtrain_multi.csv"):
        source = data_dir() / name
        if source.exists():
            (tmp_path / name).write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    text = (data_dir() / "setups.toml").read_text(encoding="utf-8")
    head = f'[rows."{GPT_OSS_ROW}".csv_corrections]\n'
    start = text.index(head) + len(head)
    end = text.index("\n", start)
    text = text[:start] + correction + text[end:]
    (tmp_path / "setups.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_cases(tmp_path)


def test_the_qwen3_rows_overlap_expert_all_to_alls_where_their_recipe_did() -> None:
    """Megatron-Bridge's Qwen3-235B performance configs set moe_a2a_overlap (Megatron-Core's
    combined 1F1B schedule, which needs a virtual pipeline when pp > 1) on H100 and, in the
    version whose layouts are the 26.02 tables' (B300 VP 4, B200 without VP), on B300; on B200
    before Megatron-Bridge PR #1760 turned it off (the 25.11 row, VP 2), not after (the 26.02
    row), nor on B300 in the later version without VP (the 26.04 row)."""
    expected = {
        "MBRIDGE25.11-DGX-H100-Qwen3_235B_a22B-256": True,
        "MBM-B300-26.02-QWEN3_235B_A22B-256": True,
        "MBM-B300-26.04-QWEN3_235B_A22B-256": False,
        "MBM-B200-25.11-QWEN3_235B_A22B-64": True,
        "MBM-B200-26.02-QWEN3_235B_A22B-256": False,
    }
    cases = {c.id: c for c in package_cases() if c.id in expected}
    assert sorted(cases) == sorted(expected)
    for row_id, overlap in expected.items():
        case = cases[row_id]
        assert dict(case.framework_options).get("moe_comm_overlap", False) is overlap, row_id
        assert case.parallel is not None
        if overlap:
            assert case.parallel.vpp > 1, row_id  # Megatron-Core: A2A overlap with pp needs VP
