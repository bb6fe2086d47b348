"""Greedy placement: the jobs in queue order, each placed whole on a node ranking by
:func:`~global_manager.fit.first_fit` (largest rate first, each subtask on the first
ranked node that is unused, carries its labels and has room for it), or skipped: a job
that does not fit does not hold back the ones behind it.

Two rankings are registered (:mod:`global_manager.placer`): ``least_loaded`` (most free
budget first for strict jobs, lowest load per MHz for the others) and ``random`` (an
order drawn from the run's seeded RNG). The other policies fall back on this placement
for what they do not place themselves (jobs that are not strict, grids without
admission control).

A job given by ``parallelism`` (:class:`~global_manager.pending_job.SplitShape`) is split
on the ``N`` nodes ranked first: node ``j`` gets weight ``r_j = R * f_j / sum f``, ``f_j``
its free budget (strict jobs) or its CPU rate (others), and work ``w_j = W * r_j / R``, so
that at their expected rates all subtasks finish together.

Rates and budgets in Mcycles/s.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

from global_manager.cycle import (
    CycleReply,
    CycleRequest,
    GridState,
    NodeLoad,
    Placement,
)
from global_manager.fit import first_fit, room_limit
from global_manager.pending_job import PendingJob, SplitShape, split_on

__all__ = ["GreedyPlacement", "LeastLoaded", "RandomPlacement"]


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

    def schedule(self, request: CycleRequest, rng: random.Random) -> CycleReply:
        grid = GridState(request)
        messages: dict[str, str] = {}
        for job in request.jobs:
            got = self.place_one(job, grid, rng)
            if isinstance(got, str):
                messages[job.job_id] = got
            else:
                grid.commit(job, got)
        return CycleReply(MappingProxyType(grid.placed), messages=MappingProxyType(messages),
                          hold=request.hold)

    def place_one(self, job: PendingJob, grid: GridState, rng: random.Random) -> Placement | str:
        """``job`` on the grid as it stands: its placement, or why not."""
        checked = job.strict
        loads = grid.loads()
        if job.split is not None:
            return self._split(job.split, loads, checked, rng)
        rates = job.rates
        if any(job.labels):
            got = first_fit(rates, job.labels, grid.ranked(self, checked, rng), checked)
            if isinstance(got, int):
                return (f"no free node with labels {', '.join(sorted(job.labels[got])) or '(none)'}"
                        f" can take subtask {got} (expected rate {rates[got]:.6g} Mcycles/s)")
            return Placement(got, job.works, job.weights, rates)
        n = len(rates)
        if n == 0:
            return "job has no subtasks"
        if n > len(loads):
            return f"{n} subtasks but only {len(loads)} nodes"
        if checked:
            # Whether it fits does not depend on the ranking: a gang that does not is
            # told so without walking the nodes. A ranking that draws from the RNG
            # still draws, as a walk would (the run's draws stay the same).
            miss = grid.misfit(rates)
            if miss >= 0:
                if not self.pure_rank:
                    self.rank(loads, checked, rng)
                return _no_room(rates, miss)
        got = first_fit(rates, (), grid.ranked(self, checked, rng), checked)
        if isinstance(got, int):
            return _no_room(rates, got)
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


def _no_room(rates: Sequence[float], index: int) -> str:
    """Why a gang without labels was not placed: subtask ``index`` found no node."""
    return (f"no free node can take subtask {index} "
            f"(expected rate {rates[index]:.6g} Mcycles/s)")


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
