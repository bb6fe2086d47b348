"""``coalloc status [JOB] [--all] [--json]``: jobs, subtasks, nodes, virtual clocks, the
current phase difference and the counters (reports received, applied and dropped by
reason, commands sent) of the running coalloc; for a pending job, why it waits and its
estimated start (``estimated start:``; ``--json``: ``estimated_start``, model s, and
``estimated_start_time``, ISO 8601 UTC). ``--json`` prints the whole document, including
``report_endpoint``. Times are model seconds. A finished job is listed for
``coalloc up --keep-finished`` (default 1 day), then archived: ``--all`` lists the
archived jobs too, and ``status JOB`` finds one by its id; it shows the job's commands and
environment to its user and the admins (every user sees every job, not others'
commands: docs/api.md, "Users")."""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Mapping
from typing import Any

from coalloc.commands._runtime_args import CURVE_NOTE, INSECURE_NOTE, fmt, table
from coalloc.commands.queue import start_text, time_from_now
from coalloc.errors import escape_controls
from runtime.status import JobRecord, Json, SecurityStatus, StatusDocument
from workloads.model import JobPhase


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status", help="show jobs, nodes, clocks, phase differences and counters",
        description=__doc__,
    )
    parser.add_argument("job", nargs="?", default=None, metavar="JOB", help="only this job")
    parser.add_argument("--json", action="store_true", help="print the status as JSON")
    parser.add_argument(
        "--all", action="store_true", dest="all_jobs",
        help="also the finished jobs archived after coalloc up's --keep-finished",
    )
    parser.add_argument("--address", default=None, metavar="ADDR", help="Ray cluster address")
    parser.set_defaults(handler=run_status)


def run_status(args: argparse.Namespace) -> int:
    from coalloc.client import connect
    from runtime.api import strict_json

    st = connect(args.address).status(args.job, all_jobs=args.all_jobs)
    if args.json:
        print(json.dumps(strict_json(st), indent=2, sort_keys=True, default=str))
        return 0
    print(render(st, detail=args.job is not None))
    return 0


def _progress(job: JobRecord) -> str:
    known = [s.progress for s in job.subtasks if s.progress is not None]
    if not known:
        return "-"
    return f"{100 * sum(known) / len(known):.0f}%"


def _private_lines(job: JobRecord) -> list[str]:
    """A job's commands and environments: only in the records of the user's own jobs
    (all of them for an admin)."""
    private = job.private
    if private is None:
        return []
    out = [f"  command[{i}]: {escape_controls(shlex.join(cmd))}"
           for i, cmd in enumerate(private.commands) if cmd]
    if private.env:
        out.append("  env: " + escape_controls(
            " ".join(f"{k}={shlex.quote(v)}" for k, v in private.env.items())))
    return out


def _security_line(security: SecurityStatus) -> str:
    """The transport's security, on every status: INSECURE loudly, else the refusals."""
    mode = security.mode
    if mode == "insecure":
        return f"transport {INSECURE_NOTE}"
    if mode != "curve":
        return "transport security unknown (the controller did not answer)"
    refused = {k: v for k, v in (security.refused or {}).items() if v}
    failures = security.auth_failures if "auth_failures" in security.model_fields_set else 0
    text = f"transport {CURVE_NOTE}; auth failures {failures}"
    if refused:
        text += " (" + ", ".join(f"{k} {v}" for k, v in sorted(refused.items())) + ")"
    if security.spoofed_node:
        text += f"; spoofed node {security.spoofed_node}"
    return text


def _estimated_start(job: JobRecord, st: StatusDocument) -> str:
    """The wall-clock time, how far off (real time) and the model time of a pending
    job's estimated start; ``N/A`` if it cannot be estimated."""
    model = job.estimated_start
    if model is None:
        return "N/A (it fits no set of nodes placement may use now)"
    ahead = (model - st.model_time) / st.time_scale
    return f"{start_text(job)} ({time_from_now(ahead)}; model time {fmt(model)} s)"


def _count(counters: Mapping[str, Json], key: str) -> Json:
    return counters.get(key, 0)


def render(st: StatusDocument, detail: bool = False) -> str:
    """The status as text tables."""
    clock = st.clock
    c = st.counters
    ctl = c.controller
    dropped = {k: v for k, v in c.dropped.items() if v}
    lines = [
        f"coalloc on {st.address}: policy {st.policy}, model time "
        f"{fmt(st.model_time)} s (time scale {st.time_scale:g}, cycle {st.cycle:g} s)",
        f"real clock {(clock.quality if clock else None) or '-'} (offset "
        f"{fmt(clock.offset_s if clock else None, 4)} s); "
        f"report endpoint {st.report_endpoint}; phase log {st.phase_log}",
        f"reports received {ctl.get('reports_received', 0)}, applied "
        f"{ctl.get('reports_applied', 0)}, duplicates {_count(c.transport, 'duplicates')}, "
        f"dropped {sum(dropped.values())}"
        + (f" ({', '.join(f'{k} {v}' for k, v in sorted(dropped.items()))})" if dropped else "")
        + f"; commands sent {ctl.get('commands_sent', 0)}",
        _security_line(st.security),
    ]
    gc = {k: v for k, v in st.global_counters.items() if v}
    if gc:
        lines.append("global manager: " + ", ".join(f"{k} {v}" for k, v in sorted(gc.items())))
    if st.journal_error:
        lines.append(f"JOURNAL: {st.journal_error}")
    lines.append("")
    if not detail:
        lines.append(
            table(
                ("NODE", "MHZ", "CORES", "LABELS", "BUDGET", "COMMITTED", "SUBTASKS", "READY",
                 "HEALTH", "RAY NODE"),
                [
                    (
                        n.name, n.speed_mhz, n.cores, ",".join(n.labels) or "-", n.budget,
                        n.committed, n.running_subtasks, "yes" if n.ready else "NO",
                        n.health if n.answering else f"{n.health}, not answering",
                        (n.ray_node_id or "-")[:12],
                    )
                    for n in st.nodes
                ],
            )
        )
        lines.append("")
    if not st.jobs:
        lines.append("no jobs")
        return "\n".join(lines)
    lines.append(
        table(
            ("JOB", "NAME", "QOS", "STATE", "PROGRESS", "PHI NOW", "MAX PHI", "VIOL A_T",
             "MEAN T_V", "WINDOW", "NODES"),
            [
                (
                    j.job_id, j.name, j.qos.value, j.state.value, _progress(j),
                    j.phase_difference if "phase_difference" in j.model_fields_set
                    else j.mean_phase_difference,
                    j.max_phase_difference, j.window_violation_fraction,
                    j.mean_virtual, j.window if "window" in j.model_fields_set else "-",
                    ",".join(j.nodes) or "-",
                )
                for j in st.jobs
            ],
        )
    )
    if detail:
        for j in st.jobs:
            if j.reason:
                lines.append(f"\n{j.job_id}: {escape_controls(j.reason)}")
            if j.state is JobPhase.PENDING:
                lines.append(f"  estimated start: {_estimated_start(j, st)}")
            for r in j.pending_reasons or []:
                sub = "" if r.subtask is None else f" (subtask {r.subtask})"
                lines.append(f"  waits: {r.kind}{sub}: {escape_controls(r.message)}")
            for h in j.history:
                lines.append(f"  earlier: {escape_controls(h)}")
            lines.extend(_private_lines(j))
            lines.append("")
            lines.append(
                table(
                    ("SUBTASK", "NODE", "EXECUTOR", "STATE", "PROGRESS", "T_V", "WEIGHT",
                     "VIRTUAL W", "PID", "EXIT"),
                    [
                        (
                            s.index, s.node, s.executor,
                            (s.state.value if s.state else "-")
                            + (" (stalled)" if s.stalled else ""),
                            "-" if s.progress is None else f"{100 * s.progress:.0f}%",
                            s.virtual_time, s.weight, s.virtual_weight, s.pid, s.exit_code,
                        )
                        for s in j.subtasks
                    ],
                )
            )
    return "\n".join(lines)
