"""A controller service rebuilt over its checkpoint (a controller Ray restarted) applies
no report twice, keeps the nodes' incarnations and the recorded ports, and tracks a
resumed job to its end, including subtasks that ended while it was down."""

from __future__ import annotations

import json
from pathlib import Path

from clocks.base import ManualClock
from runtime.config import RuntimeConfig
from runtime.controller_service import ControllerService
from runtime.timebase import ModelClock, TimeBase
from tests.unit.runtime.test_runtime_controller_checks import Sink, Source, rep
from workloads.messages import JobRegistration
from workloads.model import QosClass

JOB = JobRegistration("j", QosClass.STRICT, 0.0, ((0, "n1", 50.0), (1, "n2", 50.0)), 100.0, 50.0)


def build(path: Path, log: Path, now: float = 0.0) -> ControllerService:
    clock = ModelClock(ManualClock(now), TimeBase(0.0, 1.0))
    return ControllerService(RuntimeConfig(), clock, {"n1": 500.0, "n2": 500.0}, Source(),
                             Sink(), log, checkpoint=path,
                             checkpoint_extra={"report_port": 5001, "command_port": 5002})


def test_reports_applied_before_a_restart_are_not_applied_again(tmp_path: Path) -> None:
    ckpt, log = tmp_path / "ctl.json", tmp_path / "phase.jsonl"
    first = build(ckpt, log)
    first.register_node("n1", 7)
    first.register_node("n2", 8)
    first.register_job(JOB)
    first.control(0.0)
    first.ingest([rep("n1", 0, 7, 1), rep("n1", 0, 7, 2), rep("n2", 1, 8, 1)])
    assert first.counters["reports_applied"] == 3
    first.write_checkpoint()
    first.close()
    assert not first.recovered

    again = build(ckpt, log, now=60.0)
    assert again.recovered
    data = ControllerService.read_checkpoint(ckpt)
    assert (data["report_port"], data["command_port"]) == (5001, 5002)
    assert again.incarnations.snapshot() == {"n1": 7, "n2": 8}
    assert again.resume_job(JOB, ended={})
    assert not again.resume_job(JOB, ended={})  # tracked once
    # A replay of what was applied is dropped and counted; what is new is applied.
    again.ingest([rep("n1", 0, 7, 2), rep("n2", 1, 8, 1), rep("n1", 0, 7, 3, tv=9.0)])
    assert again.counters["reports_replayed"] == 2
    assert again.counters["reports_applied"] == 1
    assert again.status()["dropped"]["replayed"] == 2
    # A restarted local manager (a never-seen incarnation) starts its own stream.
    again.ingest([rep("n2", 1, 99, 1)])
    assert again.counters["reports_applied"] == 2


def test_a_resumed_job_closes_with_subtasks_that_ended_while_down(tmp_path: Path) -> None:
    log = tmp_path / "phase.jsonl"
    svc = build(tmp_path / "ctl.json", log, now=100.0)
    svc.register_node("n1", 7)
    svc.register_node("n2", 8)
    assert svc.resume_job(JOB, ended={0: 90.0})
    assert "j" in svc.tracked_jobs()
    svc.ingest([rep("n2", 1, 8, 4, tv=95.0, done=True)])
    assert "j" not in svc.core.jobs and "j" in svc.core.summaries
    svc.close()
    (summary,) = [r for r in map(json.loads, log.read_text().splitlines())
                  if r["type"] == "summary"]
    assert summary["job"] == "j" and summary["completed"] is True


def test_a_run_whose_done_report_was_lost_is_closed_from_the_global_managers_word(
    tmp_path: Path,
) -> None:
    """The last done report went missing (a kill mid-send): the global manager knows the
    run completed; the controller closes it with its summary instead of tracking it
    forever. A run that did not complete is closed with its reason."""
    log = tmp_path / "phase.jsonl"
    svc = build(tmp_path / "ctl.json", log, now=100.0)
    svc.register_node("n1", 7)
    svc.register_node("n2", 8)
    svc.register_job(JOB)
    svc.register_job(JobRegistration("k", QosClass.STRICT, 0.0,
                                     ((0, "n1", 50.0), (1, "n2", 50.0)), 100.0, 50.0))
    svc.control(0.0)
    svc.ingest([rep("n1", 0, 7, 1, tv=80.0, done=True)])  # j's 1 never reports done
    svc.close_run("j", {0: 80.0, 1: 95.0}, "")
    svc.close_run("k", {}, "failed")
    svc.close_run("gone", {0: 1.0}, "")  # not tracked: nothing happens
    assert svc.tracked_jobs() == [] and svc.counters["runs_closed"] == 2
    svc.close()
    summaries = {r["job"]: r for r in map(json.loads, log.read_text().splitlines())
                 if r["type"] == "summary"}
    assert summaries["j"]["completed"] is True and summaries["j"]["turnaround"] == 95.0
    assert summaries["k"]["completed"] is False and summaries["k"]["reason"] == "failed"


def test_a_run_that_completed_while_the_controller_was_down_gets_one_summary(
    tmp_path: Path,
) -> None:
    ckpt, log = tmp_path / "ctl.json", tmp_path / "phase.jsonl"
    k = JobRegistration("k", QosClass.STRICT, 0.0, ((0, "n1", 50.0), (1, "n2", 50.0)),
                        100.0, 50.0)
    first = build(ckpt, log)
    first.register_node("n1", 7)
    first.register_node("n2", 8)
    first.register_job(JOB)
    first.register_job(k)
    first.control(0.0)
    first.write_checkpoint()  # both tracked
    # j completes (its summary is written), then the process is killed before its next
    # checkpoint; k's last done reports die with it.
    first.ingest([rep("n1", 0, 7, 1, done=True), rep("n2", 1, 8, 1, done=True)])
    first.close()

    again = build(ckpt, log, now=200.0)
    # k is an orphan to ask the global manager about; j's summary is in the log already.
    assert again.orphaned_runs() == ["k"]
    # The global manager lists k (completed while the controller was down) with its ends.
    assert again.resume_job(k, ended={0: 90.0, 1: 95.0})
    again.orphans_asked(["k"])
    assert again.orphaned_runs() == [] and again.tracked_jobs() == []
    again.close()
    summaries = [r["job"] for r in map(json.loads, log.read_text().splitlines())
                 if r["type"] == "summary"]
    assert sorted(summaries) == ["j", "k"]


def test_a_checkpoint_removed_by_down_is_not_made_again(tmp_path: Path) -> None:
    ckpt = tmp_path / "ctl.json"
    ctl = build(ckpt, tmp_path / "phase.jsonl")
    ctl.write_checkpoint()
    assert ckpt.exists()
    ckpt.unlink()  # `down`, while this controller still runs
    ctl.write_checkpoint()
    ctl.close()
    assert not ckpt.exists()
