"""The placement interface (global_manager/placer.py), greedy placement
(global_manager/greedy.py) and backfill with reservations (global_manager/backfill.py):
pure solvers over hand-built requests."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from global_manager.backfill import (
    BackfillPlacement,
    availability_time,
    committed_at,
    fair_order,
)
from global_manager.cycle import CycleRequest, GridNode, NodeLoad, RunningSubtask
from global_manager.fit import first_fit
from global_manager.greedy import LeastLoaded
from global_manager.pending_job import PendingJob, ReasonKind
from global_manager.placer import placement_policies


def node(name: str, budget: float, committed: float = 0.0, labels: frozenset[str] = frozenset(),
         up: bool = True) -> GridNode:
    return GridNode(name, 2.0 * budget, budget, committed, committed, labels, up)


def job(job_id: str, *rates: float, run: float = 100.0, user: str = "u", arrival: float = 0.0,
        priority: int = 0) -> PendingJob:
    """A strict job whose subtasks each run ``run`` s at their expected rates."""
    return PendingJob(job_id, user, tuple(r * run for r in rates), rates, rates,
                     tuple(frozenset() for _ in rates), True, priority, arrival)


def test_every_placement_policy_is_registered_by_name() -> None:
    assert {"least_loaded", "random", "flow", "backfill"} <= set(placement_policies.names())
    assert placement_policies.create("backfill").name == "backfill"


def test_first_fit_takes_the_largest_rate_first_and_respects_labels_and_room() -> None:
    ranked = [NodeLoad("a", 100.0, 0.0, 50.0, 0.0), NodeLoad("b", 100.0, 0.0, 30.0, 0.0,
                                                             frozenset({"gpu"}))]
    # The 40 goes first and takes a (b is too small); the 20 then takes b.
    assert first_fit((20.0, 40.0), (), ranked, True) == ("b", "a")
    # Subtask 0 needs gpu: only b has it, and b is too small for 40 -> subtask 0 fails.
    assert first_fit((40.0, 10.0), (frozenset({"gpu"}), frozenset()), ranked, True) == 0
    # Unchecked jobs ignore the room.
    assert first_fit((400.0,), (), ranked, False) == ("a",)


def test_committed_at_and_availability_time_follow_the_expected_ends() -> None:
    ends = [(100.0, 10.0), (200.0, 20.0), (300.0, 30.0)]
    assert committed_at(ends, 0.0) == 60.0
    assert committed_at(ends, 100.0) == 50.0  # the one ending at 100 is gone at 100
    assert committed_at(ends, 250.0) == 30.0
    assert committed_at(ends, 300.0) == 0.0
    # Room 70: 60 committed, a 10 fits now, a 30 once the first two ended (200), an 80
    # never.
    assert availability_time(ends, 60.0, 70.0, 10.0, 5.0) == 5.0
    assert availability_time(ends, 60.0, 70.0, 30.0, 5.0) == 200.0
    assert availability_time(ends, 60.0, 70.0, 80.0, 5.0) == math.inf


def test_fair_order_serves_the_user_holding_least_first_and_rereads_what_it_holds() -> None:
    jobs = [job("a1", 1.0, user="a"), job("a2", 1.0, user="a"), job("b1", 1.0, user="b"),
            job("hi", 1.0, user="a", priority=5)]
    held = {"a": 10.0, "b": 0.0}
    out = []
    for j in fair_order(sorted(jobs, key=lambda j: -j.priority), held):
        out.append(j.job_id)
        if j.job_id == "b1":
            held["b"] = 50.0  # b1 placed: b now holds more than a
    # Priority first; then b (holds less), then a's jobs in submission order.
    assert out == ["hi", "b1", "a1", "a2"]


def cycle(jobs: list[PendingJob], nodes: tuple[GridNode, ...], running=(), now: float = 1000.0,
          **kw: object):
    req = CycleRequest(now, tuple(jobs), nodes, 0.5, queue=True,
                       running=tuple(running))
    return BackfillPlacement(**kw).schedule(req, random.Random(0))  # type: ignore[arg-type]


def test_a_blocked_gang_gets_a_reservation_and_only_jobs_that_do_not_delay_it_backfill() -> None:
    # Two nodes of budget 100; a runs a 60 until t=1500, b a 60 until t=3000.
    nodes = (node("a", 100.0, 60.0), node("b", 100.0, 60.0))
    running = [RunningSubtask("a", 60.0, 1500.0), RunningSubtask("b", 60.0, 3000.0)]
    gang = job("gang", 80.0, 80.0, arrival=0.0)  # needs both nodes nearly whole
    short = job("short", 30.0, run=100.0, arrival=10.0)  # ends at 1100 < 3000
    long = job("long", 30.0, run=5000.0, arrival=20.0)  # ends at 6000 > 3000
    reply = cycle([gang, short, long], nodes, running, outlier=0.0)
    assert list(reply.placed) == ["short"]
    (why,) = reply.reasons["gang"]
    assert why.kind is ReasonKind.RESERVED and "3000" in why.message
    assert reply.reasons["long"][0].kind is ReasonKind.RESERVED
    # Without a reservation the long job would have been placed (it fits now).
    free = cycle([gang, short, long], nodes, running, reserve_after=None)
    assert set(free.placed) == {"short", "long"}


def test_only_an_outlier_of_the_queue_may_hold_a_reservation() -> None:
    nodes = (node("a", 100.0, 60.0), node("b", 100.0, 60.0))
    running = [RunningSubtask("a", 60.0, 1500.0), RunningSubtask("b", 60.0, 3000.0)]
    gang = job("gang", 80.0, 80.0, arrival=0.0)  # waited 1000 s
    others = [job(f"o{i}", 30.0, run=5000.0, arrival=900.0 + i) for i in range(3)]
    # Mean wait (1000 + 3 x ~99) / 4 = 324 s: 1000 >= 3 x 324, so the gang reserves and
    # the long jobs, which would delay it, stay out.
    held = cycle([gang, *others], nodes, running)
    assert "gang" in held.reasons and not held.placed
    # Ten more jobs as old as the gang: it is no outlier, holds nothing, and the others
    # run.
    peers = [job(f"p{i}", 90.0, 90.0, 90.0, arrival=0.0) for i in range(10)]
    free = cycle([gang, *peers, *others], nodes, running)
    assert "gang" not in free.reasons and set(free.placed) == {"o0", "o1"}
    # ... unless it waited reserve_always (6 h): then it reserves whatever the mean.
    old = [job("gang", 80.0, 80.0, arrival=-30_000.0),
           *(job(f"p{i}", 90.0, 90.0, 90.0, arrival=-30_000.0) for i in range(10))]
    bound = cycle([*old, *others], nodes, running)
    assert bound.reasons["gang"][0].kind is ReasonKind.RESERVED and not bound.placed


def test_the_reserved_job_is_placed_as_soon_as_it_fits() -> None:
    nodes = (node("a", 100.0), node("b", 100.0))
    gang = job("gang", 80.0, 80.0)
    small = job("small", 20.0, arrival=5.0)  # fits beside it
    reply = cycle([gang, small], nodes)
    assert list(reply.placed) == ["gang", "small"]
    assert reply.placed["gang"].nodes in (("a", "b"), ("b", "a"))


def test_a_job_that_never_fits_gets_no_reservation_and_blocks_nobody() -> None:
    nodes = (node("a", 100.0, 50.0),)
    running = [RunningSubtask("a", 50.0, 2000.0)]
    huge = job("huge", 150.0)  # above the whole budget: never fits
    small = job("small", 40.0, run=10_000.0, arrival=1.0)
    reply = cycle([huge, small], nodes, running, outlier=0.0)
    assert list(reply.placed) == ["small"]


rates = st.lists(st.sampled_from([10.0, 25.0, 40.0, 60.0]), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None)
@given(st.lists(rates, min_size=1, max_size=8),
       st.lists(st.sampled_from([0.0, 30.0, 70.0]), min_size=3, max_size=3))
def test_without_reservations_and_fair_order_it_places_as_first_fit_does(
    queue: list[list[float]], committed: list[float]
) -> None:
    nodes = tuple(node(n, 100.0, c) for n, c in zip("abc", committed))
    jobs = [job(f"j{i}", *r, arrival=float(i)) for i, r in enumerate(queue)]
    req = CycleRequest(1000.0, tuple(jobs), nodes, 0.5, queue=True)
    greedy = LeastLoaded().schedule(req, random.Random(0))
    bf = BackfillPlacement(reserve_after=None, fair=False).schedule(req, random.Random(0))
    assert {j: p.nodes for j, p in bf.placed.items()} == {
        j: p.nodes for j, p in greedy.placed.items()}


@settings(max_examples=60, deadline=None)
@given(st.lists(rates, min_size=1, max_size=8),
       st.lists(st.sampled_from([0.0, 30.0, 70.0]), min_size=3, max_size=3))
def test_backfill_never_overfills_a_budget_and_places_each_job_on_distinct_nodes(
    queue: list[list[float]], committed: list[float]
) -> None:
    nodes = tuple(node(n, 100.0, c) for n, c in zip("abc", committed))
    running = [RunningSubtask(n.name, n.committed, 1500.0 + 100 * i)
               for i, n in enumerate(nodes) if n.committed > 0]
    jobs = [job(f"j{i}", *r, arrival=float(i), user=f"u{i % 2}") for i, r in enumerate(queue)]
    reply = cycle(jobs, nodes, running)
    used = {n.name: n.committed for n in nodes}
    for p in reply.placed.values():
        assert len(set(p.nodes)) == len(p.nodes)
        for n, r in zip(p.nodes, p.rates):
            used[n] += r
    assert all(used[n] <= 100.0 + 1e-9 for n in used)
    # Every job left pending with a reservation or blocked by one says so.
    for jid in reply.reasons:
        assert jid not in reply.placed


@settings(max_examples=80, deadline=None)
@given(st.lists(rates, min_size=1, max_size=10),
       st.lists(st.sampled_from([0.0, 30.0, 70.0, 95.0]), min_size=3, max_size=3),
       st.sampled_from([0.0, 3.0]), st.booleans())
def test_screening_out_jobs_that_cannot_fit_changes_no_placement_and_no_reason(
    queue: list[list[float]], committed: list[float], outlier: float, fair: bool
) -> None:
    # Budgets only shrink within a cycle, so leaving out at its start the jobs that fail
    # the necessary fit test must place and explain exactly what trying each does.
    nodes = tuple(node(n, 100.0, c) for n, c in zip("abc", committed))
    running = [RunningSubtask(n.name, n.committed, 1500.0 + 100 * i)
               for i, n in enumerate(nodes) if n.committed > 0]
    jobs = tuple(job(f"j{i}", *r, arrival=float(i), user=f"u{i % 3}")
                 for i, r in enumerate(queue))
    req = CycleRequest(100_000.0, jobs, nodes, 0.5, queue=True, running=tuple(running))
    replies = [
        BackfillPlacement(outlier=outlier, fair=fair, screen=screen).schedule(req, random.Random(0))
        for screen in (True, False)
    ]
    screened, tried = replies
    assert list(screened.placed.items()) == list(tried.placed.items())
    assert dict(screened.reasons) == dict(tried.reasons)
    assert dict(screened.messages) == dict(tried.messages)
