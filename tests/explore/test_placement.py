"""The placement note (s23 review): a point whose ranks leave a scale-up domain partly used, or
whose innermost groups straddle domains unevenly, is evaluated as before but says so, in
``Evaluation.extra["placement"]`` and as one warning line of ``stage eval``; aligned points and
one-domain systems carry no note."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.cli import main
from stage_explore.system import load_system
from stage_explore.system.model import System
from stage_explore.system.placement import PLACEMENT_KEY, placement_note

MODEL = get_flavor("llama3-8b")


def _with_domain(system: System, size: int) -> System:
    """``system`` with its scale-up (first) network dim at ``size`` GPUs."""
    return replace(system, network=(replace(system.network[0], size=size), *system.network[1:]))


def _note(system: System, **degrees: int) -> str | None:
    dp = degrees.get("dp", 1)
    seq_len = 2048 * degrees.get("cp", 1)  # 2·cp must divide it
    config = ParallelConfig(global_batch=2 * dp, seq_len=seq_len, **degrees)
    note = AnalyticalBackend().evaluate(MODEL, config, system).extra.get(PLACEMENT_KEY)
    assert note is None or isinstance(note, str)
    return note


def test_a_partly_used_domain_is_noted() -> None:
    three = _with_domain(load_system("h100-80gb"), 3)  # the s22 review's system file
    note = _note(three, dp=16)
    assert note == "placement: 16 GPUs fill 5 'nvswitch' domains of 3 GPUs and 1 GPU of another"
    racks = _note(load_system("gb200-nvl72"), dp=16, tp=8)
    assert racks is not None and "72 GPUs and 56 GPUs of another" in racks


def test_groups_straddling_domains_unevenly_are_noted() -> None:
    # 144 GPUs fill two NVL72 racks, but TP-16 groups 64-79 straddle them while 0-15 do not
    note = _note(load_system("gb200-nvl72"), dp=9, tp=16)
    assert note is not None and "tp groups of 16 ranks neither fill nor divide" in note
    assert "of another" not in note  # no partly used domain
    # CP 3 × TP 2 = 6-rank groups on 8-GPU nodes, 24 GPUs (three whole nodes)
    note = _note(load_system("h100-80gb"), dp=4, cp=3, tp=2)
    assert note is not None and "cp·tp groups of 6 ranks" in note


@pytest.mark.parametrize(
    ("preset", "degrees"),
    [("h100-80gb", {"dp": 16, "tp": 8}), ("h100-80gb", {"dp": 2, "tp": 4}),
     ("gb200-nvl72", {"dp": 18, "tp": 4}), ("gb200-nvl72", {"dp": 8, "tp": 8}),
     ("h100-80gb", {"dp": 6})],
)  # fmt: skip
def test_aligned_points_carry_no_note(preset: str, degrees: dict[str, int]) -> None:
    assert _note(load_system(preset), **degrees) is None


def test_a_one_domain_system_carries_no_note() -> None:
    h100 = load_system("h100-80gb")
    assert placement_note(h100, [("dp", 12)]) is not None
    single = replace(h100, network=h100.network[:1])  # one dim: one domain, nothing to say
    assert placement_note(single, [("dp", 12)]) is None


def test_stage_eval_warns_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "--model", "llama3-8b", "--seq-len", "2048", "--system", "h100-80gb"]
    assert main([*argv, "--dp", "12", "--global-batch", "12", "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        "stage eval: warning: placement: 12 GPUs fill 1 'nvswitch' domain of 8 GPUs and "
        "4 GPUs of another\n"
    )
    assert '"placement": "placement: 12 GPUs' in captured.out  # in the JSON's extra too
    assert main([*argv, "--dp", "8", "--global-batch", "8"]) == 0
    assert capsys.readouterr().err == ""
