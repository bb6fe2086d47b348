"""Benchmark: the global manager and the controller past one machine.

Drives the live runtime's real services in one process, without Ray or sockets: a
:class:`runtime.global_service.GlobalService` (admission, pending queue, placement, job
table, journal) and a :class:`runtime.controller_service.ControllerService` (report
checks, pace control, phase log), wired as the actors wire them (an admitted job is
registered with the controller; placements reach emulated nodes, which only count them).
The grid: ``N`` nodes, each exactly full with ``S`` running strict subtasks (4 to a job),
and ``P`` more jobs waiting in the pending queue. Then, on a manual clock:

* **report ingest**: one progress report per running subtask (what the nodes send every
  cycle) through ``ControllerService.ingest``; every report must be applied
  (``dropped`` counts those that were not);
* **control period**: ``ControllerService.control`` over every running gang (target
  <= 100 ms), the median, and apart the first period, where every gang joins and the
  tracked jobs' metrics are exported (then once per 5 real s);
* **placement cycle**: a running job finishes (its four subtasks end), then
  ``GlobalService.place_pending`` over the whole pending queue (target <= 100 ms);
* **journal write per change**: every write of the global manager's sqlite journal
  (``GlobalService._persist``) the placement cycles' changes made (a subtask that
  ends, a cycle that places), and the journal's size.

Each figure is the median of ``--repeats`` measurements, wall-clock and CPU (this
process's: on a shared machine the wall time is the other work's as much as ours), with
its target and, as the reference measured in the same run, the same figure at a tenth of
the scale (so the ratio of the CPU medians shows how it grows). A benchmark, not a test:
it asserts nothing.

Run: ``python3 bench/bench_scale.py`` (1,000 nodes, 10,000 running subtasks, 10,000
pending jobs; under a minute on two cores) or ``--small`` (100 / 1,000 / 1,000).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clocks.base import ManualClock
from runtime.config import RuntimeConfig
from runtime.controller_service import ControllerService
from runtime.global_service import GlobalService
from runtime.timebase import ModelClock, TimeBase
from workloads.messages import JobRegistration, ProgressReport, SubtaskOutcome, SubtaskPhase
from workloads.model import Node, Subtask
from workloads.spec import parse_document

TARGET_CONTROL_S = 0.100
TARGET_PLACEMENT_S = 0.100
GANG = 4

#: (wall, CPU) seconds of one figure (a median, or the first measurement).
WallCpu = tuple[float, float]


class _Reports:
    endpoint = "inproc://bench"

    def poll(self, timeout_s: float) -> list[ProgressReport]:
        return []

    def counters(self) -> Mapping[str, Any]:
        return {"dropped": {}}

    def close(self) -> None:
        return None


class _Commands:
    endpoint = "inproc://bench-commands"

    def __init__(self) -> None:
        self.sent = 0

    def publish(self, command: Any) -> bool:
        self.sent += 1
        return True

    def poll_incoming(self) -> int:
        return 0

    def counters(self) -> Mapping[str, Any]:
        return {}

    def close(self) -> None:
        return None


class _Dispatch:
    """The actors' dispatch: registrations go to the controller service, placements to
    emulated nodes (counted; the running subtasks are remembered for the reports)."""

    def __init__(self, controller: ControllerService | None) -> None:
        self.controller = controller
        self.running: dict[tuple[str, int], Subtask] = {}

    def register(self, reg: JobRegistration) -> None:
        assert self.controller is not None
        self.controller.register_job(reg)

    def place(self, node: str, subtasks: list[Subtask], start: float) -> None:
        for s in subtasks:
            self.running[s.key] = s

    def cancel(self, job_id: str, nodes: Any, reason: str = "") -> list[str]:
        assert self.controller is not None
        self.controller.cancel(job_id, reason)
        return []


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


class _Times:
    """Wall-clock and CPU seconds (this process's) of repeated measurements."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def time(self, fn: Callable[[], Any]) -> Any:
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        self.wall.append(time.perf_counter() - w)
        self.cpu.append(time.process_time() - c)
        return out

    def clear(self) -> None:
        self.wall.clear()
        self.cpu.clear()

    def first(self) -> WallCpu:
        """(wall, CPU) of the first measurement, s."""
        return (self.wall[0], self.cpu[0]) if self.wall else (0.0, 0.0)

    def median(self) -> WallCpu:
        """(wall, CPU) medians, s (0 when nothing was measured)."""
        if not self.wall:
            return 0.0, 0.0
        return statistics.median(self.wall), statistics.median(self.cpu)


@dataclass(frozen=True, slots=True)
class ScaleFigures:
    """One scale's figures: the grid as built (nodes, running subtasks, pending jobs),
    the set-up's wall s, and each measured figure as (wall, CPU) s."""

    nodes: int
    running: int
    pending: int
    setup_s: float
    reports: int
    ingest: WallCpu
    dropped: int
    control: WallCpu
    #: The first period: every gang joins there, and the tracked jobs' metrics are
    #: exported (then every 5 real s: runtime.controller_service.METRICS_EVERY_S).
    control_export: WallCpu
    placement: WallCpu
    journal: WallCpu
    journal_writes: int
    journal_mb: float


def run(nodes: int, running: int, pending: int, repeats: int) -> ScaleFigures:
    config = RuntimeConfig()
    rate = config.core.rate_per_weight
    per_node = max(1, running // nodes)
    # A node's strict budget (1.05 x the QoS share of its speed) holds exactly per_node
    # subtasks of weight 1: the grid is full, what comes next waits.
    speed = per_node * rate / (1.05 * config.core.qos_share) * 1.0000001
    grid = [Node(f"n{i}", speed) for i in range(nodes)]
    clock_src = ManualClock(0.0)
    clock = ModelClock(clock_src, TimeBase(0.0, config.time_scale))
    commands = _Commands()
    with tempfile.TemporaryDirectory() as tmp:
        dispatch = _Dispatch(None)
        gm = GlobalService(grid, config, clock, dispatch, Path(tmp) / "gm.sqlite")
        journal = _Times()
        real_persist = gm._persist  # noqa: SLF001 - what is measured

        def timed_persist() -> None:
            journal.time(real_persist)

        gm._persist = timed_persist  # type: ignore[method-assign]  # noqa: SLF001
        ctl = ControllerService(config, clock, gm.core.node_budgets(), _Reports(), commands,
                                Path(tmp) / "phase.jsonl")
        dispatch.controller = ctl

        def jobs(prefix: str, count: int) -> list[Any]:
            return parse_document(
                [{"name": f"{prefix}{i}", "qos": "strict", "overall_deviation": 300,
                  "asynchrony": 120, "subtasks": [{"work": 1000, "weight": 1}] * GANG}
                 for i in range(count)], prefix)

        setup_s, answers = _timed(lambda: gm.submit(jobs("r", running // GANG)))
        admitted = sum(1 for a in answers if a["admitted"])
        _, waiting = _timed(lambda: gm.submit(jobs("p", pending)))
        queued = sum(1 for a in waiting if a["pending"])

        q = config.cycle
        t = q * 10
        ingest = _Times()
        control = _Times()
        for k in range(repeats):
            t += q
            clock_src.set(t / config.time_scale)
            reports = [
                ProgressReport(s.job_id, s.index, s.node, 1, k, t, t, s.expected_rate * q,
                               s.expected_rate * q, False, s.expected_rate * q)
                for s in dispatch.running.values()
            ]
            ingest.time(lambda: ctl.ingest(reports))  # noqa: B023 - called at once
            control.time(lambda: ctl.control(t))  # noqa: B023
        received = ctl.counters["reports_received"]
        dropped = received - ctl.counters["reports_applied"]

        placement = _Times()
        journal.clear()  # the set-up's writes (whole batches) are not changes
        running_jobs = [a["job_id"] for a in answers if a["admitted"]]
        for k in range(repeats):
            job = running_jobs[k]
            for i in range(GANG):
                node = next(s.node for s in dispatch.running.values()
                            if s.job_id == job and s.index == i)
                gm.subtask_ended(SubtaskOutcome(job, i, node, SubtaskPhase.FINISHED, t))
            placement.time(gm.place_pending)

        writes = len(journal.wall)
        size = sum(f.stat().st_size for f in Path(tmp).glob("gm.sqlite*"))
        gm.close()
    return ScaleFigures(
        nodes=nodes,
        running=admitted * GANG,
        pending=queued,
        setup_s=setup_s,
        reports=len(reports),
        ingest=ingest.median(),
        dropped=dropped,
        control=control.median(),
        control_export=control.first(),
        placement=placement.median(),
        journal=journal.median(),
        journal_writes=writes,
        journal_mb=size / 1e6,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true",
                    help="100 nodes, 1,000 running subtasks, 1,000 pending jobs")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    nodes, running, pending = (100, 1_000, 1_000) if args.small else (1_000, 10_000, 10_000)
    ref = run(max(1, nodes // 10), max(1, running // 10), max(1, pending // 10),
              repeats=args.repeats)
    big = run(nodes, running, pending, repeats=args.repeats)

    def ms(pair: WallCpu) -> str:
        return f"{pair[0] * 1e3:.1f} / {pair[1] * 1e3:.1f} ms"

    def ratio(figure: Callable[[ScaleFigures], WallCpu]) -> str:
        """The ratio of ``figure``'s CPU medians, big / reference."""
        cpu_ref = figure(ref)[1]
        return f"{figure(big)[1] / cpu_ref:.1f}x" if cpu_ref else "-"

    def verdict(pair: WallCpu, target: float) -> str:
        wall, cpu = pair
        return (f"<= {target * 1e3:.0f} ms: CPU {'met' if cpu <= target else 'MISSED'}, "
                f"wall {'met' if wall <= target else 'MISSED'}")

    print(f"grid: {big.nodes} nodes, {big.running} running subtasks, {big.pending} "
          f"pending jobs (reference: {ref.nodes} / {ref.running} / {ref.pending}); "
          f"set-up {big.setup_s:.1f} s; medians of {args.repeats}, wall / CPU (this "
          "process's), ratio of CPU medians")
    print("| figure | measured (wall / CPU) | target | reference (1/10 scale) | ratio |")
    print("| --- | --- | --- | --- | --- |")
    rows = [
        (f"report ingest, one cycle's reports ({big.reports})", ms(big.ingest), "-",
         ms(ref.ingest), ratio(lambda f: f.ingest)),
        ("reports dropped", f"{big.dropped}", "0", f"{ref.dropped}", "-"),
        ("control period", ms(big.control), verdict(big.control, TARGET_CONTROL_S),
         ms(ref.control), ratio(lambda f: f.control)),
        ("first control period (every gang joins; metrics exported)",
         ms(big.control_export), "-", ms(ref.control_export),
         ratio(lambda f: f.control_export)),
        ("placement cycle (a job ends, the queue is placed)", ms(big.placement),
         verdict(big.placement, TARGET_PLACEMENT_S), ms(ref.placement),
         ratio(lambda f: f.placement)),
        (f"journal write per change ({big.journal_writes} writes; "
         f"{big.journal_mb:.1f} MB)", ms(big.journal), "-",
         f"{ms(ref.journal)} ({ref.journal_mb:.1f} MB)", ratio(lambda f: f.journal)),
    ]
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
