"""``coalloc queue [--json]``: the jobs that are not over yet, like ``squeue``: pending
jobs first, in the order the next placement cycle tries them (priority, then how long
they have waited), then running jobs. Each with its user, priority, wait (model s:
pending so far, or pending before it started), reason (why a pending job waits, one
clause per constraint it fails) and, for a pending job, its estimated start as
``squeue --start`` prints it: the local wall-clock time ``YYYY-MM-DDTHH:MM:SS``, or
``N/A`` when it cannot be estimated (``--json``: ``estimated_start`` in model s and
``estimated_start_time`` in ISO 8601 UTC; docs/runtime.md, "Estimated start")."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from coalloc.commands._runtime_args import table
from runtime.status import JobRecord, QueueRow
from workloads.model import JobPhase


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
    from runtime.api import strict_json

    rows = connect(args.address).queue()
    if args.json:
        print(json.dumps(strict_json(rows), indent=2, sort_keys=True, default=str))
        return 0
    print(render(rows))
    return 0


def render(rows: list[QueueRow]) -> str:
    """The queue as a table (reasons are escaped by the table)."""
    if not rows:
        return "no pending or running jobs"
    return table(
        ("JOB", "NAME", "USER", "QOS", "PRIO", "STATE", "WAIT", "EST. START", "ATTEMPT",
         "NODES", "REASON"),
        [
            (
                r.job_id, r.name, r.user, r.qos.value, r.priority, r.state.value, r.wait,
                start_text(r), r.attempt, ",".join(r.nodes) or "-", r.reason or "-",
            )
            for r in rows
        ],
    )


def start_text(job: QueueRow | JobRecord) -> str:
    """A pending job's estimated start as ``squeue --start`` shows it: local wall-clock
    time (``YYYY-MM-DDTHH:MM:SS``), ``N/A`` if it cannot be estimated; ``-`` for a job
    that is not pending. Without a wall-clock time, the model time."""
    if job.state is not JobPhase.PENDING:
        return "-"
    wall = job.estimated_start_time
    if wall:
        return datetime.fromisoformat(wall).astimezone().strftime("%Y-%m-%dT%H:%M:%S")
    model = job.estimated_start
    return "N/A" if model is None else f"model {model:.0f} s"


def time_from_now(seconds: float) -> str:
    """Real seconds from now as ``now``, ``in 45s``, ``in 12m`` or ``in 2h05m``."""
    s = round(seconds)
    if s <= 0:
        return "now"
    if s < 60:
        return f"in {s}s"
    if s < 3600:
        return f"in {s // 60}m"
    return f"in {s // 3600}h{(s % 3600) // 60:02d}m"
