"""The price of being in step: turnaround against phase difference as pace
control lets a gang's members lead.

Pace control keeps a gang's members at one pace (``ControllerConfig.pace_lead`` 0, the
product's ``sq``). A lead ``L`` (a fraction of each job's asynchrony window ``A_t``) lets a
member run up to ``L * A_t`` of virtual time beyond where its gang's laggard will be next
period, so members on fast nodes finish sooner and free their node for the jobs behind
them, and the gang drifts out of step by about as much. This benchmark runs the calibrated
paper workload of ``coalloc experiment placement`` (3 users, the live runtime's core
configuration: work-conserving queues, ``queue: wait``) under ``sq`` with the default
placement for each lead, and under ``strict`` + ``least_loaded`` (the reference, measured
in the same run), and prints per lead and cell:

* mean turnaround / the reference's (target: <= 1.1 in every cell);
* mean phase difference / the reference's (target <= 0.01) and the window-violation
  fraction (target <= 0.01);
* utilisation and mean wait.

It writes ``pace_lead.csv`` and ``pace_lead.png`` (turnaround ratio against phase-
difference ratio, one curve per cell) into ``--out``. A benchmark, not a test: it asserts
nothing; every figure but the wall time is deterministic for a seed.

Usage: ``python3 bench/bench_pace_lead.py [--cells 4/400,6/200,9/100,9/200] [--leads
0,0.05,0.1,0.25,0.5,1] [--jobs 500] [--workers N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from coalloc.experiments import paper, placement
from runtime.config import RuntimeConfig

DEFAULT_PLACEMENT: str = RuntimeConfig().placement
REFERENCE = ("strict", "least_loaded")
USERS = 3
DEFAULT_CELLS = "4/400,6/200,9/100,9/200"
DEFAULT_LEADS = "0,0.05,0.1,0.25,0.5,1"
TURNAROUND_TARGET = 1.1
PHASE_TARGET = 0.01
VIOLATION_TARGET = 0.01


@dataclass(frozen=True, slots=True)
class LeadCell:
    """One run: a placement cell and the pace lead (``None``: the reference policy)."""

    cell: placement.Cell
    lead: float | None

    @property
    def nodes(self) -> int:  # the pool runs the largest cells first
        return self.cell.nodes

    @property
    def lam(self) -> float:
        return self.cell.lam


@dataclass(frozen=True, slots=True)
class LeadRow:
    """One line of ``pace_lead.csv``: a cell (nodes, lambda s) under ``sq`` with pace
    lead ``lead`` (a fraction of A_t), its figures (s; utilisation a fraction) beside the
    reference's in the same cell, and their ratios (``None``: not measured)."""

    nodes: int
    lam: float
    lead: float
    mean_turnaround: float | None
    reference_turnaround: float | None
    turnaround_ratio: float | None
    mean_phase_difference: float | None
    reference_phase_difference: float | None
    phase_ratio: float | None
    window_violation_fraction: float | None
    mean_wait: float | None
    reference_wait: float | None
    utilization: float
    reference_utilization: float
    completed: int
    submitted: int


def run_lead_cell(job: LeadCell) -> tuple[LeadCell, placement.Row]:
    """Simulate one cell under ``sq`` with ``job.lead`` (or the reference); top level so
    worker processes can import it."""
    from coallocator.controller import ControllerConfig, ControlMode
    from global_manager.policies import get_policy

    cell = job.cell
    policy = None
    if job.lead is not None:
        policy = get_policy(
            cell.policy, placement=cell.placement,
            controller_config=ControllerConfig(mode=ControlMode.PACE, pace_lead=job.lead),
        )
    workload, result, capacity = placement.simulate_cell(cell, policy)
    return job, placement.summarize(cell, workload, result, capacity)


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def parse_cells(text: str) -> list[tuple[int, float]]:
    cells = []
    for item in text.split(","):
        n, _, lam = item.partition("/")
        cells.append((int(n), float(lam)))
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default=DEFAULT_CELLS,
                        help="NODES/LAMBDA pairs, comma separated (default %(default)s)")
    parser.add_argument("--leads", default=DEFAULT_LEADS,
                        help="pace leads, fractions of A_t (default %(default)s)")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("out/bench-pace-lead"))
    args = parser.parse_args(argv)
    leads = [float(x) for x in args.leads.split(",")]
    cells = parse_cells(args.cells)

    jobs: list[LeadCell] = []
    for n, lam in cells:
        seed = paper.cell_seed(args.seed, n, lam)
        reference = placement.Cell(n, lam, REFERENCE[1], USERS, args.jobs, seed,
                                   policy=REFERENCE[0])
        jobs.append(LeadCell(reference, None))
        sq = placement.Cell(n, lam, DEFAULT_PLACEMENT, USERS, args.jobs, seed, policy="sq")
        jobs.extend(LeadCell(sq, lead) for lead in leads)

    t0 = time.perf_counter()
    done = 0

    def progress(_: object) -> None:
        nonlocal done
        done += 1
        print(f"\r  runs {done}/{len(jobs)}", end="", file=sys.stderr, flush=True)

    results = paper.run_cells(jobs, run_lead_cell, args.workers, progress)
    print(file=sys.stderr)
    wall = time.perf_counter() - t0

    refs = {(j.cell.nodes, j.cell.lam): row for j, row in results if j.lead is None}
    table: list[LeadRow] = []
    for j, row in results:
        if j.lead is None:
            continue
        ref = refs[(j.cell.nodes, j.cell.lam)]
        table.append(LeadRow(
            nodes=j.cell.nodes, lam=j.cell.lam, lead=j.lead,
            mean_turnaround=row.mean_turnaround,
            reference_turnaround=ref.mean_turnaround,
            turnaround_ratio=_ratio(row.mean_turnaround, ref.mean_turnaround),
            mean_phase_difference=row.mean_phase_difference,
            reference_phase_difference=ref.mean_phase_difference,
            phase_ratio=_ratio(row.mean_phase_difference, ref.mean_phase_difference),
            window_violation_fraction=row.window_violation_fraction,
            mean_wait=row.mean_wait, reference_wait=ref.mean_wait,
            utilization=row.utilization, reference_utilization=ref.utilization,
            completed=row.completed, submitted=row.submitted,
        ))

    print(f"sq + {DEFAULT_PLACEMENT} with a pace lead, against {REFERENCE[0]} + "
          f"{REFERENCE[1]} (same workload, same run); {args.jobs} jobs per cell, seed "
          f"{args.seed}")
    print(f"targets: turnaround ratio <= {TURNAROUND_TARGET}, phase ratio <= "
          f"{PHASE_TARGET}, violations <= {VIOLATION_TARGET}")
    header = (f"{'cell':>10} {'lead':>5} {'tat s':>8} {'ref s':>8} {'tat ratio':>9} "
              f"{'phi s':>7} {'phi ratio':>9} {'viol':>7} {'wait s':>8} {'util':>6} "
              f"{'ref util':>8}  all met")
    print(header)
    for r in table:
        tr, pr, v = r.turnaround_ratio, r.phase_ratio, r.window_violation_fraction
        ok = (tr is not None and tr <= TURNAROUND_TARGET
              and pr is not None and pr <= PHASE_TARGET
              and v is not None and v <= VIOLATION_TARGET)
        print(f"{str(r.nodes) + '/' + format(r.lam, 'g'):>10} {r.lead:>5g} "
              f"{_fmt(r.mean_turnaround, '.0f'):>8} {_fmt(r.reference_turnaround, '.0f'):>8} "
              f"{_fmt(tr):>9} {_fmt(r.mean_phase_difference, '.2f'):>7} "
              f"{_fmt(pr, '.4f'):>9} {_fmt(v, '.4f'):>7} {_fmt(r.mean_wait, '.0f'):>8} "
              f"{_fmt(r.utilization):>6} {_fmt(r.reference_utilization):>8}  "
              f"{'yes' if ok else 'no'}")
    print("per lead, over the cells (mean of the cells' ratios; worst cell):")
    for lead in leads:
        rows = [r for r in table if r.lead == lead]
        trs = [r.turnaround_ratio for r in rows if r.turnaround_ratio is not None]
        prs = [r.phase_ratio for r in rows if r.phase_ratio is not None]
        if trs and prs:
            print(f"  lead {lead:>5g}: turnaround {sum(trs) / len(trs):.3f} "
                  f"(worst {max(trs):.3f}), phase difference {sum(prs) / len(prs):.4f} "
                  f"(worst {max(prs):.4f})")
    print(f"wall time: {wall:.1f} s for {len(jobs)} runs on {args.workers} worker(s)")

    args.out.mkdir(parents=True, exist_ok=True)
    csv_path = args.out / "pace_lead.csv"
    with open(csv_path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=[f.name for f in fields(LeadRow)])
        writer.writeheader()
        for r in table:
            writer.writerow({k: ("" if v is None else v) for k, v in asdict(r).items()})
    png = args.out / "pace_lead.png"
    plot(png, table)
    print(f"wrote {csv_path} and {png}")
    return 0


def plot(path: Path, table: list[LeadRow]) -> None:
    """Turnaround ratio against phase-difference ratio, one curve per cell, the targets
    as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    cells = sorted({(r.nodes, r.lam) for r in table})
    for n, lam in cells:
        rows = sorted((r for r in table if (r.nodes, r.lam) == (n, lam)), key=lambda r: r.lead)
        pts = [(r.phase_ratio, r.turnaround_ratio, r.lead) for r in rows
               if r.phase_ratio is not None and r.phase_ratio > 0
               and r.turnaround_ratio is not None]
        if not pts:
            continue
        xs, ys, ls = zip(*pts, strict=True)
        ax.plot(xs, ys, marker="o", label=f"{n} nodes, λ {lam:g} s")
        for x, y, lead in pts:
            ax.annotate(f"{lead:g}", (x, y), textcoords="offset points", xytext=(3, 3),
                        fontsize=7)
    ax.axhline(TURNAROUND_TARGET, color="grey", ls="--", lw=0.8)
    ax.axvline(PHASE_TARGET, color="grey", ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("mean phase difference, sq / strict (labels: pace lead, fraction of A_t)")
    ax.set_ylabel("mean turnaround, sq / strict + least_loaded")
    ax.set_title("The price of being in step")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
