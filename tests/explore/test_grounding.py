"""Every numeric constant of a system file names its public source (issue #11, s36 citeaudit).

:mod:`stage_explore.system.grounding` finds, for each numeric ``key = value`` of the shipped
presets and bundled system files, the comment that grounds it (its own, the block above it in its
table, or the part of the file's header that writes it) and whether that comment cites a source,
borrows another file's value, derives it from this file's cited figures, declares it an estimate or
says it was fitted in-sample. A value added with no such comment fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_explore.system.grounding import STATUSES, Grounding, ground, markdown, mentions


def _ground(tmp_path: Path, text: str, other: str = "") -> list[Grounding]:
    (tmp_path / "cp.toml").write_text(text, encoding="utf-8")
    files = {"cp": tmp_path / "cp.toml"}
    if other:
        (tmp_path / "src.toml").write_text(other, encoding="utf-8")
        files["src"] = tmp_path / "src.toml"
    return [row for row in ground(files) if row.entry.system == "cp"]


def test_every_numeric_constant_of_the_shipped_system_files_names_its_source() -> None:
    rows = ground()
    uncited = [
        f"{row.path.name}:{row.entry.line} {row.entry.table}.{row.entry.key} = {row.entry.text}"
        for row in rows
        if row.status == "UNCITED"
    ]
    assert not uncited, "values with no source comment:\n" + "\n".join(uncited)
    # the rule reads every file's constants, not a handful, and every status is a known one
    assert len(rows) > 700
    assert {row.status for row in rows} <= set(STATUSES)
    assert {row.path.stem for row in rows} >= {"h100-80gb", "a100-80gb", "vtrain-a100", "mi300x"}


def test_the_in_sample_a100_roofline_constants_are_marked_fitted() -> None:
    fitted = {
        (row.entry.system, row.entry.key) for row in ground() if row.status == "fitted-in-sample"
    }
    assert ("a100-80gb", "matmul_peak") in fitted
    assert ("a100-80gb", "matmul_half_saturation_flops") in fitted


@pytest.mark.parametrize(
    ("line", "status"),
    [
        ("memory = 0.8", "UNCITED"),
        ("memory = 0.8   # measured, somewhere", "cited"),
        ("memory = 0.8   # a guess", "UNCITED"),
        (
            "memory = 0.8   # Azure/AI-benchmarking-guide Azure_Results/ND_H100_v5_results.md",
            "cited",
        ),
        ("memory = 0.8   # NVIDIA/nccl-tests#212", "cited"),
        ("memory = 0.8   # an estimate, no measurement", "declared"),
        ("memory = 0.8   # fitted in-sample on the validation rows", "fitted-in-sample"),
        ("memory = 0.8   # as src", "borrowed"),
        ("memory = 0.8   # derived from this file's cited peak below", "derived"),
        ("memory = 0.8   # 900 GB/s bidirectional", "UNCITED"),
    ],
)
def test_an_inline_comment_cites_borrows_derives_declares_or_not(
    tmp_path: Path, line: str, status: str
) -> None:
    other = "[accelerator.efficiency]\nmemory = 0.8\n"
    rows = _ground(tmp_path, f"[accelerator.efficiency]\n{line}\n", other)
    assert [row.status for row in rows] == [status]


def test_a_table_note_grounds_the_keys_below_it(tmp_path: Path) -> None:
    text = (
        "[accelerator.kernels.gemm_efficiency]\n"
        "# Sustained fraction (stas00/ml-engineering compute/accelerator/README.md)\n"
        "bf16 = 0.72\nfp16 = 0.72\n"
    )
    rows = _ground(tmp_path, text)
    assert [(row.where, row.status) for row in rows] == [("table note", "cited")] * 2


def test_the_header_grounds_a_value_it_writes_in_a_datasheet_unit(tmp_path: Path) -> None:
    text = (
        "# A part.\n"
        "# Sources:\n"
        "#   - Vendor page: 989 TFLOP/s dense BF16, 1,979 FP8; 3.35 TB/s;\n"
        "#     up to 0.7 kW.\n"
        "# Calibration: memory 0.85, a guess.\n"
        'name = "cp"\n'
        "power_w = 700\n"
        "[accelerator]\n"
        "memory_bandwidth_bytes_per_s = 3.35e12\n"
        "[accelerator.peak_flops_per_s]\n"
        "bf16 = 989e12\nfp8 = 1979e12\nfp16 = 990e12\n"
        "[accelerator.efficiency]\n"
        "memory = 0.85\n"
    )
    status = {row.entry.key: (row.where, row.status) for row in _ground(tmp_path, text)}
    assert status == {
        "power_w": ("header", "cited"),  # the bullet of a Sources: list, 0.7 kW
        "memory_bandwidth_bytes_per_s": ("header", "cited"),
        "bf16": ("header", "cited"),
        "fp8": ("header", "cited"),
        "fp16": ("none", "UNCITED"),  # 990 is written nowhere
        "memory": ("header", "UNCITED"),  # written, in a sentence that cites nothing
    }


def test_a_dims_size_is_structure(tmp_path: Path) -> None:
    rows = _ground(tmp_path, '[[network]]\nname = "x"\nsize = 8\nlatency_s = 1e-6\n')
    assert [(row.entry.key, row.status) for row in rows] == [
        ("size", "structural"),
        ("latency_s", "UNCITED"),
    ]


@pytest.mark.parametrize(
    ("text", "value", "found"),
    [
        ("989 TFLOP/s dense", 989e12, True),
        ("1,979 dense FP8", 1979e12, True),
        ("1,307.4 TFLOP/s", 1307.4e12, True),
        ("~5 us per step", 5e-6, True),
        ("step 5 of the ring", 5e-6, False),  # one digit needs its unit
        ("0.755 of peak", 0.75, False),
        ("400 Gb/s per GPU", 50e9, True),
        ("900 GB/s bidirectional", 450e9, True),
        ("96 GiB", 103079215104, True),
    ],
)
def test_mentions_reads_a_number_at_its_datasheet_scale(
    text: str, value: float, found: bool
) -> None:
    assert mentions(text, value) is found


def test_the_markdown_table_has_a_row_per_constant(tmp_path: Path) -> None:
    rows = _ground(tmp_path, "[accelerator.efficiency]\nmemory = 0.8   # measured | here\n")
    table = markdown(rows, tmp_path).splitlines()
    assert len(table) == 2 + len(rows)
    assert table[2].startswith("| cp | `accelerator.efficiency.memory` | 0.8 | cp.toml:2 |")
    assert table[2].endswith("| cited |")
