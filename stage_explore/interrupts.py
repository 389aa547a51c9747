"""SIGTERM handled as Ctrl-C (7 Dec 2026, s35 review8): :func:`terminate_as_interrupt`, used by
the CLI around every command and by the leave-one-source-out worker pool around its fits."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def terminate_as_interrupt(over_default_only: bool = False) -> Iterator[None]:
    """Within the block, SIGTERM (``kill PID``, a batch system's time limit) raises
    :class:`KeyboardInterrupt`, so what cleans up after Ctrl-C runs; the previous handler is
    restored after. Off the main thread (where no handler can be set) it does nothing, as it
    does under ``over_default_only`` when a handler other than Python's default is installed
    (an embedding program's own is kept)."""
    current = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or (
        over_default_only and current is not signal.SIG_DFL
    ):
        yield
        return

    def interrupt(number: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, current)
