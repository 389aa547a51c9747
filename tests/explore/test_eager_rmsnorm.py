"""PyTorch's fused RMSNorm kernels for torchtitan's ``nn.RMSNorm`` (profile option
``fused_rmsnorm``, :mod:`stage_explore.analytical.eager_rmsnorm`): the bytes counted from the
kernels' code, which norms of an eager or a compiled torchtitan model run them, their effect on
an evaluation, and the torchtitan reader's choice by the run's PyTorch release (s32 rmsnorm)."""

from __future__ import annotations

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig, Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.eager import TORCHTITAN_RMSNORM
from stage_explore.analytical.eager_compiled import inductor_rmsnorm
from stage_explore.analytical.eager_rmsnorm import PYTORCH_FUSED_RMSNORM, fused_rmsnorm_op_bytes
from stage_explore.analytical.frameworks import get_framework
from stage_explore.system import load_system
from tests.explore.published_rows import inferred_case as _case

H100 = load_system("h100-80gb")
B = 2  # bytes of a bf16 element
LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=2048)
NORMS = ("ln1", "ln2", "ln_f", "q.norm", "k.norm")


def test_the_fused_kernels_move_what_their_code_reads_and_writes() -> None:
    # forward: the row read for its sum of squares, read again and written scaled
    assert PYTORCH_FUSED_RMSNORM.bytes_per_element(backward=False) == B + (B + B) == 6
    # backward: dy and x read for the row's dot product, again to write dx; both once more
    # for the weight's column sums
    assert PYTORCH_FUSED_RMSNORM.bytes_per_element(backward=True) == 2 * B + 3 * B + 2 * B
    # the op-by-op chain it replaces moves 36 / 92
    assert TORCHTITAN_RMSNORM.bytes_per_element(backward=False) == 36
    assert TORCHTITAN_RMSNORM.bytes_per_element(backward=True) == 92
    # the same passes as Inductor's looped reduction over a Llama-wide row, counted apart
    looped = inductor_rmsnorm(LLAMA.hidden)
    for backward in (False, True):
        assert PYTORCH_FUSED_RMSNORM.bytes_per_element(backward) == looped.bytes_per_element(
            backward
        )


def test_eager_torchtitan_runs_every_norm_fused_compiled_only_the_final_one() -> None:
    eager = fused_rmsnorm_op_bytes(LLAMA, "torchtitan", compiled=False)
    assert set(eager) == {*NORMS, *(f"{n}.backward" for n in NORMS)}
    assert all(eager[n] == 6 and eager[f"{n}.backward"] == 14 for n in NORMS)
    compiled = fused_rmsnorm_op_bytes(LLAMA, "torchtitan", compiled=True)
    assert compiled == {"ln_f": 6, "ln_f.backward": 14}


@pytest.mark.parametrize("modules", ["fms", "generator", "megatron-core", "automodel"])
def test_other_module_tables_keep_their_own_norms(modules: str) -> None:
    assert fused_rmsnorm_op_bytes(LLAMA, modules, compiled=False) == {}


def test_a_layernorm_model_has_no_rmsnorm_to_fuse() -> None:
    gpt = get_flavor("gpt3-1.3b").with_overrides(layers=2)
    assert fused_rmsnorm_op_bytes(gpt, "torchtitan", compiled=False) == {}


def test_the_option_shortens_an_eager_torchtitan_step_and_not_a_compiled_block() -> None:
    assert get_framework("torchtitan").fused_rmsnorm is False  # its code of December 2024
    parallel = ParallelConfig(dp=2, zero=3, global_batch=2, recompute=Recompute.FULL)

    def compute(**overrides: bool) -> float:
        backend = AnalyticalBackend(framework="torchtitan", overrides=overrides)
        return backend.evaluate(LLAMA, parallel, H100).breakdown["compute"]

    assert compute(fused_rmsnorm=True) < compute()
    # compiled, only the final norm (outside the compiled blocks) changes: a small saving
    eager_saving = compute() - compute(fused_rmsnorm=True)
    compiled_saving = compute(fused_elementwise=True) - compute(
        fused_elementwise=True, fused_rmsnorm=True
    )
    assert 0 < compiled_saving < eager_saving / LLAMA.layers


SOURCE = "TorchTitan README (PyTorch torchtitan)"


@pytest.mark.parametrize(
    ("notes", "fused"),
    [
        ("reproduced on NVIDIA B200, PyTorch 2.9.0+cu128", True),  # the fused kernels' release
        ("run in February 2026", True),  # dated after it
        ("reproduced on H100, PyTorch 2.8.0", False),  # the composite's last release
        ("run in February 2026 on PyTorch 2.8.0", False),  # the named release decides
        ("run in December 2024", False),  # torchtitan's own op-by-op RMSNorm
        ("", False),  # undated: the profile's code
    ],
)
def test_the_reader_fuses_rmsnorm_from_pytorch_2_9(notes: str, fused: bool) -> None:
    case = _case(source=SOURCE, source_table="FSDP", notes=notes)
    assert (dict(case.framework_options).get("fused_rmsnorm") is True) is fused
    assert any("pytorch/pytorch#153666" in a for a in case.assumptions) is fused
