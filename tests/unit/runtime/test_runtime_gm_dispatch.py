"""The live global manager dispatches outside its lock: a run is reserved (placed and
journaled) under the lock, its calls to the controller and the nodes are made outside it,
then it is committed or rolled back under the lock. A node whose manager hangs in a
``place`` call holds only the caller of that dispatch: ``status``, ``queue`` and another
``submit`` answer meanwhile (asserted by order: they return while the hung call has not
been released)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from runtime.global_service import GlobalService
from tests.unit.runtime.test_runtime_gm_faults import NODES, Grid, _three
from workloads.model import JobPhase, JobSpec, QosClass, SubtaskSpec

#: Longest a test waits for a thread it released (a bound on a hang, not a timing).
JOIN_S = 60.0


class Hanging:
    """Wraps a dispatch; the first ``place`` call (the node it names: ``held``) waits
    for ``release``, as a local manager that stopped answering, then places or, with
    ``fail``, raises as a call that timed out."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = False
        self.held: str | None = None
        self.placed: list[tuple[str, str]] = []
        self.cancelled: list[tuple[str, tuple[str, ...], str]] = []
        self._lock = threading.Lock()

    def register(self, reg: Any) -> None:
        self.inner.register(reg)

    def place(self, node: str, subtasks: list[Any], start: float) -> None:
        with self._lock:
            hold = self.held is None
            if hold:
                self.held = node
        if hold:
            self.entered.set()
            assert self.release.wait(JOIN_S), "never released"
            if self.fail:
                raise TimeoutError(f"{node} did not answer")
        with self._lock:
            self.placed.append((node, subtasks[0].job_id))
        self.inner.place(node, subtasks, start)

    def cancel(self, job_id: str, nodes: Any, reason: str = "") -> list[str]:
        nodes = tuple(nodes)
        with self._lock:
            self.cancelled.append((job_id, nodes, reason))
        return list(self.inner.cancel(job_id, nodes, reason))


def _grid(tmp_path: Path, queue: str = "wait") -> tuple[Grid, Hanging]:
    g = Grid(tmp_path, queue=queue)
    hanging = Hanging(g.dispatch)
    g.gm.dispatch = hanging
    return g, hanging


def _small(name: str) -> JobSpec:
    return JobSpec(name=name, qos=QosClass.STRICT,
                   subtasks=(SubtaskSpec(6_000.0, 1.0),), overall_deviation=300.0,
                   asynchrony=120.0)


def _submit_in_thread(g: Grid, spec: JobSpec) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []
    t = threading.Thread(target=lambda: answers.extend(g.gm.submit([spec])), daemon=True)
    t.start()
    return t, answers


def _job_in_dispatch(g: Grid, hanging: Hanging) -> tuple[threading.Thread, list[Any], str]:
    """Submit a three-node job from a thread; return once its first place call hangs."""
    t, answers = _submit_in_thread(g, _three("held"))
    assert hanging.entered.wait(JOIN_S), "no place call was made"
    (job,) = [j for j, i in g.gm.jobs.items() if i.name == "held"]
    return t, answers, job


def _finish(t: threading.Thread) -> None:
    t.join(JOIN_S)
    assert not t.is_alive(), "the dispatch did not return after its call was released"


def test_status_queue_and_submit_answer_while_a_node_hangs_in_a_dispatch(
    tmp_path: Path,
) -> None:
    g, hanging = _grid(tmp_path)
    t, answers, job = _job_in_dispatch(g, hanging)
    # The job's run is reserved: running, its budgets committed, being dispatched.
    shown = g.gm.job(job)
    assert shown is not None and shown.state == "running" and shown.dispatching
    assert sum(g.gm.core.committed.values()) > 0
    everything = g.gm.describe()
    listed = g.gm.queue()
    (other,) = g.gm.submit([_small("other")])
    placed = g.gm.place_pending()
    assert not hanging.release.is_set()  # all of the above returned while it hung
    assert t.is_alive() and not answers  # the submission that dispatches still waits
    assert [j.job_id for j in everything.jobs] == [job]
    assert job in [j.job_id for j in listed]
    assert other["admitted"] and placed == 0
    assert g.gm.jobs[other["job_id"]].state is JobPhase.RUNNING
    hanging.release.set()
    _finish(t)
    (a,) = answers
    assert a["admitted"] and a["job_id"] == job
    shown = g.gm.job(job)
    assert shown is not None and not shown.dispatching
    assert {n for n, run in hanging.placed if run == job} == set(a["nodes"])
    assert not [c for c in hanging.cancelled if c[0] == job]
    g.run_until(lambda: g.state(job) == "completed" and g.state(other["job_id"]) == "completed")


def test_a_place_that_fails_after_hanging_rolls_the_run_back(tmp_path: Path) -> None:
    g, hanging = _grid(tmp_path)
    hanging.fail = True
    t, answers, job = _job_in_dispatch(g, hanging)
    hanging.release.set()
    _finish(t)
    (a,) = answers
    dead = hanging.held
    assert dead is not None
    info = g.gm.jobs[job]
    assert a["pending"] and f"the local manager of node {dead} is unreachable" in info.reason
    assert info.state is JobPhase.PENDING and not info.subtasks
    assert g.gm.core.down == {dead}
    assert all(v == 0.0 for v in g.gm.core.committed.values())  # budgets returned
    (stop,) = [c for c in hanging.cancelled if c[0] == job]
    assert stop[2].startswith("dispatch failed") and dead not in stop[1]
    assert set(stop[1]) == {n for n, run in hanging.placed if run == job}
    for name in stop[1]:
        assert [s["state"] for s in g.loop.nodes[name].snapshot()["subtasks"]
                if s["job_id"] == job] == ["cancelled"]
    # The journal recorded the outcome: a service recovered from it has the job pending.
    again = GlobalService(NODES, g.gm.config, g.gm.clock, hanging, g.journal)
    assert again.jobs[job].state is JobPhase.PENDING and dead in again.core.down
    again.close()
    # Back in the queue: the next cycle places it on the nodes that answer.
    g.step(1)
    assert g.gm.jobs[job].state is JobPhase.RUNNING
    assert dead not in [s.node for s in g.gm.jobs[job].subtasks]
    g.run_until(lambda: g.state(job) == "completed")


def test_a_place_that_fails_after_hanging_rejects_the_job_under_queue_reject(
    tmp_path: Path,
) -> None:
    g, hanging = _grid(tmp_path, queue="reject")
    hanging.fail = True
    t, answers, job = _job_in_dispatch(g, hanging)
    hanging.release.set()
    _finish(t)
    (a,) = answers
    assert not a["admitted"] and not a["pending"] and a["state"] == "rejected"
    assert "is unreachable" in a["reason"]
    assert all(v == 0.0 for v in g.gm.core.committed.values())


def test_a_job_cancelled_while_it_is_dispatched_is_stopped_on_every_node_it_reached(
    tmp_path: Path,
) -> None:
    g, hanging = _grid(tmp_path)
    t, answers, job = _job_in_dispatch(g, hanging)
    (res,) = g.gm.cancel_many([job])
    assert res["result"] == "cancelled" and not hanging.release.is_set()
    assert all(v == 0.0 for v in g.gm.core.committed.values())
    hanging.release.set()  # the hung node now takes the run: it must be stopped there
    _finish(t)
    assert answers[0]["state"] == "cancelled"
    assert g.gm.jobs[job].state is JobPhase.CANCELLED
    late = [c for c in hanging.cancelled if c[0] == job and hanging.held in c[1]]
    assert late and late[-1][2] == "ended while it was being dispatched"
    for name in {n for n, run in hanging.placed if run == job}:
        assert {s["state"] for s in g.loop.nodes[name].snapshot()["subtasks"]
                if s["job_id"] == job} == {"cancelled"}
    again = GlobalService(NODES, g.gm.config, g.gm.clock, hanging, g.journal)
    assert again.jobs[job].state is JobPhase.CANCELLED
    again.close()


def test_a_node_lost_while_a_job_is_dispatched_to_it_requeues_the_job(
    tmp_path: Path,
) -> None:
    g, hanging = _grid(tmp_path)
    t, answers, job = _job_in_dispatch(g, hanging)
    dead = hanging.held
    assert dead is not None
    g.silent.add(dead)
    g.run_until(lambda: dead in g.gm.lost, limit=60)  # the monitor answers meanwhile
    assert not hanging.release.is_set()
    assert g.gm.jobs[job].state is JobPhase.PENDING
    hanging.fail = True
    hanging.release.set()
    _finish(t)
    info = g.gm.jobs[job]
    assert info.attempt == 2 and g.gm.counters["dispatch_failed"] == 0  # ended once
    stop = [c for c in hanging.cancelled
            if c[0] == job and c[2] == "ended while it was being dispatched"]
    assert stop and dead not in stop[-1][1]
    g.silent.discard(dead)
    g.run_until(lambda: g.state(job) == "completed")
