"""What recording one change costs the global manager (issue 15 §1: <= 2 ms at 10,000 jobs).

For each job count (default 1,000 and 10,000) a live :class:`runtime.global_service.
GlobalService` is filled as a day of use leaves it: every job but the last batch's
finished, the last batch running or pending, on 64 emulated nodes. The table is written
once into a fresh journal, which a new service recovers from (a restarted global
manager). Then ``--changes`` changes are made through the service's own calls, in turn: a
submission of one job (with the placement cycle it runs), a subtask that finishes, a
cancellation; every journal write they make is timed.

* **new**: the journal (:mod:`runtime.journal`: sqlite in WAL mode, ``synchronous=FULL``,
  one transaction per write holding the changed jobs and the core's counters; its
  checkpoints, every ~4 MB of log, fall on the writes that trigger them);
* **old** (the reference, measured in the same run, on the same final state,
  ``--reference-writes`` times): the whole-file rewrite the journal replaced (the whole
  job table and the core's snapshot as one JSON document, written atomically: temporary
  file, fsync, rename, directory fsync). It is not interleaved with the new writes: the
  file system would charge its freed blocks to the next fsync of the journal.

Printed per job count: the new journal's mean, median, p95 and max ms per write, the old
rewrite's mean, the ratio old / new of the means, both files' sizes (the journal with its
WAL), the target's verdict (the mean, checkpoints included) and the jobs' states. Both
files live in one temporary directory on the same file system. The machine may be
shared: times are noisy, the ratio less so. This is a benchmark, not a test: it asserts
nothing.

Usage: ``python3 bench/bench_journal.py [--jobs 1000,10000] [--changes 300]
[--reference-writes 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clocks.base import ManualClock
from runtime.config import RuntimeConfig, runtime_core
from runtime.global_service import GlobalService
from runtime.timebase import ModelClock, TimeBase
from workloads.atomic import atomic_write_json
from workloads.messages import SubtaskOutcome, SubtaskPhase
from workloads.model import JobSpec, Node, QosClass, SubtaskSpec

#: The target: ms per change at 10,000 jobs.
TARGET_MS = 2.0
NODES = [Node(f"n{i:02d}", 1000.0) for i in range(64)]
BATCH = 500


class NoActors:
    """Dispatch that reaches nobody (every call succeeds)."""

    def register(self, reg: Any) -> None:
        pass

    def place(self, node: str, subtasks: list[Any], start: float) -> None:
        pass

    def cancel(self, job_id: str, nodes: Any, reason: str = "") -> list[str]:
        return []


def spec(k: int) -> JobSpec:
    return JobSpec(
        name=f"job-{k}", qos=QosClass.STRICT,
        subtasks=tuple(SubtaskSpec(60_000.0, 1.0 + (k + i) % 3) for i in range(4)),
        overall_deviation=300.0, asynchrony=120.0, user=f"user{k % 7}",
    )


def old_rewrite(svc: GlobalService, path: Path) -> None:
    """The journal write this replaced (main 158eca8 ``GlobalService._persist``)."""
    atomic_write_json(path, {
        "version": 2,
        "core": svc.core.snapshot(),
        "jobs": [info.to_record() for info in svc.jobs.values()],
        "tokens": svc.tokens,
        "lost": svc.lost,
        "counters": svc.counters,
    })


def finish(svc: GlobalService, job_id: str, index: int, at: float) -> None:
    info = svc.jobs[job_id]
    node = next(s["node"] for s in info.subtasks if s["index"] == index)
    svc.subtask_ended(SubtaskOutcome(info.run_id, index, node, SubtaskPhase.FINISHED, at,
                                     None, ""))


def fill(svc: GlobalService, manual: ManualClock, jobs: int) -> None:
    """Submit ``jobs`` jobs in batches; run every job of all but the last batch to
    completion (finishing the running ones, placing the pending ones)."""
    k = 0
    while k < jobs:
        n = min(BATCH, jobs - k)
        svc.submit([spec(k + i) for i in range(n)], token=f"fill-{k}")
        k += n
        manual.set(manual.now() + 10.0)
        while k < jobs and (svc.core.pending or any(
                i.state.value == "running" for i in svc.jobs.values())):
            for job_id, info in list(svc.jobs.items()):
                if info.state.value == "running":
                    for s in info.subtasks:
                        finish(svc, job_id, s["index"], manual.now())
            manual.set(manual.now() + 10.0)
            svc.place_pending()


def measure(
    jobs: int, changes: int, workdir: Path, reference_writes: int = 5
) -> dict[str, Any]:
    config = RuntimeConfig(runtime_core(cycle=10.0), start_margin_s=0.0)
    manual = ManualClock(0.0)
    clock = ModelClock(manual, TimeBase(0.0, 1.0))
    path = workdir / f"gm-{jobs}.sqlite"
    old_path = workdir / f"gm-{jobs}.json"
    # Filled without a journal (fast), then written whole once into a fresh journal.
    svc = GlobalService(NODES, config, clock, NoActors(), None)
    fill(svc, manual, jobs)
    svc.journal = path
    svc._open_journal(path)  # noqa: SLF001 - a benchmark of the internals
    for job_id in svc.jobs:
        svc._mark(job_id)  # noqa: SLF001
    svc._dirty_tokens.update(svc.tokens)  # noqa: SLF001
    svc._persist()  # noqa: SLF001

    svc.close()
    # Reopened as a restarted global manager would: the journal measured is one it reads.
    svc = GlobalService(NODES, config, clock, NoActors(), path)
    assert svc.recovered and len(svc.jobs) >= jobs

    new_ms: list[float] = []
    real_persist: Callable[[], None] = svc._persist  # noqa: SLF001

    def timed_persist() -> None:
        t = time.perf_counter()
        real_persist()
        new_ms.append(1000 * (time.perf_counter() - t))

    svc._persist = timed_persist  # type: ignore[method-assign]  # noqa: SLF001
    k = jobs
    for c in range(changes):
        manual.set(manual.now() + 1.0)
        kind = c % 3
        if kind == 0:
            svc.submit([spec(k)])
            k += 1
        elif kind == 1:
            running = next((j for j, i in svc.jobs.items() if i.state.value == "running"
                            and len(i.outcomes) < len(i.subtasks)), None)
            if running is not None:
                info = svc.jobs[running]
                index = next(s["index"] for s in info.subtasks if s["index"] not in info.outcomes)
                finish(svc, running, index, manual.now())
        else:
            live = [j for j, i in svc.jobs.items() if not i.state.final]
            if live:
                svc.cancel_many([live[len(live) // 2]])
    # The reference, on the same final state (not interleaved: its fsyncs of a whole
    # file would be charged to the next journal commit by the file system's own journal).
    old_ms = []
    for _ in range(reference_writes):
        t = time.perf_counter()
        old_rewrite(svc, old_path)
        old_ms.append(1000 * (time.perf_counter() - t))
    states: dict[str, int] = {}
    for info in svc.jobs.values():
        states[info.state.value] = states.get(info.state.value, 0) + 1
    svc.close()
    return {
        "jobs": len(svc.jobs), "states": states, "writes": len(new_ms),
        "new_mean": statistics.fmean(new_ms), "new_median": statistics.median(new_ms),
        "new_p95": statistics.quantiles(new_ms, n=20)[-1], "new_max": max(new_ms),
        "old_mean": statistics.fmean(old_ms), "old_median": statistics.median(old_ms),
        "new_bytes": sum(p.stat().st_size for p in workdir.glob(f"gm-{jobs}.sqlite*")),
        "old_bytes": old_path.stat().st_size,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", default="1000,10000",
                        help="job counts, comma-separated (default 1000,10000)")
    parser.add_argument("--changes", type=int, default=300,
                        help="changes timed per job count (default 300)")
    parser.add_argument("--reference-writes", type=int, default=5,
                        help="whole-file rewrites timed per job count (default 5)")
    args = parser.parse_args(argv)
    try:
        counts = [int(x) for x in args.jobs.split(",") if x.strip()]
    except ValueError:
        print(f"--jobs: {args.jobs!r} is not a comma-separated list of integers",
              file=sys.stderr)
        return 2
    if not counts or min(counts) < 1 or args.changes < 20 or args.reference_writes < 1:
        print("--jobs: counts must be >= 1; --changes: must be >= 20; --reference-writes: "
              "must be >= 1", file=sys.stderr)
        return 2
    print(f"{'jobs':>6} {'writes':>6} {'new ms mean/median/p95/max':>28} "
          f"{'old ms mean':>11} {'old/new':>8} {'new MB':>7} {'old MB':>7}  "
          f"target: new mean <= {TARGET_MS:g} ms")
    with tempfile.TemporaryDirectory(prefix="bench-journal-") as d:
        for n in counts:
            r = measure(n, args.changes, Path(d), args.reference_writes)
            met = "met" if r["new_mean"] <= TARGET_MS else "NOT MET"
            new = "/".join(f"{r[k]:.3f}" for k in ("new_mean", "new_median", "new_p95"))
            print(f"{r['jobs']:>6} {r['writes']:>6} {new + '/' + format(r['new_max'], '.1f'):>28} "
                  f"{r['old_mean']:>11.2f} {r['old_mean'] / r['new_mean']:>8.1f} "
                  f"{r['new_bytes'] / 1e6:>7.2f} {r['old_bytes'] / 1e6:>7.2f}  {met}"
                  f"  ({', '.join(f'{k} {v}' for k, v in sorted(r['states'].items()))})",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
