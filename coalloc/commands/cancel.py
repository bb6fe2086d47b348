"""``coalloc cancel JOB``: cancel a running job; its subtask processes are killed and its
nodes' budgets released."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cancel", help="cancel a running job", description=__doc__
    )
    parser.add_argument("job", metavar="JOB", help="job id (as submit printed it)")
    parser.add_argument("--address", default=None, metavar="ADDR", help="Ray cluster address")
    parser.set_defaults(handler=run_cancel)


def run_cancel(args: argparse.Namespace) -> int:
    from coalloc.client import connect

    rec = connect(args.address).cancel(args.job)
    if rec["state"] == "cancelled":
        print(f"{args.job}  cancelled")
    else:
        print(f"{args.job}  already {rec['state']}; nothing to cancel")
    return 0
