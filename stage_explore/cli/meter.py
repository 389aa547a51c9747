"""A one-line progress meter on stderr for commands that walk every rank (``stage trace``
writing rank files, ``stage check`` reading and checking them)."""

from __future__ import annotations

import sys
import time


class RankMeter:
    """``label: done/total (seconds)`` on stderr, redrawn in place at most ten times a second;
    the last call (``done == total``) ends the line. Does nothing when not ``enabled``."""

    def __init__(self, enabled: bool, label: str) -> None:
        self.enabled = enabled
        self.label = label
        self.start = time.perf_counter()
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if not self.enabled or (now - self.last < 0.1 and done != total):
            return
        self.last = now
        end = "\n" if done == total else ""
        print(
            f"\r  {self.label}: {done}/{total} ({now - self.start:.1f} s)",
            end=end,
            file=sys.stderr,
            flush=True,
        )
