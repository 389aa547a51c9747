"""The local executor's worker processes end when the ``stage explore`` that started them is
killed (SIGKILL, the out-of-memory killer), instead of waiting on the pool's queue for ever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: A stand-in for ``stage explore --executor local``: the pool the LocalExecutor starts (spawned
#: workers, its initializer), one task run so a worker exists, its pid printed, then waiting.
DRIVER = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from stage_explore.search.executors import _ignore_interrupts
if __name__ == "__main__":
    pool = ProcessPoolExecutor(max_workers=1, initializer=_ignore_interrupts,
                               mp_context=multiprocessing.get_context("spawn"))
    print(pool.submit(os.getpid).result(), flush=True)
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:  # a zombie is gone too
        return stat.read().split()[2] != "Z"


def test_a_worker_ends_when_its_driver_is_killed() -> None:
    # s19 usertour: after `kill -9` of `stage explore --executor local`, its workers (and
    # multiprocessing's resource tracker) stayed, idle, reparented to init.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert driver.stdout is not None
        worker = int(driver.stdout.readline())
        assert _alive(worker)
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        deadline = time.monotonic() + 10
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), "the worker outlived its driver"
    finally:
        if driver.poll() is None:
            driver.kill()
