"""A node that holds no lease fences itself (:meth:`NodeRuntime.fence`), without Ray:
every subtask stops (a command's executor is closed with a short grace, synthetic work
leaves the scheduler), each with one log line, counted, reported ``fenced`` to the owner;
nothing starts until the lease is back; a rejoin takes a new incarnation that the
progress reports carry."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from test_runtime_node_runtime import FakeExecutor, Q, make, subtask

from runtime.node_runtime import FENCE_GRACE_S
from workloads.messages import SubtaskPhase
from workloads.model import Node


class Fenced(FakeExecutor):
    grace: float | None = None

    def close(self, grace_s: float | None = None) -> None:
        self.closed, self.grace = True, grace_s


def test_a_node_without_a_lease_stops_every_subtask_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    made: list[Fenced] = []

    def factory(argv: tuple[str, ...], speed: float, out: Path | None,
                env: tuple[tuple[str, str], ...] = ()) -> Fenced:
        made.append(Fenced(argv, cycles=10**6))
        return made[-1]

    rt, sink, _, ended = make(Node("n0", 300.0), factory)
    rt.submit([subtask("proc", rate=50.0, command=("p",)), subtask("syn", rate=50.0)], 0.0)
    rt.tick(0.0)
    rt.tick(Q)
    with caplog.at_level(logging.WARNING, logger="coalloc.runtime"):
        assert rt.fence("no lease: last renewal granted 10.0 s ago", timeout=1.0)
    (ex,) = made
    assert ex.closed and ex.grace == FENCE_GRACE_S
    assert len(rt.scheduler) == 0 and rt.counters["fenced"] == 2
    assert {(o.job_id, o.state) for o in ended} == {
        ("proc", SubtaskPhase.FENCED), ("syn", SubtaskPhase.FENCED)}
    assert all(o.reason.startswith("fenced: no lease") for o in ended)
    lines = [r.getMessage() for r in caplog.records if "fenced" in r.getMessage()]
    assert len(lines) == 2
    assert any("proc[0]" in m and "pid 4242" in m for m in lines), lines
    states = {s.run_id: s.state for s in rt.report([("proc", 0), ("syn", 0)]).subtasks}
    assert states == {"proc": SubtaskPhase.FENCED, "syn": SubtaskPhase.FENCED}
    # Without a lease, what arrives is fenced at its start, not run.
    rt.submit([subtask("later", rate=50.0)], 2 * Q)
    sink.reports.clear()
    rt.tick(2 * Q)
    assert len(rt.scheduler) == 0 and not sink.reports
    assert ended[-1].job_id == "later" and ended[-1].state is SubtaskPhase.FENCED
    # The lease back, under a new incarnation: subtasks start, reports carry it.
    before = rt.incarnation
    inc = rt.rejoin()
    rt.leased()
    assert inc == rt.incarnation != before
    rt.submit([subtask("again", rate=50.0)], 3 * Q)
    rt.tick(3 * Q)
    rt.tick(4 * Q)
    assert sink.reports and {r.incarnation for r in sink.reports} == {inc}
    assert rt.report().incarnation == inc and rt.counters["fenced"] == 3
