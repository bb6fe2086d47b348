"""The live global manager's pending queue, node loss, failure policies and dispatch
transactions, driven in memory: a global manager, a controller and a node runtime per
node (:class:`Loopback`), a node "lost" by no longer ticking or answering."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from runtime.config import RuntimeConfig, runtime_core
from runtime.global_service import GlobalService
from runtime.lease import Answer
from tests.unit.runtime.test_runtime_wiring import NODES, Loopback, strict
from workloads.messages import SubtaskOutcome, SubtaskPhase
from workloads.model import EndPolicy, JobPhase, JobSpec, QosClass, SubtaskSpec

CYCLE = 10.0


class Faulty:
    """Wraps a dispatch; ``place`` on a node in ``refuse`` raises, as a dead actor."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.refuse: set[str] = set()
        self.controller_down = False
        self.refuse_next_placed = 0
        self.placed: list[tuple[str, str]] = []
        self.cancelled: list[tuple[str, tuple[str, ...], str]] = []
        self._lock = threading.Lock()  # a run's place calls are made at once

    def register(self, *args: Any) -> None:
        if self.controller_down:
            raise ConnectionError("controller gone")
        self.inner.register(*args)

    def place(self, node: str, subtasks: list[Any], start: float) -> None:
        with self._lock:
            if self.refuse_next_placed:
                # The second node a run is placed on: one node was reached before it.
                self.refuse_next_placed -= 1
                if not self.refuse_next_placed:
                    self.refuse.add(node)
            if node in self.refuse:
                raise ConnectionError(f"{node} gone")
            self.placed.append((node, subtasks[0].job_id))
        self.inner.place(node, subtasks, start)

    def cancel(self, job_id: str, nodes: Any, reason: str = "") -> list[str]:
        nodes = tuple(nodes)
        self.cancelled.append((job_id, nodes, reason))
        live = [n for n in nodes if n not in self.refuse]
        self.inner.cancel(job_id, live, reason)
        return [n for n in nodes if n in self.refuse]


class Grid:
    """A Loopback whose nodes can go silent; every cycle it runs the global manager's
    placement cycle and, every ``monitor`` cycles, its node check with reconciliation."""

    def __init__(self, tmp_path: Path, **config: Any) -> None:
        queue = config.pop("queue", "wait")
        cfg = RuntimeConfig(runtime_core(cycle=CYCLE, queue=queue), start_margin_s=0.0,
                            node_timeout=20, **config)
        self.loop = Loopback(NODES, cfg, tmp_path / "phase.jsonl")
        self.dispatch = Faulty(self.loop.gm.dispatch)
        self.journal = tmp_path / "gm.json"
        # The leases' real clock: model time at the configuration's time scale.
        self.monotonic = lambda: self.loop.manual.now() / cfg.time_scale
        self.gm = GlobalService(NODES, cfg, self.loop.clock, self.dispatch, self.journal,
                                monotonic=self.monotonic)
        self.loop.gm = self.gm
        self.silent: set[str] = set()
        self.restarting: set[str] = set()  # nodes whose manager Ray is restarting
        self.k = 0
        self.log = tmp_path / "phase.jsonl"

    def step(self, cycles: int = 1) -> None:
        for _ in range(cycles):
            b = self.k * CYCLE
            self.loop.manual.set(b)
            for name, node in self.loop.nodes.items():
                if name not in self.silent:
                    node.tick(b)
            self.loop.ctl.ingest(self.loop.reports)
            self.loop.reports.clear()
            self.loop.ctl.control(b)
            self.gm.place_pending()
            for name, node in self.loop.nodes.items():
                if name not in self.silent:
                    self.renew(name)
                    self.gm.node_answered(name, True)
                    seen = node.report(self.gm.running_subtasks(name).get(name, [])).subtasks
                    self.gm.reconcile(name, seen)
                    for run in self.gm.runs_to_stop(name, seen):
                        node.cancel_job(run)
            self.gm.check_nodes(restarting=self.restarting)
            self.k += 1

    def renew(self, name: str) -> None:
        """Node ``name`` renews its lease; told it was lost, it fences, takes a new
        incarnation and renews under it (what its actor's lease thread does)."""
        node = self.loop.nodes[name]
        if self.gm.renew_lease(name, node.incarnation) is Answer.LOST:
            node.fence("the global manager declared this node lost", timeout=1.0)
            node.rejoin()
            assert self.gm.renew_lease(name, node.incarnation) is Answer.REJOINED
            node.leased()

    def run_until(self, done: Any, limit: int = 5000) -> None:
        for _ in range(limit):
            if done():
                return
            self.step()
        raise AssertionError("condition not reached")

    def state(self, job_id: str) -> str:
        return self.gm.job_states()[job_id]


def _three(name: str = "g", **kw: Any) -> JobSpec:
    return JobSpec(
        name=name, qos=QosClass.STRICT,
        subtasks=tuple(SubtaskSpec(60_000.0, 1.0) for _ in range(3)),
        overall_deviation=300.0, asynchrony=120.0, **kw,
    )


def test_a_job_that_does_not_fit_waits_with_reasons_and_runs_when_the_blocker_is_cancelled(
    tmp_path: Path,
) -> None:
    g = Grid(tmp_path)
    # Weight 4 per subtask on 4 nodes: the whole grid's budget; a second one waits.
    big = strict("big", [300, 300, 300, 300], [4, 4, 4, 4], 300.0, 100.0)
    (a,) = g.gm.submit([big])
    assert a["admitted"], a
    (b,) = g.gm.submit([big])
    assert b["pending"] and not b["admitted"]
    rec = g.gm.job(b["job_id"])
    assert rec is not None and rec.state == "pending"
    assert rec.pending_reasons and rec.reason == "; ".join(
        r.message for r in rec.pending_reasons)
    assert [q.job_id for q in g.gm.queue()] == [b["job_id"], a["job_id"]]
    # b is estimated to start when a is expected to end: its start plus work / rate.
    run = g.gm.job(a["job_id"])
    assert run is not None and run.start_at is not None
    ends = run.start_at + max(s.work / s.expected_rate for s in run.subtasks)
    assert rec.estimated_start == pytest.approx(ends)
    # The same instant as wall-clock time (the loop's time base: epoch 0, scale 1).
    assert datetime.fromisoformat(rec.estimated_start_time or "") == datetime.fromtimestamp(
        int(ends), tz=timezone.utc)
    rows = {q.job_id: q for q in g.gm.queue()}
    assert rows[b["job_id"]].estimated_start == pytest.approx(ends)
    assert rows[a["job_id"]].estimated_start is None  # running: nothing to estimate
    assert g.gm.describe().jobs[1].estimated_start == pytest.approx(ends)
    g.step(3)
    assert g.state(b["job_id"]) == "pending"
    g.gm.cancel(a["job_id"])
    g.step(1)
    assert g.state(b["job_id"]) == "running"
    g.run_until(lambda: g.state(b["job_id"]) == "completed")


def test_a_lost_node_requeues_a_synthetic_gang_whole_from_its_common_progress(
    tmp_path: Path,
) -> None:
    g = Grid(tmp_path)
    (a,) = g.gm.submit([_three()])
    job = a["job_id"]
    lost = a["nodes"][0]
    siblings = set(a["nodes"][1:])
    g.step(15)
    done_before = {
        i: g.gm.progress.get((job, i), 0.0) for i in range(3)
    }
    assert min(done_before.values()) > 0
    g.silent.add(lost)
    g.run_until(lambda: g.state(job) != "running")
    info = g.gm.jobs[job]
    assert info.state is JobPhase.PENDING or info.state is JobPhase.RUNNING
    assert f"node {lost} lost" in info.history[0] and "requeued" in info.history[0]
    # Siblings stopped, every budget of the first run released; the lost node skipped.
    stop = [c for c in g.dispatch.cancelled if c[0] == job]
    assert stop and siblings <= set(stop[0][1]) and stop[0][2].startswith("requeued")
    assert lost not in stop[0][1]  # it cannot be reached: it fences; no call waits on it
    for name in siblings:
        assert all(s["job_id"] != job or s["state"] != "running"
                   for s in g.loop.nodes[name].snapshot()["subtasks"])
    g.run_until(lambda: g.state(job) == "running")
    info = g.gm.jobs[job]
    assert info.run_id == f"{job}.2" and info.attempt == 2
    assert lost not in [s.node for s in info.subtasks]
    # The second run carries the work left from the least advanced member, not all of it.
    assert 0.0 < info.work_left < 1.0
    assert sum(s.work for s in info.subtasks) < 3 * 60_000.0
    g.run_until(lambda: g.state(job) == "completed")
    assert all(v == pytest.approx(0.0, abs=1e-6) for v in g.gm.core.committed.values())
    summaries = [json.loads(line) for line in g.log.read_text().splitlines()
                 if '"summary"' in line]
    first = [s for s in summaries if s["job"] == job]
    assert first and first[0]["reason"].startswith("requeued") and not first[0]["completed"]
    assert any(s["job"] == f"{job}.2" and s["completed"] for s in summaries)
    # The node answers again: back in placement, its zombie run stopped there.
    g.silent.discard(lost)
    g.step(2)
    assert lost not in g.gm.lost and lost not in g.gm.core.down
    assert all(s["state"] != "running" for s in g.loop.nodes[lost].snapshot()["subtasks"])


def test_a_lost_node_fails_a_gang_whose_policy_is_fail(tmp_path: Path) -> None:
    g = Grid(tmp_path)
    (a,) = g.gm.submit([_three(on_node_loss=EndPolicy.FAIL)])
    job = a["job_id"]
    g.step(5)
    g.silent.add(a["nodes"][1])
    g.run_until(lambda: g.state(job) != "running")
    rec = g.gm.job(job)
    assert rec is not None and rec.state == "failed"
    assert f"node {a['nodes'][1]} lost" in rec.reason
    assert all(v == 0.0 for v in g.gm.core.committed.values())
    assert g.gm.counters["failed_node_loss"] == 1


@pytest.mark.parametrize("comes_back", [True, False])
def test_a_node_whose_manager_ray_is_restarting_is_lost_only_after_the_restart_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, comes_back: bool
) -> None:
    """A manager Ray takes longer than ``node_timeout`` to restart (a loaded machine)
    keeps its node and its gang: the node is stale (placement skips it), not lost. One
    that never comes back is lost all the same, once MANAGER_RESTART_WAIT_S has passed."""
    import runtime.node_health as health

    monkeypatch.setattr(health, "MANAGER_RESTART_WAIT_S", 5.0)  # 50 cycles of 0.1 real s
    g = Grid(tmp_path)
    (a,) = g.gm.submit([_three()])
    job, node = a["job_id"], a["nodes"][0]
    g.step(5)
    g.silent.add(node)
    g.restarting.add(node)
    g.step(40)  # node_timeout (20 cycles) passed, the restart wait (50) not
    assert node not in g.gm.lost and node in g.gm.core.down
    assert g.state(job) == "running"
    if comes_back:
        g.silent.discard(node)
        g.restarting.discard(node)
        g.step(1)
        assert node not in g.gm.core.down
        g.run_until(lambda: g.state(job) != "running")
        assert g.state(job) == "completed" and g.gm.counters["nodes_lost"] == 0
        return
    g.run_until(lambda: node in g.gm.lost)
    assert g.k - 5 > 50  # silent longer than the restart wait
    assert "Ray still restarting it" in g.gm.lost[node]
    assert g.state(job) != "running" and g.gm.counters["nodes_lost"] == 1


def test_a_stale_node_is_skipped_by_placement_before_it_is_lost(tmp_path: Path) -> None:
    g = Grid(tmp_path, queue="reject")
    g.silent.add("n2")
    g.step(12)  # > stall_cycles (10) of silence, < node_timeout (20)
    assert "n2" in g.gm.core.down and "n2" not in g.gm.lost
    answers = g.gm.submit([JobSpec(name="be", qos=QosClass.BEST_EFFORT,
                                   subtasks=(SubtaskSpec(1000.0, 1.0),) * 3)])
    assert answers[0]["admitted"] and "n2" not in answers[0]["nodes"]
    (four,) = g.gm.submit([JobSpec(name="four", qos=QosClass.BEST_EFFORT,
                                   subtasks=(SubtaskSpec(1000.0, 1.0),) * 4)])
    assert not four["admitted"] and "only 3 of 4 nodes are up" in four["reason"]


@pytest.mark.parametrize("policy,attempts", [(EndPolicy.FAIL, 1), (EndPolicy.REQUEUE, 2)])
def test_a_failed_subtask_ends_its_whole_job_by_policy(
    tmp_path: Path, policy: EndPolicy, attempts: int
) -> None:
    g = Grid(tmp_path)
    (a,) = g.gm.submit([_three(on_failure=policy, max_attempts=2)])
    job = a["job_id"]
    g.step(3)
    g.gm.subtask_ended(SubtaskOutcome(job, 1, a["nodes"][1], SubtaskPhase.FAILED, 30.0, 3,
                                      "exit status 3"))
    stop = [c for c in g.dispatch.cancelled if c[0] == job]
    assert stop and {a["nodes"][0], a["nodes"][2]} <= set(stop[0][1])
    for name in (a["nodes"][0], a["nodes"][2]):
        assert all(s["state"] != "running" for s in g.loop.nodes[name].snapshot()["subtasks"]
                   if s["job_id"] == job)
    info = g.gm.jobs[job]
    if policy is EndPolicy.FAIL:
        assert info.state is JobPhase.FAILED and "exit status 3" in info.reason
        return
    assert info.state is JobPhase.PENDING and info.attempt == attempts
    g.run_until(lambda: g.state(job) == "running")
    run = g.gm.jobs[job].run_id
    # The second failure exhausts max_attempts (2): the job fails, saying so.
    g.gm.subtask_ended(SubtaskOutcome(run, 0, g.gm.jobs[job].subtasks[0].node,
                                      SubtaskPhase.FAILED, g.k * CYCLE, 1, "exit status 1"))
    info = g.gm.jobs[job]
    assert info.state is JobPhase.FAILED and "max_attempts" in info.reason
    assert len(info.history) == 2
    # A late report of the first run changes nothing.
    g.gm.subtask_ended(SubtaskOutcome(job, 2, a["nodes"][2], SubtaskPhase.FINISHED, 1.0))
    assert g.gm.jobs[job].state is JobPhase.FAILED


@pytest.mark.parametrize("queue", ["wait", "reject"])
def test_a_dispatch_that_cannot_reach_a_node_leaves_nothing_placed(
    tmp_path: Path, queue: str
) -> None:
    g = Grid(tmp_path, queue=queue)
    g.dispatch.refuse_next_placed = 2
    (a,) = g.gm.submit([_three()])
    job = a["job_id"]
    (dead,) = g.dispatch.refuse
    assert g.gm.core.down == {dead}
    stop = [c for c in g.dispatch.cancelled if c[0] == job]
    assert stop and stop[0][2].startswith("dispatch failed")
    reached = set(stop[0][1])
    # A run's place calls are made at once: every node but the dead one was reached.
    assert len(reached) == 2 and dead not in reached
    assert reached == {n for n, run in g.dispatch.placed if run == job}
    for name in reached:
        assert [s["state"] for s in g.loop.nodes[name].snapshot()["subtasks"]
                if s["job_id"] == job] == ["cancelled"]
    if queue == "reject":
        assert not a["admitted"] and not a["pending"]
        assert f"the local manager of node {dead} is unreachable" in a["reason"]
        assert all(v == 0.0 for v in g.gm.core.committed.values())
        return
    # Back in the queue: the next cycle places it on the nodes that answer.
    g.step(1)
    info = g.gm.jobs[job]
    assert info.state is JobPhase.RUNNING and dead not in [s.node for s in info.subtasks]
    assert info.run_id == f"{job}.2"
    g.run_until(lambda: g.state(job) == "completed")


def test_a_controller_that_cannot_be_reached_names_the_controller(tmp_path: Path) -> None:
    g = Grid(tmp_path, queue="reject")
    g.dispatch.controller_down = True
    (a,) = g.gm.submit([_three()])
    assert not a["admitted"] and "the controller is unreachable" in a["reason"]
    assert not g.gm.core.down and not g.dispatch.placed
    assert all(v == 0.0 for v in g.gm.core.committed.values())


def test_a_subtask_its_node_does_not_know_ends_the_run_and_requeues_it(
    tmp_path: Path,
) -> None:
    """Whatever ``on_node_loss`` says: the lost subtask did no work worth keeping."""
    g = Grid(tmp_path)
    (a,) = g.gm.submit([_three(on_node_loss=EndPolicy.FAIL)])
    job = a["job_id"]
    g.step(2)
    # The node's manager forgets the run (restarted without its checkpoint).
    g.loop.nodes[a["nodes"][2]].cancel_job(job)
    g.loop.nodes[a["nodes"][2]]._history.clear()
    g.run_until(lambda: g.gm.jobs[job].attempt == 2, limit=30)
    assert "is not there" in g.gm.jobs[job].history[0]
    g.run_until(lambda: g.state(job) == "completed")
    assert g.gm.jobs[job].run_id.startswith(f"{job}.")


def test_pending_jobs_and_lost_nodes_survive_a_restart_and_a_corrupt_journal_is_set_aside(
    tmp_path: Path,
) -> None:
    g = Grid(tmp_path)
    big = strict("big", [300, 300, 300, 300], [4, 4, 4, 4], 300.0, 100.0)
    g.gm.submit([big])
    (b,) = g.gm.submit([big])
    g.silent.add("n3")
    g.step(25)
    assert "n3" in g.gm.lost
    again = GlobalService(NODES, g.gm.config, g.gm.clock, g.dispatch, g.journal)
    assert again.recovered
    assert again.job_states() == g.gm.job_states()
    # Both wait: the big job that ran on n3 was requeued when n3 was lost.
    assert list(again.core.pending) == list(g.gm.core.pending) == [b["job_id"], "j00001"]
    assert again.core.pending[b["job_id"]].spec == replace(
        g.gm.core.pending[b["job_id"]].spec, job_id=b["job_id"])
    assert again.lost == g.gm.lost and again.core.down == g.gm.core.down == {"n3"}
    assert again.queue() == g.gm.queue()
    g.gm.close()  # both managers gone (their journal's WAL folded in), then a hand edit
    again.close()
    g.journal.write_text('{"version": 2, "core": {"trunc', encoding="utf-8")
    empty = GlobalService(NODES, g.gm.config, g.gm.clock, g.dispatch, g.journal)
    assert not empty.recovered and not empty.jobs
    assert empty.journal_error and "moved to" in empty.journal_error
    aside = list(tmp_path.glob("gm.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_text().startswith('{"version": 2')


def test_ended_runs_tells_the_controller_which_tracked_runs_are_over(tmp_path: Path) -> None:
    g = Grid(tmp_path)
    (a,) = g.gm.submit([_three("a")])
    (b,) = g.gm.submit([_three("b")])
    ja, jb = a["job_id"], b["job_id"]
    g.step(3)
    assert g.gm.ended_runs([ja, jb, "j99999"], before=1e9) == {}  # running, unknown
    g.run_until(lambda: g.state(ja) == "completed")
    info = g.gm.jobs[ja]
    assert info.finished_at is not None
    # Only once it ended at or before ``before``; with when each subtask ended.
    assert g.gm.ended_runs([ja], before=info.finished_at - 1.0) == {}
    (ends, why) = g.gm.ended_runs([ja], before=info.finished_at)[ja]
    assert why == "" and ends == {
        i: o.finish_time for i, o in info.outcomes.items()} and len(ends) == 3
    g.gm.cancel(jb)
    assert g.gm.ended_runs([jb], before=1e9)[jb][1] == "cancelled"
    # An old run of a job that runs again is superseded.
    assert g.gm.ended_runs([f"{ja}.0"], before=1e9) == {f"{ja}.0": ({}, "superseded")}


def test_a_restarted_controller_is_told_of_its_orphans_whatever_their_state(
    tmp_path: Path,
) -> None:
    g = Grid(tmp_path)
    (a,) = g.gm.submit([_three("a")])
    ja = a["job_id"]
    g.run_until(lambda: g.state(ja) == "completed")
    assert [reg.job_id for reg, _ in g.gm.controller_jobs()] == []
    ((reg, ended),) = g.gm.controller_jobs([ja, "j99999"])
    assert reg.job_id == ja and sorted(ended) == [0, 1, 2]
