"""``coalloc experiment NAME``: reproducible experiments (see :mod:`coalloc.experiments`)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from typing import Any


def register(subparsers: Any) -> None:
    import coalloc.experiments as pkg

    parser = subparsers.add_parser(
        "experiment",
        help="run a reproducible experiment (progress bar; CSV, JSON and PNG out)",
    )
    inner = parser.add_subparsers(dest="experiment", metavar="NAME")
    inner.required = True
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"coalloc.experiments.{info.name}").register(inner)
    parser.set_defaults(handler=_no_experiment(parser))


def _no_experiment(parser: argparse.ArgumentParser):  # pragma: no cover - argparse exits
    def handler(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    return handler
