"""Placement: one call, ``policy.schedule(request, rng) -> reply``, for every kind of
request, and the policies registered by name (``docs/model.md`` §3, "Admission"; §4,
"Min-cost max-flow scheduler").

A request (:class:`~global_manager.cycle.CycleRequest`) is the grid as the global
manager sees it and the pending jobs (:class:`~global_manager.pending_job.PendingJob`)
in queue order: a queue cycle over the pending queue, or one submitted job that is
rejected if it does not fit. The reply (:class:`~global_manager.cycle.CycleReply`)
gives a node per subtask for every job placed, in the order they were placed, reasons
for the others, and the node hold. Every job is placed all or nothing on distinct nodes
under one fit rule (:mod:`global_manager.fit`: a rate fits a room; a gang fits distinct
nodes by :func:`~global_manager.fit.first_fit` or the flow's matching).

The policies, each explained at the top of the module that implements it:

- ``backfill`` (the default; :mod:`global_manager.backfill`): reservations for the jobs
  that waited longest, the rest backfilled first-fit in fair-share order where it delays
  no reservation, in the manner of Slurm's backfill scheduler;
- ``least_loaded`` and ``random`` (:mod:`global_manager.greedy`): the jobs in queue
  order, each first-fit on the policy's node ranking, or skipped;
- ``flow`` (:mod:`global_manager.flow_policy`): the whole queue as one min-cost flow
  (:mod:`global_manager.flow_placement`) with fair-share bounds and a drain reservation,
  EASY-backfilled.

Pure apart from the draws a policy's ranking makes from the ``rng`` it is given.
"""

from __future__ import annotations

import random
from typing import Protocol

from global_manager.backfill import BackfillPlacement
from global_manager.cycle import CycleReply, CycleRequest, NodeLoad
from global_manager.flow_policy import FlowPlacement
from global_manager.greedy import LeastLoaded, RandomPlacement
from global_manager.registry import Registry

__all__ = ["PlacementPolicy", "placement_policies"]


class PlacementPolicy(Protocol):
    """A placement policy: one :meth:`schedule` for every kind of request."""

    @property
    def name(self) -> str: ...

    #: Whether :meth:`schedule` may hold nodes for a job that waited
    #: :data:`~global_manager.cycle.RESERVE_AFTER` (a queue cycle is then due when a
    #: job reaches it, even if nothing else changed).
    @property
    def reserves(self) -> bool: ...

    @property
    def pure_rank(self) -> bool: ...

    def rank(
        self, nodes: tuple[NodeLoad, ...], checked: bool, rng: random.Random
    ) -> list[NodeLoad]:
        """Nodes in the order they should be tried (``checked``: for a strict job)."""
        ...

    def schedule(self, request: CycleRequest, rng: random.Random) -> CycleReply:
        """Place what can be placed of ``request``, all or nothing per job."""
        ...


placement_policies: Registry[PlacementPolicy] = Registry("placement policy")
placement_policies.register("backfill")(BackfillPlacement)
placement_policies.register("flow")(FlowPlacement)
placement_policies.register("least_loaded")(LeastLoaded)
placement_policies.register("random")(RandomPlacement)
