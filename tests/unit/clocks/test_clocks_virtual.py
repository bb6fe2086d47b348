"""VirtualClock: eqs. (3)-(5) of the SQ paper, hand-computed cases and a property."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clocks.virtual import VirtualClock


def test_clock_starts_with_virtual_and_previous_real_time_at_start() -> None:
    clock = VirtualClock(250.0)
    assert clock.virtual_time == 250.0
    assert clock.previous_real_time == 250.0


def test_full_grant_keeps_virtual_time_equal_to_real_time() -> None:
    # Three 10 s cycles, each granting exactly the expected 5000 Mcycles: T_V follows T_R.
    clock = VirtualClock(100.0)
    for k in (1, 2, 3):
        assert clock.advance(100.0 + 10.0 * k, 5000.0, 5000.0) == pytest.approx(100.0 + 10.0 * k)
    assert clock.previous_real_time == 130.0


def test_half_grant_falls_behind_by_half_the_cycle() -> None:
    # x = 1000, x_bar = 500, T_R' - T_RP = 10 s: T_V' = 100 + 0.5 * 10 = 105 s.
    clock = VirtualClock(100.0)
    assert clock.advance(110.0, 1000.0, 500.0) == pytest.approx(105.0)
    # The next cycle is full again: T_V moves by a whole cycle, the 5 s lag stays.
    assert clock.advance(120.0, 1000.0, 1000.0) == pytest.approx(115.0)


def test_double_grant_runs_ahead_by_a_cycle() -> None:
    clock = VirtualClock(0.0)
    assert clock.advance(10.0, 300.0, 600.0) == pytest.approx(20.0)


def test_nothing_expected_leaves_the_clock_but_moves_previous_real_time() -> None:
    clock = VirtualClock(100.0)
    assert clock.advance(110.0, 0.0, 0.0) == 100.0
    # T_RP moved to 110 (eq. 5), so the next full cycle adds 10 s, not 20 s.
    assert clock.previous_real_time == 110.0
    assert clock.advance(120.0, 50.0, 50.0) == pytest.approx(110.0)


def test_unequal_cycle_lengths_use_the_time_since_the_previous_cycle() -> None:
    clock = VirtualClock(0.0)
    clock.advance(4.0, 100.0, 25.0)  # + 0.25 * 4 = 1
    assert clock.advance(10.0, 100.0, 50.0) == pytest.approx(1.0 + 0.5 * 6.0)


def test_zero_length_cycle_does_not_move_the_clock() -> None:
    clock = VirtualClock(7.0)
    assert clock.advance(7.0, 100.0, 100.0) == 7.0


def test_real_time_going_backwards_is_rejected_and_state_kept() -> None:
    clock = VirtualClock(10.0)
    with pytest.raises(ValueError, match="real_time"):
        clock.advance(9.0, 1.0, 1.0)
    assert (clock.virtual_time, clock.previous_real_time) == (10.0, 10.0)


@pytest.mark.parametrize(("x", "g"), [(-1.0, 0.0), (1.0, -0.5)])
def test_negative_work_is_rejected(x: float, g: float) -> None:
    clock = VirtualClock(0.0)
    with pytest.raises(ValueError, match="expected_work and granted_work"):
        clock.advance(1.0, x, g)


@pytest.mark.parametrize("start", [math.nan, math.inf, -math.inf])
def test_start_must_be_finite(start: float) -> None:
    with pytest.raises(ValueError, match="start"):
        VirtualClock(start)


def test_repr_shows_both_times() -> None:
    assert repr(VirtualClock(1.5)) == "VirtualClock(T_V=1.5, T_RP=1.5)"


cycles = st.lists(
    st.tuples(
        st.floats(0.1, 100.0),  # cycle length q, s
        st.one_of(st.just(0.0), st.floats(1e-3, 1000.0)),  # expected work x, Mcycles
        st.floats(0.0, 3.0),  # granted / expected ratio
    ),
    min_size=1,
    max_size=30,
)


@settings(deadline=None, max_examples=100)
@given(start=st.floats(-1e6, 1e6), steps=cycles)
def test_virtual_time_is_start_plus_the_sum_of_granted_fractions_of_the_cycles(
    start: float, steps: list[tuple[float, float, float]]
) -> None:
    clock = VirtualClock(start)
    real = start
    expected = start
    for q, x, ratio in steps:
        real += q
        clock.advance(real, x, x * ratio)
        if x > 0:
            expected += ratio * q
    assert clock.virtual_time == pytest.approx(expected, rel=1e-9, abs=1e-6)
    assert clock.previous_real_time == real
