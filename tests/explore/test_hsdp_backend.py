"""Hybrid sharding (HSDP, ``dp_shard``) in the analytical backend and on the command line.

The generator's side (collectives and memory against closed forms) is in
``tests/core/test_hsdp.py``; here: the shard-group size is part of every memo key that the
results depend on, memory follows the shard group, the replicas' all-reduce costs time over
a slow inter-node network on a stream of its own (FSDP1 ``_all_reduce_stream``, FSDP2
``all_reduce_stream``: beside the next block's reduce-scatter, not after it), and the CLI spells
it ``--dp-shard``.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.blocktime import BlockCost, BlockTiming, chunk_timing
from stage_explore.cli import main
from stage_explore.system import load_system

MODEL = get_flavor("llama2-7b").with_overrides(layers=4, seq_len=2048)
SYSTEM = load_system("h100-80gb")


def _config(dp_shard: int | None, dp: int = 16) -> ParallelConfig:
    return ParallelConfig(dp=dp, dp_shard=dp_shard, zero=3, micro_batch=1, grad_fp32=False)


def test_dp_shard_is_in_the_memo_keys() -> None:
    """One backend evaluating full and hybrid sharding in turn gives what fresh backends give
    (a memo keyed without the shard group would return the first one's numbers)."""
    shared = AnalyticalBackend(framework="fsdp")
    for dp_shard in (None, 8, 2, None, 8):
        got = shared.evaluate(MODEL, _config(dp_shard), SYSTEM)
        fresh = AnalyticalBackend(framework="fsdp").evaluate(MODEL, _config(dp_shard), SYSTEM)
        assert got.step_time_s == fresh.step_time_s
        assert got.peak_memory_bytes == fresh.peak_memory_bytes
    full = shared.evaluate(MODEL, _config(None), SYSTEM)
    hybrid = shared.evaluate(MODEL, _config(2), SYSTEM)
    assert full.peak_memory_bytes < hybrid.peak_memory_bytes
    assert full.step_time_s != hybrid.step_time_s


def test_memory_is_the_shard_groups() -> None:
    """A rank of 16 ranks sharded in groups of 8 holds what a rank of 8 fully sharded ranks
    holds (same micro-batch, same states per rank)."""
    backend = AnalyticalBackend(framework="fsdp")
    hybrid = backend.evaluate(MODEL, _config(8, dp=16), SYSTEM)
    alone = backend.evaluate(MODEL, _config(None, dp=8), SYSTEM)
    assert hybrid.peak_memory_bytes == alone.peak_memory_bytes


def test_the_replica_all_reduce_costs_time_over_a_slow_scale_out() -> None:
    """With shard groups of 8 (one node each) the only inter-node traffic is the replicas'
    all-reduce of the gradient shards: it grows when the scale-out network slows, while the
    same shard groups without replicas (dp = 8, one node) do not move."""
    slow = replace(
        SYSTEM,
        network=tuple(
            replace(dim, bandwidth_bytes_per_s=dim.bandwidth_bytes_per_s / 100) if i else dim
            for i, dim in enumerate(SYSTEM.network)
        ),
    )
    backend = AnalyticalBackend(framework="fsdp")
    fast_h = backend.evaluate(MODEL, _config(8, dp=16), SYSTEM).step_time_s
    slow_h = backend.evaluate(MODEL, _config(8, dp=16), slow).step_time_s
    fast_1 = backend.evaluate(MODEL, _config(None, dp=8), SYSTEM).step_time_s
    slow_1 = backend.evaluate(MODEL, _config(None, dp=8), slow).step_time_s
    assert slow_h > fast_h
    assert slow_1 == pytest.approx(fast_1, rel=1e-12)


def test_cli_dp_shard(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "--model", "llama2-7b", "--layers", "4", "--system", "h100-80gb",
            "--dp", "16", "--zero", "3"]  # fmt: skip
    assert main([*argv, "--dp-shard", "8", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["parallel"]["dp_shard"] == 8
    assert main([*argv, "--dp-shard", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "`dp_shard` must divide `dp`" in err


def _timing(duration: float) -> BlockTiming:
    return BlockTiming(duration, duration, {}, 0)


@pytest.mark.parametrize("replica_s", [0.0, 1.5, 2.5])
def test_the_replica_all_reduce_runs_beside_the_gathers_and_scatters(replica_s: float) -> None:
    """A layer of backward 2.0 s with a 0.5 s gather, a 0.4 s reduce-scatter and a replica
    all-reduce of ``replica_s``: its backward lasts max(2.0, 0.5 + 0.4, replica_s) under ZeRO-3
    and max(2.0, 0.4, replica_s) under ZeRO-2 (its own stream); the root unit's follows its
    reduce-scatter beside no compute."""
    layer = BlockCost(_timing(1.0), _timing(2.0), 0.5, 0.4, replica_s)
    runs = (("layer", 3),)
    zero3 = chunk_timing(runs, {"layer": layer}, zero=3)
    assert zero3.backward_s == pytest.approx(3 * max(2.0, 0.9, replica_s))
    assert dict(zero3.exposed_s)["zero_gather"] == pytest.approx(3 * max(0.0, replica_s - 2.0))
    zero2 = chunk_timing(
        runs, {"layer": BlockCost(_timing(1.0), _timing(2.0), 0.0, 0.4, replica_s)}, zero=2
    )
    assert zero2.backward_s == pytest.approx(3 * max(2.0, 0.4, replica_s))
    root = BlockCost(_timing(0.1), _timing(0.2), 0.3, 0.6, replica_s)
    unit = chunk_timing((("embedding", 1),), {"embedding": root}, zero=3, root_unit=True)
    assert unit.backward_s == pytest.approx(0.2 + 0.6 + replica_s)


def test_backend_separates_the_replica_all_reduce() -> None:
    """The backend's per-block ZeRO seconds: a hybrid-sharded layer's replica all-reduce is
    its own term, the reduce-scatter the same as without replicas over the same shard group."""
    backend = AnalyticalBackend(framework="fsdp")
    seen: list[BlockCost] = []
    original = backend._block_costs

    def spy(*args: object, **kwargs: object) -> tuple[BlockCost, BlockCost, BlockCost]:
        costs = original(*args, **kwargs)  # type: ignore[arg-type]
        seen.append(costs[0])
        return costs

    backend._block_costs = spy  # type: ignore[method-assign]
    backend.evaluate(MODEL, _config(8, dp=16), SYSTEM)
    hybrid = [c for c in seen if c.replica_s > 0]
    seen.clear()
    backend.evaluate(MODEL, _config(None, dp=8), SYSTEM)
    alone = [c for c in seen if c.scatter_s > 0]
    assert hybrid and not [c for c in seen if c.replica_s > 0]
    assert sorted(c.scatter_s for c in hybrid) == pytest.approx(sorted(c.scatter_s for c in alone))
