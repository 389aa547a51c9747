"""Joining a Ray cluster with a bounded wait, or starting a local Ray instance of our own.

Contents:
    :data:`CONNECT_TIMEOUT_S`
        the default bound on joining a cluster.
    :func:`check_address`
        whether an address is one of the forms below, without contacting it.
    :func:`wait_for_address`
        wait until a cluster's address accepts a TCP connection (a dead cluster fails here: at
        once when the host refuses the connection, else when the time is up).
    :func:`probe_cluster`
        connect to the cluster from a child process, killed when the time is up (an address
        that answers but is not a working Ray cluster fails here).
    :func:`connect_ray`
        initialise Ray in this process for a study.

Addresses: ``None``, ``""`` or ``"local"`` always start a new local instance (``ray.init(address=
"local")``), whatever ``RAY_ADDRESS`` or a leftover ``ray start`` cluster file says, so a stale
address can never make a plain run hang. ``"auto"`` follows Ray's own discovery (``RAY_ADDRESS``,
then the cluster last started with ``ray start`` on this machine). ``HOST:PORT`` (the head's GCS
port) or ``ray://HOST:PORT`` (Ray Client) joins that cluster.

A new local instance on Ray 2.59 or later runs with Ray's token authentication, as Ray itself
starts one when ``RAY_AUTH_MODE`` is unset, but said explicitly (:func:`local_token_auth`), so
Ray does not warn "Token authentication is enabled for this Ray cluster" on every start.

Why a child process: ``ray.init`` on an address that accepts connections but never completes
Ray's handshake retries for many minutes and cannot be interrupted; the same connection made in
a child process can be killed when ``connect_timeout_s`` is spent. Every failure is a one-line
:class:`~stage_core.errors.ConfigError` naming the address.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version

from stage_core.errors import ConfigError

#: Default bound, in seconds, on joining a Ray cluster (``[executor] connect_timeout_s``).
CONNECT_TIMEOUT_S = 30.0

_PROBE = """
import logging, sys
import ray
ray.init(address=sys.argv[1], logging_level=logging.ERROR)
ray.cluster_resources()
ray.shutdown()
"""


#: Ray's switch of its token authentication (docs.ray.io/en/latest/ray-security/token-auth.html:
#: "set the environment variable RAY_AUTH_MODE=token before starting your Ray cluster ... When you
#: start a local instance of Ray using ray.init() with token authentication enabled, Ray
#: automatically generates and uses a token"; "disabled" turns it off).
AUTH_MODE_ENV = "RAY_AUTH_MODE"
#: The first Ray release that turns token authentication on for a new local cluster when
#: ``RAY_AUTH_MODE`` is unset, warning that it did (docs.ray.io banner, read 6 Dec 2026: "Ray
#: 2.59 enables token authentication by default for local clusters, and Ray 2.61 extends it to
#: all clusters"; ray 2.60.0 ``_private/authentication/authentication_token_setup.py``
#: ``enable_token_auth_by_default`` warns only when the mode is unset).
LOCAL_TOKEN_AUTH_SINCE = (2, 59)


def local_token_auth() -> bool:
    """Before a new local instance: set ``RAY_AUTH_MODE=token`` when Ray (2.59 or later) would
    turn it on by default, so the instance is the same and Ray does not warn that it chose it.
    Nothing is set when the user set the mode, when Ray is older (its default is no
    authentication) or when Ray is already imported in this process (Ray reads the mode once,
    at import: a value set after it is not seen by this process but is by the instance it
    starts, which then refuses it). Whether it set the mode."""
    if AUTH_MODE_ENV in os.environ or "ray" in sys.modules:
        return False
    try:
        numbers = tuple(int(n) for n in re.findall(r"\d+", version("ray"))[:2])
    except PackageNotFoundError:
        return False
    if numbers < LOCAL_TOKEN_AUTH_SINCE:
        return False
    os.environ[AUTH_MODE_ENV] = "token"
    return True


def _host_port(address: str) -> tuple[str, int]:
    """The host and port of ``HOST:PORT`` or ``ray://HOST:PORT``; a ConfigError otherwise
    (another scheme, e.g. the dashboard's ``http://HOST:8265``, was looked up as a host name
    ``'http://HOST'``: "not found", s25 review)."""
    bare = address.removeprefix("ray://")
    scheme, separator, _ = bare.partition("://")
    if separator:
        raise ConfigError(
            f"--address {address}: {scheme}:// is not a Ray cluster address; expected HOST:PORT "
            "(the head node's GCS port, 6379 by default) or ray://HOST:PORT (Ray Client, 10001 "
            "by default); http://HOST:8265 is the dashboard's (Ray Jobs), not a cluster's"
        )
    host, _, port = bare.rpartition(":")
    host = host.strip("[]")
    if not host or host != host.strip() or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"--address {address}: expected HOST:PORT, ray://HOST:PORT, auto or local"
        )
    return host, int(port)


def check_address(address: str) -> None:
    """A one-line ConfigError unless ``address`` is one :func:`connect_ray` takes: ``auto``,
    ``local``, ``HOST:PORT`` or ``ray://HOST:PORT``; nothing is contacted (the study loader
    checks ``[executor] address`` with it before any trial)."""
    if address not in ("auto", "local"):
        _host_port(address)


def _resolve_auto() -> str:
    """What Ray's ``auto`` names: ``RAY_ADDRESS``, else this machine's latest ``ray start``
    (found by Ray's own, private, discovery; with ``RAY_ADDRESS`` alone if that moves)."""
    found: str | None
    try:
        from ray._private.services import get_ray_address_from_environment

        found = get_ray_address_from_environment("auto", None)
    except ImportError:
        found = os.environ.get("RAY_ADDRESS") or None
    except ConnectionError:
        found = None
    if not found or found == "auto":
        raise ConfigError(
            "--address auto: found no Ray cluster (RAY_ADDRESS is unset and no cluster was "
            "started with `ray start` on this machine); pass its HOST:PORT"
        )
    return str(found)


def _refused(address: str, host: str, port: int, error: OSError) -> ConfigError | None:
    """The one-line error of an answer that waiting cannot change: the host refused the
    connection (it is up and nothing listens on the port) or its name does not resolve; None
    for a silence (a host still booting, a firewall dropping packets), which is waited out."""
    if isinstance(error, ConnectionRefusedError):
        why = f"connection refused: nothing listens on port {port} of {host}"
    elif isinstance(error, socket.gaierror):
        why = f"host {host!r} not found: {' '.join(str(error).split())}"
    else:
        return None
    return ConfigError(
        f"cannot reach the Ray cluster at {address} ({why}); expected the address of a running "
        "Ray head node (`ray start --head`)"
    )


def wait_for_address(address: str, timeout_s: float) -> None:
    """Return once ``address`` accepts a TCP connection; a one-line ConfigError at once when
    the host refuses it or does not resolve (:func:`_refused`), else after ``timeout_s``
    seconds of trying."""
    host, port = _host_port(address)
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(2.0, remaining))):
                return
        except OSError as error:
            refused = _refused(address, host, port, error)
            if refused is not None:
                raise refused from None
            problem = " ".join(str(error).split()) or type(error).__name__
        if deadline - time.monotonic() <= 0:
            raise ConfigError(
                f"cannot reach the Ray cluster at {address} within {timeout_s:g} s ({problem}); "
                "expected the address of a running Ray head node (`ray start --head`)"
            )
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def probe_cluster(address: str, timeout_s: float, total_s: float) -> None:
    """Connect to the cluster at ``address`` from a child process and disconnect; a one-line
    ConfigError if that fails, or does not finish within ``timeout_s`` (the child is killed).
    ``total_s`` is the whole bound, for the message."""
    command = [sys.executable, "-c", _PROBE, address]
    try:
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=max(timeout_s, 0.1), check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"cannot reach the Ray cluster at {address} within {total_s:g} s (the address "
            "answers, but no Ray cluster completed the connection); expected the GCS port of a "
            "running Ray head node of the same Ray version"
        ) from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        # Ray's last line only says it failed to connect; an authentication error says why
        refused = [line for line in lines if "AuthenticationError" in line]
        why = refused or lines[-1:]
        text = why[0] if why else f"exit status {done.returncode}"
        # s34 review7: else the error ended on Ray's "Failed to connect to Ray cluster at …",
        # which does not say what the address should be (one answering that is not a GCS)
        expected = "" if refused else (
            "; expected the GCS port of a running Ray head node of the same Ray version "
            "(`ray start --head` prints it)"
        )  # fmt: skip
        raise ConfigError(f"cannot join the Ray cluster at {address}: {text[:400]}{expected}")


def connect_ray(
    address: str | None, *, workers: int | None, connect_timeout_s: float = CONNECT_TIMEOUT_S
) -> None:
    """Initialise Ray in this process: join the cluster at ``address`` (at most
    ``connect_timeout_s`` to find it answering and complete a connection) or start a local
    instance with ``workers`` CPUs (``None``: every CPU). See the module for the addresses."""
    target = None if address in (None, "", "local") else address
    if target is None:
        local_token_auth()  # before Ray is imported: it reads the mode once
    import ray

    if target == "auto":
        target = _resolve_auto()
    if target is not None:
        started = time.monotonic()
        wait_for_address(target, connect_timeout_s)
        spent = time.monotonic() - started
        probe_cluster(target, connect_timeout_s - spent, connect_timeout_s)
    try:
        if target is None:
            ray.init(
                address="local",
                num_cpus=workers,
                include_dashboard=False,
                logging_level=logging.WARNING,
            )
        else:
            ray.init(address=target, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as error:
        where = f"the Ray cluster at {target}" if target else "a local Ray instance"
        text = " ".join(str(error).split())
        raise ConfigError(f"cannot start or reach {where}: {text}") from None
