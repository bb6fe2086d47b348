"""The learnt start margin: a gang's start boundary is far enough ahead for its dispatch
calls to reach every node on a loaded machine."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.start_margin import StartMargin, dispatch_calls


def test_the_floor_holds_until_calls_are_slow() -> None:
    m = StartMargin(0.3)
    assert m.seconds(4) == 0.3  # nothing measured yet
    m.observe_call(0.01)
    assert m.seconds(4) == 0.3  # 2 x 4 x 0.01 s is less than the floor
    m.observe_call(0.1)
    assert m.seconds(4) == pytest.approx(0.8)  # 2 x 4 calls x the slowest, 0.1 s
    assert m.seconds(100) == 5.0  # never past the ceiling


def test_slow_calls_are_forgotten_after_keep_calls() -> None:
    m = StartMargin(0.3, keep=3)
    m.observe_call(0.5)
    for _ in range(3):
        m.observe_call(0.0)
    assert m.slowest_call_s == 0.0 and m.seconds(4) == 0.3


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="start margin"):
        StartMargin(-1.0)


def test_dispatch_calls_count_a_registration_and_one_round_of_placements_per_gang() -> None:
    assert dispatch_calls([3, 2]) == 4
    assert dispatch_calls([1]) == 2
    assert dispatch_calls([]) == 0


@given(st.floats(0, 2), st.lists(st.floats(0, 3), max_size=40), st.integers(1, 50))
def test_the_margin_covers_the_calls_at_the_slowest_recent_pace(
    floor: float, calls: list[float], n: int
) -> None:
    m = StartMargin(floor)
    for c in calls:
        m.observe_call(c)
    got = m.seconds(n)
    assert floor <= got <= max(5.0, floor)
    assert got >= min(5.0, n * max(calls[-32:], default=0.0))
