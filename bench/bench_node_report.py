"""What the global manager's once-a-second reconciliation costs per node: the status
document (the reference) against the typed :class:`~workloads.messages.NodeReport`.

Run: ``python3 bench/bench_node_report.py [--running 16] [--history 2000] [--rounds 200]``.

One node's local manager (:class:`runtime.node_runtime.NodeRuntime`, in process) runs
``--running`` subtasks of as many jobs the global manager placed there, and its bounded
history holds ``--history`` ended subtasks (2,000 is its cap: a node that has been up a
while). Per reconciliation, the best of ``--rounds`` (ms) and the bytes Ray ships (the
pickled answer):

  (a) reference, the whole node document: ``snapshot()`` (the status document, with its
      history), pickled and unpickled, and the global manager's walk over its entries
      (keys, work done, ended ones);
  (b) now: ``report(asked)`` with the (run id, index) the global manager still has
      running there, pickled and unpickled, and ``GlobalService.apply_report``.

Prints both and the ratio (a)/(b), and what one ``coalloc status`` gathered from
``--status-nodes`` such nodes if it asked each node (every node's status document) against
now (nothing: status reads the reports the monitor already holds).
"""

from __future__ import annotations

import argparse
import pickle
import time
from typing import Any

from clocks.base import ManualClock
from coallocator.messages import ProgressReport, ReweightCommand
from runtime.config import RuntimeConfig, runtime_core
from runtime.global_service import GlobalService
from runtime.node_runtime import NodeRuntime
from runtime.timebase import ModelClock, TimeBase
from workloads.messages import JobRegistration, SubtaskOutcome
from workloads.model import JobSpec, Node, QosClass, Subtask, SubtaskSpec

CYCLE = 10.0


class _Sink:
    def send(self, report: ProgressReport) -> bool:
        return True


class _Inbox:
    def poll(self) -> list[ReweightCommand]:
        return []


class _Dispatch:
    def __init__(self, node: NodeRuntime) -> None:
        self.node = node

    def register(self, reg: JobRegistration) -> None:
        pass

    def place(self, node: str, subtasks: list[Subtask], start: float) -> None:
        self.node.submit(subtasks, start)

    def cancel(self, job_id: str, nodes: Any, reason: str = "") -> list[str]:
        return []


def setup(running: int, history: int) -> tuple[NodeRuntime, GlobalService]:
    """A node with ``running`` subtasks placed by a global manager and ``history`` ended
    subtasks in its history."""
    manual = ManualClock(0.0)
    clock = ModelClock(manual, TimeBase(0.0, 1.0))
    config = RuntimeConfig(runtime_core(cycle=CYCLE), start_margin_s=0.0, time_scale=1.0)
    node = Node("n0", 100_000.0, cores=64.0)
    ended: list[SubtaskOutcome] = []
    rt = NodeRuntime(node, config, clock, _Sink(), _Inbox(), ended.append)
    gm = GlobalService([node], config, clock, _Dispatch(rt))
    specs = [JobSpec(f"j{k}", QosClass.LOOSE, (SubtaskSpec(1e9, 1.0),)) for k in range(running)]
    answers = gm.submit(specs)
    assert all(a["admitted"] for a in answers), answers[0]
    for k in (1, 2):
        manual.set(k * CYCLE)
        rt.tick(k * CYCLE)
    # A full history: ended subtasks of earlier jobs, as the node describes them.
    sample = next(iter(rt.snapshot()["subtasks"]))
    for i in range(history):
        rt._history[(f"old{i}", 0)] = dict(sample, job_id=f"old{i}", state="finished",
                                           finish_time=1.0, done_work=sample["work"])
    return rt, gm


def old_walk(
    seen: list[dict[str, Any]], progress: dict[tuple[str, int], float]
) -> tuple[int, int]:
    """The global manager's pass over a whole status document's subtasks (the reference:
    ``reconcile``/``runs_to_stop`` reading every entry of the node's document)."""
    ended = 0
    known = {(str(d.get("job_id")), int(d.get("index", -1))) for d in seen}
    for d in seen:
        key = (str(d.get("job_id")), int(d.get("index", -1)))
        if d.get("done_work") is not None:
            progress[key] = float(d["done_work"])
        ended += d.get("state") in ("finished", "failed")
    return ended, len(known)


def best(fn: Any, rounds: int) -> float:
    out = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return 1000.0 * out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--running", type=int, default=16)
    parser.add_argument("--history", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--status-nodes", type=int, default=64,
                        help="nodes for the per-status-call bytes (default 64)")
    args = parser.parse_args(argv)
    rt, gm = setup(args.running, args.history)
    progress: dict[tuple[str, int], float] = {}

    def before() -> tuple[int, int]:
        doc = pickle.loads(pickle.dumps(rt.snapshot()))
        return old_walk(doc["subtasks"], progress)

    def now() -> list[str]:
        asked = gm.running_subtasks("n0").get("n0", [])
        return gm.apply_report(pickle.loads(pickle.dumps(rt.report(asked))))

    old_bytes = len(pickle.dumps(rt.snapshot()))
    new_bytes = len(pickle.dumps(rt.report(gm.running_subtasks("n0").get("n0", []))))
    old_ms, new_ms = best(before, args.rounds), best(now, args.rounds)
    print(f"one node, {args.running} running subtasks, {args.history} in its history; "
          f"best of {args.rounds}")
    print(f"  (a) status document + walk  {old_ms:8.3f} ms  {old_bytes:9d} bytes")
    print(f"  (b) NodeReport + apply      {new_ms:8.3f} ms  {new_bytes:9d} bytes")
    print(f"  ratio (a)/(b): time {old_ms / new_ms:.1f}x, size {old_bytes / new_bytes:.1f}x")
    n = args.status_nodes
    print(f"per coalloc status at {n} such nodes: main gathered {n} status documents, "
          f"{n * old_bytes / 1e6:.1f} MB pickled, per call; now none (status reads the "
          f"reports the monitor holds: {n * new_bytes / 1e3:.0f} kB a second in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
