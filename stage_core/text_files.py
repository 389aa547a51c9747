"""Reading a user's text file: :func:`read_text_file`, the one place a model file, a Hugging
Face ``config.json`` or a system file is read, so that a missing, unreadable or non-UTF-8 file
is the same one-line :class:`~stage_core.errors.ConfigError` whichever it is (s24 review's
non-UTF-8 messages; s33 simplify made the three readers one).
"""

from __future__ import annotations

from pathlib import Path

from stage_core.errors import ConfigError


def read_text_file(path: Path, what: str, expected: str) -> str:
    """The UTF-8 text of the ``what`` file (``"model file"``, ``"system file"``) at ``path``; a
    :class:`~stage_core.errors.ConfigError` naming it when it does not exist, cannot be read
    (the system's reason) or is not UTF-8 text (the first bad byte, its offset, and what the
    file should be: ``expected``, e.g. ``"a TOML file"``)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} {str(path)!r} does not exist") from None
    except OSError as error:
        raise ConfigError(f"cannot read {what} {str(path)!r}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"cannot read {what} {str(path)!r}: not UTF-8 text (byte "
            f"{error.object[error.start]:#04x} at offset {error.start}); expected {expected}"
        ) from None
