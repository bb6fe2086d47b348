"""``coalloc submit FILE``: submit the jobs of a YAML or JSON job file to the live runtime.

Prints one line per job: its id, whether it was admitted (with its nodes and start time),
is pending (it waits in the queue until it fits: ``coalloc status JOB`` says why) or was
rejected (with the reason). The jobs of one file are admitted in order as one batch and
start at the same cycle boundary. Exit status 1 if any job was rejected.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "submit",
        help="submit a job file (YAML/JSON) to the running coalloc; prints job ids",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", metavar="FILE", help="job file (.yaml, .yml or .json)")
    parser.add_argument("--address", default=None, metavar="ADDR", help="Ray cluster address")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the job ids")
    parser.set_defaults(handler=run_submit)


def run_submit(args: argparse.Namespace) -> int:
    from coalloc.client import connect, recorded_api, recorded_node_count, submitting_user
    from coalloc.errors import escape_controls

    if recorded_api(args.address) is not None:
        # The global manager checks the file (same checks, same messages): no job parser
        # to load here.
        answers = connect(args.address).submit_file(args.file)
    else:
        from workloads.spec import load_jobs

        # A bad file fails before any cluster is contacted; the node count recorded by up
        # (if any) refuses a job with more subtasks than nodes before they are parsed.
        load_jobs(args.file, recorded_node_count(args.address),
                  default_user=submitting_user())
        answers = connect(args.address).submit_all(args.file)
    rejected = 0
    for a in answers:
        if args.quiet:
            print(a.job_id)
        elif a.admitted:
            print(
                f"{a.job_id}  admitted  {a.name}  nodes {','.join(a.nodes)}  "
                f"starts at {a.start_at or 0.0:g} s"
            )
        elif a.pending:
            print(f"{a.job_id}  pending  {a.name}  ({escape_controls(a.reason)})")
        else:
            print(f"{a.job_id}  rejected  {a.name}  ({escape_controls(a.reason)})")
        rejected += not a.admitted and not a.pending
    return 1 if rejected else 0
