"""What the live global manager tells its users about waiting jobs: the
real reason at submission, one measure of WAIT for every job, no lost nodes on a
requeued job, and no zombie counted for a subtask that has just finished. In memory,
over the loopback grid of ``test_runtime_gm_faults``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests.unit.runtime.test_runtime_gm_faults import Grid, _three
from tests.unit.runtime.test_runtime_wiring import strict
from workloads.messages import SubtaskOutcome, SubtaskPhase

BIG = strict("big", [300, 300, 300, 300], [4, 4, 4, 4], 300.0, 100.0)


def test_a_pending_submission_answers_why_it_waits(tmp_path: Path) -> None:
    g = Grid(tmp_path)
    (a,) = g.gm.submit([BIG])
    (b,) = g.gm.submit([BIG])
    assert b["pending"]
    rec = g.gm.job(b["job_id"])
    assert rec is not None and rec.pending_reasons
    assert b["reason"] == rec.reason and "next placement cycle" not in b["reason"]


def test_wait_is_time_in_the_queue_for_every_job(tmp_path: Path) -> None:
    """WAIT: model s from entering the queue to the start (running) or to now
    (pending); never negative, the same origin for both."""
    g = Grid(tmp_path)
    g.step(3)
    g.loop.manual.set(g.loop.manual.now() + 4.0)  # between boundaries: starts come later
    (a,) = g.gm.submit([BIG])
    (b,) = g.gm.submit([BIG])
    rows = {r.job_id: r for r in g.gm.queue()}
    now = g.gm.clock.now()
    info_a, info_b = g.gm.jobs[a["job_id"]], g.gm.jobs[b["job_id"]]
    assert rows[b["job_id"]].wait == now - info_b.submitted_at >= 0
    assert rows[a["job_id"]].wait == info_a.start_at - info_a.submitted_at > 0
    g.step(2)
    assert g.gm.queue()[0].wait == g.gm.clock.now() - info_b.submitted_at > 0


def test_a_requeued_pending_job_lists_no_nodes(tmp_path: Path) -> None:
    g = Grid(tmp_path)
    (a,) = g.gm.submit([_three()])
    job = a["job_id"]
    g.step(5)
    lost = a["nodes"][0]
    g.silent.add(lost)
    g.run_until(lambda: g.state(job) != "running")
    rec = g.gm.job(job)
    assert rec is not None and rec.state == "pending"
    assert rec.nodes == [] and rec.subtasks == []
    assert f"node {lost} lost" in rec.history[0]  # where it ran is in its history
    (row,) = [r for r in g.gm.queue() if r.job_id == job]
    assert row.nodes == []


def test_a_subtask_that_just_finished_is_no_zombie(tmp_path: Path) -> None:
    """The node's view was taken just before the subtask finished; the finish reached
    the global manager first. Nothing is stopped or counted; a run that is not current
    there still is."""
    g = Grid(tmp_path)
    (a,) = g.gm.submit([_three()])
    job = a["job_id"]
    g.step(2)
    node = a["nodes"][0]
    seen = g.loop.nodes[node].report().subtasks
    (mine,) = [s for s in seen if s.run_id == job]
    assert mine.state is SubtaskPhase.RUNNING
    g.gm.subtask_ended(SubtaskOutcome(job, mine.index, node, SubtaskPhase.FINISHED,
                                      g.gm.clock.now(), None, ""))
    assert g.gm.runs_to_stop(node, seen) == []
    assert g.gm.counters["zombies_cancelled"] == 0
    stale = [replace(mine, run_id=f"{job}.9")]  # a run that is not the job's current one
    assert g.gm.runs_to_stop(node, stale) == [f"{job}.9"]
    assert g.gm.counters["zombies_cancelled"] == 1
