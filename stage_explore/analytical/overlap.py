"""Communication that frameworks overlap with compute, as rewrites of a block's instructions.

Holds :func:`apply_overlaps` (a block as a timing policy runs it), :func:`overlap_collectives`
(take a collective, or all but a first chunk of it, off its dependents' critical path),
:func:`overlap_shared_experts` (run an MoE block's shared experts while its dispatch all-to-all
is in flight), :func:`overlap_rule` (which collectives a
:class:`~stage_explore.analytical.policy.TimingPolicy` overlaps, and how much of each stays on
the path) and :func:`flat_ring_s` (a collective run as one flat ring over a group that spans
several network dims).

A block's instructions run on an in-order compute stream and an in-order communication stream
(:func:`~stage_explore.analytical.blocktime.time_block`); a collective's dependents wait for all
of it. Overlap is expressed without changing that engine:

- **Chunked overlap** (Megatron ``--tp-comm-overlap``: Transformer Engine's userbuffers
  "ring_exchange" splits a tensor-parallel all-gather into ``tp`` chunks pipelined with the GEMM
  that consumes it): the collective becomes a *head* carrying ``1/tp`` of the bytes, which its
  dependents wait for, and a *tail* carrying the rest, which runs after it on the
  communication stream while the GEMM computes.
- **Pipelined reduce-scatter** (userbuffers "pipeline", the forward reduce-scatters after the
  attention projection and fc2): the GEMM that produces the partial sums is split into
  :data:`UB_PIPELINE_SPLITS` row chunks, and chunk ``i``'s reduce-scatter runs while chunk
  ``i+1`` computes; the dependents wait for the last chunk's. (Overlapping the reduce-scatter
  with what *follows* it instead would be wrong: the residual add and the next norm read its
  result, and the next all-gather queues behind it.)
- **Ring-exchange reduce-scatter** (userbuffers "ring_exchange" for ``proj_fprop`` /
  ``fc2_fprop``, as the recipe's config names it; :data:`RING_EXCHANGE_FPROP`): Transformer
  Engine's ``CommOverlapP2PBase::split_overlap_rs`` cuts the GEMM into ``tp`` row chunks (one
  per destination rank), issued on its compute streams with no wait between them, and sends
  each finished chunk's partial result to its peer by copy engine while the next computes
  (``tp - 1`` sends, the last chunk is the rank's own); the main stream then sums the ``tp``
  partial chunks with one memory-bound kernel (``reduce_bf16``), which the dependents wait
  for (:func:`_ring_exchange`).
- **Bulk reduce-scatter** (userbuffers "bulk", the input-gradient reduce-scatters of the qkv and
  fc1 projections in the backward): it runs beside the weight-gradient GEMMs of the same
  linear layers (those reading the output gradient its producers read), which
  :func:`defer_weight_gradients` moves after it; its dependents wait for all of it.
- **Full overlap** (Megatron ``--overlap-moe-expert-parallel-comm``: one micro-batch's
  dispatch/combine all-to-all runs beside another micro-batch's compute): the dependents wait only
  for what the collective itself waited for; the collective still occupies the communication
  stream, so a block never ends before its communication does.
(:func:`defer_weight_gradients` and :func:`overlap_shared_experts` live in
:mod:`~stage_explore.analytical.overlap_reorder`.)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from stage_core.blocks import MTP_HEAD
from stage_core.lower.bind import Instr
from stage_core.plans import SPLIT_TP
from stage_core.trace import CollectiveKind
from stage_explore.analytical.collectives import (
    _level_s,
    call_overhead_s,
    low_latency_overhead_s,
    low_latency_share,
)
from stage_explore.analytical.overlap_reorder import deferred_gemms, is_gemm, overlap_shared_experts
from stage_explore.analytical.policy import Overlap, TimingPolicy
from stage_explore.system.model import System
from stage_explore.system.ranks import group_span

#: Row chunks of a GEMM whose output userbuffers reduce-scatter in a pipeline: Transformer
#: Engine's default ``num_splits`` for the "pipeline" method (transformer_engine/pytorch/module/
#: base.py, ``initialize_ub``: ``"num_splits": tp_size if method == "ring_exchange" else 4``).
UB_PIPELINE_SPLITS = 4


#: The userbuffers names (Transformer Engine ``initialize_ub``'s ``proj_fprop`` and
#: ``fc2_fprop``, without the suffix) of the forward reduce-scatters a recipe may run as a ring
#: exchange (framework options ``ub_proj_fprop_method`` / ``ub_fc2_fprop_method``).
RING_EXCHANGE_FPROP = ("proj", "fc2")

#: SMs a ring-exchange GEMM chunk leaves to the communication: the recipes' ``num_sm=1`` with
#: ``set_sm_margin=True`` (Megatron-Bridge ``RingExchangeOverlapCfg(num_sm=1,
#: set_sm_margin=True)`` for ``proj_fprop`` / ``fc2_fprop``, src/megatron/bridge/training/
#: comm_overlap.py at 0685ff5d); the sends themselves run on the copy engines (TE
#: ``get_default_config``: ``use_ce`` True).
RING_EXCHANGE_SMS = 1


@dataclass(frozen=True, slots=True)
class Pipelined:
    """A rule's answer for a collective pipelined with the GEMM that produces it, in
    ``splits`` chunks (module docstring); ``ring``: as a userbuffers ring exchange
    (:func:`_ring_exchange`, ``splits`` the group size), not a pipeline."""

    splits: int
    ring: bool = False


@dataclass(frozen=True, slots=True)
class Bulk:
    """A rule's answer for a collective that runs beside the weight-gradient GEMMs of the
    linear layers it reduces (:func:`defer_weight_gradients`); its dependents wait for all of
    it."""


#: The axes of a tensor-parallel group: ``tp``, or any of its sub-axes (outermost first) on a
#: mesh that splits tp for the experts (stage_core.lower.experts).
_TP_GROUPS = frozenset(axes for n in (1, 2, 3) for axes in itertools.combinations(SPLIT_TP, n))

#: A rule: for a collective, None (not overlapped), the fraction of it its dependents wait for,
#: :class:`Pipelined` (split with its producing GEMM) or :class:`Bulk`.
OverlapRule = Callable[[Instr], "float | Pipelined | Bulk | None"]


def overlap_collectives(instrs: Sequence[Instr], rule: OverlapRule) -> tuple[Instr, ...]:
    """``instrs`` with the collectives ``rule`` selects taken (partly) off the critical path
    (module docstring); dependency indices are renumbered."""
    return overlap_block(instrs, rule)[0]


def overlap_block(
    instrs: Sequence[Instr], rule: OverlapRule
) -> tuple[tuple[Instr, ...], frozenset[Instr]]:
    """:func:`overlap_collectives`, and the GEMMs of the result that share the GPU with a
    userbuffers communication kernel (the pipelined chunks and the weight gradients beside a
    bulk reduce-scatter), which run on :data:`UB_COMM_SMS` fewer SMs (:func:`sm_margin`)."""
    shared: set[Instr] = set()
    if any(isinstance(rule(i), Bulk) for i in instrs if i.collective is not None):
        instrs, moved = deferred_gemms(
            instrs, lambda i: i.collective is not None and isinstance(rule(i), Bulk)
        )
        shared.update(instrs[i] for i in moved)
    pipelined = _pipelined(instrs, rule)  # producing GEMM's index -> (collective's, splits)
    result: list[Instr] = []
    waits: list[tuple[int, ...]] = []  # old index -> what its dependents wait for, renumbered
    emitted: dict[int, tuple[int, ...]] = {}  # pipelined collectives, emitted with their GEMM
    for old, instr in enumerate(instrs):
        deps = tuple(sorted({d for dep in instr.deps for d in waits[dep]}))
        if old in emitted:
            waits.append(emitted[old])
            continue
        if old in pipelined and pipelined[old][2]:
            collective, splits, _ = pipelined[old]
            start = len(result)
            result.extend(_ring_exchange(instr, instrs[collective], splits, deps, start))
            gemms = [start + k for k, new in enumerate(result[start:]) if is_gemm(new)]
            shared.update(result[k] for k in gemms)
            waits.append((gemms[-1],))  # the GEMM's other readers: its last chunk
            emitted[collective] = (len(result) - 1,)  # the reduction kernel
            continue
        if old in pipelined:
            collective, splits, _ = pipelined[old]
            for index in range(splits):
                result.append(_chunk(instr, splits, index, deps))
                shared.add(result[-1])
                chunk = _chunk(instrs[collective], splits, index, (len(result) - 1,))
                result.append(chunk)
            waits.append((len(result) - 2,))  # the GEMM's other readers: its last chunk
            emitted[collective] = (len(result) - 1,)
            continue
        fraction = rule(instr) if instr.collective is not None else None
        if isinstance(fraction, Pipelined):  # no GEMM to pipeline with: chunked like a gather
            fraction = 1 / fraction.splits
        if isinstance(fraction, Bulk):  # beside the weight gradients moved after it
            fraction = None
        if fraction is None or instr.comm_bytes == 0:
            moved_gemm = instr in shared
            result.append(replace(instr, deps=deps))
            if moved_gemm:  # renumbered: the rewritten instruction is the one timed
                shared.discard(instr)
                shared.add(result[-1])
            waits.append((len(result) - 1,))
            continue
        head_bytes = int(instr.comm_bytes * fraction)
        if head_bytes > 0:
            result.append(replace(instr, deps=deps, comm_bytes=head_bytes))
            head = len(result) - 1
            result.append(
                replace(instr, name=instr.name + ".tail", deps=(head,),
                        comm_bytes=instr.comm_bytes - head_bytes)
            )  # fmt: skip
            waits.append((head,))
        else:
            result.append(replace(instr, deps=deps))
            waits.append(deps)
    return tuple(result), frozenset(shared)


#: SMs a userbuffers "pipeline" or "bulk" communication kernel takes from the GEMM it overlaps:
#: Transformer Engine's defaults (``initialize_ub``: ``"num_sm": 1 if method ==
#: "ring_exchange" else 16``, ``"set_sm_margin": not method == "ring_exchange"``: the GEMM is
#: launched on the SMs the communication leaves). Ring-exchange all-gathers copy with the copy
#: engines and take none.
UB_COMM_SMS = 16

#: SMs DeepEP's dispatch and combine kernels occupy while they run: Megatron-Core's
#: ``TransformerConfig.moe_deepep_num_sms`` = 20 ("Number of SMs to use for DeepEP"), the
#: ``Buffer.set_num_sms`` Megatron's flex dispatcher passes to DeepEP.
DEEPEP_SMS = 20


def deepep_sm_share_s(
    all_to_all_s: float, compute_s: float, sm_count: int, comm_sms: int = DEEPEP_SMS
) -> float:
    """Compute seconds lost to DeepEP's SMs when its all-to-alls (``all_to_all_s`` on the
    communication stream) run beside ``compute_s`` of compute (``moe_deepep`` with
    ``moe_comm_overlap``): while they overlap, compute runs on ``sm_count − comm_sms`` SMs, so
    ``min(all_to_all_s, compute_s) · comm_sms / sm_count`` of its work is left for after.
    ``comm_sms``: DeepEP's :data:`DEEPEP_SMS`, or HybridEP's (``moe_hybridep``: the profile's
    ``moe_hybridep_sms``, Megatron-Core's default 16)."""
    if sm_count <= comm_sms:
        return 0.0
    return min(all_to_all_s, compute_s) * comm_sms / sm_count


def sm_margin(
    compute_s: Callable[[Instr], float],
    shared: frozenset[Instr],
    sm_count: int,
    comm_sms: int | None = None,
) -> Callable[[Instr], float]:
    """``compute_s`` with the GEMMs in ``shared`` running on ``sm_count - comm_sms`` SMs
    (their time scaled by ``sm_count / (sm_count - comm_sms)``; None: :data:`UB_COMM_SMS`)."""
    if comm_sms is None:
        comm_sms = UB_COMM_SMS
    if not shared or sm_count <= comm_sms:
        return compute_s
    scale = sm_count / (sm_count - comm_sms)

    def timed(instr: Instr) -> float:
        seconds = compute_s(instr)
        return seconds * scale if instr in shared else seconds

    return timed


def pipelined_chunks(shared: frozenset[Instr]) -> frozenset[Instr]:
    """The GEMM chunks of ``shared`` (:func:`overlap_block`) pipelined with a reduce-scatter
    (:func:`_chunk` names them ``<gemm>.chunk<i>``); the rest run beside a bulk collective."""
    return frozenset(i for i in shared if i.name.rpartition(".")[2].startswith("chunk"))


def concurrent_chunks(
    compute_s: Callable[[Instr], float], chunks: frozenset[Instr]
) -> Callable[[Instr], float]:
    """``compute_s`` with each GEMM chunk of ``chunks`` (:func:`pipelined_chunks`) timed as its
    share of the whole GEMM its sibling chunks make up, not as a GEMM of its own rows: the chunks
    fill each other's last waves, as they do when the device has more than one hardware queue
    (``CUDA_DEVICE_MAX_CONNECTIONS`` > 1; the profile's ``cuda_device_max_connections``).

    Transformer Engine's ``CommOverlapBase::split_overlap_rs``
    (transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp) issues chunk ``i`` on
    ``_stream_compute[i % 3]`` with no wait on chunk ``i-1``, then records an event and issues
    reduce-scatter chunk ``i`` on ``_stream_comm`` behind it. With one hardware queue the queue
    holds GEMM ``i``, the comm stream's wait for it, GEMM ``i+1``: GEMM ``i+1`` cannot launch
    before GEMM ``i`` has finished, and every chunk pays its own wave quantization (the default,
    what :func:`overlap_block`'s in-order chunks time). With several queues nothing orders the
    chunks on their separate streams."""
    if not chunks:
        return compute_s
    groups: dict[str, list[Instr]] = {}
    for chunk in chunks:
        groups.setdefault(chunk.name.rpartition(".")[0], []).append(chunk)
    whole = {name: _whole_gemm(members) for name, members in groups.items()}
    seconds: dict[str, float] = {}

    def timed(instr: Instr) -> float:
        if instr not in chunks:
            return compute_s(instr)
        name = instr.name.rpartition(".")[0]
        gemm = whole[name]
        if name not in seconds:
            seconds[name] = compute_s(gemm)
        return seconds[name] * instr.flops / gemm.flops if gemm.flops else compute_s(instr)

    return timed


def _whole_gemm(chunks: Sequence[Instr]) -> Instr:
    """The GEMM whose row chunks (:func:`_chunk`) ``chunks`` are: their rows and output summed,
    the second operand (read whole by every chunk) once."""
    first = chunks[0]
    (operand, _), weight = first.inputs
    ((out, _),) = first.outputs
    rows = sum(c.inputs[0][1] for c in chunks)
    written = sum(c.outputs[0][1] for c in chunks)
    return replace(
        first, name=first.name.rpartition(".")[0], flops=sum(c.flops for c in chunks),
        bytes_read=rows + weight[1], bytes_written=written,
        inputs=((operand, rows), weight), outputs=((out, written),),
    )  # fmt: skip


def pipelined_collectives(instrs: Sequence[Instr]) -> tuple[Instr, ...]:
    """The collective chunks of ``instrs`` pipelined with a GEMM's chunks (:func:`_chunk`
    names them ``<collective>.chunk<i>``), whose kernels run beside the next GEMM chunk."""
    return tuple(
        i for i in instrs
        if i.collective is not None and i.name.rpartition(".")[2].startswith("chunk")
    )  # fmt: skip


def ub_bulk_share_s(bulk_s: float, gemm_s: float, sm_count: int) -> float:
    """Compute seconds lost by weight-gradient GEMMs launched on every SM
    (``set_sm_margin`` off, ``ub_bulk_sm_margin``) while ``bulk_s`` of userbuffers bulk
    kernels hold :data:`UB_COMM_SMS` of the ``sm_count`` SMs beside ``gemm_s`` of them:
    ``min(bulk_s, gemm_s) · UB_COMM_SMS / sm_count``."""
    if sm_count <= UB_COMM_SMS or bulk_s <= 0.0 or gemm_s <= 0.0:
        return 0.0
    return min(bulk_s, gemm_s) * UB_COMM_SMS / sm_count


def _pipelined(instrs: Sequence[Instr], rule: OverlapRule) -> dict[int, tuple[int, int, bool]]:
    """The collectives ``rule`` pipelines with their producer, by that GEMM's index (with the
    splits and whether as a ring exchange): each reads one GEMM and nothing else. Its chunks
    move up to the GEMM's, ahead of any collective issued in between (userbuffers run on their
    own communicator, not behind NCCL's)."""
    found: dict[int, tuple[int, int, bool]] = {}
    for index, instr in enumerate(instrs):
        if instr.collective is None:
            continue
        answer = rule(instr)
        if isinstance(answer, Pipelined) and len(instr.deps) == 1:
            (producer,) = instr.deps
            if (
                is_gemm(instrs[producer])
                and producer not in found
                and instr.comm_bytes >= answer.splits
            ):
                found[producer] = (index, answer.splits, answer.ring)
    return found


def _ring_exchange(
    gemm: Instr, collective: Instr, tp: int, deps: tuple[int, ...], start: int
) -> list[Instr]:
    """``gemm`` and the reduce-scatter of its output as Transformer Engine's
    ``CommOverlapP2PBase::split_overlap_rs`` runs them (transformer_engine/common/
    comm_gemm_overlap/comm_gemm_overlap.cpp), placed from index ``start``: ``tp`` row chunks of
    the GEMM (``<gemm>.rchunk<i>``, each the partial sum destined for one rank, the last the
    rank's own); after GEMM chunk ``i`` is issued, chunk ``i-1``'s partial result is sent to
    its peer (``userbuffers_send`` on the copy engine, ``<collective>.rchunk<i-1>``: one
    ``1/tp`` share of the reduce-scatter's input, a point-to-point message), so ``tp - 1``
    sends; then the main stream waits for every chunk and send and sums the ``tp`` partial
    chunks (``reduce_bf16``, or ``reduce_fp8_in_bf16_out`` with FP8 buffers): one memory-bound
    kernel reading the whole 16-bit input of the reduce-scatter and writing its ``1/tp``
    output (``<collective>.reduce``), which the collective's dependents wait for."""
    result: list[Instr] = []
    gemm_at: list[int] = []
    sends: list[int] = []
    shard = collective.comm_bytes // tp
    for index in range(tp):
        chunk = _chunk(gemm, tp, index, deps)
        result.append(replace(chunk, name=f"{gemm.name}.rchunk{index}"))
        gemm_at.append(start + len(result) - 1)
        if index > 0:
            result.append(
                replace(collective, name=f"{collective.name}.rchunk{index - 1}",
                        deps=(gemm_at[index - 1],), comm_bytes=shard)
            )  # fmt: skip
            sends.append(start + len(result) - 1)
    ((out, _),) = gemm.outputs
    result.append(
        Instr(
            f"{collective.name}.reduce", collective.phase, "elementwise",
            bytes_read=collective.comm_bytes, bytes_written=shard,
            deps=(gemm_at[-1], *sends), inputs=((out, collective.comm_bytes),),
            outputs=((f"{out}.reduced", shard),),
        )
    )  # fmt: skip
    return result


def ring_exchange_chunks(shared: frozenset[Instr]) -> frozenset[Instr]:
    """The GEMM chunks of ``shared`` (:func:`overlap_block`) cut for a ring-exchange
    reduce-scatter (:func:`_ring_exchange` names them ``<gemm>.rchunk<i>``)."""
    return frozenset(i for i in shared if i.name.rpartition(".")[2].startswith("rchunk"))


def ring_exchange_send(instr: Instr) -> bool:
    """Whether ``instr`` is one of a ring-exchange reduce-scatter's sends
    (:func:`_ring_exchange`): a point-to-point copy of one partial chunk to a tensor-parallel
    peer, not a collective over the group."""
    return instr.collective is not None and instr.name.rpartition(".")[2].startswith("rchunk")


def _chunk(instr: Instr, splits: int, index: int, deps: tuple[int, ...]) -> Instr:
    """Chunk ``index`` of ``splits`` of a GEMM cut along the rows of its first operand and of
    its output (the second operand, the weight, is read whole by every chunk), or of a
    collective's bytes."""

    def share(total: int) -> int:
        return total // splits + (1 if index < total % splits else 0)

    name = f"{instr.name}.chunk{index}"
    if instr.collective is not None:
        return replace(instr, name=name, deps=deps, comm_bytes=share(instr.comm_bytes))
    (first, first_bytes), second = instr.inputs
    ((out, out_bytes),) = instr.outputs
    return replace(
        instr, name=name, deps=deps, flops=share(instr.flops),
        bytes_read=share(first_bytes) + second[1], bytes_written=share(out_bytes),
        inputs=((first, share(first_bytes)), second), outputs=((out, share(out_bytes)),),
    )  # fmt: skip


def apply_overlaps(
    instrs: Sequence[Instr], policy: TimingPolicy, rule: OverlapRule | None
) -> tuple[tuple[Instr, ...], frozenset[Instr]]:
    """A block's instructions as ``policy`` runs them, and the GEMMs that share the GPU with a
    userbuffers kernel (:func:`overlap_block`): the shared experts beside the dispatch
    (:attr:`Overlap.MOE_SHARED_EXPERT`), then the collectives ``rule`` (the policy's
    :func:`overlap_rule`, with :func:`~stage_explore.analytical.async_tp.
    async_grad_allreduce_rule`) takes off the path. The analytical backend times the result
    with :func:`~stage_explore.analytical.blocktime.time_block`."""
    if Overlap.MOE_SHARED_EXPERT in policy.overlaps:
        instrs = overlap_shared_experts(instrs)
    if rule is None:
        return tuple(instrs), frozenset()
    return overlap_block(instrs, rule)


UB_FREE_BLOCKS = frozenset({"embedding", "head", MTP_HEAD})
"""Blocks whose tensor-parallel collectives stay NCCL calls under :attr:`Overlap.TP_COMM`.
Transformer Engine registers userbuffers only for the transformer layer's linears
(``initialize_ub``: ``qkv``, ``proj``, ``fc1`` and ``fc2`` fprop/dgrad/wgrad, NVIDIA/
TransformerEngine transformer_engine/pytorch/module/base.py). Megatron-Core's vocab-parallel
embedding reduces its output with ``reduce_scatter_to_sequence_parallel_region`` (a
torch.distributed reduce-scatter; its gradient an all-gather) and its output layer is Megatron's
own ``tensor_parallel.ColumnParallelLinear`` (``GPTModel.__init__``), whose
``LinearWithGradAccumulationAndAsyncCommunication`` all-gathers the sequence-parallel input
with ``dist_all_gather_func`` before the GEMM and, in the backward, issues the input gradient's
reduce-scatter with ``async_op=True`` before the weight gradient (NVIDIA/Megatron-LM
megatron/core/tensor_parallel/layers.py at 000c4ac, models/gpt/gpt_model.py at 007562f); the
vocab-parallel loss's all-reduces are NCCL calls too. torchtitan compiles only the transformer
blocks (``apply_compile``), so async TP's fused kernels do not reach them either."""


def block_policy(policy: TimingPolicy, kind: str) -> TimingPolicy:
    """``policy`` as it applies to block ``kind``: without :attr:`Overlap.TP_COMM` for the
    embedding and the output layers (:data:`UB_FREE_BLOCKS`), whose tensor-parallel
    collectives run as the framework runs them without userbuffers; unchanged otherwise."""
    if kind in UB_FREE_BLOCKS and Overlap.TP_COMM in policy.overlaps:
        return replace(policy, overlaps=policy.overlaps - {Overlap.TP_COMM})
    return policy


def expert_tp_collective(instr: Instr) -> bool:
    """Whether ``instr`` is an expert-tensor-parallel all-gather or reduce-scatter of the routed
    tokens: of ``moe.tokens`` (the dispatched tokens, or their gradient) or of an ``experts.*``
    output (or its gradient), as :func:`~stage_explore.analytical.blocktime.routed_instr` names
    them.

    Megatron-Core runs these as plain NCCL calls on the compute stream, never with Transformer
    Engine's userbuffers: ``MoEAlltoAllTokenDispatcher`` runs "permute->A2A(EP)->AG(TP)->
    sort_chunk" and "sort_chunk->RS(TP)->A2A(EP)->unpermute"
    (``gather_from_sequence_parallel_region`` / ``reduce_scatter_to_sequence_parallel_region``
    over the experts' tp group, whose autograd backwards are the mirror reduce-scatter /
    all-gather; NVIDIA/Megatron-LM megatron/core/transformer/moe/token_dispatcher.py at
    0014f137, the same calls in the 0.9 / 0.10 releases' ``token_permutation`` /
    ``token_unpermutation``), and the experts' ``TELinear`` turns Transformer Engine's
    communication off (``explicit_expert_comm = is_expert and (tp_size > 1 or
    self.expert_parallel)``: parallel mode None, tp size 1) and its userbuffers with it
    ("# Disable ub overlap for experts.": ``ub_overlap_ag`` / ``ub_overlap_rs`` False when
    ``is_expert``; megatron/core/extensions/transformer_engine.py, ``TELinear.__init__``). So
    under ``--tp-comm-overlap`` the expert GEMMs wait for all of their tokens' all-gather, fc2
    is not split into pipelined chunks, and the combine waits for the whole reduce-scatter,
    forward and backward."""
    if instr.collective not in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER):
        return False
    tensor = instr.name.partition(":")[2].removeprefix("d.")
    return tensor == "moe.tokens" or tensor.startswith("experts.")


def overlap_rule(
    policy: TimingPolicy,
    tp: int,
    sp: bool,
    inner_tp: int | None = None,
    expert_tp_overlap: bool = False,
    ring_exchange: frozenset[str] = frozenset(),
) -> OverlapRule | None:
    """The collectives ``policy`` overlaps inside a block (:attr:`Overlap.TP_COMM`,
    :attr:`Overlap.MOE_COMM`), or None when it overlaps none:
    tensor-parallel all-gathers and reduce-scatters (sequence parallelism only, as Transformer
    Engine requires) with ``1/tp`` on the path, and expert-parallel all-to-alls fully.
    ``inner_tp``: the size of the mesh's ``tp`` axis when the lowering splits tp into sub-axes
    (``tpr``, ``tpo``, ``tp``: an expert tensor parallel size below tp,
    :mod:`stage_core.lower.experts`): the dense layers' collectives over them keep ``1/tp``.
    The experts' tensor-parallel all-gathers and reduce-scatters (:func:`expert_tp_collective`)
    stay on the path as Megatron-Core runs them unless
    ``expert_tp_overlap`` (PyTorch's async TP, :mod:`~stage_explore.analytical.
    micro_pipeline_tp`, not read for experts: kept as before), then the experts' over the inner
    ``tp`` alone with ``1/inner_tp``.
    Transformer Engine's userbuffers pipeline a forward reduce-scatter with the GEMM that
    produces it (:class:`Pipelined`; as a ring exchange over the group for the userbuffers
    names in ``ring_exchange``, :func:`ub_fprop_name`) and run a backward one beside the weight
    gradients (:class:`Bulk`)."""
    tp_overlap = Overlap.TP_COMM in policy.overlaps and sp and tp > 1  # userbuffers need SP
    moe_overlap = Overlap.MOE_COMM in policy.overlaps
    if not tp_overlap and not moe_overlap:
        return None
    expert_tp = inner_tp or tp  # the experts' own tp (the mesh's tp axis) on a split mesh

    def rule(instr: Instr) -> float | Pipelined | Bulk | None:
        kind = instr.collective
        if tp_overlap and not expert_tp_overlap and expert_tp_collective(instr):
            return None  # the dispatcher's own NCCL calls (expert_tp_collective)
        if tp_overlap and instr.axes in _TP_GROUPS and kind is CollectiveKind.REDUCE_SCATTER:
            # forward: pipelined with the GEMM producing it; backward: bulk beside the weight
            # gradients (defer_weight_gradients), its dependents wait for all of it
            if instr.phase == "bwd":
                return Bulk()
            if ub_fprop_name(instr) in ring_exchange:
                return Pipelined(expert_tp if instr.axes == ("tp",) else tp, ring=True)
            return Pipelined(UB_PIPELINE_SPLITS)
        if tp_overlap and instr.axes in _TP_GROUPS and kind is CollectiveKind.ALL_GATHER:
            return 1 / (expert_tp if instr.axes == ("tp",) else tp)
        if moe_overlap and kind is CollectiveKind.ALL_TO_ALL:
            return 0.0  # in training only the expert dispatch/combine are all-to-alls; their
            # group may be ep, ep×tp, ep×cp or, with the ep axis of size 1, cp alone
        return None

    return rule


def ub_fprop_name(instr: Instr) -> str:
    """The userbuffers name (:data:`RING_EXCHANGE_FPROP`) of a forward tensor-parallel
    reduce-scatter: ``fc2`` for the MLP's down projection (a tensor ``*.fc2``, Megatron-Core's
    ``linear_fc2``, whose ``ub_name`` is "fc2"), ``proj`` for the other (the attention's output
    projection, ``linear_proj``, ``ub_name`` "proj")."""
    tensor = instr.name.partition(":")[2]
    return "fc2" if "fc2" in tensor.split(".") else "proj"


def runs_outside_nccl(
    policy: TimingPolicy, tp: int, sp: bool, rule: OverlapRule | None
) -> Callable[[Instr], bool]:
    """Whether a block's collective (as :func:`apply_overlaps` rewrote it with ``rule``) runs
    outside NCCL, so that NCCL's per-call cost
    (:func:`~stage_explore.analytical.collectives.call_overhead_s`) is not its to pay: a
    tensor-parallel all-gather or reduce-scatter that ``rule`` overlaps under
    :attr:`Overlap.TP_COMM` — Transformer Engine's userbuffers kernels (``initialize_ub``: their
    own communicator over CUDA IPC / NVLink buffers, "ring_exchange" copies, "pipeline" and
    "bulk" kernels) or, under ``micro_pipeline_tp``, PyTorch's symmetric-memory
    ``fused_all_gather_matmul`` / ``fused_matmul_reduce_scatter`` (copy-engine writes into
    peers' buffers). A collective the rule leaves alone (``micro_pipeline_tp``'s unfused
    reduce-scatters; the embedding's and output layers', whose ``policy`` is
    :func:`block_policy`'s, without the option), Megatron's asynchronous tp all-reduce and every
    other group's collective are NCCL calls."""
    tp_overlap = Overlap.TP_COMM in policy.overlaps and sp and tp > 1  # as overlap_rule's

    def outside(instr: Instr) -> bool:
        return (
            tp_overlap
            and rule is not None
            and instr.axes in _TP_GROUPS
            and instr.collective in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)
            and rule(instr) is not None
        )

    return outside


def flat_ring_s(
    system: System, kind: CollectiveKind, size_bytes: int, group: Sequence[int]
) -> float:
    """α–β time of a collective run as one ring over all of ``group`` on the slowest network
    dim it spans (every hop at that dim's per-rank bandwidth); ``size_bytes`` as in
    :func:`~stage_explore.analytical.collectives.alpha_beta_collective_s`, as are NCCL's two
    protocols (the smaller of the Simple and LL times)."""
    ranks = len(group)
    if ranks < 2:
        return 0.0
    span = group_span(system.dim_sizes, group)
    dim = system.network[span.dims[-1]]
    buffer = size_bytes * ranks if kind is CollectiveKind.ALL_GATHER else size_bytes
    algorithm = dim.algorithms.for_kind(kind)
    spanned = span.counts[span.dims[-1]]  # the nodes (ranks of that dim) the ring crosses
    overhead = call_overhead_s(system.network, span.dims)  # NCCL's, once per call
    simple = overhead + _level_s(kind, algorithm, ranks, float(buffer), dim, spanned)
    low = low_latency_overhead_s(system.network, span.dims)  # NCCL's LL protocol, if faster
    if low is None or kind is CollectiveKind.ALL_TO_ALL:
        return simple
    share = low_latency_share(kind, len(span.dims))
    return min(simple, low + _level_s(kind, algorithm, ranks, float(buffer), dim, spanned, share))
