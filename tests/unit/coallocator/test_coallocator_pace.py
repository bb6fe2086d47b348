"""Pace control (``mode="pace"``, the product's ``sq``) as a pure solver: no scheduler,
no simulator. A tiny model node gives each subtask ``min(cap, available)`` Mcycles/s,
where ``available`` is what the node could give it; virtual clocks advance by eq. (4).
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from coallocator.controller import (
    ControllerConfig,
    ControlMode,
    ControlRequest,
    JobState,
    SubtaskState,
    Window,
    control,
    pace_targets,
    phase_difference,
)

PACE = ControllerConfig(mode=ControlMode.PACE)
P = 30.0  # s, the control period


def _state(
    i: int, tv: float, x: float, rate: float, cap: float = 0.0, weight: float | None = None
) -> SubtaskState:
    return SubtaskState(i, f"n{i}", tv, x, x if weight is None else weight, 0.0, rate, cap)


def _job(subs: list[SubtaskState], e_t: float = 1e9, a_t: float = 100.0) -> JobState:
    return JobState("j", e_t, a_t, tuple(subs))


def _run_periods(
    available: list[float], x: list[float], periods: int, start: float = 0.0,
    config: ControllerConfig = PACE, a_t: float = 100.0,
) -> list[float]:
    """Drive one job (asynchrony window ``a_t`` s) on model nodes whose subtask ``i``
    could get ``available[i]`` Mcycles/s under ``config``; returns the phase difference
    after each period (s)."""
    tvs = [start] * len(x)
    rates = [1.0] * len(x)  # before the first report: the clocks' initial rate
    caps = [0.0] * len(x)
    t_r = start
    phis = []
    for _ in range(periods):
        # the node gives min(cap, available); eq. (4) over one period
        got = [min(a, c) if c > 0 else a for a, c in zip(available, caps)]
        rates = [g / xi for g, xi in zip(got, x)]
        tvs = [tv + r * P for tv, r in zip(tvs, rates)]
        t_r += P
        phis.append(phase_difference(tvs))
        job = _job([_state(i, tvs[i], x[i], rates[i], caps[i]) for i in range(len(x))],
                   a_t=a_t)
        (d,) = control(ControlRequest(t_r, (job,), {}, P), config).decisions
        for ch in d.changes:
            caps[ch.index] = ch.rate_cap
    return phis


def test_a_job_on_100_300_600_mhz_nodes_converges_below_one_cycle() -> None:
    # Half of each node's CPU is its QoS share; the three subtasks expect 25 Mcycles/s,
    # so their clocks would run at 2x, 6x and 12x real time unpaced.
    phis = _run_periods([50.0, 150.0, 300.0], [25.0, 25.0, 25.0], periods=8)
    assert phis[0] == (12.0 - 2.0) * P  # the first period runs unpaced
    # Then the two ahead are held at the floor while the 100 MHz node's subtask closes
    # the gap at its 2x: (2 - 0.01) * P a period, so 300 s take 5 periods; after that
    # the group runs at 2x in step, within one cycle.
    assert all(b < a for a, b in zip(phis[:5], phis[1:6])), phis
    closing = math.ceil(phis[0] / ((2.0 - PACE.weight_floor) * P))
    assert all(phi < P for phi in phis[closing:]), phis


def test_the_group_runs_at_its_slowest_members_pace() -> None:
    subs = [_state(0, 100.0, 25.0, rate=0.5), _state(1, 100.0, 50.0, rate=3.0)]
    (d,) = control(ControlRequest(100.0, (_job(subs),), {}, P), PACE).decisions
    changes = {ch.index: ch for ch in d.changes}
    assert 0 not in changes  # the straggler stays uncapped
    assert changes[1].rate_cap == 0.5 * 50.0  # held to the straggler's pace
    assert d.window is Window.PACE


def test_a_member_ahead_is_held_back_until_the_others_catch_up() -> None:
    # subtask 1 is 60 s ahead; both could run at 1x: it is held to 1x - 60/P = -1 -> floor
    subs = [_state(0, 100.0, 20.0, rate=1.0), _state(1, 160.0, 20.0, rate=1.0)]
    t_next, capability = pace_targets(tuple(subs), P)
    assert t_next == 130.0 and capability == [1.0, 1.0]
    (d,) = control(ControlRequest(130.0, (_job(subs),), {}, P), PACE).decisions
    (ch,) = d.changes
    assert ch.index == 1 and ch.rate_cap == PACE.weight_floor * 20.0


def test_a_member_held_at_its_cap_does_not_bound_the_group() -> None:
    # subtask 1 got all of its 10 Mcycles/s cap: it might go faster, so subtask 0 (which
    # got what it could, 2x) sets the pace and 1's cap follows it
    subs = [_state(0, 0.0, 10.0, rate=2.0), _state(1, 0.0, 10.0, rate=1.0, cap=10.0)]
    t_next, capability = pace_targets(tuple(subs), P)
    assert capability[1] == math.inf and t_next == 2.0 * P
    (d,) = control(ControlRequest(P, (_job(subs),), {}, P), PACE).decisions
    (ch,) = d.changes
    assert (ch.index, ch.rate_cap) == (1, 20.0)


def test_every_member_held_lifts_every_cap() -> None:
    subs = [_state(0, 0.0, 10.0, rate=1.0, cap=10.0), _state(1, 0.0, 10.0, rate=1.0, cap=10.0)]
    (d,) = control(ControlRequest(P, (_job(subs),), {}, P), PACE).decisions
    assert sorted(ch.rate_cap for ch in d.changes) == [0.0, 0.0]


def test_a_job_behind_its_window_speeds_its_straggler_from_the_slack() -> None:
    # mean T_V 700 s behind T_R = 1000 s with E_t = 100 s; the straggler (subtask 0)
    # wants (1000 - 200) * 25 * k = 200 Mcycles/s more, its node has 30 to give
    subs = [_state(0, 200.0, 25.0, rate=0.5), _state(1, 400.0, 25.0, rate=1.0)]
    job = _job(subs, e_t=100.0)
    reply = control(ControlRequest(1000.0, (job,), {"n0": 30.0, "n1": 99.0}, P), PACE)
    (d,) = reply.decisions
    changes = {ch.index: ch for ch in d.changes}
    assert d.window is Window.OVERALL_BEHIND
    assert changes[0].from_slack == 30.0 and changes[0].weight == 55.0
    assert reply.node_slack == {"n0": 0.0, "n1": 99.0}


def test_exhausted_slack_leaves_the_weights_and_paces_the_group() -> None:
    subs = [_state(0, 200.0, 25.0, rate=0.5), _state(1, 400.0, 25.0, rate=1.0)]
    reply = control(ControlRequest(1000.0, (_job(subs, e_t=100.0),), {"n0": 0.0}, P), PACE)
    (d,) = reply.decisions
    assert all(ch.weight == 25.0 and ch.from_slack == 0.0 for ch in d.changes)
    (ch,) = d.changes
    assert ch.index == 1 and ch.rate_cap == PACE.weight_floor * 25.0  # 200 s ahead: held
    assert reply.node_slack == {"n0": 0.0}


def test_a_job_back_in_its_window_returns_borrowed_weight() -> None:
    subs = [_state(0, 990.0, 25.0, rate=1.0, weight=40.0), _state(1, 990.0, 25.0, rate=1.0)]
    reply = control(ControlRequest(1000.0, (_job(subs, e_t=100.0),), {"n0": 5.0}, P), PACE)
    (ch,) = reply.decisions[0].changes
    assert (ch.index, ch.weight) == (0, 25.0)
    assert reply.node_slack["n0"] == 20.0


def test_a_cap_within_the_deadband_is_not_resent() -> None:
    # subtask 1 got all of its 10.05 cap; the group's pace (subtask 0) asks for 10.0:
    # within 1 %, so nothing is sent
    subs = [_state(0, 0.0, 10.0, rate=1.0), _state(1, 0.0, 10.0, rate=1.005, cap=10.05)]
    (d,) = control(ControlRequest(P, (_job(subs),), {}, P), PACE).decisions
    assert d.changes == () and d.window is Window.NONE


# -- properties -----------------------------------------------------------------------

subtask = st.tuples(
    st.floats(0.0, 5000.0),  # T_V
    st.floats(0.5, 200.0),  # admitted weight x
    st.floats(0.0, 20.0),  # clock rate
    st.sampled_from([0.0, 1.0, 5.0, 50.0]),  # current cap
    st.floats(0.0, 100.0),  # weight borrowed earlier from the slack
    st.integers(0, 2),  # node
)


@settings(max_examples=300, deadline=None)
@given(
    jobs=st.lists(st.lists(subtask, min_size=2, max_size=4), min_size=1, max_size=4),
    slack=st.lists(st.floats(0.0, 500.0), min_size=3, max_size=3),
    real_time=st.floats(0.0, 6000.0),
    e_t=st.floats(50.0, 500.0),
)
def test_pace_control_neither_creates_nor_loses_weight(
    jobs: list[list[tuple[float, float, float, float, float, int]]],
    slack: list[float],
    real_time: float,
    e_t: float,
) -> None:
    states = tuple(
        JobState(
            f"j{k}",
            e_t,
            100.0,
            tuple(
                SubtaskState(i, f"n{node}", tv, x, x + extra, 0.0, rate, cap)
                for i, (tv, x, rate, cap, extra, node) in enumerate(subs)
            ),
        )
        for k, subs in enumerate(jobs)
    )
    before = {f"n{n}": s for n, s in enumerate(slack)}
    reply = control(ControlRequest(real_time, states, before, P), PACE)
    held_before: dict[str, float] = {}
    held_after: dict[str, float] = {}
    for job, d in zip(states, reply.decisions):
        changes = {ch.index: ch for ch in d.changes}
        for s in job.subtasks:
            ch = changes.get(s.index)
            weight = ch.weight if ch else s.weight
            assert weight >= 0 and (ch is None or (ch.rate_cap >= 0 and ch.virtual_weight == 0))
            # a node never gives more than its slack: weight beyond x came from it
            assert weight >= s.admitted_weight or weight == s.weight
            held_before[s.node] = held_before.get(s.node, 0.0) + s.weight
            held_after[s.node] = held_after.get(s.node, 0.0) + weight
    for node, s in before.items():
        assert reply.node_slack[node] >= -1e-9
        # what the subtasks hold plus the slack is the same before and after the period
        assert math.isclose(
            held_after.get(node, 0.0) + reply.node_slack[node],
            held_before.get(node, 0.0) + s,
            rel_tol=1e-9,
            abs_tol=1e-9,
        )


def _run_periods_with_lead(
    available: list[float], x: list[float], periods: int, lead: float, a_t: float
) -> list[float]:
    """:func:`_run_periods` with ``pace_lead`` and ``A_t`` (s); phase differences (s)."""
    return _run_periods(available, x, periods,
                        config=ControllerConfig(mode=ControlMode.PACE, pace_lead=lead), a_t=a_t)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(5.0, 400.0), min_size=2, max_size=4),
    st.sampled_from([0.1, 0.25, 0.5]),
    st.floats(60.0, 600.0),
)
def test_with_a_pace_lead_the_phase_difference_never_grows_past_the_lead_and_first_gap(
    available: list[float], lead: float, a_t: float
) -> None:
    # Whatever the nodes give, a lead never lets the gang drift further apart than the
    # lead (a fraction of A_t) plus the first, unpaced period's divergence (at most the
    # fastest member's clock rate times one period).
    x = [25.0] * len(available)
    phis = _run_periods_with_lead(available, x, periods=60, lead=lead, a_t=a_t)
    settled = phis[40:]
    assert max(settled) <= lead * a_t + max(available) / 25.0 * P + 1e-6, settled


def test_a_pace_lead_of_half_the_window_settles_at_half_the_window() -> None:
    # 100/300/600 MHz-like nodes (QoS 50/150/300 Mcycles/s), A_t 200 s: in step the gang
    # closes its first divergence and stays at 0 s; with a lead of 0.5 the members on the
    # fast nodes stay 100 s ahead of the laggard, and never leave A_t.
    in_step = _run_periods_with_lead([50.0, 150.0, 300.0], [25.0] * 3, 30, 0.0, 200.0)
    led = _run_periods_with_lead([50.0, 150.0, 300.0], [25.0] * 3, 30, 0.5, 200.0)
    assert max(in_step[10:]) < 1.0
    assert all(abs(phi - 100.0) < 1.0 for phi in led[10:]), led
    assert in_step[:4] == led[:4]  # closing the first divergence is the same
