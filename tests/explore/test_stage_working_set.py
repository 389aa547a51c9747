"""A pipeline stage's backward transient is its own blocks' (s37 vocab2): the first stage of a
pipeline never runs the output layer's backward, so it is not charged the logits gradient the
largest-vocabulary block holds; ``stage memory`` (stage_core) and the analytical backend agree."""

from __future__ import annotations

from stage_core.lower.memory import backward_working_set, memory_report, recompute_working_set
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.system import load_system

#: Two layers per stage under PP 2 and a 256,000-entry vocabulary: the head's backward
#: (its 16-bit logits gradient, seq x V) outweighs a layer's.
MODEL = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=2048, vocab=256000)
PLAIN = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0}


def _parallel(recompute: Recompute = Recompute.NONE) -> ParallelConfig:
    return ParallelConfig(pp=2, dp=1, recompute=recompute, global_batch=8)


def test_the_head_holds_the_largest_backward_and_only_the_last_stage_is_charged_it() -> None:
    programs = lower(MODEL, _parallel())
    blocks = programs.blocks
    head = backward_working_set(blocks["head"])
    layer = backward_working_set(blocks["layer"])
    assert head > 2 * layer > 0
    assert recompute_working_set(programs.workload, blocks) == head  # the whole model's
    first, last = memory_report(programs)
    assert last.transient_bytes == head
    own = {kind for kind in blocks if kind != "head"}
    assert first.transient_bytes == recompute_working_set(programs.workload, blocks, kinds=own)
    assert first.transient_bytes < head


def test_a_stage_of_recomputed_layers_keeps_their_re_materialised_activations() -> None:
    programs = lower(MODEL, _parallel(Recompute.FULL))
    first, _ = memory_report(programs)
    kinds = {kind for kind in programs.blocks if kind != "head"}
    none = recompute_working_set(lower(MODEL, _parallel()).workload, programs.blocks, kinds=kinds)
    assert first.transient_bytes == recompute_working_set(
        programs.workload, programs.blocks, kinds=kinds
    )
    assert first.transient_bytes >= none > 0


def test_the_analytical_peak_is_the_worst_stage_with_its_own_transient() -> None:
    # PP 4, 1F1B: the first stage holds four micro-batches in flight and the embedding, the
    # peak; the last holds the head, whose backward (the logits gradient) is the largest
    model = get_flavor("llama3-8b").with_overrides(layers=8, seq_len=4096)
    parallel = ParallelConfig(pp=4, dp=1, global_batch=16)
    stages = memory_report(lower(model, parallel))
    own = max(s.peak_bytes for s in stages)
    assert own == stages[0].peak_bytes
    largest = max(s.transient_bytes for s in stages)
    assert stages[0].transient_bytes < largest == stages[-1].transient_bytes
    charged_all = stages[0].peak_bytes - stages[0].transient_bytes + largest  # before s37 vocab2
    assert charged_all > own
    backend = AnalyticalBackend(framework="megatron-core", overrides=PLAIN)
    result = backend.evaluate(model, parallel, load_system("h100-80gb"))
    assert own <= result.peak_memory_bytes < charged_all
