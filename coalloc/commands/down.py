"""``coalloc down``: remove everything ``coalloc up`` started, and nothing else.

The local managers stop first (their subtask processes are killed), then the controller
(the phase log is closed) and the global manager. If ``up`` started an embedded Ray head,
that head's session is stopped too; a cluster ``up`` was given with ``--address`` keeps
running. When no Ray cluster answers at the address, the state file is forgotten (and a
recorded embedded head's session stopped) and ``down`` fails with one line: nothing could
be removed there.
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
    from runtime.deploy import connect_ray, gcs_problem, stop_session, teardown
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
    problem = None if address == "auto" else gcs_problem(address)
    if problem is None:
        connect_ray(address)
        removed = teardown(list(state.actors) if ours and state and state.actors else None)
    if ours and state is not None and state.embedded and state.head_pid:
        import ray

        ray.shutdown()
        stop_session(state.head_pid)
        print(f"stopped the embedded Ray head (pid {state.head_pid})")
    if ours:
        clear_state()
    if problem is not None:
        # Nothing could be removed there (actors, restart files): say so and fail, after
        # forgetting a deployment whose cluster is gone.
        forgot = f"; forgot the deployment recorded in {state_path()}" if ours else ""
        raise UserError(f"{address}: no Ray cluster reachable there ({problem}); nothing "
                        f"removed there{forgot}")
    if removed:
        print(f"removed {len(removed)} actors: {', '.join(removed)}")
    elif ours or args.address:
        print("no coalloc actors were running")
    return 0
