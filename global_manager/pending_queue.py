"""The pending queue (``queue: wait``): strict jobs waiting for a placement cycle, in
priority then submission order, with their ``max_wait`` expiry and whether anything
changed since the last cycle. No placement and no clock: ``now`` is passed in (s)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from global_manager.cycle import NodeHold
from global_manager.pending_job import PendingReason
from workloads.model import JobSpec


@dataclass(slots=True)
class PendingRecord:
    """A strict job's entry in the pending queue: its spec as submitted, ``arrival``
    (when it joined the queue, s), its place in submission order (``seq``) and
    ``reasons`` from the last cycle (``None``: worked out when asked). The queue's own
    bookkeeping: placement reads the job as the core's
    :class:`~global_manager.pending_job.PendingJob` of it."""

    spec: JobSpec
    job_id: str
    arrival: float
    seq: int
    reasons: tuple[PendingReason, ...] | None = None


class PendingQueue:
    """Pending jobs by id, the placement's node hold, and the cycle bookkeeping."""

    def __init__(self) -> None:
        self.records: dict[str, PendingRecord] = {}
        self.seq = 0
        #: Something changed that may let a pending job be placed (a submission, a
        #: release, a placement) since the last cycle; unchanged, a cycle is skipped.
        self.changed = False
        #: Nodes held for a waiting job (flow's drain reservation).
        self.hold: NodeHold | None = None
        self.last_cycle = -math.inf
        #: Placement cycles run (not skipped).
        self.cycles_run = 0

    def add(self, spec: JobSpec, job_id: str, now: float) -> PendingRecord:
        self.seq += 1
        rec = PendingRecord(spec, job_id, now, self.seq)
        self.records[job_id] = rec
        self.changed = True
        return rec

    def ordered(self) -> list[PendingRecord]:
        """The pending jobs in priority, then submission order."""
        return sorted(self.records.values(), key=lambda r: (-r.spec.priority, r.arrival, r.seq))

    def expiring(self, now: float) -> list[PendingRecord]:
        """The jobs whose ``max_wait`` ran out by ``now`` (s), taken out of the queue."""
        out = []
        for rec in list(self.records.values()):
            mw = rec.spec.max_wait
            if mw is not None and now - rec.arrival >= mw:
                del self.records[rec.job_id]
                out.append(rec)
        return out

    def next_expiry(self) -> float | None:
        """The earliest time (s) a pending job's ``max_wait`` runs out, if any."""
        times = [r.arrival + r.spec.max_wait for r in self.records.values()
                 if r.spec.max_wait is not None]
        return min(times) if times else None

    def reserve_due(self, now: float, reserve_after: float) -> bool:
        """Whether a job reached ``reserve_after`` s of waiting since the last cycle
        while no nodes are held (a hold may then be taken for it)."""
        return self.hold is None and any(
            self.last_cycle < r.arrival + reserve_after <= now for r in self.records.values()
        )
