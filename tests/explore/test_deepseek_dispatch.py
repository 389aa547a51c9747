"""DeepSeek-V3's training as its report states it (arXiv 2412.19437): DeepEP's SMs inside
DualPipe's overlapped pairs (Section 3.2.2, 20 SMs), the FP8 dispatch with BF16 combine
(Section 3.3.4, ``moe_fp8_dispatch``) and the reader's HAI-LLM rule (``infer_deepseek``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.models.flavors import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical import costing_comm
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.analytical.overlap import DEEPEP_SMS
from stage_explore.analytical.pipeline import pair_seconds
from stage_explore.analytical.profile_moe import FP8_DISPATCH_BYTES_PER_ELEMENT
from stage_explore.system import load_system
from stage_explore.validation.infer_deepseek import hai_llm_dispatch
from stage_explore.validation.infer_release import Defaults
from tests.explore.published_rows import inferred_case

_FRACTIONS = costing_comm.CommCosting._deepep_fractions
SHARE = DEEPEP_SMS / 132  # DeepEP's 20 SMs of an H800's 132


def test_a_pair_loses_the_comm_sms_while_its_communication_overlaps() -> None:
    # computation 0.6 + 1.1 = 1.7 s beside 0.4 + 0.4 = 0.8 s of communication: 0.8 s of it on
    # 112 of 132 SMs leaves 0.8 * 20/132 s of work for after
    assert pair_seconds(1.0, 0.6, 1.5, 1.1, SHARE) == pytest.approx(1.7 + 0.8 * SHARE)
    # communication-bound: the computation (0.2 s, slowed by at most its own length's share)
    # stays under the 1.8 s of communication
    assert pair_seconds(1.0, 0.1, 1.0, 0.1, SHARE) == pytest.approx(1.8)
    assert pair_seconds(1.0, 0.6, 1.5, 1.1) == pytest.approx(1.7)  # no SMs taken


def _sent_bytes(monkeypatch: pytest.MonkeyPatch, **overrides: object) -> dict[str, int]:
    """Bytes of every DeepEP-costed expert all-to-all of a 2-node DeepSeek-V3 slice (4 layers,
    EP 16 on h800, FP8 blockwise) under the megatron-core profile with ``overrides``."""
    seen: dict[str, int] = {}
    original = _FRACTIONS  # not an earlier call's spy

    def spy(self, point, span, instr):  # type: ignore[no-untyped-def]
        if self._deepep_all_to_all(point, instr):
            seen[instr.name] = instr.comm_bytes
        return original(self, point, span, instr)

    monkeypatch.setattr(costing_comm.CommCosting, "_deepep_fractions", spy)
    model = replace(get_flavor("deepseek-v3"), layers=4, mtp_layers=0)
    parallel = ParallelConfig(
        dp=16, ep=16, micro_batch=1, global_batch=16, seq_len=1024, zero=1,
        precision="fp8", fp8_recipe="blockwise", fp8_gemms=overrides.pop("gemms", None)
        or ("fprop", "dgrad", "wgrad"),
    )  # fmt: skip
    backend = AnalyticalBackend(framework="megatron-core", overrides=overrides)
    assert backend.evaluate(model, parallel, load_system("h800")).feasible is not None
    return seen


def test_fp8_dispatch_sends_fp8_where_the_report_does(monkeypatch: pytest.MonkeyPatch) -> None:
    bf16 = _sent_bytes(monkeypatch, moe_deepep=True)
    fp8 = _sent_bytes(monkeypatch, moe_deepep=True, moe_fp8_dispatch=True)
    assert set(bf16) == set(fp8) and len(bf16) == 4
    ratio = FP8_DISPATCH_BYTES_PER_ELEMENT / 2  # one byte and 4 per 128 against two bytes
    for name, size in bf16.items():
        tensor = name.partition(":")[2]
        dispatch_kernel = tensor in ("moe.tokens",) or tensor.startswith("d.experts.")
        expected = size * ratio if dispatch_kernel else size  # the combines stay BF16
        assert fp8[name] == pytest.approx(expected, abs=1), name
    # the dispatch feeds the up projection's Fprop: a BF16 Fprop takes a BF16 dispatch
    no_fprop = _sent_bytes(
        monkeypatch, moe_deepep=True, moe_fp8_dispatch=True, gemms=("dgrad", "wgrad")
    )
    assert no_fprop["all_to_all:moe.tokens"] == bf16["all_to_all:moe.tokens"]


def test_fp8_dispatch_needs_deepep() -> None:
    with pytest.raises(ConfigError, match="moe_fp8_dispatch.*needs `moe_deepep`"):
        replace(FRAMEWORKS["megatron-core"], moe_fp8_dispatch=True)


DSV3 = "DeepSeek-V3 671B"


@pytest.mark.parametrize(
    ("source", "model", "precision", "expected"),
    [
        ("DeepSeek-V3 on 2,048 H800 in DeepSeek's HAI-LLM framework", DSV3, "FP8",
         {"moe_deepep": True, "moe_fp8_dispatch": True}),
        ("DeepSeek-V3 on 2,048 H800 in DeepSeek's HAI-LLM framework", DSV3, "BF16",
         {"moe_deepep": True}),
        ("DeepSeek-V3 on 2,048 H800", DSV3, "FP8", {}),  # no framework named
        ("DeepSeekMoE 16B in HAI-LLM", "DeepSeekMoE 16B", "BF16", {}),  # no group-limited routing
    ],
)  # fmt: skip
def test_hai_llm_rows_dispatch_as_the_report_states(
    source: str, model: str, precision: str, expected: dict[str, bool]
) -> None:
    row = {"source": source, "model": model}
    out = Defaults()
    flavor = "deepseek-v3" if model == DSV3 else "deepseek-moe-16b"
    hai_llm_dispatch(row, get_flavor(flavor), precision.lower(), out)
    assert out.options == expected
    assert len(out.notes) == len(expected)


def test_a_row_that_sets_its_dispatcher_keeps_it() -> None:
    out = Defaults(options={"moe_hybridep": True})
    hai_llm_dispatch({"source": "HAI-LLM"}, get_flavor("deepseek-v3"), "fp8", out)
    assert out.options == {"moe_hybridep": True}


def test_the_deepseek_v3_row_reads_hai_llm() -> None:
    case = inferred_case(
        source="DeepSeek-V3 pre-training on 2,048 H800 in DeepSeek's HAI-LLM framework",
        model="DeepSeek-V3 671B", gpu="H800 80GB", precision="FP8", num_gpus="2048",
        global_batch_seqs="15360", seq_len="4096", tp="1", pp="16", ep="64",
    )  # fmt: skip
    assert dict(case.framework_options) == {"moe_deepep": True, "moe_fp8_dispatch": True}
    assert any("HAI-LLM" in note for note in case.assumptions)
