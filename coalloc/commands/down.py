"""``coalloc down``: remove everything ``coalloc up`` started, and nothing else.

The local managers stop first (their subtask processes are killed), then the controller
(the phase log is closed) and the global manager. If ``up`` started an embedded Ray head,
that head's session is stopped too; a cluster ``up`` was given with ``--address`` keeps
running.
"""

from __future__ import annotations

import argparse
from typing import Any

from coalloc.errors import UserError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "down",
        help="stop what coalloc up started (actors; the embedded Ray head if any)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--address", default=None, metavar="ADDR",
        help="Ray cluster to remove coalloc from (default: the one in ~/.coalloc/state.json)",
    )
    parser.set_defaults(handler=run_down)


def run_down(args: argparse.Namespace) -> int:
    from runtime.deploy import _reachable, connect_ray, stop_session, teardown
    from runtime.state import clear_state, load_state, state_path

    state = load_state()
    address = args.address or (state.address if state else None)
    if address is None:
        raise UserError(
            f"nothing to stop: {state_path()} does not exist (give --address to remove "
            "coalloc from a Ray cluster)"
        )
    ours = state is not None and (args.address is None or args.address == state.address)
    removed: list[str] = []
    if address == "auto" or _reachable(address, timeout=2.0):
        connect_ray(address)
        removed = teardown(list(state.actors) if ours and state and state.actors else None)
    else:
        print(f"{address}: no Ray cluster reachable; nothing to remove there")
    if ours and state is not None and state.embedded and state.head_pid:
        import ray

        ray.shutdown()
        stop_session(state.head_pid)
        print(f"stopped the embedded Ray head (pid {state.head_pid})")
    if ours:
        clear_state()
    if removed:
        print(f"removed {len(removed)} actors: {', '.join(removed)}")
    elif ours or args.address:
        print("no coalloc actors were running")
    return 0
