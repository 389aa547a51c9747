"""The ``stage`` command line: one subcommand per module in this package.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``func`` (a callable taking the parsed namespace and returning an exit code). A
:class:`~stage_core.errors.StageError` raised by a subcommand is printed as one line on stderr
and exits with status 2; nothing the user typed ever ends in a traceback. So does an
:class:`OSError` a subcommand did not turn into a message of its own (a full disk, a folder
made read-only mid-run): ``stage CMD: error: PATH: reason``. Before a workload subcommand
starts, its sizes are checked against :mod:`stage_explore.limits`, options the chosen
``--phase`` would ignore are refused, and ``trace --out`` is checked writable, so an absurd size or a bad folder fails at once.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from stage_core.errors import StageError
from stage_explore.cli.paths import os_error_text

#: Subcommand modules, in the order ``stage --help`` lists them.
COMMANDS: tuple[str, ...] = (
    "redistribute",
    "memory",
    "trace",
    "check",
    "eval",
    "explore",
    "report",
    "validate",
    "calibrate",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="stage",
        description=(
            "STAGE: generate distributed LLM workloads and explore parallel configurations."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"stage_explore.cli.{name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stage`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _check_before_work(args)
        code: int = args.func(args)
    except StageError as error:
        print(f"stage {args.command}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a write the subcommand did not foresee: still one line
        if isinstance(error, BrokenPipeError):
            return 0
        print(f"stage {args.command}: error: {os_error_text(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"stage {args.command}: interrupted", file=sys.stderr)
        return 130
    return code


def _check_before_work(args: argparse.Namespace) -> None:
    """The checks every workload subcommand needs before it starts: sizes within
    :mod:`stage_explore.limits`, and for ``trace`` a writable ``--out`` folder and a number of
    rank files it can write."""
    from stage_core.errors import ConfigError
    from stage_explore.cli.paths import writable_folder
    from stage_explore.cli.serving import check_phase_options
    from stage_explore.limits import MAX_RANK_FILES, check_options, world_size_of

    if not all(hasattr(args, name) for name in ("dp", "tp", "cp", "pp", "seq_len", "layers")):
        return
    check_options(args)
    check_phase_options(args)
    if args.command != "trace":
        return
    world = world_size_of(args)
    if getattr(args, "format", "symmetric") != "symmetric" and world > MAX_RANK_FILES:
        raise ConfigError(
            f"--format {args.format}: expected at most {MAX_RANK_FILES:,} ranks (one file "
            f"each), got {world:,}; use --format symmetric (one program per rank class)"
        )
    writable_folder(Path(args.out), "--out")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
