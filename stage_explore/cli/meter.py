"""Progress meters on stderr: :class:`RankMeter` for commands that walk every rank (``stage
trace`` writing rank files, ``stage check`` reading and checking them), :class:`StepMeter`
for long fits (``stage validate --loso``, ``stage calibrate``'s leave-one-out)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


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


class StepMeter:
    """Progress of a few long steps on stderr: ``LABEL: DONE/TOTAL NOUN, fitting NAME (M:SS)``, in
    place on a terminal, else one line per step (each takes seconds to a minute): ``stage
    validate --loso``'s fit per source, ``stage calibrate``'s leave-one-out fit per run."""

    def __init__(self, label: str, noun: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.noun = noun
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.perf_counter()

    def __call__(self, done: int, total: int, name: str) -> None:
        minutes, seconds = divmod(int(time.perf_counter() - self.start), 60)
        doing = f", fitting {name}" if name else ", done"
        text = f"  {self.label}: {done}/{total} {self.noun}{doing} ({minutes}:{seconds:02d})"
        if self.tty:
            end = "\n" if done == total else ""
            self.stream.write(f"\r{text}\033[K{end}")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
