"""The reported clock (local_manager.reported_clock): the checks a report passes, the
mapping onto the nominal duration, the work that lands eq. 4 there, stall detection."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clocks.virtual import VirtualClock
from local_manager.progress_wire import DropReason, ProgressDatagram
from local_manager.reported_clock import (
    ReportedProgress,
    reported_virtual_time,
    reported_work,
    slow_members,
)

KEY = "a" * 32


def d(t: float, end: float | None = None, wait: float = 0.0) -> ProgressDatagram:
    return ProgressDatagram(KEY, t, end, wait, False)


def test_time_going_backwards_is_dropped_and_counted() -> None:
    p = ReportedProgress(start=10.0, end=100.0)
    assert p.accept(d(5), 11.0) is None
    assert p.accept(d(5), 12.0) is None  # no progress is not going back
    assert p.accept(d(4), 13.0) is DropReason.BACKWARDS
    assert (p.t, p.reports, p.dropped, p.last_at) == (5, 2, {"backwards": 1}, 12.0)


def test_without_a_total_reported_needs_one_cpu_only_shows() -> None:
    p = ReportedProgress(start=0.0)
    assert p.accept(d(5), 1.0) is DropReason.NO_END
    assert p.accept(d(5, end=50), 1.0) is None
    assert p.accept(d(10), 2.0) is None  # the total reported before still holds
    assert p.fraction == pytest.approx(0.2)
    shown = ReportedProgress(start=0.0, needs_end=False)
    assert shown.accept(d(5), 1.0) is None and shown.fraction is None


def test_the_reported_time_maps_onto_the_nominal_duration() -> None:
    p = ReportedProgress(start=100.0, end=200.0)
    assert p.virtual_time(1000.0) == 100.0  # nothing reported yet
    p.accept(d(50), 110.0)
    assert p.virtual_time(1000.0) == pytest.approx(350.0)
    p.accept(d(400), 120.0)  # beyond its total: the clock stops at the end
    assert p.virtual_time(1000.0) == pytest.approx(1100.0)


@given(st.floats(0, 1e6), st.floats(0, 1e6), st.floats(1e-3, 1e6), st.floats(1.0, 100.0))
def test_the_booked_work_lands_eq4_on_the_reported_time(
    start: float, ahead: float, rate: float, q: float
) -> None:
    clock = VirtualClock(start)
    target = start + ahead
    x = rate * q
    clock.advance(start + q, x, reported_work(target, clock.virtual_time, rate))
    assert clock.virtual_time == pytest.approx(target, rel=1e-9, abs=1e-6)
    # A clock at or past its target books nothing: it never goes back.
    assert reported_work(start, target, rate) == 0.0


@given(st.floats(0, 1), st.floats(0, 1e6), st.floats(0, 1e6))
def test_reported_virtual_time_stays_in_the_nominal_span(f: float, start: float,
                                                         nominal: float) -> None:
    tv = reported_virtual_time(start, nominal, f)
    assert start <= tv <= start + nominal + 1e-6 * max(1.0, start + nominal)


def test_stalled_after_the_window_without_a_report() -> None:
    p = ReportedProgress(start=0.0, end=10.0)
    assert not p.stalled(50.0, 60.0) and p.stalled(61.0, 60.0)  # none since the start
    p.accept(d(1), 61.0)
    assert not p.stalled(100.0, 60.0) and p.stalled(122.0, 60.0)
    assert not p.stalled(1e9, None)  # no window: never


def test_slow_members_far_below_their_partners() -> None:
    assert slow_members([1.0, 1.0, 0.05]) == [False, False, True]
    assert slow_members([1.0, 0.5, 0.2]) == [False, False, False]
    assert slow_members([None, 1.0, 0.0]) == [False, False, True]
    assert slow_members([0.0, 0.0]) == [False, False]  # partners at 0: nothing to compare
    assert slow_members([0.01]) == [False]


@given(st.lists(st.none() | st.floats(0, 1e3), max_size=8))
def test_slow_members_never_marks_the_fastest(rates: list[float | None]) -> None:
    slow = slow_members(rates)
    known = [r for r in rates if r is not None]
    assert len(slow) == len(rates)
    if known:
        assert not slow[rates.index(max(known))]


@given(st.lists(st.tuples(st.floats(0, 1e6), st.none() | st.floats(1e-3, 1e6),
                          st.floats(0, 1e3)), max_size=6),
       st.none() | st.floats(1e-3, 1e6), st.booleans())
def test_a_tracker_survives_its_checkpoint(
    reports: list[tuple[float, float | None, float]], end: float | None, needs_end: bool
) -> None:
    import json

    p = ReportedProgress(start=5.0, end=end, needs_end=needs_end)
    for k, (t, t_end, wait) in enumerate(reports):
        p.accept(d(t, t_end, wait), 6.0 + k)
    q = ReportedProgress.from_dict(json.loads(json.dumps(p.to_dict())))
    assert q.to_dict() == p.to_dict()
    with pytest.raises((KeyError, TypeError, ValueError)):
        ReportedProgress.from_dict({**p.to_dict(), "reports": "3"})
