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
Usage: ``python3 bench/bench_coupled.py [--small] [--jobs N] [--workers N] [--wait W]``.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Sequence

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
    args = ap.parse_args()
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
