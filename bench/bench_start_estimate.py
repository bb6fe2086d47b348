"""Start estimates (``global_manager/start_estimate.py``): one walk over a large pending
queue against one flow placement cycle (``global_manager/flow_placement.place_pending``)
of the same queue on the same nodes, measured in the same run.

The queue: ``--jobs`` (500) pending gangs of 1 to 12 subtasks (25 to 150 Mcycles/s each,
runs of 50 to 3000 s) on ``--nodes`` (50) nodes of 150 to 300 Mcycles/s of budget, every
node already full of running subtasks that end within 5000 s; with ``--labels`` one node
in five carries ``gpu`` and 30 % of the jobs ask for it on one subtask. Seeded; figures
are medians of ``--rounds`` (3). The ratio is the figure to read (the machine may be
shared). The walk runs when ``coalloc queue`` or ``status`` asks after a change, not in
the placement cycle; the ratio says what one query costs against one cycle.

Usage: ``python3 bench/bench_start_estimate.py [--jobs N] [--nodes N] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from functools import partial

from global_manager.flow_placement import FlowPlacementRequest, NodeState, place_pending
from global_manager.pending_job import PendingJob
from global_manager.start_estimate import (
    Booking,
    EstimateNode,
    StartEstimateRequest,
    estimate_starts,
)

GPU = frozenset({"gpu"})


def build(jobs: int, nodes: int, labels: bool, seed: int = 1
          ) -> tuple[StartEstimateRequest, FlowPlacementRequest]:
    rng = random.Random(seed)
    ns = tuple(EstimateNode(f"n{i}", rng.choice([150.0, 225.0, 300.0]),
                            GPU if labels and i % 5 == 0 else frozenset())
               for i in range(nodes))
    running = []
    held = {}
    for n in ns:
        h = 0.0
        while True:
            r = rng.choice([25.0, 50.0, 75.0])
            if h + r > n.budget:
                break
            h += r
            running.append(Booking(n.name, r, rng.uniform(0.0, 5000.0)))
        held[n.name] = h
    queue = []
    for k in range(jobs):
        gpu = labels and rng.random() < 0.3
        rates = tuple(rng.choice([25.0, 50.0, 100.0, 150.0])
                      for _ in range(rng.randint(1, 12)))
        labs = tuple(GPU if gpu and i == 0 else frozenset() for i in range(len(rates)))
        run = rng.uniform(50.0, 3000.0)
        queue.append(PendingJob(f"j{k}", f"u{k % 3}", tuple(r * run for r in rates), rates,
                                rates, labs, True, 0, -float(k)))
    est = StartEstimateRequest(0.0, ns, tuple(running), tuple(queue))
    flow = FlowPlacementRequest(
        0.0, tuple(queue),
        tuple(NodeState(n.name, 2 * n.budget, n.budget - held[n.name], n.labels,
                        held[n.name]) for n in ns),
    )
    return est, flow


def median_seconds(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"{args.jobs} pending jobs on {args.nodes} nodes, median of {args.rounds}")
    for labels in (False, True):
        est, flow = build(args.jobs, args.nodes, labels)
        walk = median_seconds(partial(estimate_starts, est), args.rounds)
        cycle = median_seconds(partial(place_pending, flow), args.rounds)
        starts = estimate_starts(est).starts
        none = sum(s is None for s in starts.values())
        print(f"  {'labels' if labels else 'no labels':9}  walk {1000 * walk:8.1f} ms  "
              f"flow cycle {1000 * cycle:8.1f} ms  ratio {walk / cycle:6.2f}  "
              f"(not estimable: {none})")


if __name__ == "__main__":
    main()
