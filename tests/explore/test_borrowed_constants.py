"""Borrowed preset constants (s27 presets): a value whose inline comment says ``as <preset>``
equals that preset's value for the same key, and one that says ``from <preset> x <factor>`` is
that preset's times the factor to the digits it is written with
(:mod:`stage_explore.system.borrowed`). s26 docsref found h200 / h800 still carrying the
burst-clock attention fractions (0.64 / 0.56) that h100-80gb had replaced with the sustained ones
(0.543 / 0.475), and the AMD presets' ``gemm_k_overhead`` 64 "as h100-80gb" after h100-80gb moved
to 160: these tests fail on any such stale copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_explore.system.borrowed import (
    MODEL_TABLES,
    check,
    claims_of,
    read_entries,
    system_files,
    unclaimed_differences,
)

SOURCE = """name = "src"
[accelerator.kernels]
attention_forward = 0.543
gemm_k_overhead = 160
[accelerator.kernels.attention_kernels]
cudnn = [0.554, 0.480, 135]
[[network]]
name = "nvswitch"
bus_efficiency = 0.82
"""


def _files(tmp_path: Path, copy: str) -> dict[str, Path]:
    (tmp_path / "src.toml").write_text(SOURCE, encoding="utf-8")
    (tmp_path / "cp.toml").write_text(copy, encoding="utf-8")
    return {"src": tmp_path / "src.toml", "cp": tmp_path / "cp.toml"}


def test_every_borrowed_value_in_the_shipped_systems_is_its_sources_current_value() -> None:
    claims = check()
    stale = [
        f"{c.entry.system}:{c.entry.line} {c.entry.table}.{c.entry.key} = {c.entry.text}, "
        f"{c.source} has {c.source_value}"
        for c in claims
        if not c.holds
    ]
    assert not stale, "\n".join(stale)
    # the rule reads the presets' claims, not a handful: h200 / h800 / AMD / Blackwell copies
    assert len(claims) > 100
    sources = {(c.entry.system, c.source) for c in claims}
    expected = [("h200", "h100-80gb"), ("h800", "h100-80gb"), ("mi300x", "h100-80gb"),
                ("mi325x", "mi300x"), ("b300", "b200"), ("gb300-nvl72", "gb200-nvl72")]  # fmt: skip
    assert set(expected) <= sources


@pytest.mark.parametrize(
    ("line", "holds"),
    [
        ("attention_forward = 0.543   # as src (same silicon)", True),
        ("attention_forward = 0.64    # as src: the burst figure, left behind", False),
        ("attention_forward = 0.543   # as the src preset", True),
        ("attention_forward = 0.543   # analogue: the src preset's", True),
        ("attention_forward = 0.461   # from src x 0.849 sustained / burst", True),
        ("attention_forward = 0.47    # from src x 0.849", False),
        ("attention_forward = 0.461   # from src x 702.9 / 828.0", True),
        ("gemm_k_overhead = 64        # analogue: the src preset's one 64-deep K step", False),
    ],
)
def test_an_as_claim_is_equality_and_a_from_claim_is_the_written_factor(
    tmp_path: Path, line: str, holds: bool
) -> None:
    claims = check(_files(tmp_path, f"[accelerator.kernels]\n{line}\n"))
    assert [c.holds for c in claims] == [holds]


def test_a_list_scales_its_fractions_and_keeps_its_integer_keys(tmp_path: Path) -> None:
    table = "[accelerator.kernels.attention_kernels]\n"
    good = table + "cudnn = [0.470, 0.408, 135]  # from src x 0.849\n"
    bad = table + "cudnn = [0.470, 0.408, 115]  # from src x 0.849\n"
    assert [c.holds for c in check(_files(tmp_path, good))] == [True]
    assert [c.holds for c in check(_files(tmp_path, bad))] == [False]


def test_a_network_dim_is_matched_by_position_and_a_missing_key_fails(tmp_path: Path) -> None:
    copy = (
        '[[network]]\nname = "nvlink"\n'
        "bus_efficiency = 0.82  # as src\nlatency_s = 1e-6  # as src\n"
    )
    claims = check(_files(tmp_path, copy))
    assert [(c.entry.table, c.entry.key, c.holds) for c in claims] == [
        ("network[0]", "bus_efficiency", True),
        ("network[0]", "latency_s", False),  # src has no latency_s: nothing to be equal to
    ]


def test_several_sources_are_each_checked_and_a_passing_mention_is_no_claim() -> None:
    names = ["b200", "gb200-nvl72", "b300", "a100-80gb"]
    assert claims_of("as b200 / gb200-nvl72 (NVLink 5)", names) == [
        ("b200", None), ("gb200-nvl72", None)
    ]  # fmt: skip
    assert claims_of("as gb200-nvl72 and b300 (XLA's sm_100 table)", names) == [
        ("gb200-nvl72", None), ("b300", None)
    ]  # fmt: skip
    assert claims_of("2 per NIC (NVIDIA/nccl#689; the a100-80gb preset's rule) x 2", names) == []
    assert claims_of("as b200's (s20 gemmb200)", names) == [("b200", None)]


def test_a_header_claim_leaves_no_differing_model_constant_unclaimed_on_h200_and_h800() -> None:
    """h200 / h800 say "Model constants: as h100-80gb" in their headers, which the rule cannot
    read: every model constant they share with h100-80gb either carries its own claim or is
    equal, except the NVLink dim's own measurements (NVLS rate, NCCL fixed costs, H800's link)."""
    own = {
        ("h200", "network[0]", key)
        for key in ("nvls_efficiency", "collective_overhead_s", "small_message_overhead_s")
    } | {
        ("h800", "network[0]", key)
        for key in ("bandwidth_bytes_per_s", "nccl_channels", "nvls_efficiency", "bus_efficiency")
    }
    found = {
        (entry.system, entry.table, entry.key)
        for entry, source, _ in unclaimed_differences()
        if entry.system in ("h200", "h800") and source == "h100-80gb"
    }
    assert found == own
    assert all(table.startswith(MODEL_TABLES) for _, table, _ in found)


def test_h200s_hbm_factor_is_azures_same_method_stream_fraction_ratio() -> None:
    """The factor h200 writes for its HBM fractions, 0.8495 / 0.8761: Azure's Copy / Mul / Add /
    Triad on ND H200 v5 over 4.8 TB/s against ND H100 v5 over 3.35 TB/s (the numbers cited in
    h200.toml), each to four digits."""
    h200 = sum((4.01, 4.00, 4.15, 4.15)) / 4 / 4.8
    h100 = sum((2.90, 2.90, 2.97, 2.97)) / 4 / 3.35
    entries = read_entries("h200", system_files()["h200"])
    derived = {e.key: e for e in entries if "from h100-80gb x 0.8495 / 0.8761" in e.comment}
    assert set(derived) == {"memory", "eager_memory", "ssd_memory"}
    assert round(h200, 4) == 0.8495 and round(h100, 4) == 0.8761
