"""DTensor's sequence-dim collectives copy (``funcol_seq_copies``, stage_explore/analytical/
funcol_copies.py) and torchao's Float8 TP gathers FP8 data (``float8_tp``): PyTorch's functional
all-gather / reduce-scatter on ``Shard(1)`` move the whole tensor through ``torch.cat`` on the
compute stream, except where Inductor writes a point-wise operand straight into the cat or
async TP fuses the collective with its matmul."""

from __future__ import annotations

import dataclasses

from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.funcol_copies import funcol_copy_bytes
from stage_explore.system import load_system

AG = CollectiveKind.ALL_GATHER
RS = CollectiveKind.REDUCE_SCATTER


def _gather(phase: str = "fwd", axes: tuple[str, ...] = ("tp",)) -> Instr:
    """An all-gather of a 1,000-byte shard into 8,000 bytes."""
    return Instr(
        "all_gather:ln1", phase, "comm", collective=AG, axes=axes, comm_bytes=1_000,
        inputs=(("ln1", 1_000),), outputs=(("ln1", 8_000),),
    )  # fmt: skip


def _scatter(deps: tuple[int, ...]) -> Instr:
    """A reduce-scatter of an 8,000-byte operand into a 1,000-byte shard."""
    return Instr(
        "reduce_scatter:d.x", "bwd", "comm", collective=RS, axes=("tp",), comm_bytes=8_000,
        deps=deps, inputs=(("d.x", 8_000),), outputs=(("d.x", 1_000),),
    )  # fmt: skip


def _none(instr: Instr) -> bool:
    return False


def test_each_gather_and_scatter_copies_the_whole_tensor() -> None:
    gemm = Instr("proj", "bwd", "einsum", flops=1)
    instrs = [_gather(), gemm, _scatter((1,))]
    assert funcol_copy_bytes(instrs, False, _none) == 2 * 8_000 + 2 * 8_000
    assert funcol_copy_bytes(instrs, True, _none) == 2 * 8_000 + 2 * 8_000  # mm: extern
    # a context-parallel gather is torch's context_parallel, not DTensor SP: not counted
    assert funcol_copy_bytes([_gather(axes=("cp",))], False, _none) == 0


def test_a_compiled_pointwise_operand_is_written_into_the_cat() -> None:
    add = Instr("accumulate", "bwd", "elementwise")
    instrs = [add, _scatter((0,))]
    assert funcol_copy_bytes(instrs, False, _none) == 16_000  # eager: cat is its own kernel
    assert funcol_copy_bytes(instrs, True, _none) == 0


def test_async_tps_fused_collectives_and_fp8_gathers() -> None:
    instrs = [_gather()]
    assert funcol_copy_bytes(instrs, True, lambda i: i.collective is AG) == 0
    fp8 = funcol_copy_bytes(instrs, True, _none, frozenset({("fwd", "ln1")}))
    assert fp8 == 8_000  # one byte per element of the 2-byte tensor, read and written
    other_phase = funcol_copy_bytes(instrs, True, _none, frozenset({("bwd", "ln1")}))
    assert other_phase == 16_000


def _step(overrides: dict[str, object], sp: bool = True, precision: str = "bf16") -> float:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(
        tp=8, dp=1, sp=sp, global_batch=2, micro_batch=2, zero=3, precision=precision,
        fp8_recipe="tensorwise",
    )  # fmt: skip
    backend = AnalyticalBackend(framework="torchtitan", overrides=overrides)
    return backend.evaluate(model, parallel, load_system("h100-80gb")).step_time_s


def test_the_backend_charges_the_copies_under_sequence_parallelism_only() -> None:
    on, off = {"funcol_seq_copies": True}, {"funcol_seq_copies": False}
    assert _step(on) > _step(off)
    assert _step(on, sp=False) == _step(off, sp=False)  # all-reduces: no dim-1 collective
    assert get_framework("torchtitan").funcol_seq_copies
    assert not get_framework("megatron-core").funcol_seq_copies  # [seq, batch, hidden]


def test_torchaos_float8_tp_gathers_fp8() -> None:
    fp8 = {"float8_tp": True, "funcol_seq_copies": False}
    bf16 = {"float8_tp": False, "funcol_seq_copies": False}
    assert _step(fp8, precision="fp8") < _step(bf16, precision="fp8")
    assert _step(fp8) == _step(bf16)  # a BF16 run gathers BF16
    assert get_framework("torchtitan").float8_tp
    assert not get_framework("megatron-core").float8_tp
    assert dataclasses.replace(get_framework("torchtitan"), float8_tp=False) != get_framework(
        "torchtitan"
    )
