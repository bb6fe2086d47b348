"""What being in step is worth when members are coupled: the simulator's targets, measured.

Runs the matrix of ``coalloc experiment coupled`` (nodes 4, 6, 9 x lambda 50, 100, 200,
400 s; 500 QoS jobs per cell; members exchange every 60 s of nominal time; the live
defaults: work-conserving queues, ``queue: wait``, backfill placement; a CPU-bound
grid-local job beside them on every node, ``--no-background`` to leave it out) for ``strict``,
``sq`` and ``sq_lead`` through the experiment's own runner, once with members that spin
while they wait and once with members that block. Every figure of ``sq`` and ``sq_lead``
is printed as the ratio to ``strict`` of the same run that its target is stated in:

* mean turnaround: policy / strict (target <= 1.0);
* CPU spent spinning: policy / strict (<= 0.1);
* grid-local plus best-effort CPU: what the policy delivered beyond strict, over what
  strict spun away (``recovered``, target >= 0.8; with blocking members, where nothing is
  spun, the policy's over strict's, >= 1.0);
* mean phase difference Φ: policy / strict (<= 0.01);
* strict jobs admitted: policy / strict (>= 1).

Per cell and in total (turnaround and Φ weighted by completed jobs, CPU and admissions
summed). A target missed is printed as ``MISS``; a benchmark, not a test: it asserts
nothing. ``--small``: nodes 4, 6 x lambda 50, 400 s with 150 jobs per cell.

``--live`` runs the coupled stencil instead (``examples/coupled-stencil.yaml``: three
members at costs 1 : 2 : 4, spinning while they wait) with ``coalloc run`` on three
emulated nodes of 2,000 MHz at time scale 100, beside a best-effort CPU-bound job with a
member on every node. A first run under ``strict`` measures what each member needs (its
CPU outside its waits) and the wall time; the job's ``work``, ``weight`` and ``duration``
are set from them, as a user who profiled the code would; then it runs once under
``strict``, once under ``sq`` and once under ``sq_useful`` (``sq`` with the nodes'
useful-rate caps), and prints their figures as ratios to ``strict``'s: the stencil's
wall time (target <= 1.05), the best-effort members' CPU while the stencil ran (>= 1.3),
the two fast members' CPU spent waiting (<= 0.2), and
each run's mean phase difference from its summary. The stencil's clock is its reported
step (``progress: reported``) where this coalloc has ``coalloc.progress``, else its CPU
time (``--progress cpu|reported`` chooses).
Usage: ``python3 bench/bench_coupled.py [--small] [--jobs N] [--workers N] [--wait W]``
or ``python3 bench/bench_coupled.py --live [--wait W] [--steps N] [--progress P]``.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coalloc.experiments import coupled

POLICIES = ("strict", "sq", "sq_lead")
TARGETS = {"turn": 1.0, "spin": 0.1, "recovered": 0.8, "other": 1.0, "phi": 0.01, "adm": 1.0}


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _fmt(x: float | None, width: int = 9, digits: int = 3) -> str:
    return f"{'-':>{width}}" if x is None else f"{x:>{width}.{digits}f}"


def _check(x: float | None, target: float, at_most: bool) -> str:
    if x is None:
        return "  -  "
    return " ok  " if (x <= target if at_most else x >= target) else " MISS"


def _weighted(rows: Sequence[coupled.Row], attr: str) -> float | None:
    pairs = [(getattr(r, attr), r.completed) for r in rows
             if getattr(r, attr) is not None and r.completed]
    n = sum(c for _, c in pairs)
    return math.fsum(v * c for v, c in pairs) / n if n else None


def _figures(rows: Sequence[coupled.Row]) -> dict[str, float | None]:
    """One policy's figures over ``rows`` (one cell, or all)."""
    return {
        "turn": _weighted(rows, "mean_turnaround"),
        "spin": math.fsum(r.spin_cpu_s for r in rows),
        "other": math.fsum(r.local_cpu_s + r.best_effort_cpu_s for r in rows),
        "phi": _weighted(rows, "mean_phase_difference"),
        "adm": float(sum(r.admitted for r in rows)),
    }


def _line(label: str, pol: str, mine: dict[str, float | None],
          ref: dict[str, float | None], spinning: bool) -> str:
    turn = _ratio(mine["turn"], ref["turn"])
    spin = _ratio(mine["spin"], ref["spin"])
    other = None
    if mine["other"] is not None and ref["other"] is not None:
        if spinning and ref["spin"]:
            other = (mine["other"] - ref["other"]) / ref["spin"]
        else:
            other = _ratio(mine["other"], ref["other"])
    other_target = TARGETS["recovered"] if spinning and ref["spin"] else TARGETS["other"]
    phi = _ratio(mine["phi"], ref["phi"])
    adm = _ratio(mine["adm"], ref["adm"])
    return (f"{label:<12} {pol:<8}"
            f"{_fmt(turn)}{_check(turn, TARGETS['turn'], True)}"
            f"{_fmt(spin)}{_check(spin, TARGETS['spin'], True)}"
            f"{_fmt(other)}{_check(other, other_target, False)}"
            f"{_fmt(phi, digits=4)}{_check(phi, TARGETS['phi'], True)}"
            f"{_fmt(adm)}{_check(adm, TARGETS['adm'], False)}"
            f"  (strict: turn {_fmt(ref['turn'], 6, 0)} s, spin {_fmt(ref['spin'], 8, 0)} "
            f"CPU-s, Φ {_fmt(ref['phi'], 6, 2)} s)")


def report(rows: Sequence[coupled.Row], wait: str) -> None:
    spinning = wait == "spin"
    other = "recovered" if spinning else "other/str"
    print(f"\nwait: {wait}   (ratios against strict of the same run; targets: turn <= 1.0, "
          f"spin <= 0.1, {'recovered >= 0.8' if spinning else 'other >= 1.0'}, "
          "Φ <= 0.01, admitted >= 1)")
    print(f"{'cell':<12} {'policy':<8}{'turn':>9}{'':5}{'spin':>9}{'':5}{other:>9}{'':5}"
          f"{'Φ':>9}{'':5}{'admitted':>9}")
    cells = sorted({(r.nodes, r.lam) for r in rows})
    for n, lam in cells:
        here = [r for r in rows if (r.nodes, r.lam) == (n, lam)]
        ref = _figures([r for r in here if r.policy == "strict"])
        for pol in POLICIES[1:]:
            mine = _figures([r for r in here if r.policy == pol])
            print(_line(f"n{n} λ{coupled._lam_text(lam)}", pol, mine, ref, spinning))
    ref = _figures([r for r in rows if r.policy == "strict"])
    for pol in POLICIES[1:]:
        print(_line("total", pol, _figures([r for r in rows if r.policy == pol]), ref,
                    spinning))


ROOT = Path(__file__).resolve().parents[1]
LIVE_TARGETS = {"wall": 1.05, "best_effort": 1.3, "spin": 0.2}
#: The live arms: the reference, the default policy, and the default with the nodes'
#: useful-rate caps (docs/decisions.md, "Caps from the useful rate").
LIVE_POLICIES = ("strict", "sq", "sq_useful")
#: A best-effort member: burns CPU until the stop file exists, printing its CPU time.
BURNER = """
import os, time
stop, nxt = os.environ["BURN_STOP"], 0.0
while not os.path.exists(stop):
    sum(i * i for i in range(20000))
    now = time.time()
    if now >= nxt:
        print("burn", repr(now), repr(time.process_time()), flush=True)
        nxt = now + 0.1
print("burn", repr(time.time()), repr(time.process_time()), flush=True)
"""
CLI = "import sys; from coalloc.cli import main; sys.exit(main(sys.argv[1:]))"
#: The live runs' nodes (one speed: a CPU-second is the same work on each) and time scale.
LIVE_MHZ = 2000.0
LIVE_TIME_SCALE = 100.0


@dataclass(frozen=True, slots=True)
class Calibration:
    """What a first run measured: each member's CPU outside its waits, and the wall time."""

    cpu_s: tuple[float, ...]
    wall_s: float


def _reported_progress() -> bool:
    """Whether this coalloc has reported progress (``coalloc.progress``)."""
    try:
        import coalloc.progress  # noqa: F401
    except ImportError:
        return False
    return True


def _live_jobs(wait: str, steps: int, stop: Path, progress: str,
               need: Calibration | None) -> list[dict[str, Any]]:
    import yaml

    stencil: dict[str, Any] = yaml.safe_load(
        (ROOT / "examples" / "coupled-stencil.yaml").read_text())
    stencil["env"].update(STENCIL_WAIT=wait, STENCIL_STEPS=steps)
    if progress == "reported":
        stencil["progress"] = "reported"
    if need is not None:
        # What each member really needs (reference CPU-s on these nodes), weights in
        # proportion, and the duration the calibration run took: SQ paces by them.
        for sub, cpu_s in zip(stencil["subtasks"], need.cpu_s):
            sub["work"] = round(cpu_s * LIVE_TIME_SCALE * LIVE_MHZ / 1000.0, 3)
            sub["weight"] = round(cpu_s / need.cpu_s[0], 6)
        stencil["duration"] = round(need.wall_s * LIVE_TIME_SCALE, 3)
    for sub in stencil["subtasks"]:
        sub["command"] = [sys.executable, str(ROOT / "examples/coupled-stencil/stencil.py")]
    burner = {"name": "burner", "qos": "best_effort", "env": {"BURN_STOP": str(stop)},
              "subtasks": [{"work": 60, "command": [sys.executable, "-c", BURNER]}
                           for _ in stencil["subtasks"]]}
    return [stencil, burner]


def _cpu_at(samples: list[tuple[float, float]], t: float) -> float:
    """A burner's CPU time at wall time ``t``, interpolated between its samples."""
    if not samples or t <= samples[0][0]:
        return 0.0
    times = [w for w, _ in samples]
    i = bisect.bisect_left(times, t)
    if i >= len(samples):
        return samples[-1][1]
    (w0, c0), (w1, c1) = samples[i - 1], samples[i]
    return c0 + (c1 - c0) * (t - w0) / (w1 - w0) if w1 > w0 else c1


def live_run(policy: str, wait: str, steps: int, progress: str, need: Calibration | None,
             work: Path, label: str, timeout: float = 900.0) -> dict[str, Any]:
    """One ``coalloc run`` of the stencil beside the burner under ``policy``."""
    home, out, stop = work / f"home-{label}", work / f"out-{label}", work / f"stop-{label}"
    jobs = work / f"jobs-{label}.json"
    jobs.write_text(json.dumps(_live_jobs(wait, steps, stop, progress, need)))
    env = dict(os.environ, COALLOC_HOME=str(home))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen([sys.executable, "-c", CLI, "run", str(jobs), "--policy", policy,
                             "--nodes", ",".join([f"{LIVE_MHZ:g}"] * 3),
                             "--time-scale", f"{LIVE_TIME_SCALE:g}", "--no-progress",
                             "--out", str(out), "--timeout", str(timeout)],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    logs = home / "logs" / "subtasks"
    zero = logs / "j00001-0.log"
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if zero.exists() and "stencil checksum" in zero.read_text():
            break
        time.sleep(0.2)
    stop.touch()  # the stencil is done: the burners stop, coalloc run ends
    output, _ = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        print(output)
        raise SystemExit(f"coalloc run under {policy} failed (exit {proc.returncode})")
    stats = []
    for i in range(3):
        [line] = [ln for ln in (logs / f"j00001-{i}.log").read_text().splitlines()
                  if ln.startswith("stencil stats ")]
        stats.append(json.loads(line.removeprefix("stencil stats ")))
    began, ended = min(s["started"] for s in stats), max(s["ended"] for s in stats)
    burned = 0.0
    for i in range(3):
        samples = [(float(a), float(b)) for tag, a, b in
                   (ln.split() for ln in (logs / f"j00002-{i}.log").read_text().splitlines()
                    if ln.startswith("burn "))]
        burned += _cpu_at(samples, ended) - _cpu_at(samples, began)
    summary = json.loads((out / "summary.json").read_text())
    [job] = [j for j in summary["jobs"] if j["job_id"] == "j00001"]
    return {"wall": ended - began, "best_effort": burned,
            "spin": stats[0]["wait_cpu_s"] + stats[1]["wait_cpu_s"],
            "slow_wait": stats[2]["wait_cpu_s"], "phi": job.get("mean_phase_difference"),
            "need": Calibration(tuple(st["compute_cpu_s"] for st in stats), ended - began)}


def live(wait: str, steps: int, progress: str | None) -> None:
    if progress is None:
        progress = "reported" if _reported_progress() else "cpu"
    print(f"live: the coupled stencil (3 members, costs 1 : 2 : 4, {steps} steps, wait "
          f"{wait}, progress {progress}) beside a best-effort CPU-bound member on each of "
          "coalloc run's 3 nodes")
    with tempfile.TemporaryDirectory(prefix="bench-coupled-live-") as tmp:
        need: Calibration = live_run("strict", wait, steps, progress, None, Path(tmp),
                                     "calibration")["need"]
        print(f"calibration run (strict, the example's work): members' CPU outside waits "
              f"{', '.join(f'{c:.2f}' for c in need.cpu_s)} s, wall {need.wall_s:.1f} s")
        figures = {pol: live_run(pol, wait, steps, progress, need, Path(tmp), pol)
                   for pol in LIVE_POLICIES}
    ref = figures["strict"]
    arms = [pol for pol in LIVE_POLICIES if pol != "strict"]
    print(f"{'figure':<34}{'strict':>10}"
          + "".join(f"{pol:>10}{pol + '/strict':>17}  {'target':<14}" for pol in arms))
    for key, label, at_most in (("wall", "stencil wall time, s", True),
                                ("best_effort", "best-effort CPU meanwhile, s", False),
                                ("spin", "fast members' wait CPU, s", True)):
        sign = "<=" if at_most else ">="
        line = f"{label:<34}{_fmt(ref[key], 10)}"
        for pol in arms:
            r = _ratio(figures[pol][key], ref[key])
            line += (f"{_fmt(figures[pol][key], 10)}{_fmt(r, 17)}"
                     f"  {sign} {LIVE_TARGETS[key]:g} {_check(r, LIVE_TARGETS[key], at_most)}")
        print(line)
    for key, label, digits in (("slow_wait", "slow member wait CPU, s", 3),
                               ("phi", "mean phase difference, model s", 1)):
        print(f"{label:<34}{_fmt(ref[key], 10, digits)}"
              + "".join(f"{_fmt(figures[pol][key], 10, digits)}{'':17}{'':16}"
                        for pol in arms))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true",
                    help="nodes 4, 6 x lambda 50, 400 s, 150 jobs per cell")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--coupling", type=float, default=coupled.DEFAULT_COUPLING)
    ap.add_argument("--wait", choices=("spin", "block", "both"), default="both")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-background", action="store_true",
                    help="no CPU-bound grid-local job beside the coupled ones")
    ap.add_argument("--live", action="store_true",
                    help="the coupled stencil live under strict and sq (coalloc run)")
    ap.add_argument("--steps", type=int, default=400, help="--live: the stencil's steps")
    ap.add_argument("--progress", choices=("cpu", "reported"), default=None,
                    help="--live: the stencil's clock (default: reported where this coalloc "
                    "has coalloc.progress, else cpu)")
    args = ap.parse_args()
    if args.live:
        live("spin" if args.wait == "both" else args.wait, args.steps, args.progress)
        return
    nodes: Sequence[int] = (4, 6) if args.small else coupled.DEFAULT_NODES
    lams: Sequence[float] = (50.0, 400.0) if args.small else coupled.DEFAULT_LAMBDAS
    jobs = args.jobs or (150 if args.small else coupled.DEFAULT_JOBS)
    waits = ("spin", "block") if args.wait == "both" else (args.wait,)
    print(f"coupled members: nodes {list(nodes)} x λ {list(lams)} s, {jobs} jobs per cell, "
          f"exchange every {args.coupling:g} s, seed {args.seed}, {args.workers} worker(s), "
          f"{'no ' if args.no_background else ''}CPU-bound background job per node")
    for wait in waits:
        cells = coupled.make_cells(nodes, lams, POLICIES, jobs, args.seed, args.coupling, wait,
                                   background=not args.no_background)
        start = time.perf_counter()
        rows = coupled.run_matrix(cells, args.workers)
        wall = time.perf_counter() - start
        report(rows, wait)
        print(f"{len(rows)} runs in {wall:.1f} s")


if __name__ == "__main__":
    main()
