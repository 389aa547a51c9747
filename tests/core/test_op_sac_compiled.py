"""torchtitan's op-level selective checkpointing traced by ``torch.compile`` (recompute modules
``op_compiled`` / ``op_recompute_sdpa_compiled``): AOTAutograd's partitioner keeps only the
forward values the backward graph reads, so a Llama layer no longer keeps the down
projection's output (read only by the final residual add, whose backward reads nothing), which
eager SAC caches as a ``MUST_SAVE`` output — against closed forms computed here."""

from __future__ import annotations

import pytest

from stage_core.blocks import Structure
from stage_core.errors import ConfigError
from stage_core.lower.bind import symbolic_block
from stage_core.lower.program import lower, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Recompute
from stage_core.recompute import backward_live, recompute_regions

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=2048)
H = 4096  # hidden


def _config(module: str, tp: int = 1, micro_batch: int = 1) -> ParallelConfig:
    return ParallelConfig(
        tp=tp, dp=2, sp=tp > 1, micro_batch=micro_batch, global_batch=4,
        recompute=Recompute.SELECTIVE, recompute_modules=(module,),
    )  # fmt: skip


def _recomputed(module: str, tp: int = 1) -> set[str]:
    layer = lower(LLAMA, _config(module, tp)).blocks["layer"]
    return {instr.name for instr in layer.bwd if instr.phase == "recompute"}


@pytest.mark.parametrize(("eager", "tp"), [("op", 1), ("op", 2), ("op_recompute_sdpa", 1)])
def test_the_compiled_backward_does_not_re_run_the_final_residual_add(eager: str, tp: int) -> None:
    """The layer's output ``y`` is read by no backward: the partitioner's backward graph
    leaves it out; every other re-run op stays (its output, or an op's that reads it, is
    read by a backward)."""
    assert "y" in _recomputed(eager, tp)
    assert _recomputed(eager, tp) - _recomputed(f"{eager}_compiled", tp) == {"y"}


@pytest.mark.parametrize(("tp", "micro_batch"), [(1, 1), (1, 2), (2, 1)])
@pytest.mark.parametrize("eager", ["op", "op_recompute_sdpa"])
def test_compiled_keeps_the_down_projection_output_less(
    eager: str, tp: int, micro_batch: int
) -> None:
    """One hidden-sized 16-bit tensor per token less: the down projection's output
    (sequence-sharded after its saved reduce-scatter under sequence parallelism)."""
    tokens = micro_batch * 2048
    kept = lower(LLAMA, _config(eager, tp, micro_batch)).blocks["layer"].saved_bytes
    compiled = lower(LLAMA, _config(f"{eager}_compiled", tp, micro_batch)).blocks["layer"]
    assert kept - compiled.saved_bytes == 2 * tokens * H // tp


def test_the_live_region_is_a_fixed_point_of_what_the_backward_reads() -> None:
    workload = make_workload(LLAMA, _config("op"))
    block = symbolic_block(
        "layer", Structure.of(workload.model), workload.options, workload.flags, "none"
    ).forward.block
    region, _ = recompute_regions(block, ("op",))
    live = backward_live(block, region)
    assert region - live == {"y"}
    # the output projection's output is read by no backward, but the residual add that
    # makes the second norm's (saved) input reads it: live through that add
    assert {"attn.proj", "attn.residual"} <= live
    assert backward_live(block, live) == live
    assert backward_live(block, ()) == set()


def test_op_compiled_takes_no_other_module() -> None:
    with pytest.raises(ConfigError, match="'op_compiled'"):
        ParallelConfig(
            dp=2, global_batch=4, recompute=Recompute.SELECTIVE,
            recompute_modules=("op_compiled", "mlp"),
        )  # fmt: skip
