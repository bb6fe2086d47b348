"""ControllerCore with late reports (``catch_up``): a local manager that is late and will
catch up its missed cycles must not show as phase difference."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coallocator.controller import ControllerConfig, ControlMode
from coallocator.core import ControllerCore
from coallocator.messages import ProgressReport
from coallocator.phase_log import PeriodRecord, SummaryRecord
from workloads.messages import JobRegistration
from workloads.model import QosClass

Q = 30.0  # s, one cycle (= the control period here)


def report(index: int, real: float, virtual: float, rate: float = 1.0,
           done: bool = False) -> ProgressReport:
    """Subtask ``index`` of job j1 after the cycle ending at ``real`` (s): its clock at
    ``virtual`` (s), having run at ``rate`` times its expected rate."""
    return ProgressReport("j1", index, f"n{index}", 0, 0, real, virtual, 100.0, 100.0 * rate,
                          done)


def gang(catch_up: float, enabled: bool = True,
         pace: bool = False) -> tuple[ControllerCore, list[object]]:
    """Job j1 of two members on n0 and n1; ``pace``: under pace control (the product's
    ``sq``), with a control period of one cycle."""
    records: list[object] = []
    config = ControllerConfig(mode=ControlMode.PACE) if pace else ControllerConfig()
    c = ControllerCore(config, enabled, {"n0": 100.0, "n1": 100.0},
                       records.append, period=Q if pace else None, catch_up=catch_up)
    c.register_job(JobRegistration("j1", QosClass.STRICT, 0.0,
                                   ((0, "n0", 50.0), (1, "n1", 50.0)), 500.0, 100.0))
    return c, records


def periods(records: list[object]) -> list[PeriodRecord]:
    return [r for r in records if isinstance(r, PeriodRecord)]


@pytest.mark.parametrize("enabled", [True, False])
def test_a_late_nodes_clock_is_carried_to_the_period_not_counted_stale(enabled: bool) -> None:
    c, records = gang(catch_up=10 * Q, enabled=enabled)
    # Both members run at the expected rate; n1's manager is 3 cycles late: its last
    # report describes T_R = 210 s while the period is evaluated at 300 s.
    c.ingest(report(0, 300.0, 300.0))
    c.ingest(report(1, 210.0, 210.0))
    c.control_period(300.0)
    (rec,) = periods(records)
    assert rec.phase_difference == pytest.approx(0.0)
    assert rec.mean_virtual == pytest.approx(300.0)
    assert rec.estimated == {"1": pytest.approx(90.0)}
    assert c.estimated_clocks == 1


def test_the_catch_up_reports_then_close_the_period_without_an_estimate() -> None:
    c, records = gang(catch_up=10 * Q)
    c.ingest(report(0, 300.0, 300.0))
    c.ingest(report(1, 210.0, 210.0))
    c.control_period(300.0)
    # n1 catches up: its cycles 240..330 arrive in a burst, as does n0's 330.
    for t in (240.0, 270.0, 300.0, 330.0):
        c.ingest(report(1, t, t))
    c.ingest(report(0, 330.0, 330.0))
    c.control_period(330.0)
    second = periods(records)[-1]
    assert second.phase_difference == pytest.approx(0.0) and second.estimated is None
    c.ingest(report(0, 360.0, 360.0, done=True))
    c.ingest(report(1, 360.0, 360.0, done=True))
    (summary,) = [r for r in records if isinstance(r, SummaryRecord)]
    assert summary.periods == 2 and summary.estimated_periods == 1
    assert summary.mean_phase_difference == pytest.approx(0.0)


def test_a_controller_that_is_late_carries_newer_reports_back() -> None:
    c, records = gang(catch_up=10 * Q)
    # The controller evaluates 300 s after n1 has already reported the cycle ending 330.
    c.ingest(report(0, 300.0, 300.0, rate=0.5))
    c.ingest(report(1, 330.0, 315.0, rate=0.5))
    c.control_period(300.0)
    (rec,) = periods(records)
    assert rec.phase_difference == pytest.approx(0.0)
    assert rec.estimated == {"1": pytest.approx(-30.0)}


def test_beyond_catch_up_the_stalled_nodes_clock_is_taken_as_reported() -> None:
    # A manager later than catch_up resynchronises without booking the missed cycles:
    # its last clock is the truth, and the gang really is out of step.
    c, records = gang(catch_up=2 * Q)
    c.ingest(report(0, 300.0, 300.0))
    c.ingest(report(1, 210.0, 210.0))
    c.control_period(300.0)
    (rec,) = periods(records)
    assert rec.phase_difference == pytest.approx(90.0) and rec.estimated is None


def test_the_simulator_never_estimates() -> None:
    c, records = gang(catch_up=0.0)
    c.ingest(report(0, 300.0, 300.0))
    c.ingest(report(1, 210.0, 210.0))
    c.control_period(300.0)
    (rec,) = periods(records)
    assert rec.phase_difference == pytest.approx(90.0) and rec.estimated is None
    assert c.estimated_clocks == 0


def test_a_member_that_has_not_reported_yet_is_carried_at_its_start_rate() -> None:
    c, records = gang(catch_up=10 * Q, enabled=False)
    c.ingest(report(0, Q, Q))  # n1's first report is late
    c.control_period(Q)
    (rec,) = periods(records)
    assert rec.phase_difference == pytest.approx(0.0) and rec.estimated == {"1": Q}


def test_a_negative_catch_up_is_refused() -> None:
    with pytest.raises(ValueError, match="catch_up"):
        ControllerCore(catch_up=-1.0)


@given(
    rate=st.floats(0.05, 4.0),
    late=st.integers(0, 10),
    early=st.integers(0, 3),
    start=st.integers(1, 50),
)
def test_a_gang_in_step_shows_no_phase_difference_whoever_is_late(
    rate: float, late: int, early: int, start: int
) -> None:
    """Members that run at the same rate are in step; which node's reports are late (up
    to catch_up) or early must not change that."""
    c, records = gang(catch_up=10 * Q, enabled=False)
    now = (start + 10) * Q

    def clock(t: float) -> float:
        return rate * t

    c.ingest(report(0, now - late * Q, clock(now - late * Q), rate))
    c.ingest(report(1, now + early * Q, clock(now + early * Q), rate))
    c.control_period(now)
    (rec,) = periods(records)
    assert rec.phase_difference == pytest.approx(0.0, abs=1e-6)
    assert rec.mean_virtual == pytest.approx(clock(now))


def test_no_command_goes_to_a_member_whose_clock_is_carried_forward() -> None:
    """n1 is late (its clock carried forward): the period's decision may re-cap n0's
    member, never n1's, which keeps the cap its estimate assumed; once n1's reports are
    in, it is controlled again."""
    c, records = gang(catch_up=10 * Q, pace=True)
    # n0 ran at twice the expected rate, n1 at half of it (its last report, 2 cycles old):
    # pace control would hold n0 back and lift n1.
    c.ingest(report(0, 90.0, 180.0, rate=2.0))
    c.ingest(report(1, 30.0, 15.0, rate=0.5))
    commands = c.control_period(90.0)
    assert {cmd.subtask for cmd in commands} == {0}
    (rec,) = periods(records)
    assert rec.estimated == {"1": pytest.approx(60.0)} and set(rec.factors) == {"0"}
    # n1 catches up: both members are controlled again.
    c.ingest(report(1, 120.0, 45.0, rate=0.5))
    c.ingest(report(0, 120.0, 210.0, rate=1.0))
    assert 1 in {cmd.subtask for cmd in c.control_period(120.0)}


def test_a_member_reported_ahead_of_a_late_controller_is_still_controlled() -> None:
    """Carried back (the controller is late, not the node): its commands still go."""
    c, _ = gang(catch_up=10 * Q, pace=True)
    c.ingest(report(0, 90.0, 45.0, rate=0.5))
    c.ingest(report(1, 120.0, 240.0, rate=2.0))
    assert 1 in {cmd.subtask for cmd in c.control_period(90.0)}


def test_a_member_recapped_at_its_last_report_is_carried_at_its_new_cap() -> None:
    """n0 ran ahead and the period of its last report held it back: when its next report
    is late, the cycles since ran at the new cap, not at the rate that report measured,
    and its carried clock says so."""
    c, records = gang(catch_up=10 * Q, pace=True)
    def able(index: int, real: float, virtual: float, rate: float) -> ProgressReport:
        # Both nodes could give twice the expected rate (capability 2).
        return ProgressReport("j1", index, f"n{index}", 0, 0, real, virtual, 100.0,
                              100.0 * rate, False, 200.0)

    c.ingest(able(0, 90.0, 150.0, rate=2.0))
    c.ingest(able(1, 90.0, 90.0, rate=1.0))
    (cmd,) = [cmd for cmd in c.control_period(90.0) if cmd.subtask == 0]
    assert 0 < cmd.rate_cap < 2.0 * 50.0  # held back
    c.ingest(able(1, 120.0, 120.0, rate=1.0))
    c.control_period(120.0)  # n0's report for 120 s is late
    rec = periods(records)[-1]
    assert rec.estimated == {"0": pytest.approx(Q)}
    n0_at_120 = 150.0 + cmd.rate_cap / 50.0 * Q
    assert rec.mean_virtual == pytest.approx((n0_at_120 + 120.0) / 2)
    assert rec.phase_difference == pytest.approx(abs(n0_at_120 - 120.0))


def test_a_member_one_report_late_is_still_controlled() -> None:
    """Only its report for the period is missing (its manager a fraction of a period
    late): the command reaches it before its next boundary, so it is sent; otherwise a
    node always a little late would never be controlled."""
    c, _ = gang(catch_up=10 * Q, pace=True)
    c.ingest(report(0, 90.0, 180.0, rate=2.0))
    c.ingest(report(1, 60.0, 30.0, rate=0.5))
    assert {0, 1} <= {cmd.subtask for cmd in c.control_period(90.0)}
