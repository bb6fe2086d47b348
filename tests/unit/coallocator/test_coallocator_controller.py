"""The pure SQ controller solver: window choice, SF_d / SF_u by hand, weight transfers,
overbooking slack, the floor, the ``extremes`` targets, and properties (no negative
weights, weight plus node slack conserved)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coallocator.controller import (
    AsynchronyTargets,
    ControllerConfig,
    ControlRequest,
    JobState,
    OverallFactor,
    SubtaskState,
    Window,
    control,
    phase_difference,
)

# The worked example of the brief: T_V = [1000, 1100, 1300] s, r = [50, 100, 25] Mcycles/s,
# k = 1/100 per s. mean = 3400 / 3 = 1133.33.. s, Asyn = 300 s.
TV = (1000.0, 1100.0, 1300.0)
R = (50.0, 100.0, 25.0)
MEAN = 3400.0 / 3.0


def job(
    tvs: tuple[float, ...] = TV,
    rs: tuple[float, ...] = R,
    weights: tuple[float, ...] | None = None,
    virtual: tuple[float, ...] | None = None,
    e_t: float = 100.0,
    a_t: float = 150.0,
    job_id: str = "j1",
    nodes: tuple[str, ...] | None = None,
) -> JobState:
    weights = weights if weights is not None else rs
    virtual = virtual if virtual is not None else (0.0,) * len(rs)
    nodes = nodes if nodes is not None else tuple(f"n{i}" for i in range(len(rs)))
    return JobState(
        job_id,
        e_t,
        a_t,
        tuple(
            SubtaskState(i, nodes[i], tvs[i], rs[i], weights[i], virtual[i]) for i in range(len(rs))
        ),
    )


def run(
    real_time: float,
    *jobs: JobState,
    slack: dict[str, float] | None = None,
    config: ControllerConfig | None = None,
):
    return control(ControlRequest(real_time, tuple(jobs), slack or {}), config)


# ----------------------------------------------------------------------- windows


def test_asynchrony_window_exact_factors_slack_and_floor() -> None:
    # |mean - T_R| = 33.3 s <= E_t = 100 s; Asyn = 300 s > A_t = 150 s.
    reply = run(1100.0, job(), slack={"n0": 100.0, "n1": 10.0, "n2": 0.0})
    (d,) = reply.decisions
    assert d.window is Window.ASYNCHRONY
    assert d.mean_virtual == pytest.approx(MEAN)
    assert d.phase_difference == pytest.approx(300.0)
    c0, c1, c2 = d.changes
    # SF_u,0 = (1133.33 - 1000) * 50 / 100 = 66.67: nothing virtual, all from n0's slack.
    assert c0.factor == pytest.approx(400.0 / 6.0)
    assert (c0.weight, c0.virtual_weight) == pytest.approx((50.0 + 400.0 / 6.0, 0.0))
    assert c0.from_slack == pytest.approx(400.0 / 6.0)
    # SF_u,1 = 33.33 * 100 / 100 = 33.33, but n1 has only 10 of slack.
    assert c1.factor == pytest.approx(100.0 / 3.0)
    assert (c1.weight, c1.virtual_weight, c1.from_slack) == pytest.approx((110.0, 0.0, 10.0))
    # SF_d,2 = (1300 - 1133.33) * 25 / 100 = 41.67 wanted; only 25 - 0.25 (the 1 % floor)
    # can move to the virtual subtask.
    assert c2.factor == pytest.approx(-125.0 / 3.0)
    assert (c2.weight, c2.virtual_weight, c2.from_slack) == pytest.approx((0.25, 24.75, 0.0))
    assert reply.node_slack == pytest.approx({"n0": 100.0 - 400.0 / 6.0, "n1": 0.0, "n2": 0.0})


UNIFORM = ControllerConfig(overall_factor=OverallFactor.UNIFORM)


def test_overall_window_behind_steers_each_subtask_by_its_own_lag_and_takes_precedence() -> None:
    # T_R = 1300: mean - T_R = -166.67 s, |.| > E_t = 100 (Asyn = 300 > A_t too).
    # Per-subtask factors (T_R - T_V,i) * r_i * k = 300*50/100, 200*100/100, 0*25/100.
    slack = {"n0": 1000.0, "n1": 1000.0, "n2": 1000.0}
    (d,) = run(1300.0, job(), slack=slack).decisions
    assert d.window is Window.OVERALL_BEHIND
    assert [c.index for c in d.changes] == [0, 1]  # subtask 2 is on time
    assert [c.factor for c in d.changes] == pytest.approx([150.0, 200.0])
    assert [c.weight for c in d.changes] == pytest.approx([200.0, 300.0])
    assert [c.from_slack for c in d.changes] == pytest.approx([150.0, 200.0])


def test_overall_window_behind_with_no_weight_to_give_falls_through_to_asynchrony() -> None:
    # T_R = 1300, job behind, Asyn = 300 > A_t = 150; no slack and no virtual weight, so
    # no subtask can be sped up. The asynchrony slow-downs apply instead: only subtask 2
    # is ahead of the mean, SF_d = (1300 - 1133.33) * 25 / 100 = 41.67 moved to virtual.
    (d,) = run(1300.0, job()).decisions
    assert d.window is Window.OVERALL_BEHIND_ASYNCHRONY
    assert [c.index for c in d.changes] == [2]
    assert d.changes[0].factor == pytest.approx(-(1300.0 - MEAN) * 25.0 / 100.0)
    assert d.changes[0].weight == pytest.approx(25.0 * 0.01)  # floor: 41.67 > 25 - 0.25
    assert d.changes[0].virtual_weight == pytest.approx(25.0 - 0.25)
    # Turned off, the window that cannot act stays in charge and nothing moves.
    off = ControllerConfig(starved_asynchrony=False)
    (d,) = run(1300.0, job(), config=off).decisions
    assert d.window is Window.OVERALL_BEHIND
    assert all(c.weight == pytest.approx(r) for c, r in zip(d.changes, R))


def test_overall_window_behind_that_can_speed_something_up_keeps_precedence() -> None:
    # Slack on n0 only: subtask 0 can be sped up, so the overall correction stands.
    (d,) = run(1300.0, job(), slack={"n0": 10.0}).decisions
    assert d.window is Window.OVERALL_BEHIND
    assert d.changes[0].from_slack == pytest.approx(10.0)


def test_overall_window_behind_uniform_moves_every_subtask_by_the_jobs_lag() -> None:
    slack = {"n0": 1000.0, "n1": 1000.0, "n2": 1000.0}
    (d,) = run(1300.0, job(), slack=slack, config=UNIFORM).decisions
    assert d.window is Window.OVERALL_BEHIND
    dev = 1300.0 - MEAN
    assert [c.factor for c in d.changes] == pytest.approx([dev * r / 100.0 for r in R])
    assert [c.weight for c in d.changes] == pytest.approx([r + dev * r / 100.0 for r in R])


def test_overall_window_ahead_slows_subtasks_down_to_the_floor() -> None:
    # T_R = 1000: mean - T_R = +133.33 s > E_t. Per subtask: 0 (on time), -100*100/100,
    # -300*25/100; both exceed what the weight has above its 1 % floor (99, 24.75).
    (d,) = run(1000.0, job()).decisions
    assert d.window is Window.OVERALL_AHEAD
    assert [c.index for c in d.changes] == [1, 2]
    assert [c.factor for c in d.changes] == pytest.approx([-100.0, -75.0])
    assert [c.weight for c in d.changes] == pytest.approx([1.0, 0.25])
    assert [c.virtual_weight for c in d.changes] == pytest.approx([99.0, 24.75])


def test_overall_window_ahead_uniform_slows_every_subtask() -> None:
    # Factors -133.33 * r / 100 = -66.7, -133.3, -33.3: all three to the floor.
    (d,) = run(1000.0, job(), config=UNIFORM).decisions
    assert [c.factor for c in d.changes] == pytest.approx([-(MEAN - 1000.0) * r / 100 for r in R])
    assert [c.weight for c in d.changes] == pytest.approx([0.5, 1.0, 0.25])
    assert [c.virtual_weight for c in d.changes] == pytest.approx([49.5, 99.0, 24.75])


@pytest.mark.parametrize(
    ("overall", "expected"),
    [
        # factors -(1100 - 1000) * 200 / 1000 = -20 and -(1200 - 1000) * 400 / 1000 = -80
        (OverallFactor.PER_SUBTASK, [(180.0, 20.0), (320.0, 80.0)]),
        # factors -150 * 200 / 1000 = -30 and -150 * 400 / 1000 = -60
        (OverallFactor.UNIFORM, [(170.0, 30.0), (340.0, 60.0)]),
    ],
)
def test_overall_window_partial_slow_down_moves_exactly_the_factor(
    overall: OverallFactor, expected: list[tuple[float, float]]
) -> None:
    # mean 1150, T_R 1000: +150 s > E_t = 100. With k = 1/1000 the factors stay above the
    # floor, so exactly SF moves to the virtual subtasks.
    cfg = ControllerConfig(gain=1.0 / 1000.0, overall_factor=overall)
    (d,) = run(1000.0, job((1100.0, 1200.0), (200.0, 400.0), a_t=1000.0), config=cfg).decisions
    assert d.window is Window.OVERALL_AHEAD
    # pytest.approx compares flat sequences only (nested ones are a TypeError since pytest 9.1)
    pairs = [w for c in d.changes for w in (c.weight, c.virtual_weight)]
    assert pairs == pytest.approx([w for pair in expected for w in pair])


def test_slowed_subtask_returns_weight_it_took_from_the_slack() -> None:
    # Both admitted at 40. Subtask 1 is ahead (mean 1100): SF_d = 100 * 40 / 100 = 40.
    # It holds 100 (60 taken from n1's slack earlier): 40 moves to its virtual subtask,
    # and of the 60 above r_i the virtual subtask's 40 go back to the slack.
    state = job((1000.0, 1200.0), (40.0, 40.0), weights=(40.0, 100.0), a_t=100.0)
    reply = run(1100.0, state, slack={"n0": 0.0, "n1": 5.0})
    c1 = reply.decisions[0].changes[1]
    assert (c1.weight, c1.virtual_weight, c1.from_slack) == pytest.approx((60.0, 0.0, 0.0))
    assert reply.node_slack["n1"] == pytest.approx(45.0)
    # Holding only 10 above r_i: 30 of the 40 moved stay in the virtual subtask.
    state = job((1000.0, 1200.0), (40.0, 40.0), weights=(40.0, 50.0), a_t=100.0)
    reply = run(1100.0, state, slack={"n1": 0.0})
    c1 = reply.decisions[0].changes[1]
    assert (c1.weight, c1.virtual_weight) == pytest.approx((10.0, 30.0))
    assert reply.node_slack["n1"] == pytest.approx(10.0)


def test_no_window_when_inside_both() -> None:
    (d,) = run(1100.0, job(a_t=400.0)).decisions
    assert d.window is Window.NONE
    assert d.changes == ()
    assert d.mean_virtual == pytest.approx(MEAN)
    assert d.phase_difference == pytest.approx(300.0)


def test_windows_are_strict_inequalities() -> None:
    # |mean - T_R| == E_t and Asyn == A_t: neither fires.
    (d,) = run(1000.0, job((1050.0, 1150.0), (10.0, 10.0), e_t=100.0, a_t=100.0)).decisions
    assert d.window is Window.NONE


def test_asynchrony_gives_back_virtual_weight_before_taking_slack() -> None:
    # Subtask 0 is behind by 100 s (mean 1100): SF_u = 100 * 40 / 100 = 40, of which 30
    # comes from its virtual subtask and 10 from n0's slack. Subtask 1 slows by 40.
    state = job((1000.0, 1200.0), (40.0, 40.0), weights=(20.0, 40.0), virtual=(30.0, 0.0))
    reply = run(1100.0, state, slack={"n0": 50.0, "n1": 50.0})
    c0, c1 = reply.decisions[0].changes
    assert (c0.weight, c0.virtual_weight, c0.from_slack) == pytest.approx((60.0, 0.0, 10.0))
    assert (c1.weight, c1.virtual_weight, c1.from_slack) == pytest.approx((0.4, 39.6, 0.0))
    assert reply.node_slack == pytest.approx({"n0": 40.0, "n1": 50.0})


def test_speed_up_covered_by_virtual_weight_takes_no_slack() -> None:
    state = job((1000.0, 1200.0), (40.0, 40.0), weights=(10.0, 40.0), virtual=(100.0, 0.0))
    reply = run(1100.0, state, slack={"n0": 50.0})
    c0 = reply.decisions[0].changes[0]
    assert (c0.weight, c0.virtual_weight, c0.from_slack) == pytest.approx((50.0, 60.0, 0.0))
    assert reply.node_slack == {"n0": 50.0}


def test_unknown_or_negative_slack_counts_as_none() -> None:
    state = job((1000.0, 1200.0), (40.0, 40.0))
    reply = run(1100.0, state, slack={"n0": -5.0})
    c0 = reply.decisions[0].changes[0]
    assert c0.factor == pytest.approx(40.0)
    assert (c0.weight, c0.from_slack) == (40.0, 0.0)
    assert reply.node_slack == {"n0": 0.0}


def test_slack_is_consumed_in_request_order_jobs_then_subtasks() -> None:
    # Both jobs have one subtask behind on node "a" wanting 40 of slack; "a" has 50.
    first = job((1000.0, 1200.0), (40.0, 40.0), job_id="first", nodes=("a", "b"))
    second = job((1000.0, 1200.0), (40.0, 40.0), job_id="second", nodes=("a", "c"))
    reply = run(1100.0, first, second, slack={"a": 50.0})
    assert [d.job_id for d in reply.decisions] == ["first", "second"]
    assert reply.decisions[0].changes[0].from_slack == pytest.approx(40.0)
    assert reply.decisions[1].changes[0].from_slack == pytest.approx(10.0)
    assert reply.node_slack["a"] == pytest.approx(0.0)
    # Within one job: two subtasks behind on the same node, the lower index first.
    same = job((1000.0, 1000.0, 1300.0), (30.0, 30.0, 30.0), nodes=("a", "a", "b"))
    reply = run(1100.0, same, slack={"a": 40.0})
    c0, c1, _ = reply.decisions[0].changes
    # mean 1100: SF_u = 100 * 30 / 100 = 30 each; 30 then the remaining 10.
    assert (c0.from_slack, c1.from_slack) == pytest.approx((30.0, 10.0))


def test_weight_already_at_the_floor_does_not_move() -> None:
    state = job((1000.0, 1200.0), (40.0, 40.0), weights=(40.0, 0.4), virtual=(0.0, 39.6))
    c1 = run(1100.0, state).decisions[0].changes[1]
    assert c1.factor == pytest.approx(-40.0)
    assert (c1.weight, c1.virtual_weight) == pytest.approx((0.4, 39.6))


def test_configurable_gain_and_floor() -> None:
    cfg = ControllerConfig(gain=1.0 / 50.0, weight_floor=0.5)
    state = job((1000.0, 1200.0), (40.0, 40.0))
    c0, c1 = run(1100.0, state, slack={"n0": 1000.0}, config=cfg).decisions[0].changes
    assert c0.factor == pytest.approx(80.0)  # 100 s * 40 * 1/50
    assert c0.weight == pytest.approx(120.0)
    assert c1.weight == pytest.approx(20.0)  # floor 50 % of 40


def test_extremes_corrects_only_the_fastest_and_the_slowest() -> None:
    cfg = ControllerConfig(asynchrony_targets=AsynchronyTargets.EXTREMES)
    state = job((1000.0, 1100.0, 1200.0, 1300.0), (10.0, 10.0, 10.0, 10.0), a_t=100.0)
    (d,) = run(1150.0, state, slack={"n0": 100.0}, config=cfg).decisions
    assert d.window is Window.ASYNCHRONY
    assert [c.index for c in d.changes] == [0, 3]
    assert [c.factor for c in d.changes] == pytest.approx([15.0, -15.0])
    (d_all,) = run(1150.0, state, slack={"n0": 100.0}).decisions
    assert [c.index for c in d_all.changes] == [0, 1, 2, 3]


def test_extremes_ties_pick_the_lowest_index() -> None:
    cfg = ControllerConfig(asynchrony_targets=AsynchronyTargets.EXTREMES)
    state = job((1000.0, 1000.0, 1300.0, 1300.0), (10.0,) * 4, a_t=100.0)
    (d,) = run(1150.0, state, slack={"n0": 100.0, "n1": 100.0}, config=cfg).decisions
    assert [c.index for c in d.changes] == [0, 2]


def test_subtask_at_the_mean_gets_no_change() -> None:
    state = job((1000.0, 1100.0, 1200.0), (10.0, 10.0, 10.0), a_t=100.0)
    (d,) = run(1100.0, state, slack={"n0": 100.0}).decisions
    assert [c.index for c in d.changes] == [0, 2]


def test_job_with_no_running_subtasks_reports_nothing() -> None:
    (d,) = run(50.0, JobState("j", 1.0, 1.0, ())).decisions
    assert (d.window, d.changes, d.phase_difference, d.mean_virtual) == (Window.NONE, (), 0.0, 50.0)


def test_same_request_same_reply_and_request_untouched() -> None:
    request = ControlRequest(1100.0, (job(),), {"n0": 100.0, "n1": 10.0})
    assert control(request) == control(request)
    assert request.node_slack == {"n0": 100.0, "n1": 10.0}


def test_phase_difference_is_max_minus_min() -> None:
    assert phase_difference([3.0, 1.0, 2.5]) == 2.0
    assert phase_difference((7.0,)) == 0.0
    assert phase_difference([]) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gain": 0.0}, "gain"),
        ({"gain": math.inf}, "gain"),
        ({"weight_floor": -0.1}, "weight_floor"),
        ({"weight_floor": 1.5}, "weight_floor"),
    ],
)
def test_config_validation_names_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ControllerConfig(**kwargs)  # type: ignore[arg-type]


# -------------------------------------------------------------------- properties

subtask_rows = st.lists(
    st.tuples(
        st.floats(-500.0, 500.0),  # T_V offset from T_R, s
        st.floats(1.0, 200.0),  # admitted weight r_i, Mcycles/s
        st.integers(0, 2),  # node index
    ),
    min_size=2,
    max_size=5,
)


@settings(deadline=None, max_examples=80)
@given(
    rows=st.lists(subtask_rows, min_size=1, max_size=3),
    slack=st.lists(st.floats(0.0, 300.0), min_size=3, max_size=3),
    drifts=st.lists(st.floats(-50.0, 50.0), min_size=1, max_size=8),
    extremes=st.booleans(),
    floor=st.sampled_from([0.0, 0.01, 0.2]),
)
def test_weights_never_negative_and_weight_plus_slack_conserved_over_many_periods(
    rows: list[list[tuple[float, float, int]]],
    slack: list[float],
    drifts: list[float],
    extremes: bool,
    floor: float,
) -> None:
    cfg = ControllerConfig(
        weight_floor=floor,
        asynchrony_targets=AsynchronyTargets.EXTREMES if extremes else AsynchronyTargets.ALL,
    )
    nodes = ["a", "b", "c"]
    node_slack = dict(zip(nodes, slack))
    # Mutable state: per job, per subtask [T_V, r, weight, virtual, node].
    state = [[[1000.0 + off, r, r, 0.0, nodes[n]] for off, r, n in subs] for subs in rows]
    real = 1000.0
    for step, drift in enumerate(drifts):
        real += 10.0
        jobs = tuple(
            JobState(
                f"j{j}",
                100.0,
                50.0,
                tuple(SubtaskState(i, s[4], s[0], s[1], s[2], s[3]) for i, s in enumerate(subs)),
            )
            for j, subs in enumerate(state)
        )
        reply = control(ControlRequest(real, jobs, dict(node_slack)), cfg)
        taken: dict[str, float] = {}
        returned: dict[str, float] = {}
        for subs, d in zip(state, reply.decisions):
            for ch in d.changes:
                s = subs[ch.index]
                assert ch.weight >= 0 and ch.virtual_weight >= 0 and ch.from_slack >= 0
                # A slowed weight never goes below the floor (nor below where it was).
                assert ch.weight >= min(s[2], floor * s[1]) - 1e-9
                before = s[2] + s[3]
                after = ch.weight + ch.virtual_weight
                if ch.factor < 0:
                    # Slowing moves weight to the virtual subtask; only what an earlier
                    # speed-up took beyond r_i may leave, back to the node's slack.
                    assert ch.from_slack == 0.0
                    assert ch.weight <= s[2]
                    assert after <= before + 1e-9
                    assert after >= min(before, s[1]) - 1e-9
                    returned[ch.node] = returned.get(ch.node, 0.0) + before - after
                else:
                    # Speeding changes weight + virtual weight only by what the slack gave.
                    assert ch.weight >= s[2]
                    assert after == pytest.approx(before + ch.from_slack, rel=1e-9, abs=1e-9)
                taken[ch.node] = taken.get(ch.node, 0.0) + ch.from_slack
                s[2], s[3] = ch.weight, ch.virtual_weight
        for n in nodes:
            assert reply.node_slack[n] >= 0.0
            # Per node, weight held plus slack is conserved.
            assert reply.node_slack[n] == pytest.approx(
                node_slack[n] - taken.get(n, 0.0) + returned.get(n, 0.0), abs=1e-9
            )
        node_slack = dict(reply.node_slack)
        # Clocks move on: each subtask drifts by its own amount plus the period.
        for j, subs in enumerate(state):
            for i, s in enumerate(subs):
                s[0] += 10.0 + drift * ((i + j + step) % 3 - 1)
