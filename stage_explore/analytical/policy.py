"""The timing policy: how the timing engine runs a rank's program, as one value.

Holds :class:`TimingPolicy` and its vocabularies (:class:`IssuePolicy`,
:class:`CollectiveStart`, :class:`PointToPoint`, :class:`Overlap`), :meth:`TimingPolicy.
from_profile` (the policy of a :class:`~stage_explore.analytical.framework_profile.
FrameworkProfile`) and :data:`ASTRA_SIM_POLICY` (ASTRA-sim's execution rules).

Every timing piece of the project shares one semantics (docs/analytical.md, "The timing
engine"): a rank owns streams, a node runs on one stream, starts when the issue rule lets its
stream take it and its dependencies are done, and lasts what the cost model says. What differs
between the analytical backend under each framework and ASTRA-sim is a policy:

- ``issue`` — which node a free stream takes next: the next in program order once it is ready
  (CUDA streams; :func:`~stage_explore.analytical.blocktime.time_block`) or any ready node,
  lowest id first (ASTRA-sim);
- ``collective_start`` — a collective starts when this rank issues it (symmetric ranks: one rank
  stands for its group, the analytical backend) or when every member has (a rendezvous,
  :func:`~stage_explore.analytical.tracesim.simulate`);
- ``point_to_point`` — what a pipeline transfer holds (:class:`PointToPoint`);
- ``collectives_wait_for_issued_compute`` — a collective starts only once the compute issued
  before it on the rank has finished (``torch.distributed`` on the compute stream: the NCCL
  stream waits for the issuing stream), not as soon as its own inputs are ready (profile
  option of the same name);
- ``side_streams`` — gradient synchronisation and ZeRO's collectives run on communication
  streams of their own beside the blocks' collectives (each process group's NCCL work runs on
  its own CUDA stream: pytorch ``torch/lib/c10d/ProcessGroupNCCL.hpp``, "each NCCL call is
  scheduled on a separate CUDA stream"), as the analytical backend's levelled mode times them
  (:func:`~stage_explore.analytical.blocktime.sync_timing`, :func:`~stage_explore.analytical.
  blocktime.chunk_timing`), or share the rank's one communication slot (ASTRA-sim);
- ``p2p_scatter_gather`` — without sequence parallelism a stage sends ``1/tp`` of an activation
  and the receiver all-gathers it over tp;
- ``overlaps`` — the communication the framework takes off the critical path, each a rewrite of
  the program before timing (:mod:`~stage_explore.analytical.overlap`,
  :mod:`~stage_explore.analytical.async_tp`) or a stream of its own above the block level
  (bucketed gradient reduction, the next step's parameter gather).

The framework profile is the policy plus options that change costs and bytes (kernels, bucket
sizes, ZeRO-3 gathers, memory); the timing code reads the policy, never the profile's timing
flags. A new timing flag of a profile gets a field here (an :class:`Overlap` member named after
the option, or a field of its own) and :meth:`TimingPolicy.from_profile` maps it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from stage_explore.analytical.framework_profile import FrameworkProfile


class IssuePolicy(StrEnum):
    """Which node a free slot takes next: any ready node, lowest id first (ASTRA-sim), or the
    slot's next node in id order once it is ready (CUDA streams)."""

    READY_FIRST = "ready-first"
    IN_ORDER = "in-order"


class CollectiveStart(StrEnum):
    """When a collective starts: at this rank's issue, the group's members being symmetric
    (``local``), or once every member has issued it (``rendezvous``)."""

    LOCAL = "local"
    RENDEZVOUS = "rendezvous"


class PointToPoint(StrEnum):
    """What an activation transfer between pipeline stages holds.

    ``blocking``: the sender's stream holds the transfer and the receiver waits for it
    (Megatron-LM's ``batch_isend_irecv`` then a synchronise, profile option
    ``pipeline_p2p_blocking``); ``blocking-separate``: the send and the matching receive are
    separate blocking instructions, each holding its rank while the message crosses (DeepSpeed's
    ``PipelineEngine``, ``pipeline_p2p_separate``); ``overlapped``: transfers run beside compute,
    only their latency is exposed (Megatron-Core ``--overlap-p2p-communication``); ``arrival``:
    a send holds the communication slot until its message arrives and a receive ends at the
    later of its issue and the arrival (ASTRA-sim).
    """

    BLOCKING = "blocking"
    BLOCKING_SEPARATE = "blocking-separate"
    OVERLAPPED = "overlapped"
    ARRIVAL = "arrival"


class Overlap(StrEnum):
    """Communication a framework takes off the critical path; each value is the
    :class:`~stage_explore.analytical.framework_profile.FrameworkProfile` option that switches
    it on (its docstring says what each does)."""

    GRAD_REDUCE = "overlap_grad_reduce"
    PARAM_GATHER = "overlap_param_gather"
    TP_COMM = "tp_comm_overlap"
    TP_ASYNC_GRAD_ALLREDUCE = "tp_async_grad_allreduce"
    MOE_COMM = "moe_comm_overlap"
    MOE_SHARED_EXPERT = "moe_shared_expert_overlap"


@dataclass(frozen=True, slots=True, kw_only=True)
class TimingPolicy:
    """How the timing engine runs a rank's program (module docstring)."""

    issue: IssuePolicy
    collective_start: CollectiveStart
    point_to_point: PointToPoint
    p2p_scatter_gather: bool
    overlaps: frozenset[Overlap]
    collectives_wait_for_issued_compute: bool = False
    side_streams: bool = False

    @classmethod
    def from_profile(cls, profile: FrameworkProfile) -> TimingPolicy:
        """The analytical backend's policy under ``profile``: CUDA streams (in order), symmetric
        ranks (local collective start), the profile's transfers and overlaps."""
        if not profile.pipeline_p2p_blocking:
            point_to_point = PointToPoint.OVERLAPPED
        elif profile.pipeline_p2p_separate:
            point_to_point = PointToPoint.BLOCKING_SEPARATE
        else:
            point_to_point = PointToPoint.BLOCKING
        return cls(
            issue=IssuePolicy.IN_ORDER,
            collective_start=CollectiveStart.LOCAL,
            point_to_point=point_to_point,
            p2p_scatter_gather=profile.pipeline_scatter_gather,
            overlaps=frozenset(o for o in Overlap if getattr(profile, o.value)),
            collectives_wait_for_issued_compute=profile.collectives_wait_for_issued_compute,
            side_streams=True,
        )

    def overlapped(self, overlap: Overlap) -> bool:
        """Whether this policy takes ``overlap`` off the critical path."""
        return overlap in self.overlaps

    def describe(self) -> str:
        """One line for people: the policy's values."""
        overlaps = ", ".join(sorted(self.overlaps)) or "none"
        scatter = ", p2p scatter/gather" if self.p2p_scatter_gather else ""
        waits = ""
        if self.collectives_wait_for_issued_compute:
            waits = ", collectives after issued compute"
        if self.side_streams:
            waits += ", gradient sync and ZeRO on side streams"
        return (
            f"issue {self.issue}{waits}, collective start {self.collective_start}, "
            f"point-to-point {self.point_to_point}{scatter}; overlaps: {overlaps}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "issue": str(self.issue),
            "collective_start": str(self.collective_start),
            "point_to_point": str(self.point_to_point),
            "p2p_scatter_gather": self.p2p_scatter_gather,
            "overlaps": sorted(str(o) for o in self.overlaps),
            "collectives_wait_for_issued_compute": self.collectives_wait_for_issued_compute,
            "side_streams": self.side_streams,
        }


#: ASTRA-sim's execution rules (docs/reference/chakra_et.md, "How ASTRA-sim runs a rank's
#: trace"): ready nodes issued lowest id first, collectives at the rendezvous of their group,
#: sends ending when their message arrives; the traces' dependencies are run as written (no
#: rewrite: what overlaps is what the trace's dependencies allow).
ASTRA_SIM_POLICY = TimingPolicy(
    issue=IssuePolicy.READY_FIRST,
    collective_start=CollectiveStart.RENDEZVOUS,
    point_to_point=PointToPoint.ARRIVAL,
    p2p_scatter_gather=False,
    overlaps=frozenset(),
)
