"""Backfill placement with reservations (``docs/decisions.md``, "Placement that nobody
waits for"): one placement cycle over the pending queue, in the manner of Slurm's
backfill scheduler with a reservation depth.

1. *Reservations.* The ``depth`` jobs that waited longest (priority first, then
   submission order) among those that waited at least ``reserve_after`` seconds are
   taken first: each is placed if it fits now, else it gets a reservation: the earliest
   time ``T`` (s) at which the running strict subtasks, expected to end at their start
   plus work over expected rate, and the earlier reservations leave room for all its
   subtasks on distinct nodes, and the nodes it would take then.
2. *Backfill.* The other jobs are placed in fair-share order (priority, then the user's
   dominant share: the strict rate its running jobs hold over the grid's QoS capacity,
   lowest first, updated as jobs are placed; then submission order), each where it fits
   now without delaying any reservation: on a node reserved from ``T`` a job may use
   the free budget if it is expected to end by ``T`` or if the budget left at ``T`` still
   covers the reservation. A job that does not fit does not hold back the ones behind it.

Node choice for one job: :func:`~global_manager.placer.first_fit` (largest rate first)
on the nodes ranked by the pace its subtasks would get there, highest first (``pace``
below), so that a gang's members go where they can all run fast and slow nodes are left
for gangs that need them.

Pure: :func:`backfill_cycle` reads and updates only the grid state it is given. Rates and
budgets in Mcycles/s, times in seconds of model time.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from global_manager.fit import fits, room_limit
from global_manager.flow_placement import PendingReason, ReasonKind

__all__ = [
    "Reservation",
    "availability_time",
    "blocked_reason",
    "committed_at",
    "reserved_reason",
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


def reserved_reason(nodes: Sequence[str], start: float) -> PendingReason:
    return PendingReason(
        ReasonKind.RESERVED,
        f"holds nodes {', '.join(nodes)} from {start:.6g} s: placed there once the jobs "
        "running on them finish",
    )


def blocked_reason(job_id: str) -> PendingReason:
    return PendingReason(
        ReasonKind.RESERVED,
        f"it would fit now but would delay job {job_id}, which holds a reservation",
    )
