"""The cycle steps both drivers share (global_manager/engine.py)."""

from __future__ import annotations

from typing import Any

import pytest

from coallocator.core import ControllerCore
from global_manager.engine import apply_commands, control_cycle, node_cycle, start_run
from local_manager.scheduler import LocalScheduler
from workloads.messages import JobRegistration, ReweightCommand
from workloads.model import Node, QosClass, Subtask


def _sub(job: str, i: int, node: str, rate: float = 50.0) -> Subtask:
    return Subtask(job, i, node, QosClass.STRICT, 1e6, 1.0, rate, rate)


def test_start_run_registers_first_then_places_each_node_once_in_order() -> None:
    calls: list[Any] = []
    subs = [_sub("j", 0, "b"), _sub("j", 1, "a"), _sub("j", 2, "b")]
    reg = JobRegistration.of("j", _spec(), 0.0, subs)
    start_run(reg, subs, lambda r: calls.append(("register", r.job_id)),
              lambda n, g: calls.append(("place", n, [s.index for s in g])))
    assert calls == [("register", "j"), ("place", "b", [0, 2]), ("place", "a", [1])]
    calls.clear()
    start_run(None, subs[:1], lambda r: calls.append("register"),
              lambda n, g: calls.append(n))
    assert calls == ["b"]


def test_a_failing_call_stops_the_start_where_it_failed() -> None:
    placed: list[str] = []

    def place(node: str, group: list[Subtask]) -> None:
        if node == "a":
            raise ConnectionError(node)
        placed.append(node)

    with pytest.raises(ConnectionError):
        start_run(None, [_sub("j", 0, "b"), _sub("j", 1, "a"), _sub("j", 2, "c")],
                  lambda r: None, place)
    assert placed == ["b"]


def _spec() -> Any:
    from workloads.model import JobSpec, SubtaskSpec

    return JobSpec("x", QosClass.STRICT, (SubtaskSpec(1.0),), 10.0, 5.0)


def test_node_cycle_applies_the_commands_then_steps() -> None:
    sched = LocalScheduler(Node("a", 100.0))
    assert node_cycle(sched, (), 10.0, 10.0)[0] is None  # an empty node does not step
    sched.add(_sub("j", 0, "a"), 0.0)
    cmds = [ReweightCommand("j", 0, "a", 1, 20.0, 0.0), ReweightCommand("j", 9, "a", 2, 5.0, 0.0),
            ReweightCommand("j", 0, "b", 3, 5.0, 0.0)]
    result, counts = node_cycle(sched, cmds, 10.0, 10.0)
    assert (counts.applied, counts.unknown, counts.other_node) == (1, 1, 1)
    live = sched.get(("j", 0))
    assert result is not None and live is not None and live.weight == 20.0
    assert apply_commands(sched, []).applied == 0


def test_control_cycle_sends_every_command_it_decides() -> None:
    ctl = ControllerCore(node_budgets={"a": 100.0, "b": 100.0})
    ctl.register_job(JobRegistration("j", QosClass.STRICT, 0.0,
                                     ((0, "a", 50.0), (1, "b", 50.0)), 10.0, 5.0))
    from workloads.messages import ProgressReport

    ctl.ingest(ProgressReport("j", 0, "a", 1, 1, 100.0, 100.0, 5000.0, 5000.0))
    ctl.ingest(ProgressReport("j", 1, "b", 1, 1, 100.0, 10.0, 5000.0, 500.0))
    sent: list[ReweightCommand] = []
    out = control_cycle(ctl, 100.0, sent.append)
    assert out and sent == out
