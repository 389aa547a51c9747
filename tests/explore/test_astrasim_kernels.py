"""The ASTRA-sim backend's compute policy ``kernels`` (:mod:`stage_explore.astrasim.kernel_times`).

Without the binary: the rounding rule, the Chakra field, the written inputs (roofline off,
``num_ops`` / ``tensor_size`` as under ``roofline``, durations that add up to the analytical
per-kernel times), FP8 only on the recipe's GEMMs, the option's errors. With the real binary
(skipped, with the reason, where it is absent): ASTRA-sim replays ``duration_micros`` with the
roofline off, a rank's GPU time equal to the sum of its durations (1 ns for a node of 0 µs),
and ``stage eval --compare`` says the compute is the kernel model's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stage_core.chakra.reader import read_trace_set
from stage_core.chakra.schema import Node
from stage_core.chakra.writer import write_trace_set
from stage_core.errors import ConfigError
from stage_core.lower.program import lower
from stage_core.models.flavors import get_flavor
from stage_core.parallel.config import ParallelConfig
from stage_core.trace import CollectiveKind, NodeKind, TraceNode
from stage_explore.astrasim import AstraSimBackend, run_astra_sim
from stage_explore.astrasim.inputs import AstraSettings, write_inputs
from stage_explore.astrasim.kernel_times import (
    kernel_seconds,
    micros_with_residual,
    replayed_ns,
)
from stage_explore.cli import main
from stage_explore.system import load_system
from tests.fixtures import real_astra_sim

BINARY, WHY = real_astra_sim()
needs_binary = pytest.mark.skipif(BINARY is None, reason=WHY)
A100 = load_system("a100-80gb")
KERNELS = AstraSettings(compute="kernels")


def _programs(**parallel: object):  # type: ignore[no-untyped-def]
    model = get_flavor("gpt3-125m").with_overrides(layers=2, seq_len=256)
    return lower(model, ParallelConfig(**{"dp": 2, "global_batch": 2, **parallel}))  # type: ignore[arg-type]


def _comp(node_id: int, micros: int, deps: tuple[int, ...] = ()) -> TraceNode:
    return TraceNode(
        node_id, f"k{node_id}", NodeKind.COMP, data_deps=deps, flops=1000, tensor_bytes=1000,
        duration_micros=micros,
    )  # fmt: skip


def test_micros_carry_the_rounding_residual() -> None:
    nodes = [_comp(i, 0) for i in range(4)]
    seconds = {0: 0.4e-6, 1: 0.4e-6, 2: 0.4e-6, 3: 1.7e-6}
    # exact running sums 400, 800, 1200, 2900 ns -> 0, 1, 1, 3 us
    assert micros_with_residual(nodes, seconds) == [0, 1, 0, 2]
    with pytest.raises(ConfigError, match="no kernel time"):
        micros_with_residual(nodes, {0: 1e-6})


def test_duration_micros_is_chakra_field_7_and_reads_back(tmp_path: Path) -> None:
    write_trace_set(tmp_path, {0: [_comp(1, 37), _comp(2, 0, (1,))]})
    data = (tmp_path / "workload.0.et").read_bytes()
    assert b"\x38\x25" in data  # field 7 (varint) = 37
    ranks = read_trace_set(tmp_path).ranks
    assert [node.duration_micros for node in ranks[0]] == [37, 0]
    assert Node.DESCRIPTOR.fields_by_name["duration_micros"].number == 7
    with pytest.raises(ConfigError, match="duration_micros"):
        write_trace_set(tmp_path / "bad", {0: [_comp(1, -3)]})


def test_kernels_inputs_keep_the_workload_and_carry_the_kernel_times(tmp_path: Path) -> None:
    programs = _programs(tp=2, pp=2)
    roofline = write_inputs(programs, A100, tmp_path / "r", dtype="bf16")
    kernels = write_inputs(programs, A100, tmp_path / "k", dtype="bf16", settings=KERNELS)
    assert json.loads(roofline.system_json.read_text())["roofline-enabled"] == 1
    assert json.loads(kernels.system_json.read_text())["roofline-enabled"] == 0
    plain, timed = read_trace_set(tmp_path / "r").ranks, read_trace_set(tmp_path / "k").ranks
    seconds = kernel_seconds(programs, A100)
    for rank, nodes in timed.items():
        assert [(n.name, n.flops, n.tensor_bytes) for n in nodes] == [
            (n.name, n.flops, n.tensor_bytes) for n in plain[rank]
        ]
        assert all(n.duration_micros == 0 for n in plain[rank])
        comp = [n for n in nodes if n.kind is NodeKind.COMP]
        exact_ns = sum(round(seconds[programs.stage_of(rank)][n.id] * 1e9) for n in comp)
        written_ns = sum(n.duration_micros for n in comp) * 1000
        assert abs(written_ns - exact_ns) <= 500 and written_ns > 0


def test_fp8_speeds_only_the_recipes_gemms() -> None:
    """Under fp8 the kernel model runs the recipe's GEMMs at the FP8 rate and everything else
    (attention, norms, element-wise) as under bf16, unlike the roofline's one peak."""
    h100 = load_system("h100-80gb")
    bf16 = _programs(tp=2)
    fp8 = _programs(tp=2, precision="fp8")
    slow, fast = kernel_seconds(bf16, h100), kernel_seconds(fp8, h100)
    names = {item.node.id: item.node.name for item in _nodes(bf16)}
    faster = [i for i in slow[0] if fast[0][i] < slow[0][i] * 0.99]
    same = [i for i in slow[0] if math.isclose(fast[0][i], slow[0][i], rel_tol=1e-12)]
    unchanged = {names[i].rsplit(".", 2)[-2:][-1] for i in same}
    assert {"scores", "softmax", "context"} <= unchanged  # attention is not an FP8 GEMM
    assert faster and all("attn_core" not in names[i] and "norm" not in names[i] for i in faster), [
        names[i] for i in faster
    ]


def _nodes(programs):  # type: ignore[no-untyped-def]
    from stage_core.lower.nodes import stage_nodes

    return stage_nodes(programs, programs.stages[0])


def test_compute_option_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"`compute` must be one of .*'fast'"):
        AstraSimBackend(compute="fast")
    assert AstraSimBackend(compute="kernels").to_dict()["compute"] == "kernels"
    assert AstraSimBackend().to_dict()["compute"] == "roofline"
    argv = ["eval", "--model", "gpt3-125m", "--dp", "2", "--global-batch", "2",
            "--system", "a100-80gb", "--astra-sim-compute", "kernels"]  # fmt: skip
    assert main(argv) != 0
    error = capsys.readouterr().err.strip()
    assert error == (
        "stage eval: error: --astra-sim-compute applies to --backend astra-sim, but got "
        "--backend analytical"
    )


@needs_binary
def test_the_real_binary_replays_duration_micros_with_the_roofline_off(tmp_path: Path) -> None:
    """Two ranks, hand-written durations (one of 0 µs) around an all-reduce: each rank's GPU
    time is the sum of its durations, ×1000 ns, plus 1 ns for the 0-µs node."""
    assert BINARY is not None
    inputs = write_inputs(_programs(), A100, tmp_path, dtype="bf16", settings=KERNELS)
    for path in tmp_path.glob("workload.*.et"):
        path.unlink()
    collective = TraceNode(
        3, "ar", NodeKind.COLL, data_deps=(2,), collective=CollectiveKind.ALL_REDUCE,
        comm_bytes=1 << 20,
    )  # fmt: skip
    program = [_comp(1, 3), _comp(2, 0, (1,)), collective, _comp(4, 7, (3,))]
    write_trace_set(tmp_path, {0: program, 1: program})
    run = run_astra_sim(BINARY, inputs, timeout_s=120)
    assert sorted(run.report.ranks) == [0, 1]
    for result in run.report.ranks.values():
        assert result.gpu_time_cycles == replayed_ns(program) == 3000 + 1 + 7000
        assert result.finished_cycles > 10_001  # the all-reduce between them


@needs_binary
def test_a_kernels_run_replays_every_ranks_durations(tmp_path: Path) -> None:
    assert BINARY is not None
    model = get_flavor("gpt3-125m").with_overrides(layers=2, seq_len=256)
    parallel = ParallelConfig(dp=2, tp=2, pp=2, global_batch=4)
    steps = {}
    for compute in ("roofline", "kernels"):
        backend = AstraSimBackend(
            binary=str(BINARY), keep_dir=str(tmp_path / compute), compute=compute
        )
        evaluation = backend.evaluate(model, parallel, A100)
        steps[compute] = evaluation.step_time_s
    kept = read_trace_set(Path(evaluation.extra["astra_sim_dir"])).ranks
    slowest = kept[evaluation.extra["slowest_rank"]]
    assert round(evaluation.breakdown["compute"] * 1e9) == replayed_ns(slowest)
    inputs = write_inputs(lower(model, parallel), A100, tmp_path / "again", dtype="bf16",
                          settings=KERNELS)  # fmt: skip
    run = run_astra_sim(BINARY, inputs, timeout_s=600)
    ranks = read_trace_set(tmp_path / "again").ranks
    assert sorted(run.report.ranks) == sorted(ranks) == list(range(8))
    for rank, result in run.report.ranks.items():
        assert result.gpu_time_cycles == replayed_ns(ranks[rank]) > 0
    # calibrated kernels are slower than the roofline's peak
    assert steps["kernels"] > steps["roofline"]


@needs_binary
def test_compare_says_the_compute_is_the_kernel_models(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "--model", "gpt3-1.3b", "--layers", "2", "--dp", "4", "--global-batch", "4",
            "--system", "a100-80gb", "--backend", "astra-sim", "--astra-sim-compute", "kernels",
            "--compare"]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    gap = json.loads(capsys.readouterr().out)["comparison"]
    assert gap["compute_policy"] == "kernels" and gap["roofline_check"] is True
    assert gap["compute_from_durations_s"] == pytest.approx(gap["compute"]["astra_sim_s"], abs=1e-9)
    assert "analytical kernel model" in gap["compute"]["why"]
    assert gap["compute_at_peak_s"] < gap["compute_from_durations_s"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "written kernel durations" in out and "which equals ASTRA-sim's GPU time" in out
