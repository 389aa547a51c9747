"""Small ready-made trace sets, for tests, demos and checking a simulator set-up.

Holds :func:`sample_run_programs`: the 4-rank workload of the real ASTRA-sim run kept in
``tests/fixtures/astra-sim/sample-run`` (2×2 network, TP groups [0, 1] and [2, 3], a
pipeline transfer from ranks 0, 1 to ranks 2, 3, a data-parallel all-gather over all ranks), as
STAGE trace nodes. Written with :func:`~stage_core.chakra.writer.write_trace_set` it gives a
trace set equivalent to that run's input files (same nodes and groups; the attribute integer
kinds and order differ, which ASTRA-sim does not care about).
"""

from __future__ import annotations

from stage_core.trace import CollectiveKind, NodeKind, TraceNode

_MIB = 1 << 20
_N = 4096


def sample_run_programs() -> dict[int, tuple[TraceNode, ...]]:
    """Rank → nodes of the ASTRA-sim sample run (see the module docstring)."""
    programs: dict[int, tuple[TraceNode, ...]] = {}
    for rank in range(4):
        tp_group = (0, 1) if rank < 2 else (2, 3)
        if rank < 2:
            transfer = TraceNode(
                3,
                "pp_send_act",
                NodeKind.SEND,
                data_deps=(2,),
                comm_bytes=16 * _MIB,
                peer=rank + 2,
                tag=7,
            )
        else:
            transfer = TraceNode(
                3,
                "pp_recv_act",
                NodeKind.RECV,
                data_deps=(2,),
                comm_bytes=16 * _MIB,
                peer=rank - 2,
                tag=7,
            )
        programs[rank] = (
            TraceNode(1, "fwd_matmul", NodeKind.COMP, flops=2 * _N**3, tensor_bytes=3 * _N**2 * 2),
            TraceNode(
                2,
                "tp_all_reduce",
                NodeKind.COLL,
                data_deps=(1,),
                collective=CollectiveKind.ALL_REDUCE,
                comm_bytes=64 * _MIB,
                group=tp_group,
            ),
            transfer,
            TraceNode(
                4,
                "dp_all_gather",
                NodeKind.COLL,
                data_deps=(3,),
                collective=CollectiveKind.ALL_GATHER,
                comm_bytes=8 * _MIB,
                group=None,
            ),
            TraceNode(
                5,
                "bwd_matmul",
                NodeKind.COMP,
                data_deps=(4,),
                flops=4 * _N**3,
                tensor_bytes=3 * _N**2 * 2,
            ),
        )
    return programs
