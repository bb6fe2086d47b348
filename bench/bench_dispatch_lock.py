"""How long the global manager's queries wait while a dispatch hangs on one node (the
dispatch's calls are made outside the service's lock, so they should not wait).

A live :class:`runtime.global_service.GlobalService` on four nodes (no Ray: a
:class:`runtime.dispatch.Dispatch` in memory whose ``place`` on node ``n0`` hangs for
``--hang`` real seconds, as a local manager that stopped answering until its Ray call
timed out; every other call answers at once). ``--calls`` times for each of ``describe()`` (what
``status`` reads), ``queue()`` and ``submit()`` of a job that waits in the queue: a strict
job that needs every node is submitted from a thread; once its ``place`` on ``n0`` hangs,
this thread times the call, then releases the hang. The reference is the same three calls with no
dispatch in flight, measured in the same run. Printed: each call's median and max in ms,
with and without the hang, and their ratio (medians).

Run against another checkout (``PYTHONPATH=/work/main python3 bench/bench_dispatch_lock.
py``) to see the figures of code that dispatches under the lock: each call then waits
for the hang. This is a benchmark, not a test: it asserts nothing.

Usage: ``python3 bench/bench_dispatch_lock.py [--hang 0.5] [--calls 10]``.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from clocks.base import ManualClock
from runtime.config import RuntimeConfig, runtime_core
from runtime.global_service import GlobalService
from runtime.timebase import ModelClock, TimeBase
from workloads.model import JobSpec, Node, QosClass, SubtaskSpec

NODES = [Node(f"n{i}", 1000.0) for i in range(4)]


class HangingDispatch:
    """``place`` on ``n0`` hangs until released (at most ``hang`` s) while ``armed``."""

    def __init__(self, hang: float) -> None:
        self.hang = hang
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def register(self, reg: Any) -> None:
        return None

    def place(self, node: str, subtasks: list[Any], start: float) -> None:
        if node == "n0" and self.armed:
            self.entered.set()
            self.release.wait(self.hang)

    def cancel(self, job_id: str, nodes: Iterable[str], reason: str = "") -> list[str]:
        return []


def _gang(name: str, weight: float) -> JobSpec:
    return JobSpec(name=name, qos=QosClass.STRICT,
                   subtasks=tuple(SubtaskSpec(1e6, weight) for _ in NODES),
                   overall_deviation=300.0, asynchrony=120.0)


def _timed(call: Callable[[], object]) -> float:
    began = time.perf_counter()
    call()
    return (time.perf_counter() - began) * 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hang", type=float, default=0.5, help="real s a place call hangs")
    ap.add_argument("--calls", type=int, default=10, help="hung dispatches timed")
    args = ap.parse_args()
    dispatch = HangingDispatch(args.hang)
    clock = ModelClock(ManualClock(0.0), TimeBase(0.0, 1.0))
    config = RuntimeConfig(runtime_core(cycle=10.0, queue="wait"), start_margin_s=0.0)
    gm = GlobalService(NODES, config, clock, dispatch)
    waiter = _gang("waiter", 1e6)  # never fits: it waits in the queue
    names = ("describe", "queue", "submit")
    calls: dict[str, Callable[[], object]] = {
        "describe": gm.describe, "queue": gm.queue, "submit": lambda: gm.submit([waiter]),
    }
    idle: dict[str, list[float]] = {n: [] for n in names}
    hung: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.calls):
        for n in names:
            idle[n].append(_timed(calls[n]))
    for i in range(args.calls):
        for n in names:  # one hung dispatch per call timed
            dispatch.armed = True
            dispatch.entered.clear()
            dispatch.release.clear()
            t = threading.Thread(target=gm.submit, args=([_gang(f"g{i}-{n}", 1.0)],))
            t.start()
            dispatch.entered.wait()
            hung[n].append(_timed(calls[n]))
            dispatch.armed = False
            dispatch.release.set()
            t.join()
            gm.cancel_many(None, state="running")
    print(f"{len(NODES)} nodes, place on n0 hangs up to {args.hang:g} s, {args.calls} "
          "dispatches; ms per call")
    print(f"{'call':<9} {'idle median':>11} {'idle max':>9} {'hung median':>11} "
          f"{'hung max':>9} {'hung / idle':>11}")
    for n in names:
        a, b = statistics.median(idle[n]), statistics.median(hung[n])
        print(f"{n:<9} {a:>11.2f} {max(idle[n]):>9.2f} {b:>11.2f} {max(hung[n]):>9.2f} "
              f"{b / a:>11.1f}")


if __name__ == "__main__":
    main()
