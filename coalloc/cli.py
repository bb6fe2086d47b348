"""The ``coalloc`` command line: a thin dispatcher over :mod:`coalloc.commands`."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

from coalloc import __version__
from coalloc.errors import UserError, escape_controls

# Sub-command modules are discovered in :mod:`coalloc.commands`, so that adding a
# command never means editing a shared list. ``--help`` lists them in this order
# first, then any others alphabetically.
PREFERRED_ORDER: tuple[str, ...] = (
    "run", "up", "submit", "status", "cancel", "down", "logs", "experiment", "fair",
)


def command_modules() -> list[str]:
    import coalloc.commands as pkg

    names = [m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_")]
    rank = {name: i for i, name in enumerate(PREFERRED_ORDER)}
    names.sort(key=lambda n: (rank.get(n, len(rank)), n))
    return [f"coalloc.commands.{n}" for n in names]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of command module ``only`` alone (what a call
    of that command needs: the other commands' modules, some of them slow to import,
    stay unloaded)."""
    parser = argparse.ArgumentParser(
        prog="coalloc",
        description="Grid co-allocation middleware: synchronous queuing on Ray.",
    )
    parser.add_argument("--version", action="version", version=f"coalloc {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in [only] if only else command_modules():
        importlib.import_module(name).register(subparsers)
    return parser


def _parser_for(argv: Sequence[str] | None) -> argparse.ArgumentParser:
    """:func:`build_parser` for the command ``argv`` names (all of them for ``--help``,
    a typo or no command)."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words and not words[0].startswith("-"):
        module = f"coalloc.commands.{words[0]}"
        if module in command_modules():
            return build_parser(module)
    return build_parser()


#: Exit status when the reader of stdout went away (``coalloc status | head -1``): that
#: of a process killed by SIGPIPE (128 + 13), as ``seq 100000 | head -1`` under
#: ``set -o pipefail``; nothing is printed.
EXIT_BROKEN_PIPE = 141


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what is still
    buffered does not fail again on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # no real file descriptor (captured)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status. Errors of the user's making are one line
    on stderr (no traceback); a closed stdout pipe ends the command quietly with
    :data:`EXIT_BROKEN_PIPE`."""
    try:
        args = _parser_for(argv).parse_args(argv)
        code = int(args.handler(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here at the latest
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except UserError as exc:
        _say(f"coalloc: error: {escape_controls(str(exc))}")
        return exc.exit_code
    except KeyboardInterrupt:
        _say("coalloc: interrupted")
        return 130


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except (BrokenPipeError, OSError, ValueError):  # nobody reads stderr either
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
