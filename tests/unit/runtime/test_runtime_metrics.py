"""The Ray metrics adapters turn cumulative counters into increments and set gauges per
job and subtask (Ray's metric classes replaced by recorders)."""

from __future__ import annotations

from typing import Any

import pytest

from coallocator.core import JobClockView


class Recorder:
    made: dict[str, Recorder] = {}

    def __init__(self, name: str, description: str = "", tag_keys: tuple[str, ...] = ()) -> None:
        self.name = name
        self.tag_keys = tag_keys
        self.calls: list[tuple[str, float, dict[str, str]]] = []
        Recorder.made[name] = self

    def inc(self, value: float = 1.0, tags: dict[str, str] | None = None) -> None:
        assert value > 0  # Ray rejects non-positive increments
        self.calls.append(("inc", value, dict(tags or {})))

    def set(self, value: float, tags: dict[str, str] | None = None) -> None:
        self.calls.append(("set", value, dict(tags or {})))


@pytest.fixture()
def recorders(monkeypatch: pytest.MonkeyPatch) -> dict[str, Recorder]:
    metrics = pytest.importorskip("ray.util.metrics")
    Recorder.made = {}
    monkeypatch.setattr(metrics, "Counter", Recorder)
    monkeypatch.setattr(metrics, "Gauge", Recorder)
    return Recorder.made


def view(job: str, phi: float, weights: tuple[float, ...]) -> JobClockView:
    return JobClockView(job, "strict", (0.0,) * len(weights), phi, 0.0, "none", weights,
                        (0.0,) * len(weights), (False,) * len(weights))


def test_controller_metrics(recorders: dict[str, Any]) -> None:
    from runtime.metrics import RayControllerMetrics

    m = RayControllerMetrics()
    m.period([view("j1", 12.5, (25.0, 50.0))], received=10, dropped={"truncated": 2})
    m.period([view("j1", 3.0, (30.0, 45.0))], received=10, dropped={"truncated": 5,
                                                                     "bad_schema": 0})
    phase = recorders["coalloc_phase_difference_seconds"].calls
    assert phase == [("set", 12.5, {"job": "j1"}), ("set", 3.0, {"job": "j1"})]
    assert recorders["coalloc_reports_received"].calls == [("inc", 10, {})]
    assert recorders["coalloc_reports_dropped"].calls == [
        ("inc", 2, {"reason": "truncated"}), ("inc", 3, {"reason": "truncated"})
    ]
    weights = recorders["coalloc_subtask_weight"].calls
    assert weights[-2:] == [("set", 30.0, {"job": "j1", "subtask": "0"}),
                            ("set", 45.0, {"job": "j1", "subtask": "1"})]


def test_node_metrics(recorders: dict[str, Any]) -> None:
    from runtime.metrics import RayNodeMetrics

    m = RayNodeMetrics("n0")
    m.update({"reports_sent": 4, "reports_dropped": 0}, running=2)
    m.update({"reports_sent": 4, "reports_dropped": 1}, running=1)
    assert recorders["coalloc_node_reports_sent"].calls == [("inc", 4, {"node": "n0"})]
    assert recorders["coalloc_node_reports_send_dropped"].calls == [("inc", 1, {"node": "n0"})]
    assert recorders["coalloc_node_subtasks"].calls == [("set", 2.0, {"node": "n0"}),
                                                        ("set", 1.0, {"node": "n0"})]
