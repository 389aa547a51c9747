"""Megatron-Core's all-gather token dispatcher (issue #12; ``--moe-token-dispatcher-type
allgather``, ``MoEAllGatherTokenDispatcher``: "this allgather spans the communication domain of
TP*EP"): derived from a layout change in the planner — the dispatch and the combine read the
tokens gathered over the expert group (and tp under sequence parallelism) — never written by
hand. Per-rank bytes against the closed form, expert work equal to the all-to-all dispatcher's,
traces that pass ``stage check --for astra-sim``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.parallel import MoeDispatcher, ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.cli import main
from stage_explore.system import load_system

QWEN = get_flavor("qwen3-30b-a3b").with_overrides(layers=2, seq_len=1024)

CASES = [  # tp, sp, ep, etp, cp, dp
    (1, False, 4, None, 1, 4),
    (2, True, 2, None, 1, 4),  # experts tp-split: the gather spans tp·ep
    (2, True, 4, 1, 1, 4),  # ep folded over tp (etp 1)
    (2, False, 2, None, 1, 4),  # tp ranks hold the same tokens: gathered over ep only
    (2, True, 8, 1, 2, 4),  # folded over tp and cp
    (2, True, 4, None, 2, 4),  # ep·cp with tp-split experts
]


def _config(case: tuple[int, bool, int, int | None, int, int], dispatcher: str) -> ParallelConfig:
    tp, sp, ep, etp, cp, dp = case
    return ParallelConfig(
        tp=tp,
        sp=sp,
        ep=ep,
        etp=etp,
        cp=cp,
        dp=dp,
        global_batch=dp,
        moe_dispatcher=MoeDispatcher(dispatcher),
    )


def _received(chain: list[Instr], sizes: list[int]) -> int:
    """Bytes one rank receives over a chain of all-gathers (``comm_bytes`` = its input) or
    sends over a chain of reduce-scatters (``comm_bytes`` = the whole buffer)."""
    total = 0
    for instr, n in zip(chain, sizes, strict=True):
        if instr.collective is CollectiveKind.ALL_GATHER:
            total += (n - 1) * instr.comm_bytes
        else:
            assert instr.comm_bytes % n == 0
            total += (n - 1) * instr.comm_bytes // n
    return total


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_per_rank_bytes_equal_the_closed_form(
    case: tuple[int, bool, int, int | None, int, int],
) -> None:
    """Forward: the rank's own tokens (``b·s/(cp·tp_sp)·h·2`` bytes, no top-k copies) are
    all-gathered over a group of ``g = ep · (tp if sp and etp = tp)`` ranks, each rank receiving
    ``(g − 1)`` × them; the combine's output is reduce-scattered back, each rank sending as much.
    The backward mirrors both (all-gather of the output gradient, reduce-scatter of the input
    gradient). No all-to-all is left."""
    parallel = _config(case, "allgather")
    programs = lower(QWEN, parallel)
    axis_sizes = programs.workload.axis_sizes
    tp, sp, ep, etp, cp, _ = case
    own = parallel.micro_batch * QWEN.seq_len // (cp * (tp if sp else 1)) * QWEN.hidden * 2
    group = ep * (tp if sp and (etp or tp) == tp else 1)
    block = programs.blocks["moe_layer"]
    assert not [i for i in (*block.fwd, *block.bwd) if i.collective is CollectiveKind.ALL_TO_ALL]

    def chain(instrs: tuple[Instr, ...], name: str) -> list[Instr]:
        return [i for i in instrs if i.name == name]

    for instrs, name in (
        (block.fwd, "all_gather:ln2"),
        (block.fwd, "reduce_scatter:moe.out"),
        (block.bwd, "all_gather:d.moe.out"),
        (block.bwd, "reduce_scatter:d.ln2"),
    ):
        steps = chain(instrs, name)
        sizes = [math.prod(axis_sizes[a] for a in i.axes) for i in steps]
        assert math.prod(sizes) == group, (name, sizes)
        assert _received(steps, sizes) == (group - 1) * own, name
        first = steps[0].comm_bytes
        expected_first = own if steps[0].collective is CollectiveKind.ALL_GATHER else group * own
        assert first == expected_first, name


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_expert_work_per_rank_equals_the_all_to_all_dispatchers(
    case: tuple[int, bool, int, int | None, int, int],
) -> None:
    """The same local experts run on the same number of slots: the expert GEMMs' FLOPs per
    rank are the all-to-all dispatcher's, and so are the expert weights."""

    def experts(dispatcher: str) -> tuple[int, int]:
        block = lower(QWEN, _config(case, dispatcher)).blocks["moe_layer"]
        flops = sum(i.flops for i in (*block.fwd, *block.bwd) if i.name.startswith("experts."))
        weights = sum(w.elements for w in block.weights if w.name.startswith("experts."))
        return flops, weights

    assert experts("allgather") == experts("alltoall")


def test_bad_dispatcher_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="moe_dispatcher") as error:
        ParallelConfig(moe_dispatcher="broadcast")  # type: ignore[arg-type]
    assert "\n" not in str(error.value) and "'allgather'" in str(error.value)


def test_default_is_all_to_all_and_unchanged() -> None:
    parallel = ParallelConfig(tp=2, sp=True, ep=2, dp=4, global_batch=4)
    assert str(parallel.moe_dispatcher) == "alltoall"
    same = lower(QWEN, _config((2, True, 2, None, 1, 4), "alltoall")).blocks["moe_layer"]
    assert lower(QWEN, parallel).blocks["moe_layer"] == same


def test_trace_check_and_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``stage trace --moe-dispatcher allgather`` passes ``stage check --for astra-sim``;
    ``stage eval`` evaluates it (other times than all-to-all)."""
    argv = ["--model", "qwen3-30b-a3b", "--layers", "2", "--seq-len", "1024", "--tp", "2",
            "--sp", "--pp", "2", "--dp", "2", "--ep", "2", "--global-batch", "4"]  # fmt: skip
    out = tmp_path / "traces"
    assert main(["trace", *argv, "--moe-dispatcher", "allgather", "--out", str(out)]) == 0
    assert main(["check", str(out), "--for", "astra-sim", "--json"]) == 0
    capsys.readouterr()
    steps = {}
    for dispatcher in ("alltoall", "allgather"):
        system = ["--system", "h100-80gb", "--json"]
        assert main(["eval", *argv, "--moe-dispatcher", dispatcher, *system]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["feasible"] and result["parallel"]["moe_dispatcher"] == dispatcher
        steps[dispatcher] = result["step_time_s"]
    assert steps["allgather"] != steps["alltoall"]
    with pytest.raises(SystemExit) as error:  # argparse's usage error names the choices
        main(["eval", *argv, "--moe-dispatcher", "broadcast", "--system", "h100-80gb"])
    assert error.value.code == 2


def test_load_imbalance_does_not_touch_the_gathers() -> None:
    """Under the all-gather dispatcher every rank receives all tokens whatever the routing: the
    load-imbalance factor charges the experts' compute only, not the gathers' bytes."""
    from stage_explore.analytical.blocktime import routed_instr

    block = lower(QWEN, _config((2, True, 2, None, 1, 4), "allgather")).blocks["moe_layer"]
    routed_comm = [i for i in (*block.fwd, *block.bwd) if i.is_comm and routed_instr(i)]
    assert routed_comm == []
    h100 = load_system("h100-80gb")
    parallel = _config((2, True, 2, None, 1, 4), "allgather")
    base = AnalyticalBackend(framework="megatron-core").evaluate(QWEN, parallel, h100)
    skewed = AnalyticalBackend(
        framework="megatron-core", overrides={"moe_load_imbalance": 2.0}
    ).evaluate(QWEN, parallel, h100)
    assert skewed.step_time_s > base.step_time_s
