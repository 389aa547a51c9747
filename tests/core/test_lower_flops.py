"""Lowered FLOPs against Narayanan et al. 2021 / Korthikanti et al. 2022 (formulas.md §2).

For a GPT block (MHA, FFN = 4h, GELU, unfused core attention over the whole sequence) the
matmul and attention FLOPs of one training step, summed over every rank, are exactly

- ``72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h))`` without recompute,
- ``96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h))`` with full recompute (one extra forward of every
  layer; the output layer is not recomputed),

whatever the tensor, pipeline, data and sequence parallel degrees and the micro-batching.
``V`` is the vocabulary the generator uses: padded to a multiple of ``128·tp`` (51200 needs no
padding for tp ≤ 8; the gpt3 flavors' 50257 is padded and compared as padded). "Summed over
every rank" is exact: each pipeline stage runs one program on ``len(programs.ranks(stage))``
ranks, and a stage runs its tasks (forward or backward of a chunk for one micro-batch) in the
schedule's order, so the step's FLOPs are Σ_stage ranks × Σ_task Σ_block Σ_instr.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from stage_core.lower import flops as flops_module
from stage_core.lower.bind import Instr
from stage_core.lower.program import ProgramSet, lower
from stage_core.models import ModelSpec, get_flavor
from stage_core.parallel import ParallelConfig

MATMUL_KINDS = frozenset({"einsum", "attention"})
LAYERS = 4
GPT = get_flavor("megatron-gpt-1.7b").with_overrides(layers=LAYERS)


def step_flops(
    programs: ProgramSet, kinds: Iterable[str] | None = MATMUL_KINDS,
    phases: Iterable[str] | None = None,
) -> int:
    """FLOPs of one training step over all ranks, of instructions of ``kinds`` in ``phases``
    (``None``: all), following every stage's task order (so micro-batches are counted)."""
    wanted_kinds = None if kinds is None else set(kinds)
    wanted_phases = None if phases is None else set(phases)
    total = 0
    for stage in programs.stages:
        per_rank = 0
        for task in stage.tasks:
            for block in stage.chunks[task.chunk].blocks:
                for instr in block.fwd if task.phase == "F" else block.bwd:
                    if wanted_kinds is not None and instr.kind not in wanted_kinds:
                        continue
                    if wanted_phases is not None and instr.phase not in wanted_phases:
                        continue
                    per_rank += instr.flops
        total += len(programs.ranks(stage.stage)) * per_rank
    return total


def model_flops_72(model: ModelSpec, parallel: ParallelConfig) -> int:
    """``72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h))``, multiplied out (an exact integer)."""
    b, s, layers, h = parallel.global_batch, model.seq_len, model.layers, model.hidden
    vocab = parallel.padded_vocab(model)
    return 72 * b * s * layers * h * h + 12 * b * s * s * layers * h + 6 * b * s * h * vocab


def model_flops_96(model: ModelSpec, parallel: ParallelConfig) -> int:
    """``96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h))``, multiplied out."""
    b, s, layers, h = parallel.global_batch, model.seq_len, model.layers, model.hidden
    vocab = parallel.padded_vocab(model)
    return 96 * b * s * layers * h * h + 16 * b * s * s * layers * h + 6 * b * s * h * vocab


#: (tp, pp, dp, sp, micro_batch, global_batch, schedule, vpp): every parallel degree, alone and
#: combined, with one and several micro-batches.
Config = tuple[int, int, int, bool, int, int, str, int]
CONFIGS: list[Config] = [
    (1, 1, 1, False, 1, 1, "1f1b", 1),
    (2, 1, 1, False, 2, 2, "1f1b", 1),
    (4, 1, 1, True, 1, 3, "1f1b", 1),
    (1, 2, 1, False, 1, 4, "1f1b", 1),
    (1, 1, 4, False, 1, 8, "1f1b", 1),
    (2, 2, 2, True, 1, 8, "1f1b", 1),
    (8, 4, 1, True, 2, 8, "gpipe", 1),
    (2, 2, 2, False, 1, 8, "interleaved", 2),
]
CONFIG_IDS = [
    f"tp{c[0]}-pp{c[1]}-dp{c[2]}-sp{int(c[3])}-b{c[4]}-B{c[5]}-{c[6]}" for c in CONFIGS
]


def _parallel(config: Config, recompute: str) -> ParallelConfig:
    tp, pp, dp, sp, micro_batch, global_batch, schedule, vpp = config
    return ParallelConfig(
        tp=tp, pp=pp, dp=dp, sp=sp, micro_batch=micro_batch, global_batch=global_batch,
        schedule=schedule, vpp=vpp, recompute=recompute,
    )


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
def test_model_flops_equal_the_72_formula_exactly(config: Config) -> None:
    parallel = _parallel(config, "none")
    programs = lower(GPT, parallel)
    assert parallel.padded_vocab(GPT) == 51200  # no padding: V is the model's vocabulary
    assert step_flops(programs) == model_flops_72(GPT, parallel)
    assert step_flops(programs, phases=("recompute",)) == 0


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
def test_full_recompute_flops_equal_the_96_formula_exactly(config: Config) -> None:
    parallel = _parallel(config, "full")
    programs = lower(GPT, parallel)
    assert step_flops(programs) == model_flops_96(GPT, parallel)
    # The recompute phase is exactly one more forward of every layer (not of the output layer).
    b, s, layers, h = parallel.global_batch, GPT.seq_len, GPT.layers, GPT.hidden
    recomputed = 24 * b * s * layers * h * h + 4 * b * s * s * layers * h
    assert step_flops(programs, phases=("recompute",)) == recomputed


@pytest.mark.parametrize("config", CONFIGS[:6], ids=CONFIG_IDS[:6])
def test_selective_recompute_adds_exactly_the_attention_core(config: Config) -> None:
    """Korthikanti et al. 2022: selective recompute re-runs the attention core only, whose two
    matmuls (scores, context) cost ``4·B·s²·h`` per layer."""
    parallel = _parallel(config, "selective")
    programs = lower(GPT, parallel)
    b, s, layers, h = parallel.global_batch, GPT.seq_len, GPT.layers, GPT.hidden
    core = 4 * b * s * s * layers * h
    assert step_flops(programs) == model_flops_72(GPT, parallel) + core
    assert step_flops(programs, phases=("recompute",)) == core


@pytest.mark.parametrize(("tp", "vocab"), [(1, 50304), (2, 50432), (8, 51200)])
def test_padded_vocabulary_is_the_v_of_the_formula(tp: int, vocab: int) -> None:
    """gpt3 flavors keep GPT-2's 50257 tokens; the generator pads them to a multiple of 128·tp
    (Megatron), and the output-layer FLOPs follow the padded size."""
    model = get_flavor("gpt3-350m").with_overrides(layers=2, seq_len=256)
    parallel = ParallelConfig(tp=tp, sp=tp > 1, global_batch=2, micro_batch=2)
    assert parallel.padded_vocab(model) == vocab
    assert step_flops(lower(model, parallel)) == model_flops_72(model, parallel)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize(
    "config", [CONFIGS[i] for i in (0, 5, 6)], ids=[CONFIG_IDS[i] for i in (0, 5, 6)]
)
def test_all_flops_are_within_two_percent_of_the_formula(config: Config, recompute: str) -> None:
    """Element-wise ops (norms, GELU, softmax, dropout, biases, residuals, loss) add < 2 %;
    selective recompute is compared with the FLOPs it actually runs (formula + attention core),
    and the optimizer step (12 FLOPs per parameter shard) is counted too."""
    parallel = _parallel(config, recompute)
    programs = lower(GPT, parallel)
    full = recompute == "full"
    formula = model_flops_96(GPT, parallel) if full else model_flops_72(GPT, parallel)
    if recompute == "selective":
        formula += 4 * parallel.global_batch * GPT.seq_len**2 * GPT.layers * GPT.hidden
    optimizer = sum(len(programs.ranks(s.stage)) * s.optimizer.flops for s in programs.stages)
    everything = step_flops(programs, kinds=None) + optimizer
    assert formula < everything < 1.02 * formula
    assert step_flops(programs, kinds=None) - step_flops(programs) > 0


MODELS = {
    "gpt": GPT,
    "llama": get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024),
    "mixtral": get_flavor("mixtral-8x7b").with_overrides(layers=2, seq_len=1024),
    "deepseek-moe": get_flavor("deepseek-moe-16b").with_overrides(layers=2, seq_len=1024),
}


def _is_matmul_backward(instr: Instr) -> bool:
    """A backward einsum, or the backward of a fused attention kernel (kind ``attention``)."""
    return instr.phase == "bwd" and instr.kind in ("einsum", "attention")


@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_backward_matmul_flops_are_twice_the_forward(name: str, sp: bool) -> None:
    """Per block (embedding, dense or MoE layer, head): the backward's einsum and attention FLOPs
    (two gradient matmuls per forward matmul, attention backward = 2 × forward) are 2 × the
    forward's, and the forward's are the block's ``fwd_model_flops``."""
    model = MODELS[name]
    ep = 2 if model.is_moe else 1
    parallel = ParallelConfig(tp=2, dp=2, ep=ep, sp=sp, global_batch=2)
    programs = lower(model, parallel)
    for kind, block in programs.blocks.items():
        forward = sum(i.flops for i in block.fwd if i.kind in MATMUL_KINDS)
        backward = sum(i.flops for i in block.bwd if _is_matmul_backward(i))
        assert forward == block.fwd_model_flops, kind
        assert backward == 2 * forward, kind
        assert (forward > 0) == (kind != "embedding"), kind


def test_model_flops_are_three_times_the_forward_model_flops() -> None:
    """``fwd_model_flops`` (what MFU counts) × 3 × micro-batches × ranks is the 72 formula."""
    parallel = _parallel(CONFIGS[5], "full")
    programs = lower(GPT, parallel)
    forward = 0
    for stage in programs.stages:
        per_micro_batch = sum(b.fwd_model_flops for c in stage.chunks for b in c.blocks)
        ranks = len(programs.ranks(stage.stage))
        forward += ranks * per_micro_batch * programs.workload.micro_batches
    assert 3 * forward == model_flops_72(GPT, parallel)


def test_causal_fused_attention_is_half_the_full_square() -> None:
    """Llama's fused kernel is causal: ``4·b·s²·h/2`` per layer forward (here tp shards heads)."""
    model = MODELS["llama"]
    programs = lower(model, ParallelConfig(tp=2, global_batch=1))
    (attention,) = [i for i in programs.blocks["layer"].fwd if i.kind == "attention"]
    s, h = model.seq_len, model.heads * model.head_dim
    assert attention.flops == 4 * s * s * h // 2 // 2


# -- One attention-FLOP convention for every family (stage_core.lower.flops.AttentionFlops) --

LLAMA = get_flavor("llama3-8b").with_overrides(layers=2, seq_len=1024)


def _attention_core_full(model: ModelSpec, parallel: ParallelConfig, recomputed: bool) -> int:
    """Attention-core FLOPs of a step over every (query, key) pair: forward ``4·B·s²·N·D`` per
    layer (scores and context), backward twice that; plus one forward per recomputed layer."""
    b, s, n_d = parallel.global_batch, model.seq_len, model.heads * model.head_dim
    return (12 + (4 if recomputed else 0)) * b * s * s * n_d * model.layers


@pytest.mark.parametrize("name", ["gpt", "llama"])
def test_full_convention_counts_every_pair_for_every_family(name: str) -> None:
    # GPT emits Megatron's unfused core (every pair); Llama a fused causal kernel (half the
    # pairs): under the default FULL convention both count the attention core over every pair.
    model = GPT if name == "gpt" else LLAMA
    parallel = ParallelConfig(tp=2, global_batch=2, micro_batch=1)
    programs = lower(model, parallel)
    model_flops, hardware = flops_module.step_flops(programs)
    assert flops_module.DEFAULT_ATTENTION_FLOPS is flops_module.AttentionFlops.FULL
    causal_model, causal_hardware = flops_module.step_flops(
        programs, flops_module.AttentionFlops.CAUSAL
    )
    core = _attention_core_full(model, parallel, recomputed=False)
    assert model_flops - causal_model == core // 2  # the causal convention counts half the core
    assert hardware == model_flops and causal_hardware == causal_model  # no recompute here
    if name == "gpt":
        assert model_flops == model_flops_72(GPT, parallel)  # Megatron's formula is FULL


def test_causal_convention_halves_the_gpt_formulas_attention_term() -> None:
    parallel = ParallelConfig(tp=2, global_batch=4, micro_batch=2, recompute="full")
    programs = lower(GPT, parallel)
    b, s, layers, h = parallel.global_batch, GPT.seq_len, GPT.layers, GPT.hidden
    model_flops, hardware = flops_module.step_flops(programs, flops_module.AttentionFlops.CAUSAL)
    assert model_flops == model_flops_72(GPT, parallel) - 6 * b * s * s * layers * h
    assert hardware == model_flops_96(GPT, parallel) - 8 * b * s * s * layers * h


def test_the_convention_is_the_same_in_the_analytical_backend() -> None:
    from stage_explore.analytical.backend import AnalyticalBackend
    from stage_explore.system import load_system

    parallel = ParallelConfig(tp=2, global_batch=2, micro_batch=1)
    result = AnalyticalBackend().evaluate(LLAMA, parallel, load_system("h100-80gb"))
    assert result.model_flops_per_step == flops_module.step_flops(lower(LLAMA, parallel))[0]


def test_the_analytical_backend_takes_the_convention_as_an_option() -> None:
    import pickle

    from stage_core.errors import ConfigError
    from stage_explore.analytical.backend import AnalyticalBackend
    from stage_explore.system import load_system

    parallel = ParallelConfig(tp=2, global_batch=2, micro_batch=1)
    system = load_system("h100-80gb")
    full = AnalyticalBackend().evaluate(LLAMA, parallel, system)
    causal_backend = AnalyticalBackend(attention_flops="causal")
    causal = pickle.loads(pickle.dumps(causal_backend)).evaluate(LLAMA, parallel, system)
    programs = lower(LLAMA, parallel)
    expected = flops_module.step_flops(programs, flops_module.AttentionFlops.CAUSAL)[0]
    assert causal.model_flops_per_step == expected < full.model_flops_per_step
    assert causal.step_time_s == full.step_time_s  # the convention never changes the time
    assert causal.mfu == pytest.approx(full.mfu * expected / full.model_flops_per_step)
    with pytest.raises(ConfigError, match="`attention_flops` must be 'full', 'causal'"):
        AnalyticalBackend(attention_flops="half")
