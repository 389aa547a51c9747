"""Output paths of the command line, checked before any work starts.

Contents:
    :func:`path_argument`     the ``type`` of an output-path option: refuses an empty path,
                              which :class:`~pathlib.Path` would take as the working folder.
    :func:`writable_folder`   create an output folder (``--out``, the folder of ``--html``) and
                              prove it can be written, or raise a one-line
                              :class:`~stage_core.errors.ConfigError` naming the option and
                              the path.
    :func:`os_error_text`     an :class:`OSError` as one line (``path: reason``).
    :func:`removed_if_failed` remove the output folders a command created when it fails
                              before writing anything into them.

The check writes and removes a small probe file rather than asking ``os.access``: a real write
is refused by everything that can refuse one (permissions, an immutable or read-only-mounted
folder, security modules, some network file systems), for root as for anyone, while
``access(2)`` only models part of that.
"""

from __future__ import annotations

import argparse
import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stage_core.errors import ConfigError


def os_error_text(error: OSError) -> str:
    """``path: reason`` (or the reason alone) for an error of the operating system."""
    reason = error.strerror or str(error)
    if error.errno == errno.ENOSPC:
        reason += " (the disk is full)"
    return f"{error.filename}: {reason}" if error.filename is not None else reason


def path_argument(text: str) -> Path:
    """An output path as typed on the command line; an empty (or blank) one is refused.

    ``Path("")`` is ``Path(".")``, so without this ``--out ""`` (an unset shell variable,
    ``--out "$DIR"``) wrote into the working folder and said nothing (s29 review2)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a path, got {text!r} (an empty or blank path)")
    return Path(text)


def writable_folder(path: Path, option: str) -> Path:
    """``path`` created (with its parents) and checked writable; ``ConfigError`` otherwise."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path}: expected a folder, got an existing file")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError):
        raise ConfigError(
            f"{option} {path}: expected a folder, but a file stands in its path"
        ) from None
    except OSError as error:
        raise ConfigError(f"{option} {path}: cannot create the folder ({error.strerror})") from None
    try:
        handle, probe = tempfile.mkstemp(prefix=".stage-probe-", dir=path)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        raise ConfigError(
            f"{option} {path}: expected a writable folder, but writing there fails "
            f"({error.strerror})"
        ) from None
    return path


@contextmanager
def removed_if_failed(path: Path) -> Iterator[None]:
    """Run the block; when it raises (a refused ``--address``, Ctrl-C before the first record),
    remove the folders of ``path`` that did not exist before it and are left empty, deepest
    first, so a failed command leaves no empty ``--out`` folder behind. A folder holding
    anything (records, a file another program put there) is kept."""
    created = []
    folder = path.absolute()
    while not folder.exists() and folder != folder.parent:
        created.append(folder)
        folder = folder.parent
    try:
        yield
    except BaseException:
        for folder in created:
            try:
                folder.rmdir()
            except FileNotFoundError:  # never created (the failure came first)
                continue
            except OSError:  # not empty: it and its parents stay
                break
        raise
