"""Partial activation checkpointing: Megatron-Core's ``--recompute-granularity full
--recompute-method block --recompute-num-layers N`` (``ParallelConfig.recompute_num_layers``).
In every pipeline stage's model chunk the first N layers are fully recomputed (each keeps only
its input), the others keep their activations (``TransformerBlock._checkpointed_forward``).

Closed forms (Korthikanti et al. 2022, 16-bit activations, 1-byte dropout masks, tp = 1): a
layer without recompute saves ``34·s·b·h + 5·a·s²·b`` bytes, a fully recomputed one its input,
``2·s·b·h``; a chunk of L layers with N recomputed saves ``N·2sbh + (L−N)·(34sbh + 5as²b)``,
and its backward re-runs N layers' forward FLOPs."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.program import lower
from stage_core.models import get_flavor
from stage_core.models.layers import is_kept_block, kept_block_name
from stage_core.parallel import ParallelConfig, Recompute
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.cli import main
from stage_explore.cli.eval import _describe as describe_cli
from stage_explore.system import load_system
from stage_explore.validation.run import describe

GPT = get_flavor("megatron-gpt-1.7b").with_overrides(layers=8)  # a=24, h=2304, s=2048


def _parallel(**fields: object) -> ParallelConfig:
    base: dict[str, object] = {"pp": 2, "micro_batch": 1, "global_batch": 8}
    base.update(fields)
    return ParallelConfig(**base)  # type: ignore[arg-type]


def _layer_saved(programs_stage: object) -> int:
    chunk_blocks = programs_stage.chunks  # type: ignore[attr-defined]
    return sum(
        block.saved_bytes
        for chunk in chunk_blocks
        for block in chunk.blocks
        if block.kind not in ("embedding", "head")
    )


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_saved_activations_of_a_stage_are_the_closed_form(n: int) -> None:
    s, h, a, b = GPT.seq_len, GPT.hidden, GPT.heads, 1
    full_layer, recomputed_layer = 34 * s * b * h + 5 * a * s * s * b, 2 * s * b * h
    programs = lower(GPT, _parallel(recompute=Recompute.FULL, recompute_num_layers=n))
    for stage in programs.stages:
        assert _layer_saved(stage) == n * recomputed_layer + (4 - n) * full_layer
        kinds = [block.kind for block in stage.chunks[0].blocks if block.kind != "embedding"]
        assert kinds[:4] == ["layer"] * n + [kept_block_name("layer")] * (4 - n)


def test_the_kept_layer_is_the_unrecomputed_layer_and_recompute_flops_one_forward() -> None:
    partial = lower(GPT, _parallel(recompute=Recompute.FULL, recompute_num_layers=1)).blocks
    none = lower(GPT, _parallel()).blocks["layer"]
    full = lower(GPT, _parallel(recompute=Recompute.FULL)).blocks["layer"]
    kept = partial[kept_block_name("layer")]
    assert (kept.fwd, kept.bwd, kept.saved_bytes) == (none.fwd, none.bwd, none.saved_bytes)
    assert partial["layer"] == full
    forward = sum(i.flops for i in full.fwd)
    assert sum(i.flops for i in full.bwd if i.phase == "recompute") == forward
    assert sum(i.flops for i in kept.bwd if i.phase == "recompute") == 0
    # a stage's recompute FLOPs: N layers' forward
    stage = lower(GPT, _parallel(recompute=Recompute.FULL, recompute_num_layers=3)).stages[1]
    recomputed = sum(
        i.flops for block in stage.chunks[0].blocks for i in block.bwd if i.phase == "recompute"
    )
    assert recomputed == 3 * forward


def test_n_equal_to_the_chunk_is_full_recompute_and_none_is_unchanged() -> None:
    full = lower(GPT, _parallel(recompute=Recompute.FULL))
    every = lower(GPT, _parallel(recompute=Recompute.FULL, recompute_num_layers=4))
    assert [s.chunks for s in full.stages] == [s.chunks for s in every.stages]
    assert "recompute_num_layers" not in _parallel().to_dict()
    assert "recompute_method" not in _parallel().to_dict()


def test_each_virtual_chunk_recomputes_its_first_n_layers() -> None:
    parallel = _parallel(
        recompute=Recompute.FULL, recompute_num_layers=1, vpp=2, schedule="interleaved"
    )
    programs = lower(GPT, parallel)  # 4 global stages of 2 layers
    for stage in programs.stages:
        for chunk in stage.chunks:
            layers = [b.kind for b in chunk.blocks if b.kind not in ("embedding", "head")]
            assert layers == ["layer", kept_block_name("layer")]
    assert is_kept_block(kept_block_name("layer")) and not is_kept_block("layer")


@pytest.mark.parametrize("n", [1, 2, 3])
def test_every_nth_block_of_a_rank_is_recomputed_torchtitan(n: int) -> None:
    """torchtitan's ``selective_ac_option = n``: a counter over the blocks a rank builds, the
    block checkpointed when the count (from 1) is a multiple of n; vpp 2: the rank's two chunks
    continue one count."""
    s, h, a, b = GPT.seq_len, GPT.hidden, GPT.heads, 1
    full_layer, recomputed_layer = 34 * s * b * h + 5 * a * s * s * b, 2 * s * b * h
    one = lower(GPT, ParallelConfig(recompute=Recompute.FULL, recompute_num_layers=n,
                                    recompute_method="every"))  # fmt: skip
    kinds = [b.kind for b in one.stages[0].chunks[0].blocks if b.kind not in ("embedding", "head")]
    expected = ["layer" if i % n == 0 else kept_block_name("layer") for i in range(1, 9)]
    assert kinds == expected
    assert _layer_saved(one.stages[0]) == (8 // n) * recomputed_layer + (8 - 8 // n) * full_layer
    interleaved = lower(
        GPT,
        _parallel(
            recompute=Recompute.FULL,
            recompute_num_layers=n,
            recompute_method="every",
            vpp=2,
            schedule="interleaved",
        ),
    )
    for stage in interleaved.stages:
        kinds = [b.kind for c in stage.chunks for b in c.blocks if b.kind.startswith("layer")]
        assert kinds == expected[:4]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"recompute": Recompute.FULL, "recompute_num_layers": 5}, "at most the layers"),
        ({"recompute": Recompute.SELECTIVE, "recompute_num_layers": 1}, "needs recompute='full'"),
        ({"recompute_num_layers": 2}, "needs recompute='full'"),
        (
            {"recompute": Recompute.FULL, "recompute_num_layers": 5, "recompute_method": "every"},
            "every pipeline rank \\(4\\), but got recompute_num_layers=5",
        ),
        (
            {"recompute": Recompute.FULL, "recompute_num_layers": 5, "recompute_method": "spread"},
            "every pipeline rank \\(4\\), but got recompute_num_layers=5",
        ),
        ({"recompute": Recompute.FULL, "recompute_num_layers": 0}, "a positive int or None"),
        ({"recompute": Recompute.FULL, "recompute_num_layers": "2"}, "a positive int or None"),
        (
            {"recompute": Recompute.FULL, "recompute_num_layers": 2, "recompute_method": "random"},
            "recompute_method",
        ),
    ],
)
def test_bad_values_are_one_line_config_errors(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        lower(GPT, _parallel(**fields))
    assert "\n" not in str(raised.value)


def test_the_analytical_memo_keeps_partial_and_full_apart() -> None:
    system = load_system("h100-80gb")
    configs = [
        _parallel(recompute=Recompute.FULL),
        _parallel(recompute=Recompute.FULL, recompute_num_layers=2),
        _parallel(),
        _parallel(recompute=Recompute.FULL, recompute_num_layers=1),
    ]
    shared = AnalyticalBackend()
    warm = [shared.evaluate(GPT, p, system) for p in configs]
    cold = [AnalyticalBackend().evaluate(GPT, p, system) for p in configs]
    for w, c in zip(warm, cold, strict=True):
        assert (w.step_time_s, w.peak_memory_bytes) == (c.step_time_s, c.peak_memory_bytes)
    full, two, none, one = warm
    assert none.peak_memory_bytes > one.peak_memory_bytes > two.peak_memory_bytes
    assert two.peak_memory_bytes > full.peak_memory_bytes
    assert none.step_time_s < one.step_time_s < two.step_time_s < full.step_time_s
    assert none.hardware_flops_per_step < two.hardware_flops_per_step
    assert two.hardware_flops_per_step < full.hardware_flops_per_step


def test_the_cli_flags_reach_the_config_and_bad_values_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.explore.test_cli_options import workload

    _, parallel = workload(
        "--model", "megatron-gpt-1.7b", "--pp", "2", "--recompute", "full",
        "--recompute-num-layers", "3",
    )  # fmt: skip
    assert (parallel.recompute_num_layers, parallel.recompute_method) == (3, "block")
    assert "full(3 block) recompute" in describe(parallel)
    assert "recompute=full(3 block) " in describe_cli(parallel.to_dict())
    assert "recompute=full " in describe_cli(_parallel(recompute=Recompute.FULL).to_dict())
    every = _parallel(recompute=Recompute.FULL, recompute_num_layers=2, recompute_method="every")
    assert "recompute=full(2 every)" in describe_cli(every.to_dict())
    code = main(
        ["eval", "--model", "megatron-gpt-1.7b", "--layers", "8", "--pp", "2", "--recompute",
         "full", "--recompute-num-layers", "5", "--system", "h100-80gb"]
    )  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "recompute_num_layers=5" in err and len(err.splitlines()) == 1


def _fms_fsdp_checkpointed(blocks: int, p: float) -> list[bool]:
    """fms-fsdp's rule (fms_fsdp/policies/ac_handler.py apply_fsdp_checkpointing), in floats:
    block_idx counts blocks from 1; a block is wrapped when block_idx * p >= cut_off, cut_off
    starting at 1/2 and growing by 1 per wrapped block."""
    wrapped, cut_off = [], 0.5
    for block_idx in range(1, blocks + 1):
        hit = block_idx * p >= cut_off
        cut_off += hit
        wrapped.append(hit)
    return wrapped


@pytest.mark.parametrize(("n", "layers"), [(4, 8), (1, 8), (3, 8), (8, 8), (2, 6), (4, 6)])
def test_spread_is_fms_fsdp_fraction_n_over_l(n: int, layers: int) -> None:
    """recompute_method 'spread' with N of a rank's L blocks is fms-fsdp's
    selective_checkpointing p = N / L: round(L·p) = N blocks, placed by its cut-off rule
    (p = 1/2: [ac, no-ac, …]; p = 2/3: [ac, no-ac, ac, ac, no-ac, ac])."""
    s, h, a, b = GPT.seq_len, GPT.hidden, GPT.heads, 1
    full_layer, recomputed_layer = 34 * s * b * h + 5 * a * s * s * b, 2 * s * b * h
    model = GPT.with_overrides(layers=layers)
    parallel = ParallelConfig(
        recompute=Recompute.FULL, recompute_num_layers=n, recompute_method="spread"
    )
    stage = lower(model, parallel).stages[0]
    kinds = [b.kind for b in stage.chunks[0].blocks if b.kind not in ("embedding", "head")]
    wrapped = _fms_fsdp_checkpointed(layers, n / layers)
    assert kinds == ["layer" if w else kept_block_name("layer") for w in wrapped]
    assert sum(wrapped) == n
    assert _layer_saved(stage) == n * recomputed_layer + (layers - n) * full_layer


def test_the_analytical_memo_keeps_the_methods_apart() -> None:
    """One backend evaluating the four methods at the same N (in both orders) gives what a fresh
    backend gives each, and each recomputes its own layers: with N = 3 of 8 layers on one rank,
    ``every`` recomputes 2 (blocks 3 and 6), ``block`` and ``spread`` 3, ``uniform`` all 8 (in
    groups of 3, 3, 2) — one layer forward of hardware FLOPs per recomputed layer."""
    system = load_system("h100-80gb")
    methods = ("every", "spread", "block", "uniform")
    configs = {
        m: ParallelConfig(
            micro_batch=1,
            global_batch=8,
            recompute=Recompute.FULL,
            recompute_num_layers=3,
            recompute_method=m,
        )
        for m in methods
    }
    shared = AnalyticalBackend()
    warm = {m: shared.evaluate(GPT, configs[m], system) for m in (*methods, *reversed(methods))}
    for m in methods:
        fresh = AnalyticalBackend().evaluate(GPT, configs[m], system)
        got = warm[m]
        assert (got.step_time_s, got.peak_memory_bytes, got.hardware_flops_per_step) == (
            fresh.step_time_s,
            fresh.peak_memory_bytes,
            fresh.hardware_flops_per_step,
        ), m
    recomputed = {"every": 2, "spread": 3, "block": 3, "uniform": 8}
    per_layer = warm["spread"].hardware_flops_per_step - warm["every"].hardware_flops_per_step
    assert per_layer > 0
    for m in methods:
        extra = warm[m].hardware_flops_per_step - warm["every"].hardware_flops_per_step
        assert extra == pytest.approx((recomputed[m] - recomputed["every"]) * per_layer, rel=1e-9)
    assert warm["every"].peak_memory_bytes > warm["spread"].peak_memory_bytes  # one more kept
