"""Benchmark: many emulated nodes on one machine.

For each node count: ``coalloc up --nodes N`` (an embedded Ray head in a private
``COALLOC_HOME``), then

1. **up**: wall seconds until ``up`` returns (every local manager answered ``ready``);
2. **idle CPU**: cores used by this runtime's processes (every process whose environment
   carries this run's ``COALLOC_HOME``: the Ray head's and the actors') over ``--idle``
   real seconds with no job, from psutil's CPU times;
3. **memory**: the resident set (RSS, GB) of the same processes, and its unique part
   (USS) where psutil can read it;
4. **a run**: ``--jobs`` strict jobs of 4 synthetic subtasks submitted at once (at most
   as many as fit, the rest wait), until all are done: mean and max phase difference Φ
   over the jobs' summaries (s), the largest A_t violation count, and the local managers'
   ``late_cycles``, ``stalls`` and ``late_starts`` (a late cycle is a boundary a loop
   reached after it had passed);

then ``coalloc down``. The reference printed with each row, measured in the same run, is
the target: up <= 15 s, idle <= 0.3 cores, no late cycle. A benchmark, not a
test: it asserts nothing.

Run: ``python3 bench/bench_emulation.py --nodes 64`` (about two minutes per count on two
cores); ``--nodes 8,64`` for several; ``--nodes-per-process K`` to pass that option to
``up`` (omitted: ``up``'s default).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

UP_TARGET_S = 15.0
IDLE_TARGET_CORES = 0.3


def coalloc(home: str, *argv: str, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COALLOC_HOME=home)
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "coalloc.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=timeout)


def runtime_processes(home: str) -> list[psutil.Process]:
    """The processes of this run: their environment names its COALLOC_HOME."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("COALLOC_HOME") == home and p.pid != os.getpid():
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def cpu_s(procs: list[psutil.Process]) -> dict[int, float]:
    got = {}
    for p in procs:
        try:
            t = p.cpu_times()
            got[p.pid] = t.user + t.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return got


def memory_gb(procs: list[psutil.Process]) -> tuple[float, float]:
    rss = uss = 0.0
    for p in procs:
        try:
            info = p.memory_full_info()
            rss += info.rss
            uss += info.uss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return rss / 1e9, uss / 1e9


def status(home: str) -> dict[str, Any]:
    proc = coalloc(home, "status", "--json")
    if proc.returncode != 0:
        raise SystemExit(f"coalloc status failed: {proc.stderr.strip()}")
    return dict(json.loads(proc.stdout[proc.stdout.index("{\n"):]))


def node_counters(home: str) -> dict[str, int]:
    totals: dict[str, int] = {}
    for n in status(home)["nodes"]:
        for key in ("late_cycles", "stalls", "late_starts", "late_placements"):
            totals[key] = totals.get(key, 0) + int(n.get("counters", {}).get(key, 0))
    return totals


def run_jobs(home: str, jobs: int, tmp: Path) -> dict[str, Any]:
    spec = [{"name": f"b{i}", "qos": "strict", "overall_deviation": 300, "asynchrony": 120,
             "subtasks": [{"work": 300, "weight": 1}] * 4}
            for i in range(jobs)]
    path = tmp / "jobs.json"
    path.write_text(json.dumps(spec))
    proc = coalloc(home, "submit", str(path))
    if proc.returncode != 0:
        raise SystemExit(f"coalloc submit failed: {proc.stderr.strip()}")
    ids = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("j")]
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        st = status(home)
        states = {j["job_id"]: j["state"] for j in st["jobs"] if j["job_id"] in ids}
        if len(states) == len(ids) and all(s not in ("pending", "running")
                                           for s in states.values()):
            break
        time.sleep(2.0)
    log = Path(status(home)["phase_log"])
    # The last summaries reach the log.
    deadline = time.monotonic() + 30
    summaries: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        recs = [json.loads(x) for x in log.read_text().split("\n")[:-1] if x]
        summaries = [r for r in recs if r["type"] == "summary"]
        if len(summaries) >= len(ids):
            break
        time.sleep(1.0)
    phis = [s["mean_phase_difference"] for s in summaries]
    return {
        "jobs": len(ids),
        "summaries": len(summaries),
        "mean_phi": sum(phis) / len(phis) if phis else float("nan"),
        "max_phi": max((s["max_phase_difference"] for s in summaries), default=float("nan")),
        "violations": sum(int(s.get("window_violations", 0)) for s in summaries),
        "estimated_periods": sum(int(s.get("estimated_periods") or 0) for s in summaries),
    }


def bench(nodes: int, per_process: int | None, idle_s: float, jobs: int) -> dict[str, Any]:
    home = tempfile.mkdtemp(prefix="coalloc-bench-emul-")
    args = ["up", "--nodes", str(nodes)]
    if per_process is not None:
        args += ["--nodes-per-process", str(per_process)]
    load = os.getloadavg()[0]
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = coalloc(home, *args)
    up_s = time.monotonic() - t0
    after_up = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds `up` cost: the CLI's own, and what the runtime's processes (the Ray
    # head's and the actors') had used when it returned: a figure the other work on a
    # shared machine changes much less than the wall time.
    up_cpu = (after_up.ru_utime + after_up.ru_stime - children.ru_utime - children.ru_stime
              + sum(cpu_s(runtime_processes(home)).values()))
    if proc.returncode != 0:
        coalloc(home, "down")
        raise SystemExit(f"coalloc up failed: {proc.stderr.strip()}")
    try:
        time.sleep(3.0)  # let start-up work settle before measuring idle
        procs = runtime_processes(home)
        before, t_before = cpu_s(procs), time.monotonic()
        late_before = node_counters(home)
        time.sleep(idle_s)
        after, t_after = cpu_s(procs), time.monotonic()
        late_after = node_counters(home)
        used = sum(after[p] - before[p] for p in after if p in before)
        rss, uss = memory_gb(procs)
        result: dict[str, Any] = {
            "nodes": nodes,
            "per_process": per_process,
            "up_s": up_s,
            "up_cpu_s": up_cpu,
            "load": load,
            "processes": len(procs),
            "idle_cores": used / (t_after - t_before),
            "rss_gb": rss,
            "uss_gb": uss,
            "idle_late_cycles": late_after.get("late_cycles", 0)
            - late_before.get("late_cycles", 0),
        }
        if jobs:
            with tempfile.TemporaryDirectory() as tmp:
                result.update(run_jobs(home, jobs, Path(tmp)))
            result.update(node_counters(home))
        return result
    finally:
        coalloc(home, "down")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="64", help="emulated node counts, comma separated")
    ap.add_argument("--nodes-per-process", type=int, default=None)
    ap.add_argument("--idle", type=float, default=20.0, help="idle window, real s")
    ap.add_argument("--jobs", type=int, default=20, help="strict jobs of 4 subtasks (0: none)")
    args = ap.parse_args()
    print("| nodes | per process | load before | up (s) | up CPU (s) | processes "
          "| idle CPU (cores) | RSS (GB) | USS (GB) | mean Φ (s) | max Φ (s) | A_t violations "
          "| estimated periods | late cycles | stalls | late starts | late placements |")
    print("| --- " * 17 + "|")
    for n in (int(x) for x in args.nodes.split(",")):
        r = bench(n, args.nodes_per_process, args.idle, args.jobs)
        print(f"| {n} | {r['per_process'] or 'default'} | {r['load']:.1f} | {r['up_s']:.1f} "
              f"| {r['up_cpu_s']:.1f} | {r['processes']} "
              f"| {r['idle_cores']:.2f} | {r['rss_gb']:.2f} | {r['uss_gb']:.2f} "
              f"| {r.get('mean_phi', float('nan')):.1f} | {r.get('max_phi', float('nan')):.0f} "
              f"| {r.get('violations', '-')} | {r.get('estimated_periods', '-')} "
              f"| {r.get('late_cycles', r['idle_late_cycles'])} | {r.get('stalls', '-')} "
              f"| {r.get('late_starts', '-')} | {r.get('late_placements', '-')} |", flush=True)
        print(f"  targets: up {UP_TARGET_S:.0f} s ({r['up_s'] / UP_TARGET_S:.2f}x), idle "
              f"{IDLE_TARGET_CORES} cores ({r['idle_cores'] / IDLE_TARGET_CORES:.2f}x), "
              f"late cycles while idle {r['idle_late_cycles']}", flush=True)


if __name__ == "__main__":
    main()
