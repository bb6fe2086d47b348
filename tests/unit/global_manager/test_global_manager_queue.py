"""The pending queue of GlobalManagerCore (queue: wait): waiting, reasons per constraint,
priority order, max_wait expiry, labels, flow placement; queue: reject unchanged."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from global_manager.core import GlobalConfig, GlobalManagerCore, QueueMode
from global_manager.pending_job import ReasonKind
from global_manager.policies import get_policy
from workloads.model import JobPhase, JobSpec, Node, QosClass, SubtaskSpec

# Strict budgets (QoS share 0.5, strict admission): a 100, b 200, c 300 Mcycles/s.
NODES = (Node("a", 200.0), Node("b", 400.0, labels=frozenset({"fast"})), Node("c", 600.0))


def core(placement: str = "least_loaded", queue: str = "wait", nodes=NODES) -> GlobalManagerCore:
    return GlobalManagerCore(
        nodes,
        get_policy("strict", placement=placement),
        GlobalConfig(25.0, 0.5, queue=queue),  # type: ignore[arg-type]
        random.Random(0),
    )


def strict(*weights: float, labels: tuple[frozenset[str], ...] = (), **kw: object) -> JobSpec:
    labs = labels or tuple(frozenset() for _ in weights)
    return JobSpec(
        name="s",
        qos=QosClass.STRICT,
        subtasks=tuple(SubtaskSpec(1000.0 * w, w, labels=lab) for w, lab in zip(weights, labs)),
        overall_deviation=100.0,
        asynchrony=100.0,
        **kw,  # type: ignore[arg-type]
    )


PLACEMENTS = ["least_loaded", "random", "flow", "backfill"]


def test_queue_mode_is_a_string_enum_and_checked() -> None:
    assert GlobalConfig(queue="wait").queue is QueueMode.WAIT  # type: ignore[arg-type]
    assert GlobalConfig().queue is QueueMode.REJECT
    with pytest.raises(ValueError, match="queue: must be one of reject, wait"):
        GlobalConfig(queue="hold")  # type: ignore[arg-type]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_a_job_that_does_not_fit_waits_and_runs_when_capacity_frees(placement: str) -> None:
    g = core(placement)
    first = g.submit(strict(12.0), 0.0)  # 300 on c
    assert first.pending and not first.admitted
    cyc = g.place_pending(0.0)
    assert [a.job_id for a in cyc.placed] == [first.job_id]
    assert cyc.placed[0].subtasks[0].node == "c"
    second = g.submit(strict(12.0), 10.0)  # needs c's 300 again
    assert g.place_pending(10.0).placed == ()
    assert g.job_state(second.job_id) is JobPhase.PENDING
    (why,) = g.pending_reasons(second.job_id)
    assert why.kind is ReasonKind.BUDGET and why.subtask == 0
    assert why.short == pytest.approx(100.0)  # b has 200 free, 300 needed
    assert "100 short" in why.message
    assert g.subtask_finished(first.job_id, 0)
    cyc = g.place_pending(40.0)
    assert [a.job_id for a in cyc.placed] == [second.job_id]
    assert cyc.placed[0].placed_at == 40.0 and cyc.placed[0].subtasks[0].start_time == 40.0
    assert g.job_state(second.job_id) is JobPhase.RUNNING
    assert g.job_state(first.job_id) is JobPhase.COMPLETED


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_reason_fewer_eligible_nodes_than_subtasks(placement: str) -> None:
    g = core(placement)
    g.submit(strict(12.0), 0.0)  # 300: only c can take it; then a 100, b 200, c 0 free
    g.place_pending(0.0)
    job = g.submit(strict(4.0, 4.0, 4.0), 1.0)  # three subtasks of 100, two nodes with room
    assert g.place_pending(1.0).placed == ()
    (why,) = g.pending_reasons(job.job_id)
    assert why.kind is ReasonKind.NODES
    assert "3 subtasks" in why.message and "only 2" in why.message


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_label_constraints(placement: str) -> None:
    g = core(placement)
    fast = frozenset({"fast"})
    job = g.submit(strict(1.0, labels=(fast,)), 0.0)
    (adm,) = g.place_pending(0.0).placed
    assert adm.subtasks[0].node == "b"  # the only fast node
    g2 = core(placement)
    g2.submit(strict(8.0, labels=(fast,)), 0.0)  # fills b
    g2.place_pending(0.0)
    waiting = g2.submit(strict(1.0, labels=(fast,)), 1.0)
    assert g2.place_pending(1.0).placed == ()  # a and c are free but not fast
    (why,) = g2.pending_reasons(waiting.job_id)
    assert why.kind is ReasonKind.BUDGET and why.subtask == 0
    # A label no node carries: rejected at once, with the reason.
    bad = g2.submit(strict(1.0, labels=(frozenset({"gpu"}),)), 2.0)
    assert not bad.admitted and not bad.pending
    assert [r.kind for r in bad.reasons] == [ReasonKind.LABELS]
    assert "no node has the labels gpu" in bad.reason
    assert g2.job_state(bad.job_id) is JobPhase.REJECTED
    assert job.pending


@pytest.mark.parametrize("placement", ["least_loaded", "random"])
def test_priority_then_arrival_order(placement: str) -> None:
    g = core(placement)
    block = g.submit(strict(12.0), 0.0)
    g.place_pending(0.0)  # c full
    low = g.submit(strict(12.0), 1.0)
    high = g.submit(strict(12.0, priority=5), 2.0)
    later_high = g.submit(strict(12.0, priority=5), 3.0)
    g.subtask_finished(block.job_id, 0)
    (adm,) = g.place_pending(4.0).placed
    assert adm.job_id == high.job_id
    g.subtask_finished(high.job_id, 0)
    assert [a.job_id for a in g.place_pending(5.0).placed] == [later_high.job_id]
    g.subtask_finished(later_high.job_id, 0)
    assert [a.job_id for a in g.place_pending(6.0).placed] == [low.job_id]


def test_flow_priority_first() -> None:
    g = core("flow")
    block = g.submit(strict(12.0), 0.0)
    g.place_pending(0.0)
    low = g.submit(strict(12.0), 1.0)
    high = g.submit(strict(12.0, priority=5), 2.0)
    g.subtask_finished(block.job_id, 0)
    assert [a.job_id for a in g.place_pending(4.0).placed] == [high.job_id]
    assert g.job_state(low.job_id) is JobPhase.PENDING


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_max_wait_expiry(placement: str) -> None:
    g = core(placement)
    g.submit(strict(12.0), 0.0)
    g.place_pending(0.0)
    job = g.submit(strict(12.0, max_wait=60.0), 10.0)
    assert g.next_expiry() == 70.0
    assert g.place_pending(69.0).expired == ()
    cyc = g.place_pending(70.0)
    (exp,) = cyc.expired
    assert exp.job_id == job.job_id and exp.reason.startswith("expired: pending 60 s, max_wait 60")
    assert g.job_state(job.job_id) is JobPhase.EXPIRED
    assert job.job_id not in g.pending and g.next_expiry() is None
    with pytest.raises(KeyError):
        g.pending_reasons(job.job_id)


def test_cancel_a_pending_job() -> None:
    g = core()
    g.submit(strict(12.0), 0.0)
    g.place_pending(0.0)
    job = g.submit(strict(12.0), 1.0)
    assert g.cancel(job.job_id) == []
    assert g.job_state(job.job_id) is JobPhase.CANCELLED
    assert g.place_pending(2.0).placed == ()


def test_never_placeable_is_rejected_even_with_a_queue() -> None:
    g = core()
    adm = g.submit(strict(13.0), 0.0)  # 325 > c's whole budget 300
    assert not adm.admitted and not adm.pending
    assert [r.kind for r in adm.reasons] == [ReasonKind.BUDGET]
    assert "25 short" in adm.reason


def test_flow_users_share_the_grid() -> None:
    nodes = tuple(Node(f"n{i}", 200.0) for i in range(4))  # 4 x 100 budget
    g = core("flow", nodes=nodes)
    for i in range(4):
        g.submit(strict(4.0, user="alice"), float(i))  # 100 each
    for i in range(4):
        g.submit(strict(4.0, user="bob"), 5.0 + i)  # after alice's: FIFO would starve bob
    placed = g.place_pending(10.0).placed
    by_user = [g.jobs[a.job_id].spec.user for a in placed]
    assert by_user.count("bob") == 2 and by_user.count("alice") == 2
    assert g.user_held == {"alice": 200.0, "bob": 200.0}
    reasons = [g.pending_reasons(j) for j in g.pending]
    assert all(any(r.kind is ReasonKind.FAIR_SHARE for r in rs) for rs in reasons)


def test_reject_mode_unchanged() -> None:
    """queue: reject gives the same admissions, nodes and RNG draws as before."""
    for placement in ("least_loaded", "random"):
        g = core(placement, queue="reject")
        adms = [g.submit(strict(w), float(i)) for i, w in enumerate((12.0, 12.0, 8.0, 4.0, 4.0))]
        assert [a.admitted for a in adms] == [True, False, True, True, False]
        assert not any(a.pending for a in adms)
        assert adms[1].reason == "no free node can take subtask 0 (expected rate 300 Mcycles/s)"
        assert g.pending == {} and g.place_pending(9.0).placed == ()


@settings(max_examples=40, deadline=None)
@given(
    weights=st.lists(st.lists(st.sampled_from([1.0, 2.0, 4.0, 8.0]), min_size=1, max_size=3),
                     min_size=1, max_size=8),
    placement=st.sampled_from(PLACEMENTS),
    finish=st.lists(st.integers(0, 20), max_size=10),
)
def test_budgets_respected_and_all_or_nothing(
    weights: list[list[float]], placement: str, finish: list[int]
) -> None:
    g = core(placement)
    for t, ws in enumerate(weights):
        g.submit(strict(*ws, user=f"u{t % 2}", priority=t % 3), float(t))
    now = 100.0
    for k in finish + [0] * 3:
        cyc = g.place_pending(now)
        for a in cyc.placed:
            assert len({s.node for s in a.subtasks}) == len(a.subtasks)
        for node, c in g.committed.items():
            assert c <= g.budget(node) + 1e-6
        running = sorted(g.jobs)
        if running:
            jid = running[k % len(running)]
            for i in sorted(g.jobs[jid].running):
                g.subtask_finished(jid, i)
        now += 10.0
    # Once everything has finished, nothing is left waiting.
    for jid in list(g.jobs):
        for i in sorted(g.jobs[jid].running):
            g.subtask_finished(jid, i)
    g.place_pending(now)
    for jid in list(g.jobs):
        for i in sorted(g.jobs[jid].running):
            g.subtask_finished(jid, i)
    for _ in range(len(weights)):
        g.place_pending(now)
        for jid in list(g.jobs):
            for i in sorted(g.jobs[jid].running):
                g.subtask_finished(jid, i)
    assert g.pending == {}


def _stream(placement: str, until: float) -> float | None:
    """A gang needing three empty nodes waits behind a stream of small jobs (one every
    100 s, each running 150 s, so at least one always runs); when is it placed?"""
    nodes = tuple(Node(f"n{i}", 200.0) for i in range(3))  # budgets 100 each
    g = core(placement, nodes=nodes)
    started: dict[str, float] = {}
    g.submit(strict(1.0, user="bob"), 0.0)
    (adm,) = g.place_pending(0.0).placed
    started[adm.job_id] = 0.0
    big = g.submit(strict(4.0, 4.0, 4.0, user="alice"), 1.0)
    t = 50.0
    while t < until:
        if t % 100 == 0:
            g.submit(strict(1.0, user="bob"), t)
        for jid, t0 in list(started.items()):
            if t - t0 >= 150.0:
                for i in sorted(g.jobs[jid].running):
                    g.subtask_finished(jid, i)
                del started[jid]
        for adm in g.place_pending(t).placed:
            if adm.job_id == big.job_id:
                return t
            started[adm.job_id] = t
        t += 50.0
    return None


def test_greedy_backfill_starves_a_large_gang() -> None:
    assert _stream("least_loaded", 5000.0) is None
    assert _stream("random", 5000.0) is None


def test_no_starvation_of_a_large_gang_behind_small_ones() -> None:
    """Flow placement holds nodes for the gang once it has waited ``RESERVE_AFTER``
    (600 s, at 650 s here) and places it there as soon as the small jobs on them end."""
    placed = _stream("flow", 5000.0)
    assert placed is not None and 650.0 <= placed <= 1000.0


def test_held_nodes_are_reported_and_kept_from_other_jobs() -> None:
    nodes = tuple(Node(f"n{i}", 200.0) for i in range(2))  # budgets 100 each
    g = core("flow", nodes=nodes)
    small = g.submit(strict(1.0, user="bob"), 0.0)
    g.place_pending(0.0)
    big = g.submit(strict(4.0, 4.0, user="alice"), 1.0)
    g.place_pending(1.0)
    g.place_pending(700.0)  # big waited 699 s: from now on both nodes are held for it
    assert [r.kind for r in g.pending_reasons(big.job_id)] == [ReasonKind.RESERVED]
    assert "holds nodes n0, n1" in g.pending_reasons(big.job_id)[0].message
    later = g.submit(strict(1.0, user="bob"), 705.0)
    assert g.place_pending(705.0).placed == ()  # it would fit but for the hold
    assert any(r.kind is ReasonKind.RESERVED for r in g.pending_reasons(later.job_id))
    g.subtask_finished(small.job_id, 0)
    assert [a.job_id for a in g.place_pending(710.0).placed] == [big.job_id]
    assert g.job_state(later.job_id) is JobPhase.PENDING


def _timed(weight: float, seconds: float, user: str = "bob") -> JobSpec:
    """A one-subtask strict job of ``weight`` that runs ``seconds`` at its expected rate
    (25 Mcycles/s per weight)."""
    return JobSpec(name="t", qos=QosClass.STRICT,
                   subtasks=(SubtaskSpec(25.0 * weight * seconds, weight),),
                   overall_deviation=100.0, asynchrony=100.0, user=user)


def test_short_jobs_backfill_held_nodes_and_long_ones_wait() -> None:
    """EASY backfilling: once nodes are held for a gang, a job that is expected to end
    before the gang could start (its shadow time) runs on them; one that would run past
    it waits, and the gang starts when the running job ends."""
    nodes = tuple(Node(f"n{i}", 200.0) for i in range(2))  # budgets 100 each
    g = core("flow", nodes=nodes)
    running = g.submit(_timed(2.0, 1000.0), 0.0)  # half a node until t = 1000
    (started,) = g.place_pending(0.0).placed
    big = g.submit(strict(4.0, 4.0, user="alice"), 1.0)  # both nodes whole
    g.place_pending(1.0)
    g.place_pending(700.0)  # waited 699 s: both nodes held, its shadow is t = 1000
    assert g.pending_reasons(big.job_id)[0].kind is ReasonKind.RESERVED
    short = g.submit(_timed(2.0, 200.0), 705.0)  # ends at 905 <= 1000
    long = g.submit(_timed(2.0, 500.0), 705.0)  # would end at 1205 > 1000
    placed = [a.job_id for a in g.place_pending(705.0).placed]
    assert placed == [short.job_id]
    assert g.job_state(long.job_id) is JobPhase.PENDING
    assert any(r.kind is ReasonKind.RESERVED for r in g.pending_reasons(long.job_id))
    g.subtask_finished(short.job_id, 0)
    g.place_pending(905.0)
    assert g.job_state(big.job_id) is JobPhase.PENDING  # the running job holds n0/n1
    g.subtask_finished(started.job_id, 0)
    assert [a.job_id for a in g.place_pending(1000.0).placed] == [big.job_id]
    assert running.job_id == started.job_id


def test_no_backfill_when_the_running_jobs_are_already_overdue() -> None:
    """The shadow time is in the past (the running job outran its estimate): nothing
    is backfilled, the hold stays strict."""
    nodes = tuple(Node(f"n{i}", 200.0) for i in range(2))
    g = core("flow", nodes=nodes)
    g.submit(_timed(2.0, 100.0), 0.0)
    g.place_pending(0.0)
    g.submit(strict(4.0, 4.0, user="alice"), 1.0)
    g.place_pending(1.0)
    g.place_pending(700.0)
    short = g.submit(_timed(1.0, 10.0), 705.0)
    assert g.place_pending(705.0).placed == ()
    assert g.job_state(short.job_id) is JobPhase.PENDING
