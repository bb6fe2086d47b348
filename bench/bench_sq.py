"""SQ against reservation-style admission: the price of being in step, measured.

Runs the calibrated default matrix of ``coalloc experiment paper`` (nodes 3, 6, 9, 12 x
lambda 10, 100, 200, 500 s; the generator's 1500..3000 QoS jobs per cell; subtask times
at the expected rate, 12.5 Mcycles/s per weight unit; queues not work-conserving) for
the policies ``sq`` (pace control), ``sq_paper`` (the paper's windows) and ``strict``
(strict admission, no controller) through the experiment's own runner, one worker per
CPU, no phase logs. Every figure of ``sq`` is printed beside the reference measured in
the same run, as the ratio its target is stated in:

* mean phase difference: sq / sq_paper (target <= 0.5) and sq / strict (<= 0.1);
* window-violation fraction of sq (target <= 0.01);
* strict jobs admitted: sq / strict per cell (>= 1) and summed over the matrix (>= 1.05);
* utilisation: sq / strict per cell (>= 1);
* mean turnaround: sq / strict (<= 1.2), per cell and over all completed strict jobs;
* wall time of the whole three-policy matrix (target <= 60 s on the 2-core machine),
  with the sum of the runs' own wall times (one worker) beside it.

A target that is missed is printed as ``MISS``; this is a benchmark, not a test: it
asserts nothing. ``--quick``: nodes 3, 6 and lambda 10, 500 s with 300 jobs per cell.
Usage: ``python3 bench/bench_sq.py [--quick] [--jobs N] [--workers N]``.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Sequence

from coalloc.experiments import paper

POLICIES = ("sq", "sq_paper", "strict")
WALL_TARGET_S = 60.0


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _fmt(x: float | None, width: int = 7, digits: int = 2) -> str:
    return f"{'-':>{width}}" if x is None else f"{x:>{width}.{digits}f}"


def _mark(ok: bool | None) -> str:
    return " " if ok is None else ("ok" if ok else "MISS")


def _weighted_turnaround(rows: Sequence[paper.Row]) -> float | None:
    pairs = [(r.mean_turnaround, r.completed) for r in rows
             if r.mean_turnaround is not None and r.completed]
    n = sum(c for _, c in pairs)
    return sum(t * c for t, c in pairs) / n if n else None


def _weighted_phase(rows: Sequence[paper.Row]) -> float | None:
    pairs = [(r.mean_phase_difference, r.phase_jobs) for r in rows
             if r.mean_phase_difference is not None and r.phase_jobs]
    n = sum(c for _, c in pairs)
    return sum(p * c for p, c in pairs) / n if n else None


def report(rows: Sequence[paper.Row], wall: float) -> None:
    by = {(r.nodes, r.lam, r.policy): r for r in rows}
    cells = sorted({(r.nodes, r.lam) for r in rows})
    print(f"{'nodes':>5} {'lam':>5} | {'phi sq':>7} {'/paper':>7} {'/strict':>7} | "
          f"{'viol sq':>7} | {'adm sq':>6} {'strict':>6} {'ratio':>6} | {'util':>6} | "
          f"{'turn':>6} | {'wall s':>6}")
    misses: dict[str, int] = {}

    def miss(name: str, ok: bool | None) -> str:
        if ok is False:
            misses[name] = misses.get(name, 0) + 1
        return _mark(ok)

    for n, lam in cells:
        sq, pp, st = (by[(n, lam, p)] for p in POLICIES)
        phi_p = _ratio(sq.mean_phase_difference, pp.mean_phase_difference)
        phi_s = _ratio(sq.mean_phase_difference, st.mean_phase_difference)
        adm = _ratio(sq.admitted, st.admitted)
        util = _ratio(sq.utilization, st.utilization)
        turn = _ratio(sq.mean_turnaround, st.mean_turnaround)
        viol = sq.window_violation_fraction
        wall_cell = sq.wall_seconds + pp.wall_seconds + st.wall_seconds
        print(
            f"{n:>5} {paper._lam_text(lam):>5} | {_fmt(sq.mean_phase_difference, 7, 1)} "
            f"{_fmt(phi_p)}{miss('phi/paper', None if phi_p is None else phi_p <= 0.5):>4} "
            f"{_fmt(phi_s)}{miss('phi/strict', None if phi_s is None else phi_s <= 0.1):>4} | "
            f"{_fmt(viol, 7, 4)}{miss('violations', None if viol is None else viol <= 0.01):>4} | "
            f"{sq.admitted:>6} {st.admitted:>6} "
            f"{_fmt(adm, 6)}{miss('admitted', None if adm is None else adm >= 1.0):>4} | "
            f"{_fmt(util, 6, 3)}{miss('utilization', None if util is None else util >= 1.0):>4} | "
            f"{_fmt(turn, 6)}{miss('turnaround', None if turn is None else turn <= 1.2):>4} | "
            f"{wall_cell:>6.1f}"
        )

    sq_rows = [r for r in rows if r.policy == "sq"]
    pp_rows = [r for r in rows if r.policy == "sq_paper"]
    st_rows = [r for r in rows if r.policy == "strict"]
    adm_total = _ratio(sum(r.admitted for r in sq_rows), sum(r.admitted for r in st_rows))
    phi_sq, phi_pp, phi_st = (_weighted_phase(x) for x in (sq_rows, pp_rows, st_rows))
    turn_total = _ratio(_weighted_turnaround(sq_rows), _weighted_turnaround(st_rows))
    cell_viols = [r.window_violation_fraction for r in sq_rows
                  if r.window_violation_fraction is not None]
    one_worker = sum(r.wall_seconds for r in rows)
    print()
    print("over the matrix (phase differences weighted by each cell's population):")
    print(f"  mean phase difference   sq {_fmt(phi_sq, 8, 1)} s   sq_paper {_fmt(phi_pp, 8, 1)} s"
          f"   strict {_fmt(phi_st, 8, 1)} s   sq/sq_paper {_fmt(_ratio(phi_sq, phi_pp))} "
          f"(<= 0.5)   sq/strict {_fmt(_ratio(phi_sq, phi_st))} (<= 0.1)")
    mean_viol = sum(cell_viols) / len(cell_viols) if cell_viols else None
    print(f"  window violations (sq)  mean of cells {_fmt(mean_viol, 7, 4)}"
          f" (<= 0.01), worst cell {_fmt(max(cell_viols) if cell_viols else None, 7, 4)}")
    print(f"  strict jobs admitted    sq {sum(r.admitted for r in sq_rows)}   strict "
          f"{sum(r.admitted for r in st_rows)}   ratio {_fmt(adm_total, 6, 3)} (>= 1.05) "
          f"{_mark(None if adm_total is None else adm_total >= 1.05)}")
    print(f"  mean turnaround         sq/strict {_fmt(turn_total, 6, 3)} (<= 1.2) "
          f"{_mark(None if turn_total is None else turn_total <= 1.2)}")
    print(f"  wall time               {wall:.1f} s for {len(rows)} runs (target <= "
          f"{WALL_TARGET_S:.0f} s {_mark(wall <= WALL_TARGET_S)}); one worker would take "
          f"{one_worker:.1f} s (ratio {wall / one_worker if one_worker else math.nan:.2f})")
    if misses:
        print("  cells missing a per-cell target: "
              + ", ".join(f"{k} {v}" for k, v in sorted(misses.items())))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="nodes 3, 6 x lambda 10, 500 s, 300 jobs per cell")
    parser.add_argument("--jobs", type=int, default=None,
                        help="QoS jobs per cell (default: the generator's 1500..3000)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    nodes: Sequence[int] = paper.DEFAULT_NODES
    lams: Sequence[float] = paper.DEFAULT_LAMBDAS
    jobs = args.jobs
    if args.quick:
        nodes, lams, jobs = (3, 6), (10.0, 500.0), jobs or 300
    cells = paper.make_cells(nodes, lams, POLICIES, args.seed, jobs, log_every=0)
    print(f"bench_sq: {len(cells)} runs (nodes {list(nodes)} x lambda {list(lams)} x "
          f"{', '.join(POLICIES)}; jobs per cell: {jobs or 'uniform 1500..3000'}), "
          f"{args.workers} worker(s)", flush=True)
    start = time.perf_counter()
    rows = paper.run_matrix(cells, args.workers)
    wall = time.perf_counter() - start
    report(rows, wall)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
