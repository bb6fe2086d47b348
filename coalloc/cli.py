"""The ``coalloc`` command line: a thin dispatcher over :mod:`coalloc.commands`."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from coalloc import __version__
from coalloc.errors import UserError

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coalloc",
        description="Grid co-allocation middleware: synchronous queuing on Ray.",
    )
    parser.add_argument("--version", action="version", version=f"coalloc {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in command_modules():
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except UserError as exc:
        print(f"coalloc: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("coalloc: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
