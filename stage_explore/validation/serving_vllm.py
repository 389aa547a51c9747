"""How vLLM's V1 engine runs an offline ``vllm bench throughput`` of uniform requests.

The serving validator's steady state (:func:`~stage_explore.analytical.serving.evaluate_serve`)
keeps ``batch`` sequences running at the average context ``isl + osl/2``. An offline vLLM
benchmark is a *wave* instead: ``num_prompts`` requests are queued at once, the scheduler admits
up to ``max_num_seqs`` of them, all of the same lengths, and their KV cache grows together to
``isl + osl`` tokens. vLLM V1 reserves nothing ahead, so when the cache cannot hold the wave at
full length it preempts. :func:`simulate_wave` replays V1's scheduler on groups of identical
requests (read from vllm-project/vllm, the commits named):

- **The step** (``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule`` at b4622cf9): the
  running requests first, in admission order, each its remaining tokens (1 in decode) within
  the step's token budget ``max_num_batched_tokens`` (chunked prefill: a prompt larger than the
  budget left is cut); then, only if no request was preempted in this step (``if not
  preempted_reqs``), waiting requests from the front while fewer than ``max_num_seqs`` run,
  budget is left and ``allocate_slots`` finds their blocks.
- **Blocks**: a request holds ``ceil(tokens / block_size)`` blocks of the cache (block size 16,
  vLLM's default); ``allocate_slots`` returns None when the free blocks do not cover the step's
  new ones (no watermark or reservation in V1).
- **Preemption**: on that failure the *newest* running request is preempted (``preempted_req =
  self.running.pop()``, FCFS policy), its blocks freed and ``num_computed_tokens`` reset to 0,
  and it goes back to the front of the waiting queue; resumed, it recomputes its prompt and the
  tokens it had generated as a prefill (``num_new_tokens = request.num_tokens -
  num_computed_tokens``), then decodes the rest.
- **No prefix-cache hit on resumption**: freed blocks join the free queue's tail, tail blocks
  first, and new blocks are taken from its head (``vllm/v1/core/single_type_kv_cache_manager.py``
  ``free`` at 002f3491: 'Free blocks in reverse order so that the tail blocks are freed first';
  ``block_pool``'s free queue). A preempted request waits until running requests finish; while
  they grow into the whole cache, every free block — its own — is taken and its hash evicted
  before it is resumed, so its recompute is charged in full. (In a uniform wave the preempted
  requests resume only when the survivors finish together, after the survivors have filled the
  cache: exact there; with mixed lengths it is an upper bound on the recompute.)
- **The KV cache**: ``gpu_memory_utilization`` (0.9) of the GPU's memory less the weights and
  the peak activation memory of the profiling forward of ``max_num_batched_tokens`` tokens
  (``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``), in blocks, the smallest over
  the pipeline stages (:func:`kv_blocks`). Not modelled: CUDA/HIP-graph memory and the
  communication library's buffers (a few GiB at most; none is stated per row).
- **The step budget** (:func:`default_max_num_batched_tokens`): ``vllm bench throughput``
  builds an ``LLM`` (usage context ``LLM_CLASS``), whose default ``max_num_batched_tokens`` is
  16,384 on a GPU of at least 70 GiB that is not an A100, else 8,192
  (``vllm/engine/arg_utils.py`` at 99d7eb5d, ``EngineArgs`` batch defaults: 'For GPUs like H100
  and MI300x, use larger default values').

Each step is timed by the analytical model: the decode part at the decoding requests' batch and
mean context (piecewise-linear between evaluated decode steps), plus the prefill tokens at the
per-token time of a ``max_num_batched_tokens`` prefill step of prompts of that length.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from stage_core.errors import ConfigError
from stage_core.models import ModelSpec
from stage_core.serving import Phase, ServingConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.serving import evaluate_decode, evaluate_prefill
from stage_explore.system import System
from stage_explore.validation.serving_trtllm import kv_footprint

#: vLLM's default KV-cache block size in tokens (``CacheConfig.block_size`` 16 on CUDA / ROCm).
BLOCK_SIZE = 16
#: ``LLM_CLASS`` defaults of ``max_num_batched_tokens`` (``vllm/engine/arg_utils.py`` at
#: 99d7eb5d): 16,384 on a GPU of at least 70 GiB that is not an A100, else 8,192.
LARGE_GPU_BYTES = 70 * 2**30
LARGE_GPU_TOKENS = 16384
SMALL_GPU_TOKENS = 8192
#: Engines the serving rows name (the ``engine`` cell); only vLLM V1 is replayed here.
ENGINES = ("trtllm", "vllm-v1")

#: A step's time: (decoding requests, their mean context, prefill tokens, the prefills' mean
#: sequence length) -> seconds.
StepTime = Callable[[int, float, int, float], float]


def engine_cell(cell: str | None, line: int) -> str:
    """The row's ``engine`` cell: one of :data:`ENGINES`, or '' (empty or absent)."""
    text = (cell or "").strip()
    if text and text not in ENGINES:
        raise ConfigError(
            f"serving_runs.csv line {line}: `engine` must be one of {ENGINES} or empty, got "
            f"{text!r}"
        )
    return text


def default_max_num_batched_tokens(system: System) -> int:
    """vLLM's ``LLM_CLASS`` default step budget on ``system``'s accelerator (module docstring)."""
    accelerator = system.accelerator
    large = accelerator.memory_bytes >= LARGE_GPU_BYTES
    if large and "a100" not in accelerator.name.lower():
        return LARGE_GPU_TOKENS
    return SMALL_GPU_TOKENS


def kv_blocks(
    model: ModelSpec, base: ServingConfig, usable_bytes: int, budget: int, block_size: int
) -> int:
    """KV-cache blocks vLLM allocates: on every GPU, ``usable_bytes`` less the weights and the
    activation workspace of one prefill step of ``budget`` tokens, over one block's bytes (from
    two lowerings at ``base.context_len``); the smallest over the pipeline stages. 0 when none."""
    blocks = math.inf
    for held, per_sequence in kv_footprint(model, base, budget):
        per_token = per_sequence / base.steps()[0].context
        free = max(usable_bytes - held, 0)
        if per_token > 0:
            blocks = min(blocks, free // (per_token * block_size))
    return 0 if math.isinf(blocks) else int(blocks)


@dataclass(slots=True)
class _Group:
    """``count`` requests in the same state: prompt, tokens computed, tokens generated."""

    count: int
    prompt: int
    computed: int
    generated: int

    @property
    def tokens(self) -> int:
        return self.prompt + self.generated

    def split(self, count: int) -> _Group:
        """Take ``count`` of the requests away as a group of their own."""
        self.count -= count
        return _Group(count, self.prompt, self.computed, self.generated)


@dataclass(frozen=True, slots=True)
class Wave:
    """A replayed offline run: its duration, steps, preemptions and tokens recomputed."""

    seconds: float
    steps: int
    preempted: int
    recomputed_tokens: int


def _blocks(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def simulate_wave(
    num_prompts: int, isl: int, osl: int, *, max_num_seqs: int, budget: int, blocks: int,
    step_time: StepTime, block_size: int = BLOCK_SIZE,
) -> Wave:  # fmt: skip
    """Replay vLLM V1's scheduler on ``num_prompts`` requests of ``isl`` prompt and ``osl``
    output tokens queued at once (module docstring)."""
    for name, value in (("num_prompts", num_prompts), ("isl", isl), ("osl", osl),
                        ("max_num_seqs", max_num_seqs), ("budget", budget),
                        ("block_size", block_size)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"`{name}` must be a positive int, but got {value!r}")
    if _blocks(isl + osl, block_size) > blocks:
        raise ConfigError(
            f"one request of {isl} + {osl} tokens needs {_blocks(isl + osl, block_size)} KV "
            f"blocks, more than the cache's {blocks}"
        )
    waiting: deque[_Group] = deque([_Group(num_prompts, isl, 0, 0)])
    running: list[_Group] = []
    free = blocks
    seconds, steps, preempted_total, recomputed = 0.0, 0, 0, 0
    while running or waiting:
        left = budget
        scheduled: list[tuple[_Group, int]] = []
        preempted = False
        index = 0
        while index < len(running) and left > 0:
            group = running[index]
            need = group.tokens - group.computed
            per = min(need, left)
            if group.count * per > left:  # the budget ends inside this group
                whole = left // per
                if whole == 0:
                    break
                running.insert(index + 1, group.split(group.count - whole))
            grow = _blocks(group.computed + per, block_size) - _blocks(group.computed, block_size)
            while grow * group.count > free:  # preempt the newest running requests
                preempted = True
                last = running[-1]
                held = _blocks(last.computed, block_size)
                deficit = grow * group.count - free
                take = min(last.count, -(-deficit // held) if held else last.count)
                if last is group:
                    take = min(group.count, -(-deficit // (held + grow)))
                gone = last.split(take)
                free += take * held
                preempted_total += take
                recomputed += take * gone.computed
                if gone.generated or gone.computed:
                    waiting.appendleft(_Group(take, gone.prompt, 0, gone.generated))
                else:
                    waiting.appendleft(gone)
                if last.count == 0:
                    running.pop()
                if group.count == 0:
                    break
            if group.count == 0:
                break
            free -= grow * group.count
            left -= group.count * per
            scheduled.append((group, per))
            index += 1
        if not preempted:
            while waiting and left > 0 and len_running(running) < max_num_seqs:
                head = waiting[0]
                need = head.tokens - head.computed
                per = min(need, left)
                room = _blocks(head.computed + per, block_size)
                admit = min(head.count, max_num_seqs - len_running(running), left // per,
                            free // room)  # fmt: skip
                if admit == 0:
                    break
                group = head.split(admit) if admit < head.count else waiting.popleft()
                free -= room * admit
                left -= per * admit
                running.append(group)
                scheduled.append((group, per))
        if not scheduled:
            raise ConfigError("the vLLM replay stalled: no request could be scheduled")
        decode = sum(g.count for g, per in scheduled if per == 1)
        context = sum(g.count * (g.computed + 1) for g, per in scheduled if per == 1)
        prefill = sum(g.count * per for g, per in scheduled if per > 1)
        length = sum(g.count * per * (g.computed + per) for g, per in scheduled if per > 1)
        seconds += step_time(decode, context / decode if decode else 0.0, prefill,
                             length / prefill if prefill else 0.0)  # fmt: skip
        steps += 1
        for group, per in scheduled:
            group.computed += per
            if group.computed == group.tokens:
                group.generated += 1
        finished = [g for g in running if g.generated >= osl]
        for group in finished:
            free += group.count * _blocks(group.computed, block_size)
        running = _merge([g for g in running if g.generated < osl and g.count > 0])
    return Wave(seconds, steps, preempted_total, recomputed)


def len_running(running: list[_Group]) -> int:
    """Running requests over the groups."""
    return sum(g.count for g in running)


def _merge(groups: list[_Group]) -> list[_Group]:
    """Adjacent groups in the same state as one (order kept)."""
    merged: list[_Group] = []
    for group in groups:
        last = merged[-1] if merged else None
        if last is not None and (last.prompt, last.computed, last.generated) == (
            group.prompt, group.computed, group.generated
        ):  # fmt: skip
            last.count += group.count
        else:
            merged.append(group)
    return merged


#: Decode steps are evaluated at multiples of ``max_num_seqs / DECODE_POINTS`` running requests
#: (rounded up): fine enough to follow the GEMMs' wave quantization in the batch (a step every
#: 256 rows of M on the MI300X preset), which a coarse grid smooths away. Checked on the 405B
#: 128/4096 wave (1,500 requests, 337 distinct batches): every batch evaluated exactly 3,439
#: tok/s, this grid 3,437, a halving grid (1,500, 750, 375, ...) 3,481.
DECODE_POINTS = 32


def step_timer(
    backend: AnalyticalBackend, model: ModelSpec, base: ServingConfig, system: System,
    *, isl: int, osl: int, max_num_seqs: int, budget: int,
) -> StepTime:  # fmt: skip
    """A step's time from the analytical model. Decode: the step evaluated (lazily, once each)
    at the two multiples of ``ceil(max_num_seqs / DECODE_POINTS)`` around the running batch,
    at the shortest and the longest context (``isl + 1``, ``isl + osl``), interpolated linearly
    in both (the step is linear in the context: attention reads it). Prefill tokens: the
    per-token time of a ``budget``-token prefill step of prompts of the length they are
    computed to (evaluated at ``isl``, ``isl + osl/2`` and ``isl + osl``, interpolated)."""
    spacing = -(-max_num_seqs // DECODE_POINTS)
    contexts = (isl + 1, isl + osl)

    @functools.cache
    def decode_s(batch: int, context: int) -> float:
        config = replace(base, phase=Phase.DECODE, batch=batch, context_len=context - 1)
        return evaluate_decode(backend, model, config, system).time_per_output_token_s or 0.0

    lengths = sorted({isl, isl + osl // 2, isl + osl})
    per_token: list[float] = []
    for length in lengths:
        prompts = max(1, budget // length)
        result = evaluate_prefill(
            backend, model, replace(base, phase=Phase.PREFILL, batch=prompts, prompt_len=length,
                                    context_len=0, chunk=0), system,
        )  # fmt: skip
        per_token.append((result.time_to_first_token_s or 0.0) / (prompts * length))

    def interpolate(xs: list[int], ys: list[float], x: float) -> float:
        at = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)
        x0, x1 = xs[at - 1], xs[at]
        return ys[at - 1] + (ys[at] - ys[at - 1]) * (x - x0) / (x1 - x0)

    def at_context(batch: int, context: float) -> float:
        low, high = contexts
        share = (context - low) / (high - low)
        return decode_s(batch, low) + (decode_s(batch, high) - decode_s(batch, low)) * share

    def at_batch(batch: int, context: float) -> float:
        below = max(1, batch // spacing * spacing)
        if below == batch:
            return at_context(batch, context)
        above = min(below + spacing, max(batch, max_num_seqs)) if below > 1 else spacing
        low, high = at_context(below, context), at_context(above, context)
        return low + (high - low) * (batch - below) / (above - below)

    def step(decode: int, context: float, prefill: int, length: float) -> float:
        seconds = at_batch(decode, context) if decode else 0.0
        if prefill:
            rate = interpolate(lengths, per_token, length) if len(lengths) > 1 else per_token[0]
            seconds += prefill * rate
        return seconds

    return step


#: ``LLM_CLASS`` default ``max_num_seqs`` (``vllm/engine/arg_utils.py`` at 99d7eb5d): 1,024 on a
#: GPU of at least 70 GiB that is not an A100, else 256.
LARGE_GPU_SEQS = 1024
SMALL_GPU_SEQS = 256


def default_max_num_seqs(system: System) -> int:
    """vLLM's ``LLM_CLASS`` default ``max_num_seqs`` on ``system``'s accelerator."""
    large = default_max_num_batched_tokens(system) == LARGE_GPU_TOKENS
    return LARGE_GPU_SEQS if large else SMALL_GPU_SEQS


@functools.lru_cache(maxsize=32)  # rows that differ only in the release replay the same run
def vllm_offline_tokens_per_s(
    backend: AnalyticalBackend, model: ModelSpec, base: ServingConfig, system: System,
    *, isl: int, osl: int, num_prompts: int, max_num_seqs: int | None, usable_bytes: int,
    max_num_batched_tokens: int | None = None,
) -> tuple[float, str]:  # fmt: skip
    """Output tokens/s of a ``vllm bench throughput`` run of ``num_prompts`` uniform requests on
    one instance of layout ``base`` (module docstring), and a note for the row's setup. None for
    ``max_num_seqs`` or ``max_num_batched_tokens``: vLLM's ``LLM_CLASS`` default."""
    budget = max_num_batched_tokens or default_max_num_batched_tokens(system)
    seqs = default_max_num_seqs(system) if max_num_seqs is None else max_num_seqs
    blocks = kv_blocks(model, replace(base, context_len=isl + osl), usable_bytes, budget,
                       BLOCK_SIZE)  # fmt: skip
    timer = step_timer(backend, model, base, system, isl=isl, osl=osl, max_num_seqs=seqs,
                       budget=budget)  # fmt: skip
    wave = simulate_wave(num_prompts, isl, osl, max_num_seqs=seqs, budget=budget,
                         blocks=blocks, step_time=timer)  # fmt: skip
    note = (
        f"vLLM V1 replay: {num_prompts} prompts, max_num_seqs {seqs}, {budget} tokens per step, "
        f"{blocks * BLOCK_SIZE:,} KV tokens, {wave.preempted} preempted"
    )
    return num_prompts * osl / wave.seconds, note
