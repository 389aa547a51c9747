"""Per-rank memory: model states by ZeRO stage, activations by liveness along the schedule.

Model states follow Rajbhandari et al. 2020: 16-bit weights, gradients (fp32 when gradients
accumulate in fp32, Megatron's default), and 12 bytes of fp32 master weights and Adam moments
per parameter; ZeRO-1 shards the optimizer states, ZeRO-2 also the gradients, ZeRO-3 also the
weights, over the data-parallel axes of each weight (dp·ep·cp; dp·cp for experts).

Activations are the tensors each block saves for its backward (exact bytes from the derived
backward; under an FP8 recipe the linear layers' inputs as their FP8 copies,
:func:`stage_core.lower.fp8.with_fp8_saved`), summed over the micro-batches in flight: walking
the stage's task order, a forward adds its chunk's saved bytes and a backward frees them; the
peak is the activation term.
Transient buffers: what one block's backward holds at once (activation gradients, re-gathered
inputs and, under recompute, the activations it re-materialises; by liveness over its
instructions), and under ZeRO-3 the gathered weights of two blocks (one in use, one prefetched).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from stage_core.arguments import expect
from stage_core.blocks import Structure, mtp_layer_of_block
from stage_core.lower.bind import (
    BoundBlock,
    Instr,
    SymbolicBlock,
    WeightShard,
    bind_block,
    symbolic_block,
)
from stage_core.lower.compact import recompute_groups
from stage_core.lower.experts import data_axes
from stage_core.lower.fp8 import (
    ROWWISE,
    fp8_block,
    linear_weights,
    weight_copies,
    weight_copy_bytes,
    with_fp8_saved,
)
from stage_core.lower.program import Chunk, ProgramSet, StageProgram, Workload
from stage_core.lower.schedule import Task, schedule, steady_prefix
from stage_core.models.layers import (
    base_block_name,
    is_grouped_block,
    is_kept_block,
    is_layer_block,
)
from stage_core.ops import CrossEntropy, Einsum, local_elements
from stage_core.ops_moe import Combine
from stage_core.sharding import OpStep

#: Bytes an instruction's implementation holds while it runs beside the program's tensors.
InstrBytes = Callable[[Instr], int]


def weight_shard_factor(workload: Workload, weight: WeightShard, sharded: bool) -> int:
    """How many ranks share one copy of ``weight`` when its state is ``sharded`` (ZeRO)."""
    if not sharded:
        return 1
    sizes = workload.axis_sizes
    return math.prod(sizes[a] for a in data_axes(sizes, workload.expert_axes, weight.expert))


def shard_factors(workload: Workload, block: BoundBlock) -> dict[bool, int]:
    """:func:`weight_shard_factor` of a sharded state, by ``weight.expert``, for the kinds of
    weight ``block`` has (once per kind, not per weight)."""
    sizes = workload.axis_sizes
    return {
        expert: math.prod(sizes[a] for a in data_axes(sizes, workload.expert_axes, expert))
        for expert in {weight.expert for weight in block.weights}
    }


def unsharded_elements(workload: Workload, block: BoundBlock) -> int:
    """Elements of ``block``'s weights that ZeRO-3 shards on this rank (shard factor > 1), the
    ones FSDP gathers into an unsharded copy beside the shard. A weight whose data-parallel
    group is one rank (an expert with as many expert-parallel ranks as data-parallel ones)
    is held whole by its shard already: NeMo AutoModel leaves such experts out of FSDP
    (``components/moe/parallelizer.py`` ``apply_fsdp``: ``fully_shard`` of the experts over
    the ``ep_shard`` mesh only when it is larger than one, else ``ignored_params``), so
    nothing is gathered for them and their gradient is the states' own."""
    shards = shard_factors(workload, block)
    return sum(w.elements for w in block.weights if shards[w.expert] > 1)


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes one rank of a stage holds at its peak."""

    stage: int
    ranks: tuple[int, ...]
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    transient_bytes: int
    #: Of ``weights_bytes``, the FP8 copies of the linear layers' weights and their scales that
    #: an FP8 recipe keeps beside the 16-bit weights (:mod:`stage_core.lower.fp8`).
    fp8_weights_bytes: int = 0

    @property
    def peak_bytes(self) -> int:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.transient_bytes
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "stage": self.stage,
            "ranks": list(self.ranks),
            "weights_bytes": self.weights_bytes,
            "gradients_bytes": self.gradients_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "transient_bytes": self.transient_bytes,
            "fp8_weights_bytes": self.fp8_weights_bytes,
            "peak_bytes": self.peak_bytes,
        }


def activation_peak(chunks: Sequence[Chunk], tasks: Sequence[Task]) -> int:
    """Peak bytes of saved activations over a stage's task order. Under a schedule that splits
    the backward (``W`` tasks: ZB-H1, DualPipe) a micro-batch's activations stay until its
    ``W``, and from its ``B`` on the gradients ``W`` reads (``Chunk.pending_bytes``) too."""
    saved = [chunk.saved_bytes for chunk in chunks]
    split = any(task.phase == "W" for task in tasks)
    pending = [getattr(chunk, "pending_bytes", 0) if split else 0 for chunk in chunks]
    live = peak = 0
    for task in tasks:
        if task.phase == "F":
            live += saved[task.chunk]
            peak = max(peak, live)
        elif task.phase == "W":
            live -= saved[task.chunk] + pending[task.chunk]
        elif split:
            live += pending[task.chunk]
            peak = max(peak, live)
        else:
            live -= saved[task.chunk]
    return peak


def steady_activation_peak(
    chunks: Sequence[Chunk], kind: str, stage: int, stages: int, micro_batches: int, vpp: int
) -> int:
    """:func:`activation_peak` without walking every micro-batch: GPipe holds all of them; in
    1F1B, ZB-H1 and interleaved 1F1B the live set is periodic after the warm-up, so a prefix
    of ``4·N`` micro-batches and the step's shorter last group, if any (:func:`steady_prefix`;
    N the interleaved group size, default pp), reaches the same peak (DualPipe: every one)."""
    if kind == "gpipe":
        return micro_batches * sum(chunk.saved_bytes for chunk in chunks)
    cap = micro_batches if kind == "dualpipe" else steady_prefix(kind, stages, micro_batches)
    prefix = micro_batches if micro_batches <= cap else cap
    return activation_peak(chunks, schedule(kind, stage, stages, prefix, vpp))


def backward_working_set(block: BoundBlock, extra: InstrBytes | None = None) -> int:
    """Peak bytes of the tensors a block's backward creates and holds at once — activation
    gradients, re-gathered inputs, recomputed activations — by liveness over its instructions in
    program order (a tensor lives from its first write to its last read or write). Weight
    gradients are excluded: they accumulate into the gradient buffers of the model states.
    ``extra``: bytes an instruction's implementation holds while it runs beyond the tensors the
    program names (a framework's buffers; none by default, the generator's own count)."""
    weight_grads = {f"d.{weight.name}" for weight in block.weights}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    size: dict[str, int] = {}
    for index, instr in enumerate(block.bwd):
        for name, nbytes in instr.outputs:
            if name in weight_grads:
                continue
            first.setdefault(name, index)
            last[name] = index
            size[name] = max(size.get(name, 0), nbytes)
        for name, _ in instr.inputs:
            if name in first:
                last[name] = index
    changes = [0] * (len(block.bwd) + 1)
    for name, start in first.items():
        changes[start] += size[name]
        changes[last[name] + 1] -= size[name]
    live = peak = 0
    for index, change in enumerate(changes):
        live += change
        held = extra(block.bwd[index]) if extra is not None and index < len(block.bwd) else 0
        peak = max(peak, live + held)
    return peak


@dataclass(frozen=True, slots=True)
class WorkingSetTerms:
    """The candidates :func:`recompute_working_set` takes the largest of, per block kind, so a
    caller asking for several pipeline stages' kind sets derives each block's terms once (s37
    lead: the per-stage working set of s37 vocab2 had re-derived them for every stage's kinds).
    ``backward``: each kind's :func:`backward_working_set`; ``recomputed``: each recomputed
    layer kind's saved activations without recompute less with it; ``groups``: each uniform
    recompute group's kinds and :func:`uniform_group_working_set`."""

    backward: Mapping[str, int]
    recomputed: Mapping[str, int]
    groups: tuple[tuple[tuple[str, ...], int], ...]

    def largest(self, kinds: Collection[str] | None = None) -> int:
        """The largest term over the block kinds ``kinds`` (``None``: every kind); a group
        counts when all its kinds are among them."""
        backward = self.backward
        own = backward if kinds is None else {k: v for k, v in backward.items() if k in kinds}
        largest = max(own.values(), default=0)
        for kind, excess in self.recomputed.items():
            if kind in own:
                largest = max(largest, excess)
        for group, working_set in self.groups:
            if kinds is None or all(kind in own for kind in group):
                largest = max(largest, working_set)
        return largest


def working_set_terms(
    workload: Workload, blocks: Mapping[str, BoundBlock], extra: InstrBytes | None = None
) -> WorkingSetTerms:
    """Every block kind's working-set terms (:class:`WorkingSetTerms`; ``extra`` as in
    :func:`backward_working_set`)."""
    backward = {kind: backward_working_set(block, extra) for kind, block in blocks.items()}
    if str(workload.parallel.recompute) == "none":
        return WorkingSetTerms(backward, {}, ())
    full_saved: dict[str, int] = {}
    recomputed: dict[str, int] = {}
    for kind in blocks:
        if not (is_layer_block(kind) or mtp_layer_of_block(kind)):  # MTP: its layer recomputes
            continue
        if is_kept_block(kind) or is_grouped_block(kind):  # kept: no recompute; grouped: below
            continue
        full_saved[kind] = unrecomputed_saved_bytes(workload, kind)
        recomputed[kind] = full_saved[kind] - blocks[kind].saved_bytes
    groups = tuple(
        (tuple(group), uniform_group_working_set(group, blocks, full_saved, extra))
        for group in recompute_groups(workload)
    )
    return WorkingSetTerms(backward, recomputed, groups)


def recompute_working_set(
    workload: Workload,
    blocks: Mapping[str, BoundBlock],
    extra: InstrBytes | None = None,
    kinds: Collection[str] | None = None,
) -> int:
    """Transient bytes at the peak of a backward: the largest over block kinds of what one
    block's backward holds at once (:func:`backward_working_set`: activation gradients and, under
    recompute, the activations it re-materialises), and never less than the recomputed layer's
    saved activations (the difference between its saved bytes without and with recompute).
    Under a uniform recompute (groups of N layers checkpointed as one unit,
    :func:`~stage_core.lower.compact.recompute_groups`) the largest group's: its recompute
    re-runs the group's forward, so while its last layer's backward runs the group's other
    layers hold their full activations (:func:`uniform_group_working_set`).
    ``extra`` as in :func:`backward_working_set`. ``kinds``: the block kinds one pipeline stage
    runs (``None``: every block of the model) — a stage's backward runs its own blocks only, so
    its transient is theirs: a first stage under pipeline parallelism never holds the output
    layer's logits gradient (s37 vocab2; before, every stage was charged the model's largest).
    The terms: :func:`working_set_terms`."""
    return working_set_terms(workload, blocks, extra).largest(kinds)


def unrecomputed_saved_bytes(workload: Workload, kind: str) -> int:
    """Bytes a layer of block kind ``kind`` saves per micro-batch without recompute (as its
    forward keeps them, FP8 copies included): what its recompute re-materialises."""
    structure = Structure.of(workload.model)
    full = symbolic_block(kind, structure, workload.options, workload.flags, "none")
    bound = bind_block(full, kind, workload.sizes, workload.axis_sizes)
    bound = with_fp8_saved(
        bound, full, workload.sizes, workload.axis_sizes, workload.parallel, "none"
    )
    return bound.saved_bytes


def uniform_group_working_set(
    group: Sequence[str],
    blocks: Mapping[str, BoundBlock],
    full_saved: Mapping[str, int],
    extra: InstrBytes | None = None,
) -> int:
    """What the backward of one uniform recompute group holds beyond the saved activations
    (Megatron-Core ``--recompute-method uniform``: ``tensor_parallel.checkpoint`` over
    ``custom(layer_idx, layer_idx + N)``; its backward re-runs the N layers' forward with grad
    enabled, then back-propagates through them, last layer first). At the peak, the start of
    the last layer's backward: the other layers' activations (each its unrecomputed saved
    bytes, ``full_saved`` of its kind; less the group's input, which the activation term
    already counts as the first layer's saved bytes), the last layer's input (kept by its
    re-run forward) and what the last layer's own recomputing backward holds (as a single
    fully recomputed layer: :func:`backward_working_set` of its block, never less than its
    re-materialised activations). ``group``: its layers' block kinds in forward order (the
    first a recomputed kind, the rest :func:`~stage_core.models.layers.grouped_block_name`
    kinds)."""
    bases = [base_block_name(kind) for kind in group]
    first, last = bases[0], bases[-1]
    held = sum(full_saved[kind] for kind in bases[:-1]) - blocks[first].saved_bytes
    last_input = blocks[last].saved_bytes  # a fully recomputed layer saves its input only
    own = max(backward_working_set(blocks[group[-1]], extra), full_saved[last] - last_input)
    return held + last_input + own


#: The op kind of the softmax cross-entropy (:class:`stage_core.ops.CrossEntropy`).
CROSS_ENTROPY_KIND = CrossEntropy.__name__.lower()
FP32_BYTES = 4


def loss_logits_elements(block: BoundBlock, activation_bytes: int) -> int:
    """Logits one rank's cross-entropy in ``block`` reads per micro-batch (0 if it has none):
    the local logits' bytes over the 16-bit activation size."""
    return sum(
        instr.inputs[0][1] // activation_bytes
        for instr in block.fwd
        if instr.kind == CROSS_ENTROPY_KIND and instr.inputs
    )


def loss_peak_bytes(logits_elements: int, fp32_buffers: int, activation_bytes: int) -> int:
    """Bytes the loss holds at its backward's peak when it runs in fp32 on upcast logits
    (``fp32_buffers`` fp32 copies of the logits at once; 0: the generator's own count, the
    16-bit logits saved plus their 16-bit gradient). Eager ``F.cross_entropy`` (3 buffers):
    ``log_softmax`` saves its fp32 output; its backward holds that, the ``nll_loss`` gradient
    and its result, 3 x 4 bytes per logit. Megatron's vocab-parallel cross-entropy (1 buffer)
    saves the fp32 softmax, turns it into the gradient in place and casts that to 16 bits, so
    the fp32 gradient and its 16-bit copy are live together (4 + 2 bytes per logit).

    Beside the fp32 buffers one 16-bit block of the logits' size is held in every case: the
    upcast (``output.float()``) frees the 16-bit logits the output layer wrote, but PyTorch's
    caching allocator keeps their block reserved (freed blocks stay cached for their stream,
    https://pytorch.org/docs/stable/notes/cuda.html#memory-management), and none of the fp32
    buffers, twice its size, fits in it; the backward's cast of the gradient to 16 bits is the
    first allocation that does. With one buffer that cast is part of the peak (Megatron's
    4 + 2); with more the block is reserved and empty while the fp32 buffers peak (or, where
    the caller still references the 16-bit logits and autocast upcasts them inside the loss,
    live), so the process holds ``fp32_buffers x 4 + 2`` bytes per logit either way."""
    sixteen_bit = 2 * activation_bytes * logits_elements  # the generator's saved logits + grad
    if fp32_buffers == 0:
        return sixteen_bit
    return (fp32_buffers * FP32_BYTES + activation_bytes) * logits_elements


def loss_working_set(blocks: Sequence[BoundBlock], fp32_buffers: int, activation_bytes: int) -> int:
    """The backward working set of the loss among ``blocks`` (0 with none): its peak
    (:func:`loss_peak_bytes`) less the 16-bit logits the activation term already counts as
    saved. A stage holding the loss holds at least this beside its saved activations."""
    extra = 0
    for block in blocks:
        logits = loss_logits_elements(block, activation_bytes)
        if logits:
            peak = loss_peak_bytes(logits, fp32_buffers, activation_bytes)
            extra = max(extra, peak - activation_bytes * logits)
    return extra


def _own_symbolic_block(workload: Workload, kind: str) -> SymbolicBlock:
    """The symbolic block of ``kind`` as ``workload`` runs it (its options, flags, recompute
    and recompute modules)."""
    parallel = workload.parallel
    return symbolic_block(
        kind,
        Structure.of(workload.model),
        workload.options,
        workload.flags,
        str(parallel.recompute),
        parallel.recompute_modules,
    )


def gathered_input_bytes(workload: Workload, kind: str) -> int:
    """Bytes per micro-batch a block of ``kind`` saves beyond the generator's count when
    autograd keeps a linear layer's input as the GEMM read it, gathered, rather than as it is
    stored: under sequence parallelism the generator (Megatron: ``LinearWithGradAccumulation
    AndAsyncCommunication`` saves the sequence shard and all-gathers it again in the backward)
    keeps the shard; DTensor's tensor parallelism (a ``Shard(1)`` -> ``Replicate`` redistribute
    before a ``ColwiseParallel`` linear, torchtitan's plans) keeps the all-gathered tensor the
    ``mm`` saved. Per saved tensor read gathered by an einsum, its largest such read less its
    stored bytes (0 without sequence parallelism, or when the tensor is not saved: a fully
    recomputed layer keeps only its input)."""
    symbolic = _own_symbolic_block(workload, kind)
    sizes, axis_sizes = workload.sizes, workload.axis_sizes
    saved = {item.name: item for item in symbolic.backward.saved}
    tensors = symbolic.forward.tensors
    read: dict[str, int] = {}
    for step in symbolic.forward.steps:
        if not (isinstance(step, OpStep) and isinstance(step.op, Einsum)):
            continue
        for name, layout in zip(step.op.inputs, step.in_layouts, strict=True):
            if name in saved and tensors[name].role != "weight":
                elements = int(local_elements(layout, sizes, axis_sizes))
                read[name] = max(read.get(name, 0), elements)
    extra = 0
    for name, elements in read.items():
        item = saved[name]
        stored = int(local_elements(item.layout, sizes, axis_sizes))
        extra += max(0, elements - stored) * item.bytes_per_element
    return extra


def weighted_combine_saved_bytes(workload: Workload, kind: str) -> int:
    """Bytes per micro-batch a block of ``kind`` saves for its MoE combine's expert outputs
    (the combine saves them for the router probabilities' gradient): what a framework that
    scales the experts' activation by the probabilities instead does not keep (Megatron-Core's
    ``TEGroupedMLP``, whose combine is a plain unpermute). 0 for a block without experts or
    whose combine is re-run in the backward (full recompute, the ``moe`` module)."""
    symbolic = _own_symbolic_block(workload, kind)
    saved = {item.name: item for item in symbolic.backward.saved}
    total = 0
    for step in symbolic.forward.steps:
        if isinstance(step, OpStep) and isinstance(step.op, Combine):
            item = saved.get(step.op.inputs[0])
            if item is not None:
                elements = local_elements(item.layout, workload.sizes, workload.axis_sizes)
                total += int(elements) * item.bytes_per_element
    return total


def fp8_weights(workload: Workload, block: BoundBlock, transposed: bool = True) -> int:
    """Bytes of the FP8 weight copies and scales one rank holds for ``block`` (0 unless the
    run's precision is FP8); sharded like the weights under ZeRO-3. ``transposed`` False: one
    copy serves both ``fprop`` and ``dgrad`` (a GPU whose FP8 GEMMs take any layout, under a
    per-tensor recipe: Transformer Engine's ``is_non_tn_fp8_gemm_supported``, sm100 on). None
    under ``rowwise``: torchao's ``Float8Linear`` casts the 16-bit weight at every use and saves
    the 16-bit weight for the backward (:mod:`stage_core.lower.fp8`, *Row-wise scaling*)."""
    parallel = workload.parallel
    if not parallel.quantized or not fp8_block(str(block.kind)):
        return 0
    linear = linear_weights(block)
    recipe, gemms = parallel.linear_recipe, parallel.fp8_gemms
    copies = weight_copies(gemms)
    if copies == 0:  # only wgrad in FP8: no weight copy (its operands are activations)
        return 0
    if recipe == ROWWISE:  # torchao casts the 16-bit weight at each use and keeps no copy
        return 0
    held = copies if transposed else 1
    return sum(
        weight_copy_bytes(weight.elements, recipe, gemms)
        // copies
        * held
        // weight_shard_factor(workload, weight, parallel.zero >= 3)
        for weight in block.weights
        if weight.name in linear
    )


def block_states(
    workload: Workload,
    block: BoundBlock,
    fp32_shards: bool = False,
    fp8_params: bool = False,
    fp8_transposed: bool = True,
    optimizer_bytes: int | None = None,
    grad_bytes: int | None = None,
) -> tuple[int, int, int, int]:
    """Weights (with their FP8 copies under an FP8 recipe, :func:`fp8_weights` with
    ``fp8_transposed``), gradients, optimizer bytes one rank holds for ``block``, and its full
    weights. Without a 16-bit copy of some weights (0 bytes for them): ``fp32_shards`` under
    ZeRO-3, all of them (FSDP keeps the shard in fp32, the master the optimizer bytes count);
    ``fp8_params`` under an FP8 recipe, the FP8 linear layers' (Megatron
    ``--fp8-param-gather``: the FP8 copies are the parameters). ``optimizer_bytes``: the
    optimizer's state per parameter before sharding (``None``: the workload's, Megatron's 12);
    ``grad_bytes``: the held gradient's bytes per element (``None``: the workload's).
    Public: the analytical backend's model states read it
    (:mod:`stage_explore.analytical.costing_states`)."""
    state_bytes = workload.optimizer_bytes if optimizer_bytes is None else optimizer_bytes
    held_grad = workload.grad_bytes if grad_bytes is None else grad_bytes
    zero = workload.parallel.zero
    weights, grads, optimizer, full = fp8_weights(workload, block, fp8_transposed), 0, 0, 0
    no_copy: frozenset[str] = frozenset()
    if fp32_shards and zero >= 3:
        no_copy = frozenset(weight.name for weight in block.weights)
    elif fp8_params and str(workload.parallel.precision) == "fp8" and fp8_block(str(block.kind)):
        # FP8 only: the perf recipes gather FP4 runs' parameters in 16 bits (no --fp4-param-gather)
        no_copy = linear_weights(block)
    shards = shard_factors(workload, block)  # weight_shard_factor(…, True) by weight.expert
    for weight in block.weights:
        elements, shard = weight.elements, shards[weight.expert]
        if weight.name not in no_copy:
            weights += elements * workload.weight_bytes // (shard if zero >= 3 else 1)
        grads += elements * held_grad // (shard if zero >= 2 else 1)
        optimizer += elements * state_bytes // (shard if zero >= 1 else 1)
        full += elements * workload.weight_bytes
    return weights, grads, optimizer, full


def chunks_memory(
    workload: Workload,
    chunks: Sequence[Chunk],
    tasks: Sequence[Task] | None,
    working_set: int,
    stage: int = 0,
    ranks: tuple[int, ...] = (),
) -> MemoryBreakdown:
    """The breakdown of a stage holding ``chunks`` and running ``tasks`` (``None``: the stage's
    schedule, by :func:`steady_activation_peak`)."""
    weights = grads = optimizer = fp8 = 0
    gathered: list[int] = []
    states: dict[int, tuple[int, int, int, int]] = {}
    copies: dict[int, int] = {}
    for chunk in chunks:
        for block in chunk.blocks:
            key = id(block)
            if key not in states:
                states[key] = block_states(workload, block)
                copies[key] = fp8_weights(workload, block)
            w, g, o, full = states[key]
            weights, grads, optimizer = weights + w, grads + g, optimizer + o
            fp8 += copies[key]
            gathered.append(full)
    transient = working_set
    if workload.parallel.zero >= 3:
        transient += sum(sorted(gathered, reverse=True)[:2])
    parallel = workload.parallel
    activations = (
        activation_peak(chunks, tasks)
        if tasks is not None
        else steady_activation_peak(
            chunks, parallel.schedule_kind, stage, parallel.pp, workload.micro_batches, parallel.vpp
        )
    )
    return MemoryBreakdown(stage, ranks, weights, grads, optimizer, activations, transient, fp8)


def stage_memory(
    programs: ProgramSet, stage: StageProgram, ranks: tuple[int, ...] = ()
) -> MemoryBreakdown:
    held = {id(block) for chunk in stage.chunks for block in chunk.blocks}
    kinds = {kind for kind, block in programs.blocks.items() if id(block) in held}
    working_set = recompute_working_set(programs.workload, programs.blocks, kinds=kinds)
    return chunks_memory(
        programs.workload, stage.chunks, stage.tasks, working_set, stage.stage, ranks
    )


def memory_report(programs: ProgramSet, with_ranks: bool = True) -> list[MemoryBreakdown]:
    """One breakdown per distinct stage program."""
    expect(programs, ProgramSet, "programs", "lower(model, parallel)")
    return [
        stage_memory(programs, stage, tuple(programs.ranks(stage.stage)) if with_ranks else ())
        for stage in programs.stages
    ]
