"""``coalloc experiment placement``: scheduling policies x placement policies with a
pending queue under the live runtime's defaults.

For every cell ``nodes x lambda`` one workload is generated (the calibrated paper
workload: :class:`~workloads.generator.PaperWorkloadParams` with ``rate_per_weight`` 12.5,
seeded from ``--seed``, the node count and lambda as in ``coalloc experiment paper``) and
its strict jobs are given to ``--users`` users by a seeded draw in which user ``k``
(0-based) has weight ``1 / (k + 1)`` (Zipf: user ``u0`` submits most, so fair sharing has
something to do). The workload is then simulated once per scheduling policy of
``--policies`` (default ``sq,strict``) and placement policy of ``--placements``, all on
the same workload and seed, under the core configuration the live runtime uses
(:func:`runtime.config.runtime_core`: work-conserving queues, ``queue: wait``; only the
cycle ``q`` and ``u_t`` are the experiment's): strict jobs that do not fit wait and are
placed by each cycle's placement; none is rejected for load, and with no ``max_wait``
every job that fits the grid at all ends completed.

Columns (strict jobs): ``policy``, ``placement``; ``completed``;
``mean_phase_difference`` (Φ, s: the mean of the completed jobs' mean phase differences,
jobs with at least two subtasks, as in the paper experiment); ``mean_wait``, ``p95_wait``
and ``max_wait`` (s: placement time minus arrival, over the jobs placed);
``mean_turnaround`` and ``p95_turnaround`` (s, completed jobs);
``mean_run_over_nominal``: the mean over completed jobs of their run time (turnaround
minus wait) over their nominal duration (the largest over the job's subtasks of work /
expected rate ``r_i u_t``: how long the job takes when every subtask gets exactly its
expected rate); ``window_violation_fraction``: window violations (Φ > ``A_t``) over the
control periods with at least two running subtasks (the paper experiment's
:func:`~coalloc.experiments.paper.window_violation_fraction`); ``jain_dominant_share``:
Jain's index ``(sum x)^2 / (n sum x^2)`` of the dominant shares ``x_u`` of the users that
have a job pending, averaged over the time at least two users have one (weighted by time;
``None`` if never). A user's dominant share at time ``t`` is the strict expected rate its
running jobs hold over the grid's QoS budget (one resource, so DRF's dominant share); 1
means the users kept waiting hold equal shares (what weighted DRF with equal weights aims
at). ``qos_utilization``: CPU used by grid QoS subtasks over the QoS queue's share of
the CPU offered, and ``utilization``: the mean over nodes of CPU used by subtasks over
CPU offered (both 0..1, as in the paper experiment). ``placement_cycles``: placement
cycles run (cycles with nothing new are skipped); ``solver_ms_per_cycle``: wall time of
the placement calls over the cycles run (measured: it varies between runs, the other
columns do not); ``end_time`` (s).

Writes ``results.csv``, ``results.json`` (rows and configuration) and ``placement.png``
(mean wait, mean turnaround and Φ against lambda, one line per policy and placement, one
row of panels per node count) into ``--out``.

``start_estimate_mae`` (s): the mean absolute error of the jobs' first start estimates
(made when a job is still pending after its arrival's placement cycle,
:meth:`~global_manager.core.GlobalManagerCore.start_estimates`) against their actual
starts, over the jobs that waited and started.
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from coalloc.experiments.paper import (
    DEFAULT_RATE_PER_WEIGHT,
    _lam_text,
    _mean,
    _percentile,
    cell_seed,
    matrix_axes,
    mean_utilization,
    output_dir,
    registry_list,
    run_cells,
    run_with_progress,
    window_violation_fraction,
    worker_count,
    write_csv,
    write_json,
    wrote,
)
from coalloc.flags import int_flag, seconds_flag
from coalloc.tables import render as table

DEFAULT_NODES = (4, 6, 9)
DEFAULT_LAMBDAS = (50.0, 100.0, 200.0, 400.0)
DEFAULT_POLICIES = ("sq", "strict")
DEFAULT_PLACEMENTS = ("backfill", "least_loaded", "random")
DEFAULT_USERS = 3
DEFAULT_JOBS = 500
DEFAULT_POLICY = "sq"
DEFAULT_CYCLE = 30.0
DEFAULT_OUT = "runs/placement"

CSV_COLUMNS = (
    "nodes", "lam", "policy", "placement", "users", "submitted", "completed",
    "mean_phase_difference", "mean_wait", "p95_wait", "max_wait", "mean_turnaround",
    "p95_turnaround", "mean_run_over_nominal", "window_violation_fraction",
    "jain_dominant_share", "qos_utilization", "utilization", "placement_cycles",
    "solver_ms_per_cycle", "end_time", "start_estimate_mae",
)


@dataclass(frozen=True, slots=True)
class Cell:
    """One run: ``nodes`` nodes, mean QoS inter-arrival ``lam`` (s), one placement
    policy, ``users`` users, ``jobs`` QoS jobs; ``seed`` seeds the workload, the user
    draw and the simulator; ``policy`` names the scheduling policy; ``max_time`` (s)
    stops the run there (``None``: when every job has ended)."""

    nodes: int
    lam: float
    placement: str
    users: int
    jobs: int
    seed: int
    cycle: float = DEFAULT_CYCLE
    rate_per_weight: float = DEFAULT_RATE_PER_WEIGHT
    policy: str = DEFAULT_POLICY
    max_time: float | None = None


@dataclass(frozen=True, slots=True)
class Row:
    """One line of ``results.csv`` (see the module docstring for the columns)."""

    nodes: int
    lam: float
    policy: str
    placement: str
    users: int
    submitted: int
    completed: int
    mean_phase_difference: float | None
    mean_wait: float | None
    p95_wait: float | None
    max_wait: float | None
    mean_turnaround: float | None
    p95_turnaround: float | None
    mean_run_over_nominal: float | None
    window_violation_fraction: float | None
    jain_dominant_share: float | None
    qos_utilization: float
    utilization: float
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


def simulate_cell(cell: Cell, policy: Any = None) -> tuple[Any, Any, float]:
    """Simulate one cell under the live runtime's core configuration (only ``q``,
    ``u_t`` and ``max_time`` from the cell): the workload, the
    :class:`~global_manager.simulator.RunResult` and the grid's QoS budget (Mcycles/s).
    ``policy``: a :class:`~global_manager.policies.Policy` to run instead of the
    cell's named one (with its placement)."""
    from global_manager.policies import get_policy
    from global_manager.simulator import simulate
    from runtime.config import runtime_core

    workload = make_workload(cell)
    if policy is None:
        policy = get_policy(cell.policy, placement=cell.placement)
    config = runtime_core(cycle=cell.cycle, rate_per_weight=cell.rate_per_weight,
                          max_time=cell.max_time)
    result = simulate(workload, policy, seed=cell.seed, config=config)
    capacity = math.fsum(policy.admission_policy().budget(n.cpu_rate, config.qos_share)
                         for n in workload.nodes)
    return workload, result, capacity


def run_cell(cell: Cell) -> Row:
    """Simulate one cell and summarise it (top-level, so worker processes can import
    it)."""
    workload, result, capacity = simulate_cell(cell)
    return summarize(cell, workload, result, capacity)


def nominal_durations(jobs: Sequence[Any], rate_per_weight: float) -> dict[str, float]:
    """Each job's nominal duration (s), by job id: the largest over its subtasks of work
    (Mcycles) over expected rate ``weight * rate_per_weight`` (Mcycles/s). Jobs given
    without subtasks (split by the global manager) have none."""
    return {
        j.job_id: max(s.work / (s.weight * rate_per_weight) for s in j.subtasks)
        for j in jobs if j.subtasks
    }


def mean_run_over_nominal(done: Sequence[Any], nominal: dict[str, float]) -> float | None:
    """The mean over the completed jobs ``done`` of ``(turnaround - wait) / nominal``
    (their run time over their nominal duration; a job with no wait recorded counts
    its whole turnaround); ``None`` when no job has both."""
    ratios = [
        (j.turnaround - (j.wait or 0.0)) / nominal[j.job_id]
        for j in done
        if j.turnaround is not None and nominal.get(j.job_id, 0.0) > 0
    ]
    return math.fsum(ratios) / len(ratios) if ratios else None


def summarize(cell: Cell, workload: Any, result: Any, capacity: float) -> Row:
    """The CSV row of one run (see the module docstring for the columns)."""
    strict = [j for j in result.jobs if j.qos == "strict"]
    done = [j for j in strict if j.state == "completed"]
    phase = result.strict_completed(min_subtasks=2)
    waits = [j.wait for j in strict if j.wait is not None]
    turnarounds = [j.turnaround for j in done if j.turnaround is not None]
    rates = {
        j.job_id: math.fsum(s.weight for s in j.subtasks) * cell.rate_per_weight
        for j in workload.jobs
    }
    cycles = result.placement_cycles
    return Row(
        nodes=cell.nodes,
        lam=cell.lam,
        policy=cell.policy,
        placement=cell.placement,
        users=cell.users,
        submitted=len(strict),
        completed=len(done),
        mean_phase_difference=_mean([j.mean_phase_difference for j in phase]),
        mean_wait=_mean(waits),
        p95_wait=_percentile(waits, 95.0),
        max_wait=max(waits, default=None),
        mean_turnaround=_mean(turnarounds),
        p95_turnaround=_percentile(turnarounds, 95.0),
        mean_run_over_nominal=mean_run_over_nominal(
            done, nominal_durations(workload.jobs, cell.rate_per_weight)),
        window_violation_fraction=window_violation_fraction(strict),
        jain_dominant_share=jain_over_contention(strict, rates, capacity, result.end_time),
        qos_utilization=result.qos_utilization,
        utilization=mean_utilization(result),
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
               users: int, jobs: int, seed: int, cycle: float = DEFAULT_CYCLE,
               policies: Sequence[str] = (DEFAULT_POLICY,),
               max_time: float | None = None) -> list[Cell]:
    """Every run of the matrix, in output order: nodes, lambda, ``policies``' order, then
    ``placements``'. The runs of a cell share one workload and seed."""
    return [Cell(n, float(lam), p, users, jobs, cell_seed(seed, n, lam), cycle,
                 policy=pol, max_time=max_time)
            for n in nodes for lam in lams for pol in policies for p in placements]


def run_matrix(cells: Sequence[Cell], workers: int,
               progress: Callable[[Row], None] | None = None) -> list[Row]:
    """Every cell, in this process (``workers == 1``) or a process pool
    (:func:`~coalloc.experiments.paper.run_cells`); rows in the order of ``cells``."""
    return run_cells(cells, run_cell, workers, progress)


def plot(path: Path, rows: Sequence[Row], policies: Sequence[str],
         placements: Sequence[str]) -> None:
    """Mean wait, mean turnaround and mean Φ against lambda (log scales), one row of
    panels per node count, one line per policy (line style) and placement (colour)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = (("mean_wait", "mean wait (s)"), ("mean_turnaround", "mean turnaround (s)"),
               ("mean_phase_difference", "mean Φ (s)"))
    styles = ("-", "--", ":", "-.")
    markers = ("o", "s", "^", "D")
    node_counts = sorted({r.nodes for r in rows})
    fig, axes = plt.subplots(len(node_counts), len(metrics),
                             figsize=(4.4 * len(metrics), 3.3 * len(node_counts)),
                             squeeze=False)
    for i, n in enumerate(node_counts):
        for k, (attr, label) in enumerate(metrics):
            ax = axes[i][k]
            for a, pol in enumerate(policies):
                for b, pl in enumerate(placements):
                    # Log axes: a zero (no wait at all) cannot be drawn, so it is left out.
                    pts = sorted((r.lam, getattr(r, attr)) for r in rows
                                 if r.nodes == n and r.policy == pol and r.placement == pl
                                 and getattr(r, attr) is not None and getattr(r, attr) > 0)
                    if pts:
                        ax.plot([x for x, _ in pts], [y for _, y in pts],
                                linestyle=styles[a % len(styles)],
                                marker=markers[a % len(markers)], color=f"C{b % 10}",
                                label=f"{pol} + {pl}")
            lam_panel(ax, rows, n, label, log=True)
    save_figure(fig, axes, path,
                "Strict jobs under the live defaults (work-conserving, queue: wait)")


def lam_panel(ax: Any, rows: Sequence[Any], nodes: int, label: str, log: bool,
              fontsize: float | None = None) -> None:
    """Dress one panel of a figure against lambda (log scale, a tick per lambda of
    ``rows``) for ``nodes`` nodes, ``label`` on the y axis (log scale when ``log``)."""
    from matplotlib.ticker import NullLocator

    ax.set_xscale("log")
    if log:
        ax.set_yscale("log")
    lams = sorted({r.lam for r in rows})
    ax.set_xticks(lams, [_lam_text(x) for x in lams])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("λ (s)")
    if fontsize is None:
        ax.set_ylabel(label)
    else:
        ax.set_ylabel(label, fontsize=fontsize)
    ax.set_title(f"{nodes} nodes")
    ax.grid(True, alpha=0.3)


def save_figure(fig: Any, axes: Any, path: Path, title: str) -> None:
    """The first panel's legend, ``title``, and ``fig`` written to ``path`` (PNG, no
    software stamp, so the bytes depend only on the data) and closed."""
    import matplotlib.pyplot as plt

    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        axes[0][0].legend(handles, labels, fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def format_table(rows: Sequence[Row]) -> str:
    body = [
        (r.nodes, _lam_text(r.lam), r.policy, r.placement, r.completed,
         r.mean_phase_difference, r.mean_wait, r.p95_wait, r.max_wait, r.mean_turnaround,
         r.p95_turnaround, r.mean_run_over_nominal, r.window_violation_fraction,
         r.jain_dominant_share, r.qos_utilization, r.utilization, r.solver_ms_per_cycle)
        for r in rows
    ]
    return table(("nodes", "lam", "policy", "placement", "done", "Φ s", "wait s", "p95 s",
                  "max s", "turn s", "p95 turn", "run/nom", "viol", "jain", "qos_util",
                  "util", "ms/cyc"), body,
                 digits=(0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 3, 4, 3, 3, 3, 2),
                 align=">><<" + ">" * 13)


def _placement_list(text: str) -> list[str]:
    from global_manager.placer import placement_policies

    return registry_list("--placements", text, placement_policies, "placement")


def live_core_config() -> dict[str, Any]:
    """The ``results.json`` entries that describe the live runtime's core configuration
    (:func:`runtime.config.runtime_core`) the runs used."""
    from runtime.config import runtime_core

    core = runtime_core()
    return {
        "core": "runtime_core(): the live runtime's defaults",
        "queue": str(core.queue.value), "work_conserving": core.work_conserving,
        "queue_weights": list(core.queue_weights),
    }


def handler(args: argparse.Namespace) -> int:
    nodes, lams, policy_names = matrix_axes(args)
    placements = _placement_list(args.placements)
    users = int_flag("--users", args.users, 1)
    jobs = int_flag("--jobs", args.jobs, 1)
    seed = int_flag("--seed", args.seed, None)
    cycle = seconds_flag("--cycle", args.cycle)
    workers = worker_count(args.workers)
    out = output_dir(args.out)
    cells = make_cells(nodes, lams, placements, users, jobs, seed, cycle, policy_names)
    rows, wall = run_with_progress(cells, run_matrix, workers, "placement", args.quiet)
    config = {
        "nodes": nodes, "lam": lams, "placements": placements, "users": users,
        "user_draw": "seeded, user k with weight 1/(k+1)", "jobs": jobs, "seed": seed,
        "policies": policy_names, **live_core_config(), "cycle_s": cycle,
        "rate_per_weight": DEFAULT_RATE_PER_WEIGHT, "workers": workers,
        "wall_seconds": wall,
    }
    write_csv(out / "results.csv", rows, CSV_COLUMNS)
    write_json(out / "results.json", rows, config)
    plot(out / "placement.png", rows, policy_names, placements)
    print(format_table(rows))
    print(wrote(rows, wall, workers, out / "results.csv", out / "results.json",
                out / "placement.png"))
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "placement",
        help="scheduling x placement policies with a pending queue under the live defaults",
        description=(
            "Simulate the calibrated paper workload with several users under the live "
            "runtime's defaults (work-conserving queues, queue: wait), once per scheduling "
            "policy and placement policy: jobs completed, wait, turnaround, run time over "
            "nominal, mean phase difference, window violations, Jain's index of the "
            "waiting users' dominant shares, utilisation, solver time per placement "
            "cycle. Writes results.csv, results.json and placement.png into --out."
        ),
    )
    add_matrix_flags(parser, DEFAULT_NODES, DEFAULT_LAMBDAS)
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                        help="comma-separated scheduling policies (default %(default)s; any "
                             "registered policy, e.g. sq_paper, none)")
    parser.add_argument("--placements", default=",".join(DEFAULT_PLACEMENTS),
                        help="comma-separated placement policies (default %(default)s)")
    parser.add_argument("--users", default=str(DEFAULT_USERS),
                        help="users the strict jobs are drawn for (default %(default)s)")
    parser.add_argument("--jobs", default=str(DEFAULT_JOBS),
                        help="QoS jobs per run (default %(default)s)")
    add_run_flags(parser, str(DEFAULT_CYCLE), DEFAULT_OUT)
    parser.set_defaults(handler=handler)


def add_matrix_flags(parser: Any, nodes: Sequence[int], lams: Sequence[float]) -> None:
    """``--nodes`` and ``--lam``, defaulting to ``nodes`` and ``lams``."""
    parser.add_argument("--nodes", default=",".join(map(str, nodes)),
                        help="comma-separated node counts (default %(default)s)")
    parser.add_argument("--lam", default=",".join(_lam_text(x) for x in lams),
                        help="comma-separated mean QoS inter-arrival times, s "
                             "(default %(default)s)")


def add_run_flags(parser: Any, cycle: str, out: str) -> None:
    """``--seed``, ``--cycle`` (default ``cycle``), ``--workers``, ``--out`` (default
    ``out``) and ``--quiet``."""
    parser.add_argument("--seed", default="0", help="random seed (default 0)")
    parser.add_argument("--cycle", default=cycle,
                        help="local scheduling cycle q, s (default %(default)s)")
    parser.add_argument("--workers", default=None,
                        help="worker processes (default: the CPU count)")
    parser.add_argument("--out", default=out, help="output directory (default %(default)s)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
