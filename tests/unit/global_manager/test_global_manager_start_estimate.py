"""Estimated starts of pending jobs (global_manager.start_estimate, and the core's
start_estimates): hand-built queues with numbers worked out in the comments, and
properties of the walk."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from global_manager.core import RESERVE_AFTER, GlobalConfig, GlobalManagerCore
from global_manager.fit import fits, max_matching
from global_manager.flow_policy import hold_shadow
from global_manager.pending_job import PendingJob
from global_manager.policies import get_policy
from global_manager.start_estimate import (
    Booking,
    EstimateCache,
    EstimateNode,
    Hold,
    StartEstimateRequest,
    estimate_starts,
)
from workloads.model import JobSpec, Node, QosClass, SubtaskSpec

GPU = frozenset({"gpu"})


def nodes(*budgets: float, labels: dict[str, frozenset[str]] | None = None
          ) -> tuple[EstimateNode, ...]:
    names = "abcdefgh"
    lab = labels or {}
    return tuple(EstimateNode(names[k], b, lab.get(names[k], frozenset()))
                 for k, b in enumerate(budgets))


def job(job_id: str, *rates: float, run: float, labels: tuple[frozenset[str], ...] = ()
        ) -> PendingJob:
    """A pending job whose subtasks each run ``run`` s at their expected rates."""
    labs = labels or tuple(frozenset() for _ in rates)
    return PendingJob(job_id, "u", tuple(r * run for r in rates), rates, rates, labs)


# ----------------------------------------------------------------- hand-built queues
def test_a_gang_waits_for_the_release_it_needs_and_a_small_job_goes_first() -> None:
    # Nodes a, b with 100 each; a running subtask holds 60 on a until t=100.
    # g (50 + 50, runs 200 s) needs both nodes: a has 40 free until 100 -> starts at 100
    #   and books both until 300.
    # s (40, runs 50 s) fits now on b (100 free, the most room) -> starts at 0, off b at 50
    #   (before g needs b).
    # h (60 + 60, runs 10 s) needs both nodes with 60: after g ends -> 300.
    req = StartEstimateRequest(
        0.0, nodes(100, 100), (Booking("a", 60, 100.0),),
        (job("g", 50, 50, run=200), job("s", 40, run=50), job("h", 60, 60, run=10)),
    )
    reply = estimate_starts(req)
    assert dict(reply.starts) == {"g": 100.0, "s": 0.0, "h": 300.0}
    assert reply.nodes["s"] == ("b",)
    assert sorted(reply.nodes["g"]) == ["a", "b"]
    assert reply.valid_until == 50.0  # s's end is the first event after now


def test_two_identical_gangs_start_one_after_the_other() -> None:
    # a, b with 100 each, one subtask holds 100 on b until t=30 (now 10).
    # j1 (100 + 100, 40 s): both nodes free at 30 -> 30, until 70; j2 the same -> 70.
    req = StartEstimateRequest(
        10.0, nodes(100, 100), (Booking("b", 100, 30.0),),
        (job("j1", 100, 100, run=40), job("j2", 100, 100, run=40)),
    )
    assert dict(estimate_starts(req).starts) == {"j1": 30.0, "j2": 70.0}


def test_a_node_without_room_does_not_hide_the_room_of_the_others() -> None:
    # b's budget is -inf (nothing fits it). w (two subtasks of 40) needs two nodes: it can
    # never start. s (one of 40) fits a now. A screen that compared s's empty second
    # place with b's room (NaN once the slack is added) rejected s: the screened and the
    # plain walk must agree.
    req = StartEstimateRequest(
        0.0, nodes(100, -math.inf), (), (job("w", 40, 40, run=10), job("s", 40, run=10)),
    )
    fast, plain = estimate_starts(req), estimate_starts(req, screen=False)
    assert dict(fast.starts) == dict(plain.starts) == {"w": None, "s": 0.0}
    assert dict(fast.nodes) == dict(plain.nodes) == {"s": ("a",)}


def test_labels_are_respected_and_a_job_no_node_can_take_has_no_estimate() -> None:
    # a (gpu) is full until 80; b is free. x needs gpu -> 80 (on a); y needs 150 but no
    # budget is that large -> None; z needs 3 distinct nodes of 2 -> None; w (no labels)
    # fits on b now -> 0.
    req = StartEstimateRequest(
        0.0, nodes(100, 100, labels={"a": GPU}), (Booking("a", 100, 80.0),),
        (job("x", 50, run=10, labels=(GPU,)), job("y", 150, run=1),
         job("z", 10, 10, 10, run=1), job("w", 10, run=5)),
    )
    reply = estimate_starts(req)
    assert dict(reply.starts) == {"x": 80.0, "y": None, "z": None, "w": 0.0}
    assert reply.nodes["x"] == ("a",)


def test_a_labelled_gang_takes_the_one_matching_thatfits() -> None:
    # Only a has gpu; subtask 0 (gpu, 30) must go on a, subtask 1 (60) then on b, whose
    # 60 free is less than a's 100: largest-rate-first alone would put subtask 1 on a.
    req = StartEstimateRequest(
        0.0, nodes(100, 100, labels={"a": GPU}), (Booking("b", 40, 1e9),),
        (job("g", 30, 60, run=5, labels=(GPU, frozenset())),),
    )
    reply = estimate_starts(req)
    assert reply.starts["g"] == 0.0
    assert reply.nodes["g"] == ("a", "b")


def test_a_gang_greedy_placement_misses_still_fits_by_matching() -> None:
    # a {x} 100, b {x, y} 200, c {y, z} 100, d {z} 100. Subtasks: s0 {x} 50, s1 {x} 50,
    # s2 {y} 90, s3 {z} 50: eligible s0, s1 -> a, b; s2 -> b, c; s3 -> c, d. Greedy
    # (largest rate first among equally constrained, most room first) puts s2 on b and
    # leaves s0 and s1 one node; the matching puts s2 on c, s0 on b (most room), s1 on a,
    # s3 on d.
    x, y, z = frozenset("x"), frozenset("y"), frozenset("z")
    req = StartEstimateRequest(
        0.0, nodes(100, 200, 100, 100, labels={"a": x, "b": x | y, "c": y | z, "d": z}), (),
        (job("g", 50, 50, 90, 50, run=5, labels=(x, x, y, z)),),
    )
    reply = estimate_starts(req)
    assert reply.starts["g"] == 0.0
    assert reply.nodes["g"] == ("b", "a", "c", "d")


def test_a_late_running_subtask_counts_as_ending_now() -> None:
    # The booking's expected end (50) has passed at now=70: its node counts as free now.
    req = StartEstimateRequest(70.0, nodes(100), (Booking("a", 100, 50.0),),
                               (job("j", 100, run=10),))
    assert estimate_starts(req).starts["j"] == 70.0


def test_the_held_job_starts_at_its_shadow_and_others_backfill_only_before_it() -> None:
    # a, b, c with 100 each; a is full until 500, b until 200, c is free. H holds a and b
    # (shadow 500: when a frees). Queue: H (100 + 100), y (100, 400 s), z (100, 50 s),
    # v (100, 400 s).
    # t=0:   H waits for its shadow. y: 0 + 400 <= 500, may backfill anywhere: c -> 0.
    #        z: ends by the shadow too, but no node has room. v: likewise.
    # t=200: b frees. z: 200 + 50 <= 500 -> backfills on b (held) -> 200, until 250.
    #        v: 200 + 400 > 500 -> only unheld c, busy until 400.
    # t=250: b frees; v still may not use it.
    # t=400: c frees -> v at 400 (on c).
    # t=500: a frees -> H on a and b at 500.
    req = StartEstimateRequest(
        0.0, nodes(100, 100, 100), (Booking("a", 100, 500.0), Booking("b", 100, 200.0)),
        (job("H", 100, 100, run=100), job("y", 100, run=400), job("z", 100, run=50),
         job("v", 100, run=400)),
        Hold("H", ("a", "b"), 500.0),
    )
    reply = estimate_starts(req)
    assert dict(reply.starts) == {"H": 500.0, "y": 0.0, "z": 200.0, "v": 400.0}
    assert reply.nodes["z"] == ("b",) and reply.nodes["v"] == ("c",)
    assert sorted(reply.nodes["H"]) == ["a", "b"]


def test_the_held_job_waits_for_its_shadow_even_when_its_nodes_free_earlier() -> None:
    # The placement's shadow (300) is later than the walk's own release (100): the
    # estimate takes the placement's word, so the backfill and the estimate agree.
    req = StartEstimateRequest(
        0.0, nodes(100), (Booking("a", 100, 100.0),), (job("H", 100, run=10),),
        Hold("H", ("a",), 300.0),
    )
    assert estimate_starts(req).starts["H"] == 300.0


def test_bad_requests_name_the_field() -> None:
    with pytest.raises(ValueError, match="queue: duplicate job id 'j'"):
        estimate_starts(StartEstimateRequest(0.0, nodes(1), (),
                                             (job("j", 1, run=1), job("j", 1, run=1))))
    with pytest.raises(ValueError, match="now: must be a finite time"):
        estimate_starts(StartEstimateRequest(math.inf, nodes(1), (), ()))


def test_the_cache_walks_again_only_when_something_but_the_time_changed() -> None:
    cache = EstimateCache()
    base = StartEstimateRequest(0.0, nodes(100), (Booking("a", 100, 100.0),),
                                (job("j", 100, run=10),))
    assert cache.get(base).starts["j"] == 100.0
    # Later, before the release at 100, with nothing else changed: no new walk.
    assert cache.get(StartEstimateRequest(50.0, base.nodes, base.running, base.queue)
                     ).starts["j"] == 100.0
    assert cache.computed == 1
    # A new job in the queue: walked again.
    more = StartEstimateRequest(60.0, base.nodes, base.running,
                                base.queue + (job("k", 100, run=5),))
    assert dict(cache.get(more).starts) == {"j": 100.0, "k": 110.0}
    assert cache.computed == 2
    # Past the release (the job runs late): walked again, the late release counts as now.
    late = StartEstimateRequest(120.0, more.nodes, more.running, more.queue)
    assert dict(cache.get(late).starts) == {"j": 120.0, "k": 130.0}
    assert cache.computed == 3


# ------------------------------------------------------------------------ properties
@st.composite
def requests(draw: st.DrawFn) -> StartEstimateRequest:
    n = draw(st.integers(1, 4))
    budgets = [draw(st.sampled_from([50.0, 100.0, 200.0])) for _ in range(n)]
    labelled = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    ns = nodes(*budgets, labels={"abcd"[k]: GPU for k in range(n) if labelled[k]})
    now = draw(st.sampled_from([0.0, 35.0]))
    running = []
    for node in ns:  # what runs fits the node's budget
        held = 0.0
        for _ in range(draw(st.integers(0, 2))):
            rate = draw(st.sampled_from([25.0, 50.0]))
            end = draw(st.sampled_from([10.0, 40.0, 100.0, 250.0]))
            if held + rate <= node.budget:
                held += rate
                running.append(Booking(node.name, rate, end))
    queue = []
    for q in range(draw(st.integers(0, 6))):
        k = draw(st.integers(1, 3))
        rates = [draw(st.sampled_from([25.0, 50.0, 100.0, 250.0])) for _ in range(k)]
        labs = [GPU if draw(st.integers(0, 4)) == 0 else frozenset() for _ in range(k)]
        queue.append(job(f"j{q}", *rates, run=draw(st.sampled_from([5.0, 60.0, 200.0])),
                         labels=tuple(labs)))
    return StartEstimateRequest(now, ns, tuple(running), tuple(queue))


def _fits_whole(req: StartEstimateRequest, j: PendingJob, free: dict[str, float]) -> bool:
    eligible = [[k for k, n in enumerate(req.nodes)
                 if s.labels <= n.labels and fits(s.rate, free[n.name])] for s in j.subtasks]
    return all(eligible) and max_matching(eligible) == len(j.subtasks)


@settings(max_examples=200, deadline=None)
@given(requests())
def test_estimates_are_never_before_now_and_none_only_for_jobs_that_never_fit(
    req: StartEstimateRequest,
) -> None:
    reply = estimate_starts(req)
    whole = {n.name: n.budget for n in req.nodes}
    for j in req.queue:
        start = reply.starts[j.job_id]
        assert (start is None) == (not _fits_whole(req, j, whole))
        assert start is None or start >= req.now


@settings(max_examples=200, deadline=None)
@given(requests())
def test_the_first_job_that_fits_now_is_estimated_to_start_now(
    req: StartEstimateRequest,
) -> None:
    free = {n.name: n.budget for n in req.nodes}
    for b in req.running:
        if b.end > req.now:
            free[b.node] -= b.rate
    reply = estimate_starts(req)
    for j in req.queue:  # the first in placement order that fits now
        if _fits_whole(req, j, free):
            assert reply.starts[j.job_id] == req.now
            break


@settings(max_examples=200, deadline=None)
@given(requests(), st.integers(0, 6))
def test_identical_jobs_get_their_estimates_in_queue_order(
    req: StartEstimateRequest, where: int
) -> None:
    if not req.queue:
        return
    twin = req.queue[where % len(req.queue)]
    req2 = StartEstimateRequest(req.now, req.nodes, req.running,
                                req.queue + (replace(twin, job_id="twin"),))
    starts = estimate_starts(req2).starts
    first, second = starts[twin.job_id], starts["twin"]
    assert (first is None) == (second is None)
    assert first is None or second is None or first <= second


@settings(max_examples=200, deadline=None)
@given(requests())
def test_the_estimated_schedule_never_overbooks_a_node(req: StartEstimateRequest) -> None:
    reply = estimate_starts(req)
    intervals = [(max(b.end, req.now), req.now, b.node, b.rate) for b in req.running]
    by_id = {j.job_id: j for j in req.queue}
    for jid, where in reply.nodes.items():
        start = reply.starts[jid]
        assert start is not None
        j = by_id[jid]
        assert len(set(where)) == len(where)  # distinct nodes
        for s, n in zip(j.subtasks, where):
            assert s.labels <= next(x.labels for x in req.nodes if x.name == n)
            intervals.append((start + j.run_time, start, n, s.rate))
    budget = {n.name: n.budget for n in req.nodes}
    for t in {i[1] for i in intervals}:  # load only rises at a start
        for n in budget:
            load = sum(r for end, begin, node, r in intervals
                       if node == n and begin <= t < end)
            assert fits(load, budget[n])


# ------------------------------------------------------------------------- the core
def _core(placement: str = "least_loaded") -> GlobalManagerCore:
    # Strict budgets (QoS share 0.5): a 100, b 200, c 300 Mcycles/s.
    return GlobalManagerCore(
        (Node("a", 200.0), Node("b", 400.0), Node("c", 600.0)),
        get_policy("strict", placement=placement),
        GlobalConfig(25.0, 0.5, queue="wait"),  # type: ignore[arg-type]
        random.Random(0),
    )


def _strict(*subtasks: tuple[float, float], user: str = "u0") -> JobSpec:
    """A strict job of (work Mcycles, weight) subtasks (25 Mcycles/s per weight)."""
    return JobSpec(name="s", qos=QosClass.STRICT,
                   subtasks=tuple(SubtaskSpec(w, r) for w, r in subtasks),
                   overall_deviation=100.0, asynchrony=100.0, user=user)


def test_the_core_estimates_from_the_running_jobs_expected_ends() -> None:
    g = _core()
    # big: weight 12 -> 300 Mcycles/s, only c's budget takes it; 12000 Mcycles -> 40 s.
    big = g.submit(_strict((12000.0, 12.0)), 0.0)
    assert [a.job_id for a in g.place_pending(0.0).placed] == [big.job_id]
    # second: the same shape, submitted at 10: c frees at 0 + 40 -> estimated 40.
    second = g.submit(_strict((12000.0, 12.0)), 10.0)
    g.place_pending(10.0)
    # small: 100 Mcycles/s fits a or b now -> estimated at now (15), before second.
    small = g.submit(_strict((1000.0, 4.0)), 15.0)
    assert dict(g.start_estimates(15.0)) == {second.job_id: 40.0, small.job_id: 15.0}
    # Cancelling the running job frees c: second may start now.
    g.cancel(big.job_id)
    assert g.start_estimates(20.0)[second.job_id] == 20.0


def test_the_core_estimate_of_the_held_job_is_the_backfill_shadow() -> None:
    g = _core("flow")
    # long: 300 Mcycles/s on c for 2000 s. gang: a, b and c whole (100 + 200 + 300),
    # waits until long ends; after RESERVE_AFTER of waiting flow holds nodes for it
    # (another user's job, so that its fair share lets it hold them).
    long = g.submit(_strict((600000.0, 12.0)), 0.0)
    g.place_pending(0.0)
    gang = g.submit(_strict((1000.0, 4.0), (2000.0, 8.0), (3000.0, 12.0), user="u1"), 0.0)
    g.place_pending(0.0)
    g.place_pending(RESERVE_AFTER)
    hold = g.queue.hold
    assert hold is not None and hold.job_id == gang.job_id
    head = g.pending[gang.job_id]
    shadow = hold_shadow(g._request(RESERVE_AFTER, (), queue=True),
                         g._queued(head.job_id, head.spec, head.arrival), hold.nodes)
    assert shadow == 2000.0  # long's expected end: 600000 / 300
    assert g.start_estimates(RESERVE_AFTER)[gang.job_id] == shadow
    assert g.job_state(long.job_id).value == "running"


@st.composite
def requests_with_holds(draw: st.DrawFn) -> StartEstimateRequest:
    req = draw(requests())
    if not req.queue or not draw(st.booleans()):
        return req
    head = draw(st.sampled_from(req.queue))
    held = draw(st.lists(st.sampled_from([n.name for n in req.nodes]), unique=True,
                         min_size=1))
    shadow = draw(st.sampled_from([None, 0.0, 40.0, 120.0]))
    return StartEstimateRequest(req.now, req.nodes, req.running, req.queue,
                                Hold(head.job_id, tuple(held), shadow))


@settings(max_examples=300, deadline=None)
@given(requests_with_holds())
def test_screening_the_gangs_all_at_once_changes_no_estimate(
    req: StartEstimateRequest,
) -> None:
    # The screen only skips jobs the one-by-one walk would find not to fit: the same
    # starts, the same nodes, the same validity.
    fast, plain = estimate_starts(req), estimate_starts(req, screen=False)
    assert dict(fast.starts) == dict(plain.starts)
    assert dict(fast.nodes) == dict(plain.nodes)
    assert fast.valid_until == plain.valid_until
