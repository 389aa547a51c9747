"""What the inferred path makes of a ``gpu`` cell (5 Dec 2026, s17 systems): the spellings a
published-run table uses for the GPUs the presets cover, the A800 preset (the A100 with eight
NVLinks, 400 GB/s), and the form factors refused with a one-line reason naming what the part is
(PCIe and NVL cards, GB200 boards smaller than the NVL72 rack, the H20, an architecture name),
where they used to be read silently as the SXM preset. Each expected value is computed here from
the figures the preset cites."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from stage_explore.cli import main
from stage_explore.system import load_system
from stage_explore.validation.infer_fields import Uninferable
from stage_explore.validation.infer_system import infer_system

DATA = Path(__file__).resolve().parents[2] / "stage_explore" / "data"


@pytest.mark.parametrize(
    ("gpu", "preset"),
    [
        ("A100", "a100-80gb"), ("A100-SXM4-80GB", "a100-80gb"), ("DGX A100", "a100-80gb"),
        ("A100 SXM4 40GB", "a100-40gb"), ("A800", "a800"), ("A800-SXM4-80GB", "a800"),
        ("A800 SXM4 80GB", "a800"), ("HGX A800", "a800"), ("H100 80GB HBM3", "h100-80gb"),
        ("H100 SXM5", "h100-80gb"), ("HGX H100", "h100-80gb"), ("H100 SXM5 94GB", "h100-80gb"),
        ("H800", "h800"), ("H800 SXM5", "h800"), ("H200 SXM 141GB", "h200"), ("GH200", "h200"),
        ("GH-200", "h200"), ("GH200 144GB", "h200"), ("B200 192GB", "b200"),
        ("DGX B200", "b200"), ("HGX B300", "b300"), ("GB200 NVL72", "gb200-nvl72"),
        ("GB300 NVL72", "gb300-nvl72"), ("GB200 NVL36x2", "gb200-nvl72"),
        ("GB200 (B200 in NVL72)", "gb200-nvl72"), ("HGX B300 NVL16", "b300"),
        ("H100 SXM5 (PCIe Gen5 host)", "h100-80gb"), ("AMD Instinct MI300X OAM", "mi300x"),
        ("MI325X", "mi325x"), ("MI355X", "mi355x"), ("A100-40G", "a100-40gb"),
        ("A100-SXM4-40G", "a100-40gb"), ("A800-80G", "a800"), ("H100 (200G HDR)", "h100-80gb"),
        ("A100, 8x200G IB", "a100-80gb"),
    ],
)  # fmt: skip
def test_spellings_of_covered_parts_take_their_preset(gpu: str, preset: str) -> None:
    assert infer_system(gpu).value == preset


@pytest.mark.parametrize(
    ("gpu", "reason"),
    [
        ("H100 PCIe", "is an H100 PCIe (756 dense BF16 TFLOP/s at 300-350 W, 80 GB HBM2e at "
         "2.0 TB/s, NVLink bridge pairs at 600 GB/s): no preset (the h100-80gb preset is "),
        ("H100-PCIE-80GB", "is an H100 PCIe ("),
        ("H100 NVL", "is an H100 NVL, a PCIe card (835 dense BF16 TFLOP/s at 350-400 W, 94 GB "
         "HBM3 at 3.9 TB/s, NVLink bridge pairs at 600 GB/s): no preset"),
        ("H100 NVL 94GB", "is an H100 NVL, a PCIe card"),
        ("H200 NVL", "is an H200 NVL, a PCIe card (835 dense BF16 TFLOP/s at up to 600 W"),
        ("A100 PCIe 80GB", "is an A100 PCIe (250-300 W, 1,555 GB/s (40 GB) or 1,935 GB/s "
         "(80 GB), NVLink bridge pairs at 600 GB/s): no preset (the a100-80gb preset is "),
        ("A100-PCIE-40GB", "is an A100 PCIe ("),
        ("A800 PCIe 80GB", "is a PCIe card (NVLink bridges or PCIe between GPUs): no preset "
         "(the a800 preset is "),
        ("H800 PCIe", "is a PCIe card (NVLink bridges or PCIe between GPUs): no preset (the "
         "h800 preset is "),
        ("GB200 NVL4", "is a GB200 / GB300 system of another NVLink domain than the NVL72 "
         "rack's 72 GPUs: no preset (the gb200-nvl72 preset is "),
        ("GB200 NVL36", "is a GB200 / GB300 system of another NVLink domain"),
        ("H20", "is an H20 (GH100 at 148 dense BF16 TFLOP/s, 96 GB HBM3 at 4.0 TB/s, 400 W"),
        ("HGX H20 96GB", "is an H20 ("),
        ("Hopper", "is an architecture, not a part"),
        ("NVIDIA Blackwell", "is an architecture, not a part"),
        ("MI250X", "matches no system preset (expected one of GB300, GB200, B300, B200, H800, "
         "H200, H100, A100, A800, MI355X, MI325X, MI300X)"),
        ("A800 400GB", "a stated memory of 400GB is not one GPU's memory of the a800 preset's"),
        ("A800-8G", "a stated memory of 8G is not one GPU's memory of the a800 preset's part "
         "(expected 40 to 160 GiB per GPU"),
    ],
)  # fmt: skip
def test_form_factors_and_parts_without_a_preset_are_refused(gpu: str, reason: str) -> None:
    with pytest.raises(Uninferable) as refused:
        infer_system(gpu)
    message = str(refused.value)
    assert message.startswith(f"gpu {gpu!r}")
    assert reason in message and "\n" not in message


def test_refusals_name_the_preset_the_name_would_have_taken() -> None:
    """The form-factor reason names the preset and its node (the preset's own description), so
    the SXM figures the card does not have are visible in the reason."""
    with pytest.raises(Uninferable) as refused:
        infer_system("H100 PCIe")
    assert load_system("h100-80gb").description in str(refused.value)


@pytest.mark.parametrize(
    ("gpu", "preset"),
    [
        # FlagPerf's A800 baseline runs from config_A100x1x8.py (s33 rowsE): was a100-80gb
        ("A800 80GB (NVIDIA_A800-SXM4-80GB, DGX A800; theoryflops in config_A100x1x8.py)", "a800"),
        ("H800 (launched with configs/h100_llama3.yaml)", "h800"),
        ("A800 SXM4 (script run_a100_40g.sh)", "a800"),  # the file's 40G is not the memory
        ("H100 SXM 80GB (config_H100x1x8.py)", "h100-80gb"),
    ],
)
def test_a_config_file_name_in_the_gpu_cell_is_not_the_hardware(gpu: str, preset: str) -> None:
    """A file name (``config_A100x1x8.py``) names a benchmark suite's config, not the GPU: the
    part the cell states outside file names picks the preset (and its memory)."""
    assert infer_system(gpu).value == preset


def test_a800_preset_is_the_a100_with_eight_nvlinks() -> None:
    a800, a100 = load_system("a800"), load_system("a100-80gb")
    # The A800 datasheet: the A100's die, peaks and HBM2e; NVLink 400 GB/s bidirectional.
    assert a800.accelerator.name == "A800-SXM4-80GB"
    assert a800.accelerator.peak_flops_per_s == a100.accelerator.peak_flops_per_s
    assert a800.accelerator.memory_bytes == a100.accelerator.memory_bytes
    assert a800.accelerator.memory_bandwidth_bytes_per_s == 2.039e12
    assert a800.accelerator.kernels == a100.accelerator.kernels
    nvswitch = a800.network[0]
    assert nvswitch.bandwidth_bytes_per_s == 400e9 / 2
    assert nvswitch.nccl_channels == 2 * 8  # two per NVLink, 8 links (the A100: 24 for 12)
    # busbw = algbw x 2(n-1)/n; algbw = 1 GiB / t (the header's A800 report)
    busbw_8 = 2**30 / 12.369e-3 * 2 * 7 / 8
    busbw_4 = 2**30 / 10.850e-3 * 2 * 3 / 4
    assert nvswitch.bus_efficiency == pytest.approx(busbw_8 / 200e9, abs=0.005)
    assert dict(nvswitch.bus_efficiency_by_ranks)[4] == pytest.approx(busbw_4 / 200e9, abs=0.005)
    a100_ratio = dict(a100.network[0].bus_efficiency_by_ranks)[2] / a100.network[0].bus_efficiency
    assert dict(nvswitch.bus_efficiency_by_ranks)[2] == pytest.approx(
        a100_ratio * nvswitch.bus_efficiency, abs=0.002
    )
    assert a800.network[1] == a100.network[1]


def test_validate_data_reads_synthetic_rows_as_the_rules_say(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``validate --data`` on a CSV of one package row respelled: an A800 row runs on the a800
    preset, a PCIe / NVL / H20 row is reported with the reason and not evaluated."""
    with (DATA / "published_runs_no_setup.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    base = next(r for r in rows if r["gpu"] == "A100 80GB")
    cells = ("A800-SXM4-80GB", "A100 80GB", "A100 PCIe 80GB", "H100 NVL", "H20")
    out = tmp_path / "published_runs_sys.csv"
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(base))
        writer.writeheader()
        for index, gpu in enumerate(cells):
            writer.writerow({**base, "id": f"SYS-{index}", "gpu": gpu})
    assert main(["validate", "--data", str(out), "--json"]) in (0, 1)
    report = json.loads(capsys.readouterr().out)
    cases = {row["id"]: row for row in report["rows"]}
    assert cases["SYS-0"]["system"] == "a800" and cases["SYS-1"]["system"] == "a100-80gb"
    for refused in ("SYS-2", "SYS-3", "SYS-4"):
        assert not cases[refused]["evaluated"]
        reason = cases[refused]["not_evaluated_reason"]
        assert reason.startswith(f"gpu {cells[int(refused[-1])]!r} is ")
