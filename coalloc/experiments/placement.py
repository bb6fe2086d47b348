"""``coalloc experiment placement``: flow vs least_loaded vs random placement with a
pending queue (issue 9 §4).

For every cell ``nodes x lambda`` one workload is generated (the calibrated paper
workload: :class:`~workloads.generator.PaperWorkloadParams` with ``rate_per_weight`` 12.5,
seeded from ``--seed``, the node count and lambda as in ``coalloc experiment paper``) and
its strict jobs are given to ``--users`` users by a seeded draw in which user ``k``
(0-based) has weight ``1 / (k + 1)`` (Zipf: user ``u0`` submits most, so fair sharing has
something to do). The workload is then simulated under ``sq`` with ``queue: wait`` once
per placement policy of ``--placements``: strict jobs that do not fit wait and are placed
by each cycle's placement; none is rejected for load, and with no ``max_wait`` every job
ends completed.

Columns (strict jobs): ``completed``; ``mean_phase_difference`` (Φ, s: the mean of the
completed jobs' mean phase differences, jobs with at least two subtasks, as in the paper
experiment); ``mean_wait`` and ``p95_wait`` (s: placement time minus arrival);
``mean_turnaround`` (s); ``jain_dominant_share``: Jain's index
``(sum x)^2 / (n sum x^2)`` of the dominant shares ``x_u`` of the users that have a job
pending, averaged over the time at least two users have one (weighted by time; ``None``
if never). A user's dominant share at time ``t`` is the strict expected rate its running
jobs hold over the grid's QoS budget (one resource, so DRF's dominant share); 1 means the
users kept waiting hold equal shares (what weighted DRF with equal weights aims at).
``placement_cycles``: placement cycles run (cycles with nothing new are skipped);
``solver_ms_per_cycle``: wall time of the placement calls over the cycles run
(measured: it varies between runs, the other columns do not); ``end_time`` (s).

Writes ``results.csv``, ``results.json`` (rows and configuration) and ``placement.png``
(mean wait, Φ and Jain's index against lambda, one line per placement) into ``--out``.

``start_estimate_mae`` (s): the mean absolute error of the jobs' first start estimates
(made when a job is still pending after its arrival's placement cycle,
:meth:`~global_manager.core.GlobalManagerCore.start_estimates`) against their actual
starts, over the jobs that waited and started.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from coalloc.errors import UserError
from coalloc.experiments.paper import (
    DEFAULT_RATE_PER_WEIGHT,
    _float_list,
    _int_list,
    _lam_text,
    _mean,
    _percentile,
    cell_seed,
    registry_list,
)
from coalloc.flags import int_flag, seconds_flag
from coalloc.tables import render as table

DEFAULT_NODES = (6,)
DEFAULT_LAMBDAS = (10.0, 50.0, 200.0)
DEFAULT_PLACEMENTS = ("flow", "least_loaded", "random")
DEFAULT_USERS = 3
DEFAULT_JOBS = 150
DEFAULT_POLICY = "sq"
DEFAULT_CYCLE = 30.0
DEFAULT_OUT = "runs/placement"

CSV_COLUMNS = (
    "nodes", "lam", "placement", "users", "submitted", "completed", "mean_phase_difference",
    "mean_wait", "p95_wait", "mean_turnaround", "jain_dominant_share", "placement_cycles",
    "solver_ms_per_cycle", "end_time", "start_estimate_mae",
)


@dataclass(frozen=True, slots=True)
class Cell:
    """One run: ``nodes`` nodes, mean QoS inter-arrival ``lam`` (s), one placement
    policy, ``users`` users, ``jobs`` QoS jobs; ``seed`` seeds the workload, the user
    draw and the simulator."""

    nodes: int
    lam: float
    placement: str
    users: int
    jobs: int
    seed: int
    cycle: float = DEFAULT_CYCLE
    rate_per_weight: float = DEFAULT_RATE_PER_WEIGHT


@dataclass(frozen=True, slots=True)
class Row:
    """One line of ``results.csv`` (see the module docstring for the columns)."""

    nodes: int
    lam: float
    placement: str
    users: int
    submitted: int
    completed: int
    mean_phase_difference: float | None
    mean_wait: float | None
    p95_wait: float | None
    mean_turnaround: float | None
    jain_dominant_share: float | None
    placement_cycles: int
    solver_ms_per_cycle: float | None
    end_time: float
    start_estimate_mae: float | None = None


def assign_users(jobs: Sequence[Any], users: int, seed: int) -> tuple[Any, ...]:
    """The jobs with their strict ones given to users ``u0..u{users-1}`` by a seeded
    draw, user ``k`` with weight ``1 / (k + 1)``; other jobs unchanged."""
    from workloads.model import QosClass

    rng = random.Random(f"coalloc-placement-users:{seed}")
    names = [f"u{k}" for k in range(users)]
    weights = [1.0 / (k + 1) for k in range(users)]
    return tuple(
        replace(j, user=rng.choices(names, weights)[0]) if j.qos is QosClass.STRICT else j
        for j in jobs
    )


def make_workload(cell: Cell) -> Any:
    from workloads.generator import PaperWorkloadParams, generate
    from workloads.model import Workload

    w = generate(
        PaperWorkloadParams(nodes=cell.nodes, mean_interarrival=cell.lam, jobs=cell.jobs,
                            rate_per_weight=cell.rate_per_weight),
        seed=cell.seed,
    )
    return Workload(w.nodes, assign_users(w.jobs, cell.users, cell.seed))


def run_cell(cell: Cell) -> Row:
    """Simulate one cell (top-level, so worker processes can import it)."""
    from global_manager.policies import get_policy
    from global_manager.simulator import SimConfig, simulate

    workload = make_workload(cell)
    policy = get_policy(DEFAULT_POLICY, placement=cell.placement)
    config = SimConfig(cycle=cell.cycle, rate_per_weight=cell.rate_per_weight,
                       queue="wait")  # type: ignore[arg-type]
    result = simulate(workload, policy, seed=cell.seed, config=config)
    capacity = math.fsum(policy.admission_policy().budget(n.cpu_rate, config.qos_share)
                         for n in workload.nodes)
    return summarize(cell, workload, result, capacity)


def summarize(cell: Cell, workload: Any, result: Any, capacity: float) -> Row:
    strict = [j for j in result.jobs if j.qos == "strict"]
    done = [j for j in strict if j.state == "completed"]
    phase = result.strict_completed(min_subtasks=2)
    waits = [j.wait for j in strict if j.wait is not None]
    rates = {
        j.job_id: math.fsum(s.weight for s in j.subtasks) * cell.rate_per_weight
        for j in workload.jobs
    }
    cycles = result.placement_cycles
    return Row(
        nodes=cell.nodes,
        lam=cell.lam,
        placement=cell.placement,
        users=cell.users,
        submitted=len(strict),
        completed=len(done),
        mean_phase_difference=_mean([j.mean_phase_difference for j in phase]),
        mean_wait=_mean(waits),
        p95_wait=_percentile(waits, 95.0),
        mean_turnaround=_mean([j.turnaround for j in done]),
        jain_dominant_share=jain_over_contention(strict, rates, capacity, result.end_time),
        placement_cycles=cycles,
        solver_ms_per_cycle=(1000.0 * result.placement_seconds / cycles) if cycles else None,
        end_time=result.end_time,
        start_estimate_mae=start_estimate_mae(strict),
    )


def start_estimate_mae(jobs: Sequence[Any]) -> float | None:
    """Mean absolute error (s) of the jobs' first start estimates against their actual
    starts (``arrival + wait``), over the jobs that had an estimate and started; None if
    none did."""
    errors = [abs(j.estimated_start - (j.arrival + j.wait)) for j in jobs
              if j.estimated_start is not None and j.wait is not None]
    return _mean(errors)


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index of ``values`` (1 when all are equal; 1 for all zeros)."""
    total = math.fsum(values)
    squares = math.fsum(v * v for v in values)
    return 1.0 if squares == 0 else total * total / (len(values) * squares)


def jain_over_contention(
    jobs: Sequence[Any], rates: dict[str, float], capacity: float, end_time: float
) -> float | None:
    """Time-weighted mean of Jain's index of the dominant shares of the users with a job
    pending, over the time at least two users have one. A job is pending from its
    arrival to its placement (``arrival + wait``) and holds its rate from then until it
    completes (``arrival + turnaround``) or the run ends."""
    events: list[tuple[float, int, str, float]] = []  # (time, kind, user, rate)
    for j in jobs:
        if j.wait is None:
            continue
        placed = j.arrival + j.wait
        end = j.arrival + j.turnaround if j.turnaround is not None else end_time
        events += [(j.arrival, 0, j.user, 1.0), (placed, 0, j.user, -1.0),
                   (placed, 1, j.user, rates[j.job_id]), (end, 1, j.user, -rates[j.job_id])]
    events.sort()
    pending: dict[str, float] = {}
    held: dict[str, float] = {}
    total = weighted = 0.0
    last = None
    for t, kind, user, delta in events:
        if last is not None and t > last:
            waiting = [u for u, n in pending.items() if n > 0.5]
            if len(waiting) >= 2:
                shares = [max(held.get(u, 0.0), 0.0) / capacity for u in waiting]
                weighted += jain(shares) * (t - last)
                total += t - last
        table = pending if kind == 0 else held
        table[user] = table.get(user, 0.0) + delta
        last = t
    return weighted / total if total > 0 else None


def make_cells(nodes: Sequence[int], lams: Sequence[float], placements: Sequence[str],
               users: int, jobs: int, seed: int, cycle: float = DEFAULT_CYCLE) -> list[Cell]:
    return [Cell(n, float(lam), p, users, jobs, cell_seed(seed, n, lam), cycle)
            for n in nodes for lam in lams for p in placements]


def run_matrix(cells: Sequence[Cell], workers: int,
               progress: Callable[[Row], None] | None = None) -> list[Row]:
    """Every cell, in this process (``workers == 1``) or a process pool; rows in the
    order of ``cells``."""
    if workers == 1 or len(cells) <= 1:
        rows = []
        for c in cells:
            rows.append(run_cell(c))
            if progress is not None:
                progress(rows[-1])
        return rows
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    out: dict[int, Row] = {}
    with ProcessPoolExecutor(max_workers=min(workers, len(cells)),
                             mp_context=multiprocessing.get_context(method)) as pool:
        futs = {pool.submit(run_cell, c): i for i, c in enumerate(cells)}
        for fut in as_completed(futs):
            out[futs[fut]] = fut.result()
            if progress is not None:
                progress(out[futs[fut]])
    return [out[i] for i in range(len(cells))]


def _csv_value(value: object) -> str:
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def write_csv(path: Path, rows: Sequence[Row]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for r in rows:
            d = asdict(r)
            w.writerow([_csv_value(d[c]) for c in CSV_COLUMNS])


def plot(path: Path, rows: Sequence[Row], lams: Sequence[float], placements: Sequence[str]
         ) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = (("mean_wait", "mean wait (s)"), ("mean_phase_difference", "mean Φ (s)"),
               ("jain_dominant_share", "Jain's index (dominant shares)"))
    node_counts = sorted({r.nodes for r in rows})
    fig, axes = plt.subplots(len(node_counts), len(metrics),
                             figsize=(4.2 * len(metrics), 3.2 * len(node_counts)),
                             squeeze=False)
    for i, n in enumerate(node_counts):
        for k, (attr, label) in enumerate(metrics):
            ax = axes[i][k]
            for p in placements:
                pts = [(r.lam, getattr(r, attr)) for r in rows
                       if r.nodes == n and r.placement == p and getattr(r, attr) is not None]
                pts.sort()
                if pts:
                    ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=p)
            ax.set_xscale("log")
            ax.set_xlabel("λ (s)")
            ax.set_ylabel(label)
            ax.set_title(f"{n} nodes")
            ax.grid(True, alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def format_table(rows: Sequence[Row]) -> str:
    body = [
        (r.nodes, _lam_text(r.lam), r.placement, r.completed, r.mean_phase_difference,
         r.mean_wait, r.p95_wait, r.jain_dominant_share, r.solver_ms_per_cycle)
        for r in rows
    ]
    return table(("nodes", "lam", "placement", "done", "Φ s", "wait s", "p95 s", "jain",
                  "ms/cyc"), body, digits=(0, 0, 0, 0, 1, 1, 1, 3, 2), align=">><>>>>>>")


def _placement_list(text: str) -> list[str]:
    from global_manager.admission import placement_policies

    return registry_list("--placements", text, placement_policies, "placement")


def handler(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    nodes = _int_list("--nodes", args.nodes)
    lams = _float_list("--lam", args.lam)
    placements = _placement_list(args.placements)
    users = int_flag("--users", args.users, 1)
    jobs = int_flag("--jobs", args.jobs, 1)
    seed = int_flag("--seed", args.seed, None)
    cycle = seconds_flag("--cycle", args.cycle)
    workers = (os.cpu_count() or 1) if args.workers is None else int_flag(
        "--workers", args.workers, 1)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{out}: cannot create output directory: {exc.strerror}") from None
    cells = make_cells(nodes, lams, placements, users, jobs, seed, cycle)
    start = time.perf_counter()
    with tqdm(total=len(cells), desc="placement", unit="run", file=sys.stderr,
              disable=args.quiet) as bar:
        rows = run_matrix(cells, workers, progress=lambda _row: bar.update())
    wall = time.perf_counter() - start
    config = {
        "nodes": nodes, "lam": lams, "placements": placements, "users": users,
        "user_draw": "seeded, user k with weight 1/(k+1)", "jobs": jobs, "seed": seed,
        "policy": DEFAULT_POLICY, "queue": "wait", "cycle_s": cycle,
        "rate_per_weight": DEFAULT_RATE_PER_WEIGHT, "workers": workers,
        "wall_seconds": wall,
    }
    write_csv(out / "results.csv", rows)
    (out / "results.json").write_text(
        json.dumps({"config": config, "rows": [asdict(r) for r in rows]}, indent=2,
                   allow_nan=False) + "\n", encoding="utf-8")
    plot(out / "placement.png", rows, lams, placements)
    print(format_table(rows))
    print(f"{len(rows)} runs in {wall:.1f} s on {workers} worker(s); wrote "
          f"{out / 'results.csv'}, {out / 'results.json'}, {out / 'placement.png'}")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "placement",
        help="flow vs least_loaded vs random placement with a pending queue (sq, queue: wait)",
        description=(
            "Simulate the calibrated paper workload with several users under sq with a "
            "pending queue, once per placement policy: mean phase difference, jobs "
            "completed, wait, Jain's index of the waiting users' dominant shares, solver "
            "time per placement cycle. Writes results.csv, results.json and placement.png "
            "into --out."
        ),
    )
    parser.add_argument("--nodes", default=",".join(map(str, DEFAULT_NODES)),
                        help="comma-separated node counts (default %(default)s)")
    parser.add_argument("--lam", default=",".join(_lam_text(x) for x in DEFAULT_LAMBDAS),
                        help="comma-separated mean QoS inter-arrival times, s "
                             "(default %(default)s)")
    parser.add_argument("--placements", default=",".join(DEFAULT_PLACEMENTS),
                        help="comma-separated placement policies (default %(default)s)")
    parser.add_argument("--users", default=str(DEFAULT_USERS),
                        help="users the strict jobs are drawn for (default %(default)s)")
    parser.add_argument("--jobs", default=str(DEFAULT_JOBS),
                        help="QoS jobs per run (default %(default)s)")
    parser.add_argument("--seed", default="0", help="random seed (default 0)")
    parser.add_argument("--cycle", default=str(DEFAULT_CYCLE),
                        help="local scheduling cycle q, s (default %(default)s)")
    parser.add_argument("--workers", default=None,
                        help="worker processes (default: the CPU count)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="output directory (default %(default)s)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=handler)
