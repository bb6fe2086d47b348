"""``coalloc progress report T [--end E] [--waiting]``: report a subtask's progress from
a shell: the application has reached ``T`` of its own time (steps, simulated seconds)
out of ``E``. One datagram to the node's local manager, sent at once (``docs/wire.md``,
"Progress datagrams"); outside coalloc (no ``COALLOC_PROGRESS_ADDR`` in the environment)
it does nothing and exits 0, so a script keeps working when run alone."""

from __future__ import annotations

import argparse
import math
import os
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "progress", help="report a subtask's own progress (from inside a subtask)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="progress_command", metavar="ACTION")
    sub.required = True
    rep = sub.add_parser("report", help="report T (and the total E) once")
    rep.add_argument("t", metavar="T", help="the application's own time reached (>= 0)")
    rep.add_argument("--end", default=None, metavar="E", help="its total (> 0), if known")
    rep.add_argument("--wait-s", default="0", metavar="S",
                     help="seconds spent waiting at exchanges so far (default 0)")
    rep.add_argument("--waiting", action="store_true", help="the process waits now")
    parser.set_defaults(handler=run_progress)


def _number(text: str, name: str, positive: bool) -> float:
    from coalloc.errors import UserError

    try:
        value = float(text)
    except ValueError:
        raise UserError(f"progress report: {name}: not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise UserError(f"progress report: {name}: must be a finite number {bound}, "
                        f"got {text!r}")
    return value


def run_progress(args: argparse.Namespace) -> int:
    import socket

    from coalloc.errors import UserError
    from local_manager.progress_wire import ADDR_ENV, KEY_ENV, encode, parse_addr

    t = _number(args.t, "T", positive=False)
    end = None if args.end is None else _number(args.end, "--end", positive=True)
    wait_s = _number(args.wait_s, "--wait-s", positive=False)
    addr, key = os.environ.get(ADDR_ENV), os.environ.get(KEY_ENV)
    if not addr or not key:
        return 0
    try:
        target = parse_addr(addr)
    except ValueError as exc:
        raise UserError(f"progress report: {exc}") from None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendto(encode(key, t, end, wait_s, args.waiting), target)
        except OSError as exc:
            raise UserError(f"progress report: cannot send to {addr}: {exc.strerror or exc}") \
                from None
    return 0
