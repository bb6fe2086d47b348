"""Flow placement (pure): gangs, fair shares, labels, priority, waiting, reasons."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from global_manager.flow_placement import (
    FlowPlacementReply,
    FlowPlacementRequest,
    NodeState,
    UserShare,
    fair_shares,
    place_pending,
)
from global_manager.pending_job import PendingJob, PendingSubtask, ReasonKind

GPU = frozenset({"gpu"})


def pending(jid: str, user: str, subtasks: tuple[PendingSubtask, ...], priority: int = 0,
            arrival: float = 0.0) -> PendingJob:
    """A strict pending job of these subtasks (the solver reads their rates and labels;
    each runs 1 s at its rate)."""
    rates = tuple(s.rate for s in subtasks)
    return PendingJob(jid, user, rates, rates, rates, tuple(s.labels for s in subtasks),
                      True, priority, arrival)


def job(jid: str, *rates: float, user: str = "u", priority: int = 0, arrival: float = 0.0,
        labels: frozenset[str] = frozenset()) -> PendingJob:
    return pending(jid, user, tuple(PendingSubtask(r, labels) for r in rates), priority,
                   arrival)


def node(name: str, free: float, speed: float = 1000.0, labels: frozenset[str] = frozenset(),
         committed: float = 0.0) -> NodeState:
    return NodeState(name, speed, free, labels, committed)


def solve(jobs, nodes, now: float = 0.0, **kw) -> FlowPlacementReply:
    return place_pending(FlowPlacementRequest(now, tuple(jobs), tuple(nodes), **kw))


def kinds(reply: FlowPlacementReply, jid: str) -> list[ReasonKind]:
    return [r.kind for r in reply.pending[jid]]


# ------------------------------------------------------------------------ gangs
def test_a_gang_is_placed_whole_or_not_at_all() -> None:
    # Three subtasks of 60 but only two nodes with 60 free: nothing of it is placed, and
    # the free budget goes to the job behind it.
    nodes = [node("a", 60), node("b", 60), node("c", 30)]
    r = solve([job("big", 60, 60, 60, arrival=0), job("small", 30, arrival=5)], nodes, now=10,
              reserve_after=None)
    assert "big" not in r.placements
    assert set(r.placements) == {"small"}
    assert kinds(r, "big") == [ReasonKind.NODES]


def test_a_partial_gang_is_withdrawn_and_the_round_re_solved_without_it() -> None:
    # Both jobs fit alone. "gang" (higher priority) wins node a in the flow but "hog"
    # takes b, so "gang" is partial: withdrawn, and the re-solve gives a to "solo".
    nodes = [node("a", 100), node("b", 100)]
    jobs = [job("hog", 100, priority=2), job("gang", 100, 100, priority=1),
            job("solo", 100)]
    r = solve(jobs, nodes, reserve_after=None, users=(UserShare("u", bound=1e9),))
    assert set(r.placements) == {"hog", "solo"}
    assert r.rounds == 2
    assert kinds(r, "gang") == [ReasonKind.BUDGET, ReasonKind.BUDGET]


def test_subtasks_of_a_job_go_to_distinct_nodes() -> None:
    # One node could hold every subtask; two classes (rates 10 and 20) still split.
    nodes = [node("big", 1000), node("n1", 20), node("n2", 20)]
    r = solve([job("j", 10, 20, 20)], nodes)
    assert sorted(r.placements["j"]) == ["big", "n1", "n2"]
    r = solve([job("j", 10, 20, 20)], nodes[:2])
    assert kinds(r, "j") == [ReasonKind.NODES]
    assert "3 subtasks need distinct nodes but only 2" in r.pending["j"][0].message


# ---------------------------------------------------------------------- fairness
def test_fair_shares_are_weighted_drf_over_the_qos_capacity() -> None:
    users = [UserShare("a", 1.0), UserShare("b", 3.0), UserShare("c", 1.0, bound=7.0)]
    shares = fair_shares(400.0, users, {"a": 1000.0, "b": 1000.0})
    assert shares == pytest.approx({"a": 100.0, "b": 300.0, "c": 7.0})
    # A user who wants little gets it; the rest is shared by weight.
    shares = fair_shares(400.0, users[:2], {"a": 40.0, "b": 1000.0})
    assert shares == pytest.approx({"a": 40.0, "b": 360.0})


def test_per_user_bounds_are_respected() -> None:
    # 8 nodes of 100; alice (weight 1) and bob (weight 3) each want all of them.
    nodes = [node(f"n{i}", 100) for i in range(8)]
    jobs = [job(f"a{i}", 50, user="alice") for i in range(16)]
    jobs += [job(f"b{i}", 50, user="bob") for i in range(16)]
    users = (UserShare("alice", 1.0), UserShare("bob", 3.0))
    r = solve(jobs, nodes, users=users)
    held = {"alice": 0.0, "bob": 0.0}
    for jid in r.placements:
        held["alice" if jid.startswith("a") else "bob"] += 50
    assert r.fair_shares == pytest.approx({"alice": 200.0, "bob": 600.0})
    assert held == {"alice": 200.0, "bob": 600.0}
    waiting = next(j for j in r.pending if j.startswith("a"))
    assert ReasonKind.FAIR_SHARE in kinds(r, waiting)


def test_held_rate_counts_against_the_share_and_a_bound_overrides_drf() -> None:
    nodes = [node("a", 100), node("b", 100)]
    users = (UserShare("alice", held=150.0), UserShare("bob"))
    jobs = [job("a1", 50, user="alice"), job("b1", 50, user="bob")]
    r = solve(jobs, nodes, users=users)
    # Capacity 200; alice demands 200, bob 50: alice's share 150, all held already.
    assert set(r.placements) == {"b1"}
    assert kinds(r, "a1") == [ReasonKind.FAIR_SHARE]
    assert r.pending["a1"][0].short == pytest.approx(50)
    r = solve(jobs, nodes, users=(replace(users[0], bound=500.0), users[1]))
    assert set(r.placements) == {"a1", "b1"}


# ------------------------------------------------------------------------ labels
def test_label_constraints() -> None:
    nodes = [node("plain", 500), node("gpu1", 100, labels=GPU | {"x"})]
    r = solve([job("g", 50, labels=GPU), job("t", 50, labels=frozenset({"tpu"}))], nodes)
    assert r.placements["g"] == ("gpu1",)
    assert kinds(r, "t") == [ReasonKind.LABELS]
    assert "no node has the labels tpu" in r.pending["t"][0].message
    # A labelled subtask and an unlabelled one in the same job.
    mixed = pending("m", "u", (PendingSubtask(50, GPU), PendingSubtask(50)))
    assert solve([mixed], nodes).placements["m"] == ("gpu1", "plain")


# ---------------------------------------------------------------------- priority
def test_higher_priority_first_even_against_a_longer_wait() -> None:
    nodes = [node("a", 100)]
    jobs = [job("old", 100, arrival=0.0), job("urgent", 100, priority=5, arrival=9_000.0)]
    r = solve(jobs, nodes, now=10_000.0, reserve_after=None)
    assert r.placements == {"urgent": ("a",)}
    # Same priority: the one that waited longer.
    jobs = [job("new", 100, arrival=9_000.0), job("old", 100, arrival=0.0)]
    r = solve(jobs, nodes, now=10_000.0)
    assert r.placements == {"old": ("a",)}


def test_the_preference_weighs_pace_and_load() -> None:
    """``P`` is the mean of the pace term and the load term (qos_share 0.5)."""
    # Load: same nodes, one half committed: a light subtask goes to the emptier one.
    nodes = [node("busy", 50, speed=200, committed=50), node("idle", 100, speed=200)]
    assert solve([job("light", 40)], nodes).placements["light"] == ("idle",)
    # Pace: a light subtask on a node 50x too fast for it would run far ahead of its
    # siblings (pace 391 + load 10) / 2 = 200; a moderately fast one costs
    # (69 + 250) / 2 = 159.
    nodes = [node("huge", 5000, speed=10_000), node("mid", 200, speed=400)]
    assert solve([job("light", 100)], nodes).placements["light"] == ("mid",)
    # A gang goes where all of it fits: the heavy subtask needs the fast node.
    nodes = [node("fast", 500, speed=1000), node("slow", 100, speed=200)]
    assert solve([job("pair", 100, 500)], nodes).placements["pair"] == ("slow", "fast")


# -------------------------------------------------------------------- starvation
def simulate(reserve_after: float | None, cycles: int = 40) -> int | None:
    """4 nodes of 100; a 4-subtask gang (100 each) waits from t=0 while one small job
    (one subtask of 100) arrives every cycle (10 s); jobs run 3 cycles. Returns the cycle
    the gang is placed in (None: never)."""
    names = ["a", "b", "c", "d"]
    running: dict[str, tuple[str, int]] = {"s-1": ("a", 1), "s-2": ("b", 2), "s-3": ("c", 3)}
    pending = [job("gang", 100, 100, 100, 100, arrival=0.0)]
    for t in range(cycles):
        running = {k: v for k, v in running.items() if v[1] > t}
        pending.append(job(f"s{t}", 100, arrival=10.0 * t))
        used = {n: 0.0 for n in names}
        for n, _ in running.values():
            used[n] += 100
        nodes = [node(n, 100 - used[n], committed=used[n]) for n in names]
        r = solve(pending, nodes, now=10.0 * t, reserve_after=reserve_after)
        for jid, where in r.placements.items():
            if jid == "gang":
                return t
            running[jid] = (where[0], t + 3)
        pending = [j for j in pending if j.job_id not in r.placements]
    return None


def test_a_large_gang_is_not_starved_by_a_stream_of_small_jobs() -> None:
    assert simulate(reserve_after=None) is None  # without holding nodes it never fits
    placed = simulate(reserve_after=30.0)
    assert placed is not None and placed <= 3 + 3  # waited 30 s, then nodes drain to it


def test_the_reservation_is_reported_and_blocks_smaller_jobs() -> None:
    nodes = [node("a", 100), node("b", 0, committed=100)]
    jobs = [job("gang", 100, 100, arrival=0.0), job("small", 100, arrival=90.0)]
    r = solve(jobs, nodes, now=100.0, reserve_after=50.0)
    assert r.placements == {}
    assert r.reserved_for == "gang" and r.reserved == {"a": 100.0}
    assert ReasonKind.RESERVED in kinds(r, "small")
    assert kinds(r, "gang") == [ReasonKind.NODES]
    # Not waited long enough: no reservation, the small job runs.
    r = solve(jobs, nodes, now=100.0, reserve_after=500.0)
    assert r.placements == {"small": ("a",)} and r.reserved_for is None


# ------------------------------------------------------------------------ reasons
def test_reasons_per_constraint() -> None:
    nodes = [node("a", 40, committed=60), node("b", 70, labels=GPU)]
    jobs = [
        job("short", 80),  # no node with 80 free (70 the most): 10 short
        job("huge", 500),  # larger than any node's whole budget
        job("wide", 10, 10, 10),  # three subtasks, two nodes
        job("lab", 10, labels=frozenset({"tpu"})),
    ]
    r = solve(jobs, nodes)
    assert r.placements == {}
    (short,) = r.pending["short"]
    assert short.kind is ReasonKind.BUDGET and short.subtask == 0
    assert short.short == pytest.approx(10)
    assert "no node with 80 Mcycles/s of free budget" in short.message
    (huge,) = r.pending["huge"]
    assert huge.kind is ReasonKind.BUDGET and huge.short == pytest.approx(400)
    assert kinds(r, "wide") == [ReasonKind.NODES]
    assert kinds(r, "lab") == [ReasonKind.LABELS]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda q: replace(q, nodes=q.nodes * 2), "nodes: duplicate node name 'a'"),
        (lambda q: replace(q, jobs=q.jobs * 2), "jobs: duplicate job id 'j'"),
        (lambda q: replace(q, jobs=(job("j", 0.0),)), r"jobs\['j'\].subtasks\[0\].rate"),
        (lambda q: replace(q, jobs=(job("j", math.nan),)), r"rate: must be a finite"),
        (lambda q: replace(q, jobs=(pending("j", "u", ()),)), "a job needs at least one"),
        (lambda q: replace(q, nodes=(node("a", 1, speed=0),)), r"nodes\['a'\].speed"),
        (lambda q: replace(q, users=(UserShare("u", weight=0),)), r"users\['u'\].weight"),
        (lambda q: replace(q, max_rounds=0), "max_rounds: must be >= 1"),
        (lambda q: replace(q, qos_share=1.5), "qos_share: must be within"),
    ],
)
def test_bad_requests_are_refused(change, message: str) -> None:
    q = FlowPlacementRequest(0.0, (job("j", 1),), (node("a", 10),))
    with pytest.raises(ValueError, match=message):
        place_pending(change(q))


# ---------------------------------------------------------------------- properties
LABELS = st.frozensets(st.sampled_from(["x", "y"]), max_size=1)


@st.composite
def requests(draw: st.DrawFn) -> FlowPlacementRequest:
    n_nodes = draw(st.integers(1, 6))
    nodes = tuple(
        NodeState(f"n{k}", draw(st.sampled_from([100.0, 300.0, 600.0])),
                  draw(st.floats(0, 300)), draw(LABELS), draw(st.floats(0, 100)))
        for k in range(n_nodes)
    )
    users = ["alice", "bob", "carol"]
    jobs = tuple(
        pending(
            f"j{i}", draw(st.sampled_from(users)),
            tuple(PendingSubtask(draw(st.sampled_from([10.0, 25.0, 50.0, 100.0, 150.0])),
                                 draw(LABELS))
                  for _ in range(draw(st.integers(1, 4)))),
            draw(st.integers(0, 2)), draw(st.floats(0, 1000)),
        )
        for i in range(draw(st.integers(0, 8)))
    )
    shares = tuple(UserShare(u, draw(st.floats(0.5, 4)), draw(st.floats(0, 200)))
                   for u in users if draw(st.booleans()))
    return FlowPlacementRequest(1000.0, jobs, nodes, shares,
                                reserve_after=draw(st.sampled_from([None, 0.0, 500.0])))


@settings(max_examples=150, deadline=None)
@given(requests())
def test_placement_properties(q: FlowPlacementRequest) -> None:
    r = place_pending(q)
    assert place_pending(q) == r  # deterministic
    by_name = {n.name: n for n in q.nodes}
    by_id = {j.job_id: j for j in q.jobs}
    assert set(r.placements) | set(r.pending) == set(by_id)
    assert not set(r.placements) & set(r.pending)
    assert all(r.pending[j] for j in r.pending)  # every pending job says why
    used = {n: 0.0 for n in by_name}
    user_rate: dict[str, float] = {}
    for jid, where in r.placements.items():
        spec = by_id[jid]
        assert len(where) == len(spec.subtasks)  # complete
        assert len(set(where)) == len(where)  # distinct nodes
        for s, n in zip(spec.subtasks, where):
            assert s.labels <= by_name[n].labels
            used[n] += s.rate
        user_rate[spec.user] = user_rate.get(spec.user, 0.0) + sum(s.rate for s in spec.subtasks)
    for n, u in used.items():  # no node over its free budget (nor into a reservation)
        assert u + r.reserved.get(n, 0.0) <= max(by_name[n].free, 0.0) + 1e-6
    held = {u.user: u.held for u in q.users}
    for user, rate in user_rate.items():
        assert held.get(user, 0.0) + rate <= r.fair_shares[user] + 1e-6


def test_a_subnormal_capacity_is_no_capacity() -> None:
    # A node whose committed rate is the smallest subnormal makes the grid's capacity
    # 5e-324, on which DRF's per-task share overflows.
    from global_manager.flow_placement import (
        FlowPlacementRequest,
        NodeState,
        UserShare,
        place_pending,
    )

    q = FlowPlacementRequest(
        now=1000.0, jobs=(),
        nodes=(NodeState("n0", 100.0, 0.0, frozenset(), 5e-324),),
        users=(UserShare("carol", 0.5, 0.0, None),), qos_share=0.5, max_rounds=8,
        reserve_after=None,
    )
    assert dict(place_pending(q).fair_shares) == {"carol": 0.0}
