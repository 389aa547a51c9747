"""Communication costs of the analytical backend: the groups a collective spans per pipeline
stage, α–β collectives over the network dims they span (memoised by that span), DeepEP's
expert all-to-alls, ZeRO-3 gathers and scatters, ring-attention and context-parallel
messages, the tied embedding's gradient all-reduce and the activation transfer between
pipeline stages.

:class:`CommCosting` is a mixin of :class:`~stage_explore.analytical.costing.BlockCosting`
(the analytical backend owns the memo, the framework profile and its timing policy it reads).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from stage_core.lower.bind import Instr
from stage_core.lower.compact import Runs
from stage_core.lower.program import (
    PIPELINE_ENDS,
    boundary_bytes,
    shared_embedding_weights,
)
from stage_core.trace import CollectiveKind
from stage_explore.analytical.collectives import (
    alpha_beta_collective_s,
    alpha_beta_point_to_point_s,
    group_span,
)
from stage_explore.analytical.costing_states import BF16_BYTES
from stage_explore.analytical.costs import (
    stage_arrival_s,
    stage_transfer_s,
)
from stage_explore.analytical.deepep import deepep_level_fractions
from stage_explore.analytical.ep_domain import domain_group, one_domain_group
from stage_explore.analytical.framework_profile import FP32_BYTES, FrameworkProfile
from stage_explore.analytical.hybridep import hybridep_dispatch_kernel, hybridep_level_rates
from stage_explore.analytical.overlap import (
    flat_ring_s,
    ring_exchange_send,
)
from stage_explore.analytical.parts import (
    Memo,
    Point,
    tied_ends,
)
from stage_explore.analytical.policy import PointToPoint, TimingPolicy
from stage_explore.analytical.profile_moe import FP8_DISPATCH_BYTES_PER_ELEMENT
from stage_explore.analytical.ub_multicast import nvls_collective_s

#: Names of the expert dispatch/combine all-to-alls and their gradients (blocks._moe: the routed
#: tokens ``moe.tokens`` and the experts' outputs ``experts.fc2``).
EXPERT_ALL_TO_ALL = ("moe.tokens", "experts.")


class CommCosting:
    """The memoised communication costs of the analytical backend (module docstring)."""

    framework: FrameworkProfile
    policy: TimingPolicy  # the framework's timing policy: what the timing code reads
    _parts: Memo

    def _tied_sync_s(self, point: Point, runs: Runs, spans: dict[tuple[str, ...], Any]) -> float:
        """The tied word embedding's gradient all-reduce between the pipeline ends, for a chunk
        holding the embedding or the head (``stage_core.lower.program._tied_embedding_sync``)."""
        workload = point.workload
        if not tied_ends(workload):
            return 0.0
        seconds = 0.0
        shared = shared_embedding_weights(workload.model)
        holders = {kind for kind, _ in shared}
        for kind, _ in runs:
            if kind not in holders:  # a layer: none of its weights is a copy of the table
                continue
            for weight in point.blocks[kind].weights:
                if (kind, weight.name) in shared:
                    size = weight.elements * workload.grad_bytes
                    span = spans[(PIPELINE_ENDS,)]
                    seconds += self._collective_time(point, span, CollectiveKind.ALL_REDUCE, size)
        return seconds

    def _spans(self, point: Point, axes: tuple[str, ...]) -> tuple[Any, ...]:
        """Per pipeline stage: (what the α–β time of a group over ``axes`` depends on — its
        size, ranks per network dim, regularity, smallest blocks —, a representative group, its
        rank). Under ``moe_hybridep`` with ``moe_hybridep_domain_ranks`` the group over the
        expert-parallel axes is HybridEP's placement of it
        (:func:`~stage_explore.analytical.ep_domain.domain_group`), its rank the stage's own;
        under ``moe_ep_one_domain`` it is the whole group in one scale-up domain
        (:func:`~stage_explore.analytical.ep_domain.one_domain_group`)."""
        workload, table, system = point.workload, point.table, point.system

        def compute() -> tuple[Any, ...]:
            result = []
            per_domain = self.framework.moe_hybridep_domain_ranks
            expert = sorted(axes) == sorted(workload.expert_axes)
            placed = self.framework.moe_hybridep and per_domain > 0 and expert
            one_domain = self.framework.moe_ep_one_domain and expert
            for stage in range(workload.parallel.pp):
                rank = workload.mesh.rank_of({"pp": stage})
                group = table.group(rank, axes)
                if one_domain:  # a symmetric-memory dispatch's group: one NVLink domain
                    group = one_domain_group(group, system.dim_sizes)
                elif placed:  # HybridEP's group: n ranks per NVLink domain (ep_domain)
                    group = domain_group(group, per_domain, system.dim_sizes)
                span = group_span(system.dim_sizes, group)
                result.append(((len(group), span.counts, span.regular, span.blocks), group, rank))
            return tuple(result)

        key = ("spans", point.token, table.names, table.shape, axes)
        return self._parts.get(key, compute)  # type: ignore[no-any-return]

    def _collective_time(
        self,
        point: Point,
        span: Any,
        kind: CollectiveKind,
        size: int,
        scale_out: float = 1.0,
        pipelined: bool = False,
        fractions: tuple[float, ...] = (),
        nccl: bool = True,
        rates: tuple[float | None, ...] = (),
    ) -> float:
        shape, group, _ = span
        key = ("comm", point.token, shape, kind, size, scale_out, pipelined, fractions, nccl)
        return self._parts.get(  # type: ignore[no-any-return]
            (*key, rates),
            lambda: alpha_beta_collective_s(
                point.system, kind, size, group, scale_out, pipelined, fractions, nccl=nccl,
                level_rates=rates,
            ),
        )  # fmt: skip

    def _deepep_all_to_all(self, point: Point, instr: Instr) -> bool:
        """Whether ``instr`` is an expert dispatch/combine all-to-all run on DeepEP or on
        HybridEP (``moe_hybridep``: DeepEP's traffic at its own rates)."""
        flex = self.framework.moe_deepep or self.framework.moe_hybridep
        if not (flex and instr.collective is CollectiveKind.ALL_TO_ALL):
            return False
        model = point.workload.model
        return model.is_moe and any(tag in instr.name for tag in EXPERT_ALL_TO_ALL)

    def _deepep_fractions(self, point: Point, span: Any, instr: Instr) -> tuple[float, ...]:
        """DeepEP's share of an expert all-to-all's bytes on each level its group spans
        (``moe_deepep``; :func:`~stage_explore.analytical.deepep.deepep_level_fractions`: a
        token sent once per destination rank inside a node and once per destination node
        across nodes, experts contiguous on the ranks; the router ``moe_fake_balanced_gate``
        or random balanced routing, group-limited where the model is); empty for every other
        collective and for a group that is not a full sub-grid of the dims it spans (all bytes
        on one flat level)."""
        model = point.workload.model
        if not self._deepep_all_to_all(point, instr):
            return ()
        (_, counts, regular, _), _, _ = span
        spanned = [count for count in counts if count > 1]
        if not regular or not spanned:
            return ()
        routing = "round_robin" if self.framework.moe_fake_balanced_gate else "random"
        groups = (model.router_groups, model.router_group_topk)  # group-limited routing
        return deepep_level_fractions(model.num_experts, model.top_k, spanned, routing, groups)

    def _fp8_dispatch(self, point: Point, instr: Instr) -> Instr:
        """``instr`` with FP8 message bytes where ``moe_fp8_dispatch`` sends it in FP8: a
        DeepEP all-to-all run by the dispatch kernel (the forward dispatch, the combine's
        gradient: :func:`~stage_explore.analytical.hybridep.hybridep_dispatch_kernel`) whose
        receiving GEMM is FP8 (the experts' up projection's Fprop, their down projection's
        Dgrad): :data:`~stage_explore.analytical.profile_moe.FP8_DISPATCH_BYTES_PER_ELEMENT`
        per 16-bit element (DeepSeek-V3 report, Section 3.3.4); every other collective as it
        is."""
        if not self.framework.moe_fp8_dispatch or point.dtype != "fp8":
            return instr
        if not self._deepep_all_to_all(point, instr) or not hybridep_dispatch_kernel(instr.name):
            return instr
        gradient = (instr.name.partition(":")[2] or instr.name).startswith("d.")
        gemm = "dgrad" if gradient else "fprop"
        if gemm not in point.workload.parallel.fp8_gemms:
            return instr
        elements = instr.comm_bytes / BF16_BYTES  # the graph's 16-bit activations
        return replace(instr, comm_bytes=round(elements * FP8_DISPATCH_BYTES_PER_ELEMENT))

    def _hybridep_rates(self, point: Point, span: Any, instr: Instr) -> tuple[float | None, ...]:
        """Under ``moe_hybridep``, HybridEP's published rate per level a DeepEP-costed expert
        all-to-all spans (None: the dim's own;
        :func:`~stage_explore.analytical.hybridep.hybridep_level_rates`); empty otherwise."""
        if not self.framework.moe_hybridep:
            return ()
        system = point.system
        (members, counts, _, _), _, _ = span
        dims = [system.network[index] for index, count in enumerate(counts) if count > 1]
        dispatch = hybridep_dispatch_kernel(instr.name)
        hbm = system.accelerator.achieved_memory_bandwidth_bytes_per_s
        sms = self.framework.moe_hybridep_sms
        return hybridep_level_rates(system.name, dims, members, dispatch, hbm, sms)

    def _zero_time(self, point: Point, span: Any, instr: Instr, calls: int = 1) -> float:
        """A ZeRO-3 gather or gradient scatter: hierarchical over the dims its group spans, or
        one flat ring at the slowest dim's bandwidth under ``zero3_flat_ring``. Under
        ``fsdp_param_fp32`` a gather moves the fp32 parameters (4 bytes per element). Issued
        as ``calls`` NCCL calls (DeepSpeed ZeRO-3's prefetch batches,
        :func:`~stage_explore.analytical.framework_costs.zero3_fetch_calls`), each moves its
        share of the bytes and pays the per-call cost and latency; 0 calls (every weight
        persistent) cost nothing."""
        if calls == 0:
            return 0.0
        if calls > 1:
            share = replace(instr, comm_bytes=instr.comm_bytes // calls)
            return calls * self._zero_time(point, span, share)
        weight_bytes = point.workload.weight_bytes
        if (
            self.framework.fsdp_param_fp32
            and instr.collective is CollectiveKind.ALL_GATHER
            and weight_bytes < FP32_BYTES
        ):
            instr = replace(instr, comm_bytes=instr.comm_bytes * FP32_BYTES // weight_bytes)
        if not self.framework.zero3_flat_ring or instr.collective is None:
            return self._comm_time(point, span, instr)
        shape, group, _ = span
        kind, size = instr.collective, instr.comm_bytes
        return self._parts.get(  # type: ignore[no-any-return]
            ("flat", point.token, shape, kind, size),
            lambda: flat_ring_s(point.system, kind, size, group),
        )

    def _comm_time(self, point: Point, span: Any, instr: Instr, nccl: bool = True) -> float:
        """α–β time of a collective or ring exchange, memoised by the dims its group spans.
        ``nccl`` False: the collective does not run on NCCL and pays none of its per-call cost
        (:func:`~stage_explore.analytical.overlap.runs_outside_nccl`); nor does a DeepEP
        dispatch or combine (its own kernels over NVLink and RDMA)."""
        if instr.kind != "ring":
            instr = self._fp8_dispatch(point, instr)  # moe_fp8_dispatch: FP8 messages
            assert instr.collective is not None
            fractions = self._deepep_fractions(point, span, instr)  # DeepEP: levels at once
            if not fractions:
                nccl = nccl and not self._deepep_all_to_all(point, instr)
                return self._collective_time(
                    point, span, instr.collective, instr.comm_bytes, nccl=nccl
                )
            return self._collective_time(
                point, span, instr.collective, instr.comm_bytes, pipelined=True,
                fractions=fractions, nccl=False,
                rates=self._hybridep_rates(point, span, instr),
            )  # fmt: skip
        system, rank = point.system, span[2]  # ring attention: messages to the next cp rank
        (axis,) = instr.axes
        (peer,) = point.table.shifted(np.array([rank]), axis, 1)
        a, b = system.coordinates(rank), system.coordinates(peer)
        dim = next(i for i in range(len(a)) if a[i] != b[i])
        return self._parts.get(  # type: ignore[no-any-return]
            ("ring", point.token, dim, instr.comm_bytes, instr.ring_steps),
            lambda: (
                instr.ring_steps * alpha_beta_point_to_point_s(system, rank, peer, instr.comm_bytes)
            ),
        )

    def _ring_exchange_sends(
        self, point: Point, spans: dict[tuple[str, ...], Any], comm_s: Callable[[Instr], float]
    ) -> Callable[[Instr], float]:
        """``comm_s`` with a ring-exchange reduce-scatter's sends
        (:func:`~stage_explore.analytical.overlap.ring_exchange_send`) timed as what they are,
        one copy of ``comm_bytes`` to a tensor-parallel peer (α–β point to point to the next
        rank of the group's innermost axis), memoised."""
        system = point.system

        def timed(instr: Instr) -> float:
            if not ring_exchange_send(instr):
                return comm_s(instr)
            rank = spans[instr.axes][2]
            axis = instr.axes[-1]
            (peer,) = point.table.shifted(np.array([rank]), axis, 1)
            a, b = system.coordinates(rank), system.coordinates(int(peer))
            dim = next((i for i in range(len(a)) if a[i] != b[i]), len(a) - 1)
            return self._parts.get(  # type: ignore[no-any-return]
                ("ub_send", point.token, dim, instr.comm_bytes),
                lambda: alpha_beta_point_to_point_s(system, rank, int(peer), instr.comm_bytes),
            )

        return timed

    def _ub_multicast(
        self,
        point: Point,
        spans: dict[tuple[str, ...], Any],
        comm_s: Callable[[Instr], float],
        multicast: Callable[[Instr], bool],
    ) -> Callable[[Instr], float]:
        """``comm_s`` with Transformer Engine's userbuffers multicast kernels (``multicast``,
        :func:`~stage_explore.analytical.ub_multicast.ub_multicast_collective`) timed as
        NVLink SHARP moves them (:func:`~stage_explore.analytical.ub_multicast.
        nvls_collective_s`), memoised; as before where the group's dim has no multicast."""
        system = point.system

        def timed(instr: Instr) -> float:
            if instr.collective is None or not multicast(instr):
                return comm_s(instr)
            shape, group, _ = spans[instr.axes]
            kind, size = instr.collective, instr.comm_bytes
            seconds = self._parts.get(
                ("ub_multicast", point.token, shape, kind, size),
                lambda: nvls_collective_s(system, kind, size, group),
            )
            return comm_s(instr) if seconds is None else float(seconds)

        return timed

    def _cp_message(
        self, point: Point, spans: dict[tuple[str, ...], Any]
    ) -> Callable[[int], float]:
        """Seconds of one point-to-point message of the given bytes from this rank to the next
        context-parallel rank (torch ``context_parallel``'s gradient ring), memoised."""
        span = spans.get(("cp",))
        if span is None:
            return lambda size: 0.0
        system, rank = point.system, span[2]
        (peer,) = point.table.shifted(np.array([rank]), "cp", 1)
        a, b = system.coordinates(rank), system.coordinates(int(peer))
        dim = next(i for i in range(len(a)) if a[i] != b[i])
        return lambda size: self._parts.get(
            ("cp_message", point.token, dim, size),
            lambda: alpha_beta_point_to_point_s(system, rank, int(peer), size),
        )

    def _transfer(self, point: Point, ranks: tuple[int, int] | None = None) -> tuple[float, float]:
        """One activation (or gradient) message between adjacent stages: what it holds the
        sender (:func:`~stage_explore.analytical.costs.stage_transfer_s`) and how long it
        delays the receiver beyond that (:func:`~stage_explore.analytical.costs.
        stage_arrival_s`), memoised; between the first two stages' ranks (the levelled mode's
        every transfer) or the sender and receiver ``ranks`` (the trace mode's sends)."""
        workload, system = point.workload, point.system
        mesh, tp = workload.mesh, workload.axis_sizes["tp"]
        size = boundary_bytes(workload)
        policy = self.policy
        gathered = tp > 1 and not workload.flags.sp and policy.p2p_scatter_gather
        if ranks is None:
            first, second = mesh.rank_of({"pp": 0}), mesh.rank_of({"pp": 1})
        else:
            first, second = ranks
        semantics = policy.point_to_point  # blocking (Megatron), separate (DeepSpeed), overlapped
        if semantics is PointToPoint.OVERLAPPED and str(workload.parallel.schedule) == "1f1b":
            # Megatron-Core overlaps pipeline transfers only in its interleaved schedule:
            # forward_backward_pipelining_without_interleaving raises "Non-interleaved pipeline
            # parallelism does not support overlapping p2p communication" and runs blocking
            # send_forward / send_forward_recv_backward calls (pipeline_parallel/schedules.py)
            semantics = PointToPoint.BLOCKING
        ends = (system.coordinates(first), system.coordinates(second))
        mesh_key = (point.table.names, point.table.shape)
        key = ("transfer", point.token, mesh_key, ends, size, tp, gathered, semantics)
        scatter = tp if gathered else 1
        ends_ranks = (first, second)
        return self._parts.get(  # type: ignore[no-any-return]
            key,
            lambda: (
                stage_transfer_s(system, point.table, ends_ranks, size, scatter, semantics),
                stage_arrival_s(system, point.table, ends_ranks, size, scatter, semantics),
            ),
        )
