"""Coupled members in the simulator: the exchanges of one coupled job within each cycle.

The members of a coupled job (:attr:`workloads.model.JobSpec.coupling`) exchange data
every ``delta`` seconds of their *nominal time*: a member's nominal time is the work it
has done over its expected rate ``x_i`` (Mcycles/s), so at its expected rate it moves
one second a second, and its last nominal second is its work over ``x_i``. Exchange
``m`` sits at nominal time ``m * delta``; the members whose work reaches beyond it take
part in it, and none of them passes it before all of them have reached it. A member
that has reached an exchange and waits for a partner does no work: it either spins
(uses its grant, :attr:`WaitMode.SPIN`) or blocks (:attr:`WaitMode.BLOCK`, the driver
then lowers its demand so its share goes to other work on its node).

:meth:`CoupledJob.advance` plays one cycle: every member's grant (Mcycles) is spent at a
steady rate over the cycle, so member ``i`` moves ``g_i / (x_i q)`` nominal seconds per
second until its next exchange (or its end); the exchange opens when the last of its
participants reaches it, and the members go on from there within the same cycle. What
each member really did (its *useful* work, never more than its grant) is what its
clock and done work advance by; the rest of its grant is the cycle's waiting.

No I/O, no clock: the simulator (:mod:`global_manager.simulator`) calls it with the
grants of each cycle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from local_manager.scheduler import WORK_EPSILON
from workloads.model import WaitMode

#: Relative tolerance (of the nominal time) within which a member counts as having
#: reached an exchange: absorbs the float rounding of ``done / x``.
_REACHED = 1e-9

#: Work left (Mcycles) below which a member is at its end: the scheduler's own
#: ``WORK_EPSILON``, so both agree on when a member finishes.
_DONE = WORK_EPSILON


@dataclass(frozen=True, slots=True)
class Member:
    """One member of a coupled job: its key, node, work (Mcycles) and expected rate
    ``x_i`` (Mcycles/s)."""

    job_id: str
    index: int
    node: str
    work: float
    rate: float

    @property
    def key(self) -> tuple[str, int]:
        return (self.job_id, self.index)

    @property
    def duration(self) -> float:
        """Its nominal time at the end, s."""
        return self.work / self.rate


class CoupledJob:
    """The exchange state of one coupled job (mutable: the simulator advances it each
    cycle). ``done`` holds each member's useful work (Mcycles), ``opened`` how many
    exchanges all their participants have passed."""

    __slots__ = ("members", "delta", "wait", "done", "opened")

    def __init__(self, members: Sequence[Member], delta: float, wait: WaitMode) -> None:
        if not math.isfinite(delta) or delta <= 0:
            raise ValueError(f"coupling: must be a finite number of seconds > 0, got {delta!r}")
        if not members:
            raise ValueError("a coupled job needs at least one member")
        for m in members:
            if not (math.isfinite(m.work) and m.work > 0 and math.isfinite(m.rate)
                    and m.rate > 0):
                raise ValueError(f"member {m.key}: work and rate must be finite and > 0")
        self.members = tuple(members)
        self.delta = float(delta)
        self.wait = wait
        self.done = [0.0] * len(self.members)
        self.opened = 0

    def nominal(self) -> list[float]:
        """Each member's nominal time now, s."""
        return [d / m.rate for d, m in zip(self.done, self.members)]

    def finished(self) -> bool:
        return all(d >= m.work for d, m in zip(self.done, self.members))

    def useful(self, grants: Sequence[float], cycle: float) -> list[float]:
        """What each member would do in a cycle of ``cycle`` s with ``grants`` (Mcycles,
        in member order), without changing the state."""
        return self._play(grants, cycle)[0]

    def advance(self, grants: Sequence[float], cycle: float) -> list[float]:
        """Play a cycle of ``cycle`` s with ``grants`` (Mcycles, in member order) and
        return each member's useful work (Mcycles, ``<= `` its grant)."""
        work, opened = self._play(grants, cycle)
        for i, w in enumerate(work):
            m = self.members[i]
            left = m.work - self.done[i]
            self.done[i] = m.work if left - w <= _DONE else self.done[i] + w
        self.opened = opened
        return work

    def _play(self, grants: Sequence[float], cycle: float) -> tuple[list[float], int]:
        if len(grants) != len(self.members):
            raise ValueError(f"{len(grants)} grants for {len(self.members)} members")
        members = self.members
        rates = [m.rate for m in members]
        ends = [m.duration for m in members]
        start = self.nominal()
        tau = list(start)
        # Nominal seconds per real second while a member runs.
        speed = [max(0.0, g) / (x * cycle) for g, x in zip(grants, rates)]
        opened = self.opened
        t = 0.0
        while t < cycle:
            barrier = (opened + 1) * self.delta
            tol = _REACHED * max(barrier, 1.0)
            parts = [i for i, end in enumerate(ends) if end > barrier + tol]
            if not parts:
                # No exchange left for anyone: every member runs to its end.
                tau = [min(e, p + s * (cycle - t)) for e, p, s in zip(ends, tau, speed)]
                break
            reach = 0.0
            for i in parts:
                gap = barrier - tau[i]
                if gap > tol:
                    reach = max(reach, gap / speed[i] if speed[i] > 0 else math.inf)
            step = min(reach, cycle - t)
            targets = [barrier if e > barrier + tol else e for e in ends]
            tau = [min(g, p + s * step) if p < g else p
                   for g, p, s in zip(targets, tau, speed)]
            if reach > cycle - t:
                break
            for i in parts:
                tau[i] = barrier
            opened += 1
            t += reach
        work = []
        for i, m in enumerate(members):
            w = (tau[i] - start[i]) * m.rate
            g = max(0.0, grants[i])
            w = min(g, max(0.0, w))
            if tau[i] >= ends[i]:
                # At its end: the work left exactly (the rounding of tau * x aside).
                w = min(g, m.work - self.done[i]) if g >= m.work - self.done[i] - 1e-6 else w
            work.append(w)
        return work, opened
