"""A coupled member's useful rate and its cap (local_manager.useful_rate): the useful CPU
of a cycle, smoothing, the headroom, the need from the best pace, the floor, the probe
up and the guard against a cap that slows the member."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local_manager.useful_rate import (
    HEADROOM,
    PROBE,
    RELAX,
    SLOWED_CYCLES,
    SLOWER,
    WAITING,
    CycleSample,
    UsefulRate,
    update,
)

FLOOR = 0.01


def run(samples: list[CycleSample], floor: float = FLOOR) -> list[UsefulRate]:
    out, state = [], UsefulRate()
    for s in samples:
        state = update(state, s, floor)
        out.append(state)
    return out


def test_a_spinning_member_that_waits_half_is_capped_near_half() -> None:
    # It spins: it uses all of its grant (0.8 of a core), half of the time in waits.
    [*_, last] = run([CycleSample(0.24, 0.24, 0.3, 0.15)] * 5)
    assert last.useful_rate == pytest.approx(0.4)
    assert last.wait_fraction == pytest.approx(0.5)
    assert last.cap == pytest.approx(0.4 * HEADROOM)
    assert last.cycles == 5


def test_a_blocking_member_is_not_counted_below_what_it_used() -> None:
    # It blocks: of a grant of 0.8 core it uses 0.4, the half it computes.
    [state] = run([CycleSample(0.12, 0.24, 0.3, 0.15)])
    assert state.useful_rate == pytest.approx(0.4)
    assert state.cap == pytest.approx(0.4 * HEADROOM)


def test_the_useful_cpu_is_never_more_than_used() -> None:
    # The host gave a spinner only half its grant: grant less wait would say 0.6.
    s = CycleSample(used_s=0.12, granted_s=0.24, wall_s=0.3, waited_s=0.075)
    assert s.wait_fraction == pytest.approx(0.25)
    assert s.useful_s == pytest.approx(0.12)


def test_the_first_cycle_is_taken_as_it_is_then_smoothed() -> None:
    a, b = run([CycleSample(0.3, 0.3, 0.3, 0.15), CycleSample(0.3, 0.3, 0.3, 0.0)])
    assert (a.useful_rate, a.wait_fraction) == pytest.approx((0.5, 0.5))
    assert (b.useful_rate, b.wait_fraction) == pytest.approx((0.75, 0.25))


def test_a_member_that_does_not_wait_has_no_cap() -> None:
    states = run([CycleSample(0.3, 0.3, 0.3, 0.0)] * 3)
    assert [s.cap for s in states] == [None] * 3
    # Nor one that waits too little to count.
    assert run([CycleSample(0.3, 0.3, 0.3, 0.3 * WAITING / 2)])[0].cap is None


def test_the_cap_probes_up_when_the_member_stops_waiting() -> None:
    capped = run([CycleSample(0.3, 0.3, 0.3, 0.24)])[0]
    assert capped.cap == pytest.approx(0.2 * HEADROOM)
    # Held at its cap (0.23 of a core), it no longer waits: it may have more.
    probe = update(capped, CycleSample(0.069, 0.069, 0.3, 0.0), FLOOR)
    assert probe.cap == pytest.approx(PROBE * capped.cap)
    # It keeps not waiting: its smoothed wait falls under WAITING and the cap goes.
    states = [probe]
    while states[-1].cap is not None:
        states.append(update(states[-1], CycleSample(0.1, 0.1, 0.3, 0.0), FLOOR))
    assert len(states) < 10
    assert all(b.cap >= a.cap for a, b in zip(states, states[1:-1]))  # type: ignore[operator]


def test_the_need_is_the_cost_of_a_step_at_the_best_pace() -> None:
    # 10 steps a cycle, 0.01 s of useful CPU each (a third of a core), waiting 2/3.
    steady = CycleSample(0.3, 0.3, 0.3, 0.2, progress=10.0)
    [*_, state] = run([steady] * 3)
    assert state.cost == pytest.approx(0.01) and state.pace == pytest.approx(10 / 0.3)
    assert state.need == pytest.approx(1 / 3)
    assert state.cap == pytest.approx(HEADROOM / 3)
    # Its partners slow down (8 steps a cycle; it waits more): a step costs the same, the
    # need stays that of the best pace, and the cap does not follow the fall.
    slower = CycleSample(0.3, 0.3, 0.3, 0.22, progress=8.0)
    after = update(state, slower, FLOOR)
    assert after.cost == pytest.approx(0.01) and after.reference == state.reference
    assert after.useful_rate < state.useful_rate  # type: ignore[operator]
    assert after.cap == pytest.approx(state.cap)


def test_a_cap_that_slows_the_member_is_raised_then_relaxes() -> None:
    [*_, capped] = run([CycleSample(0.3, 0.3, 0.3, 0.2, progress=10.0)] * 3)
    assert capped.cap is not None
    # Held at its cap it is stopped when its partners' messages come: its pace halves.
    slowed = CycleSample(0.05, 0.05, 0.3, 0.15, progress=5.0)
    states = [capped]
    while states[-1].safe == 0.0:
        states.append(update(states[-1], slowed, FLOOR))
    assert len(states) - 1 >= SLOWED_CYCLES
    fired = states[-1]
    assert fired.safe == pytest.approx(PROBE * states[-2].cap)  # type: ignore[operator]
    assert fired.cap is not None and fired.cap >= fired.safe
    # One slow cycle is not enough to fire it (the noise of a busy host).
    assert update(capped, slowed, FLOOR).safe == 0.0
    assert (1 - SLOWER) * capped.reference > 5.0 / 0.3  # type: ignore[operator]
    # Its pace back, the safe cap relaxes a cycle at a time.
    again = update(fired, CycleSample(0.3, 0.3, 0.3, 0.2, progress=10.0), FLOOR)
    assert again.safe == pytest.approx(RELAX * fired.safe)


def test_the_floor_holds_and_must_be_positive() -> None:
    [state] = run([CycleSample(0.3, 0.3, 0.3, 0.3)], floor=0.25)
    assert state.useful_rate == 0.0
    assert state.cap == 0.25
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="floor"):
            update(UsefulRate(), CycleSample(0.3, 0.3, 0.3, 0.1), bad)


def test_a_cycle_of_no_length_changes_nothing_and_bad_figures_are_refused() -> None:
    state = run([CycleSample(0.3, 0.3, 0.3, 0.15)])[0]
    assert update(state, CycleSample(0.0, 0.0, 0.0, 0.0), FLOOR) is state
    for field in ("used_s", "granted_s", "wall_s", "waited_s", "progress"):
        values = {"used_s": 0.1, "granted_s": 0.1, "wall_s": 0.3, "waited_s": 0.0, "progress": 1.0}
        for bad in (-0.1, float("nan"), float("inf")):
            with pytest.raises(ValueError, match=field):
                CycleSample(**{**values, field: bad})


# ------------------------------------------------------------------ properties
seconds = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)
walls = st.floats(min_value=0.01, max_value=10.0, allow_nan=False)
fractions = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def samples(draw: st.DrawFn, waiting: bool = True) -> CycleSample:
    wall = draw(walls)
    granted = draw(fractions) * wall * 4  # up to four cores
    used = draw(fractions) * granted * 1.2  # a little more than granted, at times
    waited = draw(fractions) * wall * 1.1 if waiting else 0.0  # reports lag: > wall at times
    progress = draw(st.none() | st.floats(min_value=0.0, max_value=100.0, allow_nan=False))
    return CycleSample(used, granted, wall, waited, progress)


@given(st.lists(samples(waiting=False), min_size=1, max_size=30))
def test_a_member_that_never_waits_is_never_capped_below_its_grant(
    cycles: list[CycleSample],
) -> None:
    for sample, state in zip(cycles, run(cycles)):
        assert state.cap is None or state.cap >= sample.granted_s / sample.wall_s


@given(
    st.lists(samples(), min_size=1, max_size=30),
    st.floats(min_value=1e-6, max_value=4.0, allow_nan=False),
)
def test_the_cap_never_goes_below_the_floor(cycles: list[CycleSample], floor: float) -> None:
    for state in run(cycles, floor):
        assert state.cap is None or state.cap >= floor
        assert state.wait_fraction is not None and 0.0 <= state.wait_fraction <= 1.0
        assert state.useful_rate is not None and state.useful_rate >= 0.0


@given(st.lists(samples(), min_size=1, max_size=30))
def test_a_cycle_without_a_wait_never_lowers_the_cap_below_its_grant(
    cycles: list[CycleSample],
) -> None:
    """Whatever came before: after a cycle in which it did not wait, a capped member may
    have at least what it was granted, and more than the cap it had."""
    state = UsefulRate()
    for sample in cycles:
        before = state
        state = update(state, sample, FLOOR)
        if sample.wait_fraction < WAITING and state.cap is not None:
            assert state.cap >= sample.granted_s / sample.wall_s
            if before.cap is not None:
                assert state.cap >= PROBE * before.cap


@given(
    walls,
    st.floats(min_value=0.05, max_value=4.0, allow_nan=False),
    st.integers(min_value=3, max_value=20),
)
def test_a_spinner_waiting_half_its_grant_is_capped_near_half(
    wall: float,
    cores: float,
    n: int,
) -> None:
    granted = cores * wall
    [*_, state] = run([CycleSample(granted, granted, wall, wall / 2)] * n)
    assert state.cap == pytest.approx(0.5 * cores * HEADROOM)
    assert 0.5 * cores < state.cap <= 0.6 * cores
