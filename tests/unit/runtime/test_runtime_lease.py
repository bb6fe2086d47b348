"""Node leases and fencing (:mod:`runtime.lease`) with a fake clock: when a node renews,
when it must fence, when the global manager may start a lost node's gangs again; and,
by hypothesis, for any schedule of renewals, delays, drops, partitions and restarts of
the global manager, a node declared lost holds no lease once its gangs may start again,
and a global manager down for less than half a lease fences no one."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.config import RuntimeConfig
from runtime.lease import FENCE_CHECK_S, Answer, LeaseLedger, LeaseTerms, NodeLease

TERMS = LeaseTerms(lease_s=9.0, margin_s=2.0)


def test_a_node_renews_every_third_of_its_lease_and_fences_a_lease_after_its_last_granted_send(
) -> None:
    lease = NodeLease(TERMS, now=0.0)
    assert lease.held(0.0) and lease.due(0.0)
    t1 = lease.send(0.0)
    assert not lease.due(1.0) and lease.due(3.0)
    # Granted late (at 2 s): the lease counts from the send, not from the answer.
    assert lease.answered(t1, Answer.GRANTED) is Answer.GRANTED
    assert lease.expires_at == 9.0
    t2 = lease.send(3.0)  # never answers
    t3 = lease.send(6.0)
    assert lease.out() == [t2, t3]
    assert lease.held(8.99) and not lease.held(9.0)
    assert lease.give_up(12.0) == [t2]  # out for a whole lease: it can no longer help
    assert lease.answered(t3, Answer.GRANTED) is Answer.GRANTED  # late, but it counts
    assert lease.held(14.99) and not lease.held(15.0)
    assert lease.answered(t2, Answer.GRANTED) is None  # given up: ignored


def test_after_a_failed_renewal_the_next_one_goes_sooner() -> None:
    lease = NodeLease(TERMS, now=0.0)
    t = lease.send(0.0)
    lease.answered(t, None)
    assert not lease.due(0.4) and lease.due(0.5)
    assert lease.next_look(0.0) == pytest.approx(FENCE_CHECK_S)


def test_a_node_that_was_not_running_asks_before_it_fences() -> None:
    """A manager restarted from its checkpoint (or SIGCONTed) whose lease lapsed while it
    could not run renews at once and fences only if no grant comes within ASK_S."""
    lease = NodeLease(TERMS, now=20.0, held_since=5.0)  # a restart: lapsed at 14 s
    lease.look(20.0)
    assert not lease.held(20.0) and not lease.must_fence(20.0) and lease.due(20.0)
    t = lease.send(20.0)
    assert lease.next_look(20.0) == pytest.approx(20.0 + FENCE_CHECK_S)
    lease.answered(t, Answer.GRANTED)
    assert lease.held(20.3) and not lease.must_fence(20.3)
    # Stopped from 21 s to 40 s: the same, and without an answer it fences.
    lease.look(21.0)
    lease.look(40.0)
    assert lease.due(40.0) and not lease.must_fence(40.4) and lease.must_fence(40.5)
    # Running all along, a lapse is fenced at once.
    lease.look(40.6)
    running = NodeLease(TERMS, now=0.0)
    for now in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0):
        running.look(now)
    assert running.must_fence(9.0)


def test_a_lost_node_rejoins_under_a_new_incarnation_and_its_old_one_is_refused() -> None:
    ledger = LeaseLedger(TERMS, ["n0", "n1"], now=0.0)
    assert ledger.renew("n0", 7, 1.0) is Answer.GRANTED
    assert ledger.lapse_at("n0") == 1.0 + 9.0 + 2.0
    ledger.declare_lost("n0")
    assert not ledger.may_restart(["n0"], 11.9) and ledger.may_restart(["n0"], 12.0)
    # Everything of the old incarnation is refused and counted, whatever comes.
    assert ledger.renew("n0", 7, 13.0) is Answer.LOST
    assert not ledger.heard("n0", 7)
    assert ledger.counters["stale_renewals"] == 1
    assert ledger.lapse_at("n0") == 12.0  # a refused renewal grants nothing
    node = NodeLease(TERMS, now=13.0, held_since=1.0)
    node.rejoin(13.0)
    assert not node.held(13.0) and node.due(13.0)
    assert ledger.renew("n0", 8, 13.1) is Answer.REJOINED
    assert ledger.renew("n0", 8, 13.2) is Answer.GRANTED
    assert ledger.counters["rejoined"] == 1 and "n0" not in ledger.lost
    assert ledger.renew("n0", 7, 14.0) is Answer.LOST  # still refused after the rejoin


def test_a_node_lost_before_it_was_heard_retires_the_first_incarnation_it_uses() -> None:
    """A restarted global manager knows which nodes were lost (its journal), not under
    which incarnation: the first one heard from is retired, the next one rejoins."""
    ledger = LeaseLedger(TERMS, ["n0"], now=50.0, lost=["n0"])
    assert ledger.renew("n0", 3, 51.0) is Answer.LOST
    assert not ledger.heard("n0", 3)
    assert ledger.heard("n0", 4) and ledger.renew("n0", 4, 52.0) is Answer.REJOINED


def test_a_restarted_global_manager_takes_every_node_as_granted_at_its_start() -> None:
    ledger = LeaseLedger(TERMS, ["n0"], now=100.0)
    ledger.declare_lost("n0")
    assert ledger.lapse_at("n0") == 111.0


def test_the_default_lease_is_two_thirds_of_the_loss_window_and_a_longer_one_is_refused(
) -> None:
    cfg = RuntimeConfig()
    assert cfg.loss_window_s == pytest.approx(15.0)
    assert cfg.lease_seconds == pytest.approx(10.0)
    assert RuntimeConfig(node_timeout=15).lease_seconds == pytest.approx(3.0)
    assert RuntimeConfig(lease_s=12.5).lease_seconds == 12.5
    with pytest.raises(ValueError, match=r"lease: must be shorter than the node-loss "
                                         r"window .*15 s.*got 15 s"):
        RuntimeConfig(lease_s=15.0)
    with pytest.raises(ValueError, match="lease"):
        RuntimeConfig(lease_s=-1.0)


# ------------------------------------------------------------------ the properties
@dataclass
class Sim:
    """One node renewing with a global manager over a channel that delays, drops, is cut
    (``cuts``: intervals the channel carries nothing) and whose global manager is down
    (``outages``: calls that reach it then wait until it is back, as Ray queues them for
    an actor it restarts; a restart forgets the ledger)."""

    terms: LeaseTerms
    delays: list[tuple[float, float, bool, bool]]  # per renewal: there, back, dropped x2
    cuts: list[tuple[float, float]] = field(default_factory=list)
    outages: list[tuple[float, float]] = field(default_factory=list)
    lose_at: float | None = None  # when the global manager declares the node lost

    def __post_init__(self) -> None:
        self.node = NodeLease(self.terms, 0.0)
        self.ledger = LeaseLedger(self.terms, ["n"], 0.0)
        self.incarnation = 1
        #: When the lost node's gangs may start again, less the margin.
        self.restart_at: float | None = None
        self.lease_after_loss = -math.inf  # latest end of the old incarnation's lease
        self.first_unheld: float | None = None

    def _down(self, t: float) -> tuple[float, float] | None:
        return next(((a, b) for a, b in self.outages if a <= t < b), None)

    def _cut(self, t: float) -> bool:
        return any(a <= t < b for a, b in self.cuts)

    def run(self, until: float) -> None:
        events: list[tuple[float, int, str, tuple[int, int, int]]] = []
        seq = 0
        restarts = sorted(b for _, b in self.outages)
        t = 0.0
        steps = 0
        while t < until:
            # The global manager's restarts and its loss declaration, in time order.
            while restarts and restarts[0] <= t:
                r = restarts.pop(0)
                self.ledger = LeaseLedger(self.terms, ["n"], r, lost=self.ledger.lost)
            if self.lose_at is not None and self.restart_at is None and t >= self.lose_at \
                    and self._down(t) is None:
                self.ledger.declare_lost("n")
                self.restart_at = self.ledger.lapse_at("n") - self.terms.margin_s
            while events and events[0][0] <= t:
                at, _, kind, (token, inc, granted) = heapq.heappop(events)
                if kind == "gm":
                    answer = self.ledger.renew("n", inc, at)
                    d_back, dropped = self.delays[token % len(self.delays)][1::2]
                    if not dropped and not self._cut(at):
                        seq += 1
                        heapq.heappush(events, (at + d_back, seq, "node",
                                                (token, inc, answer is not Answer.LOST)))
                else:
                    if inc != self.incarnation:
                        continue
                    got = self.node.answered(token, Answer.GRANTED if granted else Answer.LOST)
                    if got is Answer.REJOINED:  # not sent by the fake ledger's answers
                        raise AssertionError(got)
                    if got is Answer.LOST:
                        if self.restart_at is not None:
                            self.lease_after_loss = max(self.lease_after_loss,
                                                        self.node.expires_at)
                        self.incarnation += 1
                        self.node.rejoin(at)
            self.node.look(t)
            if self.incarnation == 1:
                self.lease_after_loss = max(self.lease_after_loss, self.node.expires_at)
                if self.node.must_fence(t) and self.first_unheld is None:
                    self.first_unheld = t
            self.node.give_up(t)
            if self.node.due(t):
                token = self.node.send(t)
                d_there, _, dropped, _ = self.delays[token % len(self.delays)]
                arrive = t + d_there
                if not dropped and not self._cut(t):
                    down = self._down(arrive)
                    if down is not None:
                        arrive = down[1]  # queued until the global manager is back
                    seq += 1
                    heapq.heappush(events, (arrive, seq, "gm", (token, self.incarnation, 0)))
            nxt = self.node.next_look(t)
            if events:
                nxt = min(nxt, events[0][0])
            t = max(nxt, t + 1e-3)
            steps += 1
            assert steps < 100_000


delay = st.tuples(st.floats(0, 4), st.floats(0, 4), st.booleans(), st.booleans())


@settings(max_examples=150, deadline=None)
@given(
    lease=st.floats(1.0, 20.0),
    delays=st.lists(delay, min_size=1, max_size=12),
    cuts=st.lists(st.tuples(st.floats(0, 60), st.floats(0, 30)), max_size=3),
    outages=st.lists(st.tuples(st.floats(0, 60), st.floats(0, 10)), max_size=2),
    lose_at=st.floats(0, 80),
)
def test_a_lost_node_holds_no_lease_once_its_gangs_may_start_again(
    lease: float, delays: list[tuple[float, float, bool, bool]],
    cuts: list[tuple[float, float]], outages: list[tuple[float, float]], lose_at: float,
) -> None:
    """Whatever the delays, drops, cuts and restarts of the global manager: the lease of
    the incarnation declared lost ends (the node fences) no later than lease + margin
    after the global manager's last grant, before which its gangs do not start again."""
    sim = Sim(LeaseTerms(lease, 2.0), delays, [(a, a + d) for a, d in cuts],
              [(a, a + d) for a, d in sorted(outages)], lose_at)
    sim.run(lose_at + 3 * lease + 20.0)
    if sim.restart_at is not None:
        assert sim.lease_after_loss <= sim.restart_at + 1e-9


@settings(max_examples=150, deadline=None)
@given(
    lease=st.floats(1.0, 20.0),
    outage_at=st.floats(0, 40),
    outage=st.floats(0, 1),
    there=st.lists(st.floats(0, 1), min_size=1, max_size=6),
)
def test_a_global_manager_down_for_less_than_half_a_lease_fences_no_one(
    lease: float, outage_at: float, outage: float, there: list[float],
) -> None:
    """Down (a restart, a stall) for up to half a lease with calls taking up to a
    twentieth of it each way: the node never loses its lease."""
    delays = [(d * lease / 20, d * lease / 20, False, False) for d in there]
    sim = Sim(LeaseTerms(lease, 2.0), delays,
              outages=[(outage_at, outage_at + outage * lease / 2)])
    sim.run(outage_at + 3 * lease)
    assert sim.first_unheld is None
