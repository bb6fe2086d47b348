"""The pending queue's targets, measured under the live runtime's defaults.

Runs ``coalloc experiment placement``'s matrix through the experiment's own runner
(:mod:`coalloc.experiments.placement`: the calibrated paper workload, 3 users, the core
configuration of :func:`runtime.config.runtime_core`, i.e. work-conserving queues and
``queue: wait``) for the policies ``sq`` and ``strict`` and the placements the live
runtime defaults to (``backfill``, :class:`runtime.config.RuntimeConfig`) and
``least_loaded``: the default matrix (nodes 4, 6, 9 x lambda 50, 100, 200, 400 s, 500
jobs per cell) or, with ``--small``, nodes 4, 6 x lambda 100, 400 s with 150 jobs. Every
target is printed per cell and over the matrix, as the ratio (or value) it is stated in,
measured in this run, with the target beside it and ``met`` / ``NOT MET``:

* turnaround: the default (sq + backfill) mean turnaround / strict + least_loaded's
  (<= 1.1 in every cell), and the same for p95 turnaround (<= 1.0);
* run time: sq's ``mean_run_over_nominal`` / strict's, under each placement (<= 1.1);
* wait: the default placement's mean wait / least_loaded's under each policy (<= 1.0),
  and its max wait (<= 0.5: no starvation);
* fairness: Jain's index of the default, averaged over the cells (>= 0.9);
* being in step: sq's mean phase difference / strict's under each placement (<= 0.01),
  and sq's window-violation fraction (<= 0.01);
* the matrix's wall time;
* solver speed: the default placement's wall time per placement cycle with about 500
  jobs pending on 50 nodes (the simulator's own measurement; <= 10 ms), least_loaded's
  (and flow's) beside it as the reference (``--no-solver`` leaves it out);
* immediate rejection, with ``--paper`` (slow: ``coalloc experiment paper``'s default
  matrix, nodes 3, 6, 9, 12 x lambda 10, 100, 200, 500 s, the generator's 1500..3000
  jobs): strict jobs sq admits / strict admits, in every cell (>= 1).

Over the matrix ("total"), means are pooled over the cells' completed jobs, p95
turnarounds are compared as the mean of the cells' p95s, max waits as the largest of the
cells', phase differences, window violations and Jain's index as the mean of the cells'.
A target stated "in every cell" is met only when every cell meets it. A ratio of two
zeros (no wait at all under either placement) is printed ``-`` and counts as met. This
is a benchmark, not a test: it asserts nothing. The machine may be shared: wall times are
noisy, the other figures are deterministic for a seed.

Usage: ``python3 bench/bench_queue.py [--small] [--jobs N] [--workers N] [--seed S]
[--paper] [--no-solver]``.
"""

from __future__ import annotations

import argparse
import math
import operator
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coalloc.experiments import paper, placement
from global_manager.simulator import RunResult
from runtime.config import RuntimeConfig

POLICIES = ("sq", "strict")
#: The live runtime's default placement (what every user gets).
DEFAULT_PLACEMENT: str = RuntimeConfig().placement
PLACEMENTS = (DEFAULT_PLACEMENT, "least_loaded")
DEFAULT = ("sq", DEFAULT_PLACEMENT)  # the live runtime's default policy and placement
REFERENCE = ("strict", "least_loaded")  # uncoordinated first-fit: what users compare to
USERS = 3
SMALL = ((4, 6), (100.0, 400.0), 150)
SOLVER_NODES = 50
SOLVER_JOBS = 500
#: All the solver run's jobs arrive in the first few seconds, so that the placement
#: cycles see about SOLVER_JOBS pending; the run stops after SOLVER_MAX_TIME (s).
SOLVER_LAMBDA = 0.01
SOLVER_MAX_TIME = 600.0
SOLVER_TARGET_MS = 10.0

Key = tuple[str, str]  # (policy, placement)
CellRows = dict[Key, placement.Row]


@dataclass(frozen=True, slots=True)
class Column:
    """One figure compared with its target: ``num`` (and ``den``, for a ratio) read a
    cell's rows; ``total`` pools a figure over the cells (the rows of each cell, and
    the figure read by ``num`` or ``den``)."""

    label: str
    num: Callable[[CellRows], float | None]
    den: Callable[[CellRows], float | None] | None
    total: Callable[[Sequence[CellRows], Callable[[CellRows], float | None]], float | None]
    #: Printed for reference only: no verdict.
    reference: bool = False


@dataclass(frozen=True, slots=True)
class Target:
    """A target: its figures must be ``op`` ``bound`` (``<=`` or ``>=``); ``every_cell``:
    met only when every cell meets it, else when the total does."""

    title: str
    op: str
    bound: float
    every_cell: bool
    columns: tuple[Column, ...]


def _field(key: Key, figure: Callable[[placement.Row], float | None]
           ) -> Callable[[CellRows], float | None]:
    """A cell's ``figure`` (e.g. ``lambda r: r.mean_wait``) of ``key``'s row: a callable,
    not a field name, so that mypy checks the field exists."""

    def read(rows: CellRows) -> float | None:
        value = figure(rows[key])
        return None if value is None else float(value)

    return read


def _pooled(cells: Sequence[CellRows], read: Callable[[CellRows], float | None],
            weight: Callable[[CellRows], float]) -> float | None:
    pairs = [(v, weight(c)) for c in cells if (v := read(c)) is not None]
    n = math.fsum(w for _, w in pairs)
    return math.fsum(v * w for v, w in pairs) / n if n > 0 else None


def pooled_by_completed(key: Key) -> Callable[
        [Sequence[CellRows], Callable[[CellRows], float | None]], float | None]:
    """The mean over cells weighted by ``key``'s completed jobs (the pooled mean)."""
    return lambda cells, read: _pooled(cells, read, lambda c: float(c[key].completed))


def mean_of_cells(cells: Sequence[CellRows], read: Callable[[CellRows], float | None]
                  ) -> float | None:
    return _pooled(cells, read, lambda c: 1.0)


def max_of_cells(cells: Sequence[CellRows], read: Callable[[CellRows], float | None]
                 ) -> float | None:
    values = [v for c in cells if (v := read(c)) is not None]
    return max(values) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``; ``None`` when either is missing or both are 0; ``inf`` for ``a > 0 = b``."""
    if a is None or b is None:
        return None
    if b == 0:
        return None if a == 0 else math.inf
    return a / b


def verdict(value: float | None, target: Target, both_zero: bool = False) -> bool | None:
    """Whether ``value`` meets ``target`` (``None``: nothing measured); a ratio of two
    zeros meets it."""
    if both_zero:
        return True
    if value is None:
        return None
    return bool((operator.le if target.op == "<=" else operator.ge)(value, target.bound))


def _label(key: Key) -> str:
    return f"{key[0]}+{key[1]}"


def targets() -> list[Target]:
    dp = DEFAULT_PLACEMENT
    sq_f, sq_l, st_f, st_l = ("sq", dp), ("sq", "least_loaded"), ("strict", dp), \
        ("strict", "least_loaded")
    return [
        Target("mean turnaround, default / strict+least_loaded", "<=", 1.1, True, (
            Column(f"{_label(DEFAULT)} / {_label(REFERENCE)}",
                   _field(DEFAULT, lambda r: r.mean_turnaround),
                   _field(REFERENCE, lambda r: r.mean_turnaround),
                   pooled_by_completed(DEFAULT)),)),
        Target("p95 turnaround, default / strict+least_loaded", "<=", 1.0, True, (
            Column(f"{_label(DEFAULT)} / {_label(REFERENCE)}",
                   _field(DEFAULT, lambda r: r.p95_turnaround),
                   _field(REFERENCE, lambda r: r.p95_turnaround),
                   mean_of_cells),)),
        Target("run time over nominal, sq / strict, each placement", "<=", 1.1, True, tuple(
            Column(f"{pl}: sq / strict", _field(("sq", pl), lambda r: r.mean_run_over_nominal),
                   _field(("strict", pl), lambda r: r.mean_run_over_nominal),
                   pooled_by_completed(("sq", pl)))
            for pl in PLACEMENTS)),
        Target(f"mean wait, {dp} / least_loaded, each policy", "<=", 1.0, True, tuple(
            Column(f"{pol}: {dp} / least_loaded", _field((pol, dp), lambda r: r.mean_wait),
                   _field((pol, "least_loaded"), lambda r: r.mean_wait),
                   pooled_by_completed((pol, dp)))
            for pol in POLICIES)),
        Target(f"max wait, {dp} / least_loaded, each policy (no starvation)", "<=", 0.5, True,
               tuple(Column(f"{pol}: {dp} / least_loaded", _field((pol, dp), lambda r: r.max_wait),
                            _field((pol, "least_loaded"), lambda r: r.max_wait), max_of_cells)
                     for pol in POLICIES)),
        Target("Jain's index of the waiting users' dominant shares, default, mean of cells",
               ">=", 0.9, False, (
                   Column(_label(DEFAULT), _field(DEFAULT, lambda r: r.jain_dominant_share), None,
                          mean_of_cells),
                   Column(f"{_label(sq_l)} (for reference)",
                          _field(sq_l, lambda r: r.jain_dominant_share), None, mean_of_cells,
                          reference=True))),
        Target("mean phase difference, sq / strict, each placement", "<=", 0.01, True, (
            Column(f"{dp}: sq / strict", _field(sq_f, lambda r: r.mean_phase_difference),
                   _field(st_f, lambda r: r.mean_phase_difference), mean_of_cells),
            Column("least_loaded: sq / strict", _field(sq_l, lambda r: r.mean_phase_difference),
                   _field(st_l, lambda r: r.mean_phase_difference), mean_of_cells))),
        Target("window-violation fraction of sq, each placement", "<=", 0.01, True, tuple(
            Column(f"sq+{pl}", _field(("sq", pl), lambda r: r.window_violation_fraction), None,
                   mean_of_cells)
            for pl in PLACEMENTS)),
    ]


def _num(x: float | None, width: int) -> str:
    if x is None:
        return f"{'-':>{width}}"
    if math.isinf(x):
        return f"{'inf':>{width}}"
    digits = 4 if abs(x) < 10 else (1 if abs(x) < 1000 else 0)
    return f"{x:>{width}.{digits}f}"


def _mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "NOT MET")


def report_target(target: Target, cells: Sequence[tuple[int, float]],
                  by_cell: Sequence[CellRows]) -> bool | None:
    """Print one target per cell and over the matrix; whether it is met (``None``: a
    figure could not be measured)."""
    how = "in every cell" if target.every_cell else "over the matrix"
    print(f"\n{target.title}: target {target.op} {target.bound:g} ({how})")
    relevant: list[bool | None] = []
    for col in target.columns:
        print(f"  {col.label}")
        judged: list[bool | None] = []
        for (n, lam), rows in zip(cells, by_cell):
            a = col.num(rows)
            b = None if col.den is None else col.den(rows)
            value = a if col.den is None else ratio(a, b)
            ok = verdict(value, target, both_zero=col.den is not None and a == 0 and b == 0)
            judged.append(ok)
            pair = "" if col.den is None else f"{_num(a, 10)} / {_num(b, 10)} ="
            print(f"    {n:>3} nodes, lambda {paper._lam_text(lam):>4} s  {pair}"
                  f"{_num(value, 9)}  {'' if col.reference else _mark(ok)}")
        a_tot = col.total(by_cell, col.num)
        b_tot = None if col.den is None else col.total(by_cell, col.den)
        value = a_tot if col.den is None else ratio(a_tot, b_tot)
        ok = verdict(value, target, both_zero=col.den is not None and a_tot == 0 and b_tot == 0)
        pair = "" if col.den is None else f"{_num(a_tot, 10)} / {_num(b_tot, 10)} ="
        if col.reference:
            print(f"    {'total':<25}  {pair}{_num(value, 9)}")
            continue
        met = sum(1 for o in judged if o)
        print(f"    {'total':<25}  {pair}{_num(value, 9)}  {_mark(ok)} "
              f"(cells met: {met} of {len(cells)})")
        relevant += judged if target.every_cell else [ok]
    if any(o is None for o in relevant):
        return None
    return all(relevant)


def solver_speed(seed: int, workers: int) -> bool | None:
    """The default placement's time per cycle with about SOLVER_JOBS pending on
    SOLVER_NODES nodes, least_loaded's and flow's beside it; whether the default meets
    the target."""
    dp = DEFAULT_PLACEMENT
    print(f"\nsolver speed: placement wall time per cycle, {SOLVER_JOBS} jobs arriving in the "
          f"first {SOLVER_JOBS * SOLVER_LAMBDA:g} s on {SOLVER_NODES} nodes, sq, run stopped "
          f"at {SOLVER_MAX_TIME:g} s: target {dp} <= {SOLVER_TARGET_MS:g} ms")
    names = tuple(dict.fromkeys((*PLACEMENTS, "flow")))
    cells = placement.make_cells((SOLVER_NODES,), (SOLVER_LAMBDA,), names, USERS,
                                 SOLVER_JOBS, seed, policies=("sq",), max_time=SOLVER_MAX_TIME)
    per_cycle: dict[str, float | None] = {}
    for cell, result in zip(cells, paper.run_cells(cells, _simulate, workers)):
        cycles = result.placement_cycles
        ms = 1000.0 * result.placement_seconds / cycles if cycles else None
        per_cycle[cell.placement] = ms
        print(f"  {cell.placement:<13} {_num(ms, 9)} ms per cycle over {cycles} cycles; jobs "
              f"pending at the cycle boundaries: {pending_at_cycles(result, cell.cycle)}")
    got = per_cycle.get(dp)
    rel = ratio(got, per_cycle.get("least_loaded"))
    ok = None if got is None else got <= SOLVER_TARGET_MS
    print(f"  {dp} {_num(got, 0)} ms ({_mark(ok)}); {dp} / least_loaded = {_num(rel, 0)}")
    return ok


def _simulate(cell: placement.Cell) -> RunResult:
    """A worker's run of the solver cell: the run's result (top-level, for the pool)."""
    return placement.simulate_cell(cell)[1]


def pending_at_cycles(result: RunResult, cycle: float) -> str:
    """Mean and range of the strict jobs pending (arrived, not yet placed) at the cycle
    boundaries ``k * cycle`` up to the end of the run (what the placement cycles saw,
    about)."""
    jobs = [j for j in result.jobs if j.qos == "strict"]
    end = result.end_time
    counts = []
    k = 1
    while k * cycle <= end:
        t = k * cycle
        counts.append(sum(1 for j in jobs if j.arrival <= t
                          and (j.wait is None or j.arrival + j.wait > t)))
        k += 1
    if not counts:
        return "-"
    return f"mean {sum(counts) / len(counts):.0f}, {min(counts)}..{max(counts)}"


def immediate_rejection(seed: int, workers: int) -> bool | None:
    """sq admits >= strict in every cell of ``coalloc experiment paper``'s default matrix."""
    cells = paper.make_cells(paper.DEFAULT_NODES, paper.DEFAULT_LAMBDAS, ("sq", "strict"),
                             seed, log_every=0)
    print(f"\nimmediate rejection: strict jobs admitted, sq / strict, coalloc experiment "
          f"paper's default matrix ({len(cells)} runs): target >= 1 in every cell", flush=True)
    start = time.perf_counter()
    rows = paper.run_matrix(cells, workers)
    wall = time.perf_counter() - start
    by = {(r.nodes, r.lam, r.policy): r for r in rows}
    oks = []
    for n in paper.DEFAULT_NODES:
        for lam in paper.DEFAULT_LAMBDAS:
            sq, st = by[(n, lam, "sq")], by[(n, lam, "strict")]
            value = ratio(sq.admitted, st.admitted)
            ok = verdict(value, Target("", ">=", 1.0, True, ()))
            oks.append(ok)
            print(f"    {n:>3} nodes, lambda {paper._lam_text(lam):>4} s  {sq.admitted:>6} / "
                  f"{st.admitted:>6} = {_num(value, 7)}  {_mark(ok)}")
    total = ratio(sum(r.admitted for r in rows if r.policy == "sq"),
                  sum(r.admitted for r in rows if r.policy == "strict"))
    print(f"    total (summed)  {_num(total, 7)}; cells met: {sum(1 for o in oks if o)} of "
          f"{len(oks)}; {wall:.1f} s")
    return None if any(o is None for o in oks) else all(oks)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true",
                        help="nodes 4, 6 x lambda 100, 400 s, 150 jobs per cell")
    parser.add_argument("--jobs", type=int, default=None,
                        help=f"strict jobs per cell (default {placement.DEFAULT_JOBS}; "
                             f"{SMALL[2]} with --small)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--paper", action="store_true",
                        help="also the immediate-rejection target on coalloc experiment "
                             "paper's default matrix (slow)")
    parser.add_argument("--no-solver", action="store_true",
                        help="leave out the solver-speed run (50 nodes, 500 jobs)")
    args = parser.parse_args(argv)
    nodes: Sequence[int] = placement.DEFAULT_NODES
    lams: Sequence[float] = placement.DEFAULT_LAMBDAS
    jobs = placement.DEFAULT_JOBS
    if args.small:
        nodes, lams, jobs = SMALL
    jobs = args.jobs or jobs
    cells = placement.make_cells(nodes, lams, PLACEMENTS, USERS, jobs, args.seed,
                                 policies=POLICIES)
    print(f"bench_queue: {len(cells)} runs (nodes {list(nodes)} x lambda "
          f"{[paper._lam_text(x) for x in lams]} x {', '.join(POLICIES)} x "
          f"{', '.join(PLACEMENTS)}; {jobs} jobs, {USERS} users per cell; live defaults: "
          f"work-conserving queues, queue: wait), {args.workers} worker(s)", flush=True)
    from tqdm import tqdm

    start = time.perf_counter()
    with tqdm(total=len(cells), desc="bench_queue", unit="run", file=sys.stderr) as bar:
        rows = placement.run_matrix(cells, args.workers, progress=lambda _r: bar.update())
    wall = time.perf_counter() - start

    grid = [(n, float(lam)) for n in nodes for lam in lams]
    by_cell: list[CellRows] = [
        {(r.policy, r.placement): r for r in rows if (r.nodes, r.lam) == cell} for cell in grid
    ]
    outcome: dict[str, bool | None] = {}
    for target in targets():
        outcome[target.title] = report_target(target, grid, by_cell)
    print(f"\nwall time of the matrix: {wall:.1f} s for {len(rows)} runs on {args.workers} "
          f"worker(s)")
    if not args.no_solver:
        outcome["solver speed"] = solver_speed(args.seed, args.workers)
    if args.paper:
        outcome["immediate rejection"] = immediate_rejection(args.seed, args.workers)
    print("\nsummary:")
    for title, ok in outcome.items():
        print(f"  {_mark(ok):>7}  {title}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
