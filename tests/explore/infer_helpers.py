"""Shared pieces of the inferred-row tests: the one case a CSV row infers, checked to be evaluable
(Megatron-Bridge's MoE recipes: test_infer_bridge_moe.py, test_infer_bridge_dispatch.py,
test_infer_bridge_hybridep_layouts.py), and a synthetic row's case, model, layout or one-line
refusal with a model's published dims (the open-model reader tests: test_infer_open_models.py,
test_infer_readers2.py … test_infer_readers6.py), their Megatron-LM row template
(:func:`megatron_row`), and a package row of ``published_runs_no_setup.csv`` with its first case
(:func:`package_row`, :func:`package_case`)."""

from __future__ import annotations

from stage_core.models import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.setups import Case, data_dir

#: The package's rows without a hand-written setup (the inferred path).
NO_SETUP = "published_runs_no_setup.csv"


def package_row(row_id: str, file: str = NO_SETUP) -> dict[str, str]:
    """The package's row ``row_id`` of ``file`` (exactly one)."""
    (row,) = [r for r in read_csv(data_dir() / file) if r["id"] == row_id]
    return row


def package_case(row: dict[str, str], file: str = NO_SETUP) -> Case:
    """The first case the package row ``row`` of ``file`` infers (reason or not)."""
    (case, *_) = row_cases(row, file, 1, data_dir())
    return case


def inferred_case(row: dict[str, str]) -> Case:
    """The single case ``row`` (a published-runs CSV row of a file ``extra.csv``) infers; it must
    carry no reason against evaluating it and a parallel layout."""
    (case,) = row_cases(row, "extra.csv", 1)
    assert not case.reason, case.reason
    assert case.parallel is not None
    return case


def megatron_row(row_id: str, seq_len: str = "2048") -> dict[str, str]:
    """The open-model reader tests' template: a Megatron-LM row of 8 H100, all data parallel,
    Llama 3.1 8B at ``seq_len`` tokens (each test replaces the model cell)."""
    return {
        "id": row_id, "source": "Megatron-LM benchmark", "model": "Llama 3.1 8B",
        "gpu": "H100", "num_gpus": "8", "tp": "1", "pp": "1", "dp": "8", "seq_len": seq_len,
        "global_batch_seqs": "16", "micro_batch": "2", "precision": "bf16",
        "tokens_per_s_per_gpu": "4000",
    }  # fmt: skip


def synthetic_case(base: dict[str, str], file: str, **cells: str) -> Case:
    """The first case the row ``base`` with ``cells`` replaced infers, as a row of ``file`` beside
    the package's data."""
    (case, *_) = row_cases({**base, **cells}, file, 1, data_dir())
    return case


def synthetic_model(base: dict[str, str], file: str, **cells: str) -> ModelSpec:
    """The model that row sets up (it must set one up)."""
    case = synthetic_case(base, file, **cells)
    assert case.model is not None, case.reason
    return case.model


def synthetic_parallel(base: dict[str, str], file: str, **cells: str) -> ParallelConfig:
    """The parallel layout that row sets up (it must set one up)."""
    case = synthetic_case(base, file, **cells)
    assert case.parallel is not None, case.reason
    return case.parallel


def synthetic_refusal(base: dict[str, str], file: str, **cells: str) -> str:
    """The one-line reason that row is refused (it must be refused)."""
    case = synthetic_case(base, file, **cells)
    assert case.model is None and "\n" not in case.reason
    return case.reason


def published_dims(spec: ModelSpec) -> tuple[int, int, int, int, int, int, int, bool]:
    """A model's dims as the open-model tests list a published config: layers, hidden, ffn,
    heads, kv_heads, head_dim, vocab, tied embeddings."""
    return (spec.layers, spec.hidden, spec.ffn, spec.heads, spec.kv_heads, spec.head_dim,
            spec.vocab, spec.tied_embeddings)  # fmt: skip
