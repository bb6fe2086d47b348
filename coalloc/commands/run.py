"""``coalloc run FILE``: the embedded one-shot. Start a private local Ray with the live
runtime on it, submit the jobs of FILE, wait for them with a progress bar, print the
per-job summary (phase differences, completion skew, turnaround) and stop everything.

With no ``--nodes`` three emulated nodes of 2000, 4000 and 6000 MHz are used (sized so that
the example jobs are admitted). With ``--address`` an existing cluster is used instead of
a private Ray; only what this command started is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coalloc.commands._runtime_args import INSECURE_NOTE, add_runtime_args, config_from_args
from coalloc.errors import UserError, escape_controls
from coalloc.tables import cell as fmt
from coalloc.tables import render as table
from runtime.api import strict_json
from runtime.status import StatusDocument
from workloads.model import JobPhase

if TYPE_CHECKING:
    from coalloc.client import Client

#: Emulated nodes (MHz) of ``coalloc run`` when ``--nodes`` is not given.
DEFAULT_RUN_NODES = "2000,4000,6000"
#: Real seconds between two progress polls.
POLL_S = 0.25


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="one-shot: start an embedded runtime, run a job file, print the summary, stop",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", metavar="FILE", help="job file (.yaml, .yml or .json)")
    parser.add_argument(
        "--timeout", type=float, default=300.0, metavar="S",
        help="give up (and cancel) after S real seconds (default 300)",
    )
    parser.add_argument(
        "--out", default=None, metavar="DIR",
        help="write DIR/phase.jsonl (the phase log), DIR/status.json and DIR/summary.json",
    )
    parser.add_argument(
        "--address", default=None, metavar="ADDR",
        help="use this Ray cluster instead of a private local Ray",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_runtime_args(parser, nodes_default=DEFAULT_RUN_NODES)
    parser.set_defaults(handler=run_run)


def run_run(args: argparse.Namespace) -> int:
    from coalloc.client import connect, submitting_user
    from runtime.config import GLOBAL_NAME
    from runtime.deploy import connect_ray, deploy, find_actor, teardown
    from runtime.nodes import parse_nodes_spec
    from workloads.spec import load_jobs

    config = config_from_args(args)  # checks --nodes
    # A bad file fails before Ray starts; with --nodes the node count is known, and a job
    # with more subtasks is refused before they are parsed.
    n_nodes = len(parse_nodes_spec(args.nodes, args.seed)) if args.nodes else None
    jobs = load_jobs(args.file, n_nodes, default_user=submitting_user())
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    started_ray = False
    if args.address:
        connect_ray(args.address)
        if find_actor(GLOBAL_NAME) is not None:
            raise UserError(
                f"{args.address}: coalloc is already running there; use coalloc submit, "
                "or coalloc down first"
            )
    elif not _ray_initialized():
        print("starting a private local Ray ...", flush=True)
        import logging

        import ray

        ray.init(
            address="local",
            namespace="coalloc",
            include_dashboard=False,
            logging_level=logging.ERROR,
            log_to_driver=False,
        )
        started_ray = True
    t0 = time.monotonic()
    dep = None
    try:
        dep = deploy(
            config,
            args.nodes,
            str(out / "phase.jsonl") if out else None,
            progress=lambda m: print(m + " ...", flush=True),
            nodes_per_process=args.nodes_per_process,
            # The members' key-value store is served on the API (docs/coupled.md).
            api=True,
        )
        print(f"runtime ready in {dep.ready_s:.1f} s; phase log {dep.phase_log}", flush=True)
        if config.insecure:
            print(f"transport {INSECURE_NOTE}", flush=True)
        client = connect()
        answers = client.submit_all(jobs)
        for a in answers:
            if a.admitted:
                print(f"{a.job_id}  admitted  {a.name}  nodes {','.join(a.nodes)}")
            elif a.pending:
                print(f"{a.job_id}  pending  {a.name}  ({escape_controls(a.reason)})")
            else:
                print(f"{a.job_id}  rejected  {a.name}  ({escape_controls(a.reason)})")
        admitted = [a.job_id for a in answers if a.admitted or a.pending]
        timed_out = _wait(client, admitted, args.timeout, not args.no_progress)
        status = client.status()
        if timed_out:
            for job_id in timed_out:
                client.cancel(job_id)
            status = client.status()
        # Let the controller write the last summaries before the log is read.
        time.sleep(min(1.0, 2 * config.real_cycle + 0.1))
        summary = _summary(status, dep.phase_log)
        print()
        print(_render(summary))
        print(f"\n{len(admitted)} of {len(answers)} jobs admitted; wall time "
              f"{time.monotonic() - t0:.1f} s; phase log {dep.phase_log}")
        if out is not None:
            (out / "status.json").write_text(
                json.dumps(strict_json(status), indent=2, default=str) + "\n")
            (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        if timed_out:
            raise UserError(
                f"{args.file}: {len(timed_out)} job(s) still running after {args.timeout:g} s "
                f"(cancelled: {', '.join(timed_out)})",
                exit_code=1,
            )
        failed = [j["job_id"] for j in summary["jobs"] if j["state"] not in ("completed",
                                                                          "rejected")]
        return 1 if failed or len(admitted) < len(answers) else 0
    finally:
        if dep is not None:
            teardown(list(dep.actors))
        if started_ray:
            import ray

            ray.shutdown()


def _ray_initialized() -> bool:
    import sys

    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


def _wait(client: Client, job_ids: list[str], timeout: float, show: bool) -> list[str]:
    """Poll until every job is final; a tqdm bar shows the mean subtask progress.
    Returns the ids still running at the timeout."""
    from tqdm import tqdm

    deadline = time.monotonic() + timeout
    bar = tqdm(total=100, unit="%", disable=not show or not job_ids, leave=True,
               bar_format="{l_bar}{bar}| {n:.0f}% [{elapsed}{postfix}]")
    try:
        while True:
            states = client.job_states(job_ids)
            running = [j for j in job_ids if states.get(j) in ("running", "pending")]
            if show and job_ids:
                st = client.status()
                progress = []
                phis = []
                for j in st.jobs:
                    if j.job_id not in job_ids:
                        continue
                    progress += [1.0 if j.state.final else (s.progress or 0.0)
                                 for s in j.subtasks]
                    if j.phase_difference is not None and j.state is JobPhase.RUNNING:
                        phis.append(j.phase_difference)
                pct = 100 * sum(progress) / len(progress) if progress else 0.0
                bar.n = pct
                bar.set_postfix_str(
                    f"{len(job_ids) - len(running)}/{len(job_ids)} done"
                    + (f", phase diff {max(phis):.1f} s" if phis else ""),
                    refresh=False,
                )
                bar.refresh()
            if not running:
                return []
            if time.monotonic() >= deadline:
                return running
            time.sleep(POLL_S)
    finally:
        bar.close()


def _summary(status: StatusDocument, log_path: str) -> dict[str, Any]:
    """Per job: state, nodes, and the phase-log summary; plus the run summary."""
    from coallocator.phase_log import read_log, summarize

    rows: dict[str, Any] = {}
    run: dict[str, Any] = {}
    try:
        from coalloc.commands.logs import warn_torn

        per_job, run_summary = summarize(read_log(log_path, on_torn=warn_torn))
        rows = {r["job"]: r for r in per_job}
        run = {
            "completed_strict_jobs": run_summary.completed,
            "mean_phase_difference": run_summary.mean_phase_difference,
            "max_phase_difference": run_summary.max_phase_difference,
            "mean_completion_skew": run_summary.mean_completion_skew,
            "mean_turnaround": run_summary.mean_turnaround,
        }
    except FileNotFoundError:
        pass
    jobs = []
    for j in status.jobs:
        r = rows.get(j.job_id, {})
        jobs.append(
            {
                "job_id": j.job_id,
                "name": j.name,
                "qos": j.qos.value,
                "state": j.state.value,
                "nodes": j.nodes,
                "mean_phase_difference": r.get("mean_phase_difference"),
                "max_phase_difference": r.get("max_phase_difference"),
                "completion_skew": r.get("completion_skew"),
                "turnaround": r.get("turnaround"),
                "reason": j.reason,
            }
        )
    return {"jobs": jobs, "run": run}


def _render(summary: dict[str, Any]) -> str:
    text = table(
        ("JOB", "NAME", "QOS", "STATE", "MEAN PHASE DIFF", "MAX PHASE DIFF", "SKEW",
         "TURNAROUND"),
        [
            (
                j["job_id"], j["name"], j["qos"], j["state"], j["mean_phase_difference"],
                j["max_phase_difference"], j["completion_skew"], j["turnaround"],
            )
            for j in summary["jobs"]
        ],
    )
    text += "\n(times in model seconds)"
    run = summary["run"]
    if run.get("completed_strict_jobs"):
        text += (
            f"\ncompleted strict jobs: {run['completed_strict_jobs']}; mean phase difference "
            f"{fmt(run['mean_phase_difference'])} s, max {fmt(run['max_phase_difference'])} s; "
            f"mean completion skew {fmt(run['mean_completion_skew'])} s"
        )
    for j in summary["jobs"]:
        if j["reason"]:
            text += f"\n{j['job_id']}: {j['reason']}"
    return text
