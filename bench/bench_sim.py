"""The SQ simulator: subtask-cycles per second, fast forward against the naive stepper,
and the wall time of the paper's full matrix.

1. Subtask-cycles per second on one workload (the paper's generator, ``--rate-nodes``
   nodes (12), lambda ``--rate-lam`` s (100), ``--rate-jobs`` QoS jobs (400), the paper's
   mode: queues not work-conserving, 30 s cycle), per policy (sq, strict) run twice in
   this process: "node replay" (each local scheduler replays a cycle in which nothing
   changed; ``SimConfig(fast_forward=False)``), "+fast forward" (also the simulator's
   whole-grid fast forward: the default configuration), and the naive stepper that
   computes every split from scratch, the reference. ``LocalScheduler.step`` and ``fast_forward``
   are wrapped to count: a step of a node with ``k`` subtasks is ``k`` subtask-cycles,
   stepped and effective; a fast forward of ``m`` cycles is ``k`` stepped and ``k * m``
   effective subtask-cycles. Rates are counts over the run's wall time (workload
   generation excluded); the ratio is the effective rate of fast forward over the naive
   one (the same simulated cycles, so it is also the ratio of wall times).
2. The wall time of the paper's default matrix (nodes 3, 6, 9, 12 x lambda 10, 100,
   200, 500 s x policies sq, strict, the paper's job counts: uniform 1500..3000 QoS jobs
   per cell) through ``coalloc experiment paper``'s runner
   (:func:`coalloc.experiments.paper.run_matrix`) with one worker per CPU, phase logs
   written (every 10th period and every firing, as the experiment does) to a temporary
   directory. Reference: the sum of the runs' own wall times (what one worker would take)
   and the issue's 2-minute target.

Usage: ``python3 bench/bench_sim.py [--quick]`` (``--quick``: a smaller rate workload
and the matrix with 200 jobs per cell at nodes 3, 6 and lambda 10, 500 s). The full run
takes as long as the matrix does; run it in the background.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from coalloc.experiments import paper
from global_manager.simulator import RunResult, SimConfig, simulate
from local_manager.scheduler import CycleResult, LocalScheduler
from workloads.generator import PaperWorkloadParams, generate

TARGET_SECONDS = 120.0  # issue 3, section 8: the full matrix in under 2 minutes


@dataclass(slots=True)
class Counts:
    """Subtask-cycles booked by the local schedulers: ``stepped`` (one per subtask per
    call) and ``effective`` (one per subtask per simulated cycle); ``calls`` of step and
    of fast forward."""

    stepped: int = 0
    effective: int = 0
    step_calls: int = 0
    ff_calls: int = 0


@contextmanager
def counting(replay: bool = True) -> Iterator[Counts]:
    """Wrap ``LocalScheduler.step`` and ``fast_forward`` (class attributes, this process
    only) to count subtask-cycles; restore them on exit. ``replay=False`` drops each
    scheduler's cached split before every step, so every cycle computes the split from
    scratch: the naive stepper."""
    counts = Counts()
    step, fast_forward = LocalScheduler.step, LocalScheduler.fast_forward

    def counted_step(self: LocalScheduler, real_time: float, cycle: float) -> CycleResult:
        if not replay:
            self._last = None
        res = step(self, real_time, cycle)
        k = len(res.grants)
        counts.stepped += k
        counts.effective += k
        counts.step_calls += 1
        return res

    def counted_ff(self: LocalScheduler, cycles: int, cycle: float,
                   real_time: float) -> CycleResult:
        res = fast_forward(self, cycles, cycle, real_time)
        k = len(res.grants)
        counts.stepped += k
        counts.effective += k * cycles
        counts.ff_calls += 1
        return res

    LocalScheduler.step = counted_step  # type: ignore[method-assign]
    LocalScheduler.fast_forward = counted_ff  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        LocalScheduler.step = step  # type: ignore[method-assign]
        LocalScheduler.fast_forward = fast_forward  # type: ignore[method-assign]


def timed_run(nodes: int, lam: float, jobs: int, policy: str, seed: int,
              fast_forward: bool, replay: bool = True) -> tuple[Counts, float, RunResult]:
    workload = generate(PaperWorkloadParams(nodes=nodes, mean_interarrival=lam, jobs=jobs),
                        seed)
    config = SimConfig(work_conserving=False, fast_forward=fast_forward)
    with counting(replay) as counts:
        start = time.perf_counter()
        result = simulate(workload, policy, seed=seed, config=config)
        wall = time.perf_counter() - start
    return counts, wall, result


def _same_outcome(a: RunResult, b: RunResult) -> bool:
    """The same admissions, completions and (to 1e-6 relative) phase statistics."""
    if len(a.jobs) != len(b.jobs):
        return False
    for x, y in zip(a.jobs, b.jobs):
        if (x.job_id, x.admitted, x.completed) != (y.job_id, y.admitted, y.completed):
            return False
        for u, v in ((x.mean_phase_difference, y.mean_phase_difference),
                     (x.turnaround, y.turnaround)):
            if (u is None) != (v is None) or (
                    u is not None and v is not None and abs(u - v) > 1e-6 * max(1.0, abs(v))):
                return False
    return True


def bench_rate(args: argparse.Namespace) -> None:
    print(f"1. subtask-cycles per second: {args.rate_nodes} nodes, lambda {args.rate_lam:g} s, "
          f"{args.rate_jobs} QoS jobs, seed {args.seed}, queues not work-conserving")
    print(f"{'policy':<8} {'variant':<14} {'wall_s':>8} {'cycles':>8} {'step_calls':>10} "
          f"{'ff_calls':>9} {'stepped':>11} {'effective':>11} {'stepped/s':>11} "
          f"{'effective/s':>12}")
    checks = []
    for policy in args.rate_policy.split(","):
        runs = {}
        variants = (("node replay", False, True), ("+fast forward", True, True),
                    ("naive stepper", False, False))
        for label, ff, replay in variants:
            runs[label] = timed_run(args.rate_nodes, args.rate_lam, args.rate_jobs,
                                    policy, args.seed, ff, replay)
            c, wall, res = runs[label]
            print(f"{policy:<8} {label:<14} {wall:>8.2f} {res.cycles:>8} {c.step_calls:>10} "
                  f"{c.ff_calls:>9} {c.stepped:>11} {c.effective:>11} "
                  f"{c.stepped / wall:>11.0f} {c.effective / wall:>12.0f}")
        cn, wn, rn = runs["naive stepper"]
        for label in ("node replay", "+fast forward"):
            cf, wf, rf = runs[label]
            checks.append(
                f"{policy}: {label} / naive (effective subtask-cycles per second) "
                f"{(cf.effective / wf) / (cn.effective / wn):.2f}x (wall {wn:.2f} s / "
                f"{wf:.2f} s); same simulated cycles: {rf.cycles == rn.cycles}, same job "
                f"outcomes: {_same_outcome(rf, rn)}")
    for line in checks:
        print(line)


def bench_matrix(args: argparse.Namespace) -> None:
    nodes: tuple[int, ...]
    lams: tuple[float, ...]
    jobs: int | None
    if args.quick:
        nodes, lams, jobs = (3, 6), (10.0, 500.0), 200
    else:
        nodes, lams, jobs = paper.DEFAULT_NODES, paper.DEFAULT_LAMBDAS, None
    policies = paper.DEFAULT_POLICIES
    workers = args.workers or os.cpu_count() or 1
    print()
    print(f"2. paper matrix: nodes {','.join(map(str, nodes))} x lambda "
          f"{','.join(f'{x:g}' for x in lams)} s x {','.join(policies)}, jobs "
          f"{jobs if jobs is not None else 'uniform 1500..3000'}, {workers} worker(s), "
          f"seed {args.seed}")
    with tempfile.TemporaryDirectory(prefix="bench_sim-") as tmp:
        cells = paper.make_cells(nodes, lams, policies, args.seed, jobs,
                                 log_dir=Path(tmp))
        done = 0

        def tick(row: paper.Row) -> None:
            nonlocal done
            done += 1
            print(f"  [{done}/{len(cells)}] n{row.nodes} lam{row.lam:g} {row.policy}: "
                  f"{row.wall_seconds:.1f} s", file=sys.stderr, flush=True)

        start = time.perf_counter()
        rows = paper.run_matrix(cells, workers, progress=tick)
        wall = time.perf_counter() - start
        log_bytes = sum(p.stat().st_size for p in Path(tmp).iterdir())
    serial = sum(r.wall_seconds for r in rows)
    print(f"{'runs':>5} {'wall_s':>9} {'sum_run_s':>10} {'speedup':>8} {'target_s':>9} "
          f"{'wall/target':>11} {'log_MB':>8}")
    print(f"{len(rows):>5} {wall:>9.1f} {serial:>10.1f} {serial / wall:>7.2f}x "
          f"{TARGET_SECONDS:>9.0f} {wall / TARGET_SECONDS:>10.2f}x {log_bytes / 1e6:>8.1f}")
    print("slowest runs:")
    for r in sorted(rows, key=lambda r: -r.wall_seconds)[:6]:
        print(f"  n{r.nodes:<3} lam {r.lam:>5g} {r.policy:<7} {r.wall_seconds:>8.1f} s "
              f"({r.cycles} cycles, {r.submitted} strict jobs)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small rate workload; reduced matrix (nodes 3,6 x lambda "
                             "10,500 x 200 jobs)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rate-nodes", type=int, default=None,
                        help="nodes of the rate workload (default 12; --quick 3)")
    parser.add_argument("--rate-lam", type=float, default=100.0,
                        help="lambda of the rate workload, s (default %(default)s)")
    parser.add_argument("--rate-jobs", type=int, default=None,
                        help="QoS jobs of the rate workload (default 400; --quick 40)")
    parser.add_argument("--rate-policy", default="sq,strict",
                        help="comma-separated policies (default %(default)s)")
    parser.add_argument("--workers", type=int, default=None,
                        help="matrix workers (default: the CPU count)")
    parser.add_argument("--skip-matrix", action="store_true", help="only part 1")
    args = parser.parse_args(argv)
    if args.rate_nodes is None:
        args.rate_nodes = 3 if args.quick else 12
    if args.rate_jobs is None:
        args.rate_jobs = 40 if args.quick else 400
    print(f"bench_sim: python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)")
    bench_rate(args)
    if not args.skip_matrix:
        bench_matrix(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
