"""The placement interface (``docs/model.md`` §3, "Admission"; §4, "Min-cost max-flow
scheduler"): one pure solver per placement policy, from a frozen :class:`CycleRequest`
(the grid as the global manager sees it and the jobs to place, in queue order) to a
frozen :class:`CycleReply` (a node per subtask for every job placed, in the order they
were placed; reasons for the others; the flow policy's node hold).

Implementations, registered by name in :data:`placement_policies`:

- ``least_loaded`` and ``random`` (:class:`GreedyPlacement`): the jobs in queue order,
  each placed whole by :func:`first_fit` on the policy's node ranking, or skipped (a job
  that does not fit does not hold back the ones behind it);
- ``flow`` (:class:`FlowPlacement`): the whole queue as one min-cost flow
  (:mod:`global_manager.flow_placement`) with fair-share bounds and a drain reservation
  for the job that waited longest, EASY-backfilled (``docs/decisions.md``).

Pure apart from the draws a policy's ranking makes from the ``rng`` it is given. Rates,
budgets and loads in Mcycles/s, speeds in MHz, times in seconds of model time.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from global_manager.backfill import (
    Reservation,
    availability_time,
    blocked_reason,
    committed_at,
    reserved_reason,
)
from global_manager.fit import first_fit, fit_limits, fits, gang_misfit, room_limit
from global_manager.flow_placement import (
    FlowPlacementReply,
    FlowPlacementRequest,
    NodeState,
    PendingJob,
    PendingReason,
    PendingSubtask,
    ReasonKind,
    UserShare,
    fair_shares,
)
from global_manager.flow_placement import place_pending as flow_place_pending
from global_manager.registry import Registry

#: Seconds a job waits before flow placement may hold nodes for it.
RESERVE_AFTER = 600.0


# --------------------------------------------------------------------------- records
@dataclass(frozen=True, slots=True)
class NodeLoad:
    """A node as placement sees it. ``committed``: strict expected rates it carries;
    ``budget``: what admission lets it carry; ``load``: all grid QoS and best-effort
    weights on it. All Mcycles/s. ``labels``: what it carries."""

    name: str
    cpu_rate: float
    committed: float
    budget: float
    load: float
    labels: frozenset[str] = frozenset()

    @property
    def free(self) -> float:
        return self.budget - self.committed


@dataclass(frozen=True, slots=True)
class GridNode:
    """A node of the grid for one placement call: ``speed`` (MHz), strict ``budget`` and
    ``committed`` rate, ``load`` (all grid rates on it), ``labels``; ``up``: False when
    its manager is dead, stale or lost (placement skips it)."""

    name: str
    speed: float
    budget: float
    committed: float
    load: float
    labels: frozenset[str] = frozenset()
    up: bool = True


@dataclass(frozen=True, slots=True)
class SplitShape:
    """How a job given by ``parallelism`` is split on the nodes greedy placement picks:
    node ``j`` gets weight ``total_weight * f_j / sum f`` (``f_j`` its free budget for
    strict jobs, else its CPU rate) and work ``total_work * r_j / total_weight``
    (Mcycles); the expected rates follow from :func:`expected_rates`."""

    parallelism: int
    total_work: float
    total_weight: float
    duration: float | None
    rate_per_weight: float


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job to place whole: per subtask its work (Mcycles), relative weight, expected
    rate (Mcycles/s) and labels (a ``parallelism`` job split evenly; ``split`` tells
    greedy placement how to split it on the nodes it picks instead). ``strict``: its
    rates count against the budgets. ``arrival``: when it was submitted (s)."""

    job_id: str
    user: str
    works: tuple[float, ...]
    weights: tuple[float, ...]
    rates: tuple[float, ...]
    labels: tuple[frozenset[str], ...]
    strict: bool = True
    priority: int = 0
    arrival: float = 0.0
    split: SplitShape | None = None
    #: Expected run time at the expected rates, ``max_i w_i / x_i`` (s; computed).
    run_time: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Asked by every placement cycle for every pending job: computed once.
        object.__setattr__(self, "run_time", max(
            (w / x for w, x in zip(self.works, self.rates) if x > 0), default=math.inf))

    def pending_job(self) -> PendingJob:
        subs = tuple(PendingSubtask(r, lab) for r, lab in zip(self.rates, self.labels))
        return PendingJob(self.job_id, self.user, subs, self.priority, self.arrival)


@dataclass(frozen=True, slots=True)
class RunningSubtask:
    """A running strict subtask: its ``node``, expected ``rate`` (Mcycles/s) and
    expected end (s: its start plus work over expected rate)."""

    node: str
    rate: float
    end: float


@dataclass(frozen=True, slots=True)
class NodeHold:
    """Nodes held for the pending job ``job_id`` (flow's drain reservation)."""

    job_id: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CycleRequest:
    """One placement call at ``now`` (s). ``queue``: a placement cycle over the pending
    queue (``jobs`` in priority then submission order), else the placement of one
    submitted job that is rejected if it does not fit. ``nodes``: every node of the grid
    (down ones flagged); ``held``: strict rate each user's running jobs hold; ``running``:
    the running strict subtasks; ``hold``: the nodes held from the previous cycle."""

    now: float
    jobs: tuple[QueuedJob, ...]
    nodes: tuple[GridNode, ...]
    qos_share: float = 0.5
    queue: bool = True
    held: Mapping[str, float] = field(default_factory=dict)
    running: tuple[RunningSubtask, ...] = ()
    hold: NodeHold | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """A placed job: the node of each subtask and the shape it runs with (works in
    Mcycles, relative weights, expected rates in Mcycles/s)."""

    nodes: tuple[str, ...]
    works: tuple[float, ...]
    weights: tuple[float, ...]
    rates: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class CycleReply:
    """``placed``: the jobs placed, in the order they were placed; ``reasons``: for jobs
    not placed, one reason per constraint they fail (absent: worked out when asked);
    ``messages``: a one-line reason for each job not placed; ``hold``: the node hold
    after this call."""

    placed: Mapping[str, Placement]
    reasons: Mapping[str, tuple[PendingReason, ...]] = field(default_factory=dict)
    messages: Mapping[str, str] = field(default_factory=dict)
    hold: NodeHold | None = None


class PlacementPolicy(Protocol):
    """A placement policy: ranks nodes for one job and places a whole request."""

    @property
    def name(self) -> str: ...

    #: Whether :meth:`place` may hold nodes for a job that waited ``RESERVE_AFTER``
    #: (a queue cycle is then due when a job reaches it, even if nothing else changed).
    @property
    def reserves(self) -> bool: ...

    def rank(
        self, nodes: tuple[NodeLoad, ...], checked: bool, rng: random.Random
    ) -> list[NodeLoad]:
        """Nodes in the order they should be tried."""
        ...

    def place(self, request: CycleRequest, rng: random.Random) -> CycleReply:
        """Place what can be placed of ``request``, all or nothing per job."""
        ...


placement_policies: Registry[PlacementPolicy] = Registry("placement policy")


# --------------------------------------------------------------------- pure helpers
def expected_rates(
    works: Sequence[float], weights: Sequence[float], duration: float | None,
    rate_per_weight: float,
) -> list[float]:
    """``x_i = r_i * u_t`` with ``u_t = max_i(w_i / r_i) / D_t`` for a job with a target
    duration ``D_t`` (s), else ``rate_per_weight`` (Mcycles/s per weight unit)."""
    if duration:
        u = max(w / r for w, r in zip(works, weights)) / duration
    else:
        u = rate_per_weight
    return [r * u for r in weights]


def split_on(
    split: SplitShape, basis: Sequence[float]
) -> tuple[list[float], list[float], list[float]]:
    """Works, weights and expected rates of ``split`` on nodes weighted by ``basis``."""
    weights = [split.total_weight * f / sum(basis) for f in basis]
    works = [split.total_work * r / split.total_weight for r in weights]
    return works, weights, expected_rates(works, weights, split.duration,
                                          split.rate_per_weight)


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """Place ``rates`` (one expected rate per subtask, Mcycles/s) on distinct nodes.
    ``checked``: whether the rates count against the budgets (strict jobs)."""

    rates: tuple[float, ...]
    checked: bool
    nodes: tuple[NodeLoad, ...]


@dataclass(frozen=True, slots=True)
class PlacementReply:
    """``nodes[i]`` is the node of subtask ``i``; ``None`` with a ``reason`` if rejected."""

    nodes: tuple[str, ...] | None
    reason: str = ""

    @property
    def admitted(self) -> bool:
        return self.nodes is not None


def place(
    request: PlacementRequest, policy: PlacementPolicy, rng: random.Random,
    ranked: Sequence[NodeLoad] | None = None,
) -> PlacementReply:
    """All-or-nothing placement of one unlabelled job on distinct nodes: :func:`first_fit`
    on ``policy``'s ranking (``ranked``: that ranking of ``request.nodes``, already made).
    Pure apart from the draws ``policy`` makes from ``rng``."""
    n = len(request.rates)
    if n == 0:
        return PlacementReply(None, "job has no subtasks")
    if n > len(request.nodes):
        return PlacementReply(None, f"{n} subtasks but only {len(request.nodes)} nodes")
    if ranked is None:
        ranked = policy.rank(request.nodes, request.checked, rng)
    got = first_fit(request.rates, (), ranked, request.checked)
    if isinstance(got, int):
        return PlacementReply(None, _no_room(request.rates, got))
    return PlacementReply(got)


def _no_room(rates: Sequence[float], index: int) -> str:
    """Why a gang without labels was not placed: subtask ``index`` found no node."""
    return (f"no free node can take subtask {index} "
            f"(expected rate {rates[index]:.6g} Mcycles/s)")


# ----------------------------------------------------------------------- grid state
class _Grid:
    """The request's grid, updated as the call places jobs (as the core will)."""

    def __init__(self, req: CycleRequest) -> None:
        self.req = req
        self.nodes = {n.name: n for n in req.nodes}
        self.committed = {n.name: n.committed for n in req.nodes}
        self.load = {n.name: n.load for n in req.nodes}
        self.held = dict(req.held)
        self.running = list(req.running)
        self.placed: dict[str, Placement] = {}
        #: The up nodes' loads and their rankings by a pure ranker (by ``checked``), as
        #: they stand: built once and dropped at every commit.
        self._loads: tuple[NodeLoad, ...] | None = None
        self._ranked: dict[bool, list[NodeLoad]] = {}
        #: The up nodes' free budgets as :func:`~global_manager.fit.gang_misfit` reads
        #: them, as they stand (dropped at every commit).
        self._limits: list[float] | None = None

    def loads(self) -> tuple[NodeLoad, ...]:
        if self._loads is None:
            self._loads = tuple(
                NodeLoad(n.name, n.speed, self.committed[n.name], n.budget,
                         self.load[n.name], n.labels)
                for n in self.req.nodes if n.up
            )
        return self._loads

    def ranked(
        self, policy: GreedyPlacement, checked: bool, rng: random.Random
    ) -> list[NodeLoad]:
        """``policy``'s ranking of :meth:`loads` (kept while nothing is committed when
        the ranking draws nothing from ``rng``)."""
        if not policy.pure_rank:
            return policy.rank(self.loads(), checked, rng)
        got = self._ranked.get(checked)
        if got is None:
            got = self._ranked[checked] = policy.rank(self.loads(), checked, rng)
        return got

    def misfit(self, rates: Sequence[float]) -> int:
        """The subtask a checked, unlabelled gang of ``rates`` stops at on the up nodes as
        they stand, under any ranking (-1: it fits; :func:`~global_manager.fit.
        gang_misfit`)."""
        if self._limits is None:
            self._limits = fit_limits([n.budget - n.committed for n in self.loads()])
        return gang_misfit(rates, self._limits)

    def budgets_finite(self) -> bool:
        return all(math.isfinite(n.budget) for n in self.req.nodes)

    def commit(self, job: QueuedJob, p: Placement) -> None:
        """Record ``job`` placed as ``p`` (the core's bookkeeping, in the same order)."""
        for node, rate, work in zip(p.nodes, p.rates, p.works):
            if job.strict:
                self.committed[node] += rate
                self.held[job.user] = self.held.get(job.user, 0.0) + rate
                if rate > 0:
                    self.running.append(RunningSubtask(node, rate, self.req.now + work / rate))
            self.load[node] += rate
        self.placed[job.job_id] = p
        self._loads = None
        self._ranked.clear()
        self._limits = None

    def states(self, held: tuple[str, ...] = ()) -> tuple[NodeState, ...]:
        """The up nodes for the flow solver; ``held`` ones have no room for anybody."""
        out = []
        for n in self.req.nodes:
            if not n.up:
                continue
            c = self.committed[n.name]
            free = 0.0 if n.name in held else n.budget - c
            out.append(NodeState(n.name, n.speed, free, n.labels, c))
        return tuple(out)


# ------------------------------------------------------------------ greedy policies
class GreedyPlacement:
    """Jobs in queue order, each placed whole by :func:`first_fit` on :meth:`rank`."""

    name: str = ""
    reserves: bool = False
    #: Whether :meth:`rank` is a function of the loads alone (no draw from the RNG), so
    #: one ranking serves every job until the grid changes.
    pure_rank: bool = False

    def rank(
        self, nodes: tuple[NodeLoad, ...], checked: bool, rng: random.Random
    ) -> list[NodeLoad]:
        raise NotImplementedError

    def place(self, request: CycleRequest, rng: random.Random) -> CycleReply:
        grid = _Grid(request)
        messages: dict[str, str] = {}
        for job in request.jobs:
            got = self.place_one(job, grid, rng)
            if isinstance(got, str):
                messages[job.job_id] = got
            else:
                grid.commit(job, got)
        return CycleReply(MappingProxyType(grid.placed), messages=MappingProxyType(messages),
                          hold=request.hold)

    def place_one(self, job: QueuedJob, grid: _Grid, rng: random.Random) -> Placement | str:
        """``job`` on the grid as it stands: its placement, or why not."""
        checked = job.strict
        loads = grid.loads()
        if job.split is not None:
            return self._split(job.split, loads, checked, rng)
        rates = job.rates
        if any(job.labels):
            ranked = grid.ranked(self, checked, rng)
            got = first_fit(rates, job.labels, ranked, checked)
            if isinstance(got, int):
                return (f"no free node with labels {', '.join(sorted(job.labels[got])) or '(none)'}"
                        f" can take subtask {got} (expected rate {rates[got]:.6g} Mcycles/s)")
        else:
            if checked and 0 < len(rates) <= len(loads):
                # Whether it fits does not depend on the ranking: a gang that does not is
                # told so without walking the nodes. A ranking that draws from the RNG
                # still draws, as place() would (the run's draws stay the same).
                miss = grid.misfit(rates)
                if miss >= 0:
                    if not self.pure_rank:
                        self.rank(loads, checked, rng)
                    return _no_room(rates, miss)
            reply = place(PlacementRequest(rates, checked, loads), self, rng,
                          grid.ranked(self, checked, rng) if self.pure_rank else None)
            if reply.nodes is None:
                return reply.reason
            got = reply.nodes
        return Placement(got, job.works, job.weights, rates)

    def _split(
        self, split: SplitShape, loads: tuple[NodeLoad, ...], checked: bool, rng: random.Random
    ) -> Placement | str:
        n = split.parallelism
        ranked = self.rank(loads, checked, rng)[:n]
        if len(ranked) < n:
            return f"{n} subtasks but only {len(ranked)} nodes are up"
        basis = [max(nl.free, 0.0) if checked else nl.cpu_rate for nl in ranked]
        if sum(basis) <= 0:
            basis = [nl.cpu_rate for nl in ranked]
        works, weights, rates = split_on(split, basis)
        if checked:
            for i, (nl, x) in enumerate(zip(ranked, rates)):
                if x > room_limit(nl.free):
                    return f"no free node can take subtask {i} (expected rate {x:.6g} Mcycles/s)"
        return Placement(tuple(nl.name for nl in ranked), tuple(works), tuple(weights),
                         tuple(rates))


@placement_policies.register("least_loaded")
@dataclass(frozen=True, slots=True)
class LeastLoaded(GreedyPlacement):
    """Most free budget first for strict jobs, lowest load per MHz for the others;
    ties by node name so the order is deterministic."""

    name: str = "least_loaded"
    pure_rank: bool = True

    def rank(
        self, nodes: tuple[NodeLoad, ...], checked: bool, rng: random.Random
    ) -> list[NodeLoad]:
        if checked:
            return sorted(nodes, key=lambda n: (-n.free, n.name))
        return sorted(nodes, key=lambda n: (n.load / n.cpu_rate, n.name))


@placement_policies.register("random")
@dataclass(frozen=True, slots=True)
class RandomPlacement(GreedyPlacement):
    """A uniformly random order drawn from the run's seeded RNG."""

    name: str = "random"

    def rank(
        self, nodes: tuple[NodeLoad, ...], checked: bool, rng: random.Random
    ) -> list[NodeLoad]:
        order = sorted(nodes, key=lambda n: n.name)
        rng.shuffle(order)
        return order


# ---------------------------------------------------------------------- flow policy
def flow_solve(
    grid: _Grid, jobs: Sequence[QueuedJob], fair: bool, held: tuple[str, ...] = (),
    reserve: bool = True, now: float | None = None,
) -> FlowPlacementReply:
    """One flow solve over ``grid``. ``fair``: per-user bounds, each user's weighted-DRF
    share of the grid's QoS capacity (:func:`fair_shares`, equal weights) but never
    below its largest pending job, so that a job larger than its user's share can still
    run when the user holds nothing else (else it would wait as long as anyone else has
    demand, reservation or not); otherwise no bounds."""
    holds = {u: h for u, h in sorted(grid.held.items()) if h > 0}
    pend: dict[str, float] = {}
    biggest: dict[str, float] = {}
    pjobs = [j.pending_job() for j in jobs]
    for j in pjobs:
        rate = math.fsum(s.rate for s in j.subtasks)
        pend[j.user] = pend.get(j.user, 0.0) + rate
        biggest[j.user] = max(biggest.get(j.user, 0.0), rate)
    names = list(holds) + [u for u in pend if u not in holds]
    if fair:
        capacity = math.fsum(n.budget for n in grid.req.nodes)
        shares = fair_shares(capacity, [UserShare(u, held=holds.get(u, 0.0)) for u in names],
                             pend)
        bounds = {u: max(shares[u], biggest.get(u, 0.0)) for u in names}
    else:
        bounds = dict.fromkeys(names, math.inf)
    users = tuple(UserShare(u, held=holds.get(u, 0.0), bound=bounds[u]) for u in names)
    return flow_place_pending(FlowPlacementRequest(
        grid.req.now if now is None else now, tuple(pjobs), grid.states(held=held), users,
        qos_share=grid.req.qos_share,
        reserve_after=RESERVE_AFTER if reserve and not held else None,
    ))


def explain(request: CycleRequest) -> Mapping[str, tuple[PendingReason, ...]]:
    """Why each job of ``request`` is not placed on the grid as it stands, one reason
    per constraint it fails (a flow solve without fair-share bounds, each job alone at
    its own arrival; jobs that would fit get no entry)."""
    grid = _Grid(request)
    out: dict[str, tuple[PendingReason, ...]] = {}
    for job in request.jobs:
        why = flow_solve(grid, [job], fair=False, now=job.arrival).pending.get(job.job_id)
        if why:
            out[job.job_id] = why
    return out


def never_placeable(
    job: QueuedJob, nodes: tuple[GridNode, ...], qos_share: float
) -> tuple[PendingReason, ...]:
    """Reasons ``job`` could not be placed even on an empty grid (labels no node
    carries, a subtask above every whole budget, too few eligible nodes)."""
    if not job.strict:
        return tuple(
            PendingReason(ReasonKind.LABELS,
                          f"subtask {i}: no node has the labels {', '.join(sorted(lab))}", i)
            for i, lab in enumerate(job.labels)
            if not any(lab <= n.labels for n in nodes)
        )
    if not all(math.isfinite(n.budget) for n in nodes):
        return ()
    if not any(job.labels):
        # An unlabelled gang whose k-th largest rate fits the k-th largest budget (the
        # flow's fit rule) has a whole placement on the empty grid, which the solve below
        # finds: no reason (fit.gang_misfit's argument; a test compares the two).
        budgets = sorted((n.budget - 0.0 for n in nodes), reverse=True)
        if gang_misfit(job.rates, fit_limits(budgets)) < 0:
            return ()
    empty = tuple(NodeState(n.name, n.speed, n.budget - 0.0, n.labels, 0.0) for n in nodes)
    reply = flow_place_pending(FlowPlacementRequest(
        0.0, (job.pending_job(),), empty, (UserShare(job.user, bound=math.inf),),
        qos_share=qos_share, reserve_after=None,
    ))
    return reply.pending.get(job.job_id, ())


def _assign(
    job: QueuedJob, room: Mapping[str, float], order: Sequence[str], grid: _Grid
) -> tuple[str, ...] | None:
    """``job``'s subtasks (largest rate first) on distinct up nodes of ``order`` with the
    labels and ``room[node]`` for them (:func:`first_fit`), or None."""
    ranked = [NodeLoad(n, grid.nodes[n].speed, 0.0, room[n], 0.0, grid.nodes[n].labels)
              for n in order if grid.nodes[n].up]
    got = first_fit(job.rates, job.labels, ranked, True)
    return None if isinstance(got, int) else got


def _reserved(nodes: tuple[str, ...], lead: str) -> PendingReason:
    return PendingReason(
        ReasonKind.RESERVED,
        f"{lead} {', '.join(nodes)}: placed there once the jobs running on them finish",
    )


@placement_policies.register("flow")
@dataclass(frozen=True, slots=True)
class FlowPlacement(GreedyPlacement):
    """Strict jobs: the min-cost flow of :mod:`global_manager.flow_placement` over the
    whole queue, with the drain reservation and EASY backfilling (``docs/decisions.md``).
    Other jobs, jobs split by parallelism at submission, and grids with an unbounded
    budget (no admission control) are placed greedily on the ``least_loaded`` ranking."""

    name: str = "flow"
    reserves: bool = True

    def rank(
        self, nodes: tuple[NodeLoad, ...], checked: bool, rng: random.Random
    ) -> list[NodeLoad]:
        return LeastLoaded().rank(nodes, checked, rng)

    def place(self, request: CycleRequest, rng: random.Random) -> CycleReply:
        grid = _Grid(request)
        if not grid.budgets_finite():
            return GreedyPlacement.place(self, request, rng)
        if request.queue:
            return self._cycle(grid)
        messages: dict[str, str] = {}
        reasons: dict[str, tuple[PendingReason, ...]] = {}
        for job in request.jobs:
            if not job.strict:
                got = self.place_one(job, grid, rng)
                if isinstance(got, str):
                    messages[job.job_id] = got
                else:
                    grid.commit(job, got)
                continue
            reply = flow_solve(grid, [job], fair=False)
            nodes = reply.placements.get(job.job_id)
            if nodes is None:
                why = reply.pending.get(job.job_id, ())
                reasons[job.job_id] = why
                messages[job.job_id] = "; ".join(r.message for r in why)
                continue
            grid.commit(job, Placement(nodes, job.works, job.weights, job.rates))
        return CycleReply(MappingProxyType(grid.placed), MappingProxyType(reasons),
                          MappingProxyType(messages), request.hold)

    def _cycle(self, grid: _Grid) -> CycleReply:
        """A flow cycle, with the drain reservation (docs/decisions.md): the job the
        solver picked to hold nodes (it waited longest, ``reserve_after``) gets a set of
        nodes, kept from every other strict job from then on, and is placed there as
        soon as they have room; the rest of the queue is solved on the other nodes."""
        req = grid.req
        queued = {j.job_id: j for j in req.jobs}
        reasons: dict[str, tuple[PendingReason, ...]] = {}
        hold = req.hold if req.hold is not None and req.hold.job_id in queued else None
        held: tuple[str, ...] = ()
        if hold is not None:
            head = queued[hold.job_id]
            held = hold.nodes
            room = {n: grid.nodes[n].budget - grid.committed[n] for n in held}
            nodes = _assign(head, room, held, grid)
            if nodes is not None:
                grid.commit(head, Placement(nodes, head.works, head.weights, head.rates))
                hold = None
                held = ()
            else:
                reasons[head.job_id] = (_reserved(held, "holds nodes"),)
        rest = [j for j in req.jobs if j.job_id not in grid.placed
                and (hold is None or j.job_id != hold.job_id)]
        if not rest:
            return self._reply(grid, reasons, hold)
        reply = flow_solve(grid, rest, fair=True, held=held)
        if not reply.placements and not any(grid.committed.values()):
            # Liveness: fair-share bounds never keep an idle grid idle.
            reply = flow_solve(grid, rest, fair=False, held=held)
        for job in rest:
            nodes = reply.placements.get(job.job_id)
            if nodes is None:
                why = reply.pending.get(job.job_id, ())
                if held and hold is not None:
                    why += (PendingReason(
                        ReasonKind.RESERVED,
                        f"nodes {', '.join(held)} are held for job {hold.job_id}"
                        " , which has waited longer",
                    ),)
                reasons[job.job_id] = why
                continue
            grid.commit(job, Placement(nodes, job.works, job.weights, job.rates))
        if held and hold is not None:
            self._backfill(grid, queued[hold.job_id], held)
        rid = reply.reserved_for
        if hold is None and rid is not None and rid in queued and rid not in grid.placed:
            job = queued[rid]
            # The nodes that drain first: least committed, then by name.
            order_n = sorted(grid.nodes, key=lambda n: (grid.committed[n], n))
            whole = {n: grid.nodes[n].budget for n in order_n}
            nodes = _assign(job, whole, tuple(order_n), grid)
            if nodes is not None:
                hold = NodeHold(rid, tuple(sorted(set(nodes))))
                reasons[rid] = (_reserved(hold.nodes, "holds nodes"),)
        return self._reply(grid, reasons, hold)

    @staticmethod
    def _reply(
        grid: _Grid, reasons: dict[str, tuple[PendingReason, ...]], hold: NodeHold | None
    ) -> CycleReply:
        for jid in grid.placed:
            reasons.pop(jid, None)
        messages = {j: "; ".join(r.message for r in why) for j, why in reasons.items()}
        return CycleReply(MappingProxyType(grid.placed), MappingProxyType(reasons),
                          MappingProxyType(messages), hold)

    def _backfill(self, grid: _Grid, head: QueuedJob, held: tuple[str, ...]) -> None:
        """EASY backfilling on the held nodes: a pending job whose expected run time
        (``max_i w_i / x_i``, s) ends by the held job's *shadow* time (when the jobs now
        running on the held nodes are expected to have left it room, :func:`_shadow`)
        may use the free budget anywhere, held nodes included, so the hold does not idle
        what it cannot use yet. Candidates are solved as one flow (fair shares, no new
        hold), in priority then submission order. A job that outruns its estimate delays
        the held one; under pace control a strict subtask runs at its expected rate."""
        now = grid.req.now
        shadow = _shadow(grid, head, held)
        if shadow is None or shadow <= now:
            return
        cands = [j for j in grid.req.jobs
                 if j.job_id != head.job_id and j.job_id not in grid.placed and j.strict
                 and now + j.run_time <= shadow + 1e-9]
        if not cands:
            return
        reply = flow_solve(grid, cands, fair=True, reserve=False)
        for job in cands:
            nodes = reply.placements.get(job.job_id)
            if nodes is not None:
                grid.commit(job, Placement(nodes, job.works, job.weights, job.rates))


def hold_shadow(request: CycleRequest, head: QueuedJob, held: tuple[str, ...]) -> float | None:
    """When the job ``head``, holding the nodes ``held``, is expected to fit there on the
    grid of ``request`` (s; :func:`_shadow`)."""
    return _shadow(_Grid(request), head, held)


def _shadow(grid: _Grid, head: QueuedJob, held: tuple[str, ...]) -> float | None:
    """When the held job is expected to fit on its held nodes (s): for each held node,
    the time its running strict subtasks (each expected to end at its start plus ``work
    / expected rate``) have released enough budget for the held job's subtask there; the
    latest of those. None if it cannot be worked out."""
    nodes = _assign(head, {n: grid.nodes[n].budget for n in held}, held, grid)
    if nodes is None:
        return None
    need = dict(zip(nodes, head.rates))
    ends: dict[str, list[tuple[float, float]]] = {n: [] for n in need}
    for st in grid.running:
        if st.node in ends:
            ends[st.node].append((st.end, st.rate))
    shadow = -math.inf
    for n, rate in need.items():
        committed = grid.committed[n]
        budget = grid.nodes[n].budget
        t_n = -math.inf
        for end, r in sorted(ends[n]):
            if fits(committed, budget - rate):  # the held subtask fits beside them
                break
            committed -= r
            t_n = end
        shadow = max(shadow, t_n)
    return shadow


# ------------------------------------------------------------------ backfill policy
@placement_policies.register("backfill")
@dataclass(frozen=True, slots=True)
class BackfillPlacement(GreedyPlacement):
    """Backfill with reservations (:mod:`global_manager.backfill`; ``docs/decisions.md``,
    "Placement that nobody waits for"). Each queue cycle: the ``depth`` jobs that
    waited longest, among those whose wait is at least ``reserve_after`` s and at least
    ``outlier`` times the queue's mean wait (or ``reserve_always`` s), are placed or get
    a reservation; the rest
    of the queue, in fair-share order (``fair``: the user holding the least strict rate
    first) or in queue order, is placed first-fit (on ``least_loaded``'s ranking) where
    it fits now without delaying a reservation. Submissions outside the queue and grids
    with an unbounded budget are placed as ``least_loaded`` places them."""

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

    def place(self, request: CycleRequest, rng: random.Random) -> CycleReply:
        grid = _Grid(request)
        if not request.queue or not grid.budgets_finite():
            return GreedyPlacement.place(self, request, rng)
        return _BackfillCycle(self, grid, rng).run()


class _BackfillCycle:
    """One cycle of :class:`BackfillPlacement` over ``grid`` (updated in place)."""

    def __init__(self, policy: BackfillPlacement, grid: _Grid, rng: random.Random) -> None:
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
        heads: list[QueuedJob] = []
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
                self.reasons[job.job_id] = (reserved_reason([n for n, _ in res.rates],
                                                            res.start),)
        head_ids = {j.job_id for j in heads}
        # Budgets only shrink within a cycle (placements and reservations), so a strict
        # job that fails _fits's necessary test on the free budgets as they stand fails
        # it for the rest of the cycle: leave it out (it would place nothing, hold back
        # nobody and get no reason; the fair order of the others does not change, since
        # only placements move it).
        _, frees, limits = self._view(())
        rest = [j for j in req.jobs if j.job_id not in head_ids
                and not (pol.screen and j.strict and _cannot_fit(j, frees, limits))]
        for job in self._fair_order(rest):
            if not self._try(job) and self.reservations and self._fits(job, False):
                self.reasons[job.job_id] = (blocked_reason(self.reservations[0].job_id),)
        placed = self.grid.placed
        reasons = {j: r for j, r in self.reasons.items() if j not in placed}
        messages = {j: "; ".join(x.message for x in r) for j, r in reasons.items()}
        return CycleReply(MappingProxyType(placed), MappingProxyType(reasons),
                          MappingProxyType(messages), None)

    def _fair_order(self, jobs: list[QueuedJob]) -> Iterable[QueuedJob]:
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

    def _run_time(self, job: QueuedJob) -> float:
        t = self._run_times.get(job.job_id)
        if t is None:
            t = self._run_times[job.job_id] = job.run_time
        return t

    def _fits(self, job: QueuedJob, reserved: bool) -> Placement | None:
        """``job`` where it fits now (without delaying a reservation if ``reserved``)."""
        if not job.strict:
            return None
        end = self.now + self._run_time(job)
        active = tuple(k for k, res in enumerate(self.reservations)
                       if end > res.start + 1e-9) if reserved else ()
        ranked, frees, limits = self._view(active)
        if _cannot_fit(job, frees, limits):
            return None
        got = first_fit(job.rates, job.labels, ranked, True)
        if isinstance(got, int):
            return None
        return Placement(got, job.works, job.weights, job.rates)

    def _try(self, job: QueuedJob) -> bool:
        """Place ``job`` now if it fits without delaying a reservation."""
        if not job.strict:
            got = self.policy.place_one(job, self.grid, self.rng)
            if isinstance(got, str):
                return False
            self.grid.commit(job, got)
            self._views.clear()
            return True
        p = self._fits(job, True)
        if p is None:
            return False
        self.grid.commit(job, p)
        self._views.clear()
        for node, rate, work in zip(p.nodes, p.rates, p.works):
            if rate > 0:
                bisect.insort(self.ends[node], (self.now + work / rate, rate))
        return True

    def _reserve(self, job: QueuedJob) -> Reservation | None:
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


def _cannot_fit(job: QueuedJob, frees: Sequence[float], limits: Sequence[float]) -> bool:
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


def fair_order(jobs: Sequence[QueuedJob], held: Mapping[str, float]) -> Iterator[QueuedJob]:
    """``jobs`` (in priority then submission order) in fair-share order: priority
    classes highest first; within one, the next job is the earliest remaining one of the
    user holding the least strict rate in ``held`` (Mcycles/s; read at each step, so a
    job placed meanwhile moves its user back), ties by user name."""
    by_prio: dict[int, dict[str, list[QueuedJob]]] = {}
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
