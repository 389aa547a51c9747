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
    FP8_BUF_CONFIGS,
    RING,
    RING_CONFIGS,
    bulk_config,
    fp8_buf_config,
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


FP8_PROJ, FP8_FC2 = "ub_proj_fprop_fp8_buf", "ub_fc2_fprop_fp8_buf"
ATOMIC_PROJ, ATOMIC_FC2 = "ub_proj_fprop_atomic_gemm", "ub_fc2_fprop_atomic_gemm"
NEW_OPTIONS = (FP8_PROJ, FP8_FC2, ATOMIC_PROJ, ATOMIC_FC2)


def _scatters(
    source: str, flavor: str, system: str, precision: str, tp: int, cells: dict[str, str]
) -> tuple[dict[str, bool | int | float | str], str]:
    """The forward reduce-scatters' options an inferred row gets, and its assumptions."""
    row = {"id": "X-1", "source": source, "source_table": "", "notes": "", "model": "", **cells}
    out = recipe_defaults(row, "megatron-core", precision, flavor, {}, {"tp": tp}, system)
    keys = (*NEW_OPTIONS, PROJ, FC2)
    return {k: v for k, v in out.options.items() if k in keys}, "\n".join(out.notes)


@pytest.mark.parametrize(
    ("source", "flavor", "system", "precision", "tp", "seq", "expected"),
    [
        # the launcher's FP8 Llama configs (TE 1.x from NeMo 24.07): both on FP8 buffers
        ("NVIDIA NeMo performance summary (NeMo 24.07 container)", "llama3-70b", "h100-80gb",
         "fp8", 4, "8192", {FP8_PROJ: True, FP8_FC2: True}),
        (LAUNCHER, "llama3-70b", "h100-80gb", "fp8", 4, "", {FP8_PROJ: True, FP8_FC2: True}),
        ("DGX Cloud Benchmarking (NeMo 24.09)", "llama3.1-405b", "h100-80gb", "fp8", 8, "8192",
         {FP8_PROJ: True, FP8_FC2: True}),
        # BF16, TE 1.6's 24.05, another sequence length's config, a GPU with no such config
        (LAUNCHER, "llama3-70b", "h100-80gb", "bf16", 4, "8192", {}),
        ("DGX Cloud Benchmarking (NeMo 24.05)", "llama3-70b", "h100-80gb", "fp8", 4, "8192", {}),
        (LAUNCHER, "llama3-70b", "h100-80gb", "fp8", 4, "4096", {}),
        (LAUNCHER, "llama3-70b", "b200", "fp8", 4, "8192", {}),
        # the launcher's GPT-3 175B config is not in the table (its fc2 ring not inferred either)
        (LAUNCHER, "gpt3-175b", "h100-80gb", "fp8", 4, "2048", {}),
        # NeMo 2.0 from TE 2.2 (NeMo 25.04); TE 2.0 / 2.1 (25.02) not assumed
        (NEMO2, "llama3.1-405b", "h100-80gb", "fp8", 8, "8192", {FP8_PROJ: True, FP8_FC2: True}),
        ("DGX Cloud Benchmarking (GSW 25.02, NeMo 25.02)", "llama3.1-405b", "h100-80gb", "fp8",
         8, "8192", {}),
        # GPT-3 175B: fc2 rings, proj pipelines on an FP8 buffer
        (NEMO2, "gpt3-175b", "h100-80gb", "fp8", 4, "2048", {FP8_PROJ: True, FC2: RING}),
        # Megatron-Bridge's FP8 H100 configs ring both: no pipeline to take fp8_buf
        (BRIDGE, "llama3-70b", "h100-80gb", "fp8", 4, "8192", {PROJ: RING, FC2: RING}),
        # Blackwell FP8 configs ring both; no tensor parallelism, no userbuffers
        (NEMO2, "llama3.1-405b", "gb200-nvl72", "fp8", 4, "8192", {PROJ: RING, FC2: RING}),
        (LAUNCHER, "llama3-70b", "h100-80gb", "fp8", 1, "8192", {}),
    ],
)  # fmt: skip
def test_pipelined_forward_reduce_scatters_on_fp8_buffers_where_the_config_sets_fp8_buf(
    source: str,
    flavor: str,
    system: str,
    precision: str,
    tp: int,
    seq: str,
    expected: dict[str, bool | str],
) -> None:
    options, said = _scatters(source, flavor, system, precision, tp, {"seq_len": seq})
    assert options == expected, said
    assert ("fp8_buf set" in said) == (FP8_PROJ in options), said


MLPERF_V40 = "MLPerf Training v4.0, NVIDIA closed division (eos_n64_ngc24.04_nemo, NeMo 24.04)"


@pytest.mark.parametrize(
    ("system", "precision", "micro_batch", "expected"),
    [
        # h100tp4mbs2.yaml's defaults: proj_fprop an atomic GEMM, fc2_fprop a ring exchange
        ("h100-80gb", "fp8", "2", {ATOMIC_PROJ: True, FC2: RING}),
        ("h100-80gb", "fp8", "", {ATOMIC_PROJ: True, FC2: RING}),
        # the 1344 / 1452-node micro-batch-1 configs' environment
        ("h100-80gb", "fp8", "1", {FP8_PROJ: True, ATOMIC_FC2: True}),
        # atomic GEMMs and FP8 buffers are FP8 runs'; the B200 yaml is another file
        ("h100-80gb", "bf16", "2", {}),
        ("b200", "fp8", "2", {}),
    ],
)  # fmt: skip
def test_mlperf_gpt3_forward_reduce_scatters_as_its_configs_run_them(
    system: str, precision: str, micro_batch: str, expected: dict[str, bool | str]
) -> None:
    cells = {"micro_batch": micro_batch, "seq_len": "2048"}
    options, said = _scatters(MLPERF_V40, "gpt3-175b", system, precision, 4, cells)
    assert options == expected, said
    if expected:
        assert "h100tp4mbs2.yaml" in said


def test_each_fp8_buf_config_matches_only_its_own_rows() -> None:
    for entry in FP8_BUF_CONFIGS:
        first, last = entry.releases
        for release in (first, last):
            got = fp8_buf_config(entry.family, entry.hidden, entry.seq_len or 2048, release)
            assert got is entry, entry.config
        before = (first[0], first[1] - 1)
        assert fp8_buf_config(entry.family, entry.hidden, entry.seq_len, before) is None
