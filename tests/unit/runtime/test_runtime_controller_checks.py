"""The controller checks reports against its own view: a report must come from its
subtask's node and from that node's current incarnation (runtime.controller_service)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from clocks.base import ManualClock
from coallocator.messages import ProgressReport, ReweightCommand
from runtime.config import RuntimeConfig
from runtime.controller_service import ControllerService, Incarnations
from runtime.timebase import ModelClock, TimeBase
from workloads.messages import JobRegistration
from workloads.model import QosClass


class Source:
    endpoint = "test://reports"

    def poll(self, timeout_s: float) -> list[ProgressReport]:
        return []

    def counters(self) -> dict[str, Any]:
        return {"dropped": {"spoofed_node": 2}, "secure": True, "auth_failures": 3,
                "refused": {"plaintext": 3}}

    def close(self) -> None:
        pass


class Sink:
    endpoint = "test://commands"

    def publish(self, command: ReweightCommand) -> bool:
        return True

    def poll_incoming(self) -> int:
        return 0

    def counters(self) -> dict[str, Any]:
        return {"secure": True, "auth_failures": 1, "refused": {"unknown_key": 1},
                "spoofed_node": 1}

    def close(self) -> None:
        pass


def service() -> ControllerService:
    clock = ModelClock(ManualClock(0.0), TimeBase(0.0, 1.0))
    svc = ControllerService(RuntimeConfig(), clock, {"n1": 500.0, "n2": 500.0}, Source(),
                            Sink(), None)
    svc.register_job(JobRegistration("j", QosClass.STRICT, 0.0, ((0, "n1", 50.0), (1, "n2", 50.0)),
                     100.0, 50.0))
    svc.control(0.0)  # the job joins
    return svc


def rep(node: str, subtask: int, incarnation: int, seq: int, tv: float = 5.0,
        done: bool = False) -> ProgressReport:
    return ProgressReport("j", subtask, node, incarnation, seq, 10.0, tv, 10.0, 10.0, done)


def test_a_report_from_another_node_than_its_subtasks_is_dropped() -> None:
    svc = service()
    svc.ingest([rep("n2", 0, 1, 1, tv=1e7, done=True)])  # subtask 0 is on n1
    assert svc.counters["reports_wrong_node"] == 1 and svc.counters["reports_applied"] == 0
    view = svc.core.view("j")
    assert view is not None and view.virtual_times[0] == 0.0 and not view.done[0]
    svc.ingest([rep("n1", 0, 1, 2, tv=7.0)])
    assert svc.counters["reports_applied"] == 1
    view = svc.core.view("j")
    assert view is not None and view.virtual_times[0] == 7.0


def test_a_replaced_incarnation_is_dropped_and_a_new_one_takes_over() -> None:
    svc = service()
    svc.register_node("n1", 11)
    svc.ingest([rep("n1", 0, 11, 1, tv=3.0)])
    svc.ingest([rep("n1", 0, 22, 1, tv=4.0)])  # a restarted manager: new incarnation
    svc.ingest([rep("n1", 0, 11, 2, tv=1e7, done=True)])  # its predecessor, too late
    c = svc.counters
    assert (c["reports_applied"], c["reports_old_incarnation"]) == (2, 1)
    view = svc.core.view("j")
    assert view is not None and view.virtual_times[0] == 4.0 and not view.done[0]
    status = svc.status()
    assert status["dropped"]["old_incarnation"] == 1
    assert status["incarnations"] == {"n1": 22}


def test_status_merges_the_security_counters_of_both_sockets() -> None:
    svc = service()
    svc.ingest([rep("n2", 0, 1, 1)])
    st = svc.status()
    assert st["security"]["mode"] == "curve"
    assert st["security"]["auth_failures"] == 4
    assert st["security"]["refused"] == {"plaintext": 3, "unknown_key": 1, "bad_handshake": 0}
    assert st["security"]["spoofed_node"] == 3
    assert st["dropped"]["wrong_node"] == 1 and st["dropped"]["spoofed_node"] == 2


def test_registration_overrides_the_reports() -> None:
    inc = Incarnations(keep=2)
    assert inc.check("n", 5)  # first seen: current
    inc.register("n", 6)
    assert not inc.check("n", 5)
    inc.register("n", 5)  # registered again: current once more
    assert inc.check("n", 5) and not inc.check("n", 6)
    assert inc.current("n") == 5 and inc.current("m") is None


@given(st.lists(st.integers(0, 6), min_size=1, max_size=40))
def test_incarnation_rule_against_a_model(sequence: list[int]) -> None:
    """A model of the rule: accepted iff the incarnation is current or not among the
    last ``keep`` replaced ones (then it becomes current)."""
    keep = 3
    inc = Incarnations(keep=keep)
    current: int | None = None
    retired: list[int] = []
    for i in sequence:
        expected = current is None or i == current or i not in retired
        assert inc.check("n", i) is expected
        if expected and i != current:
            if current is not None:
                retired = (retired + [current])[-keep:]
            retired = [r for r in retired if r != i]
            current = i
        assert inc.current("n") == current


class RecordingMetrics:
    """Records each export: the period's model time and the jobs it carried."""

    def __init__(self) -> None:
        self.exports: list[tuple[float | None, list[str]]] = []

    def period(self, views: Any, received: int, dropped: Any, now: float | None = None) -> None:
        self.exports.append((now, [v.job_id for v in views]))


@given(st.floats(min_value=0.05, max_value=50.0), st.integers(min_value=1, max_value=400))
def test_metrics_are_exported_on_the_first_period_then_once_per_export_interval(
    scale: float, periods: int
) -> None:
    from runtime.controller_service import METRICS_EVERY_S

    config = RuntimeConfig(time_scale=scale)
    clock = ModelClock(ManualClock(0.0), TimeBase(0.0, scale))
    metrics = RecordingMetrics()
    svc = ControllerService(config, clock, {"n1": 500.0, "n2": 500.0}, Source(), Sink(), None,
                            metrics)
    svc.register_job(JobRegistration("j", QosClass.STRICT, 0.0,
                                     ((0, "n1", 50.0), (1, "n2", 50.0)), 100.0, 50.0))
    times = [k * config.control_period for k in range(periods)]
    for t in times:
        svc.control(t)
    every = METRICS_EVERY_S * scale
    exported = [t for t, _ in metrics.exports]
    assert exported[0] == 0.0
    assert all(b - a >= every for a, b in zip(exported, exported[1:]))
    # None is skipped past its interval: after each export, the next period at or past
    # the interval exports.
    for a, b in zip(exported, exported[1:] + [None]):
        due = [t for t in times if t >= a + every]
        assert (due[0] if due else None) == b
    assert all(jobs == ["j"] for t, jobs in metrics.exports if t and t > 0)


class Burst(Source):
    """Gives ``reports`` at the first poll, then nothing: later polls wait their timeout
    (at most 10 ms) for reports that never come, as the transport's would."""

    def __init__(self, reports: list[ProgressReport]) -> None:
        import threading

        self.reports = reports
        self.polls = 0
        self.more = threading.Event()  # never set: no report after the burst

    def poll(self, timeout_s: float) -> list[ProgressReport]:
        self.polls += 1
        out, self.reports = self.reports, []
        if not out:
            self.more.wait(min(timeout_s, 0.01))
        return out


def test_a_period_whose_reports_are_all_in_is_evaluated_before_its_lag() -> None:
    """Model time stands still between the boundary (30 s) and the period's latest time
    (30 s + control_lag x q = 45 s): with both members' reports for 30 s in, the loop
    evaluates the period at once, so its commands have the rest of the cycle to travel."""
    import threading

    from support import wait_until

    config = RuntimeConfig()
    real = ManualClock(40.0)
    clock = ModelClock(real, TimeBase(0.0, 1.0))
    burst = Burst([ProgressReport("j", i, n, 0, 1, 30.0, 30.0, 10.0, 10.0)
                   for i, n in enumerate(("n1", "n2"))])
    svc = ControllerService(config, clock, {"n1": 500.0, "n2": 500.0}, burst, Sink(), None)
    svc.register_job(JobRegistration("j", QosClass.STRICT, 0.0,
                                     ((0, "n1", 50.0), (1, "n2", 50.0)), 100.0, 50.0))
    svc.control(0.0)
    assert config.cycle + config.control_lag * config.cycle > real.now()  # before its lag
    loop = threading.Thread(target=svc.run, daemon=True)
    loop.start()
    try:
        wait_until(lambda: svc.period_time == config.cycle, timeout=30, interval=0.01,
                   message="the period at 30 s to be evaluated")
        assert real.now() == 40.0
    finally:
        svc.stop()
        loop.join(timeout=30)


def test_a_period_with_a_report_missing_waits_for_its_lag() -> None:
    import threading

    from support import wait_until

    config = RuntimeConfig()
    real = ManualClock(40.0)
    clock = ModelClock(real, TimeBase(0.0, 1.0))
    burst = Burst([ProgressReport("j", 0, "n1", 0, 1, 30.0, 30.0, 10.0, 10.0)])
    svc = ControllerService(config, clock, {"n1": 500.0, "n2": 500.0}, burst, Sink(), None)
    svc.register_job(JobRegistration("j", QosClass.STRICT, 0.0,
                                     ((0, "n1", 50.0), (1, "n2", 50.0)), 100.0, 50.0))
    svc.control(0.0)
    loop = threading.Thread(target=svc.run, daemon=True)
    loop.start()
    try:
        # The report was taken in at the first poll; many polls later, still waiting.
        wait_until(lambda: burst.polls >= 20, timeout=60, interval=0.01,
                   message="the loop to poll 20 times")
        assert svc.counters["reports_applied"] == 1 and svc.period_time == 0.0
        real.set(45.0)  # its lag is over: evaluated with n2's clock carried
        wait_until(lambda: svc.period_time == config.cycle, timeout=30, interval=0.01,
                   message="the period at 30 s to be evaluated")
    finally:
        svc.stop()
        loop.join(timeout=30)
