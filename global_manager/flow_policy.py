"""The ``flow`` placement policy: the whole pending queue as one min-cost flow
(:mod:`global_manager.flow_placement`, ``docs/model.md`` §4) with fair-share bounds, a
drain reservation for the job that waited longest, and EASY backfilling on the nodes it
holds.

One queue cycle (:meth:`FlowPlacement._cycle`):

1. *The held job.* If nodes are held for a job (:class:`~global_manager.cycle.NodeHold`,
   from an earlier cycle), it is placed there as soon as their free budgets take it
   (:func:`~global_manager.fit.first_fit` on the held nodes); until then nobody else may
   use them.
2. *The flow.* The rest of the queue is solved as one flow on the other nodes, each
   user bounded by its weighted-DRF share of the grid's QoS capacity, never below its
   largest pending job (:func:`flow_solve`). If that places nothing on an idle grid, it
   is solved again without bounds: fair shares never keep an idle grid idle.
3. *EASY backfill.* While a job holds nodes, a pending job expected to end (its start
   plus ``max_i w_i / x_i``) by the held job's *shadow* time, when the jobs now running
   on the held nodes are expected to have left it room (:func:`hold_shadow`), may use the
   free budget anywhere, held nodes included.
4. *A new hold.* When no job holds nodes and the solver picked one to reserve for (it
   waited at least :data:`~global_manager.cycle.RESERVE_AFTER` s and cannot fit now), it
   gets the nodes that drain first (least committed, then by name) that could take it.

Submissions outside the queue are solved alone, without fair shares. A job given by
parallelism is solved split evenly (the flow needs its rates before it picks nodes).
Jobs that are not strict and grids with an unbounded budget (no admission control) are
placed as ``least_loaded`` places them (:mod:`global_manager.greedy`).

The reasons every policy gives a pending job come from here too: :func:`explain` (why a
job does not fit the grid as it stands) and :func:`never_placeable` (why it could never
fit). Rates and budgets in Mcycles/s, times in seconds of model time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from global_manager.cycle import (
    END_SLACK,
    RESERVE_AFTER,
    CycleReply,
    CycleRequest,
    GridNode,
    GridState,
    NodeHold,
    NodeLoad,
    Placement,
)
from global_manager.fit import first_fit, fit_limits, fits, gang_misfit
from global_manager.flow_placement import (
    FlowPlacementReply,
    FlowPlacementRequest,
    NodeState,
    UserShare,
    fair_shares,
    place_pending,
)
from global_manager.greedy import GreedyPlacement, LeastLoaded
from global_manager.pending_job import PendingJob, PendingReason, ReasonKind

__all__ = ["FlowPlacement", "explain", "flow_solve", "hold_shadow", "never_placeable"]


def _node_states(grid: GridState, held: tuple[str, ...] = ()) -> tuple[NodeState, ...]:
    """The up nodes for the flow solver; ``held`` ones have no room for anybody."""
    out = []
    for n in grid.req.nodes:
        if not n.up:
            continue
        c = grid.committed[n.name]
        free = 0.0 if n.name in held else n.budget - c
        out.append(NodeState(n.name, n.speed, free, n.labels, c))
    return tuple(out)


def flow_solve(
    grid: GridState, jobs: Sequence[PendingJob], fair: bool, held: tuple[str, ...] = (),
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
    for j in jobs:
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
    return place_pending(FlowPlacementRequest(
        grid.req.now if now is None else now, tuple(jobs), _node_states(grid, held), users,
        qos_share=grid.req.qos_share,
        reserve_after=RESERVE_AFTER if reserve and not held else None,
    ))


def explain(request: CycleRequest) -> Mapping[str, tuple[PendingReason, ...]]:
    """Why each job of ``request`` is not placed on the grid as it stands, one reason
    per constraint it fails (a flow solve without fair-share bounds, each job alone at
    its own arrival; jobs that would fit get no entry)."""
    grid = GridState(request)
    out: dict[str, tuple[PendingReason, ...]] = {}
    for job in request.jobs:
        why = flow_solve(grid, [job], fair=False, now=job.arrival).pending.get(job.job_id)
        if why:
            out[job.job_id] = why
    return out


def never_placeable(
    job: PendingJob, nodes: tuple[GridNode, ...], qos_share: float
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
        # fit rule) has a whole placement on the empty grid, which the solve below
        # finds: no reason (fit.gang_misfit's argument; a test compares the two).
        budgets = sorted((n.budget - 0.0 for n in nodes), reverse=True)
        if gang_misfit(job.rates, fit_limits(budgets)) < 0:
            return ()
    empty = tuple(NodeState(n.name, n.speed, n.budget - 0.0, n.labels, 0.0) for n in nodes)
    reply = place_pending(FlowPlacementRequest(
        0.0, (job,), empty, (UserShare(job.user, bound=math.inf),),
        qos_share=qos_share, reserve_after=None,
    ))
    return reply.pending.get(job.job_id, ())


def _assign(
    job: PendingJob, room: Mapping[str, float], order: Sequence[str], grid: GridState
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


@dataclass(frozen=True, slots=True)
class FlowPlacement(GreedyPlacement):
    """The ``flow`` policy (the module docstring tells the cycle): strict jobs by the
    min-cost flow of :mod:`global_manager.flow_placement`, the others, and every job on a
    grid with an unbounded budget, greedily on the ``least_loaded`` ranking."""

    name: str = "flow"
    reserves: bool = True

    def rank(
        self, nodes: tuple[NodeLoad, ...], checked: bool, rng: random.Random
    ) -> list[NodeLoad]:
        return LeastLoaded().rank(nodes, checked, rng)

    def schedule(self, request: CycleRequest, rng: random.Random) -> CycleReply:
        grid = GridState(request)
        if not grid.budgets_finite():
            return GreedyPlacement.schedule(self, request, rng)
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

    def _cycle(self, grid: GridState) -> CycleReply:
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
        grid: GridState, reasons: dict[str, tuple[PendingReason, ...]], hold: NodeHold | None
    ) -> CycleReply:
        for jid in grid.placed:
            reasons.pop(jid, None)
        messages = {j: "; ".join(r.message for r in why) for j, why in reasons.items()}
        return CycleReply(MappingProxyType(grid.placed), MappingProxyType(reasons),
                          MappingProxyType(messages), hold)

    def _backfill(self, grid: GridState, head: PendingJob, held: tuple[str, ...]) -> None:
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
                 and now + j.run_time <= shadow + END_SLACK]
        if not cands:
            return
        reply = flow_solve(grid, cands, fair=True, reserve=False)
        for job in cands:
            nodes = reply.placements.get(job.job_id)
            if nodes is not None:
                grid.commit(job, Placement(nodes, job.works, job.weights, job.rates))


def hold_shadow(request: CycleRequest, head: PendingJob, held: tuple[str, ...]) -> float | None:
    """When the job ``head``, holding the nodes ``held``, is expected to fit there on the
    grid of ``request`` (s; :func:`_shadow`)."""
    return _shadow(GridState(request), head, held)


def _shadow(grid: GridState, head: PendingJob, held: tuple[str, ...]) -> float | None:
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
