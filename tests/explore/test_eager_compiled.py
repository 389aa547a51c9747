"""What torch.compile runs for an eager table's modules (stage_explore/analytical/
eager_compiled.py): Inductor's RMSNorm reductions counted from its code, the final norm
torchtitan leaves outside its compiled blocks, and the compiled kernels timed at the eager
chain's rate, checked against linkedin/Liger-Kernel's paired eager / torch.compile RMSNorm
timings."""

from __future__ import annotations

import pytest

from stage_core.lower.program import bind_all, make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.blocktime import fuse_elementwise
from stage_explore.analytical.eager import TORCHTITAN_RMSNORM, eager_op_bytes
from stage_explore.analytical.eager_compiled import (
    LIGER_RMSNORM_MS as SOURCE_LIGER_MS,
)
from stage_explore.analytical.eager_compiled import (
    PERSISTENT_RNUMEL,
    inductor_op_bytes,
    inductor_rmsnorm,
    looped_rmsnorm_worth,
)
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system import load_system

B = 2  # bytes of a bf16 element
MODEL = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=4096)

#: linkedin/Liger-Kernel benchmark/data, rms_norm, 2048 rows × H (8192, 16384, 32768), bf16,
#: median ms of (huggingface forward, torchcompile forward, huggingface backward, torchcompile
#: backward): h100_all_benchmark_data.csv (3534d446, H100 NVL) and a100_all_benchmark_data.csv
#: (bdbfeadf, A100 80GB PCIe), the same day and code.
LIGER_RMSNORM_MS = {
    "H100 NVL": (
        (0.32608, 0.034816, 0.80995, 0.172992),
        (0.60947, 0.067648, 1.58019, 0.276880),
        (1.21926, 0.155904, 3.02906, 0.587792),
    ),
    "A100 PCIe": (
        (0.52326, 0.079872, 1.37626, 0.260096),
        (0.99226, 0.156672, 2.62451, 0.490496),
        (1.93331, 0.331776, 5.11898, 1.119232),
    ),
}


@pytest.mark.parametrize(
    ("width", "forward", "backward"),
    [(128, 2 * B, 5 * B), (PERSISTENT_RNUMEL, 2 * B, 5 * B), (PERSISTENT_RNUMEL + 1, 3 * B, 7 * B),
     (4096, 3 * B, 7 * B)],
)  # fmt: skip
def test_inductors_rmsnorm_reads_a_wide_row_twice_and_reduces_dw_apart(
    width: int, forward: int, backward: int
) -> None:
    # one pass: read x, write y; dx reads grad and x, writes dx; dw reads grad and x again.
    # A row wider than the persistent threshold is read twice by each row reduction.
    module = inductor_rmsnorm(width)
    assert module.bytes_per_element(backward=False) == forward
    assert module.bytes_per_element(backward=True) == backward
    assert len(module.backward) == 2  # the dx and dw reductions Inductor cannot fuse


def test_the_compiled_tables_of_torchtitan_and_fms() -> None:
    qwen = get_flavor("qwen3-30b-a3b")  # per-head q/k norms of 128: one pass
    titan, fms = (inductor_op_bytes(MODEL, name) for name in ("torchtitan", "fms"))
    # a looped RMSNorm (hidden 4096 > 1024) at the bytes' worth Liger's runs measure
    worth = (looped_rmsnorm_worth(backward=False), looped_rmsnorm_worth(backward=True))
    for table in (titan, fms):
        assert (table["ln1"], table["ln2.backward"]) == worth == (5, 18)
        assert (table["mlp.act"], table["mlp.act.backward"]) == (3 * B, 5 * B)
        assert (table["y"], table["attn.residual.backward"]) == (3 * B, 0)
        assert "experts.act" not in table
    # torchtitan compiles its blocks alone: the final norm runs its eager RMSNorm
    assert titan["ln_f"] == TORCHTITAN_RMSNORM.bytes_per_element(backward=False)
    assert titan["ln_f.backward"] == TORCHTITAN_RMSNORM.bytes_per_element(backward=True)
    assert (fms["ln_f"], fms["ln_f.backward"]) == worth  # fms: the whole model
    assert "q.rope" not in titan and fms["q.rope"] == 2 * B  # complex RoPE: eager.py adds it
    assert inductor_op_bytes(qwen, "torchtitan")["q.norm.backward"] == 5 * B  # as counted
    for other in ("generator", "llm-foundry-2023", "automodel", "megatron-core"):
        assert inductor_op_bytes(MODEL, other) == {}


@pytest.mark.parametrize("system", ["h100-80gb", "a100-80gb"])
def test_a_compiled_rmsnorm_against_its_eager_chain_as_the_benchmark_times_them(
    system: str,
) -> None:
    accelerator = load_system(system).accelerator
    kernels = accelerator.kernels
    assert kernels is not None and kernels.eager_memory > 0
    layer = bind_all(make_workload(MODEL, ParallelConfig(global_batch=1)))["layer"]
    weights = frozenset(w.name for w in layer.weights)

    def timer(table: dict[str, int]) -> KernelTimer:
        return KernelTimer(
            accelerator, kernels, "bf16", weights, MODEL.seq_len, 128, True,
            eager_bytes=table, memory_kernel_s=kernels.memory_kernel_s,
        )  # fmt: skip

    def norm_s(fused: bool, table: dict[str, int]) -> float:
        time = timer(table)
        fwd = fuse_elementwise(layer.fwd) if fused else layer.fwd
        bwd = fuse_elementwise(layer.bwd) if fused else layer.bwd
        return sum(time(i) for i in (*fwd, *bwd) if i.name in ("ln2", "ln2.backward"))

    eager = norm_s(False, eager_op_bytes(MODEL, "torchtitan", fused=False))
    compiled = norm_s(True, eager_op_bytes(MODEL, "torchtitan", fused=True))
    one_kernel = norm_s(True, {})  # the generator's count at efficiency.memory (until s26)
    measured = [
        (ef + eb) / (cf + cb) for runs in LIGER_RMSNORM_MS.values() for ef, cf, eb, cb in runs
    ]
    assert 4.8 < min(measured) and max(measured) < 6.4
    # eager over compiled, forward and backward: the 128 eager bytes over the 5 + 18 bytes'
    # worth the benchmark measures for Inductor's kernels (they move 6 + 14: ratio 6.4, above
    # every measured ratio)
    assert eager / compiled == pytest.approx(128 / (5 + 18), rel=1e-9)
    assert min(measured) < eager / compiled < max(measured)
    assert eager / one_kernel > 2 * max(measured)  # the one-kernel count was far too fast


def test_a_looped_rmsnorm_is_timed_at_the_bytes_worth_the_paired_runs_measure() -> None:
    # the source's data are the medians transcribed here, board by board
    assert SOURCE_LIGER_MS == tuple(run for runs in LIGER_RMSNORM_MS.values() for run in runs)
    chain = (36, 92)  # the eager chain's bytes per element, forward and backward

    def worth(runs: tuple[tuple[float, float, float, float], ...], backward: bool) -> float:
        eager, compiled = (2, 3) if backward else (0, 1)
        ratios = [run[eager] / run[compiled] for run in runs]
        return chain[backward] * len(ratios) / sum(ratios)

    h100, a100 = (LIGER_RMSNORM_MS[board] for board in ("H100 NVL", "A100 PCIe"))
    # backward: the dx and dw reductions move 14 bytes, take 18 bytes' worth on both boards
    assert inductor_rmsnorm(4096).bytes_per_element(backward=True) == 14
    assert round(worth(h100, True)) == round(worth(a100, True)) == 18
    assert looped_rmsnorm_worth(backward=True) == 18
    # forward: 6 bytes moved; the second read of a row partly from L2 (more so on the H100)
    assert worth(h100, False) < 5 < worth(a100, False) < 6
    assert looped_rmsnorm_worth(backward=False) == 5
    # a one-pass (persistent) norm keeps the code's count: no measurement at those widths
    qwen = get_flavor("qwen3-30b-a3b")
    table = inductor_op_bytes(qwen, "fms")
    assert (table["q.norm"], table["q.norm.backward"]) == (2 * B, 5 * B)
