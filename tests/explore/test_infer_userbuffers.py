"""The inferred setup's userbuffers methods of the forward reduce-scatters and bulk-overlap SM
margin (NeMo 1.x launcher, NeMo 2.0 and Megatron-Bridge performance recipes' configs),
Megatron-Bridge's CUDA_DEVICE_MAX_CONNECTIONS on Blackwell, and Megatron-LM 2021's local DDP."""

from __future__ import annotations

import pytest

from stage_core.lower.compact import UNBUCKETED
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_defaults import recipe_defaults
from stage_explore.validation.infer_userbuffers import (
    BULK_CONFIGS,
    RING,
    RING_CONFIGS,
    bulk_config,
    ring_config,
)

BRIDGE = "NVIDIA Megatron-Bridge performance summary (25.11 container)"
NEMO2 = "DGX Cloud Benchmarking (GSW 25.05, NeMo 25.04.01)"
PROJ, FC2 = "ub_proj_fprop_method", "ub_fc2_fprop_method"


def _methods(
    source: str, flavor: str, system: str, precision: str, tp: int = 4, model: str = ""
) -> dict[str, str]:
    row = {"id": "X-1", "source": source, "source_table": "", "notes": "", "model": model}
    out = recipe_defaults(row, "megatron-core", precision, flavor, {}, {"tp": tp}, system)
    said = "\n".join(out.notes)
    found = {k: str(v) for k, v in out.options.items() if k in (PROJ, FC2)}
    assert ("RingExchangeOverlapCfg" in said) == bool(found), said
    return found


@pytest.mark.parametrize(
    ("source", "flavor", "system", "precision", "expected"),
    [
        # Megatron-Bridge rings both in every FP8 config, H100 included
        (BRIDGE, "llama3-70b", "h100-80gb", "fp8", {PROJ: RING, FC2: RING}),
        (BRIDGE, "llama3.1-405b", "h100-80gb", "fp8", {PROJ: RING, FC2: RING}),
        # NeMo 2.0's H100 FP8 Llama configs keep the pipeline
        (NEMO2, "llama3-70b", "h100-80gb", "fp8", {}),
        (NEMO2, "llama3.1-405b", "h100-80gb", "fp8", {}),
        # BF16 Llama configs are pipelines everywhere
        (BRIDGE, "llama3.1-405b", "b200", "bf16", {}),
        (NEMO2, "llama3.1-405b", "gb200-nvl72", "bf16", {}),
        # Blackwell FP8 Llama configs ring both; the Bridge map gives GB200's 70B the BF16 one
        (NEMO2, "llama3.1-405b", "gb200-nvl72", "fp8", {PROJ: RING, FC2: RING}),
        (BRIDGE, "llama3-70b", "b200", "fp8", {PROJ: RING, FC2: RING}),
        (BRIDGE, "llama3-70b", "gb200-nvl72", "fp8", {}),
        (NEMO2, "llama3-70b", "gb200-nvl72", "fp8", {PROJ: RING, FC2: RING}),
        # GPT-3 175B: H100 rings fc2 only (Bridge's FP8 config both), Blackwell both
        (NEMO2, "gpt3-175b", "h100-80gb", "fp8", {FC2: RING}),
        (NEMO2, "gpt3-175b", "h100-80gb", "bf16", {FC2: RING}),
        (BRIDGE, "gpt3-175b", "h100-80gb", "fp8", {PROJ: RING, FC2: RING}),
        (NEMO2, "gpt3-175b", "b200", "bf16", {PROJ: RING, FC2: RING}),
        # Nemotron-4 340B on Blackwell: BF16 rings proj only, FP8 both; H100 has no config
        (NEMO2, "nemotron-4-340b", "gb200-nvl72", "bf16", {PROJ: RING}),
        (NEMO2, "nemotron-4-340b", "gb200-nvl72", "fp8", {PROJ: RING, FC2: RING}),
        (NEMO2, "nemotron-4-340b", "h100-80gb", "fp8", {}),
        # a GPU the configs do not name keeps TE's default
        (BRIDGE, "llama3-70b", "h200", "fp8", {}),
    ],
)  # fmt: skip
def test_the_forward_reduce_scatter_method_of_the_recipe_config(
    source: str, flavor: str, system: str, precision: str, expected: dict[str, str]
) -> None:
    assert _methods(source, flavor, system, precision) == expected


def test_grok_1_rings_both_on_every_gpu_but_mixtral_of_its_width_does_not() -> None:
    for system in ("h100-80gb", "gb200-nvl72"):
        for precision in ("bf16", "fp8"):
            got = _methods(NEMO2, "mixtral-8x22b", system, precision, model="Grok-1 314B")
            assert got == {PROJ: RING, FC2: RING}
    assert _methods(NEMO2, "mixtral-8x22b", "h100-80gb", "bf16", model="Mixtral 8x22B") == {}


@pytest.mark.parametrize(
    ("source", "tp"),
    [
        (BRIDGE, 1),  # no tensor parallelism, no userbuffers overlap
        ("DGX Cloud Benchmarking (NeMo 24.12)", 4),  # a NeMo 1.x launcher container
        ("MLPerf Training v5.0, NVIDIA (tyche_ngpu256_ngc25.04_nemo)", 4),  # its own conf/
        ("a cluster of ours, Megatron-Core", 4),  # no container named
    ],
)
def test_no_method_without_a_nemo_2_or_bridge_recipe(source: str, tp: int) -> None:
    assert _methods(source, "llama3.1-405b", "b200", "fp8", tp=tp) == {}


def test_each_config_matches_only_its_own_rows() -> None:
    """No entry is shadowed by an earlier one: each is the first match of its own key."""
    for entry in RING_CONFIGS:
        gpus = "hopper" if entry.gpus == "any" else entry.gpus
        system = "h100-80gb" if gpus == "hopper" else "b200"
        bridge = "bridge" in entry.frameworks and "nemo" not in entry.frameworks
        got = ring_config(entry.family, entry.hidden or 6144, gpus, system,
                          entry.precisions[0], bridge)  # fmt: skip
        assert got is entry, entry.config


def test_megatron_lm_2021_reduces_its_gradients_as_one_buffer_after_the_backward() -> None:
    row = {
        "id": "X-1", "source": "Narayanan et al. SC'21 (Megatron-LM PTD-P)", "model": "GPT-39.1B",
        "layers": "48", "hidden": "8192", "heads": "64", "vocab": "51200", "seq_len": "2048",
        "global_batch_seqs": "1536", "tp": "8", "pp": "2", "dp": "32", "num_gpus": "512",
        "recompute": "full", "precision": "fp16 mixed", "gpu": "A100-SXM4-80GB",
        "tflops_per_gpu": "138",
    }  # fmt: skip
    (case, *_) = row_cases(row, "extra.csv", 1)
    assert case.framework == "megatron-lm-2021" and case.parallel is not None, case.reason
    assert case.parallel.grad_bucket_bytes == UNBUCKETED
    assert any("--DDP-impl default 'local'" in a for a in case.assumptions)


LAUNCHER = "DGX Cloud Benchmarking (NeMo 24.12)"
MARGIN, CONNECTIONS = "ub_bulk_sm_margin", "cuda_device_max_connections"


def _options(
    source: str,
    flavor: str,
    system: str,
    layout: dict[str, int],
    model: str = "",
    precision: str = "bf16",
) -> dict[str, bool | int | float | str]:
    row = {"id": "X-1", "source": source, "source_table": "", "notes": "", "model": model}
    return recipe_defaults(row, "megatron-core", precision, flavor, {}, layout, system).options


@pytest.mark.parametrize(
    ("source", "flavor", "system", "tp", "model", "off"),
    [
        # the NeMo 1.x launcher's H100 configs (24.09 on; 24.05-24.07 by their TE version)
        (LAUNCHER, "llama3-70b", "h100-80gb", 4, "", True),
        ("DGX Cloud Benchmarking (NeMo 24.09)", "llama3.1-405b", "h100-80gb", 8, "", True),
        (LAUNCHER, "gpt3-175b", "h100-80gb", 4, "", True),
        (LAUNCHER, "nemotron-4-340b", "h100-80gb", 8, "", False),  # no launcher config
        (LAUNCHER, "llama3-70b", "b200", 4, "", False),  # the launcher's configs are H100's
        (LAUNCHER, "mixtral-8x22b", "h100-80gb", 4, "Grok-1 314B", False),
        # NeMo 2.0 / Megatron-Bridge: every config's bulk overlaps
        (NEMO2, "nemotron-4-340b", "gb200-nvl72", 8, "", True),
        (NEMO2, "nemotron-4-340b", "h100-80gb", 8, "", False),  # no H100 config
        (BRIDGE, "llama3-70b", "b200", 2, "", True),
        (BRIDGE, "llama3.1-405b", "h100-80gb", 8, "", True),
        (NEMO2, "mixtral-8x22b", "h100-80gb", 4, "Grok-1 314B", True),
        (NEMO2, "mixtral-8x22b", "h100-80gb", 4, "Mixtral 8x22B", False),
        ("MLPerf Training v5.0, NVIDIA (tyche_ngpu256_ngc25.04_nemo)", "llama3.1-405b",
         "gb200-nvl72", 4, "", True),
        # no tensor parallelism, or no container named: the profile's default
        (BRIDGE, "llama3-70b", "b200", 1, "", False),
        ("a cluster of ours, Megatron-Core", "llama3-70b", "h100-80gb", 4, "", False),
    ],
)  # fmt: skip
def test_bulk_overlaps_run_without_a_margin_where_the_recipe_names_a_config(
    source: str, flavor: str, system: str, tp: int, model: str, off: bool
) -> None:
    options = _options(source, flavor, system, {"tp": tp}, model)
    assert (options.get(MARGIN) is False) == off, options


def test_the_row_s_hidden_size_picks_the_config_not_the_flavor_s() -> None:
    """A Nemotron-4 15B row read on the 340B flavor with its own hidden size 6144 takes the
    h6144 config (BF16: both forward reduce-scatters ring), not the h18432 one (proj only)."""
    options = _options(NEMO2, "nemotron-4-340b", "b200", {"tp": 2, "hidden": 6144})
    assert options.get(PROJ) == RING and options.get(FC2) == RING
    assert options.get(MARGIN) is False
    options = _options(NEMO2, "nemotron-4-340b", "b200", {"tp": 8})
    assert options.get(PROJ) == RING and FC2 not in options


def test_each_bulk_config_matches_only_its_own_rows() -> None:
    for entry in BULK_CONFIGS:
        gpus = "hopper" if entry.gpus == "any" else entry.gpus
        assert bulk_config(entry.family, entry.hidden or 6144, gpus, entry.first) is entry
        assert bulk_config(entry.family, entry.hidden or 6144, gpus, (24, 7)) is None


@pytest.mark.parametrize(
    ("source", "system", "layout", "connections"),
    [
        (BRIDGE, "b200", {"tp": 4, "dp": 8}, 32),
        (BRIDGE, "gb300-nvl72", {"tp": 1, "cp": 2, "pp": 4}, 32),
        (BRIDGE, "b200", {"tp": 4, "dp": 1, "pp": 1}, None),  # nothing beside the split
        (BRIDGE, "b200", {"tp": 1, "dp": 64}, None),  # no tensor or context split
        (BRIDGE, "h100-80gb", {"tp": 4, "dp": 8}, None),  # 1 before Blackwell
        (NEMO2, "b200", {"tp": 4, "dp": 8}, None),  # NeMo 2.0's early-2025 plugin: 1
    ],
)  # fmt: skip
def test_megatron_bridge_runs_32_device_connections_on_blackwell(
    source: str, system: str, layout: dict[str, int], connections: int | None
) -> None:
    options = _options(source, "llama3.1-405b", system, layout, precision="fp8")
    assert options.get(CONNECTIONS) == connections
