"""Backfill placement with reservations, the default placement policy (``backfill``), in
the manner of Slurm's backfill scheduler with a reservation depth (``docs/decisions.md``,
"Placement that nobody waits for").

One queue cycle (:class:`BackfillPlacement`, run by :class:`_BackfillCycle`):

1. *Reservations.* The jobs due one are taken first, at most ``depth`` of them: the
   strict jobs, in queue order (priority, then submission), that waited at least
   ``reserve_after`` seconds and at least ``outlier`` times the queue's mean wait (a job
   that waited ``reserve_always`` seconds is due one whatever the mean, so that a
   saturated queue, whose mean wait grows with it, cannot starve its oldest job). Each
   is placed if it fits now; else it gets a :class:`Reservation`: the earliest time
   ``T`` (s) at which the running strict subtasks, expected to end at their start plus
   work over expected rate, and the earlier reservations leave room for all its
   subtasks on distinct nodes, and the nodes it would take then (:meth:`_BackfillCycle.
   _reserve`, a binary search over the nodes' release times,
   :func:`availability_time`).
2. *Backfill.* The rest of the queue is placed in fair-share order (:func:`fair_order`:
   priority, then the user holding the least strict rate, updated as jobs are placed,
   then submission order; or in queue order without ``fair``), each where it fits now
   without delaying any reservation: on a node reserved from ``T`` a job may use the
   free budget if it is expected to end by ``T``, else only what the reservation leaves
   there at ``T`` (:meth:`_BackfillCycle._view`). A job that does not fit does not hold
   back the ones behind it; one that would fit but for a reservation is told so.

Node choice for one job: :func:`~global_manager.fit.first_fit` on ``least_loaded``'s
ranking (most free budget first), the fit rule of :mod:`global_manager.fit`. Before the
backfill pass, the strict jobs that cannot fit the free budgets whatever the ranking are
left out (``screen``; :func:`_cannot_fit`): budgets only shrink within a cycle, so they
would place nothing and get no reason.

Submissions outside the queue, jobs that are not strict and grids with an unbounded
budget are placed as ``least_loaded`` places them (:mod:`global_manager.greedy`).

Pure: a cycle reads and updates only the grid state it is given. Rates and budgets in
Mcycles/s, times in seconds of model time.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from global_manager.cycle import (
    END_SLACK,
    RESERVE_AFTER,
    CycleReply,
    CycleRequest,
    GridState,
    NodeLoad,
    Placement,
)
from global_manager.fit import first_fit, fit_limits, fits, gang_misfit, room_limit
from global_manager.greedy import GreedyPlacement, LeastLoaded
from global_manager.pending_job import PendingJob, PendingReason, ReasonKind

__all__ = [
    "BackfillPlacement",
    "Reservation",
    "availability_time",
    "committed_at",
    "fair_order",
]


@dataclass(frozen=True, slots=True)
class Reservation:
    """Rate held for ``job_id`` from ``start`` (s) on, per node (Mcycles/s)."""

    job_id: str
    start: float
    rates: tuple[tuple[str, float], ...]


def committed_at(ends: Sequence[tuple[float, float]], t: float) -> float:
    """Rate still committed at time ``t`` (s) by the subtasks ``ends`` (``(expected end,
    rate)`` pairs sorted by end): those expected to end after ``t``."""
    i = bisect.bisect_right(ends, (t, math.inf))
    return math.fsum(r for _, r in ends[i:])


def availability_time(
    ends: Sequence[tuple[float, float]], committed: float, room: float, rate: float,
    now: float,
) -> float:
    """The earliest time (s, ``>= now``) at which ``rate`` fits in ``room`` (the node's
    budget less any reserved rate) once the subtasks ``ends`` (sorted ``(end, rate)``
    pairs, their rates summing to ``committed``) expected to end by then have ended;
    ``inf`` if never."""
    if rate > room_limit(room):
        return math.inf
    if fits(committed + rate, room):
        return now
    for end, r in ends:
        committed -= r
        if fits(committed + rate, room):
            return max(end, now)
    return math.inf


def _reserved_reason(nodes: Sequence[str], start: float) -> PendingReason:
    return PendingReason(
        ReasonKind.RESERVED,
        f"holds nodes {', '.join(nodes)} from {start:.6g} s: placed there once the jobs "
        "running on them finish",
    )


def _blocked_reason(job_id: str) -> PendingReason:
    return PendingReason(
        ReasonKind.RESERVED,
        f"it would fit now but would delay job {job_id}, which holds a reservation",
    )


@dataclass(frozen=True, slots=True)
class BackfillPlacement(GreedyPlacement):
    """Backfill with reservations (the module docstring tells the cycle): ``depth``
    reservations at most, due after ``reserve_after`` s of waiting and ``outlier`` times
    the queue's mean wait, or ``reserve_always`` s; the rest in fair-share order
    (``fair``) or in queue order."""

    name: str = "backfill"
    depth: int = 1
    reserve_after: float | None = RESERVE_AFTER
    outlier: float = 3.0
    #: Seconds of waiting after which a job is due a reservation, outlier or not (the
    #: bound that keeps a saturated queue, whose mean wait grows with it, from starving
    #: its oldest job).
    reserve_always: float | None = 6 * 3600.0
    fair: bool = True
    #: Leave out of a cycle, at its start, the strict jobs that cannot fit the free
    #: budgets (the placements and reasons are the same either way; tests compare them).
    screen: bool = True

    @property
    def reserves(self) -> bool:  # type: ignore[override]
        return self.reserve_after is not None and self.depth > 0

    def rank(
        self, nodes: tuple[NodeLoad, ...], checked: bool, rng: random.Random
    ) -> list[NodeLoad]:
        return LeastLoaded().rank(nodes, checked, rng)

    def schedule(self, request: CycleRequest, rng: random.Random) -> CycleReply:
        grid = GridState(request)
        if not request.queue or not grid.budgets_finite():
            return GreedyPlacement.schedule(self, request, rng)
        return _BackfillCycle(self, grid, rng).run()


class _BackfillCycle:
    """One cycle of :class:`BackfillPlacement` over ``grid`` (updated in place)."""

    def __init__(self, policy: BackfillPlacement, grid: GridState, rng: random.Random) -> None:
        self.policy, self.grid, self.rng = policy, grid, rng
        self.now = grid.req.now
        self.up = [n for n in grid.req.nodes if n.up]
        self.ends: dict[str, list[tuple[float, float]]] = {n.name: [] for n in self.up}
        for st in grid.running:
            if st.node in self.ends:
                self.ends[st.node].append((max(st.end, self.now), st.rate))
        for e in self.ends.values():
            e.sort()
        self.reservations: list[Reservation] = []
        self.reserved_on: dict[str, float] = {}
        self.reasons: dict[str, tuple[PendingReason, ...]] = {}
        self._views: dict[
            tuple[int, ...], tuple[list[NodeLoad], list[float], list[float]]
        ] = {}
        self._run_times: dict[str, float] = {}

    def run(self) -> CycleReply:
        req, pol = self.grid.req, self.policy
        heads: list[PendingJob] = []
        if pol.reserve_after is not None and pol.depth > 0 and req.jobs:
            least = pol.reserve_after
            if pol.outlier > 0:
                mean_wait = math.fsum(self.now - j.arrival for j in req.jobs) / len(req.jobs)
                least = max(least, pol.outlier * mean_wait)
                if pol.reserve_always is not None:
                    least = min(least, max(pol.reserve_after, pol.reserve_always))
            heads = [j for j in req.jobs
                     if j.strict and self.now - j.arrival >= least][:pol.depth]
        for job in heads:
            if self._try(job):
                continue
            res = self._reserve(job)
            if res is not None:
                self.reservations.append(res)
                for n, r in res.rates:
                    self.reserved_on[n] = self.reserved_on.get(n, 0.0) + r
                self._views.clear()
                self.reasons[job.job_id] = (_reserved_reason([n for n, _ in res.rates],
                                                            res.start),)
        head_ids = {j.job_id for j in heads}
        # Budgets only shrink within a cycle (placements and reservations), so a strict
        # job that fails _cannot_fit's test on the free budgets as they stand fails
        # it for the rest of the cycle: leave it out (it would place nothing, hold back
        # nobody and get no reason; the fair order of the others does not change, since
        # only placements move it).
        _, frees, limits = self._view(())
        rest = [j for j in req.jobs if j.job_id not in head_ids
                and not (pol.screen and j.strict and _cannot_fit(j, frees, limits))]
        for job in self._fair_order(rest):
            if not self._try(job) and self.reservations and self._fit_now(job, False):
                self.reasons[job.job_id] = (_blocked_reason(self.reservations[0].job_id),)
        placed = self.grid.placed
        reasons = {j: r for j, r in self.reasons.items() if j not in placed}
        messages = {j: "; ".join(x.message for x in r) for j, r in reasons.items()}
        return CycleReply(MappingProxyType(placed), MappingProxyType(reasons),
                          MappingProxyType(messages), None)

    def _fair_order(self, jobs: list[PendingJob]) -> Iterable[PendingJob]:
        """``jobs`` (in priority then submission order) as :func:`fair_order` gives
        them, or as they are without ``fair``."""
        return fair_order(jobs, self.grid.held) if self.policy.fair else jobs

    def _view(
        self, active: tuple[int, ...]
    ) -> tuple[list[NodeLoad], list[float], list[float]]:
        """The up nodes ranked for a job that would still run when the reservations
        ``active`` (indices) start, with their free budget then (the current free
        budget, less on a reserved node what the reservation needs at its start), those
        free budgets sorted, largest first, and the same as
        :func:`~global_manager.fit.gang_misfit` reads them. Cached until the grid
        changes."""
        hit = self._views.get(active)
        if hit is not None:
            return hit
        grid = self.grid
        loads = []
        for n in self.up:
            free = n.budget - grid.committed[n.name]
            for k in active:
                res = self.reservations[k]
                if any(m == n.name for m, _ in res.rates):
                    left = (n.budget - self.reserved_on[n.name]
                            - committed_at(self.ends[n.name], res.start))
                    free = min(free, left)
            loads.append(NodeLoad(n.name, n.speed, n.budget - free, n.budget,
                                  grid.load[n.name], n.labels))
        ranked = self.policy.rank(tuple(loads), True, self.rng)
        frees = sorted((nl.free for nl in loads), reverse=True)
        view = (ranked, frees, fit_limits(frees))
        self._views[active] = view
        return view

    def _run_time(self, job: PendingJob) -> float:
        t = self._run_times.get(job.job_id)
        if t is None:
            t = self._run_times[job.job_id] = job.run_time
        return t

    def _fit_now(self, job: PendingJob, reserved: bool) -> Placement | None:
        """``job`` where it fits now (without delaying a reservation if ``reserved``)."""
        if not job.strict:
            return None
        end = self.now + self._run_time(job)
        active = tuple(k for k, res in enumerate(self.reservations)
                       if end > res.start + END_SLACK) if reserved else ()
        ranked, frees, limits = self._view(active)
        if _cannot_fit(job, frees, limits):
            return None
        got = first_fit(job.rates, job.labels, ranked, True)
        if isinstance(got, int):
            return None
        return Placement(got, job.works, job.weights, job.rates)

    def _try(self, job: PendingJob) -> bool:
        """Place ``job`` now if it fits without delaying a reservation."""
        if not job.strict:
            got = self.policy.place_one(job, self.grid, self.rng)
            if isinstance(got, str):
                return False
            self.grid.commit(job, got)
            self._views.clear()
            return True
        p = self._fit_now(job, True)
        if p is None:
            return False
        self.grid.commit(job, p)
        self._views.clear()
        for node, rate, work in zip(p.nodes, p.rates, p.works):
            if rate > 0:
                bisect.insort(self.ends[node], (self.now + work / rate, rate))
        return True

    def _reserve(self, job: PendingJob) -> Reservation | None:
        """The earliest start (s) and nodes for ``job`` given the running subtasks'
        expected ends and the reservations made so far; None if it never fits."""
        grid = self.grid
        times: set[float] = set()
        for n in self.up:
            room = n.budget - self.reserved_on.get(n.name, 0.0)
            for r in set(job.rates):
                t = availability_time(self.ends[n.name], grid.committed[n.name], room, r,
                                      self.now)
                if math.isfinite(t):
                    times.add(t)
        cands = sorted(times)

        def at(t: float) -> tuple[str, ...] | None:
            loads = tuple(
                NodeLoad(n.name, n.speed,
                         self.reserved_on.get(n.name, 0.0) + committed_at(self.ends[n.name], t),
                         n.budget, grid.load[n.name], n.labels)
                for n in self.up
            )
            got = first_fit(job.rates, job.labels, self.policy.rank(loads, True, self.rng),
                            True)
            return None if isinstance(got, int) else got

        lo, hi = 0, len(cands) - 1
        best: tuple[float, tuple[str, ...]] | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            got = at(cands[mid])
            if got is None:
                lo = mid + 1
            else:
                best = (cands[mid], got)
                hi = mid - 1
        if best is None:
            return None
        t, nodes = best
        return Reservation(job.job_id, t, tuple(zip(nodes, job.rates)))


def _cannot_fit(job: PendingJob, frees: Sequence[float], limits: Sequence[float]) -> bool:
    """Whether the strict ``job`` cannot be placed first-fit on nodes with the free
    budgets ``frees`` (sorted, largest first; ``limits``: them as
    :func:`~global_manager.fit.gang_misfit` reads them), whatever their ranking: exact
    for an unlabelled gang (:func:`~global_manager.fit.gang_misfit`), the necessary test
    of :func:`_hopeless` for a labelled one. Budgets only shrink within a cycle, so
    either answer holds for the rest of it."""
    if any(job.labels):
        return _hopeless(job.rates, frees)
    return gang_misfit(job.rates, limits) >= 0


def _hopeless(rates: Sequence[float], frees: Sequence[float]) -> bool:
    """Whether a gang of ``rates`` fails the necessary test of fitting the free budgets
    ``frees`` (sorted, largest first): its largest subtask on the most free node, and
    as many nodes as subtasks with room for its smallest."""
    n = len(rates)
    return (not frees or max(rates) > room_limit(frees[0]) or len(frees) < n
            or min(rates) > room_limit(frees[n - 1]))


def fair_order(jobs: Sequence[PendingJob], held: Mapping[str, float]) -> Iterator[PendingJob]:
    """``jobs`` (in priority then submission order) in fair-share order: priority
    classes highest first; within one, the next job is the earliest remaining one of the
    user holding the least strict rate in ``held`` (Mcycles/s; read at each step, so a
    job placed meanwhile moves its user back), ties by user name."""
    by_prio: dict[int, dict[str, list[PendingJob]]] = {}
    for j in jobs:
        by_prio.setdefault(j.priority, {}).setdefault(j.user, []).append(j)
    for prio in sorted(by_prio, reverse=True):
        queues = {u: list(reversed(js)) for u, js in by_prio[prio].items()}
        while queues:
            user = min(queues, key=lambda u: (held.get(u, 0.0), u))
            job = queues[user].pop()
            if not queues[user]:
                del queues[user]
            yield job
