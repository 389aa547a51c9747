"""A study on a two-node Ray cluster started by the test, with the second node killed midway.

The cluster is two ``ray start --block`` processes on this machine (a head and a worker node,
one CPU each, each in a session of its own, under a temporary directory of the test). Killing a
node kills every process of its session (its raylet, its agents and its workers: Ray puts each
worker in a process group of its own, so a process-group kill would miss them). The teardown
kills both sessions whatever happened, never a Ray process this test did not start.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path

import pytest

from stage_explore import load_results
from stage_explore.search import EvaluationJob, Explorer, create_executor
from stage_explore.search.progress import Progress
from stage_explore.search.retry import RetryPolicy
from stage_explore.study import parse_study

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)

RAY = Path(sys.executable).with_name("ray")
TRIALS = 48
KILL_AFTER = 14
#: How long each synthetic evaluation sleeps (the kill lands inside one, held there).
SLEEP_S = 0.15
#: Fast node-death detection for the test cluster (Ray's defaults take ~30 s to notice).
SYSTEM_CONFIG = (
    '{"health_check_period_ms": 500, "health_check_timeout_ms": 1000, '
    '"health_check_failure_threshold": 3}'
)

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(not RAY.exists(), reason=f"no `ray` command beside {sys.executable}"),
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find a node's processes"),
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _session(session_id: int) -> list[int]:
    """The processes whose session id is ``session_id`` (a node's ``ray start`` and children)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session_id:  # after ")": state ppid pgrp session …
            members.append(int(entry.name))
    return members


class LocalRayCluster:
    """Ray nodes on this machine, each a ``ray start --block`` process in its own session."""

    def __init__(self) -> None:
        # short: Ray's Unix socket paths live under it and must stay under ~107 characters
        self.temp_dir = Path(tempfile.mkdtemp(prefix="stage-ray-", dir="/tmp"))
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: list[subprocess.Popen[bytes]] = []
        self.env = support.subprocess_env()  # the Ray workers import the synthetic backend
        self.env.pop("RAY_ADDRESS", None)
        self.env["RAY_AUTH_MODE"] = "disabled"  # no token file for a throwaway cluster
        self.env["RAY_USAGE_STATS_ENABLED"] = "0"

    def _start(self, *arguments: str, log: str) -> subprocess.Popen[bytes]:
        command = [str(RAY), "start", "--num-cpus=1", "--node-ip-address=127.0.0.1", "--block"]
        with (self.temp_dir / log).open("wb") as output:
            node = subprocess.Popen(
                [*command, *arguments], env=self.env, stdin=subprocess.DEVNULL,
                stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.nodes.append(node)
        return node

    def start_head(self, timeout_s: float = 60) -> subprocess.Popen[bytes]:
        """Start the head and wait until its GCS port listens (``--block`` returns nothing to
        wait on, and joining refuses a port nothing listens on at once)."""
        head = self._start(
            "--head", f"--port={self.port}", f"--temp-dir={self.temp_dir}",
            "--include-dashboard=false", "--disable-usage-stats",
            f"--system-config={SYSTEM_CONFIG}", log="head.log",
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return head
            except OSError:
                time.sleep(0.25)
        print(self.log())
        raise AssertionError(f"the Ray head did not listen on {self.address} within {timeout_s} s")

    def add_node(self) -> subprocess.Popen[bytes]:
        return self._start(f"--address={self.address}", "--disable-usage-stats", log="node.log")

    def kill(self, node: subprocess.Popen[bytes]) -> None:
        """Kill every process of the node's session (SIGKILL), as a machine failure would."""
        for pid in _session(node.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        node.wait()

    def log(self) -> str:
        return "\n".join(
            path.read_text(errors="replace")[-2000:] for path in sorted(self.temp_dir.glob("*.log"))
        )

    def stop(self) -> None:
        for node in reversed(self.nodes):
            self.kill(node)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@pytest.fixture
def cluster() -> Iterator[LocalRayCluster]:
    started = LocalRayCluster()
    try:
        yield started
    finally:
        started.stop()


def _wait_for_nodes(count: int, timeout_s: float, *, exactly: bool = False) -> None:
    """Wait until at least ``count`` Ray nodes are alive (exactly ``count`` with ``exactly``,
    e.g. until Ray's health check has marked a killed node dead)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [node for node in ray.nodes() if node["Alive"]]
        if len(alive) == count or (len(alive) > count and not exactly):
            return
        time.sleep(0.25)
    state = "left alive" if exactly else "did not come up"
    raise AssertionError(f"{count} Ray nodes {state} within {timeout_s} s")


def _wait_for_busy(
    cluster: LocalRayCluster, node: subprocess.Popen[bytes], busy_dir: Path, timeout_s: float
) -> None:
    """Wait until one of ``node``'s processes is mid-evaluation (its busy file exists). The
    caller holds the evaluations first (the backend's hold file), so that evaluation cannot end
    before the kill: no race against the evaluation's sleep on a loaded machine."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        members = set(_session(node.pid))
        if any(int(path.name) in members for path in busy_dir.iterdir()):
            return
        time.sleep(0.05)
    print(cluster.log())
    raise AssertionError(f"the worker node started no evaluation within {timeout_s} s")


def test_study_on_two_nodes_survives_a_node_killed_midway(
    tmp_path: Path, cluster: LocalRayCluster, caplog: pytest.LogCaptureFixture
) -> None:
    import ray

    cluster.start_head()
    worker_node = cluster.add_node()
    busy_dir = tmp_path / "busy"
    busy_dir.mkdir()
    hold = tmp_path / "hold"
    text = support.study_text(
        trials=TRIALS,
        batch_size=6,
        options=f'sleep_s = {SLEEP_S}, busy_dir = "{busy_dir}", hold_file = "{hold}"',
        executor=f'kind = "ray"\naddress = "{cluster.address}"\nchunk_size = 1\n'
        "connect_timeout_s = 60",
    )
    spec = parse_study(text, tmp_path / "study.toml")
    seen: list[Progress] = []
    killed_at: list[int] = []

    def executor_factory(job: EvaluationJob):  # type: ignore[no-untyped-def]
        executor = create_executor(spec.executor, job)  # joins the cluster (bounded wait)
        _wait_for_nodes(2, timeout_s=60)
        return executor

    def on_progress(progress: Progress) -> None:
        seen.append(progress)
        if not killed_at and progress.done >= KILL_AFTER:
            killed_at.append(progress.done)
            # kill while the node is mid-evaluation: a node killed between two tasks loses
            # none (Ray re-leases a task not yet started), and the retry is what is tested;
            # the hold keeps every evaluation that has started in flight until the kill
            hold.touch()
            try:
                _wait_for_busy(cluster, worker_node, busy_dir, timeout_s=60)
                cluster.kill(worker_node)
            finally:
                hold.unlink()
            # hold the study until Ray's health check marks the node dead (~3 s with
            # SYSTEM_CONFIG, longer on a loaded machine), so that the rest of the study, not a
            # race against it, decides whether the progress line notices the death
            _wait_for_nodes(1, timeout_s=60, exactly=True)

    caplog.set_level(logging.WARNING, logger="stage_explore.search.retry")
    try:
        summary = Explorer(
            spec,
            out=tmp_path / "out",
            executor_factory=executor_factory,
            on_progress=on_progress,
            retry=RetryPolicy(retries=4, backoff_s=0.5),
        ).run()
    except BaseException:
        print(cluster.log())
        raise
    assert not ray.is_initialized()  # the driver disconnected (the cluster was not its own)

    frame = load_results(summary.directory)
    # no trial lost, none recorded twice, none left failed by the dead node
    assert sorted(frame["trial"]) == list(range(TRIALS))
    assert summary.stopped_by == "budget" and summary.progress.done == TRIALS
    params = [name for name in ("num_gpus", "tp", "pp", "zero", "recompute", "micro_batch")]
    assert not frame.duplicated(subset=params).any()
    assert set(frame["status"]) <= {"ok", "infeasible"}, frame[["status", "reason"]]
    # trials ran on both nodes before the kill; the progress line showed both
    assert killed_at and killed_at[0] < TRIALS
    evaluated = frame[frame["worker"].str.contains("/")]
    nodes = evaluated["worker"].str.split("/").str[0]
    assert nodes.nunique() == 2, nodes.value_counts()
    assert any(progress.where == "ray: 2 nodes, 2 CPUs" for progress in seen)
    # the kill cost evaluations (retried on the surviving node) and the line noticed it
    assert "retry 1 of 4" in caplog.text
    assert seen[-1].where == "ray: 1 node, 1 CPU"
    survivor = nodes[evaluated["trial"] == evaluated["trial"].max()].iloc[0]
    after = nodes[evaluated["trial"] >= killed_at[0] + 8]
    assert len(after) and (after == survivor).all()
