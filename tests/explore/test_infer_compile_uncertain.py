"""torch.compile (and FlashAttention-2 on an AutoModel row) read from the settled clauses of a
row's ``uncertain`` cell (s33 b200native): the cell records the settings of the run's stated
config ('… set … compile model and loss, …') beside what is open ('whether torch.compile was
on', 'compile ran is not stated'); only the former decides, and only after ``notes`` /
``source_table`` / ``source`` leave it open
(:func:`~stage_explore.validation.infer_compile.names_compile`)."""

from __future__ import annotations

import pytest

from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.infer_compile import names_compile, uncertain_says_compiled
from stage_explore.validation.setups import data_dir

NO_SETUP = "published_runs_no_setup.csv"


@pytest.mark.parametrize(
    ("cell", "said"),
    [
        ("the configs a.toml / b.toml set local_batch_size 8, compile model and loss, AdamW", True),
        ("the config sets compile false; which config ran is not stated", False),
        ("whether torch.compile was on is not stated", None),
        ("the README does not say whether torch.compile was on (its text names no compile)", None),
        ("compile use not stated beyond the full-step CUDA graph", None),
        ("the configuration is not stated: read as the other row's (compile, bf16)", None),
        ("sequence 4096; global batch from the table", None),
    ],
)
def test_only_settled_clauses_of_the_uncertain_cell_decide(cell: str, said: bool | None) -> None:
    assert uncertain_says_compiled(cell) is said


def test_the_uncertain_cell_comes_after_the_other_columns() -> None:
    stated = "the config sets compile model and loss"
    assert names_compile({"source": "torchtitan", "uncertain": stated})
    assert not names_compile({"notes": "eager (compile: false)", "uncertain": stated})
    assert not names_compile({"uncertain": "whether compile ran is not stated"})


def test_the_torchtitan_deepep_rows_take_the_compile_their_configs_set() -> None:
    """Both tomls the README names set ``[compile] enable = true, components = ["model",
    "loss"]`` (pytorch/torchtitan qwen3_30b_a3b_with_deepep.toml 6d356730): the blocks fuse
    and the loss is compiled (PyTorch 2.9.0, after pytorch/torchtitan#1033)."""
    rows = {r["id"]: r for r in read_csv(data_dir() / NO_SETUP)}
    (case, *_) = row_cases(rows["TTDEEPEP-B200-QWEN3-30B-A3B-N8"], NO_SETUP, 1, data_dir())
    assert "fused_elementwise=true" in case.backend_key
    assert "loss_fp32_buffers=0" in case.backend_key
    (default_ep, *_) = row_cases(
        rows["TTDEEPEP-B200-QWEN3-30B-A3B-N8-DEFAULTEP"], NO_SETUP, 1, data_dir()
    )
    assert "fused_elementwise" not in default_ep.backend_key  # its config is not stated


def test_an_automodel_row_naming_flashattention_2_runs_it() -> None:
    """The BioNeMo AutoModel comparison selects FlashAttention 2 varlen (its README, stated in
    the row's settled clauses): the flash-attn kernel, not the profile's cuDNN attention."""
    rows = {r["id"]: r for r in read_csv(data_dir() / NO_SETUP)}
    (case, *_) = row_cases(
        rows["BIONEMO-AUTOMODEL-MIXTRAL-8X7B-B200-BF16-DP8"], NO_SETUP, 1, data_dir()
    )
    assert dict(case.framework_options)["attention_kernel"] == "fa2"
    row = dict(rows["BIONEMO-AUTOMODEL-MIXTRAL-8X7B-B200-BF16-DP8"], uncertain="")
    (plain, *_) = row_cases(row, NO_SETUP, 1, data_dir())
    assert "attention_kernel" not in dict(plain.framework_options)
    row["uncertain"] = "whether FlashAttention 2 ran is not stated"
    (open_, *_) = row_cases(row, NO_SETUP, 1, data_dir())
    assert "attention_kernel" not in dict(open_.framework_options)
