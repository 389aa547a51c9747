"""The ``stage`` command line: one subcommand per module in this package.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``func`` (a callable taking the parsed namespace and returning an exit code). A
:class:`~stage_core.errors.StageError` raised by a subcommand is printed as one line on stderr
and exits with status 2; nothing the user typed ever ends in a traceback. So does an
:class:`OSError` a subcommand did not turn into a message of its own (a full disk, a folder
made read-only mid-run): ``stage CMD: error: PATH: reason``. argparse's own errors (a bad
choice, a missing or misspelt option) are one line too (:class:`OneLineParser`; a misspelt
option names the subcommand's closest one). Before a workload subcommand starts, its sizes are
checked against :mod:`stage_explore.limits`, options the chosen ``--phase`` would ignore are
refused, and ``trace --out`` is checked writable, so an absurd size or a bad folder fails at
once; a folder ``trace`` created for ``--out`` is removed again when the command fails and
leaves it empty. Ctrl-C, and SIGTERM alike (since s35 review8), end a command as
``stage CMD: interrupted``, exit 130, after its own cleanup.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import NoReturn

from stage_core.errors import StageError
from stage_explore.cli.paths import os_error_text, removed_if_failed
from stage_explore.interrupts import terminate_as_interrupt

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


class OneLineParser(argparse.ArgumentParser):
    """argparse with the project's errors: ``stage CMD: error: …`` on one line and exit 2,
    without argparse's usage block (``stage CMD --help`` prints it). Subparsers inherit it."""

    _seen: tuple[str, ...] = ()

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """argparse's parse, remembering the arguments for :meth:`error`."""
        self._seen = tuple(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        if message.startswith("the following arguments are required"):
            # a misspelt required option (`--sytem h100-80gb`) is the likelier fault: name it
            # rather than the option it was meant to be (s31 review4)
            unknown = _unknown_option(self, self._seen)
            if unknown:
                message = _unrecognized(self, unknown)
        message += _command_hint(message)
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


#: Commands a user may type for one that has another name: README's "Generate" is ``trace``.
COMMAND_ALIASES = {"generate": "trace"}


def _command_hint(message: str) -> str:
    """``; did you mean …?`` for argparse's invalid-choice error of the subcommand (a misspelt
    ``valdate``, or ``generate`` for ``trace``: s35 review8); ``""`` for any other error."""
    found = re.match(r"argument COMMAND: invalid choice: '([^']*)'", message)
    if found is None:
        return ""
    typed = found.group(1)
    close = difflib.get_close_matches(typed, COMMANDS, n=1, cutoff=0.6)
    command = COMMAND_ALIASES.get(typed.lower()) or (close[0] if close else "")
    return f"; did you mean `stage {command}`?" if command else ""


def _unknown_option(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str:
    """The first ``-``-led argument in ``argv`` that is neither an option of ``parser`` nor
    a unique prefix of one (argparse's abbreviations) nor a negative number; ``""`` if none."""
    options = [o for action in parser._actions for o in action.option_strings]
    for token in argv:
        if token == "--":
            break
        name = token.split("=")[0]
        if not name.startswith("-") or name.lstrip("-").replace(".", "").isdigit():
            continue
        if name not in options and len([o for o in options if o.startswith(name)]) != 1:
            return token
    return ""


def _unrecognized(parser: argparse.ArgumentParser, argument: str) -> str:
    """``unrecognized argument 'X'``, naming ``parser``'s closest option to a misspelt one."""
    options = [o for action in parser._actions for o in action.option_strings]
    close = difflib.get_close_matches(argument.split("=")[0], options, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close and argument.startswith("-") else ""
    return f"unrecognized argument {argument!r}{hint}"


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of subcommand ``command`` (``parser`` itself when it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            found: argparse.ArgumentParser = action.choices[command]
            return found
    return parser


def _refuse_unknown(parser: argparse.ArgumentParser, command: str, extras: list[str]) -> None:
    """A one-line error for the first argument no option takes, naming the closest option of
    the subcommand (a misspelt ``--tpp`` is more often ``--tp`` than a new option)."""
    if not extras:
        return
    sub = _subparser(parser, command)
    sub.error(_unrecognized(sub, extras[0]))


def _version() -> str:
    """The installed distribution's version (``stage-dse`` in pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("stage-dse")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered subcommand."""
    parser = OneLineParser(
        prog="stage",
        description=(
            "STAGE: generate distributed LLM workloads and explore parallel configurations."
        ),
    )
    parser.add_argument("--version", action="version", version=f"stage {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"stage_explore.cli.{name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stage`` console script."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    _refuse_unknown(parser, args.command, extras)
    # a refused trace leaves no empty --out folder it created (s26 review), as stage explore
    out: AbstractContextManager[None] = (
        removed_if_failed(Path(args.out)) if args.command == "trace" else nullcontext()
    )
    try:
        # SIGTERM as Ctrl-C: an incomplete trace set removed, LOSO workers ended, exit 130
        with out, terminate_as_interrupt(over_default_only=True):
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
