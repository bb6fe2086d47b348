"""Placement cycle time at scale: one queue cycle of every placement policy over 500
pending strict jobs on 50 nodes (target: <= 10 ms per cycle, so that a cycle every
second costs the global manager at most 1 % of a core), against
``least_loaded``'s cycle (the first-fit reference) measured in the same run.

The grid: 50 nodes of 300..3000 MHz (QoS share 0.5), each carrying running strict
subtasks that fill part of its budget and end within the next 0..20,000 s. The
queue: 500 strict jobs of 1..8 subtasks (rates 5..60 Mcycles/s, run times 1,500..2,500 s),
three users, arrivals over the last 20,000 s. Figures are medians of ``--rounds``
cycles (each on the same request), on a busy grid (85..100 % committed: a cycle places
some 40 of the 500) and a half-free one (50..100 %: more placements, each re-ranking the
nodes); the target is checked on the busy grid. The machine may be shared, so the ratio
is the figure to read. Usage: ``python3 bench/bench_placer.py [--jobs N] [--nodes N] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from global_manager.cycle import CycleRequest, GridNode, RunningSubtask
from global_manager.pending_job import PendingJob
from global_manager.placer import placement_policies

TARGET_MS = 10.0
NOW = 20_000.0


def make_request(jobs: int, nodes: int, seed: int = 0, low: float = 0.85) -> CycleRequest:
    rng = random.Random(seed)
    grid: list[GridNode] = []
    running: list[RunningSubtask] = []
    held: dict[str, float] = {}
    for k in range(nodes):
        speed = rng.uniform(300.0, 3000.0)
        budget = 0.5 * speed
        committed = 0.0
        fill = rng.uniform(low, 1.0) * budget
        while committed < fill - 1e-6:
            rate = min(rng.uniform(5.0, 60.0), fill - committed)
            committed += rate
            running.append(RunningSubtask(f"n{k:02d}", rate, NOW + rng.uniform(0.0, 20_000.0)))
            user = f"u{rng.randrange(3)}"
            held[user] = held.get(user, 0.0) + rate
        grid.append(GridNode(f"n{k:02d}", speed, budget, committed, committed))
    queue = []
    for j in range(jobs):
        n = rng.randint(1, 8)
        rates = tuple(rng.uniform(5.0, 60.0) for _ in range(n))
        run = rng.uniform(1500.0, 2500.0)
        queue.append(PendingJob(
            f"j{j:04d}", f"u{rng.randrange(3)}", tuple(r * run for r in rates), rates, rates,
            tuple(frozenset() for _ in rates), True, 0, NOW - 20_000.0 * (jobs - j) / jobs,
        ))
    return CycleRequest(NOW, tuple(queue), tuple(grid), 0.5, queue=True, held=held,
                        running=tuple(running))


def cycle_ms(name: str, req: CycleRequest, rounds: int) -> tuple[float, int]:
    policy = placement_policies.create(name)
    times = []
    placed = 0
    for _ in range(rounds):
        t = time.perf_counter()
        reply = policy.schedule(req, random.Random(0))
        times.append(1000.0 * (time.perf_counter() - t))
        placed = len(reply.placed)
    return statistics.median(times), placed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    ok = True
    for low, what in ((0.85, "busy grid"), (0.5, "half-free grid")):
        req = make_request(args.jobs, args.nodes, low=low)
        cycle_ms("least_loaded", req, 1)  # warm up
        ref, _ = cycle_ms("least_loaded", req, args.rounds)
        print(f"{what}: {args.jobs} pending jobs, {args.nodes} nodes, "
              f"{len(req.running)} running subtasks, budgets {low:.0%}..100 % committed")
        print(f"{'placement':14} {'ms/cycle':>9} {'x least_loaded':>15} {'placed':>7}  target")
        for name in placement_policies.names():
            ms, placed = cycle_ms(name, req, args.rounds)
            meets = ms <= TARGET_MS
            ok &= meets or name != "backfill" or low < 0.85
            print(f"{name:14} {ms:9.2f} {ms / ref:15.2f} {placed:7d}  "
                  f"{'<=' if meets else '>'} {TARGET_MS:g} ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
