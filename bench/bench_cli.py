"""Benchmark: how long the everyday commands take against a running runtime.

``coalloc submit``, ``status``, ``queue`` and ``cancel``, each a fresh ``coalloc``
process as a user's shell starts it, timed from spawn to exit: through the global
manager's HTTP API (the default) and, as the reference measured in the same run against
the same runtime, through the old path that starts a Ray driver per call
(``COALLOC_TRANSPORT=ray``). The target is a median of at most 0.3 s per command
(issue 15, §2). ``submit`` submits one small loose job; ``cancel`` cancels the job the
previous ``submit`` of the same path made.

Run: ``python3 bench/bench_cli.py`` (about a minute on two cores; ``--samples`` and
``--nodes`` change the sizes). It brings up its own runtime (``coalloc up``, an embedded
Ray head) in a private ``COALLOC_HOME`` and takes it down at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Median seconds per command the issue asks for.
TARGET_S = 0.3
COMMANDS = ("submit", "status", "queue", "cancel")
JOB = {"name": "bench", "qos": "loose", "subtasks": [{"work": 1e6, "weight": 1}]}


#: CPU seconds (user + system) of every ``coalloc`` process run, per command and path.
CPU: dict[tuple[str, str], list[float]] = {}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def coalloc(
    home: str, transport: str, *argv: str
) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run ``coalloc ARGV``; (wall seconds from spawn to exit, the result). Its CPU
    seconds go to :data:`CPU`."""
    env = dict(os.environ, COALLOC_HOME=home)
    env.pop("RAY_ADDRESS", None)
    if transport == "ray":
        env["COALLOC_TRANSPORT"] = "ray"
    else:
        env.pop("COALLOC_TRANSPORT", None)
    cpu0, t0 = _children_cpu(), time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "coalloc.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=300)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=7, help="rounds per path (default 7)")
    parser.add_argument("--nodes", type=int, default=4, help="emulated nodes (default 4)")
    args = parser.parse_args()
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
