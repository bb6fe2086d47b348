"""Max-min fair gang paces (:func:`coallocator.controller.gang_paces`) as a pure solver.

A member's ``capability`` is its fair share of its node with every cap lifted, per unit
of expected rate; a node can give its members ``sum c_i x_i`` Mcycles/s in all.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coallocator.controller import (
    ControllerConfig,
    ControlMode,
    ControlRequest,
    JobState,
    SubtaskState,
    control,
    gang_paces,
)

P = 30.0


def _member(i: int, node: str, x: float, c: float | None, tv: float = 0.0) -> SubtaskState:
    return SubtaskState(i, node, tv, x, x, 0.0, 1.0, x, c)


def _gang(job: str, members: list[tuple[str, float, float | None]]) -> JobState:
    return JobState(
        job, 1e9, 100.0, tuple(_member(i, n, x, c) for i, (n, x, c) in enumerate(members))
    )


def test_a_lone_gang_runs_at_its_slowest_nodes_level() -> None:
    paces = gang_paces([_gang("a", [("n0", 10.0, 3.0), ("n1", 10.0, 5.0)])])
    assert paces == {"a": 3.0}


def test_a_gang_held_elsewhere_gives_what_it_leaves_on_a_shared_node_to_the_other() -> None:
    # n1 gives its two members 4 x 10 each (80 in all). Gang a is held to 2 by n0, so it
    # uses 20 of n1; gang b takes the other 60 there (pace 6), n2 could give it 10.
    paces = gang_paces([
        _gang("a", [("n0", 10.0, 2.0), ("n1", 10.0, 4.0)]),
        _gang("b", [("n1", 10.0, 4.0), ("n2", 10.0, 10.0)]),
    ])
    assert paces == {"a": 2.0, "b": 6.0}


def test_a_member_held_by_its_own_full_speed_never_goes_past_it() -> None:
    # On n0 the level is 5 (member of b), but a's member there can only use 1.5 (its
    # demand): a is held to 1.5 even though n1 could give it 8; b gets the rest of n0
    # (65 in all, a uses 15: 50 for b's 10 of expected rate).
    paces = gang_paces([
        _gang("a", [("n0", 10.0, 1.5), ("n1", 10.0, 8.0)]),
        _gang("b", [("n0", 10.0, 5.0), ("n2", 10.0, 9.0)]),
    ])
    assert paces["a"] == 1.5
    assert paces["b"] == 5.0


def test_a_gang_with_an_unreported_member_is_left_to_the_fallback() -> None:
    paces = gang_paces([_gang("a", [("n0", 10.0, 3.0), ("n1", 10.0, None)])])
    assert paces == {}


def test_the_laggard_runs_at_the_pace_and_the_others_meet_it() -> None:
    cfg = ControllerConfig(mode=ControlMode.PACE)
    subs = (_member(0, "n0", 10.0, 2.0, tv=100.0), _member(1, "n1", 10.0, 6.0, tv=110.0))
    (d,) = control(ControlRequest(120.0, (JobState("a", 1e9, 100.0, subs),), {}, P), cfg).decisions
    caps = {ch.index: ch.rate_cap for ch in d.changes}
    # pace 2: the laggard (n0) aims 60 s on and runs at 2 x 10; n1 only needs 50 s.
    assert caps[0] == 20.0
    assert caps[1] == (100.0 + 2.0 * P - 110.0) / P * 10.0


@st.composite
def _grids(draw: st.DrawFn) -> list[JobState]:
    n_nodes = draw(st.integers(1, 5))
    nodes = [f"n{k}" for k in range(n_nodes)]
    level = {n: draw(st.floats(0.1, 20.0)) for n in nodes}
    jobs = []
    for g in range(draw(st.integers(1, 6))):
        on = draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=n_nodes, unique=True))
        members = []
        for n in on:
            x = draw(st.floats(1.0, 50.0))
            # Most members get the node's level; some are held by their own demand.
            c = level[n] if draw(st.booleans()) else draw(st.floats(0.05, level[n]))
            members.append((n, x, c))
        jobs.append(_gang(f"g{g}", members))
    return jobs


@settings(max_examples=200, deadline=None)
@given(_grids())
def test_paces_are_feasible_never_below_the_fair_level_and_each_gang_is_blocked(
    jobs: list[JobState],
) -> None:
    paces = gang_paces(jobs)
    assert set(paces) == {j.job_id for j in jobs}
    room: dict[str, float] = {}
    level: dict[str, float] = {}
    for j in jobs:
        for s in j.subtasks:
            assert s.capability is not None
            room[s.node] = room.get(s.node, 0.0) + s.capability * s.admitted_weight
            level[s.node] = max(level.get(s.node, 0.0), s.capability)
    used = {n: 0.0 for n in room}
    for j in jobs:
        for s in j.subtasks:
            used[s.node] += paces[j.job_id] * s.admitted_weight
    # Feasible: no node gives more than it can.
    for n in room:
        assert used[n] <= room[n] * (1 + 1e-6) + 1e-9
    for j in jobs:
        caps = [s.capability for s in j.subtasks if s.capability is not None]
        # Never slower than its slowest member's fair share (what strict would give it).
        assert paces[j.job_id] >= min(caps) * (1 - 1e-6)
        # Max-min: it could go no faster, a node of it is full or a member at its demand.
        blocked = any(
            used[s.node] >= room[s.node] * (1 - 1e-6)
            or (s.capability is not None and s.capability < level[s.node] * (1 - 1e-9)
                and paces[j.job_id] >= s.capability * (1 - 1e-6))
            for s in j.subtasks
        )
        assert blocked


def test_a_pace_lead_lets_the_members_ahead_run_that_far_past_the_gangs_next_point() -> None:
    # A_t 100 s, lead 0.3: a member may aim 30 s beyond where the laggard gets next period.
    cfg = ControllerConfig(mode=ControlMode.PACE, pace_lead=0.3)
    subs = (_member(0, "n0", 10.0, 2.0, tv=100.0), _member(1, "n1", 10.0, 6.0, tv=110.0))
    (d,) = control(ControlRequest(120.0, (JobState("a", 1e9, 100.0, subs),), {}, P), cfg).decisions
    caps = {ch.index: ch.rate_cap for ch in d.changes}
    assert caps[1] == (100.0 + 2.0 * P + 30.0 - 110.0) / P * 10.0
    # In step (no lead) it only meets the laggard's point.
    (d0,) = control(
        ControlRequest(120.0, (JobState("a", 1e9, 100.0, subs),), {}, P),
        ControllerConfig(mode=ControlMode.PACE),
    ).decisions
    assert {ch.index: ch.rate_cap for ch in d0.changes}[1] < caps[1]


def test_a_pace_lead_needs_a_finite_asynchrony_window() -> None:
    cfg = ControllerConfig(mode=ControlMode.PACE, pace_lead=0.5)
    subs = (_member(0, "n0", 10.0, 2.0, tv=100.0), _member(1, "n1", 10.0, 6.0, tv=110.0))
    no_window = JobState("a", 1e9, float("inf"), subs)
    (d,) = control(ControlRequest(120.0, (no_window,), {}, P), cfg).decisions
    (d0,) = control(
        ControlRequest(120.0, (no_window,), {}, P), ControllerConfig(mode=ControlMode.PACE)
    ).decisions
    assert d.changes == d0.changes


@given(st.one_of(st.floats(-0.5, 1.5), st.just(float("nan")), st.just(float("inf"))))
def test_a_pace_lead_outside_zero_to_one_is_refused(lead: float) -> None:
    import math

    import pytest

    if math.isfinite(lead) and 0.0 <= lead <= 1.0:
        assert ControllerConfig(mode=ControlMode.PACE, pace_lead=lead).pace_lead == lead
    else:
        with pytest.raises(ValueError, match="pace_lead"):
            ControllerConfig(mode=ControlMode.PACE, pace_lead=lead)
