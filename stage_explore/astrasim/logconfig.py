"""The logging configuration each ASTRA-sim run is given, so its results survive a crash at exit.

Holds :data:`LOGGING_CONFIG_FILE`, :data:`RESULT_LOGGERS`, :func:`logging_config_text` and
:func:`write_logging_config`.

Why: ASTRA-sim (``astra-sim/common/Logging.cc``, ``LoggerFactory::get_logger``, astra-sim
commit 518bd51) creates every logger it has not been given with ``spdlog::create_async``: one
logging thread (``spdlog::init_thread_pool(8192, 1)``) writes the lines the simulation queues.
Under CPU contention that thread lags behind; when the binary's known double free at exit
(:data:`~stage_explore.astrasim.run.TEARDOWN_CRASH`) aborts the process, the queued lines are
lost, among them the ``finished`` lines and statistics, and a complete simulation looks cut short.

The fix uses the binary's own option: ``--logging-configuration=FILE`` makes
``LoggerFactory::init`` call ``spdlog_setup::from_file`` (TOML, guangie88/spdlog_setup) before
any logger exists. The file written here pre-creates the loggers ASTRA-sim prints its results
with (:data:`RESULT_LOGGERS`) as *synchronous* loggers (a ``[[logger]]`` without ``type =
"async"``) with a null sink; ``get_logger`` then finds them registered and only appends its
console and ``log/`` file sinks, so each result line is written (and flushed, flush level
``info``) by the simulating thread itself before the simulation goes on. Output format and
content are unchanged: the same lines, in the same combined stdout/stderr file.

Measured on the 2-core host with 4 busy-loop processes beside it (40 runs each, inputs of the
conformance case ``tied-embeddings-pp`` and the ``llama-cp-ring`` point): without the file 38 and
18 runs lost results; with it none did (docs/astra-sim.md, section 7).
"""

from __future__ import annotations

from pathlib import Path

#: The file name, inside the run directory.
LOGGING_CONFIG_FILE = "logging.toml"

#: The loggers that print what STAGE reads: ``workload`` (``sys[R] finished, …``) and
#: ``statistics`` (``sys[R], GPU time: …``); names as printed in ASTRA-sim's output.
RESULT_LOGGERS = ("workload", "statistics")

_SINK = "stage_null"
_LOGGER = '[[logger]]\nname = "{name}"\nsinks = ["{sink}"]\nlevel = "trace"\nflush_level = "info"\n'


def logging_config_text(loggers: tuple[str, ...] = RESULT_LOGGERS) -> str:
    """The spdlog_setup TOML: each of ``loggers`` synchronous, level trace, flushed at info."""
    parts = [
        "# Written by STAGE: ASTRA-sim's result loggers, synchronous so that a crash at exit\n"
        "# cannot drop their queued lines (stage_explore/astrasim/logconfig.py).\n",
        f'[[sink]]\nname = "{_SINK}"\ntype = "null_sink_mt"\n',
    ]
    parts.extend(_LOGGER.format(name=name, sink=_SINK) for name in loggers)
    return "\n".join(parts)


def write_logging_config(directory: Path) -> Path:
    """Write :func:`logging_config_text` into ``directory``; the file's path."""
    path = directory / LOGGING_CONFIG_FILE
    path.write_text(logging_config_text())
    return path
