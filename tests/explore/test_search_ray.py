"""A study on a local Ray instance started for it (num_cpus=2, no dashboard), the executor
choices of the command line, and joining a Ray cluster: a bounded wait ending in a one-line
error naming the address, and a plain run that never joins a cluster it was not asked to."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from importlib import import_module
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore import load_results
from stage_explore.search import EvaluationJob, Explorer, RayExecutor, create_executor
from stage_explore.search.connect import wait_for_address
from stage_explore.search.progress import Progress
from stage_explore.study import ExecutorKind, parse_study

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)


@pytest.mark.ray
def test_study_on_a_local_ray_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    # the Ray workers are new processes: they find the synthetic backend through PYTHONPATH
    monkeypatch.setenv("PYTHONPATH", support.subprocess_env()["PYTHONPATH"])
    # a leftover address of a dead cluster: a plain run starts its own instance regardless
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_closed_port()}")
    text = support.study_text(
        trials=120,
        batch_size=24,
        options="fail_tp = 8, sleep_s = 0.01",
        executor='kind = "ray"\nworkers = 2\nchunk_size = 4',
    )
    spec = parse_study(text, tmp_path / "study.toml")
    tasks: list[int] = []

    def executor_factory(job: EvaluationJob):  # type: ignore[no-untyped-def]
        executor = create_executor(spec.executor, job)
        tasks.append(executor.parallelism)
        return executor

    assert not ray.is_initialized()
    seen: list[Progress] = []
    summary = Explorer(
        spec, out=tmp_path / "out", executor_factory=executor_factory, on_progress=seen.append
    ).run()
    assert not ray.is_initialized()  # the instance started for the study is shut down
    assert tasks == [2]
    frame = load_results(summary.directory)
    assert sorted(frame["trial"]) == list(range(120))
    assert summary.stopped_by == "budget"
    failed = frame[frame["status"] == "failed"]
    assert len(failed) and (failed["reason"] == "RuntimeError: synthetic failure at tp=8").all()
    evaluated = frame[frame["status"].isin(["ok", "failed"]) & (frame["worker"] != "cache")]
    assert len(evaluated) and evaluated["worker"].str.fullmatch(r".+:\d+").all()  # host:pid
    assert evaluated["worker"].nunique() >= 2  # more than one Ray worker process
    assert evaluated["worker"].str.fullmatch(r"[0-9a-f]{8}/.+:\d+").all()  # node/host:pid
    assert seen and seen[-1].where == "ray: 1 node, 2 CPUs"


def test_an_address_needs_the_ray_executor(tmp_path: Path) -> None:
    spec = parse_study(support.study_text(), tmp_path / "study.toml")
    job = EvaluationJob(study=spec, factory=support.SyntheticBackend, options={})
    with pytest.raises(ConfigError, match="--address 10.0.0.1:6379 names a Ray cluster"):
        create_executor(spec.executor, job, kind=ExecutorKind.LOCAL, address="10.0.0.1:6379")
    # "local" starts a Ray instance of the run's own (connect.py): not a cluster to name
    with pytest.raises(ConfigError, match="--address local names a Ray instance of its own; it"):
        create_executor(spec.executor, job, kind=ExecutorKind.LOCAL, address="local")


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("address", ["127.0.0.1:{port}", "ray://127.0.0.1:{port}"])
def test_a_refused_address_is_a_one_line_error_at_once(tmp_path: Path, address: str) -> None:
    # s19 usertour: a port nothing listens on was retried for the whole 30 s
    port = _closed_port()
    address = address.format(port=port)
    spec = parse_study(support.study_text(), tmp_path / "study.toml")
    job = EvaluationJob(study=spec, factory=support.SyntheticBackend, options={})
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        RayExecutor(job, address, connect_timeout_s=30)
    assert time.monotonic() - started < 10
    assert str(caught.value) == (
        f"cannot reach the Ray cluster at {address} (connection refused: nothing listens on "
        f"port {port} of 127.0.0.1); expected the address of a running Ray head node "
        "(`ray start --head`)"
    )


def test_a_silent_address_is_a_bounded_wait_and_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host that does not answer (booting, or a firewall dropping packets) is waited for
    until the time is up."""

    def silent(*_: object, **__: object) -> socket.socket:
        time.sleep(0.1)
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        wait_for_address("10.0.0.5:6379", 1.5)
    assert 1.5 <= time.monotonic() - started < 10
    assert str(caught.value) == (
        "cannot reach the Ray cluster at 10.0.0.5:6379 within 1.5 s (timed out); expected the "
        "address of a running Ray head node (`ray start --head`)"
    )


def test_an_address_that_answers_but_is_not_ray_is_a_bounded_wait_too() -> None:
    """A port that accepts connections and never speaks Ray: ``ray.init`` itself would retry
    for many minutes; the connection is tried in a child process killed when time is up."""
    import threading

    from stage_explore.search.connect import connect_ray

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        address = f"127.0.0.1:{server.getsockname()[1]}"
        accepted: list[socket.socket] = []

        def accept() -> None:
            while True:
                try:
                    accepted.append(server.accept()[0])
                except OSError:
                    return

        threading.Thread(target=accept, daemon=True).start()
        started = time.monotonic()
        with pytest.raises(ConfigError) as caught:
            connect_ray(address, workers=1, connect_timeout_s=6)
        waited = time.monotonic() - started
    assert 6 <= waited < 30
    assert str(caught.value) == (
        f"cannot reach the Ray cluster at {address} within 6 s (the address answers, but no "
        "Ray cluster completed the connection); expected the GCS port of a running Ray head "
        "node of the same Ray version"
    )


# s25 review: " 10.0.0.1:6379" (a stray space) was looked up as the host name " 10.0.0.1"
@pytest.mark.parametrize(
    "address", ["nonsense", "host:port", "10.0.0.1:99999", ":6379", " 10.0.0.1:6379"]
)
def test_a_malformed_address_is_a_config_error(address: str) -> None:
    with pytest.raises(ConfigError, match="expected HOST:PORT, ray://HOST:PORT, auto or local"):
        wait_for_address(address, 1.0)


@pytest.mark.parametrize("address", ["http://10.0.0.1:8265", "gcs://10.0.0.1:6379",
                                     "ray://http://10.0.0.1:10001"])  # fmt: skip
def test_an_address_of_another_scheme_is_named_so(address: str) -> None:
    # s25 review: the dashboard's http://HOST:8265 was "host 'http://10.0.0.1' not found"
    scheme = address.removeprefix("ray://").split("://")[0]
    with pytest.raises(ConfigError, match=f"{scheme}:// is not a Ray cluster address; expected"):
        wait_for_address(address, 1.0)


def test_auto_follows_ray_address(monkeypatch: pytest.MonkeyPatch) -> None:
    from stage_explore.search.connect import connect_ray

    dead = f"127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("RAY_ADDRESS", dead)
    with pytest.raises(ConfigError, match=f"cannot reach the Ray cluster at {dead} \\(connection"):
        connect_ray("auto", workers=1, connect_timeout_s=0.5)


def test_the_command_line_names_the_unreachable_address(tmp_path: Path) -> None:
    study = tmp_path / "study.toml"
    study.write_text(support.study_text(executor='kind = "ray"\nconnect_timeout_s = 1'))
    address = f"127.0.0.1:{_closed_port()}"
    command = [sys.executable, "-m", "stage_explore", "explore", str(study)]
    command += ["--out", str(tmp_path / "out"), "--address", address]
    started = time.monotonic()
    result = subprocess.run(
        command, env=support.subprocess_env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert f"cannot reach the Ray cluster at {address} (connection refused" in result.stderr
    assert result.stderr.count("\n") == 1  # one line, no traceback
    assert time.monotonic() - started < 60
    assert not (tmp_path / "out").exists()  # s19 usertour: it was left behind, empty


def test_the_progress_line_shows_the_nodes_in_use_and_the_lost_trials() -> None:
    import io

    from stage_explore.cli.explore import ProgressLine

    stream = io.StringIO()
    progress = Progress(
        study="demo", done=40, total=100, ok=30, infeasible=8, failed=0, best="front 3 points",
        rate_per_s=12.5, elapsed_s=75.0, infrastructure_failed=2, where="ray: 2 nodes, 8 CPUs",
    )  # fmt: skip
    ProgressLine(stream)(progress)
    line = stream.getvalue()
    assert line.endswith(" · 2 lost to infrastructure failures · ray: 2 nodes, 8 CPUs\n")
    assert line.startswith("demo: 40/100 trials · 30 feasible · 8 infeasible · 0 failed")


def test_a_refused_connection_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's last line says only that it failed to connect; an authentication error says why."""
    from stage_explore.search import connect

    refusal = (
        "import sys\n"
        "sys.stderr.write('Traceback (most recent call last):\\n'\n"
        "    'ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken: Authentication "
        "token is missing or incorrect.\\n'\n"
        "    'ConnectionError: Failed to connect to Ray cluster at 10.0.0.5:6379\\n')\n"
        "sys.exit(1)\n"
    )
    monkeypatch.setattr(connect, "_PROBE", refusal)
    with pytest.raises(ConfigError) as caught:
        connect.probe_cluster("10.0.0.5:6379", 60, 60)
    assert str(caught.value) == (
        "cannot join the Ray cluster at 10.0.0.5:6379: ray.exceptions.AuthenticationError: RPC "
        "error: InvalidAuthToken: Authentication token is missing or incorrect."
    )


@pytest.mark.ray
def test_a_plain_run_ignores_a_leftover_cluster_file(tmp_path: Path) -> None:
    """``ray start`` leaves ``<RAY_TMPDIR>/ray/ray_current_cluster``; once that cluster is gone,
    a plain ``stage explore`` must still start its own instance, not try to join the dead one."""
    import shutil
    import tempfile

    ray_tmp = Path(tempfile.mkdtemp(prefix="stage-rt-", dir="/tmp"))  # short: Ray's socket paths
    try:
        (ray_tmp / "ray").mkdir()
        (ray_tmp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{_closed_port()}\n")
        study = tmp_path / "study.toml"
        study.write_text(
            support.study_text(trials=6, batch_size=3, executor='kind = "ray"\nworkers = 1')
        )
        env = support.subprocess_env()
        env.pop("RAY_ADDRESS", None)
        env["RAY_TMPDIR"] = str(ray_tmp)
        command = [sys.executable, "-m", "stage_explore", "explore", str(study)]
        result = subprocess.run(
            [*command, "--out", str(tmp_path / "out")],
            env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "study demo: 6 trials" in result.stdout
    assert len(load_results(tmp_path / "out" / "demo")) == 6


@pytest.mark.parametrize(
    ("ray_version", "preset", "imported", "expected"),
    [
        ("2.60.0", None, False, "token"),  # Ray's own default for a new local cluster, said
        ("2.59.0rc1", None, False, "token"),
        ("2.58.1", None, False, None),  # before 2.59 Ray's default is no authentication
        ("2.60.0", "disabled", False, "disabled"),  # the user's choice stays
        ("2.60.0", None, True, None),  # Ray already read the mode in this process
    ],
)
def test_a_local_instance_says_rays_token_default_before_ray_is_imported(
    monkeypatch: pytest.MonkeyPatch,
    ray_version: str,
    preset: str | None,
    imported: bool,
    expected: str | None,
) -> None:
    from stage_explore.search import connect

    monkeypatch.setattr(connect, "version", lambda name: ray_version)
    if preset is None:
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    else:
        monkeypatch.setenv("RAY_AUTH_MODE", preset)
    if imported:
        monkeypatch.setitem(sys.modules, "ray", sys.modules.get("ray") or object())
    else:
        monkeypatch.delitem(sys.modules, "ray", raising=False)
    try:
        assert connect.local_token_auth() == (expected == "token" and preset is None)
        assert os.environ.get("RAY_AUTH_MODE") == expected
    finally:
        if preset is None:
            os.environ.pop("RAY_AUTH_MODE", None)


@pytest.mark.ray
def test_a_local_run_prints_no_token_authentication_warning(tmp_path: Path) -> None:
    # s19 usertour: Ray 2.59+ warned "Token authentication is enabled for this Ray cluster" on
    # every local start of stage explore
    study = tmp_path / "study.toml"
    study.write_text(support.study_text(trials=4, executor='kind = "ray"\nworkers = 1'))
    env = support.subprocess_env()
    env.pop("RAY_AUTH_MODE", None)
    env.pop("RAY_ADDRESS", None)
    command = [sys.executable, "-m", "stage_explore", "explore", str(study)]
    result = subprocess.run(
        [*command, "--out", str(tmp_path / "out")], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Token authentication" not in result.stderr
    assert "study demo: 4 trials" in result.stdout
