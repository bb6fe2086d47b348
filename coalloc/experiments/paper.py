"""``coalloc experiment paper``: the SQ paper's experiment (``docs/model.md`` §3),
reproduced.

For every cell ``nodes x lambda`` of the matrix, generate the paper's workload once
(:func:`workloads.generator.generate`, seeded by :func:`cell_seed` from ``--seed``, the
node count and lambda) and simulate it under every policy of ``--policies``
(:func:`global_manager.simulator.simulate`, the same seed), so that the policies of a cell
see the same nodes and jobs. Runs go to ``--workers`` processes; results are sorted
before they are written, so they do not depend on the worker count or finishing order.

Writes into ``--out`` (default ``runs/paper``): ``results.csv`` (one row per nodes x
lambda x policy), ``results.json`` (the rows with their wall time, and the
configuration), the phase logs ``logs/n{nodes}-lam{lambda}-{policy}.jsonl``,
``phase_difference.png`` (mean phase difference against node count, one panel for the
smallest and one for the largest lambda, like the paper's Figs. 3 and 4) and
``acceptance.png`` (acceptance ratio against node count, one panel per lambda).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from coalloc.errors import UserError
from coalloc.flags import int_flag, seconds_flag
from coalloc.tables import render as table

DEFAULT_NODES = (3, 6, 9, 12)
DEFAULT_LAMBDAS = (10.0, 100.0, 200.0, 500.0)
DEFAULT_POLICIES = ("sq", "sq_paper", "strict")
#: u_t of the calibrated experiment (Mcycles/s per weight unit): the largest subtask
#: (weight 4) then fits the QoS budget of the slowest paper node (0.5 x 100 MHz), so no
#: job is refused at every load merely for its shape (docs/decisions.md).
DEFAULT_RATE_PER_WEIGHT = 12.5
DEFAULT_CALIBRATION = "expected"
DEFAULT_OUT = "runs/paper"
DEFAULT_CYCLE = 30.0  # s, the local scheduling cycle q
DEFAULT_LOG_EVERY = 10  # control periods between routine log records (firings always)

CSV_COLUMNS = (
    "nodes", "lam", "policy", "overbooking", "submitted", "admitted", "completed",
    "acceptance_ratio", "phase_jobs", "mean_phase_difference", "max_phase_difference",
    "mean_completion_skew", "window_violation_fraction", "overall_violation_fraction",
    "mean_turnaround", "p95_turnaround", "utilization", "qos_utilization",
    "idle_virtual_fraction", "end_time", "cycles",
)


@dataclass(frozen=True, slots=True)
class Cell:
    """One run of the matrix: ``nodes`` nodes, mean QoS inter-arrival ``lam`` (s), one
    policy. ``seed`` seeds both the workload and the simulator's RNG; ``jobs`` is the QoS
    job count (``None``: the generator's uniform 1500..3000); ``cycle`` is ``q`` (s);
    ``log_every`` is 0 for no phase log; ``overbooking`` overrides the policy's ratio
    (``None``: the policy's own); ``calibration`` and ``rate_per_weight`` (Mcycles/s per
    weight unit) go to the generator and the simulator alike. ``step_every_cycle`` runs
    the simulator's reference mode (:attr:`SimConfig.step_every_cycle`: the same bytes
    out, slower)."""

    nodes: int
    lam: float
    policy: str
    seed: int
    jobs: int | None
    cycle: float
    work_conserving: bool
    log_every: int
    log_path: str | None
    overbooking: float | None = None
    calibration: str = DEFAULT_CALIBRATION
    rate_per_weight: float = DEFAULT_RATE_PER_WEIGHT
    step_every_cycle: bool = False


@dataclass(frozen=True, slots=True)
class Row:
    """One line of ``results.csv``. Counts are of strict jobs: ``submitted``, ``admitted``
    and ``completed`` (all sizes); ``acceptance_ratio = admitted / submitted``.
    ``phase_jobs`` counts the completed strict jobs with at least two subtasks, the
    population (the paper's) of ``mean_phase_difference`` (mean of the jobs' mean phase
    differences, s), ``max_phase_difference`` (largest of the jobs' maxima, s) and
    ``mean_completion_skew`` (s); ``mean_turnaround`` (s) is over all completed strict
    jobs. ``None`` when the population is empty. ``utilization``: mean over nodes of
    CPU used by subtasks over CPU offered (0..1); ``end_time`` (s) and ``cycles`` of the
    simulated run. ``wall_seconds`` is kept out of the CSV (it is not a result: the CSV
    is byte-identical for any worker count) and written to ``results.json``.

    The price of being in step: ``window_violation_fraction`` is, over the admitted
    strict jobs, the fraction of control periods with at least two running subtasks in
    which the phase difference exceeded the job's ``A_t``; ``overall_violation_fraction``
    the same for ``|mean T_V - T_R| > E_t`` (either way: ``sq`` lets jobs run ahead);
    ``p95_turnaround`` (s) over the completed strict jobs; ``qos_utilization`` the CPU
    used by grid QoS subtasks over the QoS queue's share of the CPU offered;
    ``idle_virtual_fraction`` the CPU virtual subtasks won and left idle over the CPU
    offered. ``overbooking`` is the admission's ratio (``None`` without overbooking)."""

    nodes: int
    lam: float
    policy: str
    overbooking: float | None
    submitted: int
    admitted: int
    completed: int
    acceptance_ratio: float | None
    phase_jobs: int
    mean_phase_difference: float | None
    max_phase_difference: float | None
    mean_completion_skew: float | None
    window_violation_fraction: float | None
    overall_violation_fraction: float | None
    mean_turnaround: float | None
    p95_turnaround: float | None
    utilization: float
    qos_utilization: float
    idle_virtual_fraction: float
    end_time: float
    cycles: int
    wall_seconds: float = 0.0


# -- the matrix ----------------------------------------------------------------------------


def cell_seed(seed: int, nodes: int, lam: float) -> int:
    """The seed of cell ``(nodes, lam)``: a 63-bit hash of ``(seed, nodes, lam)``, stable
    across processes and Python versions (``lam`` read as a float, so 10 and 10.0 agree)."""
    key = f"coalloc-paper:{int(seed)}:{int(nodes)}:{float(lam)!r}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") >> 1


def log_name(nodes: int, lam: float, policy: str, overbooking: float | None = None) -> str:
    """``n{nodes}-lam{lam}-{policy}.jsonl`` (``-ob{percent}`` before the suffix when the
    overbooking ratio is overridden); a whole lambda is written without ``.0``."""
    ob = "" if overbooking is None else f"-ob{_lam_text(round(overbooking * 100, 6))}"
    return f"n{nodes}-lam{_lam_text(lam)}-{policy}{ob}.jsonl"


def _lam_text(lam: float) -> str:
    return str(int(lam)) if float(lam).is_integer() else repr(float(lam))


def make_cells(
    nodes: Sequence[int],
    lams: Sequence[float],
    policies: Sequence[str],
    seed: int,
    jobs: int | None = None,
    cycle: float = DEFAULT_CYCLE,
    work_conserving: bool = False,
    log_every: int = DEFAULT_LOG_EVERY,
    log_dir: Path | None = None,
    overbooking: Sequence[float] | None = None,
    calibration: str = DEFAULT_CALIBRATION,
    rate_per_weight: float = DEFAULT_RATE_PER_WEIGHT,
    step_every_cycle: bool = False,
) -> list[Cell]:
    """Every run of the matrix, in output order (nodes, lambda, then ``policies``' order,
    then ``overbooking``'s). Policies that overbook run once per ratio of ``overbooking``
    (``None``: once, at their own ratio). Logs go to ``log_dir`` when it is given and
    ``log_every > 0``."""
    from global_manager.policies import get_policy

    cells = []
    for n in nodes:
        for lam in lams:
            s = cell_seed(seed, n, lam)
            for p in policies:
                overbooks = get_policy(p).overbooks
                ratios: Sequence[float | None] = (
                    list(overbooking) if overbooking is not None and overbooks else [None]
                )
                for ob in ratios:
                    path = (
                        str(log_dir / log_name(n, lam, p, ob))
                        if log_dir is not None and log_every > 0
                        else None
                    )
                    cells.append(
                        Cell(n, float(lam), p, s, jobs, cycle, work_conserving, log_every, path,
                             ob, calibration, rate_per_weight, step_every_cycle)
                    )
    return cells


def run_cell(cell: Cell) -> Row:
    """Generate the cell's workload and simulate it under the cell's policy (one process;
    top-level so that worker processes can import it)."""
    from global_manager.policies import get_policy
    from global_manager.simulator import SimConfig, simulate
    from workloads.generator import Calibration, PaperWorkloadParams, generate

    start = time.perf_counter()
    workload = generate(
        PaperWorkloadParams(nodes=cell.nodes, mean_interarrival=cell.lam, jobs=cell.jobs,
                            calibration=Calibration(cell.calibration),
                            rate_per_weight=cell.rate_per_weight),
        seed=cell.seed,
    )
    config = SimConfig(
        cycle=cell.cycle,
        work_conserving=cell.work_conserving,
        log_every=max(cell.log_every, 1),
        rate_per_weight=cell.rate_per_weight,
        step_every_cycle=cell.step_every_cycle,
    )
    policy = (get_policy(cell.policy) if cell.overbooking is None
              else get_policy(cell.policy, overbooking=cell.overbooking))
    result = simulate(workload, policy, seed=cell.seed, config=config,
                      log_path=cell.log_path)
    row = summarize_run(cell, result, policy.overbooking if policy.overbooks
                        else None)
    # Wall time is measured here, in the worker, so it excludes queueing in the pool.
    return _with_wall(row, time.perf_counter() - start)


def summarize_run(cell: Cell, result: Any, overbooking: float | None = None) -> Row:
    """The CSV row of one :class:`~global_manager.simulator.RunResult`."""
    strict = [j for j in result.jobs if j.qos == "strict"]
    admitted = sum(1 for j in strict if j.admitted)
    done = [j for j in strict if j.completed]
    phase = result.strict_completed(min_subtasks=2)
    turnarounds = [j.turnaround for j in done if j.turnaround is not None]
    return Row(
        nodes=cell.nodes,
        lam=cell.lam,
        policy=cell.policy,
        overbooking=overbooking,
        submitted=len(strict),
        admitted=admitted,
        completed=len(done),
        acceptance_ratio=admitted / len(strict) if strict else None,
        phase_jobs=len(phase),
        mean_phase_difference=_mean([j.mean_phase_difference for j in phase]),
        max_phase_difference=max(
            (j.max_phase_difference for j in phase if j.max_phase_difference is not None),
            default=None,
        ),
        mean_completion_skew=_mean([j.completion_skew for j in phase]),
        window_violation_fraction=window_violation_fraction(strict),
        overall_violation_fraction=overall_violation_fraction(strict),
        mean_turnaround=_mean([j.turnaround for j in done]),
        p95_turnaround=_percentile(turnarounds, 95.0),
        utilization=mean_utilization(result),
        qos_utilization=result.qos_utilization,
        idle_virtual_fraction=result.idle_virtual_fraction,
        end_time=result.end_time,
        cycles=result.cycles,
    )


def window_violation_fraction(strict: Sequence[Any]) -> float | None:
    """Over the admitted jobs of ``strict`` (:class:`~global_manager.simulator.JobResult`),
    the window violations (phase difference above ``A_t``) over the control periods with
    at least two running subtasks; ``None`` when there were no such periods."""
    periods = sum(j.control_periods for j in strict if j.admitted)
    return sum(j.window_violations for j in strict if j.admitted) / periods if periods else None


def overall_violation_fraction(strict: Sequence[Any]) -> float | None:
    """As :func:`window_violation_fraction`, for ``|mean T_V - T_R| > E_t``."""
    periods = sum(j.control_periods for j in strict if j.admitted)
    return sum(j.overall_violations for j in strict if j.admitted) / periods if periods else None


def mean_utilization(result: Any) -> float:
    """The mean over nodes of a run's utilisation (CPU used by subtasks over CPU offered,
    0..1); 0 for no nodes."""
    util = result.utilization
    return sum(util.values()) / len(util) if util else 0.0


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return math.fsum(vals) / len(vals) if vals else None


def _percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) by linear interpolation between closest ranks
    (numpy's default); ``None`` for no values."""
    if not values:
        return None
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), q))


def _with_wall(row: Row, wall: float) -> Row:
    d = asdict(row)
    d["wall_seconds"] = wall
    return Row(**d)


class MatrixCell(Protocol):
    """What :func:`run_cells` needs of a cell: its node count and lambda (s), to start the
    longest runs first."""

    @property
    def nodes(self) -> int: ...

    @property
    def lam(self) -> float: ...


_C = TypeVar("_C", bound=MatrixCell)
_R = TypeVar("_R")


def run_cells(
    cells: Sequence[_C],
    run: Callable[[_C], _R],
    workers: int,
    progress: Callable[[_R], None] | None = None,
) -> list[_R]:
    """``run(cell)`` for every cell, in this process when ``workers == 1`` or else in a
    pool of ``workers`` processes (forkserver where available, else spawn: no state is
    inherited from this process; ``run`` must be a top-level function). ``progress(row)``
    is called as each run finishes. The rows come back in the order of ``cells``,
    whatever the finishing order."""
    if workers < 1:
        raise ValueError(f"workers: must be >= 1, got {workers}")
    rows: dict[int, _R] = {}
    if workers == 1 or len(cells) <= 1:
        for i, cell in enumerate(cells):
            rows[i] = run(cell)
            if progress is not None:
                progress(rows[i])
        return [rows[i] for i in range(len(cells))]

    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    # Longest runs first (more nodes, heavier load), so that the pool does not end on a
    # single long straggler; the output order does not depend on this.
    order = sorted(range(len(cells)), key=lambda i: (-cells[i].nodes, cells[i].lam, i))
    pool = ProcessPoolExecutor(max_workers=min(workers, len(cells)), mp_context=ctx)
    try:
        pending = {pool.submit(run, cells[i]): i for i in order}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                i = pending.pop(fut)
                rows[i] = fut.result()
                if progress is not None:
                    progress(rows[i])
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return [rows[i] for i in range(len(cells))]


def run_matrix(
    cells: Sequence[Cell],
    workers: int,
    progress: Callable[[Row], None] | None = None,
) -> list[Row]:
    """:func:`run_cell` for every cell through :func:`run_cells`."""
    return run_cells(cells, run_cell, workers, progress)


# -- output --------------------------------------------------------------------------------


def _csv_value(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def write_csv(path: Path, rows: Sequence[Any], columns: Sequence[str] = CSV_COLUMNS) -> None:
    """``rows`` (dataclasses) as CSV, the fields ``columns`` (default this experiment's):
    floats as ``repr``, ``None`` as empty (every experiment's ``results.csv``)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            record = asdict(row)
            writer.writerow([_csv_value(record[c]) for c in columns])


def write_json(path: Path, rows: Sequence[Any], config: dict[str, Any]) -> None:
    payload = {"config": config, "rows": [asdict(r) for r in rows]}
    path.write_text(json.dumps(payload, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def worker_count(text: str | None) -> int:
    """``--workers``: the CPU count when not given."""
    return (os.cpu_count() or 1) if text is None else int_flag("--workers", text, 1)


def output_dir(text: str, *subdirs: Path) -> Path:
    """``--out``, created (and ``subdirs`` inside it); a :class:`UserError` if it cannot be."""
    out = Path(text)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for sub in subdirs:
            sub.mkdir(exist_ok=True)
    except OSError as exc:
        raise UserError(f"{out}: cannot create output directory: {exc.strerror}") from None
    return out


def run_with_progress(
    cells: Sequence[_C],
    matrix: Callable[..., list[_R]],
    workers: int,
    desc: str,
    quiet: bool,
) -> tuple[list[_R], float]:
    """``matrix(cells, workers, progress=...)`` behind a progress bar on stderr (none
    when ``quiet``): the rows and the wall time (s)."""
    from tqdm import tqdm

    start = time.perf_counter()
    with tqdm(total=len(cells), desc=desc, unit="run", file=sys.stderr, disable=quiet) as bar:
        rows = matrix(cells, workers, progress=lambda _row: bar.update())
    return rows, time.perf_counter() - start


def wrote(rows: Sequence[Any], wall: float, workers: int, *paths: object) -> str:
    """The closing line of an experiment: runs, wall time, workers, what was written."""
    return (f"{len(rows)} runs in {wall:.1f} s on {workers} worker(s); wrote "
            + ", ".join(map(str, paths)))


def variant(row: Row) -> str:
    """A row's policy with its overbooking ratio when it overbooks (``sq ob 5%``)."""
    if row.overbooking is None:
        return row.policy
    return f"{row.policy} ob {_lam_text(round(row.overbooking * 100, 6))}%"


def variants(rows: Sequence[Row]) -> list[str]:
    """Every variant in first-seen order."""
    return list(dict.fromkeys(variant(r) for r in rows))


def _series(
    rows: Sequence[Row], lam: float, name: str, field: str
) -> tuple[list[int], list[float]]:
    """(nodes, values) of one variant at one lambda, skipping empty values."""
    points = sorted(
        (r.nodes, getattr(r, field))
        for r in rows
        if r.lam == lam and variant(r) == name and getattr(r, field) is not None
    )
    return [p[0] for p in points], [float(p[1]) for p in points]


_LABELS = {
    "sq ob 5%": "sq: pace control, 5 % overbooking",
    "sq_paper ob 5%": "sq_paper: the paper's SQ (windows, 5 % overbooking)",
    "strict": "strict admission control",
    "none": "no admission control",
    "sq_no_overbooking": "SQ without overbooking",
    "sq_work_conserving": "SQ, work-conserving virtual subtasks",
}


def plot_phase_difference(path: Path, rows: Sequence[Row], lams: Sequence[float],
                          policies: Sequence[str]) -> None:
    """Mean phase difference (s) against node count at the smallest and the largest
    lambda (one panel if only one is given), one line per policy (the paper's Figs. 3, 4).
    Each point is labelled with its population (``phase_jobs``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({min(lams), max(lams)})
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2),
                             constrained_layout=True, squeeze=False)
    for ax, lam in zip(axes[0], panels):
        for policy in variants(rows):
            xs, ys = _series(rows, lam, policy, "mean_phase_difference")
            _, ns = _series(rows, lam, policy, "phase_jobs")
            (line,) = ax.plot(xs, ys, marker="o", label=_LABELS.get(policy, policy))
            for x, y, n in zip(xs, ys, ns):
                ax.annotate(f"n={n:.0f}", (x, y), textcoords="offset points", xytext=(4, 4),
                            fontsize=7, color=line.get_color())
        # The paper's names for its two loads; whether they are loads here is in the table.
        load = {min(lams): "the paper's overload", max(lams): "the paper's light load"}
        ax.set_title(f"λ = {_lam_text(lam)} s" + (f" ({load[lam]})" if len(panels) > 1 else ""))
        ax.set_xlabel("number of nodes")
        ax.set_ylabel("mean phase difference (s)")
        ax.set_xticks(sorted({r.nodes for r in rows}))
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Mean phase difference of completed strict jobs with ≥ 2 subtasks "
                 "(n = jobs averaged)")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_acceptance(path: Path, rows: Sequence[Row], lams: Sequence[float],
                    policies: Sequence[str]) -> None:
    """Acceptance ratio of strict jobs against node count, one panel per lambda (two per
    row beyond two lambdas)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = len(lams) if len(lams) <= 2 else 2
    nrows = math.ceil(len(lams) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.6 * nrows),
                             constrained_layout=True, squeeze=False, sharey=True)
    flat = list(axes.flat)
    for ax, lam in zip(flat, lams):
        for policy in variants(rows):
            xs, ys = _series(rows, lam, policy, "acceptance_ratio")
            ax.plot(xs, ys, marker="o", label=_LABELS.get(policy, policy))
        ax.set_title(f"λ = {_lam_text(lam)} s")
        ax.set_xlabel("number of nodes")
        ax.set_ylabel("acceptance ratio")
        ax.set_xticks(sorted({r.nodes for r in rows}))
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
    for ax in flat[len(lams):]:
        ax.set_visible(False)
    flat[0].legend(fontsize=8)
    fig.suptitle("Admission of strict jobs (admitted / submitted)")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def tradeoff_points(rows: Sequence[Row], lam: float) -> list[dict[str, Any]]:
    """One point per variant at ``lam``, over the node counts: strict jobs admitted
    (summed), mean phase difference (mean of the cells', weighted by their populations)
    and window-violation fraction (mean of the cells'), utilisation (mean)."""
    out = []
    for name in variants(rows):
        cells = [r for r in rows if r.lam == lam and variant(r) == name]
        if not cells:
            continue
        weighted = [(r.mean_phase_difference, r.phase_jobs) for r in cells
                    if r.mean_phase_difference is not None and r.phase_jobs]
        n = sum(w for _, w in weighted)
        viol = [r.window_violation_fraction for r in cells
                if r.window_violation_fraction is not None]
        out.append({
            "variant": name,
            "admitted": sum(r.admitted for r in cells),
            "mean_phase_difference": sum(v * w for v, w in weighted) / n if n else None,
            "window_violation_fraction": sum(viol) / len(viol) if viol else None,
            "utilization": sum(r.utilization for r in cells) / len(cells),
        })
    return out


def plot_tradeoff(path: Path, rows: Sequence[Row], lams: Sequence[float]) -> None:
    """The price of being in step: per lambda (one column each), strict jobs admitted
    against mean phase difference (top) and against the window-violation fraction
    (bottom), one point per policy and overbooking ratio, summed over the node counts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(lams), figsize=(4.2 * len(lams), 7.0),
                             constrained_layout=True, squeeze=False)
    names = variants(rows)
    colors = {name: f"C{i % 10}" for i, name in enumerate(names)}
    for col, lam in enumerate(lams):
        for pt in tradeoff_points(rows, lam):
            for row, field in ((0, "mean_phase_difference"), (1, "window_violation_fraction")):
                if pt[field] is None:
                    continue
                ax = axes[row][col]
                ax.scatter(pt[field], pt["admitted"], color=colors[pt["variant"]],
                           label=_LABELS.get(pt["variant"], pt["variant"]))
        axes[0][col].set_title(f"λ = {_lam_text(lam)} s")
        axes[0][col].set_xlabel("mean phase difference (s)")
        axes[1][col].set_xlabel("window-violation fraction (Φ > A_t)")
        for row in (0, 1):
            axes[row][col].set_ylabel("strict jobs admitted (all node counts)")
            axes[row][col].grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", fontsize=8,
                   ncol=min(3, len(labels)))
    fig.suptitle("The price of being in step: admitted jobs against phase quality "
                 "(up and to the left is better)")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def format_table(rows: Sequence[Row]) -> str:
    """The results as an aligned text table (``-`` for empty values)."""
    head = ("nodes", "lam", "policy", "subm", "adm", "done", "accept", "phase_n",
            "mean_phi_s", "max_phi_s", "viol_A", "viol_E", "turn_s", "p95_turn_s", "util",
            "qos_util", "idle_v", "wall_s")
    body = [
        (r.nodes, _lam_text(r.lam), variant(r), r.submitted, r.admitted, r.completed,
         r.acceptance_ratio, r.phase_jobs, r.mean_phase_difference, r.max_phase_difference,
         r.window_violation_fraction, r.overall_violation_fraction, r.mean_turnaround,
         r.p95_turnaround, r.utilization, r.qos_utilization, r.idle_virtual_fraction,
         r.wall_seconds)
        for r in rows
    ]
    return table(head, body, digits=(0, 0, 0, 0, 0, 0, 3, 0, 1, 1, 3, 3, 0, 0, 3, 3, 3, 1),
                 align=">><" + ">" * 15)


# -- command line --------------------------------------------------------------------------


_V = TypeVar("_V")


def _list_flag(flag: str, text: str, parse: Callable[[str], _V], item: str = "value") -> list[_V]:
    """The comma-separated values of ``flag``, each parsed by ``parse``: at least one, and
    none given twice."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise UserError(f"{flag}: must name at least one {item}")
    return _unique(flag, [parse(p) for p in parts])


def _int_list(flag: str, text: str) -> list[int]:
    return _list_flag(
        flag, text, lambda p: int_flag(flag, p, 1, "an integer (expected e.g. 3,6,9,12)")
    )


def _float_list(flag: str, text: str) -> list[float]:
    return _list_flag(
        flag, text, lambda p: seconds_flag(flag, p, "a number (expected e.g. 10,500)")
    )


def _unique(flag: str, values: list[Any]) -> list[Any]:
    seen = set()
    for v in values:
        if v in seen:
            raise UserError(f"{flag}: {v} is given twice")
        seen.add(v)
    return values


def _percent(flag: str, text: str) -> float:
    """A percentage: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{flag}: {text!r} is not a percentage (expected e.g. 0,5,10)") from None
    if not math.isfinite(value) or value < 0:
        raise UserError(f"{flag}: must be a finite percentage >= 0, got {text}")
    return value


def registry_list(flag: str, text: str, registry: Any, item: str) -> list[str]:
    """The comma-separated names of ``flag``, each registered in ``registry`` (a
    :class:`global_manager.registry.Registry`): an unknown one is a one-line error with a
    did-you-mean."""
    import difflib

    known = registry.names()

    def check(name: str) -> str:
        if name not in registry:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean '{close[0]}'?" if close else "known: " + ", ".join(known)
            raise UserError(f"{flag}: unknown {item} {name!r}; {hint}")
        return name

    return _list_flag(flag, text, check, item)


def _policy_list(text: str) -> list[str]:
    from global_manager.policies import policies

    return registry_list("--policies", text, policies, "policy")


def matrix_axes(args: argparse.Namespace) -> tuple[list[int], list[float], list[str]]:
    """``--nodes``, ``--lam`` and ``--policies``: the matrix's node counts, lambdas (s)
    and policy names."""
    return (_int_list("--nodes", args.nodes), _float_list("--lam", args.lam),
            _policy_list(args.policies))


def handler(args: argparse.Namespace) -> int:
    nodes, lams, policy_names = matrix_axes(args)
    jobs = None if args.jobs is None else int_flag("--jobs", args.jobs, 1)
    seed = int_flag("--seed", args.seed, None)
    workers = worker_count(args.workers)
    cycle = seconds_flag("--cycle", args.cycle)
    log_every = int_flag("--log-every", args.log_every, 0)
    rate_per_weight = seconds_flag("--rate-per-weight", args.rate_per_weight,
                                   "a number of Mcycles/s > 0 (expected e.g. 12.5)")
    if rate_per_weight <= 0:
        raise UserError(f"--rate-per-weight: must be > 0 Mcycles/s, got {args.rate_per_weight}")
    overbooking = None if args.overbooking is None else [
        pct / 100.0 for pct in _list_flag(
            "--overbooking", args.overbooking,
            lambda p: _percent("--overbooking", p), "percentage")
    ]

    log_dir = Path(args.out) / "logs"
    out = output_dir(args.out, *([log_dir] if log_every > 0 else []))

    cells = make_cells(nodes, lams, policy_names, seed, jobs, cycle,
                       args.work_conserving, log_every, log_dir, overbooking,
                       args.calibration, rate_per_weight, args.step_every_cycle)
    rows, wall = run_with_progress(cells, run_matrix, workers, "paper", args.quiet)

    config = {
        "nodes": nodes, "lam": lams, "policies": policy_names, "seed": seed,
        "jobs": jobs if jobs is not None else "uniform 1500..3000 (generator)",
        "cell_seeds": {f"n{n}-lam{_lam_text(lam)}": cell_seed(seed, n, lam)
                       for n in nodes for lam in lams},
        "cycle_s": cycle, "work_conserving": args.work_conserving,
        "calibration": args.calibration, "rate_per_weight": rate_per_weight,
        "overbooking": overbooking, "step_every_cycle": args.step_every_cycle,
        "queue_weights": [0.3, 0.5, 0.2], "log_every": log_every,
        "workers": workers, "wall_seconds": wall,
    }
    write_csv(out / "results.csv", rows)
    write_json(out / "results.json", rows, config)
    plot_phase_difference(out / "phase_difference.png", rows, lams, policy_names)
    plot_acceptance(out / "acceptance.png", rows, lams, policy_names)
    plot_tradeoff(out / "tradeoff.png", rows, lams)
    print(format_table(rows))
    print(wrote(rows, wall, workers, out / "results.csv", out / "results.json",
                out / "phase_difference.png", out / "acceptance.png", out / "tradeoff.png",
                *([f"{log_dir}/"] if log_every > 0 else [])))
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "paper",
        help="the SQ paper's experiment: SQ vs strict admission over nodes x lambda",
        description=(
            "Simulate the SQ paper's experiment: for every node count x lambda, one generated "
            "workload (seeded from --seed, the node count and lambda) run under every policy. "
            "Writes results.csv, results.json, logs/*.jsonl, phase_difference.png, "
            "acceptance.png and tradeoff.png into --out."
        ),
    )
    parser.add_argument("--nodes", default=",".join(map(str, DEFAULT_NODES)),
                        help="comma-separated node counts (default %(default)s)")
    parser.add_argument("--lam", default=",".join(_lam_text(x) for x in DEFAULT_LAMBDAS),
                        help="comma-separated mean QoS inter-arrival times lambda, s "
                             "(default %(default)s)")
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                        help="comma-separated policy names (default %(default)s; also none, "
                             "sq_no_lend, sq_no_boost, sq_no_overbooking, sq_work_conserving, "
                             "sq_let_ahead, sq_lead)")
    parser.add_argument("--overbooking", default=None,
                        help="comma-separated overbooking percentages: every policy that "
                             "overbooks runs once per value (e.g. 0,5,10,20,30,50; default: "
                             "each policy's own, 5)")
    parser.add_argument("--calibration", choices=("expected", "literal"),
                        default=DEFAULT_CALIBRATION,
                        help="how a subtask's 1500-2500 s become work: at its expected rate "
                             "(default) or at the 1 GHz standard (the literal reading)")
    parser.add_argument("--rate-per-weight", default=str(DEFAULT_RATE_PER_WEIGHT),
                        help="u_t, Mcycles/s per weight unit (default %(default)s: a weight-4 "
                             "subtask fits the slowest node's QoS budget)")
    parser.add_argument("--jobs", default=None,
                        help="QoS jobs per run (default: uniform 1500..3000, the paper's)")
    parser.add_argument("--seed", default="0", help="random seed (default 0)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="output directory (default %(default)s)")
    parser.add_argument("--workers", default=None,
                        help="worker processes (default: the CPU count)")
    parser.add_argument("--cycle", default=str(DEFAULT_CYCLE),
                        help="local scheduling cycle q, s (default %(default)s)")
    parser.add_argument("--work-conserving", action="store_true",
                        help="pass unused queue shares on between the three queues "
                             "(default off, the paper's mode)")
    parser.add_argument("--log-every", default=str(DEFAULT_LOG_EVERY),
                        help="log a job's phase every K control periods, and whenever a "
                             "window fires (default %(default)s; 0 = no phase logs)")
    parser.add_argument("--step-every-cycle", action="store_true",
                        help="the simulator's reference mode: every node and the controller "
                             "through their public per-cycle path, as the live runtime drives "
                             "them (the same results.csv, slower)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=handler)
