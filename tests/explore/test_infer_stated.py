"""The shared reads of :mod:`stage_explore.validation.infer_stated` (7 Dec 2026, s37 tidy)."""

from __future__ import annotations

from stage_explore.validation.infer_stated import names_kempnerforge, stated_or_inferred


def test_a_stated_cell_wins_over_the_inferred_field() -> None:
    assert stated_or_inferred({"tp": 4}, {"tp": 2}, "tp") == 4


def test_an_empty_cell_takes_the_inferred_field_as_an_integer() -> None:
    assert stated_or_inferred({}, {"dp": 8.0}, "dp") == 8
    assert isinstance(stated_or_inferred({}, {"dp": 8.0}, "dp"), int)


def test_neither_gives_the_default() -> None:
    assert stated_or_inferred({"tp": 2}, {"pp": 4}, "dp") == 1
    assert stated_or_inferred({}, {}, "dp", default=0) == 0


def test_kempnerforge_is_read_in_the_text_columns_only() -> None:
    assert names_kempnerforge({"source": "trained with kempnerforge (FSDP2)"})
    assert names_kempnerforge({"notes": "KempnerForge's MFU report"})
    assert not names_kempnerforge({"model": "KempnerForge 7B", "source": "a trainer"})
    assert not names_kempnerforge({"source": "KempnerForgeX"})
