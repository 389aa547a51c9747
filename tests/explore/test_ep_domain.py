"""s30 epdomain: HybridEP's expert-parallel group inside NVLink domains
(``moe_hybridep_domain_ranks``, :mod:`stage_explore.analytical.ep_domain`): the group is timed
as ``ep / n`` domains of ``n`` consecutive ranks, every other group keeps the preset's placement."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.models.flavors import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.ep_domain import domain_group
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.system import load_system
from stage_explore.system.placement import PLACEMENT_KEY

NVL72 = (72, 2048)


def test_one_domain_of_the_group_s_ranks() -> None:
    assert domain_group(range(64, 96), 32, NVL72) == tuple(range(32))


def test_two_domains_of_half_the_group_each() -> None:
    assert domain_group(range(64), 32, NVL72) == (*range(32), *range(72, 104))


@pytest.mark.parametrize(("ranks", "message"), [
    (24, "expected a divisor of the expert-parallel group's 32 ranks"),
    (0, "expected a divisor"),
    (32, "at most the scale-up domain's 16 GPUs"),
])  # fmt: skip
def test_a_count_hybridep_would_refuse_is_refused(ranks: int, message: str) -> None:
    dims = (16, 8) if ranks == 32 else NVL72
    with pytest.raises(ConfigError, match=message):
        domain_group(range(32), ranks, dims)


@pytest.mark.parametrize("value", [-1, True, 1.5, "32"])
def test_a_bad_option_value_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="`moe_hybridep_domain_ranks` must be an int >= 0"):
        FRAMEWORKS["megatron-core"].with_overrides({"moe_hybridep_domain_ranks": value})


def _evaluate(
    gpus_per_stage: int, ep: int = 32, **options: object
) -> tuple[float, dict[str, float], str]:
    """Qwen3-30B-A3B (8 layers) on ``4 × gpus_per_stage`` GB200 GPUs, PP 4: with 64 GPUs a
    stage and EP 32, the preset's contiguous 72-GPU racks put stage 1's first expert group
    (ranks 64–95) across two racks."""
    model = get_flavor("qwen3-30b-a3b").with_overrides(layers=8, seq_len=1024)
    dp = gpus_per_stage
    parallel = ParallelConfig(pp=4, dp=dp, ep=ep, micro_batch=1, global_batch=dp * 8)
    backend = AnalyticalBackend(framework="megatron-core", overrides=options)
    result = backend.evaluate(model, parallel, load_system("gb200-nvl72"))
    return result.step_time_s, dict(result.breakdown), result.extra.get(PLACEMENT_KEY, "")


def test_the_straddling_group_is_timed_inside_one_domain() -> None:
    base, _, note = _evaluate(64, moe_hybridep=True)
    placed, _, placed_note = _evaluate(64, moe_hybridep=True, moe_hybridep_domain_ranks=32)
    assert placed < base
    assert "straddle" in note and "moe_hybridep_domain_ranks" not in note
    assert placed_note.endswith("32 ranks in each NVLink domain (moe_hybridep_domain_ranks), "
                                "not as above")  # fmt: skip


def test_only_under_hybridep() -> None:
    base = _evaluate(64)[0]
    assert _evaluate(64, moe_hybridep_domain_ranks=32)[0] == pytest.approx(base, rel=1e-12)


def test_no_straddling_group_no_change() -> None:
    """72 GPUs a stage, EP 8: every stage's first expert group lies inside one rack."""
    base = _evaluate(72, 8, moe_hybridep=True)
    placed = _evaluate(72, 8, moe_hybridep=True, moe_hybridep_domain_ranks=8)
    assert placed[0] == pytest.approx(base[0], rel=1e-12)
    assert placed[1] == pytest.approx(base[1], rel=1e-12)
