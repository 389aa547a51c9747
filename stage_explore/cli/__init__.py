"""The ``stage`` command line: one subcommand per module in this package.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``func`` (a callable taking the parsed namespace and returning an exit code). A
:class:`~stage_core.errors.StageError` raised by a subcommand is printed as one line on stderr
and exits with status 2; nothing the user typed ever ends in a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from stage_core.errors import StageError

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
        code: int = args.func(args)
    except StageError as error:
        print(f"stage {args.command}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head & co.
        return 0
    except KeyboardInterrupt:
        print(f"stage {args.command}: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
