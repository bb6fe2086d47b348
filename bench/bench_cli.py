"""Benchmark: how long the everyday commands take against a running runtime.

``coalloc submit``, ``status``, ``queue`` and ``cancel``, each a fresh ``coalloc``
process as a user's shell starts it, timed from spawn to exit: through the global
manager's HTTP API (the default) and, as the reference measured in the same run against
the same runtime, through the path that starts a Ray driver per call
(``COALLOC_TRANSPORT=ray``). The target is a median of at most 0.3 s per command (an
interactive command's budget). ``submit`` submits one small loose job; ``cancel`` cancels
the job the previous ``submit`` of the same path made.

Run: ``python3 bench/bench_cli.py`` (about a minute on two cores; ``--samples`` and
``--nodes`` change the sizes). It brings up its own runtime (``coalloc up``, an embedded
Ray head) in a private ``COALLOC_HOME`` and takes it down at the end.

``--stopped`` measures instead ``coalloc status`` (through the API) while one node's
local manager is SIGSTOPped (target: within 1 s), once everything answers and once
the stopped node is shown as not answering, against this tree and, as the reference in
the same run, the tree given by ``--reference`` (e.g. a checkout of main, run with it
first on ``PYTHONPATH``: its CLI, and its actors, since the embedded Ray head inherits the
environment, and Ray's workers look in the driver's directory first: it runs from the
tree): a runtime each, one after the other. Also prints the bytes of
``status --json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: Median seconds per command: an interactive command should answer at typing speed.
TARGET_S = 0.3
COMMANDS = ("submit", "status", "queue", "cancel")
JOB = {"name": "bench", "qos": "loose", "subtasks": [{"work": 1e6, "weight": 1}]}


#: CPU seconds (user + system) of every ``coalloc`` process run, per command and path.
CPU: dict[tuple[str, str], list[float]] = {}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def coalloc(
    home: str, transport: str, *argv: str, tree: str | None = None
) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run ``coalloc ARGV``; (wall seconds from spawn to exit, the result). Its CPU
    seconds go to :data:`CPU`. ``tree``: a source tree put first on ``PYTHONPATH``."""
    env = dict(os.environ, COALLOC_HOME=home)
    env.pop("RAY_ADDRESS", None)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([tree, *filter(None, [env.get("PYTHONPATH")])])
    if transport == "ray":
        env["COALLOC_TRANSPORT"] = "ray"
    else:
        env.pop("COALLOC_TRANSPORT", None)
    cpu0, t0 = _children_cpu(), time.monotonic()
    # Run from the tree: Ray puts the driver's directory first on its workers' path.
    proc = subprocess.run([sys.executable, "-m", "coalloc.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=300, cwd=tree)
    wall = time.monotonic() - t0
    CPU.setdefault((argv[0], transport), []).append(_children_cpu() - cpu0)
    if proc.returncode != 0:
        raise SystemExit(f"coalloc {' '.join(argv)} ({transport}) failed: {proc.stderr.strip()}")
    return wall, proc


def measure(home: str, job_file: str, transport: str, samples: int) -> dict[str, list[float]]:
    """``samples`` rounds of submit, status, queue, cancel through ``transport``."""
    times: dict[str, list[float]] = {c: [] for c in COMMANDS}
    for _ in range(samples):
        t, proc = coalloc(home, transport, "submit", "-q", job_file)
        times["submit"].append(t)
        job_id = proc.stdout.split()[0]
        times["status"].append(coalloc(home, transport, "status")[0])
        times["queue"].append(coalloc(home, transport, "queue")[0])
        times["cancel"].append(coalloc(home, transport, "cancel", job_id)[0])
    return times


def _local_manager_pids(home: str) -> list[int]:
    """The local managers' processes of the runtime ``up`` started in ``home``: the
    Ray workers titled ``ray::LocalManagerActor`` in the embedded head's session (or
    ``ray::NodeHostActor``: several nodes to a process, above 8 emulated nodes; stopping
    one stops all of its nodes)."""
    from runtime.deploy import _session_members

    state = json.loads((Path(home) / "state.json").read_text())
    pids = []
    for pid in _session_members(int(state["head_pid"])):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if title.startswith((b"ray::LocalManagerActor", b"ray::NodeHostActor")):
            pids.append(pid)
    return sorted(pids)


def stopped_status(home: str, tree: str | None, samples: int,
                   nodes: int) -> dict[str, Any]:
    """``coalloc status`` times (s) with every node answering and with one local manager
    SIGSTOPped, and the bytes of ``status --json``, against a runtime of ``tree``."""
    t, _ = coalloc(home, "api", "up", "--nodes", str(nodes), tree=tree)
    out: dict[str, Any] = {"up_s": t}
    try:
        _, proc = coalloc(home, "api", "status", "--json", tree=tree)
        out["json_bytes"] = len(proc.stdout.encode())
        out["typed"] = "report_age_s" in proc.stdout  # which code answered
        out["answering"] = [coalloc(home, "api", "status", tree=tree)[0]
                            for _ in range(samples)]
        pids = _local_manager_pids(home)
        if not pids:
            raise SystemExit("no local manager process found to stop")
        os.kill(pids[0], signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 60
            while "not answering" not in coalloc(home, "api", "status", tree=tree)[1].stdout:
                if time.monotonic() > deadline:
                    raise SystemExit("the stopped node was never shown as not answering")
            out["stopped"] = [coalloc(home, "api", "status", tree=tree)[0]
                              for _ in range(samples)]
        finally:
            os.kill(pids[0], signal.SIGCONT)
    finally:
        coalloc(home, "api", "down", tree=tree)
    return out


def main_stopped(args: argparse.Namespace) -> None:
    runs: dict[str, dict[str, Any]] = {}
    for label, tree in (("this tree", None), ("reference", args.reference)):
        if label == "reference" and tree is None:
            continue
        with tempfile.TemporaryDirectory(prefix="coalloc-bench-cli-") as home:
            runs[label] = stopped_status(home, tree, args.samples, args.nodes)
    load = os.getloadavg()[0]
    print(f"\ncoalloc status, median wall s of {args.samples} fresh processes each, "
          f"{args.nodes} emulated nodes; load average {load:.1f} on {os.cpu_count()} cores"
          f"; reference: {args.reference or '-'}")
    print(f"{'TREE':<10} {'TYPED':>6} {'ALL ANSWER':>11} {'ONE STOPPED':>12} {'TARGET 1 s':>11}"
          f" {'JSON BYTES':>11}")
    for label, r in runs.items():
        stop = statistics.median(r["stopped"])
        print(f"{label:<10} {'yes' if r['typed'] else 'no':>6} "
              f"{statistics.median(r['answering']):>11.3f} {stop:>12.3f} "
              f"{'met' if stop <= 1.0 else 'MISSED':>11} {r['json_bytes']:>11}")
    if len(runs) == 2:
        ratio = statistics.median(runs["reference"]["stopped"]) / statistics.median(
            runs["this tree"]["stopped"])
        print(f"one node stopped: reference / this tree = {ratio:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=7, help="rounds per path (default 7)")
    parser.add_argument("--nodes", type=int, default=4, help="emulated nodes (default 4)")
    parser.add_argument("--stopped", action="store_true",
                        help="status with one local manager SIGSTOPped (see above)")
    parser.add_argument("--reference", default=None, metavar="TREE",
                        help="with --stopped: the reference source tree (e.g. main's)")
    args = parser.parse_args()
    if args.stopped:
        main_stopped(args)
        return
    with tempfile.TemporaryDirectory(prefix="coalloc-bench-cli-") as home:
        job_file = str(Path(home) / "job.json")
        Path(job_file).write_text(json.dumps(JOB))
        t, proc = coalloc(home, "api", "up", "--nodes", str(args.nodes))
        print(f"coalloc up --nodes {args.nodes}: {t:.1f} s")
        try:
            coalloc(home, "api", "status")  # warm the page cache for both paths
            api = measure(home, job_file, "api", args.samples)
            ray = measure(home, job_file, "ray", args.samples)
        finally:
            coalloc(home, "api", "down")
    load = os.getloadavg()[0]
    print(f"\nmedian wall time of one command, {args.samples} samples each (a fresh "
          f"process per call; target <= {TARGET_S:g} s); load average {load:.1f} on "
          f"{os.cpu_count()} cores; CPU: the command process's own user + system time")
    print(f"{'COMMAND':<8} {'API (s)':>8} {'RAY DRIVER (s)':>15} {'SPEED-UP':>9} {'TARGET':>7}"
          f" {'API CPU (s)':>12} {'RAY CPU (s)':>12}")
    for c in COMMANDS:
        a, r = statistics.median(api[c]), statistics.median(ray[c])
        ok = "met" if a <= TARGET_S else "MISSED"
        ca, cr = (statistics.median(CPU[(c, t)]) for t in ("api", "ray"))
        print(f"{c:<8} {a:>8.3f} {r:>15.3f} {r / a:>8.1f}x {ok:>7} {ca:>12.3f} {cr:>12.3f}")


if __name__ == "__main__":
    main()
