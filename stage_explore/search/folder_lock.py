"""One writer per study folder: an exclusive lock that ``stage explore`` holds while it records.

Two runs writing the same ``<out>/<study>`` at once (two shells, a study file and its copy with
the same ``[study] name``) both numbered their parts from what they found, and each part's
rename replaced the other's: in the s23 review an A100 and an H100 study started together both
reported 840 trials, and the folder held the H100 study's 840 records under the A100 study's
``_study.json``. :func:`study_lock` takes an advisory ``flock`` on ``<folder>/.stage-explore.lock``
(a dot file: Parquet readers of the folder skip it) for the whole run, so the second run stops at
once with a one-line error naming the folder and the first run's process; the kernel releases
the lock when the holder exits, even killed, so no stale lock is left to clean up. On a platform
without ``fcntl`` (Windows), or a file system without locks (``ENOLCK``, ``EOPNOTSUPP``: some
network mounts; a warning says so), there is no lock.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stage_core.errors import ConfigError
from stage_explore.records import make_folder, storage_error

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

#: The lock file's name inside a study folder.
LOCK_FILE = ".stage-explore.lock"
#: ``flock`` errors of a file system that has no locks: the run goes on unlocked, with a warning.
_NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL})

logger = logging.getLogger(__name__)


@contextmanager
def study_lock(directory: Path) -> Iterator[None]:
    """Hold the study folder ``directory`` (created if needed) for one writer; raise
    :class:`ConfigError` at once when another process holds it. The lock file is removed on
    release (a failed run leaves its new folder empty, :func:`~stage_explore.cli.paths
    .removed_if_failed`); a writer that locked a file removed meanwhile locks the new one."""
    make_folder(directory)
    path = directory / LOCK_FILE
    while True:
        try:
            handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the run
        except OSError as error:
            raise storage_error(path, error, "the study's lock") from None
        if fcntl is None:
            break
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise ConfigError(
                f"{directory}: another stage explore ({holder}) is recording this study now; "
                "wait for it to finish or choose another --out"
            ) from None
        except OSError as error:  # a file system without locks (some network mounts)
            if error.errno not in _NO_LOCKS:
                handle.close()
                raise storage_error(path, error, "the study's lock") from None
            logger.warning("%s: no lock (%s): run one stage explore on it at a time", path, error)
            break
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(handle.fileno()).st_ino:
            break
        handle.close()  # its holder removed it as we opened it: lock the file there now
    try:
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()}\n")
            handle.flush()
        except OSError as error:  # a full disk: said as every failed write is
            raise storage_error(path, error, "the study's lock") from None
        yield
    finally:
        try:
            path.unlink(missing_ok=True)  # before the lock is released: see above
        except OSError:
            pass
        handle.close()  # releases the lock


def recording_holder(directory: Path) -> int | None:
    """The process id of a ``stage explore`` recording the study folder ``directory`` now, or
    None. Read from the lock file without taking the lock (a reader must not make a starting
    writer fail); a killed holder's leftover file names a process that no longer exists."""
    try:
        text = (directory / LOCK_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    words = text.split()
    if len(words) != 2 or words[0] != "pid" or not words[1].isdigit():
        return None
    pid = int(words[1])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:  # it exists, under another user
        return pid
    return pid
