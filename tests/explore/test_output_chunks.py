"""torch pipelining's kept stage outputs (``pipelining_output_chunks``, ``pipelining_output_fp32``;
stage_explore/analytical/output_chunks.py), against closed forms computed here, and the reader's
dating of them for torchtitan rows (infer_torch.TORCHTITAN_ERAS)."""

from __future__ import annotations

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.output_chunks import (
    in_flight_output_bytes,
    kept_after_backward_bytes,
    peak_with_kept_outputs,
)
from stage_explore.analytical.pipeline import _peak_activations
from stage_explore.system import load_system
from tests.explore.published_rows import inferred_case

CHUNKS = [(True, False), (False, False), (False, True)]  # first, middle, last


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("every", (10, 10, 7 * 4)),  # every stage keeps its output; the last its logits
        ("last", (0, 0, 7 * 4)),  # torch 2.8 on: the last stage only
        ("none", (0, 0, 0)),  # step(return_outputs=False)
    ],
)
def test_kept_bytes_per_backward_closed_forms(mode: str, expected: tuple[int, ...]) -> None:
    assert kept_after_backward_bytes(mode, CHUNKS, 10, 7, 4) == expected


def test_only_fp32_logits_are_held_beside_the_loss_in_flight() -> None:
    assert in_flight_output_bytes(True, CHUNKS, 7) == (0, 0, 28)
    assert in_flight_output_bytes(False, CHUNKS, 7) == (0, 0, 0)


def test_bad_values_name_what_was_expected() -> None:
    with pytest.raises(ValueError, match="mode must be one of every, last, none"):
        kept_after_backward_bytes("all", CHUNKS, 10, 7, 4)
    with pytest.raises(ValueError, match="output_bytes >= 1"):
        kept_after_backward_bytes("last", CHUNKS, 10, 7, 0)
    with pytest.raises(ValueError, match="expected 1 kept sizes"):
        peak_with_kept_outputs("1f1b", 0, 2, 4, 1, (5,), (1, 1))


@pytest.mark.parametrize(
    ("kind", "p", "m", "vpp", "sizes"),
    [
        ("1f1b", 4, 8, 1, (7,)),
        ("gpipe", 4, 8, 1, (7,)),
        ("interleaved", 4, 8, 2, (7, 3)),
        ("zb", 4, 8, 1, (7, 2)),
    ],
)
def test_without_kept_outputs_the_walk_is_the_activation_peak(
    kind: str, p: int, m: int, vpp: int, sizes: tuple[int, ...]
) -> None:
    chunks = len(sizes) // (2 if kind == "zb" else 1)
    for stage in range(p):
        walked = peak_with_kept_outputs(kind, stage, p, m, vpp, sizes, (0,) * chunks)
        if kind == "gpipe":
            assert walked == m * sum(sizes)
        else:
            assert walked == _peak_activations(kind, stage, p, m, vpp, sizes)


def test_the_last_stage_of_1f1b_holds_every_earlier_output_at_its_last_forward() -> None:
    # the last of 2 stages runs F0 B0 F1 B1 ...: after F3, one micro-batch in flight and three
    # outputs kept; after B3 four outputs and no activations
    assert peak_with_kept_outputs("1f1b", 1, 2, 4, 1, (10,), (3,)) == 10 + 3 * 3
    assert peak_with_kept_outputs("1f1b", 1, 2, 4, 1, (10,), (30,)) == 4 * 30
    # the first stage: 2 in flight after the warm-up; at its last forward 2 backwards have run
    assert peak_with_kept_outputs("1f1b", 0, 2, 4, 1, (10,), (3,)) == 2 * 10 + 2 * 3


LLAMA = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=1024)
PLAIN = {
    "runtime_reserved_bytes": 0,
    "allocator_overhead": 0.0,
    "loss_fp32_buffers": 0,
    "loss_parallel": False,
}


def _peak(recompute: Recompute, **options: object) -> int:
    """The tensor peak of 4 micro-batches of one sequence over 2 torchtitan stages."""
    parallel = ParallelConfig(
        pp=2, dp=2, zero=3, recompute=recompute, micro_batch=1, global_batch=8
    )
    backend = AnalyticalBackend(framework="torchtitan", overrides={**PLAIN, **options})
    return backend.evaluate(LLAMA, parallel, load_system("h100-80gb")).peak_memory_bytes


def test_the_last_stage_keeps_its_logits_until_the_step_ends() -> None:
    # full recompute: the head's weights make the last stage the peak (test_pipelining_buffers)
    logits = 1024 * LLAMA.vocab  # one micro-batch's logits, tp 1
    none = _peak(Recompute.FULL, pipelining_output_chunks="none", pipelining_output_fp32=False)
    bf16 = _peak(Recompute.FULL, pipelining_output_chunks="last", pipelining_output_fp32=False)
    fp32 = _peak(Recompute.FULL, pipelining_output_chunks="last", pipelining_output_fp32=True)
    assert bf16 - none == 3 * 2 * logits  # three earlier micro-batches' bf16 logits
    assert fp32 - none == 4 * 4 * logits  # and the current one's fp32 logits beside the loss


def test_every_stage_keeps_its_outputs_before_torch_2_8() -> None:
    # no recompute, a small vocabulary: stage 0 is the peak, 2 micro-batches in flight there;
    # at its last forward 2 backwards have run, so 2 outputs are kept beyond the model's count
    model = LLAMA.with_overrides(vocab=512)
    parallel = ParallelConfig(pp=2, dp=2, zero=3, recompute=Recompute.NONE, micro_batch=1,
                              global_batch=8)  # fmt: skip
    system = load_system("h100-80gb")
    peaks = {
        mode: AnalyticalBackend(
            framework="torchtitan",
            overrides={**PLAIN, "pipelining_output_chunks": mode, "pipelining_output_fp32": False},
        ).evaluate(model, parallel, system)
        for mode in ("every", "last")
    }
    boundary = 1024 * LLAMA.hidden * 2
    assert peaks["every"].peak_memory_bytes - peaks["last"].peak_memory_bytes == 2 * boundary
    assert peaks["every"].step_time_s == peaks["last"].step_time_s  # memory only


def test_the_profiles_read_torch_of_their_time() -> None:
    titan = get_framework("torchtitan")  # December 2024: torch nightly 1963fc8
    assert titan.pipelining_output_chunks == "every" and titan.pipelining_output_fp32
    automodel = get_framework("automodel")  # 2025: torch 2.8 on
    assert automodel.pipelining_output_chunks == "last" and not automodel.pipelining_output_fp32


SOURCE = "TorchTitan README (PyTorch torchtitan)"


@pytest.mark.parametrize(
    ("notes", "chunks", "fp32"),
    [
        ("run in December 2024", None, None),  # the profile's own: every stage, fp32
        ("run in July 2025", "last", False),  # pytorch/pytorch#153383; the loss upcasts
        ("run in February 2026", "none", False),  # pytorch/torchtitan#1922
        ("run in February 2026 on PyTorch 2.9.0", "last", False),  # 2.9 has no return_outputs
        ("run in February 2026 on PyTorch 2.7.0", None, False),  # 2.7 predates #153383
    ],
)
def test_the_reader_dates_the_kept_outputs(
    notes: str, chunks: str | None, fp32: bool | None
) -> None:
    case = inferred_case(source=SOURCE, source_table="FSDP", notes=notes, pp="2")
    options = dict(case.framework_options)
    assert options.get("pipelining_output_chunks") == chunks
    assert options.get("pipelining_output_fp32") == fp32
