"""The Ray metrics adapters turn cumulative counters into increments and set gauges per
job and subtask, and per node and health (Ray's metric classes replaced by recorders);
the metric definitions give the names Prometheus sees."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from coallocator.core import JobClockView
from runtime.metrics import METRICS, MetricDef, MetricKind, exported_names


class Recorder:
    made: dict[str, Recorder] = {}

    def __init__(self, name: str, description: str = "", tag_keys: tuple[str, ...] = (),
                 boundaries: list[float] | None = None) -> None:
        self.name = name
        self.boundaries = boundaries
        self.tag_keys = tag_keys
        self.calls: list[tuple[str, float, dict[str, str]]] = []
        Recorder.made[name] = self

    def inc(self, value: float = 1.0, tags: dict[str, str] | None = None) -> None:
        assert value > 0  # Ray rejects non-positive increments
        self.calls.append(("inc", value, dict(tags or {})))

    def set(self, value: float, tags: dict[str, str] | None = None) -> None:
        self.calls.append(("set", value, dict(tags or {})))

    def observe(self, value: float, tags: dict[str, str] | None = None) -> None:
        self.calls.append(("observe", value, dict(tags or {})))


@pytest.fixture()
def recorders(monkeypatch: pytest.MonkeyPatch) -> dict[str, Recorder]:
    metrics = pytest.importorskip("ray.util.metrics")
    Recorder.made = {}
    monkeypatch.setattr(metrics, "Counter", Recorder)
    monkeypatch.setattr(metrics, "Gauge", Recorder)
    monkeypatch.setattr(metrics, "Histogram", Recorder)
    return Recorder.made


def view(job: str, phi: float, weights: tuple[float, ...], mean: float = 0.0,
         done: tuple[bool, ...] | None = None) -> JobClockView:
    n = len(weights)
    return JobClockView(job, "strict", (0.0,) * n, phi, mean, "none", weights, (0.0,) * n,
                        done or (False,) * n, rate_caps=(10.0,) * n, overall_deviation=40.0)


def test_controller_metrics(recorders: dict[str, Any]) -> None:
    from runtime.metrics import RayControllerMetrics

    m = RayControllerMetrics()
    m.period([view("j1", 12.5, (25.0, 50.0))], received=10, dropped={"truncated": 2})
    m.period([view("j1", 3.0, (30.0, 45.0))], received=10, dropped={"truncated": 5,
                                                                     "bad_schema": 0})
    phase = recorders["coalloc_phase_difference_seconds"].calls
    assert phase == [("set", 12.5, {"job_id": "j1"}), ("set", 3.0, {"job_id": "j1"})]
    assert recorders["coalloc_reports_received"].calls == [("inc", 10, {})]
    assert recorders["coalloc_reports_dropped"].calls == [
        ("inc", 2, {"reason": "truncated"}), ("inc", 3, {"reason": "truncated"})
    ]
    weights = recorders["coalloc_subtask_weight"].calls
    assert weights[-2:] == [("set", 30.0, {"job_id": "j1", "subtask": "0"}),
                            ("set", 45.0, {"job_id": "j1", "subtask": "1"})]


def test_node_metrics(recorders: dict[str, Any]) -> None:
    from runtime.metrics import RayNodeMetrics

    m = RayNodeMetrics("n0")
    m.update({"reports_sent": 4, "reports_dropped": 0}, running=2)
    m.update({"reports_sent": 4, "reports_dropped": 1}, running=1)
    assert recorders["coalloc_node_reports_sent"].calls == [("inc", 4, {"node": "n0"})]
    assert recorders["coalloc_node_reports_send_dropped"].calls == [("inc", 1, {"node": "n0"})]
    assert recorders["coalloc_node_subtasks"].calls == [("set", 2.0, {"node": "n0"}),
                                                        ("set", 1.0, {"node": "n0"})]


def test_node_progress_metrics(recorders: dict[str, Any]) -> None:
    from runtime.metrics import RayNodeMetrics

    m = RayNodeMetrics("n0")
    m.update({"progress_received": 5, "progress_dropped_backwards": 0,
              "progress_dropped_bad_key": 2}, running=1, stalled=1)
    m.update({"progress_received": 7, "progress_dropped_backwards": 1,
              "progress_dropped_bad_key": 2}, running=1, stalled=0)
    assert recorders["coalloc_progress_reports"].calls == [("inc", 5, {"node": "n0"}),
                                                           ("inc", 2, {"node": "n0"})]
    assert recorders["coalloc_progress_dropped"].calls == [
        ("inc", 2, {"node": "n0", "reason": "bad_key"}),
        ("inc", 1, {"node": "n0", "reason": "backwards"})]
    assert recorders["coalloc_stalled_subtasks"].calls == [("set", 1.0, {"node": "n0"}),
                                                           ("set", 0.0, {"node": "n0"})]


def test_controller_metrics_windows_deviation_caps_and_a_gap_for_an_ended_job(
    recorders: dict[str, Any]
) -> None:
    from runtime.metrics import RayControllerMetrics

    m = RayControllerMetrics()
    m.period([view("j1", 5.0, (25.0, 50.0), mean=880.0)], 0, {}, now=900.0)
    assert recorders["coalloc_overall_deviation_seconds"].calls == [
        ("set", -20.0, {"job_id": "j1"})]
    assert recorders["coalloc_overall_window_seconds"].calls == [("set", 40.0, {"job_id": "j1"})]
    # No asynchrony window: nothing set rather than an infinity.
    assert recorders["coalloc_asynchrony_window_seconds"].calls == []
    assert recorders["coalloc_rate_cap"].calls == [
        ("set", 10.0, {"job_id": "j1", "subtask": "0"}),
        ("set", 10.0, {"job_id": "j1", "subtask": "1"})]
    assert recorders["coalloc_tracked_jobs"].calls == [("set", 1.0, {})]
    # One subtask left: the controller no longer measures a phase difference.
    m.period([view("j1", 9.0, (25.0, 50.0), done=(True, False))], 0, {}, now=930.0)
    assert len(recorders["coalloc_phase_difference_seconds"].calls) == 1
    m.period([], 0, {}, now=960.0)
    last = recorders["coalloc_phase_difference_seconds"].calls[-1]
    assert last[0] == "set" and math.isnan(last[1]) and last[2] == {"job_id": "j1"}
    caps = recorders["coalloc_rate_cap"].calls[-2:]
    assert all(math.isnan(c[1]) for c in caps)
    assert recorders["coalloc_tracked_jobs"].calls[-1] == ("set", 0.0, {})
    # Set to NaN once only.
    n = len(recorders["coalloc_phase_difference_seconds"].calls)
    m.period([], 0, {}, now=990.0)
    assert len(recorders["coalloc_phase_difference_seconds"].calls) == n


def test_global_metrics(recorders: dict[str, Any]) -> None:
    from runtime.metrics import QueueGauges, RayGlobalMetrics

    m = RayGlobalMetrics()
    assert recorders["coalloc_placement_cycle_seconds"].boundaries
    m.placement_cycle(0.004)
    assert recorders["coalloc_placement_cycle_seconds"].calls == [("observe", 0.004, {})]
    m.state(QueueGauges(pending=3, running=1, oldest_wait=120.0,
                        node_health=(("a", "up"), ("b", "stale"), ("c", "up"))))
    assert recorders["coalloc_pending_jobs"].calls == [("set", 3.0, {})]
    assert recorders["coalloc_oldest_pending_wait_seconds"].calls == [("set", 120.0, {})]
    nodes = {c[2]["health"]: c[1] for c in recorders["coalloc_nodes"].calls}
    assert nodes == {"up": 2.0, "stale": 1.0, "lost": 0.0}
    health = {(c[2]["node"], c[2]["health"]): c[1] for c in recorders["coalloc_node_health"].calls}
    assert health[("b", "stale")] == 1.0 and health[("b", "up")] == 0.0
    assert sum(health.values()) == 3.0


def test_every_metric_adapter_builds_exactly_the_defined_metrics(
    recorders: dict[str, Any]
) -> None:
    from runtime.metrics import RayControllerMetrics, RayGlobalMetrics, RayNodeMetrics

    RayControllerMetrics()
    RayNodeMetrics("n0")
    RayGlobalMetrics()
    assert set(recorders) == {m.name for m in METRICS}
    for m in METRICS:
        assert tuple(recorders[m.name].tag_keys) == m.tags
        assert "job" not in m.tags  # Prometheus' scrape-job label


@pytest.mark.parametrize("m", METRICS, ids=lambda m: m.name)
def test_prometheus_names(m: MetricDef) -> None:
    names = m.prometheus_names()
    assert all(n.startswith("ray_" + m.name) for n in names)
    assert set(names) <= exported_names()
    if m.kind is MetricKind.COUNTER:
        assert names == ("ray_" + m.name + "_total",)


class GlobalRecorder:
    """The global manager's hooks, recorded."""

    def __init__(self) -> None:
        self.cycles: list[float] = []

    def placement_cycle(self, seconds: float) -> None:
        self.cycles.append(seconds)

    def state(self, gauges: Any) -> None:
        raise AssertionError("the actor publishes the gauges, not the service")


def test_the_global_service_gauges_and_its_placement_cycle_hook(tmp_path: Path) -> None:
    from runtime.global_service import GlobalService
    from tests.unit.runtime.test_runtime_gm_faults import Grid
    from tests.unit.runtime.test_runtime_wiring import strict

    g = Grid(tmp_path)
    hooks = GlobalRecorder()
    g.gm = GlobalService(g.gm.nodes, g.gm.config, g.gm.clock, g.dispatch, None, hooks)
    g.loop.gm = g.gm
    idle = g.gm.gauges()
    assert (idle.pending, idle.running, idle.oldest_wait) == (0, 0, 0.0)
    assert {h for _, h in idle.node_health} == {"up"}
    big = strict("big", [300, 300, 300, 300], [4, 4, 4, 4], 300.0, 100.0)
    (a,) = g.gm.submit([big])
    (b,) = g.gm.submit([big])
    assert a["admitted"] and b["pending"]
    ran = len(hooks.cycles)
    assert ran >= 1 and all(s >= 0 for s in hooks.cycles)
    g.step(3)
    assert len(hooks.cycles) == ran  # nothing changed: the core skips, nothing observed
    gauges = g.gm.gauges()
    assert (gauges.pending, gauges.running) == (1, 1)
    queued = g.gm.jobs[b["job_id"]].queued_at
    assert queued is not None and gauges.oldest_wait == g.gm.clock.now() - queued > 0
    g.silent.add("n2")
    g.step(12)  # stale after stall_cycles (10) of silence
    assert dict(g.gm.gauges().node_health)["n2"] == "stale"
    g.step(10)  # lost after node_timeout (20)
    assert dict(g.gm.gauges().node_health)["n2"] == "lost"
