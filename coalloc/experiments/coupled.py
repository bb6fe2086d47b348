"""``coalloc experiment coupled``: what being in step is worth when the members of a job
are coupled.

For every cell ``nodes x lambda`` one workload is generated: the calibrated paper
workload (:class:`~workloads.generator.PaperWorkloadParams` with ``rate_per_weight``
12.5, seeded from ``--seed``, the node count and lambda as in ``coalloc experiment
paper``) whose QoS jobs of two or more subtasks are coupled: their members exchange every
``--coupling`` s of nominal time, none passes an exchange before its partners, and a
member waiting at one spins or blocks (``--wait``; :mod:`global_manager.coupling`). The
workload is simulated once per policy of ``--policies`` (default ``strict,sq,sq_lead``)
under the core configuration the live runtime uses (:func:`runtime.config.runtime_core`:
work-conserving queues, ``queue: wait``) with backfill placement, all on the same
workload and seed.

**Background work.** A generated workload's grid-local and best-effort jobs are finite and
light: they get all they ask for under any policy, so CPU a policy stops spinning has no
work to go to and simply idles. So that freed CPU can show where it goes (as the live
benchmark puts a CPU-bound best-effort job beside the coupled one on every node), each
node also runs one grid-local job from time 0 that always wants a full core and outlasts
the coupled jobs (its work: the node's full speed for the last QoS arrival plus
``BACKGROUND_TAIL_S``); ``--no-background`` leaves it out.

Columns: ``nodes``, ``lam``, ``policy``, ``coupling`` (Δ, s), ``wait``, ``background``;
strict jobs ``submitted``, ``admitted`` (placed by the end) and ``completed``;
``mean_turnaround`` and ``mean_wait`` (s, completed strict jobs / placed ones); CPU in
reference CPU-seconds at the 1 GHz standard (Mcycles / 1000) over one window for every
policy, ``window_s``: from 0 to the last QoS arrival (the QoS flow's span; a second run
of the cell stopped there, the same run up to that time): ``spin_cpu_s`` (granted to
coupled members waiting at an exchange and spent spinning), ``blocked_cpu_s`` (granted
to blocked members and left unused: what the blocking passes did not hand on),
``local_cpu_s`` and ``best_effort_cpu_s`` (what the grid-local and best-effort entries
got); ``spin_cpu_run_s``: spinning over the whole run. (Over the whole run the
grid-local and best-effort CPU is their work, whatever the policy: a common window is
what shows where CPU went while the coupled jobs ran.)
``mean_phase_difference`` (Φ, s: the mean of the completed strict jobs' mean phase
differences, jobs with at least two subtasks); ``utilization`` (the mean over nodes of
CPU used over CPU offered, spinning included) and ``qos_utilization``; ``end_time`` (s).

Writes ``results.csv``, ``results.json`` (rows and configuration) and ``coupled.png``
into ``--out``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coalloc.errors import UserError
from coalloc.experiments.paper import (
    DEFAULT_RATE_PER_WEIGHT,
    _lam_text,
    _mean,
    cell_seed,
    matrix_axes,
    mean_utilization,
    output_dir,
    run_cells,
    run_with_progress,
    worker_count,
    write_csv,
    write_json,
    wrote,
)
from coalloc.experiments.placement import (
    add_matrix_flags,
    add_run_flags,
    lam_panel,
    live_core_config,
    save_figure,
)
from coalloc.flags import int_flag, seconds_flag
from coalloc.tables import render as table

DEFAULT_NODES = (4, 6, 9)
DEFAULT_LAMBDAS = (50.0, 100.0, 200.0, 400.0)
DEFAULT_POLICIES = ("strict", "sq", "sq_lead")
DEFAULT_JOBS = 500
DEFAULT_COUPLING = 60.0
DEFAULT_WAIT = "spin"
DEFAULT_PLACEMENT = "backfill"
DEFAULT_CYCLE = 30.0
DEFAULT_OUT = "runs/coupled"
#: How long (s at full speed) a node's background job outlasts the last QoS arrival.
BACKGROUND_TAIL_S = 100_000.0

CSV_COLUMNS = (
    "nodes", "lam", "policy", "coupling", "wait", "background", "submitted", "admitted",
    "completed",
    "mean_turnaround", "mean_wait", "window_s", "spin_cpu_s", "blocked_cpu_s", "local_cpu_s",
    "best_effort_cpu_s", "spin_cpu_run_s", "mean_phase_difference", "utilization",
    "qos_utilization", "end_time",
)


@dataclass(frozen=True, slots=True)
class Cell:
    """One run: ``nodes`` nodes, mean QoS inter-arrival ``lam`` (s), ``jobs`` QoS jobs
    coupled every ``coupling`` s with ``wait``, one ``policy``; ``seed`` seeds the
    workload and the simulator."""

    nodes: int
    lam: float
    policy: str
    jobs: int
    seed: int
    coupling: float = DEFAULT_COUPLING
    wait: str = DEFAULT_WAIT
    cycle: float = DEFAULT_CYCLE
    rate_per_weight: float = DEFAULT_RATE_PER_WEIGHT
    background: bool = True


@dataclass(frozen=True, slots=True)
class Row:
    """One line of ``results.csv`` (see the module docstring for the columns)."""

    nodes: int
    lam: float
    policy: str
    coupling: float
    wait: str
    background: bool
    submitted: int
    admitted: int
    completed: int
    mean_turnaround: float | None
    mean_wait: float | None
    window_s: float
    spin_cpu_s: float
    blocked_cpu_s: float
    local_cpu_s: float
    best_effort_cpu_s: float
    spin_cpu_run_s: float
    mean_phase_difference: float | None
    utilization: float
    qos_utilization: float
    end_time: float


def make_workload(cell: Cell) -> Any:
    """The cell's calibrated workload with coupled members (and its background jobs)."""
    from workloads.generator import PaperWorkloadParams, generate
    from workloads.model import JobSpec, QosClass, SubtaskSpec, WaitMode, Workload

    w = generate(
        PaperWorkloadParams(nodes=cell.nodes, mean_interarrival=cell.lam, jobs=cell.jobs,
                            rate_per_weight=cell.rate_per_weight, coupling=cell.coupling,
                            wait=WaitMode(cell.wait)),
        seed=cell.seed,
    )
    if not cell.background:
        return w
    last = max((j.arrival for j in w.jobs if j.qos in (QosClass.STRICT, QosClass.LOOSE)),
               default=0.0)
    background = tuple(
        JobSpec(name=f"background-{n.name}", qos=QosClass.LOCAL,
                subtasks=(SubtaskSpec(work=n.speed_mhz * (last + BACKGROUND_TAIL_S)),),
                arrival=0.0, job_id=f"background-{n.name}", node=n.name)
        for n in w.nodes
    )
    return Workload(w.nodes, background + w.jobs, w.seed, w.params)


def window_of(workload: Any) -> float:
    """The common window of the CPU columns (s): the last QoS arrival."""
    from workloads.model import QosClass

    return max((j.arrival for j in workload.jobs
                if j.qos in (QosClass.STRICT, QosClass.LOOSE)), default=0.0)


def simulate_cell(cell: Cell, max_time: float | None = None) -> tuple[Any, Any]:
    """Simulate one cell under the live runtime's core configuration (only ``q`` and
    ``u_t`` from the cell, and ``max_time``) with backfill placement: the workload and
    the :class:`~global_manager.simulator.RunResult`."""
    from global_manager.policies import get_policy
    from global_manager.simulator import simulate
    from runtime.config import runtime_core

    workload = make_workload(cell)
    policy = get_policy(cell.policy, placement=DEFAULT_PLACEMENT)
    config = runtime_core(cycle=cell.cycle, rate_per_weight=cell.rate_per_weight,
                          max_time=max_time)
    return workload, simulate(workload, policy, seed=cell.seed, config=config)


def run_cell(cell: Cell) -> Row:
    """Simulate one cell, and again up to its window, and summarise it (top-level, so
    worker processes can import it)."""
    workload, result = simulate_cell(cell)
    window = window_of(workload)
    _, windowed = simulate_cell(cell, max_time=window)
    return summarize(cell, result, windowed, window)


def _cpu(result: Any) -> tuple[float, float, float, float]:
    """A run's coupling totals in reference CPU-seconds (zeros without coupled jobs)."""
    from workloads.model import STANDARD_MHZ

    t = result.coupling
    if t is None:
        return (0.0, 0.0, 0.0, 0.0)
    return (t.spin_cpu / STANDARD_MHZ, t.blocked_cpu / STANDARD_MHZ,
            t.local_cpu / STANDARD_MHZ, t.best_effort_cpu / STANDARD_MHZ)


def summarize(cell: Cell, result: Any, windowed: Any, window: float) -> Row:
    """The CSV row of one run, ``windowed`` the same run stopped at ``window`` (s; see
    the module docstring for the columns)."""
    strict = [j for j in result.jobs if j.qos == "strict"]
    done = [j for j in strict if j.completed]
    spin, blocked, local, best_effort = _cpu(windowed)
    return Row(
        nodes=cell.nodes,
        lam=cell.lam,
        policy=cell.policy,
        coupling=cell.coupling,
        wait=cell.wait,
        background=cell.background,
        submitted=len(strict),
        admitted=sum(1 for j in strict if j.admitted),
        completed=len(done),
        mean_turnaround=_mean([j.turnaround for j in done]),
        mean_wait=_mean([j.wait for j in strict if j.wait is not None]),
        window_s=window,
        spin_cpu_s=spin,
        blocked_cpu_s=blocked,
        local_cpu_s=local,
        best_effort_cpu_s=best_effort,
        spin_cpu_run_s=_cpu(result)[0],
        mean_phase_difference=_mean(
            [j.mean_phase_difference for j in result.strict_completed(min_subtasks=2)]),
        utilization=mean_utilization(result),
        qos_utilization=result.qos_utilization,
        end_time=result.end_time,
    )


def make_cells(nodes: Sequence[int], lams: Sequence[float], policies: Sequence[str],
               jobs: int, seed: int, coupling: float = DEFAULT_COUPLING,
               wait: str = DEFAULT_WAIT, cycle: float = DEFAULT_CYCLE,
               background: bool = True) -> list[Cell]:
    """Every run of the matrix, in output order: nodes, lambda, then ``policies``' order.
    The runs of a cell share one workload and seed."""
    return [Cell(n, float(lam), pol, jobs, cell_seed(seed, n, lam), coupling, wait, cycle,
                 background=background)
            for n in nodes for lam in lams for pol in policies]


def run_matrix(cells: Sequence[Cell], workers: int,
               progress: Callable[[Row], None] | None = None) -> list[Row]:
    """Every cell, in this process (``workers == 1``) or a process pool; rows in the
    order of ``cells``."""
    return run_cells(cells, run_cell, workers, progress)


def plot(path: Path, rows: Sequence[Row], policies: Sequence[str]) -> None:
    """Mean turnaround, CPU spent spinning, grid-local plus best-effort CPU and mean Φ
    against lambda, one row of panels per node count, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics: tuple[tuple[str, Callable[[Row], float | None], bool], ...] = (
        ("mean turnaround (s)", lambda r: r.mean_turnaround, False),
        ("CPU spent waiting (CPU-s)", lambda r: r.spin_cpu_s + r.blocked_cpu_s, True),
        ("grid-local + best-effort CPU (CPU-s)",
         lambda r: r.local_cpu_s + r.best_effort_cpu_s, False),
        ("mean Φ (s)", lambda r: r.mean_phase_difference, True),
    )
    node_counts = sorted({r.nodes for r in rows})
    fig, axes = plt.subplots(len(node_counts), len(metrics),
                             figsize=(4.2 * len(metrics), 3.2 * len(node_counts)),
                             squeeze=False)
    for i, n in enumerate(node_counts):
        for k, (label, value, log) in enumerate(metrics):
            ax = axes[i][k]
            for a, pol in enumerate(policies):
                pts = []
                for r in rows:
                    v = value(r)
                    if r.nodes == n and r.policy == pol and v is not None and (v > 0 or not log):
                        pts.append((r.lam, v))
                pts.sort()
                if pts:
                    ax.plot([x for x, _ in pts], [y for _, y in pts], marker="os^D"[a % 4],
                            color=f"C{a % 10}", label=pol)
            lam_panel(ax, rows, n, label, log, fontsize=8)
    first = rows[0] if rows else None
    what = (f"exchange every {first.coupling:g} s, wait: {first.wait}"
            + ("" if first.background else ", no background")) if first else ""
    save_figure(fig, axes, path, f"Coupled members under the live defaults ({what})")


def format_table(rows: Sequence[Row]) -> str:
    body = [
        (r.nodes, _lam_text(r.lam), r.policy, r.admitted, r.completed, r.mean_turnaround,
         r.mean_wait, r.spin_cpu_s, r.blocked_cpu_s, r.local_cpu_s + r.best_effort_cpu_s,
         r.mean_phase_difference, r.utilization)
        for r in rows
    ]
    return table(("nodes", "lam", "policy", "admitted", "done", "turn s", "wait s",
                  "spin CPU-s", "blocked CPU-s", "local+BE CPU-s", "Φ s", "util"), body,
                 digits=(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 3), align=">><" + ">" * 9)


def _wait_flag(text: str) -> str:
    from workloads.model import WaitMode

    values = [w.value for w in WaitMode]
    if text not in values:
        raise UserError(f"--wait: {text!r} is not one of {', '.join(values)}")
    return text


def handler(args: argparse.Namespace) -> int:
    nodes, lams, policy_names = matrix_axes(args)
    jobs = int_flag("--jobs", args.jobs, 1)
    seed = int_flag("--seed", args.seed, None)
    coupling = seconds_flag("--coupling", args.coupling)
    wait = _wait_flag(args.wait)
    cycle = seconds_flag("--cycle", args.cycle)
    workers = worker_count(args.workers)
    out = output_dir(args.out)
    cells = make_cells(nodes, lams, policy_names, jobs, seed, coupling, wait, cycle,
                       background=not args.no_background)
    rows, wall = run_with_progress(cells, run_matrix, workers, "coupled", args.quiet)
    config = {
        "nodes": nodes, "lam": lams, "policies": policy_names, "jobs": jobs, "seed": seed,
        "coupling_s": coupling, "wait": wait, "placement": DEFAULT_PLACEMENT,
        "background": not args.no_background, "background_tail_s": BACKGROUND_TAIL_S,
        **live_core_config(), "cycle_s": cycle,
        "rate_per_weight": DEFAULT_RATE_PER_WEIGHT, "workers": workers,
        "wall_seconds": wall,
    }
    write_csv(out / "results.csv", rows, CSV_COLUMNS)
    write_json(out / "results.json", rows, config)
    plot(out / "coupled.png", rows, policy_names)
    print(format_table(rows))
    print(wrote(rows, wall, workers, out / "results.csv", out / "results.json",
                out / "coupled.png"))
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "coupled",
        help="coupled members (exchanges, spin or block) under strict, sq and sq_lead",
        description=(
            "Simulate the calibrated paper workload whose QoS jobs have coupled members "
            "(they exchange every --coupling s of nominal time and wait for each other, "
            "spinning or blocking) under the live runtime's defaults (work-conserving "
            "queues, queue: wait, backfill placement), once per policy: turnaround, wait, "
            "CPU spent waiting, CPU delivered to grid-local and best-effort work, mean "
            "phase difference, utilisation, admissions. Writes results.csv, results.json "
            "and coupled.png into --out."
        ),
    )
    add_matrix_flags(parser, DEFAULT_NODES, DEFAULT_LAMBDAS)
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                        help="comma-separated scheduling policies (default %(default)s)")
    parser.add_argument("--jobs", default=str(DEFAULT_JOBS),
                        help="QoS jobs per run (default %(default)s)")
    parser.add_argument("--coupling", default=_lam_text(DEFAULT_COUPLING),
                        help="exchange interval Δ, s of nominal time (default %(default)s)")
    parser.add_argument("--wait", default=DEFAULT_WAIT,
                        help="what a member waiting at an exchange does: spin or block "
                             "(default %(default)s)")
    parser.add_argument("--no-background", action="store_true",
                        help="no CPU-bound grid-local job beside the coupled ones on each node")
    add_run_flags(parser, _lam_text(DEFAULT_CYCLE), DEFAULT_OUT)
    parser.set_defaults(handler=handler)
