"""``coalloc cancel [JOB ...] [--user U] [--state pending|running]``: cancel jobs, like
``scancel``. Running jobs' subtask processes are killed and their nodes' budgets
released; pending jobs leave the queue.

Job ids name the jobs; ``--user`` and ``--state`` filter them, or, without ids, select
every job not over yet that matches (``coalloc cancel --user alice --state pending``).
One line per job: ``cancelled (was running)``, ``already cancelled`` (or completed,
failed, ...: a job that is over is left as it is), or ``skipped`` (named, but another
user's or in another state). Unknown job ids are one error line at the end, exit 2."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cancel", help="cancel jobs (by id, --user, --state), like scancel",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("jobs", nargs="*", metavar="JOB", help="job ids (as submit printed them)")
    parser.add_argument("--user", default=None, metavar="U", help="only jobs of user U")
    parser.add_argument("--state", choices=("pending", "running"), default=None,
                        help="only jobs in this state")
    parser.add_argument("--address", default=None, metavar="ADDR", help="Ray cluster address")
    parser.set_defaults(handler=run_cancel)


def run_cancel(args: argparse.Namespace) -> int:
    from coalloc.client import connect
    from coalloc.errors import UserError, escape_controls

    if not args.jobs and args.user is None and args.state is None:
        raise UserError("cancel: give job ids, --user or --state")
    results = connect(args.address).cancel_jobs(args.jobs or None, args.user, args.state)
    unknown = []
    for r in results:
        job = escape_controls(r.job_id)
        if r.result == "unknown job id":
            unknown.append(job)
        elif r.result == "cancelled":
            print(f"{job}  cancelled (was {r.was})")
        elif r.result.startswith("already "):
            print(f"{job}  {r.result}; nothing to cancel")
        else:
            print(f"{job}  {escape_controls(r.result)}")
    if not results and not args.jobs:
        print("no job matched")
    if unknown:
        raise UserError(f"{', '.join(unknown)}: unknown job id" + ("s" if len(unknown) > 1 else ""))
    return 0
