"""Activation memory against Korthikanti et al. 2022, Section 4 (formulas.md §3).

Per layer and micro-batch, the bytes a GPT layer (16-bit activations, dropout, Megatron's unfused
core attention) saves for its backward — ``BoundBlock.saved_bytes`` of the ``layer`` block,
derived from the ops, never written by hand — equal every row of the paper's table exactly.

Along the pipeline schedule (``memory.activation_peak``: a forward adds its chunk's saved bytes,
a backward frees them), the first stage under 1F1B holds ``p`` micro-batches of ``L/p`` layers,
i.e. ``L`` layers of one micro-batch, and ``L·(1 + (p−1)/(p·v))`` with ``v``-way interleaving.
These rules are about *layers*: to check them exactly the embedding and head blocks are
isolated (their saved bytes set to zero), and then accounted for explicitly — the embedding
saves its dropout mask (``s·b·h`` bytes, ``/t`` with SP; Korthikanti Section 4.3), and the
first stage holds it for ``p`` micro-batches under 1F1B, ``2p`` under interleaving (its warm-up
runs ``p`` micro-batches of chunk 0, then ``p`` more while the other chunks fill).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from stage_core.lower.memory import activation_peak, memory_report
from stage_core.lower.program import ProgramSet, StageProgram, lower
from stage_core.models import ModelSpec, get_flavor
from stage_core.parallel import ParallelConfig

GPT = get_flavor("megatron-gpt-1.7b").with_overrides(layers=8)  # a=24, h=2304, s=2048


def layer_bytes(model: ModelSpec, parallel: ParallelConfig) -> int:
    return lower(model.with_overrides(layers=1), parallel).blocks["layer"].saved_bytes


def korthikanti(model: ModelSpec, b: int, t: int, setting: str) -> Fraction:
    """The table of Korthikanti et al. 2022, Section 4 (bytes per layer per micro-batch)."""
    s, h, a = model.seq_len, model.hidden, model.heads
    sbh = Fraction(s * b * h)
    attention = Fraction(5 * a * s, h)
    rows = {
        "none": sbh * (34 + attention),
        "tp": sbh * (10 + Fraction(24, t) + attention / t),
        "tp+sp": sbh / t * (34 + attention),
        "tp+selective": sbh * (10 + Fraction(24, t)),  # Table 2 of the paper
        "tp+sp+selective": 34 * sbh / t,
        "full": 2 * sbh,
        "sp+full": 2 * sbh / t,
    }
    return rows[setting]


#: setting → (sp, recompute); ``t`` = 1 makes the "none" row.
SETTINGS = {
    "tp": (False, "none"),
    "tp+sp": (True, "none"),
    "tp+selective": (False, "selective"),
    "tp+sp+selective": (True, "selective"),
    "full": (False, "full"),
    "sp+full": (True, "full"),
}


@pytest.mark.parametrize("b", [1, 2])
@pytest.mark.parametrize("name", ["megatron-gpt-1.7b", "megatron-gpt-22b"])
def test_no_parallelism_row(name: str, b: int) -> None:
    model = get_flavor(name)
    parallel = ParallelConfig(micro_batch=b)
    assert layer_bytes(model, parallel) == korthikanti(model, b, 1, "none")


@pytest.mark.parametrize("t", [2, 4, 8])
@pytest.mark.parametrize("b", [1, 2])
@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_every_row_of_the_table_is_exact(setting: str, b: int, t: int) -> None:
    sp, recompute = SETTINGS[setting]
    parallel = ParallelConfig(tp=t, sp=sp, recompute=recompute, micro_batch=b)
    assert layer_bytes(GPT, parallel) == korthikanti(GPT, b, t, setting)


def test_data_parallelism_changes_nothing_per_rank() -> None:
    """Tokens are split over dp: the per-rank bytes are those of the rank's micro-batch."""
    one = ParallelConfig(tp=2, sp=True, micro_batch=2)
    many = ParallelConfig(tp=2, sp=True, micro_batch=2, dp=4)
    assert layer_bytes(GPT, one) == layer_bytes(GPT, many) == korthikanti(GPT, 2, 2, "tp+sp")


# -- along the pipeline schedule ----------------------------------------------------------------


def peak(stage: StageProgram) -> int:
    """The liveness walk of ``memory.activation_peak`` over the stage's chunks and tasks."""
    return activation_peak(stage.chunks, stage.tasks)


def without_ends(stage: StageProgram) -> StageProgram:
    """``stage`` with the embedding's and head's saved bytes set to zero (layers only)."""
    chunks = tuple(
        replace(chunk, blocks=tuple(
            replace(block, saved_bytes=0) if block.kind in ("embedding", "head") else block
            for block in chunk.blocks
        ))
        for chunk in stage.chunks
    )
    return replace(stage, chunks=chunks)


def _pipeline(p: int, m: int, schedule: str = "1f1b", vpp: int = 1) -> tuple[ProgramSet, int, int]:
    parallel = ParallelConfig(
        tp=2, pp=p, sp=True, recompute="selective", micro_batch=1, global_batch=m,
        schedule=schedule, vpp=vpp,
    )
    programs = lower(GPT, parallel)
    return programs, programs.blocks["layer"].saved_bytes, programs.blocks["embedding"].saved_bytes


def test_embedding_saves_its_dropout_mask() -> None:
    """Korthikanti Section 4.3: the embedding's dropout mask, ``s·b·h/t`` bytes with SP."""
    programs, _, embedding = _pipeline(2, 2)
    assert embedding == GPT.seq_len * GPT.hidden // 2


@pytest.mark.parametrize(("p", "m"), [(2, 2), (2, 6), (4, 4), (4, 8), (8, 16)])
def test_first_stage_under_1f1b_holds_all_layers_of_one_micro_batch(p: int, m: int) -> None:
    programs, layer, embedding = _pipeline(p, m)
    first = programs.stages[0]
    assert peak(without_ends(first)) == GPT.layers * layer
    assert peak(first) == GPT.layers * layer + p * embedding
    assert memory_report(programs, with_ranks=False)[0].activations_bytes == peak(first)


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8)])
def test_last_stage_under_1f1b_holds_one_micro_batch(p: int, m: int) -> None:
    programs, layer, _ = _pipeline(p, m)
    last = programs.stages[-1]
    head = programs.blocks["head"].saved_bytes
    assert peak(last) == GPT.layers // p * layer + head


@pytest.mark.parametrize(("p", "v", "m"), [(2, 2, 4), (2, 4, 8), (4, 2, 8), (2, 2, 8)])
def test_first_stage_under_interleaving_holds_the_korthikanti_factor(
    p: int, v: int, m: int,
) -> None:
    """``L·(1 + (p−1)/(p·v))`` layers when the schedule reaches its steady state (m ≥ 2p)."""
    programs, layer, embedding = _pipeline(p, m, "interleaved", v)
    first = programs.stages[0]
    factor = 1 + Fraction(p - 1, p * v)
    assert peak(without_ends(first)) == GPT.layers * layer * factor
    assert peak(first) == GPT.layers * layer * factor + 2 * p * embedding


def test_interleaving_with_as_many_micro_batches_as_stages_runs_every_forward_first() -> None:
    """With m = p Megatron's warm-up covers all m·v forwards (``min(warm-up, total)``): the
    first stage then holds every micro-batch of every chunk, L layers × m/p — not the factor."""
    p, v, m = 4, 2, 4
    programs, layer, _ = _pipeline(p, m, "interleaved", v)
    assert peak(without_ends(programs.stages[0])) == GPT.layers * layer * m // p


@pytest.mark.parametrize(("p", "m"), [(2, 2), (2, 6), (4, 8)])
def test_gpipe_holds_every_micro_batch(p: int, m: int) -> None:
    programs, layer, embedding = _pipeline(p, m, "gpipe")
    first = programs.stages[0]
    assert peak(first) == m * (GPT.layers // p * layer + embedding)


def test_head_saves_its_input_norm_and_16_bit_logits() -> None:
    """The generator's head (final norm, output layer, loss) saves ``x`` and ``ln_f``
    (``2·s·b·h/t`` bytes each with SP) and the 16-bit logits (``2·s·b·V/t``). Korthikanti
    Section 4.3 counts the logits in fp32 (``4·s·b·V/t``, Megatron's cross-entropy casts
    them) — a known deviation, documented in docs/parallelism.md."""
    t = 4
    programs = lower(GPT, ParallelConfig(tp=t, sp=True, micro_batch=2))
    s, b, h, vocab = GPT.seq_len, 2, GPT.hidden, 51200
    assert programs.blocks["head"].saved_bytes == 4 * s * b * h // t + 2 * s * b * vocab // t
