"""The fused cross-entropy a Megatron-Core row's text states wins over the container's default
(``stage_explore/validation/infer_loss_impl.py``, s36 rowsJ): the Megatron-FSDP Qwen3-30B-A3B
rows ran Megatron-LM's example script on a nemo:26.04 container with "native cross-entropy
fusion", which the 26.xx container era read as Transformer Engine's."""

from __future__ import annotations

from stage_explore.validation.infer_loss_impl import stated_impls
from stage_explore.validation.setups import Case
from tests.explore.infer_helpers import megatron_row, package_case, package_row, synthetic_case

FILE = "extra.csv"


ROWS = ("MFSDP-GB200-QWEN3-30B-A3B-EP4-V1-BF16", "MFSDP-GB200-QWEN3-30B-A3B-EP4-V2-BF16")


def _options(case: Case) -> dict[str, object]:
    return dict(case.framework_options)


def _loss_notes(case: Case) -> list[str]:
    return [a for a in case.assumptions if "cross-entropy" in a]


def test_megatron_fsdp_rows_read_the_native_loss_they_state() -> None:
    for row_id in ROWS:
        case = package_case(package_row(row_id))
        options = _options(case)
        assert options.get("native_cross_entropy") is True, options
        assert "te_cross_entropy" not in options, options
        (note,) = _loss_notes(case)
        assert "native cross-entropy fusion" in note


def _container_row(**cells: str) -> dict[str, str]:
    return {
        **megatron_row("LOSS-1", "4096"),
        "source": "Megatron-LM example on container nvcr.io/nvidia/nemo:26.04",
        **cells,
    }


def test_unstated_row_keeps_the_container_era() -> None:
    case = synthetic_case(_container_row(), FILE)
    assert _options(case).get("te_cross_entropy") is True
    assert "native_cross_entropy" not in _options(case)


def test_stated_flag_in_the_uncertain_cell_wins() -> None:
    case = synthetic_case(
        _container_row(uncertain="the script passes --cross-entropy-fusion-impl native"), FILE
    )
    assert _options(case).get("native_cross_entropy") is True
    assert "te_cross_entropy" not in _options(case)


def test_stated_te_without_a_container() -> None:
    row = {**megatron_row("LOSS-2"), "notes": "config: cross_entropy_fusion_impl: 'te'"}
    case = synthetic_case(row, FILE)
    assert _options(case).get("te_cross_entropy") is True


def test_two_stated_impls_are_not_read() -> None:
    row = _container_row(notes="TE cross-entropy fusion; later cross_entropy_fusion_impl native")
    assert set(stated_impls(row)) == {"te", "native"}
    case = synthetic_case(row, FILE)
    assert _options(case).get("te_cross_entropy") is True  # the container's reading stays
    assert any("two cross-entropy fusion impls" in a for a in case.assumptions)


def test_other_cross_entropy_words_are_not_an_impl() -> None:
    row = {**megatron_row("LOSS-3"), "notes": "fused cross-entropy; cross-entropy loss fusion on"}
    assert stated_impls(row) == {}


def test_transformer_engine_in_words_reads_te_whatever_its_spacing() -> None:
    for words in ("Transformer Engine", "transformer  engine", "TRANSFORMER\tENGINE"):
        row = {**megatron_row("LOSS-4"), "notes": f"{words} cross-entropy fusion"}
        assert set(stated_impls(row)) == {"te"}, words
