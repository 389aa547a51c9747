"""The further held-out set's path, what was still refused (s13 hidden2): a dense model of a family
the inference does not know, set up as the common decoder from its architecture columns; an
A100 40GB (its own preset) and a GH200 (the H200, stated); a vocabulary written ``128K``."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from stage_core.models.spec import Activation
from stage_explore.cli import main
from stage_explore.system import load_system
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_fields import Uninferable
from stage_explore.validation.infer_system import infer_system, memory_override
from stage_explore.validation.setups import Case, data_dir

DATA = data_dir()
HELD_OUT = "published_runs_held_out.csv"
TEMPLATE = "MBD-H100-25.11-LLAMA3_8B"  # Llama 3 8B on 8 H100, every architecture column stated
#: Mistral 7B v0.1 (mistralai/Mistral-7B-v0.1 config.json: 32 layers, hidden 4096,
#: intermediate 14336, 32 heads, 8 kv heads, vocab 32000) and Qwen2.5 7B (Qwen/Qwen2.5-7B
#: config.json: 28 layers, hidden 3584, intermediate 18944, 28 heads, 4 kv heads, vocab 152064).
MISTRAL = {"model": "Mistral 7B", "layers": "32", "hidden": "4096", "ffn": "14336",
           "heads": "32", "kv_heads": "8", "vocab": "32000", "seq_len": "4096"}  # fmt: skip
QWEN25 = {"model": "Qwen2.5 7B", "layers": "28", "hidden": "3584", "ffn": "18944",
          "heads": "28", "kv_heads": "4", "vocab": "152064", "seq_len": "4096"}  # fmt: skip


def _row(row_id: str = "HID-1", **cells: str) -> dict[str, str]:
    (row,) = [r for r in read_csv(DATA / HELD_OUT) if r["id"] == TEMPLATE]
    return {**row, "id": row_id, "source": "A further held-out table", **cells}


def _case(**cells: str) -> Case:
    (case,) = row_cases(_row(**cells), "rows.csv", 1, DATA)
    return case


@pytest.mark.parametrize("cells", [MISTRAL, QWEN25], ids=["mistral-7b", "qwen2.5-7b"])
def test_a_dense_model_of_an_unknown_family_is_the_common_decoder(cells: dict[str, str]) -> None:
    """The defect: 'of another size than this family's flavors, or of no known family'."""
    case = _case(**cells)
    assert not case.reason, case.reason
    model = case.model
    assert model is not None
    got = (model.layers, model.hidden, model.ffn, model.heads, model.kv_heads, model.vocab)
    assert got == tuple(int(cells[k]) for k in ("layers", "hidden", "ffn", "heads", "kv_heads",
                                                "vocab"))  # fmt: skip
    assert model.seq_len == int(cells["seq_len"]) and model.activation is Activation.SWIGLU
    assert not model.tied_embeddings and not model.bias and not model.qk_norm
    # s28 readers: both families are now read from their published configs
    # (stage_explore/validation/infer_open_models.py), the CSV's dims winning
    (said,) = [a for a in case.assumptions if "its published config" in a]
    assert f"model {cells['model']!r} as " in said and "the common decoder" in said


def test_the_common_decoder_at_llama_3_8b_s_dims_is_the_llama3_8b_flavor() -> None:
    """The fallback's block is the Llama flavor's: a row with no model name and Llama 3 8B's
    columns is set up as the row naming Llama 3 8B is."""
    named, unnamed = _case(), _case(model="")
    assert not unnamed.reason and unnamed.model is not None and named.model is not None
    assert unnamed.model == replace(named.model, name=unnamed.model.name)
    assert unnamed.parallel == named.parallel


def test_validate_data_evaluates_mistral_and_qwen_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rows.csv"
    rows = [_row("HID-M", **MISTRAL), _row("HID-Q", **QWEN25)]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert main(["validate", "--data", str(path), "--json"]) == 0
    got = {r["id"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert all(got[i]["evaluated"] and got[i]["predicted"] > 0 for i in ("HID-M", "HID-Q"))
    assert got["HID-Q"]["predicted"] != got["HID-M"]["predicted"]  # each row's own dims


def test_ffn_of_four_hidden_is_a_gelu_mlp_and_no_kv_heads_is_multi_head() -> None:
    """Falcon 7B's dims (tiiuae/falcon-7b: hidden 4544, 71 heads, 4 x hidden MLP) without
    kv_heads, under a name of no known family (since s29 readers3 "Falcon 7B" itself is the
    open-model entry, multi-query as its config says: test_infer_readers3.py)."""
    case = _case(model="Custom 7B", layers="32", hidden="4544", ffn="18176", heads="71",
                 kv_heads="", vocab="65024", seq_len="2048")  # fmt: skip
    assert not case.reason and case.model is not None
    assert case.model.activation is Activation.GELU and case.model.kv_heads == 71
    assert any("multi-head attention (kv_heads empty" in a for a in case.assumptions)


def test_a_known_family_of_no_listed_size_keeps_what_the_code_knows_of_it() -> None:
    """Qwen3 8B (Qwen/Qwen3-8B config.json) is dense: no Qwen3 flavor has its size; the common
    decoder takes Qwen3's q / k norm (since s29 readers2 through the open-model table's Qwen3
    8B entry, NeMo's Qwen3Config8B: the same dims, q / k norm and head dim 128)."""
    case = _case(model="Qwen3 8B", layers="36", hidden="4096", ffn="12288", heads="32",
                 kv_heads="8", vocab="151936", seq_len="4096")  # fmt: skip
    assert not case.reason and case.model is not None and case.model.qk_norm
    assert case.model.head_dim == 128 and not case.model.tied_embeddings
    assert any("model 'Qwen3 8B' as Qwen3 8B" in a for a in case.assumptions)


@pytest.mark.parametrize(
    ("cells", "reason"),
    [
        # s28 readers: a family of no published config in the code (Mistral 7B now fills its
        # empty dims from its config, infer_open_models.py)
        ({**MISTRAL, "model": "StableLM 3B", "ffn": ""}, "the CSV does not state ffn"),
        ({**MISTRAL, "model": "StableLM 3B", "vocab": "", "seq_len": ""},
         "the CSV does not state vocab, seq_len"),
        ({**MISTRAL, "model": "StableLM 3B", "kv_heads": "MLA"},
         "kv_heads 'MLA' is not a number"),
        # s33 readers8: an MoE of no known family is the common MoE block when the row states
        # its experts, top-k and expert FFN (infer_generic_moe.py); one without top-k is not
        # (Snowflake Arctic 480B, this case's model before, is refused by name: its dense
        # residual MLP, infer_open_sixth.REFUSED_SIXTH)
        ({**MISTRAL, "model": "FooMoE 480B", "moe": "128 experts"},
         "a mixture of experts of no known family"),
    ],
)  # fmt: skip
def test_a_row_missing_its_architecture_keeps_a_one_line_reason(
    cells: dict[str, str], reason: str
) -> None:
    case = _case(**cells)
    assert reason in case.reason and "of no known family" in case.reason
    assert "\n" not in case.reason


def test_an_a100_40gb_is_its_own_preset() -> None:
    """The 40 GB part's datasheet figures, every other value the 80 GB preset's."""
    assert infer_system("A100-SXM4-40GB").value == "a100-40gb"
    assert infer_system("A100 80GB").value == "a100-80gb"
    small, large = load_system("a100-40gb"), load_system("a100-80gb")
    assert small.accelerator.memory_bytes == 40 * 2**30
    assert small.accelerator.memory_bandwidth_bytes_per_s == 1.555e12
    assert small.network == large.network
    assert (
        replace(
            small.accelerator,
            name=large.accelerator.name,
            memory_bytes=large.accelerator.memory_bytes,
            memory_bandwidth_bytes_per_s=2.039e12,
        )
        == large.accelerator
    )
    case = _case(gpu="A100-SXM4-40GB", precision="BF16")
    assert not case.reason and case.system == "a100-40gb"


def test_a_gh200_is_the_h200_stated_and_an_unlisted_memory_its_capacity() -> None:
    read = infer_system("GH200 (144GB HBM3e)")
    assert read.value == "h200" and "a GH200 read as the H200" in read.assumption
    assert "GH200" not in infer_system("H200 SXM").assumption
    # s33 hbmcap: was refused ("no preset for 96GB"); now the h200 preset at 96 GiB, rates kept
    small = infer_system("GH200 96GB")
    assert small.value == "h200" and "capacity only" in small.assumption
    assert memory_override("GH200 96GB") == (("memory_bytes", float(96 * 2**30)),)
    with pytest.raises(Uninferable, match="matches no system preset"):
        infer_system("Gaudi3")  # MI300X has a preset since s14 amd


def test_a_vocabulary_in_thousands_is_read() -> None:
    """The defect: a vocab of '128K' stopped the row ('is not an integer')."""
    case = _case(vocab="128K")
    assert not case.reason and case.model is not None and case.model.vocab == 128_000
    assert any("the vocab column says '128K'" in a for a in case.assumptions)


@pytest.mark.parametrize(
    ("cells", "metric", "value"),
    [
        ({"tokens_per_s_per_gpu": "14.1k"}, "tokens_per_s_per_gpu", 14_100.0),
        ({"tokens_per_s_per_gpu": "14,451 tokens/s/GPU"}, "tokens_per_s_per_gpu", 14_451.0),
        ({"tokens_per_s_per_gpu": "", "iter_time_s": "1.2 s"}, "iter_time_s", 1.2),
        ({"tokens_per_s_per_gpu": "", "iter_time_s": "850 ms"}, "iter_time_s", 0.85),
    ],
)  # fmt: skip
def test_a_measured_cell_with_its_column_s_unit_is_read(
    cells: dict[str, str], metric: str, value: float
) -> None:
    """The defect: '1.2 s' or '14.1k' was 'not a number'."""
    case = _case(**cells)
    assert not case.reason and case.metric == metric and case.measured == pytest.approx(value)
    column = next(c for c, v in cells.items() if v)
    assert any(f"the {column} column says {cells[column]!r}" in a for a in case.assumptions)


@pytest.mark.parametrize("cell", ["70 GB", "~14000"])
def test_an_ambiguous_measured_cell_stays_a_reason(cell: str) -> None:
    """GB or GiB, an approximate figure: not read."""
    column = "peak_mem_gib" if "GB" in cell else "tokens_per_s_per_gpu"
    cases = row_cases(_row(**{column: cell}), "rows.csv", 1, DATA)
    (case,) = [c for c in cases if c.metric == column]
    assert f"the {column} cell {cell!r} is not a number" in case.reason
