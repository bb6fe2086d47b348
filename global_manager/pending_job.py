"""A job waiting to be placed, as every placement policy, the flow solver and the start
estimates read it (:class:`PendingJob`), and why it is still waiting
(:class:`PendingReason`).

A pending job is placed whole: each subtask on a distinct node that carries its labels
and has room for its expected rate (``docs/model.md`` §3, "Expected rate"): subtask ``i``
of job ``t`` gets ``x_i = r_i * u_t`` Mcycles/s, ``r_i`` its relative weight and ``u_t``
the grid's ``rate_per_weight`` or, for a job with a target duration ``D_t``,
``max_i(w_i / r_i) / D_t`` (:func:`expected_rates`).

Rates in Mcycles/s, works in Mcycles, times in seconds of model time.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "PendingJob",
    "PendingReason",
    "PendingSubtask",
    "ReasonKind",
    "SplitShape",
    "expected_rates",
    "split_on",
]


@dataclass(frozen=True, slots=True)
class PendingSubtask:
    """``rate``: expected rate ``x_i`` (Mcycles/s, > 0); ``labels``: labels the node
    must carry (all of them)."""

    rate: float
    labels: frozenset[str] = frozenset()


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
class PendingJob:
    """A job to place whole: per subtask its work (Mcycles), relative weight, expected
    rate (Mcycles/s) and labels (a ``parallelism`` job split evenly; ``split`` tells
    greedy placement how to split it on the nodes it picks instead). ``strict``: its
    rates count against the budgets. ``priority``: higher first. ``arrival``: when it
    joined the queue (s)."""

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
    #: The subtasks' rates and labels, as the flow solver and the estimates read them.
    subtasks: tuple[PendingSubtask, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Read by every placement cycle for every pending job: computed once.
        object.__setattr__(self, "run_time", max(
            (w / x for w, x in zip(self.works, self.rates) if x > 0), default=math.inf))
        object.__setattr__(self, "subtasks", tuple(
            PendingSubtask(r, lab) for r, lab in zip(self.rates, self.labels)))


class ReasonKind(str, enum.Enum):
    LABELS = "labels"  # a label constraint no node meets
    BUDGET = "budget"  # no node with enough free budget for a subtask
    NODES = "nodes"  # fewer eligible nodes than subtasks
    FAIR_SHARE = "fair_share"  # the user is over its fair share
    RESERVED = "reserved"  # it would fit but for nodes held for another job
    GANG = "gang"  # every part fits alone but not all together this cycle
    ROUNDS = "rounds"  # not reached within max_rounds solves


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Why a job is still pending. ``subtask``: the subtask concerned (``None``: the
    job); ``short``: how much rate is missing (Mcycles/s) where that applies."""

    kind: ReasonKind
    message: str
    subtask: int | None = None
    short: float | None = None


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
