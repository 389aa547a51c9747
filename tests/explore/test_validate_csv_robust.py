"""The further held-out set's CSV as a person copying from a paper, a blog or an MLPerf log types
it (s18 csvrobust): each cell that was misread is now read right or refused with a one-line
reason naming the cell, and a CSV's layout (column order, unknown or missing columns, BOM, CRLF,
quoted header, several files) is read or reported in one line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore.cli import main
from stage_explore.validation.csv_cells import (
    IntegerCellError,
    integer_cells,
    negative_cell,
    read_csv,
)
from stage_explore.validation.infer import inferred_cases, row_cases
from stage_explore.validation.setups import Case, configured_cases, data_dir, load_setups

DATA = data_dir()
#: NeMo 24.07's Llama 3 70B row: TP 4, PP 4, CP 2, VP 5 on 64 H100, FP8, tokens/s per GPU.
TEMPLATE = "NEMO2407-H100-LLAMA3-70B"
#: Megatron-Bridge 25.11's Llama 3 8B on 8 H100 (quick to evaluate end to end).
SMALL = "MBD-H100-25.11-LLAMA3_8B"
#: The template's text without the columns that name its framework.
NEUTRAL = {"source": "A further table", "source_table": "", "url": "", "notes": "", "uncertain": ""}


def _row(template: str = TEMPLATE, row_id: str = "CSV-1", **cells: str) -> dict[str, str]:
    (row,) = [r for r in read_csv(DATA / "published_runs_held_out.csv") if r["id"] == template]
    return {**row, **NEUTRAL, "id": row_id, **cells}


def _case(**cells: str) -> Case:
    case, *_ = row_cases(_row(**cells), "rows.csv", 1, DATA)
    return case


@pytest.mark.parametrize(
    ("cell", "said"),
    [
        ("98,112 tokens/s", "does not say per GPU"),
        ("1533 tok/s", "does not say per GPU"),
        ("1533 TPS", "does not say per GPU"),
        ("12,264 tokens/s/node", "per node"),
        ("98k total", "total"),
    ],
)
def test_a_rate_that_does_not_say_per_gpu_is_refused(cell: str, said: str) -> None:
    """The defect: ``98,112 tokens/s`` (a job's total, as a blog prints it) was read as 98,112
    tokens/s per GPU; a rate's unit must say per GPU."""
    case = _case(tokens_per_s_per_gpu=cell, tflops_per_gpu="")
    assert case.reason and said in case.reason and repr(cell) in case.reason, case.reason
    assert "\n" not in case.reason


@pytest.mark.parametrize(
    ("cells", "metric", "value"),
    [
        ({"tokens_per_s_per_gpu": "1,533 tokens/s per GPU"}, "tokens_per_s_per_gpu", 1533.0),
        ({"tokens_per_s_per_gpu": "1533 TPS/GPU"}, "tokens_per_s_per_gpu", 1533.0),
        ({"tokens_per_s_per_gpu": "1533*"}, "tokens_per_s_per_gpu", 1533.0),
        ({"tokens_per_s_per_gpu": "", "tflops_per_gpu": "738 TFLOP/s/GPU"}, "tflops_per_gpu",
         738.0),
        ({"tokens_per_s_per_gpu": "", "iter_time_s": "5.47 sec/step"}, "iter_time_s", 5.47),
        ({"tokens_per_s_per_gpu": "", "iter_time_s": "5,470 ms/iter"}, "iter_time_s", 5.47),
    ],
)  # fmt: skip
def test_a_measured_cell_with_a_per_gpu_unit_or_a_footnote_mark_is_read(
    cells: dict[str, str], metric: str, value: float
) -> None:
    case = _case(**cells)
    assert not case.reason, case.reason
    assert (case.metric, case.measured) == (metric, pytest.approx(value))


@pytest.mark.parametrize(
    ("cells", "said"),
    [
        ({"tokens_per_s_per_gpu": "", "iter_time_s": "1.2 min"}, "minutes"),
        ({"tokens_per_s_per_gpu": "", "tflops_per_gpu": "0.74 PFLOP/s"}, "PFLOP/s"),
    ],
)
def test_a_measured_cell_in_another_unit_names_it(cells: dict[str, str], said: str) -> None:
    case = _case(**cells)
    assert said in case.reason, case.reason


@pytest.mark.parametrize("cell", ["FP8 rowwise", "fp8_rowwise", "Float8 (rowwise)"])
def test_fp8_with_row_wise_scales_is_refused_not_read_as_delayed(cell: str) -> None:
    """The defect: torchao's Float8 ``rowwise`` recipe was read as delayed scaling. On a
    Megatron-Core row (Transformer Engine has no row-wise recipe) it is refused (s23 rowwise)."""
    case = _case(precision=cell)
    assert "row-wise" in case.reason and repr(cell) in case.reason, case.reason
    assert "Transformer Engine" in case.reason and "megatron-core" in case.reason, case.reason


@pytest.mark.parametrize("cell", ["FULL_SHARD", "HYBRID_SHARD", "SHARD_GRAD_OP", "fully_shard"])
def test_pytorch_fsdp_sharding_names_read_as_fsdp(cell: str) -> None:
    """The defect: ``FULL_SHARD`` (PyTorch FSDP's ShardingStrategy) with no framework named
    elsewhere ran Megatron-Core with ZeRO-3."""
    (row,) = [r for r in read_csv(DATA / "published_runs_held_out.csv") if r["id"] == SMALL]
    row = {**row, **NEUTRAL, "id": "CSV-FSDP", "dp_sharding": cell}
    case, *_ = row_cases(row, "rows.csv", 1, DATA)
    assert case.framework == "fsdp", (case.framework, case.reason)
    assert any(f"dp_sharding column names {cell!r}" in a for a in case.assumptions)


@pytest.mark.parametrize(
    ("source", "name"),
    [("MaxText on A3 Mega", "MaxText"), ("Nanotron benchmark", "Nanotron"),
     ("HF Accelerate + DeepSpeed", ""), ("Colossal-AI Gemini", "Colossal-AI"),
     ("OLMo-core", "OLMo-core")],
)  # fmt: skip
def test_a_framework_without_a_profile_is_refused(source: str, name: str) -> None:
    """The defect: a row naming MaxText (JAX) or Nanotron ran as the megatron-core default.
    Named beside a framework the model has (DeepSpeed), that one is read."""
    case = _case(source=source)
    if name:
        assert case.reason.startswith("the source column names") and name in case.reason
    else:
        assert not case.reason and case.framework == "deepspeed", case.reason


def test_a_deepspeed_stage_in_dp_sharding_is_a_framework_the_model_has() -> None:
    """A DeepSpeed stage in ``dp_sharding`` (``ZeRO3``, which :data:`FRAMEWORK_RULES` does not
    spell) beside an unmodelled framework's name reads as DeepSpeed, as the profile
    :func:`infer_framework` reads (s19 review: ``unmodelled_framework`` ran the rules again and
    refused the row)."""
    case = _case(source="MaxText comparison", dp_sharding="ZeRO3")
    assert not case.reason and case.framework == "deepspeed", case.reason


def test_an_integer_cell_with_separators_and_a_decimal_zero_is_read() -> None:
    """``128,256.0`` in an integer column reads as 128,256 on the inferred path as on the
    setups path (:func:`~stage_explore.validation.csv_cells.int_cell`, s19 review: the inferred
    path's own pattern refused it)."""
    case = _case(vocab="128,256.0")
    assert not case.reason and case.model is not None, case.reason
    assert case.model.vocab == 128256


@pytest.mark.parametrize(("source", "zero"), [
    ("DeepSpeed zero_2 run", 2), ("DeepSpeed ZeRO stage-2", 2), ("DeepSpeed ZeRO-0", 0),
])  # fmt: skip
def test_every_spelling_of_a_named_zero_stage_sets_it(source: str, zero: int) -> None:
    """The stage a DeepSpeed row's source names is the stage run, however the name is spelled
    (s19 review: ``zero_2``, ``stage-2`` and ``ZeRO-0`` were found by the source's pattern but
    not read by ``infer_zero``'s, and ran the profile's default ZeRO-1). No pipeline stages:
    DeepSpeed refuses ZeRO-2 / ZeRO-3 with them (s27 spellings2)."""
    case = _case(source=source, pp="1", vpp="", dp="8")
    assert case.parallel is not None and case.parallel.zero == zero, case.reason
    assert any("dp_sharding empty; the source column names" in a for a in case.assumptions)


def test_composer_reads_as_llm_foundry() -> None:
    """MosaicML's Composer is llm-foundry's trainer (was the megatron-core default)."""
    assert _case(source="Composer FSDP benchmark").framework == "llm-foundry-2023"


def test_a_deepspeed_zero_stage_named_in_the_source_sets_the_stage() -> None:
    """The defect: ``DeepSpeed ZeRO-3`` in ``source`` with ``dp_sharding`` empty ran ZeRO-1 (no
    pipeline stages: DeepSpeed refuses ZeRO-3 with them, s27 spellings2)."""
    case = _case(source="DeepSpeed ZeRO-3 benchmark", pp="1", vpp="", dp="8")
    assert case.framework == "deepspeed" and case.parallel is not None
    assert case.parallel.zero == 3
    assert any("the source column names 'ZeRO-3'" in a for a in case.assumptions)
    two = _case(source="DeepSpeed ZeRO-3 vs ZeRO-1")  # two stages: the profile's default
    assert two.parallel is not None and two.parallel.zero == 1
    stated = _case(source="DeepSpeed ZeRO-3", dp_sharding="ZeRO-1")  # the column comes first
    assert stated.parallel is not None and stated.parallel.zero == 1


@pytest.mark.parametrize(("cell", "value"), [("64*", 64), ("64 †", 64)])
def test_an_integer_cell_with_a_footnote_mark_is_read(cell: str, value: int) -> None:
    case = _case(num_gpus=cell)
    assert not case.reason, case.reason
    assert any("a footnote mark" in a and repr(cell) in a for a in case.assumptions)


def test_the_moe_cell_is_read_in_its_other_orders_or_refused() -> None:
    (row,) = [r for r in read_csv(DATA / "published_runs_no_setup.csv")
              if r["id"] == "NEMO2504-GB200-MIXTRAL-8X7B"]  # fmt: skip
    row = {**row, "id": "CSV-MOE"}

    def case(moe: str) -> Case:
        return row_cases({**row, "moe": moe}, "rows.csv", 1, DATA)[0]

    for cell in ("top-4 of 16", "16 Experts, top-4", "16E top-4"):
        model = case(cell).model
        assert model is not None and (model.num_experts, model.top_k) == (16, 4), cell
    refused = case("8/2")
    assert refused.reason.startswith("moe '8/2'"), refused.reason


def _write(path: Path, rows: list[dict[str, str]], fields: list[str], **kwargs: str) -> None:
    with open(path, "w", newline="", encoding=kwargs.pop("encoding", "utf-8")) as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore", **kwargs)  # type: ignore[arg-type]
        writer.writeheader()
        writer.writerows(rows)


def test_validate_data_reads_a_folder_of_csvs_as_people_write_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Columns in another order with unknown ones (named once in the row count), a BOM and
    CRLF line endings, a quoted header in a file not named ``published_runs*``, a file without
    ``global_batch_seqs`` (the row's reason names the missing column) and one without ``gpu``
    (not read, said in one line)."""
    row = _row(SMALL, "CSV-A")
    schema = list(row)
    _write(tmp_path / "a.csv", [{**row, "framework_version": "NeMo 25.11", "comment": "x"}],
           [*schema[::-1], "framework_version", "comment"], encoding="utf-8-sig",
           lineterminator="\r\n")  # fmt: skip
    _write(tmp_path / "b.csv", [{**row, "id": "CSV-B"}], schema, quoting=csv.QUOTE_ALL)  # type: ignore[arg-type]
    _write(tmp_path / "c.csv", [{**row, "id": "CSV-C"}],
           [c for c in schema if c != "global_batch_seqs"])  # fmt: skip
    _write(tmp_path / "d.csv", [{**row, "id": "CSV-D"}], [c for c in schema if c != "gpu"])
    assert main(["validate", "--data", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    count = report["accounting"]
    assert count["files"] == {"a.csv": 1, "b.csv": 1, "c.csv": 1}
    assert count["rows_evaluated"] == 2 and count["rows_unaccounted"] == []
    assert count["columns_not_read"] == ["a.csv (framework_version, comment)"]
    assert [f.split(" ")[0] for f in count["files_not_read"]] == ["d.csv"]
    (missing,) = [r for r in report["rows"] if r["id"] == "CSV-C"]
    assert "the file has no global_batch_seqs column" in missing["not_evaluated_reason"]


@pytest.mark.parametrize(("column", "cell"), [("kv_heads", "MHA"), ("kv_heads", "GQA-8"),
                                              ("ffn", "3.5x"), ("ffn", "n/a")])  # fmt: skip
def test_text_in_kv_heads_or_ffn_is_refused_not_dropped_for_the_flavors(
    column: str, cell: str
) -> None:
    """The defect: ``kv_heads`` ``MHA`` on Llama 3 70B ran the flavor's 8 KV heads (the text
    was dropped); only an MoE ``ffn`` of ``… per expert`` and ``MLA`` are text the flavor
    answers."""
    case = _case(**{column: cell})
    assert f"column {column}: {cell!r} is not an integer" in case.reason, case.reason


def test_kv_heads_with_a_remark_is_read() -> None:
    case = _case(kv_heads="64 (MHA)")
    assert case.model is not None and case.model.kv_heads == 64, case.reason


def test_an_unquoted_thousands_separator_is_refused_not_read_shifted(tmp_path: Path) -> None:
    """The defect: ``…,14,451,…`` typed without quotes split the cell in two, every cell after
    it moved one column right and the cell past the header (the empty ``notes``) was dropped
    silently: the row read ``tokens_per_s_per_gpu`` 14. A row with fewer cells than the header
    (trailing cells left out) is read, its missing cells empty."""
    row = _row(SMALL, "CSV-SHIFT")
    assert list(row)[-1] == "notes" and not row["notes"]
    text = ",".join(f'"{c}"' for c in row) + "\n"
    cells = [f'"{v}"' if k != "tokens_per_s_per_gpu" else "14,451" for k, v in row.items()]
    text += ",".join(cells) + "\n"
    text += ",".join(f'"{v}"' for v in list({**row, "id": "CSV-SHORT"}.values())[:-2]) + "\n"
    path = tmp_path / "runs.csv"
    path.write_text(text, encoding="utf-8")
    shifted, short = (row_cases(r, "runs.csv", i, DATA)[0]
                      for i, r in enumerate(read_csv(path), 1))  # fmt: skip
    assert shifted.reason.startswith(f"the row has {len(row) + 1} cells but the header "
                                     f"{len(row)}"), shifted.reason  # fmt: skip
    assert not short.reason and short.measured == 14_451.0, short.reason


def test_a_configured_row_with_more_cells_than_the_header_is_refused(tmp_path: Path) -> None:
    """A row a ``setups.toml`` source claims is refused the same way (a one-line ConfigError
    naming the file and the row), not read shifted (s19 review: the check was the inferred
    path's only, and a claimed row ending in extra commas, or split by an unquoted 14,451, was
    read silently)."""
    sources, _ = load_setups(DATA / "setups.toml")
    source = next(s for s in sources if s.file == "published_runs.csv" and not s.columns)
    with open(DATA / source.file, newline="", encoding="utf-8") as handle:
        table = list(csv.reader(handle))
    line = next(i for i, cells in enumerate(table[1:], 1) if cells[0].startswith(source.id_prefix))
    table[line] += ["", ""]  # the row ends in two extra commas
    with open(tmp_path / source.file, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(table)
    with pytest.raises(ConfigError) as error:
        configured_cases(tmp_path, [source], {})
    message = str(error.value)
    assert message.startswith(f"{source.file}: row {line} ({table[line][0]}): the row has "
                              f"{len(table[0]) + 2} cells but the header {len(table[0])}")
    assert "\n" not in message


def test_a_duplicate_id_is_evaluated_once_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The defect: the same id twice (a row pasted twice, or in two files of the folder) was
    evaluated twice and weighed twice in its source's error; the later row is now not
    evaluated, its reason naming the first."""
    row = _row(SMALL, "CSV-DUP")
    schema = list(row)
    _write(tmp_path / "a.csv", [row, {**row, "tokens_per_s_per_gpu": "1"}], schema)
    _write(tmp_path / "b.csv", [row, {**row, "id": "CSV-OTHER"}], schema)
    assert main(["validate", "--data", str(tmp_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    dup = [r for r in rows if r["id"] == "CSV-DUP"]
    assert [r["evaluated"] for r in dup] == [True, False, False]
    assert dup[0]["measured"] == float(row["tokens_per_s_per_gpu"].replace(",", ""))
    reasons = [r["not_evaluated_reason"] for r in dup[1:]]
    assert all(r.startswith("duplicate id 'CSV-DUP': row 1 of a.csv has it") for r in reasons)
    assert [r["evaluated"] for r in rows if r["id"] == "CSV-OTHER"] == [True]


def test_an_unclaimed_row_with_a_claimed_rows_id_is_named_a_duplicate(tmp_path: Path) -> None:
    """An id a ``setups.toml`` source's row states counts as stated first, whatever the file
    order: an unclaimed row with it (here in ``a.csv``, read before the source's file) is not
    evaluated again (s19 review: only the unclaimed rows' ids were compared)."""
    sources, _ = load_setups(DATA / "setups.toml")
    source = next(s for s in sources if s.file == "published_runs.csv" and not s.columns)
    (tmp_path / source.file).write_bytes((DATA / source.file).read_bytes())
    rows = read_csv(DATA / source.file)
    line, claimed = next((i, r["id"]) for i, r in enumerate(rows, 1)
                         if r["id"].startswith(source.id_prefix))  # fmt: skip
    row = _row(SMALL, claimed)
    _write(tmp_path / "a.csv", [row], list(row))
    cases, *_ = inferred_cases(tmp_path, [source])
    (case,) = [c for c in cases if c.id == claimed]
    assert case.reason.startswith(f"duplicate id {claimed!r}: row {line} of {source.file} has it")


@pytest.mark.parametrize("cells", [{"tp": "TP=4"}, {"tp": "tp4"}, {"tp": "TP 4", "vpp": "VP=5"},
                                   {"pp": "PP: 4", "vpp": "vpp5"}])  # fmt: skip
def test_a_layout_cell_naming_its_own_axis_is_read(cells: dict[str, str]) -> None:
    """``TP=8`` in the tp column (as a table prints a layout) is the degree 8, said in the row's
    assumptions; it was refused as not an integer."""
    plain = _case()
    case = _case(**cells)
    assert not case.reason, case.reason
    assert case.parallel == plain.parallel
    for column, cell in cells.items():
        assert any(f"the {column} column says {cell!r}" in a for a in case.assumptions), cell


def test_another_axis_named_in_a_layout_cell_is_refused() -> None:
    case = _case(tp="PP=4")
    assert "column tp: 'PP=4' is not an integer" in case.reason, case.reason


@pytest.mark.parametrize(("column", "cell"), [("tp", "-8"), ("pp", "\u22122"), ("num_gpus", "-64")])
def test_a_negative_count_is_refused_as_negative(column: str, cell: str) -> None:
    """The defect (s19 usertour): ``-8`` in ``tp`` was refused as 'not an integer'; the reason
    now says what is wrong with it."""
    case = _case(**{column: cell})
    assert f"column {column}: {cell!r} is negative (expected a count)" in case.reason, case.reason


def test_a_dash_alone_is_still_not_stated() -> None:
    assert not negative_cell("-") and not negative_cell("") and negative_cell(" -1,024 ")


def test_one_integer_cell_check_takes_its_columns_and_empty_cells_as_data() -> None:
    """s19 review2: the inferred rows' and the setups rows' integer-cell checks are one
    (:func:`integer_cells`), each caller with its column set and its not-stated cells."""
    row = {"id": "R", "tp": "1,024", "pp": "8.0", "dp": "N/A", "cp": "", "layers": "-8"}
    assert integer_cells(row, ("tp", "pp", "dp", "cp", "ep"), ("", "n/a")) == {"tp": 1024, "pp": 8}
    with pytest.raises(IntegerCellError, match=r"^column dp: 'N/A' is not an integer$"):
        integer_cells(row, ("tp", "dp"), ("",))
    with pytest.raises(IntegerCellError) as bad:
        integer_cells(row, ("cp", "layers"), ("",))
    assert (bad.value.column, bad.value.cell) == ("layers", "-8")
    assert bad.value.what == "is negative (expected a count)"
