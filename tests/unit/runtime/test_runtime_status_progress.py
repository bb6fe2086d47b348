"""Reported progress in the status document (runtime.status.job_status): a subtask's
reported figures come from its node's report, its ``progress`` is its reported fraction,
and a member whose reported rate is far below its partners' is ``stalled``."""

from __future__ import annotations

from runtime.status import JobRecord, SubtaskRecord, job_status, to_json
from workloads.messages import SubtaskPhase, SubtaskReport
from workloads.model import JobPhase, QosClass


def _job(n: int) -> JobRecord:
    subs = [SubtaskRecord(index=i, node=f"n{i}", work=1000.0, relative_weight=1.0,
                          expected_rate=10.0, executor="process") for i in range(n)]
    return JobRecord(job_id="j", name="j", qos=QosClass.STRICT, user="u", priority=0,
                     state=JobPhase.RUNNING, reason="", submitted_at=0.0, run_id="j",
                     subtasks=subs)


def _report(i: int, fraction: float | None, rate: float | None,
            stalled: bool = False) -> SubtaskReport:
    return SubtaskReport("j", i, SubtaskPhase.RUNNING, reported_time=fraction,
                         reported_end=1.0 if fraction is not None else None,
                         reported_fraction=fraction, reported_rate=rate,
                         progress_reports=1, progress_dropped={}, stalled=stalled)


def test_reported_fraction_is_the_progress_and_the_slow_member_is_stalled() -> None:
    reports = {("j", 0): _report(0, 0.5, 0.01), ("j", 1): _report(1, 0.45, 0.009),
               ("j", 2): _report(2, 0.02, 0.0004)}
    job = to_json(job_status(_job(3), None, reports))
    subs = job["subtasks"]
    assert [s["progress"] for s in subs] == [0.5, 0.45, 0.02]
    assert [s["stalled"] for s in subs] == [False, False, True]
    assert subs[0]["progress_dropped"] == {}


def test_a_node_that_says_stalled_is_kept_and_cpu_subtasks_carry_no_progress_fields() -> None:
    reports = {("j", 0): _report(0, 0.5, 0.01, stalled=True),
               ("j", 1): SubtaskReport("j", 1, SubtaskPhase.RUNNING, cpu_s=1.0)}
    subs = to_json(job_status(_job(2), None, reports))["subtasks"]
    assert subs[0]["stalled"] is True
    assert "stalled" not in subs[1] and "reported_time" not in subs[1]
    assert subs[1]["progress"] is None
