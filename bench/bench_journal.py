"""What recording one change costs the global manager (target: <= 2 ms at 10,000 jobs).

For each job count (default 1,000 and 10,000) a live :class:`runtime.global_service.
GlobalService` is filled as a day of use leaves it: every job but the last batch's
finished, the last batch running or pending, on 64 emulated nodes. The table is written
once into a fresh journal, which a new service recovers from (a restarted global
manager). Then ``--changes`` changes are made through the service's own calls, in turn: a
submission of one job (with the placement cycle it runs), a subtask that finishes, a
cancellation; every journal write they make is timed. This is done twice, on services
recovered from the same journal:

* **new (NORMAL)**: the journal as the global manager runs it (:mod:`runtime.journal`:
  sqlite in WAL mode, ``synchronous=NORMAL``, one transaction per write holding the
  changed jobs and the core's counters; a commit survives the process's crash, the log is
  fsync-ed at its checkpoints, which the actor's monitor loop makes every second on its
  own thread: here every :data:`CHANGES_PER_CHECKPOINT` changes, untimed, their time
  printed apart);
* **new (FULL)**: the same with ``synchronous=FULL``, every commit fsync-ed (what
  surviving a power loss would cost; shown for the choice, docs/decisions.md);
* **old rewrite** (the reference, measured in the same run on the final state,
  ``--reference-writes`` times): the whole-file rewrite the journal replaced (the whole
  job table and the core's snapshot as one JSON document, written atomically: temporary
  file, fsync, rename, directory fsync). It is not interleaved with the new writes: the
  file system would charge its freed blocks to the next fsync of the journal.

Printed per job count and journal: the writes timed, their wall-clock mean, median, p95
and max in ms, their mean CPU ms (this process's), the ratio of the old rewrite's mean
wall time to this mean, the file's size in MB (the journal with its WAL), the target's
verdict (met when the median wall time, what a change typically waits, and the mean CPU
time, the work a change costs, are both within it: on a shared machine the wall mean is
the other processes' as much as ours, its tail is shown by p95 and max), then the jobs'
states, the recovery time and the background checkpoints' time. Files live in one
temporary directory on one file system. The machine may be shared: times are noisy
(fsyncs most of all), the ratio less so. This is a benchmark, not a test: it asserts
nothing.

Usage: ``python3 bench/bench_journal.py [--jobs 1000,10000] [--changes 300]
[--reference-writes 5]``.
"""

from __future__ import annotations

import argparse
import logging
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
from runtime.journal import Sync
from runtime.timebase import ModelClock, TimeBase
from workloads.atomic import atomic_write_json
from workloads.messages import SubtaskOutcome, SubtaskPhase
from workloads.model import JobSpec, Node, QosClass, SubtaskSpec

#: The target: ms per change at 10,000 jobs.
TARGET_MS = 2.0
NODES = [Node(f"n{i:02d}", 1000.0) for i in range(64)]
BATCH = 500
#: Changes between two checkpoints of the journal's log (the actor checkpoints every
#: second: 10 changes a second is a busy scheduler).
CHANGES_PER_CHECKPOINT = 10


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
    """The reference: the whole table rewritten as one JSON file on every change."""
    atomic_write_json(path, {
        "version": 2,
        "core": svc.core.snapshot(),
        "jobs": [info.to_record() for info in svc.jobs.values()],
        "tokens": {k: a.to_record() for k, a in svc.tokens.items()},
        "lost": svc.lost,
        "counters": svc.counters,
    })


def finish(svc: GlobalService, job_id: str, index: int, at: float) -> None:
    info = svc.jobs[job_id]
    node = next(s.node for s in info.subtasks if s.index == index)
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
                        finish(svc, job_id, s.index, manual.now())
            manual.set(manual.now() + 10.0)
            svc.place_pending()


class FullSyncService(GlobalService):
    """The service with every journal commit fsync-ed (:attr:`Sync.FULL`)."""

    journal_sync = Sync.FULL


def changes_timed(
    svc: GlobalService, manual: ManualClock, changes: int, k: int, checkpoints: list[float],
    cpu: list[float],
) -> list[float]:
    """Make ``changes`` changes (a submission, a finished subtask, a cancellation, in
    turn; new jobs numbered from ``k``); the ms of every journal write they made (their
    CPU ms go to ``cpu``). Every :data:`CHANGES_PER_CHECKPOINT` changes the journal's log
    is checkpointed, as the actor's monitor loop does every second, untimed (its ms go
    to ``checkpoints``)."""
    out: list[float] = []
    real_persist: Callable[[], None] = svc._persist  # noqa: SLF001 - what is measured

    def timed_persist() -> None:
        t, c = time.perf_counter(), time.process_time()
        real_persist()
        out.append(1000 * (time.perf_counter() - t))
        cpu.append(1000 * (time.process_time() - c))

    svc._persist = timed_persist  # type: ignore[method-assign]  # noqa: SLF001
    for c in range(changes):
        if c % CHANGES_PER_CHECKPOINT == 0:  # the actor's monitor loop, untimed
            t = time.perf_counter()
            svc.checkpoint_journal()
            checkpoints.append(1000 * (time.perf_counter() - t))
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
                index = next(s.index for s in info.open_subtasks())
                finish(svc, running, index, manual.now())
        else:
            live = [j for j, i in svc.jobs.items() if not i.state.final]
            if live:
                svc.cancel_many([live[len(live) // 2]])
    return out


def stats(ms: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(ms), "median": statistics.median(ms),
            "p95": statistics.quantiles(ms, n=20, method="inclusive")[-1], "max": max(ms),
            "n": len(ms)}


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
    svc._write_all()  # noqa: SLF001
    svc.close()
    out: dict[str, Any] = {}
    # Reopened as a restarted global manager would (the journal measured is one it
    # reads), once per durability.
    for name, kind in (("normal", GlobalService), ("full", FullSyncService)):
        t = time.perf_counter()
        svc = kind(NODES, config, clock, NoActors(), path)
        out[f"recovery_{name}_s"] = time.perf_counter() - t
        assert svc.recovered and len(svc.jobs) >= jobs
        checkpoints: list[float] = []
        cpu: list[float] = []
        out[name] = stats(changes_timed(svc, manual, changes, 10 * jobs + len(out),
                                        checkpoints, cpu))
        out[name]["cpu"] = statistics.fmean(cpu)
        out[f"checkpoint_{name}"] = stats(checkpoints)
        if name == "full":
            break
        svc.close()
    # The reference, on the same final state (not interleaved: its fsyncs of a whole
    # file would be charged to the next journal commit by the file system's own journal).
    old_ms, old_cpu = [], []
    for _ in range(reference_writes):
        t, c = time.perf_counter(), time.process_time()
        old_rewrite(svc, old_path)
        old_ms.append(1000 * (time.perf_counter() - t))
        old_cpu.append(1000 * (time.process_time() - c))
    states: dict[str, int] = {}
    for info in svc.jobs.values():
        states[info.state.value] = states.get(info.state.value, 0) + 1
    svc.close()
    return dict(
        out, jobs=len(svc.jobs), states=states,
        old=dict(stats(old_ms), cpu=statistics.fmean(old_cpu)),
        new_bytes=sum(p.stat().st_size for p in workdir.glob(f"gm-{jobs}.sqlite*")),
        old_bytes=old_path.stat().st_size,
    )


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
    logging.getLogger("coalloc.runtime").setLevel(logging.ERROR)  # "recovered ..." lines
    print(f"{'jobs':>6} {'journal':>14} {'writes':>6} {'ms mean/median/p95/max':>26} "
          f"{'CPU ms':>8} {'old/this':>8} {'MB':>6}  target: median and CPU mean "
          f"<= {TARGET_MS:g} ms")
    with tempfile.TemporaryDirectory(prefix="bench-journal-") as d:
        for n in counts:
            r = measure(n, args.changes, Path(d), args.reference_writes)
            old = r["old"]["mean"]
            for key, label, size in (("normal", "new (NORMAL)", r["new_bytes"]),
                                     ("full", "new (FULL)", r["new_bytes"]),
                                     ("old", "old rewrite", r["old_bytes"])):
                x = r[key]
                figures = "/".join(f"{x[k]:.3f}" for k in ("mean", "median", "p95"))
                figures += f"/{x['max']:.1f}"
                verdict = "" if key == "old" else \
                    "met" if max(x["median"], x["cpu"]) <= TARGET_MS else "NOT MET"
                print(f"{r['jobs']:>6} {label:>14} {x['n']:>6} {figures:>26} "
                      f"{x['cpu']:>8.3f} {old / x['mean']:>8.1f} {size / 1e6:>6.2f}  {verdict}",
                      flush=True)
            ck = r["checkpoint_normal"]
            print(f"{'':>6} jobs: {', '.join(f'{k} {v}' for k, v in sorted(r['states'].items()))}; "
                  f"recovery {r['recovery_normal_s']:.2f} s; background checkpoints (NORMAL) "
                  f"{ck['n']}, ms mean {ck['mean']:.2f}, max {ck['max']:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
