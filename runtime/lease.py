"""Node leases and fencing: the rules, with no Ray and no clock of their own.

A local manager holds a *lease* on being part of the cluster. It renews it with the
global manager every :attr:`LeaseTerms.renew_every_s` (a third of the lease); a renewal
the global manager grants keeps the lease until ``sent + lease_s``, where ``sent`` is
when the node *sent* that renewal (conservative: the grant came later). A node that has
no lease (it could not renew for a whole lease) *fences* itself: it stops every subtask
the global manager placed on it, because it can no longer confirm them: the global
manager may have declared it lost and started them again elsewhere.

The global manager keeps a :class:`LeaseLedger`: when it last granted each node's lease
and under which incarnation. When it declares a node lost it retires that incarnation:
every later renewal or report of it is refused (counted), and the node, told it was lost,
fences whatever it still runs and rejoins under a new incarnation. A new attempt of a
lost node's gangs starts no earlier than :meth:`LeaseLedger.lapse_at`: the last grant +
lease + :attr:`LeaseTerms.margin_s` (the node's kill of its processes, its check's
period, clock rate differences). So attempt 2 never runs beside attempt 1.

A (re)started global manager does not know the last grants: it takes every node as
granted at its start, which is never earlier than the real last grant.

Every time here is a real, monotonic second (``time.monotonic`` on the caller's host; a
test passes a fake clock's). Kubernetes' node leases (``coordination.k8s.io`` Lease
objects, renewed by the kubelet) and Slurm's NODE_FAIL are the anchors
(``docs/decisions.md``, "Leases and fencing").
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

#: The default lease, as a fraction of the global manager's node-loss window
#: (``node_timeout`` cycles): 10 s of the default 15 s, so a node fences itself before it
#: is declared lost and a requeue normally waits for no lease.
LEASE_FRACTION = 2.0 / 3.0
#: Real seconds the global manager waits beyond a node's lease before a new attempt of
#: its gangs may start: the node's check period (:data:`FENCE_CHECK_S`), the SIGTERM
#: grace of its processes' kill (1 s) and clock rate differences.
LEASE_MARGIN_S = 2.0
#: Real seconds to the next renewal after one failed (an error, not a call still out).
RENEW_RETRY_S = 0.5
#: Longest real seconds a node's lease thread sleeps between two looks at its lease.
FENCE_CHECK_S = 0.1
#: A node whose owner did not look at its lease for this long (real s) was not running:
#: its manager was stopped (SIGSTOP, a frozen VM) or is a restart of a dead one. A lease
#: that lapsed meanwhile is first asked for (a renewal at once) and fenced only if no
#: grant comes within :data:`ASK_S`: the global manager answers ``rejoined`` or
#: ``lost`` if it declared the node lost meanwhile, and a node that was not running
#: could not have fenced any sooner.
NOT_RUNNING_S = 1.0
#: Real seconds a node that was not running waits for a renewal's answer before fencing.
ASK_S = 0.5


class Answer(str, Enum):
    """The global manager's answer to a renewal."""

    GRANTED = "granted"  # the lease holds until the renewal's send time + lease
    LOST = "lost"  # this incarnation was declared lost: fence, rejoin under a new one
    #: Granted to a new incarnation of a node declared lost (a manager Ray restarted
    #: meanwhile, which re-attached its old subtasks): it fences what it ran before.
    REJOINED = "rejoined"


@dataclass(frozen=True, slots=True)
class LeaseTerms:
    """``lease_s``: how long a granted renewal holds (real s, from its send);
    ``margin_s``: what the global manager adds before a lost node's gangs may start
    again."""

    lease_s: float
    margin_s: float = LEASE_MARGIN_S

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lease_s) and self.lease_s > 0):
            raise ValueError(f"lease: must be a finite number of seconds > 0, got {self.lease_s!r}")
        if not (math.isfinite(self.margin_s) and self.margin_s >= 0):
            raise ValueError(f"margin: must be a finite number of seconds >= 0, "
                             f"got {self.margin_s!r}")

    @property
    def renew_every_s(self) -> float:
        """Real s between two renewals: a third of the lease (two may fail or hang
        before the lease runs out)."""
        return self.lease_s / 3.0

    @property
    def retry_s(self) -> float:
        """Real s to the next renewal after one failed."""
        return min(RENEW_RETRY_S, self.renew_every_s)


class NodeLease:
    """A node's side of its lease (one incarnation at a time; not thread-safe: its
    owner's lease thread alone uses it).

    Renewals may overlap: a new one is sent every :attr:`LeaseTerms.renew_every_s`
    whether the earlier ones have answered or not (a global manager Ray is restarting
    answers the calls queued meanwhile when it is back); each is known by the token
    :meth:`send` returns. One that has not answered within the lease can no longer
    extend it and is given up (:meth:`give_up`).

    ``held_since``: the send time of the last renewal granted to this node's earlier
    life (a restarted manager's checkpoint); None: a new node, holding its lease from
    ``now`` (it runs nothing yet)."""

    def __init__(self, terms: LeaseTerms, now: float, held_since: float | None = None) -> None:
        self.terms = terms
        #: Send time of the latest renewal granted: the lease holds until it + lease_s.
        self.confirmed_at = now if held_since is None else min(held_since, now)
        self._out: dict[int, float] = {}  # token -> send time
        self._tokens = 0
        self._last_sent = -math.inf
        self._failed = False  # the last renewal that answered failed
        self._looked = now  # when the owner last looked (:meth:`look`)
        self._woke = now  # when it looked after not running (its construction first)

    def look(self, now: float) -> None:
        """The owner looks at the lease at ``now`` (every pass of its loop). After
        :data:`NOT_RUNNING_S` without a look it was not running: a renewal is due at
        once and a lapsed lease is fenced only :data:`ASK_S` later (:meth:`must_fence`)."""
        if now - self._looked > NOT_RUNNING_S:
            self._woke = now
            self._last_sent = -math.inf
        self._looked = now

    def must_fence(self, now: float) -> bool:
        """Whether the node must fence at ``now``: it holds no lease, and it has been
        running long enough since it was not to have asked (:meth:`look`)."""
        return not self.held(now) and now >= self._woke + ASK_S

    @property
    def expires_at(self) -> float:
        return self.confirmed_at + self.terms.lease_s

    def held(self, now: float) -> bool:
        """Whether the node holds its lease at ``now``: may start subtasks."""
        return now < self.expires_at

    def due(self, now: float) -> bool:
        """Whether a renewal should be sent at ``now``."""
        wait = self.terms.retry_s if self._failed else self.terms.renew_every_s
        return now >= self._last_sent + wait

    def send(self, now: float) -> int:
        """A renewal is sent at ``now``; its token."""
        self._tokens += 1
        self._out[self._tokens] = now
        self._last_sent = now
        return self._tokens

    def out(self) -> list[int]:
        """The tokens of the renewals out, oldest first."""
        return list(self._out)

    def answered(self, token: int, answer: Answer | None) -> Answer | None:
        """Renewal ``token`` came back: ``answer``, or None when the call failed. A grant
        extends the lease from that renewal's send time. Returns the answer to act on
        (None also for a token not out: an old incarnation's, or given up)."""
        sent = self._out.pop(token, None)
        if sent is None:
            return None
        if answer is None:
            self._failed = True
            return None
        self._failed = False
        if answer is not Answer.LOST:
            self.confirmed_at = max(self.confirmed_at, sent)
        return answer

    def give_up(self, now: float) -> list[int]:
        """Renewals out for a whole lease: they can no longer extend it (a grant counts
        from its send). Forgotten; their tokens."""
        old = [t for t, sent in self._out.items() if now - sent >= self.terms.lease_s]
        for t in old:
            del self._out[t]
        if old:
            self._failed = True
        return old

    def rejoin(self, now: float) -> None:
        """The node was told it was lost and takes a new incarnation at ``now``: the old
        incarnation's renewals are forgotten (their answers are not for it), it holds no
        lease until a renewal of the new one is granted, and one is due at once."""
        self._out.clear()
        self.confirmed_at = min(self.confirmed_at, now - self.terms.lease_s)
        self._last_sent = -math.inf
        self._failed = False

    def next_look(self, now: float) -> float:
        """When the owner should look again (a renewal due, the lease running out), at
        most :data:`FENCE_CHECK_S` from ``now``."""
        wait = self.terms.retry_s if self._failed else self.terms.renew_every_s
        at = min(self._last_sent + wait, now + FENCE_CHECK_S)
        if self.held(now):
            at = min(at, self.expires_at)
        elif now < self._woke + ASK_S:
            at = min(at, self._woke + ASK_S)
        return max(at, now)


class LeaseLedger:
    """The global manager's side: per node, its last grant (real s) and incarnation, and
    the incarnations it retired by declaring the node lost. Not thread-safe: the caller
    locks (the actor answers renewals on many threads).

    ``now``: when this ledger starts; every node counts as granted then (a restarted
    global manager cannot know a later grant did not happen just before its crash).
    ``lost``: nodes already lost (a recovered journal's): the first incarnation heard
    from each is retired, as if it had been known when the node was declared lost."""

    def __init__(
        self, terms: LeaseTerms, nodes: Iterable[str], now: float, lost: Iterable[str] = ()
    ) -> None:
        self.terms = terms
        self.granted_at: dict[str, float] = {n: now for n in nodes}
        self.incarnation: dict[str, int] = {}
        self.retired: dict[str, set[int]] = {}
        #: Lost nodes whose incarnation was not known: the next one heard is retired.
        self._untold: set[str] = set(lost)
        #: Lost nodes not yet back under a new incarnation.
        self.lost: set[str] = set(lost)
        #: Events worth a line in ``status`` (each node counts its own renewals).
        self.counters = {"stale_renewals": 0, "rejoined": 0}

    def accepts(self, node: str, incarnation: int | None) -> bool:
        """Whether a message of ``node``'s ``incarnation`` (a renewal, a report) is taken:
        not one of an incarnation retired by a loss. The first incarnation heard from a
        lost node whose incarnation was not known is retired here."""
        if incarnation is None:
            return node not in self.lost
        if incarnation in self.retired.get(node, ()):
            return False
        if node in self._untold:
            self._untold.discard(node)
            self.retired.setdefault(node, set()).add(incarnation)
            return False
        return True

    def heard(self, node: str, incarnation: int | None) -> bool:
        """:meth:`accepts`, and if so ``incarnation`` is ``node``'s current one (a
        manager Ray restarted reports under a new one before it renews): the one a loss
        retires."""
        if not self.accepts(node, incarnation):
            return False
        if incarnation is not None:
            self.incarnation[node] = incarnation
        return True

    def renew(self, node: str, incarnation: int, now: float) -> Answer:
        """``node`` asks, as ``incarnation``, to renew its lease at ``now``: granted,
        unless that incarnation was declared lost (counted ``stale_renewals``). A lost
        node granted under a new incarnation has rejoined (:attr:`Answer.REJOINED`)."""
        if node not in self.granted_at:
            raise KeyError(node)
        if not self.accepts(node, incarnation):
            self.counters["stale_renewals"] += 1
            return Answer.LOST
        self.granted_at[node] = max(self.granted_at[node], now)
        self.incarnation[node] = incarnation
        if node in self.lost:
            self.lost.discard(node)
            self.counters["rejoined"] += 1
            return Answer.REJOINED
        return Answer.GRANTED

    def declare_lost(self, node: str) -> None:
        """``node`` was declared lost: its incarnation is retired (its renewals and
        reports are refused from now on; unknown: the next one heard is)."""
        self.lost.add(node)
        inc = self.incarnation.pop(node, None)
        if inc is None:
            self._untold.add(node)
        else:
            self.retired.setdefault(node, set()).add(inc)

    def lapse_at(self, node: str) -> float:
        """When ``node``'s lease has certainly lapsed (real s): its last grant + lease +
        margin. A new attempt of its gangs starts no earlier."""
        return self.granted_at[node] + self.terms.lease_s + self.terms.margin_s

    def may_restart(self, nodes: Iterable[str], now: float) -> bool:
        """Whether gangs that ran on ``nodes`` may start again at ``now``."""
        return all(now >= self.lapse_at(n) for n in nodes if n in self.granted_at)
