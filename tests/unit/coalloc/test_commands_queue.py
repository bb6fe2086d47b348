"""``coalloc queue`` and ``coalloc status JOB`` show a pending job's estimated start."""

from __future__ import annotations

import time
from typing import Any

import pytest

from coalloc.commands import queue, status
from runtime.status import QueueRow, StatusDocument


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Local time is UTC for the test (times are printed in local time, as squeue)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _fields(job_id: str, state: str, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(job_id=job_id, name="n", user="u", qos="strict", priority=0,
                                state=state, wait=12.0, attempt=1, nodes=[], reason="",
                                pending_reasons=None, start_at=None, estimated_start=None,
                                estimated_start_time=None)
    return base | kw


def _row(job_id: str, state: str, **kw: Any) -> QueueRow:
    return QueueRow.model_validate(_fields(job_id, state, **kw))


def _doc(st: dict[str, Any]) -> StatusDocument:
    """``st`` with the fields these tests do not look at filled in neutrally."""
    jobs = [dict(j, submitted_at=0.0, run_id=j["job_id"]) for j in st["jobs"]]
    counters = dict(report_endpoint=None, command_endpoint=None, controller={}, transport={},
                    commands_transport={}, dropped={}, auth_failures=None, local_managers={})
    security = dict(mode="unknown") | st["security"]
    return StatusDocument.model_validate(dict(
        st, queue=None, journal_error=None, global_counters={}, control_period=1.0,
        controller={"running": True, "error": None, "period_time": None}, jobs=jobs,
        counters=counters | st["counters"], security=security,
        clock=st["clock"] or None))


def test_the_queue_has_an_est_start_column_like_squeue_start(utc: Any) -> None:
    rows = [
        _row("j1", "pending", estimated_start=1234.0,
             estimated_start_time="2026-11-25T15:02:11+00:00"),
        _row("j2", "pending", estimated_start=None, estimated_start_time=None),
        _row("j3", "running", nodes=["a"]),
    ]
    lines = queue.render(rows).splitlines()
    assert "EST. START" in lines[0]
    assert "2026-11-25T15:02:11" in lines[1]
    assert "N/A" in lines[2]
    col = lines[0].index("EST. START")
    assert lines[3][col:].split()[0] == "-"


def test_start_text_without_a_wall_clock_gives_the_model_time() -> None:
    assert queue.start_text(_row("j", "pending", estimated_start=90.0)) == "model 90 s"


@pytest.mark.parametrize(("seconds", "text"), [
    (-3.0, "now"), (0.2, "now"), (45.0, "in 45s"), (720.0, "in 12m"), (7500.0, "in 2h05m"),
])
def test_time_from_now(seconds: float, text: str) -> None:
    assert queue.time_from_now(seconds) == text


def test_status_of_a_pending_job_has_an_estimated_start_line(utc: Any) -> None:
    job = dict(_fields("j1", "pending", estimated_start=1320.0,
                       estimated_start_time="2026-11-25T15:02:11+00:00"),
               subtasks=[], pending_reasons=[], history=[])
    st = {
        "address": "x", "policy": "sq", "model_time": 600.0, "time_scale": 2.0,
        "cycle": 30.0, "report_endpoint": "tcp://x", "phase_log": "p", "clock": {},
        "counters": {}, "security": {}, "nodes": [], "jobs": [job],
    }
    out = status.render(_doc(st), detail=True)
    # (1320 - 600) model s at 2 model s per real second: 360 real s from now.
    assert "  estimated start: 2026-11-25T15:02:11 (in 6m; model time 1320.0 s)" in out
    job["estimated_start"] = None
    assert "estimated start: N/A" in status.render(_doc(st), detail=True)
