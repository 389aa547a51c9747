"""FSDP2 under torch pipelining with ``reshard_after_forward=True`` (``pp_backward_held_params``,
s36 kfpp): the stage's whole 16-bit weights held at a backward's end in place of the gathered
units, beside ``fsdp_no_sync_accumulation``'s unsharded gradients; the timing unchanged; and
the KempnerForge reader rule (:mod:`stage_explore.validation.infer_kfpp`)."""

from __future__ import annotations

import pytest

from stage_core.lower.memory import unsharded_elements
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.system import load_system
from stage_explore.validation.infer_kfpp import kempnerforge_pipeline_defaults
from stage_explore.validation.infer_release import Defaults

LLAMA = get_flavor("llama3-8b").with_overrides(layers=4, seq_len=1024)
SYSTEM = load_system("h100-80gb")
#: The tensors' own peak (no runtime reserve, no allocator overhead), FSDP2.
BASE = {"runtime_reserved_bytes": 0, "allocator_overhead": 0.0, "fsdp2_copies": True}


def _evaluate(parallel: ParallelConfig, **overrides: object) -> tuple[int, float]:
    backend = AnalyticalBackend(framework="fsdp", overrides={**BASE, **overrides})
    result = backend.evaluate(LLAMA, parallel, SYSTEM)
    return result.peak_memory_bytes, result.step_time_s


@pytest.mark.parametrize("tp", [1, 2])
def test_the_stage_is_held_in_place_of_the_gathered_units(tp: int) -> None:
    """Two pipeline stages of two layers each, the last with the head (its peak): FSDP's two
    gathered units (``zero3_gathers`` 2: the head and a layer, the largest) give way to the
    whole stage, two layers and the head, in bf16; the step time does not move (the gathers
    stay per micro-batch)."""
    parallel = ParallelConfig(tp=tp, pp=2, dp=4, zero=3, recompute=Recompute.FULL, global_batch=32)
    on = _evaluate(parallel, pp_backward_held_params=True)
    off = _evaluate(parallel)
    programs = lower(LLAMA, parallel)
    workload = programs.workload
    layer, head = (unsharded_elements(workload, programs.blocks[k]) for k in ("layer", "head"))
    assert FRAMEWORKS["fsdp"].zero3_gathers == 2 and head > layer
    assert workload.weight_bytes == 2
    stage, gathered = 2 * layer + head, head + layer
    assert on[0] - off[0] == (stage - gathered) * workload.weight_bytes
    assert on[1] == off[1]


@pytest.mark.parametrize("tp", [1, 2])
def test_with_no_sync_it_holds_what_pp_unsharded_params_holds(tp: int) -> None:
    """The held stage's weights plus the no-sync unsharded gradients are torchtitan's held
    stage (``pp_unsharded_params``, gathered once per step, whose timing differs): neither
    counts the gradient shards beside the unsharded gradients (s36 kfmem's no-sync rule; for
    the held stage since s37 fsdpsync, ``no_sync.grad_shards_absent``); with both options
    ``pp_unsharded_params`` decides."""
    parallel = ParallelConfig(tp=tp, pp=2, dp=4, zero=3, recompute=Recompute.FULL, global_batch=32)
    kempner = _evaluate(parallel, pp_backward_held_params=True, fsdp_no_sync_accumulation=True)
    no_sync = _evaluate(parallel, fsdp_no_sync_accumulation=True)
    titan = _evaluate(parallel, pp_unsharded_params=True)
    both = _evaluate(parallel, pp_unsharded_params=True, pp_backward_held_params=True)
    assert titan[0] == kempner[0] > no_sync[0]
    assert kempner[1] == no_sync[1] != titan[1]
    assert both == titan


@pytest.mark.parametrize(
    "parallel",
    [
        ParallelConfig(dp=4, zero=3, recompute=Recompute.FULL, global_batch=16),  # no PP
        ParallelConfig(pp=2, dp=4, zero=2, recompute=Recompute.FULL, global_batch=32),  # ZeRO-2
    ],
)
def test_nothing_changes_without_pp_or_zero3(parallel: ParallelConfig) -> None:
    assert _evaluate(parallel, pp_backward_held_params=True) == _evaluate(parallel)


def test_no_profile_turns_it_on() -> None:
    assert not [n for n, p in FRAMEWORKS.items() if p.pp_backward_held_params]


KF = "models trained with KempnerForge (FSDP2 fully_shard, torch.distributed.pipelining)"


@pytest.mark.parametrize(
    ("source", "notes", "pp", "zero", "expected"),
    [
        (KF, "no torch.compile", 2, 3, True),
        (KF, "", 4, 3, True),
        (KF, "", 1, 3, False),  # no pipeline: maybe_no_sync's path, nothing held
        (KF, "", 2, 2, False),  # no ZeRO-3: nothing resharded
        (KF, "compile_model=true (torch.compile)", 2, 3, False),  # an OptimizedModule stage
        ("models trained with torchtitan (FSDP2, torch.distributed.pipelining)", "", 2, 3, False),
    ],
)
def test_reader_rule(source: str, notes: str, pp: int, zero: int, expected: bool) -> None:
    out = Defaults()
    row = {"source": source, "source_table": "", "notes": notes}
    kempnerforge_pipeline_defaults(row, {"pp": pp, "zero": zero}, {}, out)
    assert out.options.get("pp_backward_held_params", False) is expected
    assert bool(out.notes) is expected
