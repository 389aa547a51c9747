"""Finding the ASTRA-sim binary: the ``binary`` option, then ``ASTRA_SIM_BIN``, then ``PATH``.

Holds:

- :class:`Variant` — the two analytical network builds, congestion-unaware and -aware;
- :data:`BINARY_NAMES`, :data:`ENV_VAR` — what is looked for, and where;
- :func:`find_binary` — the binary to run, or a one-line :class:`BinaryNotFound` (a
  :class:`~stage_core.errors.ConfigError`) that names what was looked for and the three ways a
  study points STAGE at it (``stage eval``, which has no ``binary`` option, re-words it with
  :data:`EVAL_HOW`);
- :func:`check_available` — the same, for failing fast before a study starts;
- :func:`check_starts` — the found binary run once without arguments: a binary the dynamic
  loader cannot start (``error while loading shared libraries``, exit 127: the prebuilt
  binary copied without its ``lib/`` folder) is a one-line :class:`BinaryNotFound` before a
  study starts, where until s37 review10 every trial ran and failed with "exited with status
  127" (ASTRA-sim itself, given no arguments, exits 255 at once on its missing options).

ASTRA-sim is built from source by its users (it is on neither PyPI nor Debian), so its location
is a fact about the machine, read when an evaluation needs it: ``ASTRA_SIM_BIN`` names where the
binary is, it never changes what the backend does. An explicitly named binary (option or
variable) that does not exist is an error, never a silent fall-back to ``PATH``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path

from stage_core.errors import ConfigError


class Variant(StrEnum):
    """ASTRA-sim's analytical network builds."""

    UNAWARE = "unaware"  # congestion-unaware: any number of network dims, no link queuing
    AWARE = "aware"  # congestion-aware: link-level queuing


#: The binary each variant's build produces (``build/astra_analytical/build/bin/`` in the tree).
BINARY_NAMES: Mapping[Variant, str] = {
    Variant.UNAWARE: "AstraSim_Analytical_Congestion_Unaware",
    Variant.AWARE: "AstraSim_Analytical_Congestion_Aware",
}
#: The environment variable that names the binary when the ``binary`` option is not given.
ENV_VAR = "ASTRA_SIM_BIN"

#: How a study provides the binary (the end of a :class:`BinaryNotFound` message).
STUDY_HOW = (
    f"build ASTRA-sim (docs/astra-sim.md) and put the binary on PATH, set {ENV_VAR}=/path/to/"
    "binary, or set `binary` in the study's [backend.options]"
)
#: How ``stage eval --backend astra-sim`` is given the binary: it reads ``ASTRA_SIM_BIN`` and
#: ``PATH`` only (no command-line option names the binary; s34 review7b).
EVAL_HOW = (
    f"build ASTRA-sim (docs/astra-sim.md) and put the binary on PATH, or set {ENV_VAR}=/path/to/"
    "binary (stage eval has no option naming the binary)"
)


class BinaryNotFound(ConfigError):
    """The binary named or looked for is not there: ``detail`` says what was looked for, the
    message adds :data:`STUDY_HOW`; a caller that is no study (``stage eval``) re-raises
    ``detail`` with its own way of naming the binary."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"{detail}; {STUDY_HOW}")


def parse_variant(value: object) -> Variant:
    """``value`` as a :class:`Variant`; anything else is a ConfigError naming the choices."""
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        return Variant(value)
    except ValueError:
        known = ", ".join(repr(v.value) for v in Variant)
        raise ConfigError(
            f"ASTRA-sim `variant` must be one of {known}, but got {value!r}"
        ) from None


def _executable(path: Path, source: str) -> Path:
    if path.is_dir():
        raise ConfigError(
            f"ASTRA-sim binary from {source} is a directory: {path}; name the executable itself, "
            f"e.g. {path / BINARY_NAMES[Variant.UNAWARE]}"
        )
    if not path.is_file():
        raise BinaryNotFound(f"ASTRA-sim binary from {source} does not exist: {path}")
    if not os.access(path, os.X_OK):
        raise ConfigError(f"ASTRA-sim binary from {source} is not executable: {path} (chmod +x)")
    return path.absolute()


def _explicit(value: str | os.PathLike[str], source: str, search_path: str) -> Path:
    """A binary named by the option or the variable: a path, or a command name on PATH."""
    text = os.fspath(value).strip()
    if not text:
        raise BinaryNotFound(f"ASTRA-sim binary from {source} is empty")
    path = Path(text).expanduser()
    if os.sep not in text and not path.exists():
        found = shutil.which(text, path=search_path)
        if found is None:
            raise BinaryNotFound(
                f"ASTRA-sim binary from {source} is {text!r}, which is neither a file nor a "
                "command on PATH"
            )
        return Path(found).absolute()
    return _executable(path, source)


def _check_variant(path: Path, variant: Variant, source: str) -> Path:
    """An explicitly named binary of the other build would mislabel every result."""
    for other, name in BINARY_NAMES.items():
        if other is not variant and path.name == name:
            raise ConfigError(
                f"ASTRA-sim binary from {source} is the congestion-{other.value} build ({path}), "
                f"but variant={variant.value!r}; set variant={other.value!r} or name the "
                f"{BINARY_NAMES[variant]} binary"
            )
    return path


def find_binary(
    binary: str | os.PathLike[str] | None = None,
    variant: Variant | str = Variant.UNAWARE,
    *,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """The ASTRA-sim binary to run, as an absolute path.

    Looked up in order: ``binary`` (a path, or a command name on ``PATH``); the ``ASTRA_SIM_BIN``
    environment variable; ``PATH`` for the variant's binary name (:data:`BINARY_NAMES`).
    ``environ`` replaces ``os.environ`` (for tests). Not found → :class:`ConfigError`, one line.
    """
    chosen = parse_variant(variant)
    env = os.environ if environ is None else environ
    search_path = env.get("PATH", os.defpath)
    if binary is not None:
        source = "the `binary` option"
        return _check_variant(_explicit(binary, source, search_path), chosen, source)
    named = env.get(ENV_VAR)
    if named:
        source = f"{ENV_VAR}"
        return _check_variant(_explicit(named, source, search_path), chosen, source)
    name = BINARY_NAMES[chosen]
    found = shutil.which(name, path=search_path)
    if found is None:
        raise BinaryNotFound(f"ASTRA-sim not found: {ENV_VAR} is not set and {name} is not on PATH")
    return Path(found).absolute()


def check_available(
    binary: str | os.PathLike[str] | None = None, variant: Variant | str = Variant.UNAWARE
) -> Path:
    """Fail fast, before any evaluation, when ASTRA-sim cannot be found (a ConfigError)."""
    return find_binary(binary, variant)


#: What glibc's dynamic loader prints, with exit status 127, when a needed library is missing
#: (``ld.so``: "error while loading shared libraries: libX.so.N: cannot open shared object file").
LOADER_ERROR = "error while loading shared libraries"
#: Seconds the start probe waits (ASTRA-sim 518bd51 exits in ~20 ms without arguments).
PROBE_TIMEOUT_S = 10.0


def check_starts(binary: Path) -> None:
    """A one-line :class:`BinaryNotFound` when the dynamic loader cannot start ``binary``.

    Runs it once without arguments (ASTRA-sim then only complains of its missing options);
    any other outcome — an exit status, a timeout, a start failure the run reports itself —
    is left to the runs.
    """
    try:
        done = subprocess.run(
            [str(binary)], stdin=subprocess.DEVNULL, capture_output=True,
            timeout=PROBE_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return
    text = done.stderr.decode("utf-8", "replace")
    line = next((ln for ln in text.splitlines() if LOADER_ERROR in ln), None)
    if done.returncode == 127 and line is not None:
        missing = line.split(LOADER_ERROR, 1)[1].lstrip(": ").strip()
        raise BinaryNotFound(
            f"ASTRA-sim binary {binary} cannot start: the dynamic loader says {missing!r}; "
            "a prebuilt binary needs its lib/ folder beside bin/ (copy the whole build folder), "
            "or put the library's folder on LD_LIBRARY_PATH"
        )
