"""The local manager's :class:`~workloads.messages.NodeReport`, what the global manager's
once-a-second reconciliation reads instead of the status document: every subtask still
on the node, and of those that left, only those the global manager asks about; applied,
it catches outcomes whose notifications were lost and stops runs that are not current."""

from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path

from tests.unit.runtime.test_runtime_gm_faults import CYCLE, Grid, _three
from workloads.messages import SubtaskOutcome, SubtaskPhase


def tick(g: Grid) -> None:
    """One boundary of the nodes and the controller, without the global manager's
    monitor (no reconciliation)."""
    b = g.k * CYCLE
    g.loop.manual.set(b)
    for node in g.loop.nodes.values():
        node.tick(b)
    g.loop.ctl.ingest(g.loop.reports)
    g.loop.reports.clear()
    g.loop.ctl.control(b)
    g.k += 1


def test_a_report_names_live_subtasks_and_only_the_ended_ones_asked_for(
    tmp_path: Path,
) -> None:
    g = Grid(tmp_path)
    lost: list[SubtaskOutcome] = []
    for node in g.loop.nodes.values():  # the global manager misses every notification
        node.on_finish = lost.append
    (a,) = g.gm.submit([_three()])
    job, nodes = a["job_id"], a["nodes"]
    tick(g)
    tick(g)
    node = g.loop.nodes[nodes[0]]
    rep = node.report()
    assert rep.node == nodes[0] and not rep.loop_running  # ticked by hand, no loop
    (mine,) = rep.subtasks
    assert mine.run_id == job and mine.index == 0
    assert mine.state is SubtaskPhase.RUNNING and mine.done_work is not None
    assert mine.done_work > 0.0 and rep.qos_capacity == node.snapshot()["qos_capacity"]
    for _ in range(5000):  # every subtask finishes, and none of it is heard
        if len(lost) == 3:
            break
        tick(g)
    assert len(lost) == 3
    assert g.gm.job_states()[job] == "running"
    assert node.report().subtasks == ()  # ended, not asked about: left out
    asked = g.gm.running_subtasks(nodes[0])[nodes[0]]
    (ended,) = node.report(asked).subtasks
    assert ended.key == asked[0] and ended.ended and ended.finish_time is not None
    # Smaller than the status document, whose history keeps every ended subtask.
    assert len(pickle.dumps(node.report(asked))) < len(pickle.dumps(node.snapshot()))

    for name in nodes:
        report = g.loop.nodes[name].report(g.gm.running_subtasks(name).get(name, []))
        assert g.gm.apply_report(replace(report, loop_running=True)) == []
    assert g.gm.reconciled == 3 and g.gm.job_states()[job] == "completed"
    finish = {o.index: o.finish_time for o in lost}
    rec = g.gm.job(job)
    assert rec is not None
    assert {s.index: s.finish_time for s in rec.subtasks} == finish


def test_a_report_from_a_stopped_loop_does_not_keep_its_node_alive(tmp_path: Path) -> None:
    g = Grid(tmp_path)
    name = "n0"
    seen = g.gm.last_seen[name]
    g.loop.manual.set(g.loop.manual.now() + 50.0)
    g.gm.apply_report(g.loop.nodes[name].report())  # loop_running False
    assert g.gm.last_seen[name] == seen
    g.gm.apply_report(replace(g.loop.nodes[name].report(), loop_running=True))
    assert g.gm.last_seen[name] == g.gm.clock.now() > seen


def test_a_run_that_is_not_current_is_reported_as_one_to_stop(tmp_path: Path) -> None:
    g = Grid(tmp_path)
    (a,) = g.gm.submit([_three()])
    g.step(2)
    name = a["nodes"][0]
    (mine,) = g.loop.nodes[name].report().subtasks
    stale = replace(g.loop.nodes[name].report(), loop_running=True,
                    subtasks=(mine, replace(mine, run_id=f"{a['job_id']}.7")))
    assert g.gm.apply_report(stale) == [f"{a['job_id']}.7"]
    assert g.gm.counters["zombies_cancelled"] == 1
