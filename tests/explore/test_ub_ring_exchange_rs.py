"""Transformer Engine's ring-exchange forward reduce-scatter (``ub_proj_fprop_method`` /
``ub_fc2_fprop_method`` ``ring_exchange``): ``CommOverlapP2PBase::split_overlap_rs`` cuts the
GEMM into ``tp`` row chunks, sends ``tp - 1`` partial chunks to their peers while the next
chunk computes, and sums the ``tp`` partials with one memory-bound kernel that the
reduce-scatter's readers wait for (:func:`~stage_explore.analytical.overlap._ring_exchange`)."""

from __future__ import annotations

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_core.trace import CollectiveKind
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.fp8_casts import launches_casts
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.overlap import (
    UB_PIPELINE_SPLITS,
    OverlapRule,
    overlap_block,
    overlap_rule,
    pipelined_chunks,
    ring_exchange_chunks,
    ring_exchange_send,
)
from stage_explore.analytical.policy import TimingPolicy
from stage_explore.system import load_system
from tests.explore.package_cases import package_cases

TP = 4
OUT = 4096  # bytes of the GEMM's partial output (the reduce-scatter's input)


def _forward(tensor: str) -> list[Instr]:
    gemm = Instr(
        tensor, "fwd", "einsum", flops=8000,
        inputs=(("x", 4000), ("w", 4000)), outputs=((f"{tensor}.partial", OUT),),
    )  # fmt: skip
    scatter = Instr(
        f"reduce_scatter:{tensor}", "fwd", "comm", collective=CollectiveKind.REDUCE_SCATTER,
        axes=("tp",), comm_bytes=OUT, deps=(0,),
    )  # fmt: skip
    norm = Instr("norm", "fwd", "elementwise", bytes_read=OUT // TP, bytes_written=OUT // TP,
                 deps=(1,))  # fmt: skip
    return [gemm, scatter, norm]


def _rule(ring: frozenset[str]) -> OverlapRule:
    policy = TimingPolicy.from_profile(get_framework("megatron-core"))
    rule = overlap_rule(policy, tp=TP, sp=True, ring_exchange=ring)
    assert rule is not None
    return rule


def test_ring_exchange_cuts_tp_chunks_sends_all_but_the_own_and_reduces_once() -> None:
    instrs, shared = overlap_block(_forward("mlp.fc2"), _rule(frozenset({"fc2"})))
    chunks = ring_exchange_chunks(shared)
    assert len(chunks) == TP and not pipelined_chunks(shared)
    assert sum(c.flops for c in chunks) == 8000
    sends = [i for i in instrs if ring_exchange_send(i)]
    assert len(sends) == TP - 1  # the last chunk is the rank's own
    assert all(s.comm_bytes == OUT // TP for s in sends)  # one destination's share each
    gemms = [k for k, i in enumerate(instrs) if i in chunks]
    for send, producer in zip(sends, gemms, strict=False):  # send i after GEMM chunk i
        assert send.deps == (producer,)
    (reduce,) = [i for i in instrs if i.name.endswith(".reduce")]
    assert reduce.kind == "elementwise" and reduce.collective is None
    assert (reduce.bytes_read, reduce.bytes_written) == (OUT, OUT // TP)  # tp partials in, 1 out
    at = instrs.index(reduce)
    assert set(reduce.deps) == {gemms[-1], *(instrs.index(s) for s in sends)}
    assert instrs[-1].name == "norm" and instrs[-1].deps == (at,)  # readers wait for the sum
    assert all(launches_casts(c.name) == c.name.endswith("rchunk0") for c in chunks)


def test_the_method_is_per_userbuffers_name() -> None:
    ring = frozenset({"proj"})
    _, shared = overlap_block(_forward("mlp.fc2"), _rule(ring))  # fc2 keeps the pipeline
    assert len(pipelined_chunks(shared)) == UB_PIPELINE_SPLITS and not ring_exchange_chunks(shared)
    _, shared = overlap_block(_forward("attn.proj"), _rule(ring))
    assert len(ring_exchange_chunks(shared)) == TP and not pipelined_chunks(shared)


def _step(options: dict[str, object]) -> float:
    model = get_flavor("llama3-8b").with_overrides(layers=2)
    parallel = ParallelConfig(tp=TP, dp=1, sp=True, global_batch=1, micro_batch=1)
    backend = AnalyticalBackend(framework="megatron-core", overrides=options)
    return backend.evaluate(model, parallel, load_system("b200")).step_time_s


def test_ring_exchange_changes_the_step_and_only_with_tensor_parallel_overlap() -> None:
    ring = {"ub_proj_fprop_method": "ring_exchange", "ub_fc2_fprop_method": "ring_exchange"}
    assert _step(ring) != _step({})
    assert _step({**ring, "tp_comm_overlap": False}) == _step({"tp_comm_overlap": False})


@pytest.mark.parametrize("option", ["ub_proj_fprop_method", "ub_fc2_fprop_method"])
def test_an_unknown_method_is_a_one_line_error(option: str) -> None:
    with pytest.raises(ConfigError, match=option):
        get_framework("megatron-core").with_overrides({option: "bulk"})


def test_rows_whose_recipe_config_names_ring_exchange_set_it() -> None:
    """The Megatron-Bridge FP8 configs (``userbuffers_fp8_*``) run both as ring exchanges; NeMo's
    H100 FP8 Llama configs keep the pipeline, its GPT-3 175B one only fc2_fprop."""
    options = {c.id: dict(c.framework_options) for c in package_cases()}
    both = {"ub_proj_fprop_method": "ring_exchange", "ub_fc2_fprop_method": "ring_exchange"}
    for row in ("MBD-H100-25.11-LLAMA3_70B", "MBD-B200-25.11-LLAMA3.1_405B-CS",
                "NEMO2502-B200-LLAMA3-405B"):  # fmt: skip
        assert both.items() <= options[row].items(), row
    assert "ub_proj_fprop_method" not in options["NEMO2502-H100-GPT3-175B"]
    assert options["NEMO2502-H100-GPT3-175B"]["ub_fc2_fprop_method"] == "ring_exchange"
    assert "ub_fc2_fprop_method" not in options["DGXC2504-H100-FP8-LLAMA3.1-70B-64"]
    assert "ub_fc2_fprop_method" not in options["MBD-GB200-26.02-LLAMA3_70B-MX"]  # bf16 config
