"""The placement note of the serving evaluations (the s23 review's leftover): prefill, decode,
the steady serving state and the design points of inference studies time each pipeline stage
by its first rank's groups as training does, and now carry the same note in
``extra["placement"]`` (``stage eval --phase …`` prints it as one warning line); a
disaggregated state names each pool's note; aligned instances carry none."""

from __future__ import annotations

import pytest

from stage_core.models import get_flavor
from stage_core.serving import Phase, ServingConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.requests import LengthDistribution, RequestLoad
from stage_explore.analytical.serving import (
    RequestMix,
    evaluate_decode,
    evaluate_prefill,
    evaluate_serve,
)
from stage_explore.analytical.serving_design import ServingDesign, evaluate_design
from stage_explore.cli import main
from stage_explore.system import load_system
from stage_explore.system.placement import PLACEMENT_KEY

MODEL = get_flavor("llama3-8b")
H100 = load_system("h100-80gb")
BACKEND = AnalyticalBackend()
PARTLY = "placement: 12 GPUs fill 1 'nvswitch' domain of 8 GPUs and 4 GPUs of another"


def test_decode_and_prefill_on_a_partly_used_node_say_so() -> None:
    decode = ServingConfig(phase=Phase.DECODE, tp=4, dp=3, batch=12, context_len=1024)
    assert evaluate_decode(BACKEND, MODEL, decode, H100).extra[PLACEMENT_KEY] == PARTLY
    prefill = ServingConfig(phase=Phase.PREFILL, tp=4, dp=3, batch=3, prompt_len=512)
    assert evaluate_prefill(BACKEND, MODEL, prefill, H100).extra[PLACEMENT_KEY] == PARTLY


def test_straddling_serving_groups_say_so() -> None:
    decode = ServingConfig(phase=Phase.DECODE, tp=16, dp=9, batch=72, context_len=1024)
    result = evaluate_decode(BACKEND, get_flavor("llama3-70b"), decode, load_system("gb200-nvl72"))
    assert "tp groups of 16 ranks neither fill nor divide" in result.extra[PLACEMENT_KEY]


@pytest.mark.parametrize(("tp", "dp"), [(8, 1), (4, 2), (2, 1), (8, 3)])
def test_aligned_instances_carry_no_note(tp: int, dp: int) -> None:
    decode = ServingConfig(phase=Phase.DECODE, tp=tp, dp=dp, batch=8 * dp, context_len=1024)
    assert PLACEMENT_KEY not in evaluate_decode(BACKEND, MODEL, decode, H100).extra


def test_a_serving_state_carries_its_pools_notes() -> None:
    mix = RequestMix(prompt_len=512, output_len=128)
    odd = ServingConfig(phase=Phase.DECODE, tp=4, dp=3, batch=12)
    colocated = evaluate_serve(BACKEND, MODEL, odd, H100, mix)
    assert colocated.extra[PLACEMENT_KEY] == PARTLY
    aligned = ServingConfig(phase=Phase.PREFILL, tp=8, batch=1, prompt_len=512)
    split = evaluate_serve(BACKEND, MODEL, odd, H100, mix, prefill=aligned, prefill_instances=1)
    assert split.extra[PLACEMENT_KEY] == f"decode pool: {PARTLY}"
    reverse = evaluate_serve(
        BACKEND, MODEL, ServingConfig(phase=Phase.DECODE, tp=8, batch=8), H100, mix,
        prefill=ServingConfig(phase=Phase.PREFILL, tp=4, dp=3, batch=3, prompt_len=512),
        prefill_instances=2,
    )  # fmt: skip
    assert reverse.extra[PLACEMENT_KEY] == f"prefill pool: {PARTLY}"


def test_an_inference_study_point_records_the_note() -> None:
    load = RequestLoad(prompt=LengthDistribution.fixed(512), output=LengthDistribution.fixed(128))
    design = ServingDesign(
        decode=ServingConfig(phase=Phase.DECODE, tp=4, dp=3, batch=12), decode_instances=1,
        max_running=12, load=load,
    )  # fmt: skip
    assert evaluate_design(BACKEND, MODEL, design, H100).extra[PLACEMENT_KEY] == PARTLY


def test_stage_eval_serving_warns_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "--phase", "decode", "--model", "llama3-8b", "--system", "h100-80gb"]
    assert main([*argv, "--tp", "4", "--dp", "3", "--batch", "12", "--context-len", "1024"]) == 0
    assert capsys.readouterr().err == f"stage eval: warning: {PARTLY}\n"
    assert main([*argv, "--tp", "4", "--dp", "2", "--batch", "8", "--context-len", "1024"]) == 0
    assert capsys.readouterr().err == ""
