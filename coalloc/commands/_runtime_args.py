"""Options shared by ``coalloc up`` and ``coalloc run``.

``fmt`` and ``table`` are re-exported from :mod:`coalloc.tables` (the one table renderer)
for the commands that import them from here."""

from __future__ import annotations

import argparse
import math
from typing import Any

from coalloc.errors import UserError
from coalloc.tables import cell as fmt
from coalloc.tables import render as table

__all__ = [
    "CURVE_NOTE", "INSECURE_NOTE", "add_runtime_args", "config_from_args", "fmt", "table",
]

#: How ``up``, ``run`` and ``status`` describe the transport's security.
CURVE_NOTE = "CURVE: only this runtime's local managers can connect"
INSECURE_NOTE = (
    "INSECURE (--insecure): no CURVE; anyone who reaches the controller's ports can send "
    "reports and take commands"
)


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return v


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port 0-65535: {text!r}")
    return int(text)


def add_runtime_args(parser: argparse.ArgumentParser, nodes_default: str | None) -> None:
    """The deployment options (``--nodes``, ``--policy``, time scale, ports, NTP, log)."""
    parser.add_argument(
        "--nodes",
        default=nodes_default,
        metavar="SPEC",
        help="emulate grid nodes as separate local managers: a count (4: speeds drawn "
        "uniform in 100-600 MHz, seeded) or speeds in MHz (300,450,600), each optionally "
        "with labels after colons (300:fast:gpu,450: n0 labelled fast and gpu, n1 none); "
        "without --nodes a Ray node's custom resource coalloc_label_NAME gives it label "
        "NAME; default: " + (nodes_default or "one local manager per Ray node"),
    )
    parser.add_argument(
        "--nodes-per-process", type=_positive_int, default=None, metavar="K",
        help="emulated nodes hosted by one local-manager process (each keeps its own "
        "scheduler, sockets, keys and checkpoint; a crash of the process restarts all K); "
        "default: 1 up to 8 nodes, else the fewest processes of at most 32 nodes",
    )
    parser.add_argument(
        "--policy", default="sq", help="scheduling policy: sq (pace control), sq_paper (the "
        "paper's windows), strict, none, or an ablation (default: sq)"
    )
    parser.add_argument(
        "--time-scale", type=_positive_float, default=100.0, metavar="X",
        help="model seconds per real second (default 100: a 1800 s job runs for 18 s)",
    )
    parser.add_argument(
        "--cycle", type=_positive_float, default=None, metavar="Q",
        help="local scheduling cycle q in model seconds (default: the simulator's)",
    )
    parser.add_argument(
        "--control-every", type=int, default=None, metavar="N",
        help="cycles per control period (default: the simulator's)",
    )
    parser.add_argument(
        "--report-port", type=_port, default=0, metavar="P",
        help="TCP port of the controller's report socket (default: ephemeral)",
    )
    parser.add_argument(
        "--command-port", type=_port, default=0, metavar="P",
        help="TCP port of the controller's command socket (default: ephemeral)",
    )
    parser.add_argument(
        "--ntp-server", action="append", default=[], metavar="HOST[:PORT]",
        help="NTP server for the real clock (repeatable; none: the local clock)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for node speeds and placement")
    parser.add_argument(
        "--insecure", action="store_true",
        help="debugging only: no CURVE authentication on the report and command sockets "
        "(anyone who reaches the controller's ports can send reports); status says so",
    )
    parser.add_argument(
        "--placement", default="backfill", metavar="NAME",
        help="placement policy: backfill (priority and fair-share order, first fit that "
        "does not delay the reservation of the longest waiter; default), flow (min-cost "
        "flow over the pending queue), least_loaded, random",
    )
    parser.add_argument(
        "--queue", choices=("wait", "reject"), default="wait",
        help="a strict job that does not fit at once: wait in the pending queue until it "
        "fits (default), or reject it (the paper's behaviour)",
    )
    parser.add_argument(
        "--node-timeout", type=int, default=50, metavar="CYCLES",
        help="cycles without an answer from a node's local manager before the node is "
        "lost and its jobs end by their on_node_loss policy (default 50; after "
        "stall_cycles, 10, placement already skips it)",
    )
    parser.add_argument(
        "--core-mhz", type=_positive_float, default=1000.0, metavar="MHZ",
        help="speed of one CPU of a Ray node without a coalloc_mhz resource (default 1000)",
    )


def config_from_args(args: argparse.Namespace, log_path: str = "") -> Any:
    """A :class:`runtime.config.RuntimeConfig` from the parsed options (UserError if bad;
    ``--nodes`` is checked here too, before anything is started)."""
    from clocks.real_clock import parse_server
    from runtime.config import RuntimeConfig, runtime_core
    from runtime.nodes import parse_nodes_spec

    try:
        if args.nodes:
            parse_nodes_spec(args.nodes, args.seed)
        for i, server in enumerate(args.ntp_server):
            parse_server(server, i)
        optional = {
            key: value
            for key, value in (("cycle", args.cycle), ("control_every", args.control_every))
            if value is not None
        }
        core = runtime_core(queue=getattr(args, "queue", "wait"), **optional)
        lease = 0.0  # RuntimeConfig's default: 2/3 of the node-loss window
        if getattr(args, "lease", None) is not None:
            from coalloc.flags import seconds_flag

            lease = seconds_flag("--lease", args.lease)
        keep_finished = 86400.0  # 1d, as RuntimeConfig; coalloc up's --keep-finished
        if getattr(args, "keep_finished", None) is not None:
            from coalloc.flags import duration_flag

            keep_finished = duration_flag("--keep-finished", args.keep_finished)
        return RuntimeConfig(
            core,
            policy=args.policy,
            time_scale=args.time_scale,
            report_port=args.report_port,
            command_port=args.command_port,
            ntp_servers=tuple(args.ntp_server),
            log_path=log_path,
            seed=args.seed,
            core_mhz=args.core_mhz,
            insecure=bool(getattr(args, "insecure", False)),
            placement=getattr(args, "placement", "backfill"),
            node_timeout=getattr(args, "node_timeout", 50),
            keep_finished_s=keep_finished,
            lease_s=lease,
        )
    except ValueError as exc:
        msg = str(exc).replace("servers[", "--ntp-server[")
        raise UserError("--" + msg if msg.startswith("lease: ") else msg) from None
