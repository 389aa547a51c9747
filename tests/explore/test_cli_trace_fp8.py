"""``stage trace`` of an FP8 run and with kernel durations (s25 tracefp8).

Without the binary: ``--precision fp8`` under a profile that sends FP8 (``--framework
megatron-core``, ``--fp8-param-gather``) writes the FP8 bytes of the tensor-parallel gathers and
the parameter gathers, every other node as under bf16; the default profile sends 16-bit bytes;
``--compute kernels --system`` writes the analytical per-kernel durations; the options' errors.
With the real ASTRA-sim (skipped, with the reason, where it is absent): the FP8 trace runs to
completion with less communication time than the bf16 trace on every rank, and a kernels trace
replays each rank's written durations as its GPU time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stage_core.chakra.reader import read_trace_set
from stage_core.lower.nodes import stage_nodes
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind, NodeKind, TraceNode
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_wire import fp8_wire
from stage_explore.astrasim import run_astra_sim
from stage_explore.astrasim.inputs import AstraSettings, write_inputs
from stage_explore.astrasim.kernel_times import kernel_seconds, replayed_ns
from stage_explore.cli import main
from stage_explore.system import load_system
from tests.fixtures import real_astra_sim

BINARY, WHY = real_astra_sim()
needs_binary = pytest.mark.skipif(BINARY is None, reason=WHY)
H100 = load_system("h100-80gb")
RUN = ["--model", "llama3-8b", "--layers", "2", "--seq-len", "1024", "--dp", "2", "--tp", "2",
       "--sp", "--zero", "1", "--global-batch", "4"]  # fmt: skip
FP8 = ["--precision", "fp8", "--framework", "megatron-core", "--fp8-param-gather"]
MODEL = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)
PARALLEL = ParallelConfig(dp=2, tp=2, sp=True, zero=1, global_batch=4, precision="fp8")
CORE_FP8 = AnalyticalBackend(framework="megatron-core", overrides={"fp8_param_gather": True})


def _trace(out: Path, *extra: str) -> dict[int, list[TraceNode]]:
    assert main(["trace", *RUN, *extra, "--out", str(out), "--quiet"]) == 0
    return dict(read_trace_set(out).ranks)


def _comm(node: TraceNode) -> tuple[str, int]:
    return str(node.collective), node.comm_bytes


def test_an_fp8_trace_sends_fp8_where_the_profile_does(tmp_path: Path) -> None:
    bf16 = _trace(tmp_path / "bf16")  # a 16-bit roofline trace is the same under every profile
    fp8 = _trace(tmp_path / "fp8", *FP8)
    tp_halved = param_smaller = 0
    for rank, nodes in bf16.items():
        assert [(n.name, n.kind, n.flops, n.tensor_bytes) for n in fp8[rank]] == [
            (n.name, n.kind, n.flops, n.tensor_bytes) for n in nodes
        ]  # the compute nodes are those of the lowering
        for old, new in zip(nodes, fp8[rank], strict=True):
            if old.kind is not NodeKind.COLL or old.comm_bytes == new.comm_bytes:
                continue
            assert old.collective is new.collective is CollectiveKind.ALL_GATHER, old.name
            if "param_all_gather" in old.name:
                param_smaller += new.comm_bytes < old.comm_bytes
            else:  # a sequence-parallel input or output gradient, gathered as FP8
                assert new.comm_bytes * 2 == old.comm_bytes, old.name
                tp_halved += 1
    # 4 ranks, 2 micro-batches, 2 layers, 6 gathers; one parameter gather per rank
    assert tp_halved == 4 * 2 * 2 * 6 and param_smaller == 4
    # the written bytes are the programs' (fp8_wire over the lowering, the backend's counts)
    programs = fp8_wire(lower(MODEL, PARALLEL), CORE_FP8)
    template = [item.node for item in stage_nodes(programs, programs.stages[0])]
    assert [n.comm_bytes for n in template] == [n.comm_bytes for n in fp8[0]]


def test_the_default_profile_sends_16_bit_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """megatron-lm-2021 (the analytical backend's default) runs no userbuffers and gathers no
    FP8 parameters: an FP8 trace moves the bf16 bytes, as the backend times it, and says so."""
    _trace(tmp_path / "bf16")
    assert "16-bit bytes" not in capsys.readouterr().err
    _trace(tmp_path / "fp8", "--precision", "fp8")
    note = capsys.readouterr().err
    assert "no collective of this layout is sent in fp8 under the megatron-lm-2021" in note
    assert note.count("\n") == 1
    for path in sorted((tmp_path / "bf16").iterdir()):
        assert (tmp_path / "fp8" / path.name).read_bytes() == path.read_bytes(), path.name
    _trace(tmp_path / "core", *FP8)  # a profile that sends FP8: no note
    assert "16-bit bytes" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        # torchtitan sends FP8 gathers under the tensorwise recipe only (fp8_gather.py)
        (["--precision", "fp8", "--framework", "torchtitan"],
         "torchtitan (--fp8-recipe tensorwise)"),
        (["--precision", "fp8", "--framework", "megatron-core", "--fp8-recipe", "blockwise"],
         "megatron-core (recipes delayed, tensorwise, mxfp8)"),
        # NVFP4 gathers nothing in 4 bits and --fp8-param-gather is FP8's: no profile to name
        (["--precision", "fp4"], "(no profile sends fp4 data: the recipe's gathers are 16-bit)"),
    ],
)  # fmt: skip
def test_the_16_bit_note_says_what_would_send_the_low_precision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    """s26 review: the note named megatron-core and torchtitan as sending FP8 whatever the
    recipe, also to a torchtitan or megatron-core run it was printed for, and to FP4 runs."""
    _trace(tmp_path, *extra)
    note = capsys.readouterr().err
    assert note.count("\n") == 1 and "carry 16-bit bytes" in note and says in note, note
    if "fp4" in extra:
        assert "megatron-core" not in note and "--fp8-param-gather" not in note


def test_a_recipe_torchtitan_gathers_in_fp8_gets_no_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bf16 = _trace(tmp_path / "bf16")
    fp8 = _trace(tmp_path / "tt", "--precision", "fp8", "--framework", "torchtitan",
                 "--fp8-recipe", "tensorwise")  # fmt: skip
    assert "16-bit bytes" not in capsys.readouterr().err
    halved = [
        (old.name, new.comm_bytes * 2 == old.comm_bytes)
        for old, new in zip(bf16[0], fp8[0], strict=True)
        if old.comm_bytes != new.comm_bytes
    ]
    assert halved and all(ok for _, ok in halved), halved


def test_kernels_writes_the_analytical_kernel_durations(tmp_path: Path) -> None:
    plain = _trace(tmp_path / "r", *FP8)
    timed = _trace(tmp_path / "k", *FP8, "--compute", "kernels", "--system", "h100-80gb")
    programs = fp8_wire(lower(MODEL, PARALLEL), CORE_FP8)
    seconds = kernel_seconds(programs, H100, CORE_FP8)
    for rank, nodes in timed.items():
        assert [(n.name, n.flops, n.tensor_bytes, n.comm_bytes) for n in nodes] == [
            (n.name, n.flops, n.tensor_bytes, n.comm_bytes) for n in plain[rank]
        ]
        assert all(n.duration_micros == 0 for n in plain[rank])
        comp = [n for n in nodes if n.kind is NodeKind.COMP]
        exact_ns = sum(round(seconds[programs.stage_of(rank)][n.id] * 1e9) for n in comp)
        written_ns = sum(n.duration_micros for n in comp) * 1000
        assert abs(written_ns - exact_ns) <= 500 and written_ns > 0
    default = _trace(tmp_path / "d", "--precision", "fp8", "--compute", "kernels", "--system",
                     "h100-80gb")  # fmt: skip
    assert default[0] != timed[0]  # the profile times the kernels too (userbuffers' casts)


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        (["--compute", "kernels"], "--compute kernels needs --system PRESET_OR_FILE"),
        (["--system", "h100-80gb"], "--system applies to --compute kernels, but got --system "
         "h100-80gb with --compute roofline"),
        (["--compute", "kernels", "--system", "h100-80gb", "--format", "json"],
         "--compute kernels applies to --format chakra (Chakra's duration_micros), but got "
         "--format json"),
        (["--compute", "kernels", "--system", "no-such-gpu"], "no-such-gpu"),
        (["--fp8-param-gather"], "--fp8-param-gather applies to --precision fp8 with --zero 1 "
         "or 2 (the distributed optimizer's parameter all-gather), but got --precision bf16 "
         "--zero 1"),
        (["--framework", "nemo-9"], "unknown framework 'nemo-9'"),
        # s26 review: at dp·cp = 1 ZeRO gathers no parameters (the files were unchanged)
        (["--dp", "1", "--global-batch", "2", "--precision", "fp8", "--fp8-param-gather"],
         "--fp8-param-gather needs a parameter all-gather, i.e. dp·cp > 1 (ZeRO shards over "
         "the dp·cp ranks), but got --dp 1 --cp 1"),
        # s26 review: Transformer Engine has no row-wise recipe; stage eval refused it, stage
        # trace wrote it (under the default profile, megatron-lm-2021, too)
        (["--precision", "fp8", "--fp8-recipe", "rowwise", "--framework", "megatron-core"],
         "`fp8_recipe` 'rowwise' is torchao Float8's row-wise scaling, but framework "
         "'megatron-core' runs FP8 through Transformer Engine"),
        (["--precision", "fp8", "--fp8-recipe", "rowwise"], "framework 'megatron-lm-2021'"),
        # s26 review: a 16-bit or FP4 roofline trace is the same under every profile
        (["--framework", "torchtitan"], "--framework applies to --precision fp8 (which "
         "collectives are sent in FP8) or --compute kernels (the kernel times), but got "
         "--framework torchtitan with --precision bf16 --compute roofline"),
        (["--framework", "fsdp", "--precision", "fp4"], "but got --framework fsdp with "
         "--precision fp4 --compute roofline"),
        # the system's refusal alone, without the 16-bit note before it (s26 review)
        (["--precision", "fp8", "--compute", "kernels", "--system", "a100-80gb"],
         "precision 'fp8' needs a peak FLOP/s for it, but accelerator 'A100-SXM4-80GB'"),
    ],
)  # fmt: skip
def test_option_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], error: str
) -> None:
    assert main(["trace", *RUN, *extra, "--out", str(tmp_path)]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and error in lines[0], lines


def test_a_serving_step_refuses_the_training_trace_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for extra in (["--compute", "kernels"], ["--fp8-param-gather"], ["--framework", "fsdp"]):
        argv = ["trace", "--phase", "decode", "--model", "llama3-8b", "--layers", "2",
                "--batch", "2", "--context-len", "128", *extra, "--out", str(tmp_path)]  # fmt: skip
        assert main(argv) != 0
        error = capsys.readouterr().err.strip()
        assert "is a training option" in error and extra[0] in error, error


def _run(directory: Path, dtype: str, settings: AstraSettings, *extra: str):  # type: ignore[no-untyped-def]
    """ASTRA-sim on the trace ``stage trace`` writes into ``directory`` (the system, network
    and memory files from the backend's writer, then the CLI's traces over its own)."""
    assert BINARY is not None
    inputs = write_inputs(lower(MODEL, PARALLEL), H100, directory, dtype=dtype, settings=settings)
    ranks = _trace(directory, *extra)
    return run_astra_sim(BINARY, inputs, timeout_s=600), ranks


@needs_binary
def test_the_real_binary_runs_an_fp8_trace_with_less_communication(tmp_path: Path) -> None:
    roofline = AstraSettings()
    bf16, _ = _run(tmp_path / "bf16", "fp8", roofline)
    fp8, _ = _run(tmp_path / "fp8", "fp8", roofline, *FP8)
    assert sorted(fp8.report.ranks) == sorted(bf16.report.ranks) == [0, 1, 2, 3]
    for rank, result in fp8.report.ranks.items():
        before = bf16.report.ranks[rank]
        assert result.comm_time_cycles is not None and before.comm_time_cycles is not None
        assert result.comm_time_cycles < before.comm_time_cycles, rank
        assert result.gpu_time_cycles == before.gpu_time_cycles  # same nodes, same roofline


@needs_binary
def test_the_real_binary_replays_a_kernels_trace(tmp_path: Path) -> None:
    kernels = AstraSettings(compute="kernels")
    extra = (*FP8, "--compute", "kernels", "--system", "h100-80gb")
    run, ranks = _run(tmp_path, "fp8", kernels, *extra)
    assert sorted(run.report.ranks) == sorted(ranks) == [0, 1, 2, 3]
    for rank, result in run.report.ranks.items():
        assert result.gpu_time_cycles == replayed_ns(ranks[rank]) > 0
