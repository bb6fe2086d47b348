"""The global manager's side of the nodes' leases (:mod:`runtime.lease`) on the in-memory
grid of ``test_runtime_gm_faults``: a lost node's gang starts again only once that node's
lease has lapsed; a node that comes back is refused under its old incarnation (its
renewals and reports counted) and rejoins under a new one; a subtask its node fenced ends
its gang by the node-loss policy; and a global manager that was stopped does not count
its own downtime as the nodes' silence."""

from __future__ import annotations

from pathlib import Path

from runtime.lease import LEASE_MARGIN_S, Answer
from tests.unit.runtime.test_runtime_gm_faults import CYCLE, Grid, _three
from workloads.messages import SubtaskOutcome, SubtaskPhase
from workloads.model import EndPolicy, JobPhase


def test_a_lost_nodes_gang_starts_again_only_after_its_lease_lapsed(tmp_path: Path) -> None:
    g = Grid(tmp_path)
    cfg = g.gm.config
    (a,) = g.gm.submit([_three()])
    job = a["job_id"]
    g.step(5)
    lost = a["nodes"][1]
    g.silent.add(lost)
    granted = g.gm.leases.granted_at[lost]  # its last renewal, real s
    g.run_until(lambda: g.gm.jobs[job].attempt == 2)
    info = g.gm.jobs[job]
    lapse_model = (granted + cfg.lease_seconds + LEASE_MARGIN_S) * cfg.time_scale
    # Declared lost after node_timeout (20) cycles; its lease lapses later here (lease
    # 2/3 of 2 s + 2 s margin at this time scale): the new run waits for it.
    assert lost in g.gm.lost and g.gm.clock.now() < lapse_model
    assert info.not_before is not None and info.not_before >= lapse_model - 1e-6
    assert "lease lapsed" in info.reason
    g.run_until(lambda: g.gm.jobs[job].state is JobPhase.RUNNING)
    info = g.gm.jobs[job]
    assert info.start_at is not None and info.start_at >= lapse_model - 1e-6
    assert info.not_before is None and lost not in [s.node for s in info.subtasks]
    g.run_until(lambda: g.state(job) == "completed")


def test_a_node_back_after_its_loss_is_refused_as_its_old_incarnation_and_rejoins(
    tmp_path: Path,
) -> None:
    g = Grid(tmp_path)
    (a,) = g.gm.submit([_three()])
    job = a["job_id"]
    g.step(5)
    lost = a["nodes"][0]
    node = g.loop.nodes[lost]
    old = node.incarnation
    g.silent.add(lost)
    g.run_until(lambda: lost in g.gm.lost)
    # Its report and its outcome of the old run, as they arrive when the cut heals:
    # dropped and counted; it stays lost.
    stale = node.report(g.gm.running_subtasks(lost).get(lost, []))
    assert g.gm.apply_report(stale) == []
    g.gm.subtask_ended(SubtaskOutcome(f"{job}", 0, lost, SubtaskPhase.FENCED, 0.0, None,
                                      "fenced: no lease"))
    assert g.gm.counters["stale_reports"] == 1 and g.gm.counters["stale_outcomes"] == 1
    assert lost in g.gm.lost and lost in g.gm.core.down
    assert g.gm.renew_lease(lost, old) is Answer.LOST
    node.fence("the global manager declared this node lost", timeout=1.0)
    node.rejoin()
    assert g.gm.renew_lease(lost, node.incarnation) is Answer.REJOINED
    assert g.gm.lease_counters()["stale_renewals"] == 1
    g.silent.discard(lost)
    g.step(1)
    assert lost not in g.gm.lost and lost not in g.gm.core.down
    assert g.gm.apply_report(node.report()) == [] and g.gm.counters["stale_reports"] == 1
    assert g.gm.renew_lease(lost, old) is Answer.LOST  # still refused


def test_a_fenced_subtask_ends_its_gang_by_the_node_loss_policy(tmp_path: Path) -> None:
    g = Grid(tmp_path)
    (a,) = g.gm.submit([_three(on_failure=EndPolicy.FAIL)])  # node loss: requeue (synthetic)
    job = a["job_id"]
    g.step(3)
    run = g.gm.jobs[job].run_id
    g.gm.subtask_ended(SubtaskOutcome(run, 2, a["nodes"][2], SubtaskPhase.FENCED, 30.0, None,
                                      "fenced: no lease"))
    info = g.gm.jobs[job]
    assert info.attempt == 2 and info.state is not JobPhase.FAILED
    assert "subtask 2 fenced: no lease on" in info.history[0]
    assert g.gm.counters["requeued"] == 1 and g.gm.counters["failed_subtask"] == 0


def test_a_stopped_global_manager_does_not_count_its_downtime_as_silence(
    tmp_path: Path,
) -> None:
    g = Grid(tmp_path)
    g.step(3)
    g.silent.add("n2")
    g.step(5)
    g.k += 60  # the global manager stopped for 60 cycles (6 real s): nothing checked
    g.step(1)
    assert "n2" not in g.gm.lost  # 6 silent cycles it saw, not 66
    silent = g.gm.health.silent_cycles("n2", g.gm.clock.now(), CYCLE)
    assert 5 <= silent <= 7
    g.run_until(lambda: "n2" in g.gm.lost)  # it still counts what it sees
