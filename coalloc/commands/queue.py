"""``coalloc queue [--json]``: the jobs that are not over yet, like ``squeue``: pending
jobs first, in the order the next placement cycle tries them (priority, then how long
they have waited), then running jobs. Each with its user, priority, wait (model s:
pending so far, or pending before it started) and reason (why a pending job waits, one
clause per constraint it fails)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from coalloc.commands._runtime_args import table


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "queue", help="pending and running jobs with user, priority, wait and reason",
        description=__doc__,
    )
    parser.add_argument("--json", action="store_true", help="print the queue as JSON")
    parser.add_argument("--address", default=None, metavar="ADDR", help="Ray cluster address")
    parser.set_defaults(handler=run_queue)


def run_queue(args: argparse.Namespace) -> int:
    from coalloc.client import connect

    rows = connect(args.address).queue()
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True, default=str))
        return 0
    print(render(rows))
    return 0


def render(rows: list[dict[str, Any]]) -> str:
    """The queue as a table (reasons are escaped by the table)."""
    if not rows:
        return "no pending or running jobs"
    return table(
        ("JOB", "NAME", "USER", "QOS", "PRIO", "STATE", "WAIT", "ATTEMPT", "NODES", "REASON"),
        [
            (
                r["job_id"], r["name"], r["user"], r["qos"], r["priority"], r["state"],
                r.get("wait"), r.get("attempt", 1), ",".join(r.get("nodes") or []) or "-",
                r.get("reason") or "-",
            )
            for r in rows
        ],
    )
