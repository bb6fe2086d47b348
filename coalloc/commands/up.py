"""``coalloc up``: start the live runtime (global manager, controller, local managers).

On an existing Ray cluster (``--address host:port`` or ``auto``) the actors are created
there; with no ``--address`` an embedded Ray head is started first and survives this
process (``coalloc down`` stops it). What was started is recorded in
``~/.coalloc/state.json`` so that later ``coalloc`` commands find it, with the token of
the API's first admin credential (the user running ``up``): ``coalloc user add`` makes
the other users' credentials files.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from coalloc.commands._runtime_args import (
    CURVE_NOTE,
    INSECURE_NOTE,
    _port,
    add_runtime_args,
    config_from_args,
)
from coalloc.errors import UserError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "up",
        help="start the live runtime on a Ray cluster (or an embedded local Ray)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--address", default=None, metavar="ADDR",
        help="Ray cluster to use: host:port of its GCS, or auto (default: start an "
        "embedded Ray head on this machine)",
    )
    parser.add_argument(
        "--log", default=None, metavar="PATH",
        help="phase-difference log (JSON Lines) on the controller's node (default: "
        "~/.coalloc/logs/phase-<time>.jsonl, linked as phase.jsonl)",
    )
    parser.add_argument(
        "--num-cpus", type=int, default=None, metavar="N",
        help="CPUs of the embedded Ray head (default: all)",
    )
    parser.add_argument(
        "--api-port", type=_port, default=0, metavar="P",
        help="TCP port of the global manager's HTTP API, on this Ray node's address "
        "(default: a free one; recorded with the admin's token in the state file)",
    )
    parser.add_argument(
        "--keep-finished", default="1d", metavar="DURATION",
        help="how long a finished job stays in status and the job table before it moves "
        "to the archive (coalloc status --all): e.g. 1d, 6h, 30m, 90s (default 1d)",
    )
    parser.add_argument(
        "--lease", default=None, metavar="S",
        help="real seconds a local manager's lease lasts after its last renewal the global "
        "manager granted; a node that cannot renew for a whole lease stops (fences) its "
        "subtasks. Must be shorter than the node-loss window (--node-timeout cycles); "
        "default 2/3 of it (10 s at the defaults)",
    )
    add_runtime_args(parser, nodes_default=None)
    parser.set_defaults(handler=run_up)


def _check_not_up() -> None:
    """Refuse to start twice; forget a recorded deployment whose cluster is gone."""
    from runtime.deploy import gcs_problem
    from runtime.state import clear_state, load_state, state_path

    state = load_state()
    if state is None:
        return
    # Gone also when the port accepts connections but no GCS answers (see connect_ray).
    if gcs_problem(state.address, connect_timeout=1.0) is None:
        raise UserError(
            f"{state_path()}: coalloc is already up on {state.address}; run coalloc down first"
        )
    clear_state()


def run_up(args: argparse.Namespace) -> int:
    from runtime.deploy import connect_ray, deploy, start_embedded_head, stop_session
    from runtime.state import DeploymentState, save_state

    t0 = time.monotonic()
    config = config_from_args(args)
    _check_not_up()
    head = None
    if args.address:
        address = connect_ray(args.address)
    else:
        print("starting an embedded Ray head ...", flush=True)
        head = start_embedded_head(args.num_cpus)
        try:
            address = connect_ray(head.address, head.auth_mode)
        except BaseException:
            stop_session(head.pid)
            raise
    try:
        dep = deploy(config, args.nodes, args.log,
                     progress=lambda m: print(m + " ...", flush=True), api=True,
                     api_port=args.api_port, nodes_per_process=args.nodes_per_process)
    except BaseException:
        if head is not None:
            import ray

            ray.shutdown()
            stop_session(head.pid)
        raise
    path = save_state(
        DeploymentState(
            address=address,
            embedded=head is not None,
            actors=dep.actors,
            head_pid=head.pid if head else None,
            temp_dir=head.temp_dir if head else None,
            phase_log=dep.phase_log,
            report_endpoint=dep.report_endpoint,
            started_at=time.time(),
            extra=dict(
                {"auth_mode": head.auth_mode, "connect_address": head.address} if head else {},
                n_nodes=len(dep.placements),
                api_url=dep.api_url,
                api_token=dep.api_token,
                transport_security="insecure" if config.insecure else "curve",
            ),
        )
    )
    where = f"embedded Ray head (pid {head.pid})" if head else "existing Ray cluster"
    print(f"coalloc is up on {address} ({where})")
    print(
        f"  policy {config.policy}; time scale {config.time_scale:g} model s per real s; "
        f"cycle {config.cycle:g} s; control period {config.control_period:g} s"
    )
    for p in dep.placements:
        kind = "emulated" if p.emulated else "Ray node"
        print(
            f"  node {p.node.name}: {p.node.speed_mhz:g} MHz x {p.node.cores:g} core(s) "
            f"({kind} {p.ray_node_id[:12]})"
            + (f" labels {','.join(sorted(p.node.labels))}" if p.node.labels else "")
        )
    print(f"  report endpoint {dep.report_endpoint}")
    print(f"  API {dep.api_url} (admin {dep.api_admin}: token in the state file; "
          "coalloc user add NAME --out FILE for the others)")
    print(f"  transport {INSECURE_NOTE if config.insecure else CURVE_NOTE}")
    print(f"  phase log {dep.phase_log}")
    print(f"  state file {path}")
    print(
        f"  local managers ready {dep.ready_s:.1f} s after deploy started; "
        f"{time.monotonic() - t0:.1f} s in all"
    )
    return 0
