"""One placement call: what a placement policy is given (:class:`CycleRequest`: the grid
as the global manager sees it and the pending jobs, in queue order), what it answers
(:class:`CycleReply`: a node per subtask for every job placed, reasons for the others,
the node hold), and the grid as the call updates it while it places jobs
(:class:`GridState`). The policies' interface is :mod:`global_manager.placer`'s.

A call is either a queue cycle over the pending queue or the placement of one submitted
job, which is rejected if it does not fit (``CycleRequest.queue``). Rates, budgets and
loads in Mcycles/s, speeds in MHz, times in seconds of model time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from global_manager.fit import fit_limits, gang_misfit
from global_manager.pending_job import PendingJob, PendingReason

__all__ = [
    "END_SLACK",
    "RESERVE_AFTER",
    "CycleReply",
    "CycleRequest",
    "GridNode",
    "GridState",
    "NodeHold",
    "NodeLoad",
    "Placement",
    "Ranker",
    "RunningSubtask",
]

#: Seconds a job waits before a policy may hold nodes or take a reservation for it.
RESERVE_AFTER = 600.0

#: Seconds by which a job expected to end after a time still counts as ended by it
#: (float sums of start and run times): "gone before the held or reserved job needs
#: its nodes", in backfill, the flow policy's backfill and the start estimates.
END_SLACK = 1e-9


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """A node as a ranking sees it. ``committed``: strict expected rates it carries;
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
    jobs: tuple[PendingJob, ...]
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


class Ranker(Protocol):
    """What orders the nodes for one job: :meth:`rank`, and ``pure_rank``, whether that
    ranking is a function of the loads alone (no draw from the RNG), so that one ranking
    serves every job until the grid changes."""

    @property
    def pure_rank(self) -> bool: ...

    def rank(
        self, nodes: tuple[NodeLoad, ...], checked: bool, rng: random.Random
    ) -> list[NodeLoad]:
        """Nodes in the order they should be tried (``checked``: for a strict job)."""
        ...


class GridState:
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
        #: The up nodes' rooms as :func:`~global_manager.fit.gang_misfit` reads them, as
        #: they stand (dropped at every commit).
        self._limits: list[float] | None = None

    def loads(self) -> tuple[NodeLoad, ...]:
        if self._loads is None:
            self._loads = tuple(
                NodeLoad(n.name, n.speed, self.committed[n.name], n.budget,
                         self.load[n.name], n.labels)
                for n in self.req.nodes if n.up
            )
        return self._loads

    def ranked(self, ranker: Ranker, checked: bool, rng: random.Random) -> list[NodeLoad]:
        """``ranker``'s ranking of :meth:`loads` (kept while nothing is committed when
        the ranking draws nothing from ``rng``)."""
        if not ranker.pure_rank:
            return ranker.rank(self.loads(), checked, rng)
        got = self._ranked.get(checked)
        if got is None:
            got = self._ranked[checked] = ranker.rank(self.loads(), checked, rng)
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

    def commit(self, job: PendingJob, p: Placement) -> None:
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
