"""Serving metrics from the analytical model: prefill, decode and a steady serving state.

A serving step (:func:`stage_core.serving.lower_step`) is timed block by block with the same
two-stream engine as training (:func:`~stage_explore.analytical.blocktime.time_block`, element-
wise chains fused): compute at the accelerator's roofline, collectives by the backend's
collective model over the network dims their group spans. Decode reads every weight and the
whole KV cache to produce one token per sequence, so its kernels sit below the roofline's ridge
point: ``memory_bound_fraction`` is the share of compute time in kernels whose bytes per FLOP
exceed the accelerator's (peak bandwidth over peak FLOP/s).

- **prefill** (:func:`evaluate_prefill`): ``time_to_first_token_s`` is the latency of the
  prompt's steps (one per chunk) through every pipeline stage.
- **decode** (:func:`evaluate_decode`): ``time_per_output_token_s`` is one step's latency, or
  the pipeline's cycle when ``pp`` micro-batches are in flight; tokens/s count ``pp·batch``
  tokens per cycle.
- **serve** (:func:`evaluate_serve`): a steady state of ``batch`` running sequences with
  prompts of ``prompt_len`` and ``output_len`` generated tokens. Co-located, every decode step
  also pays for the prefills of the ``batch/output_len`` requests that replace the finished
  ones (vLLM's and SGLang's default scheduling, prefill first), prompts batched up to
  ``prefill_tokens_per_step`` tokens per step (at least one prompt); disaggregated, a prefill pool
  and a decode pool run apart, the KV cache of each prompt crosses the scale-out network, and
  the slower pool sets the request rate.

Memory is what a GPU holds: weights, KV cache, activation workspace; a point fits when that is
at most ``memory_utilization`` of the accelerator (default 0.9, vLLM's
``gpu_memory_utilization`` default, which leaves the rest to the CUDA context, NCCL and the
allocator).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from stage_core.arguments import expect
from stage_core.errors import ConfigError, InfeasibleError
from stage_core.lower.bind import Instr
from stage_core.lower.emit import GroupTable
from stage_core.models.spec import ModelSpec
from stage_core.serving import (
    ServingConfig,
    ServingProgram,
    kv_cache_bytes_per_token,
    lower_step,
    max_batch,
    serving_memory,
)
from stage_core.serving.config import MAX_CONTEXT, Phase, ServingStep
from stage_core.serving.program import ServingStage
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import fuse_elementwise, time_block
from stage_explore.analytical.collectives import (
    alpha_beta_collective_s,
    alpha_beta_point_to_point_s,
    group_span,
)
from stage_explore.analytical.gemm_tiles import ELEMENT_BYTES
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.system import System
from stage_explore.system.placement import PLACEMENT_KEY, placement_extra

#: Prompt tokens one step prefills at most: TensorRT-LLM's default ``max_num_tokens`` (8192,
#: ``tensorrt_llm/llmapi/llm_args.py``); a steady server batches short prompts up to it.
DEFAULT_PREFILL_TOKENS_PER_STEP = 8192
#: vLLM's default ``gpu_memory_utilization`` (docs.vllm.ai, engine arguments): the share of GPU
#: memory the engine's tensors may take.
DEFAULT_MEMORY_UTILIZATION = 0.9
#: Bytes up to which an inference engine runs a tensor-parallel all-reduce inside one NVLink
#: domain on its own kernels, not NCCL (so it pays no NCCL per-call cost,
#: :func:`~stage_explore.analytical.collectives.call_overhead_s`): vLLM's ``CustomAllreduce``
#: ``max_size=8192 * 1024`` (``vllm/distributed/device_communicators/custom_all_reduce.py``;
#: larger tensors fall back to NCCL); TensorRT-LLM's AUTO strategy picks its ONESHOT / TWOSHOT
#: kernels up to its workspace, 8 MB for tp > 2 (16 MB for tp 2, not modelled), and NCCL beyond
#: (``cpp/tensorrt_llm/common/customAllReduceUtils.h``: ``getMaxRequiredWorkspaceSize``,
#: ``AllReduceBestStrategyTableSM90``, e.g. tp 8 / hidden 8192: one- or two-shot up to 256
#: tokens, NCCL from 512, i.e. from 8 MiB).
CUSTOM_ALL_REDUCE_MAX_BYTES = 8 * 2**20


@dataclass(frozen=True, slots=True)
class StepTiming:
    """One step through the pipeline: seconds per stage, its breakdown, and FLOPs/bytes."""

    stage_s: tuple[float, ...]
    transfer_s: float
    breakdown: Mapping[str, float]
    memory_bound_fraction: float
    flops: int

    @property
    def latency_s(self) -> float:
        return sum(self.stage_s) + self.transfer_s * (len(self.stage_s) - 1)

    @property
    def cycle_s(self) -> float:
        """Seconds between two micro-batches leaving the last stage with ``pp`` in flight."""
        return max(self.latency_s, len(self.stage_s) * (max(self.stage_s) + self.transfer_s))


@dataclass(frozen=True, slots=True)
class ServingEvaluation:
    """What a serving configuration delivers (``stage eval --phase … --json`` keys)."""

    phase: str
    feasible: bool
    reason: str
    num_gpus: int
    batch: int
    time_to_first_token_s: float | None
    time_per_output_token_s: float | None
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_node: float
    peak_memory_bytes: int
    weight_bytes: int
    kv_cache_bytes: int
    activation_bytes: int
    memory_capacity_bytes: int
    max_batch: int
    memory_bound_fraction: float
    breakdown: Mapping[str, float] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        result = asdict(self)
        result["breakdown"] = dict(self.breakdown)
        result["extra"] = dict(self.extra)
        return result


def _compute_timer(
    system: System, program: ServingProgram, stage: ServingStage
) -> Callable[[Instr], float]:
    """Seconds of a compute instruction: the accelerator's kernel model (GEMMs by shape, FP8
    only on linear layers, attention over the ``T`` cached keys) as training uses it, else the
    roofline. FP8 weights are read at one byte: the GEMM's shape is recovered as if its weight
    were 16-bit (:func:`~stage_explore.analytical.gemm_tiles.gemm_shape` assumes so) and the
    memory bound takes the bytes really moved."""
    accelerator = system.accelerator
    dtype = accelerator.precision_dtype(program.config.precision)
    kernels = accelerator.kernels
    if kernels is None:
        return lambda i: accelerator.compute_time_s(i.flops, i.bytes_read + i.bytes_written, dtype)
    weights = frozenset(w.name for block in stage.blocks for w in block.weights)
    sizes = program.workload.sizes
    # Serving engines run every expert of an MoE layer's projection in one fused kernel (vLLM's
    # and SGLang's fused_moe: one Triton launch over the expert-sorted token blocks,
    # vllm/model_executor/layers/fused_moe/fused_moe.py invoke_fused_moe_kernel), not training's
    # one GEMM per expert: no per-expert cost (KernelModel.grouped_gemm_group_s).
    kernels = replace(kernels, grouped_gemm_group_s=0.0)
    kernel_timer = KernelTimer(
        accelerator, kernels, dtype, weights, keys=sizes["T"], head_dim=sizes["D"],
        causal=sizes["S"] > 1,
    )  # fmt: skip

    def timer(instr: Instr) -> float:
        # Decode's absorbed latent attention (FlashMLA) is a fused tensor-core attention kernel
        # like FlashAttention's: FlashMLA reaches 580-660 TFLOP/s compute-bound and 3,000 GB/s
        # memory-bound on H800 SXM5 (github.com/deepseek-ai/FlashMLA, README), i.e. 0.59-0.67 of
        # the BF16 peak, where the attention model's forward fraction is 0.64 (not the CUDA
        # cores the kernel model gives an unknown kind).
        if instr.kind == "latentattention":
            return kernel_timer(replace(instr, kind="attention"))
        return kernel_timer(instr)

    widen = ELEMENT_BYTES // program.config.weight_bytes
    if widen == 1:
        return timer
    bandwidth = accelerator.achieved_memory_bandwidth_bytes_per_s

    def compute_s(instr: Instr) -> float:
        inputs = tuple((n, b * widen if n in weights else b) for n, b in instr.inputs)
        busy = timer(replace(instr, bytes_read=0, bytes_written=0, inputs=inputs))
        return max(busy, (instr.bytes_read + instr.bytes_written) / bandwidth)

    return compute_s


def _timers(
    backend: AnalyticalBackend, system: System, program: ServingProgram, stage: ServingStage
) -> tuple[Callable[[Instr], float], Callable[[Instr], float]]:
    """Per-instruction seconds on a rank of ``stage``: compute by :func:`_compute_timer`,
    collectives over the rank's groups on the backend's achieved network bandwidth."""
    network = backend.achieved_network(system)
    table = GroupTable(program.workload.mesh)
    rank = program.workload.mesh.rank_of({"pp": stage.stage})
    compute_s = _compute_timer(system, program, stage)

    def comm_s(instr: Instr) -> float:
        assert instr.collective is not None
        group = table.group(rank, instr.axes)
        custom = (  # the engine's own all-reduce kernels (CUSTOM_ALL_REDUCE_MAX_BYTES)
            instr.collective is CollectiveKind.ALL_REDUCE
            and instr.comm_bytes <= CUSTOM_ALL_REDUCE_MAX_BYTES
            and len(group_span(network.dim_sizes, group).dims) <= 1
        )
        return alpha_beta_collective_s(
            network, instr.collective, instr.comm_bytes, group, nccl=not custom
        )

    return compute_s, comm_s


def interleave_two_batches(instrs: tuple[Instr, ...]) -> tuple[Instr, ...]:
    """Two copies of a block's instructions (two micro-batches), interleaved as a two-batch
    overlap schedule runs them: the block is cut after each collective into segments, and each
    segment runs for the first micro-batch and then for the second, so one micro-batch's
    collective (its MoE all-to-all, its TP all-reduce) runs on the communication stream while
    the other computes (DeepSeek-V3/R1 inference system overview, "dual micro-batch overlap";
    SGLang's two-batch overlap)."""
    segments: list[list[int]] = [[]]
    for index, instr in enumerate(instrs):
        segments[-1].append(index)
        if instr.is_comm or instr.kind == "ring":
            segments.append([])
    order = [(copy, index) for segment in segments for copy in (0, 1) for index in segment]
    position = {key: new for new, key in enumerate(order)}
    return tuple(
        replace(instrs[index], deps=tuple(position[(copy, dep)] for dep in instrs[index].deps))
        for copy, index in order
    )


def time_step(
    backend: AnalyticalBackend, system: System, program: ServingProgram, overlap: bool = False
) -> StepTiming:
    """Latency of one step through every stage (blocks in order, two streams each); with
    ``overlap``, ``program`` is one of two micro-batches run as :func:`interleave_two_batches`."""
    accelerator = system.accelerator
    dtype = accelerator.precision_dtype(program.config.precision)
    ridge = accelerator.memory_bandwidth_bytes_per_s / accelerator.peak(dtype)  # bytes per FLOP
    stage_s: list[float] = []
    breakdown: dict[str, float] = {}
    bound_s = total_compute_s = 0.0
    flops = 0
    for stage in program.stages:
        compute_s, comm_s = _timers(backend, system, program, stage)
        seconds = 0.0
        for block in stage.blocks:
            instrs = fuse_elementwise(block.fwd)
            if overlap:
                instrs = interleave_two_batches(instrs)
            timing = time_block(instrs, compute_s, comm_s)
            seconds += timing.duration_s
            flops += timing.flops
            for instr in instrs:
                if instr.is_comm or instr.kind == "ring":
                    continue
                spent = compute_s(instr)
                total_compute_s += spent
                if instr.bytes_read + instr.bytes_written > ridge * instr.flops:
                    bound_s += spent
            if stage.stage == len(program.stages) - 1 or len(program.stages) == 1:
                breakdown["compute"] = breakdown.get("compute", 0.0) + timing.compute_s
                for label, exposed in timing.exposed_s.items():
                    key = f"exposed_{label}"
                    breakdown[key] = breakdown.get(key, 0.0) + exposed
        stage_s.append(seconds)
    transfer = 0.0
    if len(program.stages) > 1:
        mesh = program.workload.mesh
        first, second = mesh.rank_of({"pp": 0}), mesh.rank_of({"pp": 1})
        network = backend.achieved_network(system)
        transfer = alpha_beta_point_to_point_s(network, first, second, program.boundary_bytes)
    if len(stage_s) > 1:  # the breakdown above is the last stage's; the rest is upstream
        breakdown["upstream_stages"] = sum(stage_s[:-1])
        breakdown["pipeline_p2p"] = transfer * (len(stage_s) - 1)
    fraction = bound_s / total_compute_s if total_compute_s else 0.0
    return StepTiming(tuple(stage_s), transfer, breakdown, fraction, flops)


# -- the three phases ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Lowered:
    programs: tuple[ServingProgram, ...]
    memory: tuple[int, int, int, int]  # peak, weights, kv, activations (the peak stage's)
    #: What is timed: ``programs``, or with two-batch overlap one half-batch micro-batch each
    timed: tuple[ServingProgram, ...]
    overlap: bool

    def time(self, backend: AnalyticalBackend, system: System) -> list[StepTiming]:
        return [time_step(backend, system, p, self.overlap) for p in self.timed]


def _lower(model: ModelSpec, config: ServingConfig, steps: tuple[ServingStep, ...]) -> _Lowered:
    programs = tuple(lower_step(model, config, step) for step in steps)
    worst = max(
        (m for program in programs for m in serving_memory(program)), key=lambda m: m.total_bytes
    )
    memory = (worst.total_bytes, worst.weight_bytes, worst.kv_cache_bytes, worst.activation_bytes)
    timed = programs
    if config.overlaps:  # the same memory (the sequences and their caches), two half batches
        half = replace(config, batch=config.batch // 2)
        timed = tuple(lower_step(model, half, step) for step in steps)
    return _Lowered(programs, memory, timed, config.overlaps)


def _usable(system: System, utilization: float) -> int:
    number = isinstance(utilization, int | float) and not isinstance(utilization, bool)
    if not number or not 0 < utilization <= 1:
        raise ConfigError(f"`memory_utilization` must be in (0, 1], but got {utilization!r}")
    return int(system.accelerator.memory_bytes * utilization)


def _result(
    phase: str,
    config: ServingConfig,
    system: System,
    lowered: _Lowered,
    usable: int,
    model: ModelSpec,
    *,
    ttft: float | None,
    tpot: float | None,
    tokens_per_s: float,
    timing: StepTiming,
    extra: Mapping[str, Any] | None = None,
) -> ServingEvaluation:
    gpus = config.gpus
    peak, weights, kv, activations = lowered.memory
    fits = peak <= usable
    reason = "" if fits else (
        f"out of memory: {peak / 2**30:.1f} GiB per GPU (weights {weights / 2**30:.1f}, KV cache "
        f"{kv / 2**30:.1f}, activations {activations / 2**30:.2f}) exceed the usable "
        f"{usable / 2**30:.1f} GiB"
    )  # fmt: skip
    per_node = min(gpus, system.network[0].size) if system.network else gpus
    largest = max_batch(model, config, usable, config.steps())
    return ServingEvaluation(
        phase=phase, feasible=fits, reason=reason, num_gpus=gpus, batch=config.batch,
        time_to_first_token_s=ttft, time_per_output_token_s=tpot, tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=tokens_per_s / gpus,
        tokens_per_s_per_node=tokens_per_s / gpus * per_node,
        peak_memory_bytes=peak, weight_bytes=weights, kv_cache_bytes=kv,
        activation_bytes=activations, memory_capacity_bytes=system.accelerator.memory_bytes,
        max_batch=largest, memory_bound_fraction=timing.memory_bound_fraction,
        breakdown=dict(timing.breakdown),
        extra={
            **(extra or {}), **placement_extra(system, lowered.programs[0].workload.mesh),
            **_overlap_note(config),
        },
    )  # fmt: skip


def _overlap_note(config: ServingConfig) -> dict[str, str]:
    """``{"two_batch_overlap": why}`` when the overlap was asked for but the step runs without
    it (an odd number of sequences per data-parallel rank cannot be halved; the command line
    refuses it, inference studies' decode curves rely on it; s24 review: it said nothing)."""
    if not config.two_batch_overlap or config.overlaps:
        return {}
    per_rank = config.batch // config.dp
    return {
        "two_batch_overlap": (
            f"not applied: {per_rank} sequences per data-parallel rank cannot be halved into "
            "two micro-batches; the step runs as one"
        )
    }


def _check_arguments(backend: object, model: object, config: object, system: object) -> None:
    """One-line errors for arguments of the wrong kind (a flavor or preset name, a dict: an
    ``AttributeError`` deep inside before, s23 review)."""
    expect(backend, AnalyticalBackend, "backend", "AnalyticalBackend(framework=…)")
    expect(model, ModelSpec, "model", "get_flavor('llama3-8b') or load_model(path)")
    expect(config, ServingConfig, "config", "ServingConfig(phase=…, batch=…, …)")
    expect(system, System, "system", "load_system('h100-80gb') or a system file")


def _check_phase(config: ServingConfig, phase: Phase) -> None:
    """A one-line error when ``config`` is not a ``phase`` step, or is a decode step given a
    prompt (a decode step reads only its ``context_len``: a prompt would be silently ignored)."""
    if config.phase != phase:
        raise ConfigError(
            f"evaluate_{phase} times a {phase} step: expected a ServingConfig with "
            f"phase='{phase}', but got phase='{config.phase}'"
        )
    if phase == Phase.DECODE and (config.prompt_len or config.chunk):
        raise ConfigError(
            "a decode step generates one token over `context_len` cached tokens and reads no "
            f"`prompt_len` or `chunk`, but got prompt_len={config.prompt_len}, "
            f"chunk={config.chunk} (set context_len instead)"
        )


def _check_gpus(config: ServingConfig, system: System) -> None:
    if config.gpus > system.max_gpus:
        raise InfeasibleError(f"{config.gpus} GPUs exceed the system's {system.max_gpus}")


def evaluate_prefill(
    backend: AnalyticalBackend,
    model: ModelSpec,
    config: ServingConfig,
    system: System,
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION,
) -> ServingEvaluation:
    """Time to first token of ``batch`` prompts of ``prompt_len`` (chunked when ``chunk``)."""
    _check_arguments(backend, model, config, system)
    _check_phase(config, Phase.PREFILL)
    _check_gpus(config, system)
    steps = config.steps()
    lowered = _lower(model, config, steps)
    timings = lowered.time(backend, system)
    ttft = sum(t.latency_s for t in timings)
    cycle = sum(t.cycle_s for t in timings)
    tokens = config.batch * config.prompt_len * config.pp
    combined = _combine(timings)
    return _result(
        "prefill", config, system, lowered, _usable(system, memory_utilization), model,
        ttft=ttft, tpot=None, tokens_per_s=tokens / cycle, timing=combined,
        extra={"prefill_steps": len(steps), "flops": combined.flops},
    )  # fmt: skip


def evaluate_decode(
    backend: AnalyticalBackend,
    model: ModelSpec,
    config: ServingConfig,
    system: System,
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION,
) -> ServingEvaluation:
    """One decode step of ``batch`` sequences over ``context_len`` cached tokens."""
    _check_arguments(backend, model, config, system)
    _check_phase(config, Phase.DECODE)
    _check_gpus(config, system)
    lowered = _lower(model, config, config.steps())
    timing = lowered.time(backend, system)[0]
    tpot = timing.cycle_s
    return _result(
        "decode", config, system, lowered, _usable(system, memory_utilization), model,
        ttft=None, tpot=tpot, tokens_per_s=config.batch * config.pp / tpot, timing=timing,
        extra={"flops": timing.flops},
    )  # fmt: skip


def _combine(timings: list[StepTiming]) -> StepTiming:
    """Several steps' timings as one: summed stage times and breakdowns, time-weighted
    memory-bound fraction."""
    stages = tuple(sum(t.stage_s[i] for t in timings) for i in range(len(timings[0].stage_s)))
    breakdown: dict[str, float] = {}
    for t in timings:
        for key, value in t.breakdown.items():
            breakdown[key] = breakdown.get(key, 0.0) + value
    total = sum(t.latency_s for t in timings)
    fraction = sum(t.memory_bound_fraction * t.latency_s for t in timings) / total if total else 0.0
    transfer = sum(t.transfer_s for t in timings)
    return StepTiming(stages, transfer, breakdown, fraction, sum(t.flops for t in timings))


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestMix:
    """A steady serving load: prompt and output lengths per request (means)."""

    prompt_len: int
    output_len: int

    def __post_init__(self) -> None:
        for name in ("prompt_len", "output_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{name}` must be a positive int, but got {name}={value!r}")
        if self.prompt_len + self.output_len > MAX_CONTEXT:  # as given, not context_len
            raise ConfigError(
                f"a request's `prompt_len` + `output_len` must be at most {MAX_CONTEXT} = 2^24 "
                f"tokens (its sequence at the last token), but got prompt_len={self.prompt_len}"
                f" + output_len={self.output_len}"
            )


def _whole(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _check_pools(
    prefill: ServingConfig | None, prefill_instances: object, decode_instances: object,
    prefill_tokens_per_step: object,
) -> None:  # fmt: skip
    """One-line errors for pool arguments that were ignored or misread (s24 review: co-located
    ``decode_instances=3`` gave one instance's figures, ``prefill_instances=2`` without a
    ``prefill`` layout (or a layout with 0 instances) a co-located state, ``decode_instances``
    of 0 a rate of 0, and a ``prefill_tokens_per_step`` of '8192' a TypeError)."""
    if not _whole(prefill_tokens_per_step, 1):
        raise ConfigError(
            f"`prefill_tokens_per_step` must be an int ≥ 1, but got {prefill_tokens_per_step!r}"
        )
    if not _whole(prefill_instances, 0) or not _whole(decode_instances, 1):
        raise ConfigError(
            "`prefill_instances` must be an int ≥ 0 (0: co-located) and `decode_instances` an "
            f"int ≥ 1, but got (prefill_instances={prefill_instances!r}, "
            f"decode_instances={decode_instances!r})"
        )
    if (prefill is None) != (prefill_instances == 0):
        raise ConfigError(
            "a disaggregated state needs both `prefill` (the prefill instances' layout) and "
            f"`prefill_instances` ≥ 1, but got prefill={'None' if prefill is None else 'a layout'}"
            f" with prefill_instances={prefill_instances}"
        )
    if prefill is None and decode_instances != 1:
        raise ConfigError(
            "`decode_instances` sizes a disaggregated decode pool; co-located, each instance "
            "serves its own requests, so one instance's figures per GPU hold for any number, "
            f"but got decode_instances={decode_instances} with prefill_instances=0"
        )


def evaluate_serve(
    backend: AnalyticalBackend,
    model: ModelSpec,
    config: ServingConfig,
    system: System,
    mix: RequestMix,
    *,
    prefill: ServingConfig | None = None,
    prefill_instances: int = 0,
    decode_instances: int = 1,
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION,
    prefill_tokens_per_step: int = DEFAULT_PREFILL_TOKENS_PER_STEP,
) -> ServingEvaluation:
    """Steady serving of ``config.batch`` running sequences (module docstring). With
    ``prefill`` and ``prefill_instances`` the prefill runs on its own pool (disaggregated)."""
    _check_arguments(backend, model, config, system)
    expect(mix, RequestMix, "mix", "RequestMix(prompt_len=…, output_len=…)")
    if prefill is not None:
        expect(prefill, ServingConfig, "prefill", "ServingConfig(phase='prefill', …)")
    decode_cfg = replace(
        config, phase=Phase.DECODE, context_len=mix.prompt_len + mix.output_len // 2,
        prompt_len=0, chunk=0,
    )  # fmt: skip
    _check_pools(prefill, prefill_instances, decode_instances, prefill_tokens_per_step)
    pool = prefill or config
    prompts = max(1, prefill_tokens_per_step // mix.prompt_len)  # per dp rank and step
    one_prompt = replace(
        pool, phase=Phase.PREFILL, batch=pool.dp * prompts, prompt_len=mix.prompt_len,
        context_len=0,
    )  # fmt: skip
    decode = evaluate_decode(backend, model, decode_cfg, system, memory_utilization)
    first = evaluate_prefill(backend, model, one_prompt, system, memory_utilization)
    assert decode.time_per_output_token_s is not None and first.time_to_first_token_s is not None
    step_s, ttft = decode.time_per_output_token_s, first.time_to_first_token_s
    in_flight = config.batch * config.pp
    prompts_per_s = first.tokens_per_s / mix.prompt_len  # one prefill instance, saturated
    mode_split = prefill is not None and prefill_instances > 0
    if not mode_split:
        # Each decode step adds the prefills of the requests that replace the finished ones.
        prefill_s = in_flight / mix.output_len / prompts_per_s
        cycle = step_s + prefill_s
        rate = in_flight / mix.output_len / cycle  # requests per second per instance
        gpus = config.gpus
        tpot = cycle
        extra: dict[str, Any] = {"mode": "co-located", "prefill_share": prefill_s / cycle}
    else:
        decode_rate = decode_instances * in_flight / mix.output_len / step_s
        prefill_rate = prefill_instances * prompts_per_s
        rate = min(decode_rate, prefill_rate)
        gpus = decode_instances * config.gpus + prefill_instances * one_prompt.gpus
        kv = mix.prompt_len * kv_cache_bytes_per_token(model, config.kv_bytes)
        network = backend.achieved_network(system)
        last = len(system.network) - 1
        ttft += kv / network.network[last].bandwidth_bytes_per_s + network.network[last].latency_s
        tpot = step_s
        extra = {
            "mode": "disaggregated", "prefill_instances": prefill_instances,
            "decode_instances": decode_instances, "bottleneck": (
                "prefill" if prefill_rate < decode_rate else "decode"),
            "kv_transfer_bytes_per_request": kv,
        }  # fmt: skip
    tokens_per_s = rate * mix.output_len
    per_node = min(config.gpus, system.network[0].size) if system.network else config.gpus
    fits = decode.feasible and first.feasible
    return replace(
        decode, phase="serve", feasible=fits, reason=decode.reason or first.reason,
        num_gpus=gpus, time_to_first_token_s=ttft, time_per_output_token_s=tpot,
        tokens_per_s=tokens_per_s, tokens_per_s_per_gpu=tokens_per_s / gpus,
        tokens_per_s_per_node=tokens_per_s / gpus * per_node,
        extra={
            **extra, "requests_per_s": rate, **pool_placements(decode, first, mode_split),
            **_overlap_note(decode_cfg),
        },
    )  # fmt: skip


def pool_placements(
    decode: ServingEvaluation, prefill: ServingEvaluation, disaggregated: bool
) -> dict[str, str]:
    """One ``placement`` entry (or none) for a serving state: the decode instance's note, or,
    disaggregated, each pool's note named by its pool."""
    notes = [decode.extra.get(PLACEMENT_KEY), prefill.extra.get(PLACEMENT_KEY)]
    if not disaggregated:
        notes[1] = None  # the prefills run on the decode instance: its mesh, its note
    pools = ("decode pool", "prefill pool")
    labelled = [
        f"{pool}: {note}" if disaggregated else str(note)
        for pool, note in zip(pools, notes, strict=True)
        if note
    ]
    return {PLACEMENT_KEY: "; ".join(labelled)} if labelled else {}
