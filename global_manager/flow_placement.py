"""Flow placement: one placement cycle for the pending queue as a min-cost flow
(``docs/model.md`` §4, "Min-cost max-flow scheduler").

A pure function, :func:`place_pending`, from a frozen :class:`FlowPlacementRequest` (the
pending jobs, the nodes' free admission budgets, the users' shares) to a frozen
:class:`FlowPlacementReply` (a node per subtask for every job placed; for every job left
pending, the reasons, one per constraint it fails). No I/O, no clock: ``now`` is given.

Units: rates and budgets in Mcycles/s, speeds in MHz, times in seconds of model time.

The network of one round (a :class:`~global_manager.flow.FlowGraph`)::

    class (j, c) --P(c, n)--> [gate (j, n) --1-->] node n --k_n--> sink
        \\--0--> U_j --U_j cost--> user u --(lower bound)--> sink

- A *class* gathers a job's subtasks with the same expected rate and the same labels
  (they are interchangeable); its supply is how many there are.
- Class to node: an arc only where the node carries every label the subtasks ask for and
  has room for one of them (``rate <= free``); capacity 1, so a class puts at most one
  subtask on a node. A job with several classes goes through one gate per (job, node)
  of capacity 1: a job's subtasks land on distinct nodes.
- Node to sink: ``k_n``, the most subtasks the node's free budget can take (at most one
  per job, smallest rates first). Rates are not counts, so the flow can over-fill a
  node's budget; every placement is checked against the exact budget afterwards (below).
- Unscheduled arc per job, ``class -> U_j -> user u -> sink``: a subtask that is not
  placed pays ``U_j``. Users with a fair-share bound get two arcs to the sink: one of
  capacity ``pending_u - K_u`` and cost ``-(max U + 1)`` (the flow must use it first: a
  lower bound, as in the patent's ``[N_j - A_j, N_j - A_j]``), so at most ``K_u`` of the
  user's subtasks are placed, ``K_u`` being how many of its smallest pending rates fit in
  what its fair share leaves.

Costs (integers):

- Placement preference ``P(c, n)``, the mean of a pace term and a load term, in 0..500.
  Pace: ``round(100 * min(|ln rho|, 5))`` with the predicted pace ``rho = min(qos_share *
  speed / (committed + rate), speed / rate)``, the rate the node's QoS queue would give
  the subtask over its expected rate (its virtual clock runs at ``rho`` times real time).
  A job's phase difference grows with the spread of its subtasks' paces, and every pace at
  1 means none, so the term is 0 on a node the subtask fills exactly and grows on nodes
  where it would run ahead (a light subtask alone on a fast node) or behind (an
  overbooked node). Load: ``500 * min(1, (committed + rate) / (qos_share * speed))``, so
  that work spreads over the nodes instead of packing the ones it fits exactly (which
  left later gangs too few nodes with room).
- Unscheduled ``U_j = 1000 + PRIORITY_STEP * rank(priority_j) + min(wait_j, WAIT_CAP)``
  with ``wait_j`` in whole seconds and ``rank`` the job's priority's rank among the
  distinct priorities in the request (0 for the lowest). ``PRIORITY_STEP`` exceeds any
  waiting and preference term, so priority is strict (the patent's construction); within
  a priority, the longer a job waited the more the flow gains by placing it.
- Labels: no arc.

Gangs, verification and rounds. After each solve, a job whose every subtask got a node
is a candidate; candidates are taken in the order of ``U_j`` (then request order) and a
candidate is placed only if its rates fit the nodes' exact remaining budgets and its user
stays within its fair share; a candidate that does not fit waits for the next round. A
job that got some subtasks placed but not all is withdrawn and left out of the rest of
the cycle. The round is re-solved (budgets and bounds updated) while something was
withdrawn or deferred, at most ``max_rounds`` times.

Reservation (so that a large gang is not starved by a stream of small jobs): jobs that
cannot fit on the current free budgets stay out of the flow, except the one with the
highest ``U_j`` among those that waited at least ``reserve_after`` seconds. It enters the
flow, takes what it can, and what it takes is held for it (withheld from the rest of the
cycle); as running jobs finish it wins their nodes in later cycles until it fits whole.
At most one reservation per cycle.

Fair shares: per user, weighted DRF (fluid, one resource: QoS rate) over the grid's QoS
capacity (the sum of the nodes' budgets, free plus committed), each user demanding what
it holds plus what it has pending (:func:`fair_shares`). A user's ``bound`` in the
request overrides it (e.g. DMFA-SRQ levels kept by the caller).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from fairness.drf import drf
from global_manager.fit import fits, max_matching
from global_manager.flow import FlowGraph
from global_manager.pending_job import PendingJob, PendingReason, ReasonKind

__all__ = [
    "FlowPlacementReply",
    "FlowPlacementRequest",
    "NodeState",
    "UserShare",
    "fair_shares",
    "place_pending",
]

PACE_SCALE = 100  # cost units per unit of |ln pace|
PACE_CAP = 5.0  # |ln pace| beyond this costs the same
BASE_UNSCHEDULED = 1000  # above any placement preference (at most 500)
WAIT_CAP = 10**6  # seconds of waiting that still raise the cost (about 11.6 days)
PRIORITY_STEP = WAIT_CAP + BASE_UNSCHEDULED + 1


# --------------------------------------------------------------------------- records
@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as the cycle sees it. ``free``: admission budget left (Mcycles/s);
    ``committed``: strict expected rate it already carries (Mcycles/s); ``speed`` in MHz."""

    name: str
    speed: float
    free: float
    labels: frozenset[str] = frozenset()
    committed: float = 0.0


@dataclass(frozen=True, slots=True)
class UserShare:
    """``held``: expected rate the user's running jobs hold (Mcycles/s); ``weight`` for
    weighted DRF (> 0); ``bound``: a fair share in Mcycles/s that overrides DRF."""

    user: str
    weight: float = 1.0
    held: float = 0.0
    bound: float | None = None


@dataclass(frozen=True, slots=True)
class FlowPlacementRequest:
    """One placement cycle at time ``now`` (s). ``qos_share``: the QoS queue's CPU
    fraction (pace prediction); ``max_rounds``: solves per cycle; ``reserve_after``:
    seconds a job must have waited before it may hold nodes (``None``: never)."""

    now: float
    jobs: tuple[PendingJob, ...]
    nodes: tuple[NodeState, ...]
    users: tuple[UserShare, ...] = ()
    qos_share: float = 0.5
    max_rounds: int = 8
    reserve_after: float | None = 600.0


@dataclass(frozen=True, slots=True)
class FlowPlacementReply:
    """``placements[job]``: the node of each subtask, in subtask order; ``pending[job]``:
    the reasons for every job not placed; ``fair_shares[user]``: bound (Mcycles/s);
    ``reserved``: rate held per node for ``reserved_for``; ``rounds``: solves made."""

    placements: Mapping[str, tuple[str, ...]]
    pending: Mapping[str, tuple[PendingReason, ...]]
    fair_shares: Mapping[str, float] = field(default_factory=dict)
    reserved: Mapping[str, float] = field(default_factory=dict)
    reserved_for: str | None = None
    rounds: int = 0


# --------------------------------------------------------------------------- fairness
#: A capacity (Mcycles/s) at or below this is none: a billionth of a Mcycle per second.
_NO_CAPACITY = 1e-9


def fair_shares(
    capacity: float, users: Sequence[UserShare], pending: Mapping[str, float]
) -> dict[str, float]:
    """Each user's fair share of ``capacity`` (Mcycles/s): weighted DRF on one resource
    (fluid), user ``u`` demanding ``held + pending[u]``; a user's ``bound`` overrides."""
    names = [u.user for u in users]
    out = {u.user: float(u.bound) for u in users if u.bound is not None}
    free = [u for u in users if u.bound is None]
    if not free:
        return out
    if capacity <= _NO_CAPACITY:
        # Nothing to share; a subnormal capacity would also overflow DRF's shares
        # (d / (C w) with C w rounded to 0).
        return out | {u.user: 0.0 for u in free}
    demand = [max(0.0, u.held) + pending.get(u.user, 0.0) for u in free]
    r = drf(
        (capacity,),
        [(1.0,)] * len(free),
        weights=[u.weight for u in free],
        max_tasks=demand,
        divisible=True,
    )
    out |= {u.user: float(x) for u, x in zip(free, r.tasks)}
    return {n: out[n] for n in names}


# --------------------------------------------------------------------------- helpers
def _preference_cost(rate: float, node: NodeState, committed: float, qos_share: float) -> int:
    """``P(c, n)``: the mean of the pace preference (``100 * min(|ln rho|, 5)``) and a load
    term (``500 *`` the fraction of the node's QoS share committed with the subtask), both
    in 0..500. The load term spreads work: with pace alone, gangs packed the nodes they
    fitted exactly and later gangs found too few nodes with room (mean waits 1.6-2.8x
    greedy's on the placement experiment, for a phase difference already under 2 s with
    pace control; docs/decisions.md)."""
    qos = qos_share * node.speed
    pace = min(qos / (committed + rate), node.speed / rate) if qos > 0 else 0.0
    dev = PACE_CAP if pace <= 0 else min(abs(math.log(pace)), PACE_CAP)
    load = min(1.0, (committed + rate) / qos) if qos > 0 else 1.0
    return (round(PACE_SCALE * dev) + round(PACE_SCALE * PACE_CAP * load)) // 2


def _count_fitting(rates: Sequence[float], room: float) -> int:
    """How many of ``rates`` fit in ``room``, smallest first."""
    n, total = 0, 0.0
    for r in sorted(rates):
        if not fits(total + r, room):
            break
        total += r
        n += 1
    return n


@dataclass(slots=True, eq=False)  # compared by identity
class _FlowJob:
    """The solver's working state of one pending job: its index in the request, its
    unscheduled cost ``U_j``, its wait (s) and its classes."""

    spec: PendingJob
    index: int
    cost: int  # U_j
    wait: float
    classes: list[tuple[float, frozenset[str], list[int]]]  # (rate, labels, subtasks)

    @property
    def rate(self) -> float:
        return sum(s.rate for s in self.spec.subtasks)


@dataclass(slots=True)
class _Cycle:
    req: FlowPlacementRequest
    free: list[float]  # per node, after this cycle's placements
    committed: list[float]
    reserved: list[float]
    shares: dict[str, float]
    placed_rate: dict[str, float]  # per user, this cycle
    held: dict[str, float]
    # (rate, labels, holder) -> nodes with the labels and room; cleared when budgets move.
    _eligible: dict[tuple[float, frozenset[str], bool], list[int]] = field(
        default_factory=dict
    )

    def room(self, n: int) -> float:
        return self.free[n] - self.reserved[n]

    def eligible(self, rate: float, labels: frozenset[str], holder: bool) -> list[int]:
        key = (rate, labels, holder)
        hit = self._eligible.get(key)
        if hit is None:
            hit = [k for k, n in enumerate(self.req.nodes) if labels <= n.labels
                   and fits(rate, self.free[k] if holder else self.room(k))]
            self._eligible[key] = hit
        return hit

    def budgets_moved(self) -> None:
        self._eligible.clear()

    def user_room(self, user: str) -> float:
        share = self.shares.get(user, math.inf)
        return share - self.held.get(user, 0.0) - self.placed_rate.get(user, 0.0)


def _validate(req: FlowPlacementRequest) -> None:
    seen: set[str] = set()
    for n in req.nodes:
        if n.name in seen:
            raise ValueError(f"nodes: duplicate node name {n.name!r}")
        seen.add(n.name)
        for what, v in (("speed", n.speed), ("free", n.free), ("committed", n.committed)):
            if not math.isfinite(v) or (what == "speed" and v <= 0):
                raise ValueError(f"nodes[{n.name!r}].{what}: must be a finite number"
                                 f"{' > 0' if what == 'speed' else ''}, got {v!r}")
    seen.clear()
    for j in req.jobs:
        if j.job_id in seen:
            raise ValueError(f"jobs: duplicate job id {j.job_id!r}")
        seen.add(j.job_id)
        if not j.subtasks:
            raise ValueError(f"jobs[{j.job_id!r}].subtasks: a job needs at least one")
        for i, s in enumerate(j.subtasks):
            if not math.isfinite(s.rate) or s.rate <= 0:
                raise ValueError(
                    f"jobs[{j.job_id!r}].subtasks[{i}].rate: must be a finite number > 0, "
                    f"got {s.rate!r}"
                )
    seen.clear()
    for u in req.users:
        if u.user in seen:
            raise ValueError(f"users: duplicate user {u.user!r}")
        seen.add(u.user)
        if not math.isfinite(u.weight) or u.weight <= 0:
            raise ValueError(f"users[{u.user!r}].weight: must be a finite number > 0")
    if req.max_rounds < 1:
        raise ValueError(f"max_rounds: must be >= 1, got {req.max_rounds!r}")
    if not 0 < req.qos_share <= 1:
        raise ValueError(f"qos_share: must be within (0, 1], got {req.qos_share!r}")


# ------------------------------------------------------------------------- the solver
def place_pending(req: FlowPlacementRequest) -> FlowPlacementReply:
    """One placement cycle; see the module docstring for the network and the rules."""
    _validate(req)
    nodes = req.nodes
    prio_rank = {p: r for r, p in enumerate(sorted({j.priority for j in req.jobs}))}
    jobs: list[_FlowJob] = []
    for idx, spec in enumerate(req.jobs):
        wait = max(0.0, req.now - spec.arrival)
        cost = (BASE_UNSCHEDULED + PRIORITY_STEP * prio_rank[spec.priority]
                + min(int(wait), WAIT_CAP))
        groups: dict[tuple[float, frozenset[str]], list[int]] = {}
        for i, s in enumerate(spec.subtasks):
            groups.setdefault((s.rate, s.labels), []).append(i)
        classes = [(r, lab, subs) for (r, lab), subs in groups.items()]
        jobs.append(_FlowJob(spec, idx, cost, wait, classes))

    # Users: listed ones, then any other user of a pending job (weight 1, holding nothing).
    users = list(req.users)
    known = {u.user for u in users}
    for j in req.jobs:
        if j.user not in known:
            users.append(UserShare(j.user))
            known.add(j.user)
    placements: dict[str, tuple[str, ...]] = {}
    reasons: dict[str, tuple[PendingReason, ...]] = {}
    gang_withdrawn: set[str] = set()

    # Jobs that could never be placed (even on an empty grid) stay out, with reasons,
    # and do not count in their users' demand.
    active: list[_FlowJob] = []
    for job in jobs:
        why = _never_placeable(job, nodes)
        if why:
            reasons[job.spec.job_id] = why
        else:
            active.append(job)
    pending_rate: dict[str, float] = {}
    for job in active:
        pending_rate[job.spec.user] = pending_rate.get(job.spec.user, 0.0) + job.rate
    capacity = sum(max(0.0, n.free) + max(0.0, n.committed) for n in nodes)
    shares = fair_shares(capacity, users, pending_rate)
    cyc = _Cycle(
        req,
        free=[n.free for n in nodes],
        committed=[n.committed for n in nodes],
        reserved=[0.0] * len(nodes),
        shares=shares,
        placed_rate={},
        held={u.user: max(0.0, u.held) for u in users},
    )


    reserved_for: str | None = None
    rounds = 0
    while active and rounds < req.max_rounds:
        fitting = [j for j in active if _fits_now(j, cyc) is None]
        entrants = list(fitting)
        fit_ids = {id(j) for j in fitting}
        head: _FlowJob | None = None
        if reserved_for is None and req.reserve_after is not None:
            waiting = [j for j in active if id(j) not in fit_ids and j.wait >= req.reserve_after
                       and _user_allows(j, cyc)]
            if waiting:
                head = max(waiting, key=lambda j: (j.cost, -j.index))
                entrants.append(head)
        if not entrants:
            break
        rounds += 1
        assign = _solve_round(entrants, cyc)
        order = sorted(entrants, key=lambda j: (-j.cost, j.index))
        deferred = False
        withdrawn = False
        for job in order:
            got = assign[job.index]
            if not got:  # nothing this round: still pending, as the optimum had it
                continue
            if len(got) < len(job.spec.subtasks):  # partial: withdrawn
                if job is head and got:
                    reserved_for = job.spec.job_id
                    for i, n in got.items():
                        cyc.reserved[n] += min(job.spec.subtasks[i].rate, max(0.0, cyc.room(n)))
                    cyc.budgets_moved()
                gang_withdrawn.add(job.spec.job_id)
                active.remove(job)
                withdrawn = True
                continue
            if not _commit(job, got, cyc):
                deferred = True
                continue
            placements[job.spec.job_id] = tuple(
                nodes[got[i]].name for i in range(len(job.spec.subtasks))
            )
            active.remove(job)
        if not deferred and not withdrawn:
            break

    placed = set(placements)
    for job in jobs:
        jid = job.spec.job_id
        if jid in placed or jid in reasons:
            continue
        found = _fits_now(job, cyc, holder=jid == reserved_for)
        if found is None and jid in gang_withdrawn:
            found = (PendingReason(
                ReasonKind.GANG,
                "its subtasks could not all be placed together this cycle: other pending "
                "jobs took part of the free budget it needed",
            ),)
        elif found is None:
            found = (PendingReason(
                ReasonKind.ROUNDS,
                f"not placed within {req.max_rounds} placement rounds this cycle",
            ),)
        reasons[jid] = found
    return FlowPlacementReply(
        placements=MappingProxyType(placements),
        pending=MappingProxyType({j.spec.job_id: reasons[j.spec.job_id] for j in jobs
                                  if j.spec.job_id in reasons}),
        fair_shares=MappingProxyType(dict(shares)),
        reserved=MappingProxyType({nodes[n].name: r for n, r in enumerate(cyc.reserved)
                                   if r > 0}),
        reserved_for=reserved_for,
        rounds=rounds,
    )


def _never_placeable(job: _FlowJob, nodes: Sequence[NodeState]) -> tuple[PendingReason, ...]:
    """Reasons the job cannot be placed even with every node empty ("" if it can)."""
    out: list[PendingReason] = []
    eligible: list[list[int]] = []
    for i, s in enumerate(job.spec.subtasks):
        labelled = [k for k, n in enumerate(nodes) if s.labels <= n.labels]
        if not labelled:
            out.append(PendingReason(
                ReasonKind.LABELS,
                f"subtask {i}: no node has the labels {', '.join(sorted(s.labels))}", i,
            ))
            eligible.append([])
            continue
        budgets = [nodes[k].free + nodes[k].committed for k in labelled]
        if not fits(s.rate, max(budgets)):
            short = s.rate - max(budgets)
            out.append(PendingReason(
                ReasonKind.BUDGET,
                f"subtask {i}: needs {s.rate:.6g} Mcycles/s but no node's whole budget is "
                f"that large (largest {max(budgets):.6g}, {short:.6g} short)", i, short,
            ))
        eligible.append([k for k, b in zip(labelled, budgets) if fits(s.rate, b)])
    if not out:
        n = len(job.spec.subtasks)
        m = max_matching(eligible)
        if m < n:
            out.append(PendingReason(
                ReasonKind.NODES,
                f"{n} subtasks need distinct nodes but only {m} can be given one "
                "(labels and whole budgets)",
            ))
    return tuple(out)


def _user_allows(job: _FlowJob, cyc: _Cycle) -> bool:
    return fits(job.rate, cyc.user_room(job.spec.user))


def _fits_now(
    job: _FlowJob, cyc: _Cycle, holder: bool = False
) -> tuple[PendingReason, ...] | None:
    """Reasons the job cannot be placed on the current free budgets (None if it can);
    ``holder``: the job the reservation is for (what is held counts as free for it)."""
    nodes = cyc.req.nodes
    out: list[PendingReason] = []
    eligible: list[list[int]] = []
    blocked_by_reservation = False
    for i, s in enumerate(job.spec.subtasks):
        ok = cyc.eligible(s.rate, s.labels, holder)
        if not ok:
            labelled = [k for k, n in enumerate(nodes) if s.labels <= n.labels]
            rooms = [cyc.free[k] if holder else cyc.room(k) for k in labelled]
            best = max(rooms) if rooms else 0.0
            if not holder and any(fits(s.rate, cyc.free[k]) for k in labelled):
                blocked_by_reservation = True
            out.append(PendingReason(
                ReasonKind.BUDGET,
                f"subtask {i}: no node with {s.rate:.6g} Mcycles/s of free budget (the most "
                f"free is {max(best, 0.0):.6g}, {s.rate - max(best, 0.0):.6g} short)",
                i, s.rate - max(best, 0.0),
            ))
        eligible.append(ok)
    if not out:
        n = len(job.spec.subtasks)
        m = max_matching(eligible)
        if m < n:
            out.append(PendingReason(
                ReasonKind.NODES,
                f"{n} subtasks need distinct nodes with room but only {m} nodes are eligible",
            ))
    if not _user_allows(job, cyc):
        room = cyc.user_room(job.spec.user)
        share = cyc.shares.get(job.spec.user, math.inf)
        out.append(PendingReason(
            ReasonKind.FAIR_SHARE,
            f"user {job.spec.user} would go over its fair share: it holds "
            f"{share - room:.6g} of {share:.6g} Mcycles/s and the job needs {job.rate:.6g}",
            None, job.rate - max(room, 0.0),
        ))
    if blocked_by_reservation:
        out.append(PendingReason(
            ReasonKind.RESERVED,
            "nodes it could use are held for a job that has waited longer",
        ))
    return tuple(out) if out else None


def _commit(job: _FlowJob, got: Mapping[int, int], cyc: _Cycle) -> bool:
    """Place the job if its rates fit the exact budgets and its user's share."""
    if not _user_allows(job, cyc):
        return False
    for i, n in got.items():
        if not fits(job.spec.subtasks[i].rate, cyc.room(n)):
            return False
    for i, n in got.items():
        r = job.spec.subtasks[i].rate
        cyc.free[n] -= r
        cyc.committed[n] += r
    cyc.budgets_moved()
    u = job.spec.user
    cyc.placed_rate[u] = cyc.placed_rate.get(u, 0.0) + job.rate
    return True


def _solve_round(entrants: Sequence[_FlowJob], cyc: _Cycle) -> dict[int, dict[int, int]]:
    """Solve one round's network; per job (by index), subtask -> node index."""
    req = cyc.req
    nodes = req.nodes
    g = FlowGraph()
    sink = g.add_node(0)
    node_v = [g.add_node(0) for _ in nodes]
    # Per node: one candidate rate per job (its smallest eligible), for k_n.
    node_rates: list[list[float]] = [[] for _ in nodes]
    # (class arc id, job index, class number, node) for reading the flow back.
    arcs: list[tuple[int, int, int, int]] = []
    user_v: dict[str, int] = {}
    user_pending: dict[str, list[float]] = {}
    max_u = max(j.cost for j in entrants)
    total = 0
    for job in entrants:
        u = job.spec.user
        if u not in user_v:
            user_v[u] = g.add_node(0)
        user_pending.setdefault(u, []).extend(s.rate for s in job.spec.subtasks)
        unsched = g.add_node(0)
        n_sub = len(job.spec.subtasks)
        g.add_arc(unsched, user_v[u], n_sub, job.cost)
        gates: dict[int, int] = {}
        smallest: dict[int, float] = {}
        for c, (rate, labels, subs) in enumerate(job.classes):
            cv = g.add_node(len(subs))
            total += len(subs)
            g.add_arc(cv, unsched, len(subs), 0)
            for k in cyc.eligible(rate, labels, False):
                p = _preference_cost(rate, nodes[k], cyc.committed[k], req.qos_share)
                if len(job.classes) == 1:
                    head = node_v[k]
                else:
                    if k not in gates:
                        gates[k] = g.add_node(0)
                        g.add_arc(gates[k], node_v[k], 1, 0)
                    head = gates[k]
                arcs.append((g.add_arc(cv, head, 1, p), job.index, c, k))
                smallest[k] = min(rate, smallest.get(k, math.inf))
        for k, r in smallest.items():
            node_rates[k].append(r)
    for k in range(len(nodes)):
        g.add_arc(node_v[k], sink, _count_fitting(node_rates[k], cyc.room(k)), 0)
    big = max_u + 1
    for u, v in user_v.items():
        pending = len(user_pending[u])
        room = cyc.user_room(u)
        allowed = pending if math.isinf(room) else _count_fitting(user_pending[u], room)
        if allowed < pending:
            g.add_arc(v, sink, pending - allowed, -big)  # must be used: a lower bound
        g.add_arc(v, sink, allowed, 0)
    g.set_supply(sink, -total)
    sol = g.solve()
    out: dict[int, dict[int, int]] = {j.index: {} for j in entrants}
    if not sol.optimal:  # cannot happen: every class can go unscheduled
        raise RuntimeError("flow placement: the round's network is infeasible")
    by_job = {j.index: j for j in entrants}
    taken: dict[tuple[int, int], int] = {}
    for arc, ji, c, k in arcs:
        if sol.flow[arc] > 0:
            subs = by_job[ji].classes[c][2]
            i = subs[taken.get((ji, c), 0)]
            taken[(ji, c)] = taken.get((ji, c), 0) + 1
            out[ji][i] = k
    return out
