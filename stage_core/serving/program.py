"""Lowering one serving step to exact per-stage instructions, and its memory.

:func:`lower_step` reuses the training path — :func:`~stage_core.lower.program.make_workload`
binds the dims and the mesh, the same blocks are sharded by the same plans — with a KV cache in
the attention (``T`` cached tokens per sequence), the serving head (last position, output
layer, sampler softmax) and no backward. :func:`serving_memory` reads the bound instructions:
weights, the KV cache (the bytes of every ``kv.*`` cache the layers read) and the activation
workspace (the peak of live activations within a block, by liveness over its instructions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from stage_core.arguments import expect
from stage_core.blocks import BlockOptions, Structure
from stage_core.errors import ConfigError
from stage_core.limits import MAX_GLOBAL_BATCH
from stage_core.lower.bind import BoundBlock, bind_block, symbolic_block
from stage_core.lower.program import Workload, chunk_blocks, make_workload, tie_embeddings
from stage_core.models.layers import is_layer_block
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_core.parallel.config import Precision
from stage_core.plans import PlanFlags
from stage_core.serving.config import Phase, ServingConfig, ServingStep


@dataclass(frozen=True, slots=True)
class ServingStage:
    """One pipeline stage of a serving step: its bound blocks in order and its layers."""

    stage: int
    blocks: tuple[BoundBlock, ...]
    layers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ServingProgram:
    """A serving step bound to integers: per-stage blocks, the workload, the activation bytes
    one micro-batch sends between stages."""

    workload: Workload
    config: ServingConfig
    step: ServingStep
    stages: tuple[ServingStage, ...]
    blocks: dict[str, BoundBlock]
    boundary_bytes: int

    @property
    def model(self) -> ModelSpec:
        return self.workload.model


def _parallel(model: ModelSpec, config: ServingConfig, step: ServingStep) -> ParallelConfig:
    return ParallelConfig(
        dp=config.dp,
        tp=config.tp,
        pp=config.pp,
        ep=config.ep,
        micro_batch=config.batch // config.dp,
        global_batch=config.batch,
        seq_len=step.new_tokens,
        dropout=False,
        precision=Precision(config.precision),
    )


def lower_step(model: ModelSpec, config: ServingConfig, step: ServingStep) -> ServingProgram:
    """The per-stage instructions of one serving step (forward only, exact integers)."""
    expect(model, ModelSpec, "model", "get_flavor('llama3-8b') or load_model(path)")
    expect(config, ServingConfig, "config", "ServingConfig(phase=…, batch=…, …)")
    expect(step, ServingStep, "step", "one of config.steps()")
    if config.pp > model.layers:  # serving engines give every pipeline stage a layer
        raise ConfigError(
            f"`pp` must be at most the model's layers ({model.layers} for {model.name!r}): every "
            f"serving pipeline stage holds at least one layer, but got pp={config.pp}"
        )
    base = make_workload(model, _parallel(model, config, step))
    options = BlockOptions(
        "fused", causal=True, dropout=False,
        kv_cache_bytes=config.kv_bytes, weight_bytes=config.weight_bytes,
        absorb_latent=config.phase == Phase.DECODE,
    )  # fmt: skip
    flags = PlanFlags(sp=False, attention="fused", cp_ring=False)
    window = model.sliding_window  # a sliding layer's cache: the keys its queries can see
    context = min(step.context, window + step.new_tokens - 1) if window else step.context
    sizes = {**base.sizes, "T": step.context, "TW": context}
    workload = replace(base, options=options, flags=flags, sizes=sizes)
    structure = Structure.of(workload.model)
    kinds = ["embedding", *dict.fromkeys(workload.model.layer_blocks())]
    symbolic = {kind: symbolic_block(kind, structure, options, flags, "none") for kind in kinds}
    symbolic["head"] = symbolic_block("serving_head", structure, options, flags, "none")
    bound = {
        kind: bind_block(block, kind, workload.sizes, workload.axis_sizes)
        for kind, block in symbolic.items()
    }
    blocks = tie_embeddings(workload, bound)
    stages = []
    for stage in range(config.pp):
        chunk = chunk_blocks(workload, blocks, stage)
        stages.append(ServingStage(stage, chunk.blocks, chunk.layers))
    sizes = workload.sizes
    local_batch = sizes["B"] // (workload.axis_sizes["dp"] * workload.axis_sizes["ep"])
    boundary = local_batch * sizes["S"] * sizes["H"] * 2
    return ServingProgram(workload, config, step, tuple(stages), blocks, boundary)


# -- memory ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServingMemory:
    """Bytes one GPU of a pipeline stage holds during a step."""

    stage: int
    weight_bytes: int
    kv_cache_bytes: int
    activation_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.kv_cache_bytes + self.activation_bytes


def _caches(block: BoundBlock) -> dict[str, int]:
    """The caches a block appends to — the second operand of each ``CacheAppend``, or of each
    Mamba ``StateUpdate`` (its recurrent states) — and their bytes on one rank; their appended
    contexts or updated states (the ops' outputs) are the same memory."""
    result: dict[str, int] = {}
    for instr in block.fwd:
        if instr.kind in ("cacheappend", "stateupdate"):
            (name, size), (context, _) = instr.inputs[1], instr.outputs[0]
            result[name] = size
            result[context] = 0
    return result


def cache_bytes(block: BoundBlock) -> int:
    """Bytes of the KV caches a block holds (one rank's share)."""
    return sum(_caches(block).values())


def activation_workspace(block: BoundBlock) -> int:
    """Peak bytes of live activations while a block runs forward: a tensor lives from the
    instruction that produces it (the block input from the start) to its last reader; weights
    and caches are counted elsewhere."""
    weights = {w.name for w in block.weights}
    caches = _caches(block)
    size: dict[str, int] = {}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for index, instr in enumerate(block.fwd):
        for name, nbytes in instr.inputs:
            if name in weights or name in caches:
                continue
            size[name] = max(size.get(name, 0), nbytes)
            first.setdefault(name, 0)
            last[name] = index
        for name, nbytes in instr.outputs:
            if name in caches:
                continue
            size[name] = max(size.get(name, 0), nbytes)
            first.setdefault(name, index)
            last.setdefault(name, index)
    end = len(block.fwd)
    live = [0] * (end + 1)
    for name, nbytes in size.items():
        for index in range(first[name], last[name] + 1):
            live[index] += nbytes
    return max(live)


def serving_memory(program: ServingProgram) -> list[ServingMemory]:
    """Weights, KV cache and activation workspace per GPU of each pipeline stage."""
    expect(program, ServingProgram, "program", "lower_step(model, config, step)")
    config = program.config
    result = []
    for stage in program.stages:
        weights = sum(
            w.elements * (config.weight_bytes if is_layer_block(block.kind) else 2)
            for block in stage.blocks
            for w in block.weights
        )
        kv = sum(cache_bytes(block) for block in stage.blocks)
        workspace = max(activation_workspace(block) for block in stage.blocks)
        result.append(ServingMemory(stage.stage, weights, kv, workspace))
    return result


def kv_cache_bytes_per_token(model: ModelSpec, kv_bytes: int) -> int:
    """The closed form: keys and values of every layer, ``2·layers·kv_heads·head_dim·bytes``;
    latent attention caches its compressed latent and RoPE key,
    ``layers·(kv_lora_rank + qk_rope_head_dim)·bytes``."""
    expect(model, ModelSpec, "model", "get_flavor('llama3-8b') or load_model(path)")
    if isinstance(kv_bytes, bool) or not isinstance(kv_bytes, int) or kv_bytes < 1:
        raise ConfigError(f"`kv_bytes` must be a positive int (bytes per element): {kv_bytes!r}")
    if model.is_mla:
        return model.layers * (model.kv_lora_rank + model.qk_rope_head_dim) * kv_bytes
    return 2 * model.layers * model.kv_heads * model.head_dim * kv_bytes


def max_batch(
    model: ModelSpec, config: ServingConfig, capacity_bytes: int, steps: Sequence[ServingStep] = ()
) -> int:
    """The largest ``batch`` (a multiple of ``dp``) whose every step fits ``capacity_bytes`` on
    every GPU (0 when one sequence per dp rank does not), at most
    :data:`~stage_core.limits.MAX_GLOBAL_BATCH`. Memory is affine in the batch per dp rank, so
    two lowerings give the slope; the answer is then checked by lowering it."""
    expect(config, ServingConfig, "config", "ServingConfig(phase=…, batch=…, …)")
    if isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, int):
        raise ConfigError(f"`capacity_bytes` must be an int, but got {capacity_bytes!r}")
    chosen = tuple(steps) or config.steps()

    def peak(per_rank: int) -> int:
        sized = replace(config, batch=per_rank * config.dp)
        return max(
            m.total_bytes for step in chosen for m in serving_memory(lower_step(model, sized, step))
        )

    one, two = peak(1), peak(2)
    if one > capacity_bytes:
        return 0
    slope = max(1, two - one)
    # at most the size limit's batch (stage_core.limits): beyond it no step is lowered
    per_rank = min(max(1, 1 + (capacity_bytes - one) // slope), MAX_GLOBAL_BATCH // config.dp)
    while per_rank > 1 and peak(per_rank) > capacity_bytes:
        per_rank -= 1
    return per_rank * config.dp
