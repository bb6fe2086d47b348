"""``coalloc status [JOB] [--all] [--json]``: jobs, subtasks, nodes, virtual clocks, the
current phase difference and the counters (reports received, applied and dropped by
reason, commands sent) of the running coalloc; for a pending job, why it waits and its
estimated start (``estimated start:``; ``--json``: ``estimated_start``, model s, and
``estimated_start_time``, ISO 8601 UTC). ``--json`` prints the whole document, including
``report_endpoint``. Times are model seconds. A finished job is listed for
``coalloc up --keep-finished`` (default 1 day), then archived: ``--all`` lists the
archived jobs too, and ``status JOB`` finds one by its id."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from coalloc.commands._runtime_args import CURVE_NOTE, INSECURE_NOTE, fmt, table
from coalloc.commands.queue import start_text, time_from_now
from coalloc.errors import escape_controls


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


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def run_status(args: argparse.Namespace) -> int:
    from coalloc.client import connect

    st = connect(args.address).status(args.job, all_jobs=args.all_jobs)
    if args.json:
        print(json.dumps(_clean(st), indent=2, sort_keys=True, default=str))
        return 0
    print(render(st, detail=args.job is not None))
    return 0


def _progress(job: dict[str, Any]) -> str:
    vals = [s.get("progress") for s in job["subtasks"]]
    known = [v for v in vals if v is not None]
    if not known:
        return "-"
    return f"{100 * sum(known) / len(known):.0f}%"


def _security_line(security: dict[str, Any]) -> str:
    """The transport's security, on every status: INSECURE loudly, else the refusals."""
    mode = security.get("mode")
    if mode == "insecure":
        return f"transport {INSECURE_NOTE}"
    if mode != "curve":
        return "transport security unknown (the controller did not answer)"
    refused = {k: v for k, v in (security.get("refused") or {}).items() if v}
    text = f"transport {CURVE_NOTE}; auth failures {security.get('auth_failures', 0)}"
    if refused:
        text += " (" + ", ".join(f"{k} {v}" for k, v in sorted(refused.items())) + ")"
    if security.get("spoofed_node"):
        text += f"; spoofed node {security['spoofed_node']}"
    return text


def _estimated_start(job: dict[str, Any], st: dict[str, Any]) -> str:
    """The wall-clock time, how far off (real time) and the model time of a pending
    job's estimated start; ``N/A`` if it cannot be estimated."""
    model = job.get("estimated_start")
    if model is None:
        return "N/A (it fits no set of nodes placement may use now)"
    ahead = (model - st["model_time"]) / st["time_scale"]
    return f"{start_text(job)} ({time_from_now(ahead)}; model time {fmt(model)} s)"


def render(st: dict[str, Any], detail: bool = False) -> str:
    """The status as text tables."""
    clock = st.get("clock") or {}
    c = st["counters"]
    ctl = c.get("controller", {})
    transport = c.get("transport", {})
    dropped = {k: v for k, v in (c.get("dropped") or {}).items() if v}
    lines = [
        f"coalloc on {st['address']}: policy {st['policy']}, model time "
        f"{fmt(st['model_time'])} s (time scale {st['time_scale']:g}, cycle {st['cycle']:g} s)",
        f"real clock {clock.get('quality', '-')} (offset {fmt(clock.get('offset_s'), 4)} s); "
        f"report endpoint {st['report_endpoint']}; phase log {st['phase_log']}",
        f"reports received {ctl.get('reports_received', 0)}, applied "
        f"{ctl.get('reports_applied', 0)}, duplicates {transport.get('duplicates', 0)}, "
        f"dropped {sum(int(v) for v in dropped.values())}"
        + (f" ({', '.join(f'{k} {v}' for k, v in sorted(dropped.items()))})" if dropped else "")
        + f"; commands sent {ctl.get('commands_sent', 0)}",
        _security_line(st.get("security") or {}),
    ]
    gc = {k: v for k, v in (st.get("global_counters") or {}).items() if v}
    if gc:
        lines.append("global manager: " + ", ".join(f"{k} {v}" for k, v in sorted(gc.items())))
    if st.get("journal_error"):
        lines.append(f"JOURNAL: {st['journal_error']}")
    lines.append("")
    if not detail:
        lines.append(
            table(
                ("NODE", "MHZ", "CORES", "LABELS", "BUDGET", "COMMITTED", "SUBTASKS", "READY",
                 "HEALTH", "RAY NODE"),
                [
                    (
                        n["name"], n["speed_mhz"], n["cores"],
                        ",".join(n.get("labels") or []) or "-", n["budget"], n["committed"],
                        n["running_subtasks"], "yes" if n["ready"] else "NO",
                        n.get("health", "up") if n.get("answering", True)
                        else f"{n.get('health', 'up')}, not answering",
                        (n["ray_node_id"] or "-")[:12],
                    )
                    for n in st["nodes"]
                ],
            )
        )
        lines.append("")
    if not st["jobs"]:
        lines.append("no jobs")
        return "\n".join(lines)
    lines.append(
        table(
            ("JOB", "NAME", "QOS", "STATE", "PROGRESS", "PHI NOW", "MAX PHI", "VIOL A_T",
             "MEAN T_V", "WINDOW", "NODES"),
            [
                (
                    j["job_id"], j["name"], j["qos"], j["state"], _progress(j),
                    j.get("phase_difference", j.get("mean_phase_difference")),
                    j.get("max_phase_difference"), j.get("window_violation_fraction"),
                    j.get("mean_virtual"), j.get("window", "-"), ",".join(j["nodes"]) or "-",
                )
                for j in st["jobs"]
            ],
        )
    )
    if detail:
        for j in st["jobs"]:
            if j.get("reason"):
                lines.append(f"\n{j['job_id']}: {escape_controls(j['reason'])}")
            if j.get("state") == "pending":
                lines.append(f"  estimated start: {_estimated_start(j, st)}")
            for r in j.get("pending_reasons") or []:
                sub = "" if r.get("subtask") is None else f" (subtask {r['subtask']})"
                lines.append(f"  waits: {r['kind']}{sub}: {escape_controls(r['message'])}")
            for h in j.get("history") or []:
                lines.append(f"  earlier: {escape_controls(h)}")
            lines.append("")
            lines.append(
                table(
                    ("SUBTASK", "NODE", "EXECUTOR", "STATE", "PROGRESS", "T_V", "WEIGHT",
                     "VIRTUAL W", "PID", "EXIT"),
                    [
                        (
                            s["index"], s["node"], s["executor"], s.get("state") or "-",
                            "-" if s.get("progress") is None else f"{100 * s['progress']:.0f}%",
                            s.get("virtual_time"), s.get("weight"), s.get("virtual_weight"),
                            s.get("pid"), s.get("exit_code"),
                        )
                        for s in j["subtasks"]
                    ],
                )
            )
    return "\n".join(lines)
