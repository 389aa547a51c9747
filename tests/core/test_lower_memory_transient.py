"""The backward's transient memory: liveness of the tensors one block's backward creates
(activation gradients, re-gathered inputs, recomputed activations), weight gradients excluded,
and the working set that both ``stage memory`` and the analytical backend add."""

from __future__ import annotations

from stage_core.lower.bind import BoundBlock, Instr, WeightShard
from stage_core.lower.memory import backward_working_set, recompute_working_set
from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute


def _op(
    name: str, inputs: tuple[tuple[str, int], ...], outputs: tuple[tuple[str, int], ...]
) -> Instr:
    return Instr(name, "bwd", "einsum", inputs=inputs, outputs=outputs)


def test_liveness_counts_what_is_alive_at_once_and_skips_weight_gradients() -> None:
    bwd = (
        _op("a", (("d.y", 10), ("x", 7)), (("d.h", 100),)),  # d.h: 100 (d.y is an input)
        _op("b", (("d.h", 100), ("w", 5)), (("d.x", 30),)),  # 130 live
        _op("c", (("d.h", 100), ("x", 7)), (("d.w", 500),)),  # weight gradient: not counted
        _op("d", (("d.x", 30),), (("d.z", 40),)),  # d.h dead after c: 70
    )
    block = BoundBlock("layer", (), bwd, (WeightShard("w", 250, ("dp",), False),), 0, 0)
    assert backward_working_set(block) == 130


def test_a_tensor_written_twice_lives_from_its_first_write_to_its_last_use() -> None:
    bwd = (
        _op("a", (), (("d.x", 50),)),
        _op("b", (), (("d.t", 20),)),
        _op("acc", (("d.x", 50), ("d.t", 20)), (("d.x", 50),)),
        _op("c", (), (("d.u", 60),)),
    )
    assert backward_working_set(BoundBlock("layer", (), bwd, (), 0, 0)) == 70


def _working_set(recompute: Recompute) -> tuple[int, int]:
    model = get_flavor("megatron-gpt-1.7b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=2, dp=1, sp=True, recompute=recompute, global_batch=2)
    workload = make_workload(model, parallel)
    blocks = bind_all(workload)
    largest = max(backward_working_set(block) for block in blocks.values())
    return recompute_working_set(workload, blocks), largest


def test_without_recompute_the_working_set_is_the_largest_backward() -> None:
    working_set, largest = _working_set(Recompute.NONE)
    assert working_set == largest > 0


def test_full_recompute_holds_at_least_a_re_materialised_layer() -> None:
    full, _ = _working_set(Recompute.FULL)
    none, _ = _working_set(Recompute.NONE)
    selective, _ = _working_set(Recompute.SELECTIVE)
    assert full > selective >= none
