"""When will each pending job start: ``squeue --start`` for the pending queue.

A pure function, :func:`estimate_starts`, from a frozen :class:`StartEstimateRequest`
(the time now, the nodes' admission budgets, what the running strict subtasks book on
each node and until when, the pending jobs in placement order) to a frozen
:class:`StartEstimateReply` (each pending job's estimated start, or ``None`` when it
cannot be estimated). No I/O, no clock: ``now`` is given.

Units: rates and budgets in Mcycles/s, times in seconds of model time.

The walk. Starting at ``now``, the future release events (a booking's expected end) are
taken in time order. At each event time every pending job not yet started is tried, in
placement order, and starts there if its gang fits: all of its subtasks on distinct
nodes that carry their labels and have their rate free (the placement's fit rule,
:func:`global_manager.fit.fits` with :func:`global_manager.fit.max_matching`). A job
that does not fit does not
hold back the ones behind it (as in a placement cycle), so a small job may be estimated to
start before a larger one ahead of it. A job estimated to start books its rates on the
nodes it was given (those with the most room first) until its own expected end
(``start + run_time``). A job still unstarted when no release is left can never start on
these nodes (its labels, its rates or its node count): ``None``.

The drain reservation (:class:`Hold`): while the held job waits, the other jobs may use
the held nodes only if they are expected to end by its ``shadow`` time (EASY backfill, as
the placement's backfill); the held job itself starts only on its held nodes and not
before ``shadow``, so the estimate and the backfill agree.

Known error: expected ends come from expected rates (``work / expected rate``), and jobs
that outrun or lag them move every later start; users' fair-share bounds and future drain
reservations are not modelled (``docs/runtime.md``, "Estimated start").
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from global_manager.cycle import END_SLACK
from global_manager.fit import fit_limits, fits, max_matching, room_limit
from global_manager.pending_job import PendingJob
from workloads.native import picklable_frozen_records

__all__ = [
    "Booking",
    "EstimateCache",
    "EstimateNode",
    "Hold",
    "StartEstimateReply",
    "StartEstimateRequest",
    "estimate_starts",
]


@dataclass(frozen=True, slots=True)
class EstimateNode:
    """A node placement may use: ``budget``, its whole admission budget (Mcycles/s,
    ``inf`` when unchecked); ``labels`` it carries."""

    name: str
    budget: float
    labels: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Booking:
    """Expected rate ``rate`` (Mcycles/s) a running strict subtask holds on ``node``
    until ``end`` (model s; ``inf``: not known to end). An ``end`` before ``now`` (a
    subtask running late) counts as ``now``."""

    node: str
    rate: float
    end: float


@dataclass(frozen=True, slots=True)
class Hold:
    """The placement's drain reservation: ``nodes`` held for ``job_id``; ``shadow``: when
    the held job is expected to fit there (s; ``None``: not known, then no backfill)."""

    job_id: str
    nodes: tuple[str, ...]
    shadow: float | None


@dataclass(frozen=True, slots=True)
class StartEstimateRequest:
    """Estimate at ``now`` (s) the starts of ``queue`` (in placement order) on ``nodes``
    (the ones placement may use) given the ``running`` bookings and the ``hold``."""

    now: float
    nodes: tuple[EstimateNode, ...]
    running: tuple[Booking, ...]
    queue: tuple[PendingJob, ...]
    hold: Hold | None = None


@dataclass(frozen=True, slots=True)
class StartEstimateReply:
    """``starts[job]``: estimated start (model s, ``>= now``) or ``None`` (cannot be
    estimated: it never fits these nodes); ``nodes[job]``: where the estimate put each
    of its subtasks (jobs with a start only); ``valid_until``: the first release event
    after ``now`` (s, :class:`EstimateCache`)."""

    starts: Mapping[str, float | None]
    nodes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    valid_until: float = math.inf


def _validate(req: StartEstimateRequest) -> None:
    if not math.isfinite(req.now):
        raise ValueError(f"now: must be a finite time in seconds, got {req.now!r}")
    names = set()
    for n in req.nodes:
        if n.name in names:
            raise ValueError(f"nodes: duplicate node name {n.name!r}")
        names.add(n.name)
        if math.isnan(n.budget):
            raise ValueError(f"nodes[{n.name!r}].budget: must be a number, got nan")
    for b in req.running:
        if math.isnan(b.rate) or math.isnan(b.end) or b.rate < 0:
            raise ValueError(f"running: booking on {b.node!r} needs a rate >= 0 and an end")
    seen = set()
    for j in req.queue:
        if j.job_id in seen:
            raise ValueError(f"queue: duplicate job id {j.job_id!r}")
        seen.add(j.job_id)
        if math.isnan(j.run_time) or j.run_time < 0:
            raise ValueError(f"queue[{j.job_id!r}].run_time: must be >= 0 s, got {j.run_time!r}")


class _Walk:
    """The free budgets along the walk and the release events still to come."""

    def __init__(self, req: StartEstimateRequest) -> None:
        self.nodes = req.nodes
        self.index = {n.name: k for k, n in enumerate(req.nodes)}
        self.free = [n.budget for n in req.nodes]
        self.events: list[tuple[float, int, float]] = []  # (time, node, rate)
        #: Allowed-node list (by identity) -> its nodes, most room first; cleared
        #: whenever a budget moves.
        self._ranked: dict[int, list[int]] = {}
        #: Job id -> (its subtasks, largest rate first; whether any asks for labels).
        self._shape: dict[str, tuple[list[int], bool]] = {}
        for b in req.running:
            k = self.index.get(b.node)
            if k is None or b.rate <= 0:
                continue  # a node placement does not use: its bookings do not matter
            self.free[k] -= b.rate
            heapq.heappush(self.events, (max(b.end, req.now), k, b.rate))

    def release_until(self, t: float) -> None:
        while self.events and self.events[0][0] <= t:
            _, k, rate = heapq.heappop(self.events)
            self.free[k] += rate
            self._ranked.clear()

    def next_event(self) -> float | None:
        return self.events[0][0] if self.events else None

    def gang(self, job: PendingJob, allowed: list[bool]) -> tuple[int, ...] | None:
        """Nodes (indexes, per subtask) for the whole gang on the free budgets, distinct
        and labelled, among the ``allowed`` nodes; None if it does not fit."""
        subs = job.subtasks
        shape = self._shape.get(job.job_id)
        if shape is None:
            shape = (sorted(range(len(subs)), key=lambda i: (-subs[i].rate, i)),
                     any(s.labels for s in subs))
            self._shape[job.job_id] = shape
        order, labelled = shape
        ranked = self._ranked.get(id(allowed))
        if ranked is None:
            ranked = sorted((k for k in range(len(self.nodes)) if allowed[k]),
                            key=lambda k: (-self.free[k], k))
            self._ranked[id(allowed)] = ranked
        # Without labels every subtask may use every node with room, so the largest rate
        # on the node with the most room, the next on the next, and so on, fits iff any
        # matching does; with labels that is still necessary.
        if len(ranked) < len(subs):
            return None
        chosen = [-1] * len(subs)
        for i, k in zip(order, ranked):
            if not fits(subs[i].rate, self.free[k]):
                return None
            chosen[i] = k
        if not labelled:
            return tuple(chosen)
        eligible = [
            [k for k in ranked if s.labels <= self.nodes[k].labels and fits(s.rate, self.free[k])]
            for s in subs
        ]
        if any(not e for e in eligible):
            return None
        # Greedy first: the most constrained subtask (fewest eligible nodes, then the
        # largest rate) on its eligible node with the most room.
        by_need = sorted(range(len(subs)), key=lambda i: (len(eligible[i]), -subs[i].rate, i))
        taken: set[int] = set()
        for i in by_need:
            k = next((m for m in eligible[i] if m not in taken), -1)
            if k < 0:
                break
            chosen[i] = k
            taken.add(k)
        else:
            return tuple(chosen)
        if max_matching(eligible) < len(subs):
            return None
        # The greedy choice failed where a matching exists: subtask by subtask, each on
        # the eligible node with the most room that still leaves the others a matching.
        taken.clear()
        for pos, i in enumerate(by_need):
            rest = by_need[pos + 1:]
            for k in eligible[i]:
                if k in taken:
                    continue
                left = [[m for m in eligible[r] if m not in taken and m != k] for r in rest]
                if max_matching(left) == len(rest):
                    chosen[i] = k
                    taken.add(k)
                    break
            else:  # pragma: no cover - the matching above guarantees a node
                return None
        return tuple(chosen)

    def book(self, job: PendingJob, nodes: tuple[int, ...], start: float) -> None:
        end = start + job.run_time
        for s, k in zip(job.subtasks, nodes):
            self.free[k] -= s.rate
            heapq.heappush(self.events, (end, k, s.rate))
        self._ranked.clear()


def _room_limit(free: list[float]) -> float:
    """The largest rate that fits some node's ``free`` budget."""
    return room_limit(max(free, default=-math.inf))


class _Screen:
    """Which waiting jobs could fit at one event, job by job without trying them.

    An unlabelled gang fits iff its rates, largest first, each fit the allowed nodes'
    free budgets, largest first (:meth:`_Walk.gang`'s rule); the same comparisons are
    made here on every unlabelled job's sorted rates, with the same floating-point
    operations, so a job the screen rejects is one :meth:`_Walk.gang` would reject. Only
    the jobs it passes (and every labelled job) are tried one by one.
    Within one event time budgets only go down as jobs are booked, and a fit on lower
    budgets implies one on higher budgets, so a job rejected at the start of the event
    stays rejected until its end (unless the allowed nodes grow: the held job started).

    Plain loops, not numpy arrays: compiled, a loop that stops at a job's first rate that
    does not fit costs less than numpy's fixed cost per call on queues of the sizes a
    grid holds (tens to hundreds of jobs)."""

    __slots__ = ("rates", "labelled", "run_time", "width")

    def __init__(self, queue: tuple[PendingJob, ...]) -> None:
        #: Per job, its subtasks' rates, largest first (Mcycles/s; labelled jobs: none).
        self.rates: list[list[float]] = []
        self.labelled: list[bool] = []
        self.run_time: list[float] = [j.run_time for j in queue]
        #: The widest gang (at least 1): how many of the largest rooms are compared.
        self.width = max(1, max((len(j.subtasks) for j in queue), default=0))
        for j in queue:
            labelled = any(s.labels for s in j.subtasks)
            self.labelled.append(labelled)
            self.rates.append(
                [] if labelled else sorted((s.rate for s in j.subtasks), reverse=True)
            )

    def limits(self, free: list[float], allowed: list[bool]) -> list[float]:
        """The ``width`` largest rooms of the allowed nodes, largest first, each with the
        fit rule's slack: the largest rate the k-th largest room takes (Mcycles/s)."""
        room = sorted((f for f, a in zip(free, allowed) if a), reverse=True)
        return fit_limits(room[:self.width])

    def fits(self, p: int, limit: list[float]) -> bool:
        """Whether job ``p``'s gang fits room with these :meth:`limits` (meaningful for
        unlabelled jobs only): no wider than the allowed nodes, its k-th largest rate
        within the k-th largest limit."""
        rates = self.rates[p]
        if len(rates) > len(limit):
            return False
        for k, r in enumerate(rates):
            if not r <= limit[k]:
                return False
        return True


def estimate_starts(req: StartEstimateRequest, *, screen: bool = True) -> StartEstimateReply:
    """Each pending job's estimated start; see the module docstring for the walk.
    ``screen``: test the unlabelled gangs' fits all at once (:class:`_Screen`) before
    trying jobs one by one; the reply is the same either way (tests compare them)."""
    _validate(req)
    walk = _Walk(req)
    hold = req.hold
    held = [False] * len(req.nodes)
    holder: str | None = None
    shadow = -math.inf
    if hold is not None and any(j.job_id == hold.job_id for j in req.queue):
        holder = hold.job_id
        for name in hold.nodes:
            if name in walk.index:
                held[walk.index[name]] = True
        shadow = hold.shadow if hold.shadow is not None else -math.inf
    only_held = list(held)
    anywhere = [True] * len(req.nodes)
    unheld = [not h for h in held]
    starts: dict[str, float | None] = {}
    nodes: dict[str, tuple[str, ...]] = {}
    queue = req.queue
    biggest = [max((s.rate for s in j.subtasks), default=0.0) for j in queue]
    alive = [True] * len(queue)
    left = len(queue)  # jobs still alive
    scr = _Screen(queue) if screen and queue else None
    holder_at = next((p for p, j in enumerate(queue) if j.job_id == holder), -1)
    t = req.now
    valid_until = math.inf

    def candidates(first: int) -> list[int]:
        """Queue positions from ``first`` on worth trying at ``t`` (all, unscreened)."""
        if scr is None:
            return [p for p in range(first, len(queue)) if alive[p]]
        backfill_until = (hold.shadow + END_SLACK if holder is not None and hold is not None
                          and hold.shadow is not None else None)
        room_anywhere = scr.limits(walk.free, anywhere)
        room_unheld = scr.limits(walk.free, unheld) if holder is not None else room_anywhere
        out: list[int] = []
        for p in range(first, len(queue)):
            if not alive[p]:
                continue
            if p == holder_at and holder is not None:
                out.append(p)  # the held job is always tried (on its held nodes)
                continue
            if scr.labelled[p]:
                out.append(p)
                continue
            if backfill_until is not None and t + scr.run_time[p] <= backfill_until:
                limits = room_anywhere  # backfill: gone before the held job needs room
            else:
                limits = room_unheld
            if scr.fits(p, limits):
                out.append(p)
        return out

    while left:
        walk.release_until(t)
        top = _room_limit(walk.free)
        todo = candidates(0)
        i = 0
        while i < len(todo):
            p = todo[i]
            i += 1
            job = queue[p]
            if biggest[p] > top:  # its largest subtask fits no node
                continue
            if job.job_id == holder:
                if t < shadow:
                    continue
                allowed = only_held
            elif holder is not None and hold is not None and hold.shadow is not None \
                    and t + job.run_time <= hold.shadow + END_SLACK:
                allowed = anywhere  # backfill: it is gone before the held job needs room
            else:
                allowed = unheld if holder is not None else anywhere
            got = walk.gang(job, allowed)
            if got is None:
                continue
            starts[job.job_id] = t
            nodes[job.job_id] = tuple(req.nodes[k].name for k in got)
            alive[p] = False
            left -= 1
            walk.book(job, got, t)
            top = _room_limit(walk.free)
            if job.job_id == holder:
                holder = None
                unheld = anywhere
                # Every node is open to the jobs behind it now: screen them again.
                todo = candidates(p + 1)
                i = 0
            elif scr is not None and len(todo) - i > 2:
                # Its booking took room the jobs behind it were screened with: screen
                # them again at once rather than try each.
                todo = candidates(p + 1)
                i = 0
        nxt = walk.next_event()
        if holder is not None and t < shadow and (nxt is None or shadow < nxt):
            nxt = shadow  # the held job's turn comes at its shadow time
        if nxt is None:
            break
        if valid_until == math.inf:
            valid_until = nxt
        t = nxt
    for p, waiting in enumerate(alive):
        if waiting:
            starts[queue[p].job_id] = None
    return StartEstimateReply(
        starts=MappingProxyType({j.job_id: starts[j.job_id] for j in req.queue}),
        nodes=MappingProxyType(nodes),
        valid_until=valid_until,
    )


class EstimateCache:
    """The last reply, reused while nothing but the time changed: the same request (but
    ``now``) at a later time before the reply's ``valid_until`` walks the same events,
    so, when no job was estimated to start at the cached ``now``, it gives the same
    starts. Keeps a core's estimates cheap
    between changes of the queue, the bookings or the nodes."""

    __slots__ = ("_key", "_reply", "_computed_at", "computed")

    def __init__(self) -> None:
        self._key: StartEstimateRequest | None = None
        self._reply: StartEstimateReply | None = None
        self._computed_at = -math.inf
        #: Walks made (cache misses), for tests and benchmarks.
        self.computed = 0

    def get(self, req: StartEstimateRequest) -> StartEstimateReply:
        key = replace(req, now=0.0)
        reply = self._reply
        if reply is not None and key == self._key \
                and self._computed_at <= req.now < reply.valid_until \
                and all(s is None or s > self._computed_at for s in reply.starts.values()):
            # No job starts at the cached ``now`` (its booking would shift with the
            # time), and no event lies between: the walk is the same.
            return reply
        reply = estimate_starts(req)
        self.computed += 1
        self._key, self._reply, self._computed_at = key, reply, req.now
        return reply


# Compiled (workloads/native.py), a frozen record needs its constructor to be unpickled.
picklable_frozen_records(globals())
