"""``coalloc submit FILE``: submit the jobs of a YAML or JSON job file to the live runtime.

Prints one line per job: its id, whether it was admitted (with its nodes and start time),
is pending (it waits in the queue until it fits: ``coalloc status JOB`` says why) or was
rejected (with the reason). The jobs of one file are admitted in order as one batch and
start at the same cycle boundary. Exit status 1 if any job was rejected.

A submission that got no answer (the global manager stopped, was cut off, or failed while
answering) may still be applied: the command says so and exits 2. Running the same
``submit`` again is safe: it sends the first attempt's submission token, and the global
manager answers a token it has seen with the first answers, so no job is made twice
(``coalloc/submissions.py``). ``--new`` sends a fresh token instead.
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
    parser.add_argument(
        "--new", action="store_true",
        help="do not reuse the token of an earlier submission of this file that got no "
             "answer (its jobs may exist: check coalloc queue first)")
    parser.set_defaults(handler=run_submit)


def run_submit(args: argparse.Namespace) -> int:
    from coalloc.client import connect, recorded_api, recorded_node_count, submitting_user

    api = recorded_api(args.address)
    if api is None:
        from workloads.spec import load_jobs

        # A bad file fails before any cluster is contacted; the node count recorded by up
        # (if any) refuses a job with more subtasks than nodes before they are parsed.
        # (Through the API the global manager checks the file: same checks, same messages.)
        load_jobs(args.file, recorded_node_count(args.address),
                  default_user=submitting_user())
    client = connect(args.address)
    deployment = api.url if api is not None else client.address
    return _report(_submit_once(client, args.file, deployment, args.new), args.quiet)


def _submit_once(client: Any, source: str, deployment: str, new: bool) -> list[Any]:
    """Submit the file ``source`` with a token that a retry of the same submission reuses
    (see the module docstring)."""
    import sys
    import time

    from coalloc.client import new_token, submitting_user
    from coalloc.errors import NoAnswer
    from coalloc.submissions import Ledger, submission_key
    from runtime.state import coalloc_home

    try:
        with open(source, "rb") as f:
            content = f.read()
    except OSError:
        return list(client.submit_file(source))  # names the problem as it always has
    ledger = Ledger(coalloc_home() / "submissions")
    key = submission_key(deployment, submitting_user(), source, content)
    sent, retry = ledger.begin(key, source, new_token(), time.time(), new=new)
    if retry:
        print(f"coalloc: {source}: the submission of this file sent at {sent.sent_at_text} "
              "got no answer; sending it again with its token (jobs it made are answered, "
              "not made again)", file=sys.stderr)
    try:
        answers = list(client.submit_file(source, sent.token))
    except NoAnswer as exc:
        raise NoAnswer(
            f"{exc}. The submission may still be applied: check with coalloc queue; "
            f"running this coalloc submit again is safe (it resends this submission's "
            "token, so no job is made twice)") from None
    except BaseException:
        ledger.answered(key)  # refused with an answer: nothing was applied
        raise
    ledger.answered(key)
    return answers


def _report(answers: list[Any], quiet: bool) -> int:
    from coalloc.errors import escape_controls

    rejected = 0
    for a in answers:
        if quiet:
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
