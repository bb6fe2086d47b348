"""ManualClock: the deterministic clock of the simulator and the tests."""

from __future__ import annotations

import math

import pytest

from clocks.base import Clock, ManualClock


def test_manual_clock_is_a_clock_and_moves_only_when_told() -> None:
    clock = ManualClock(5.0)
    assert isinstance(clock, Clock)
    assert clock.now() == 5.0
    assert clock.advance(2.5) == 7.5
    assert clock.now() == 7.5
    clock.set(10.0)
    assert clock.now() == 10.0


@pytest.mark.parametrize("dt", [-0.1, math.nan, math.inf])
def test_advance_rejects_bad_dt(dt: float) -> None:
    clock = ManualClock()
    with pytest.raises(ValueError, match="dt"):
        clock.advance(dt)
    assert clock.now() == 0.0


def test_set_rejects_going_backwards() -> None:
    clock = ManualClock(3.0)
    with pytest.raises(ValueError, match="t: 2.0 is earlier"):
        clock.set(2.0)
    assert clock.now() == 3.0


def test_start_must_be_finite() -> None:
    with pytest.raises(ValueError, match="start"):
        ManualClock(math.nan)
