"""The global grid resource manager's core (GGRMS): job table, expected rates,
admission and all-or-nothing placement. No I/O, no clock reads: ``now`` is passed in.

Expected rate (``docs/model.md`` §3, "Expected rate"): subtask ``i`` of job ``t`` gets
``x_i = r_i * u_t`` Mcycles/s, where ``u_t`` is the grid's ``rate_per_weight``
(Mcycles/s per weight unit) or, for a job with a target duration ``D_t``,
``max_i(w_i / r_i) / D_t``.

Jobs given as ``parallelism: N`` with total work ``W`` and total weight ``R`` are split on
the ``N`` nodes the placement policy ranks first: node ``j`` gets weight
``r_j = R * f_j / sum f`` where ``f_j`` is its free strict budget (strict jobs) or its CPU
rate (others), and work ``w_j = W * r_j / R``. Then ``w_j / r_j = W / R`` for every
subtask, so at their expected rates they all finish together.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from coallocator.controller import guaranteed_pace, initial_rate_cap
from global_manager.admission import (
    AdmissionPolicy,
    NodeLoad,
    PlacementPolicy,
    PlacementReply,
    PlacementRequest,
    place,
    placement_policies,
)
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
from global_manager.policies import Policy
from global_manager.start_estimate import (
    Booking,
    EstimateCache,
    EstimateNode,
    Hold,
    QueuedJob,
    StartEstimateRequest,
)
from workloads.model import (
    Demand,
    JobPhase,
    JobSpec,
    Node,
    QosClass,
    Subtask,
    subtask_from_dict,
    subtask_to_dict,
)


class QueueMode(str, Enum):
    """What happens to a strict job that does not fit at once: ``reject`` it (the
    paper's behaviour) or keep it ``pending`` until a placement cycle places it."""

    REJECT = "reject"
    WAIT = "wait"

    @staticmethod
    def parse(value: object) -> QueueMode:
        """``value`` (a mode or its name) as a mode; ValueError naming ``queue`` if not."""
        try:
            return QueueMode(value)
        except ValueError:
            known = ", ".join(m.value for m in QueueMode)
            raise ValueError(f"queue: must be one of {known}, got {value!r}") from None


#: Seconds a job waits before flow placement may hold nodes for it.
RESERVE_AFTER = 600.0


@dataclass(frozen=True, slots=True)
class GlobalConfig:
    """``rate_per_weight``: Mcycles/s per unit of relative weight (``u_t`` default);
    ``qos_share``: the QoS queue's CPU fraction, which admission budgets are built on;
    ``queue``: :class:`QueueMode` (a string is accepted)."""

    rate_per_weight: float = 25.0
    qos_share: float = 0.5
    queue: QueueMode = QueueMode.REJECT

    def __post_init__(self) -> None:
        object.__setattr__(self, "queue", QueueMode.parse(self.queue))
        if not math.isfinite(self.rate_per_weight) or self.rate_per_weight <= 0:
            raise ValueError("rate_per_weight: must be a finite number > 0 (Mcycles/s per weight)")
        if not 0 < self.qos_share <= 1:
            raise ValueError("qos_share: must be within (0, 1]")


@dataclass(frozen=True, slots=True)
class Admission:
    """The global manager's answer to a submission."""

    job_id: str
    admitted: bool
    reason: str
    subtasks: tuple[Subtask, ...] = ()
    #: Kept in the pending queue (``queue: wait``) rather than placed or rejected.
    pending: bool = False
    #: One reason per constraint the job fails (rejected or pending jobs).
    reasons: tuple[PendingReason, ...] = ()
    #: When the job was placed (s), for admitted jobs.
    placed_at: float | None = None


@dataclass(frozen=True, slots=True)
class QueueCycle:
    """What one :meth:`GlobalManagerCore.place_pending` cycle did."""

    placed: tuple[Admission, ...]
    expired: tuple[Admission, ...]


@dataclass(slots=True)
class JobRecord:
    spec: JobSpec
    job_id: str
    arrival: float
    subtasks: tuple[Subtask, ...]
    running: set[int]
    cancelled: bool = False


@dataclass(slots=True)
class PendingRecord:
    """A strict job in the pending queue; ``arrival``: when it was submitted (s);
    ``reasons``: from the last cycle (``None``: worked out when asked)."""

    spec: JobSpec
    job_id: str
    arrival: float
    seq: int
    reasons: tuple[PendingReason, ...] | None = None


class GlobalManagerCore:
    """Admission, placement and the job table. Deterministic given its RNG."""

    def __init__(
        self,
        nodes: Iterable[Node],
        policy: Policy,
        config: GlobalConfig | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.nodes: dict[str, Node] = {}
        for n in nodes:
            if n.name in self.nodes:
                raise ValueError(f"nodes: duplicate node name {n.name!r}")
            self.nodes[n.name] = n
        if not self.nodes:
            raise ValueError("nodes: at least one node is needed")
        self.policy = policy
        self.config = config or GlobalConfig()
        self.rng = rng or random.Random(0)
        self.admission: AdmissionPolicy = policy.admission_policy()
        self.placement: PlacementPolicy = placement_policies.create(policy.placement)
        self.committed: dict[str, float] = {n: 0.0 for n in self.nodes}
        self.load: dict[str, float] = {n: 0.0 for n in self.nodes}
        self.jobs: dict[str, JobRecord] = {}
        self.pending: dict[str, PendingRecord] = {}
        #: Jobs that ended without running to completion: rejected, expired, or
        #: cancelled while pending.
        self.closed: dict[str, JobPhase] = {}
        #: Strict expected rate each user's running jobs hold (Mcycles/s).
        self.user_held: dict[str, float] = {}
        self._next_id = 0
        self._seq = 0
        #: Something changed that may let a pending job be placed (a submission, a
        #: release, a placement) since the last cycle; unchanged, a cycle is skipped.
        self._changed = False
        #: The drain reservation of flow placement: (job id, nodes held for it).
        self._drain: tuple[str, tuple[str, ...]] | None = None
        self._last_cycle = -math.inf
        #: Placement cycles run (not skipped) by :meth:`place_pending`.
        self.cycles_run = 0
        #: Nodes placement skips: their manager is dead, stale or lost (live runtime).
        self.down: set[str] = set()
        self._estimates = EstimateCache()

    # ------------------------------------------------------------------ queries
    def budget(self, node: str) -> float:
        """Strict expected rate ``node`` may carry under the policy's admission, Mcycles/s."""
        n = self.nodes[node]
        return self.admission.budget(n.cpu_rate, self.config.qos_share)

    def node_budgets(self) -> dict[str, float]:
        return {n: self.budget(n) for n in self.nodes}

    def _loads(self) -> tuple[NodeLoad, ...]:
        """The nodes placement may use (not :attr:`down`) and their loads."""
        return tuple(
            NodeLoad(
                n.name, n.cpu_rate, self.committed[n.name], self.budget(n.name), self.load[n.name]
            )
            for n in self.nodes.values()
            if n.name not in self.down
        )

    def set_node_down(self, node: str, down: bool = True) -> bool:
        """Take ``node`` out of placement (its manager is dead, stale or lost) or put it
        back; what runs there is not touched. True if that changed anything."""
        if node not in self.nodes:
            raise KeyError(node)
        if (node in self.down) == down:
            return False
        if down:
            self.down.add(node)
        else:
            self.down.discard(node)
        self._changed = True
        return True

    # --------------------------------------------------------------- submission
    def new_job_id(self) -> str:
        self._next_id += 1
        return f"j{self._next_id:05d}"

    def _known(self, job_id: str) -> bool:
        return job_id in self.jobs or job_id in self.pending or job_id in self.closed

    def submit(self, spec: JobSpec, now: float) -> Admission:
        """Admit and place ``spec`` at time ``now`` (s), all or nothing.

        With ``queue: wait`` a strict job is not placed here: it joins the pending queue
        (``Admission.pending``) and :meth:`place_pending` places it; a job that could not
        be placed even on an empty grid is still rejected at once, with its reasons.
        """
        job_id = spec.job_id or self.new_job_id()
        if self._known(job_id):
            return Admission(job_id, False, f"job id {job_id!r} is already in use")
        adm = self._submit(job_id, spec, now)
        if not adm.admitted and not adm.pending:
            self.closed[job_id] = JobPhase.REJECTED
        return adm

    def _submit(self, job_id: str, spec: JobSpec, now: float) -> Admission:
        n = spec.n_subtasks
        if n <= 0:
            return Admission(job_id, False, "job has no subtasks")
        if spec.qos is QosClass.LOCAL:
            if spec.node not in self.nodes or len(spec.subtasks) != 1:
                return Admission(
                    job_id,
                    False,
                    f"local job needs one subtask on a known node, got node {spec.node!r}",
                )
            works = [spec.subtasks[0].work]
            weights = [spec.subtasks[0].weight]
            rates = self._rates(spec, works, weights)
            return self._start(job_id, spec, now, works, weights, rates, (spec.node,))
        if n > len(self.nodes):
            return Admission(job_id, False, f"{n} subtasks but only {len(self.nodes)} nodes")
        up = len(self.nodes) - len(self.down)
        if n > up and not (spec.qos is QosClass.STRICT and self.config.queue is QueueMode.WAIT):
            return Admission(
                job_id, False,
                f"{n} subtasks but only {up} of {len(self.nodes)} nodes are up "
                f"(down: {', '.join(sorted(self.down))})",
            )
        if not spec.subtasks:
            bad = _check_split_totals(spec)
            if bad:
                return Admission(job_id, False, bad)
        strict = spec.qos is QosClass.STRICT
        waits = strict and self.config.queue is QueueMode.WAIT
        if waits or any(spec.labels_of(i) for i in range(n)):
            never = self._never_placeable(job_id, spec)
            if never:
                msg = "; ".join(r.message for r in never)
                return Admission(job_id, False, msg, reasons=never)
        if waits:
            self._seq += 1
            self.pending[job_id] = PendingRecord(spec, job_id, now, self._seq)
            self._changed = True
            return Admission(
                job_id, False, "pending: waits for the next placement cycle", pending=True
            )
        if strict and self._uses_flow():
            reply = self._flow_reply(now, [self._pending_job(job_id, spec, now)], fair=False)
            if job_id not in reply.placements:
                why = reply.pending.get(job_id, ())
                return Admission(job_id, False, "; ".join(r.message for r in why), reasons=why)
            works, weights, rates = self._shape(spec)
            return self._start(job_id, spec, now, works, weights, rates,
                               reply.placements[job_id])
        placed = self._try_place(job_id, spec)
        if isinstance(placed, str):
            return Admission(job_id, False, placed)
        works, weights, rates, nodes = placed
        return self._start(job_id, spec, now, works, weights, rates, nodes)

    def _try_place(
        self, job_id: str, spec: JobSpec
    ) -> str | tuple[list[float], list[float], list[float], tuple[str, ...]]:
        """Greedy placement by the policy's ranking: the shape and nodes, or the reason."""
        checked = spec.qos is QosClass.STRICT
        if spec.subtasks:
            works, weights, rates = self._shape(spec)
            labels = [s.labels for s in spec.subtasks]
            if any(labels):
                reply = self._place_labelled(rates, labels, checked)
            else:
                reply = place(
                    PlacementRequest(tuple(rates), checked, self._loads()),
                    self.placement,
                    self.rng,
                )
        else:
            works, weights, rates, reply = self._split(job_id, spec, checked)
        if not reply.admitted or reply.nodes is None:
            return reply.reason
        return works, weights, rates, reply.nodes

    def _shape(self, spec: JobSpec) -> tuple[list[float], list[float], list[float]]:
        """Works, relative weights and expected rates of a job's subtasks. A job given by
        ``parallelism`` is split evenly here (the flow solver and the reasons use this;
        greedy placement splits it on the nodes it picks, see :meth:`_split`)."""
        if spec.subtasks:
            works = [s.work for s in spec.subtasks]
            weights = [s.weight for s in spec.subtasks]
        else:
            n = int(spec.parallelism or 0)
            total_weight = float(spec.total_weight if spec.total_weight is not None else n)
            weights = [total_weight / n] * n
            works = [float(spec.total_work or 0.0) / n] * n
        return works, weights, self._rates(spec, works, weights)

    def _place_labelled(
        self, rates: list[float], labels: list[frozenset[str]], checked: bool
    ) -> PlacementReply:
        """As :func:`place`, skipping nodes that lack a subtask's labels."""
        ranked = self.placement.rank(self._loads(), checked, self.rng)
        used: set[str] = set()
        chosen: list[str] = [""] * len(rates)
        for i in sorted(range(len(rates)), key=lambda i: (-rates[i], i)):
            for nl in ranked:
                if nl.name in used or not labels[i] <= self.nodes[nl.name].labels:
                    continue
                if checked and rates[i] > nl.free + 1e-9:
                    continue
                chosen[i] = nl.name
                used.add(nl.name)
                break
            else:
                return PlacementReply(
                    None,
                    f"no free node with labels {', '.join(sorted(labels[i])) or '(none)'} can "
                    f"take subtask {i} (expected rate {rates[i]:.6g} Mcycles/s)",
                )
        return PlacementReply(tuple(chosen))

    def _start(
        self,
        job_id: str,
        spec: JobSpec,
        now: float,
        works: list[float],
        weights: list[float],
        rates: list[float],
        nodes: tuple[str, ...],
    ) -> Admission:
        subtasks = []
        strict = spec.qos is QosClass.STRICT
        pace = self._guaranteed_pace(spec, rates, nodes) if strict else 1.0
        for i, node in enumerate(nodes):
            src = spec.subtasks[i] if spec.subtasks else None
            subtasks.append(
                Subtask(
                    job_id=job_id,
                    index=i,
                    node=node,
                    qos=spec.qos,
                    work=works[i],
                    relative_weight=weights[i],
                    expected_rate=rates[i],
                    weight=rates[i],
                    demand=(src.demand if src and src.demand else Demand()),
                    command=src.command if src else None,
                    start_time=now,
                    rate_cap=initial_rate_cap(
                        self.policy.controller_config,
                        self.policy.controller,
                        strict,
                        len(nodes),
                        rates[i],
                        pace,
                    ),
                )
            )
        for s in subtasks:
            if strict:
                self.committed[s.node] += s.expected_rate
                self.user_held[spec.user] = self.user_held.get(spec.user, 0.0) + s.expected_rate
            self.load[s.node] += s.expected_rate
        self.jobs[job_id] = JobRecord(
            spec, job_id, now, tuple(subtasks), {s.index for s in subtasks}
        )
        return Admission(job_id, True, "", tuple(subtasks), placed_at=now)

    def _guaranteed_pace(
        self, spec: JobSpec, rates: list[float], nodes: tuple[str, ...]
    ) -> float:
        """The pace a strict gang placed on ``nodes`` starts at
        (:func:`coallocator.controller.guaranteed_pace`), from the nodes' QoS shares and
        the strict rates they carry with the gang."""
        members = []
        for i, name in enumerate(nodes):
            node = self.nodes[name]
            demand = spec.subtasks[i].demand if spec.subtasks else None
            cores = demand.cpu if demand is not None else 1.0
            members.append((
                rates[i],
                self.config.qos_share * node.cpu_rate,
                self.committed[name] + rates[i],
                min(cores, node.cores) * node.speed_mhz,
            ))
        return guaranteed_pace(members)

    # ------------------------------------------------------------ pending queue
    def place_pending(self, now: float) -> QueueCycle:
        """One placement cycle at ``now`` (s): expire the pending jobs whose ``max_wait``
        ran out, then place what can be placed, all or nothing per job. Greedy policies
        go through the queue in priority then submission order (a job that does not fit
        does not hold back the ones behind it); ``placement: flow`` solves the whole
        queue at once (:func:`global_manager.flow_placement.place_pending`).

        A cycle is skipped when nothing changed since the last one placed nothing (no
        submission, release, expiry or placement, and under flow no job reaching
        :data:`RESERVE_AFTER` of waiting): the budgets, shares and queue are the same, so
        it would place nothing either."""
        expired: list[Admission] = []
        for rec in list(self.pending.values()):
            mw = rec.spec.max_wait
            if mw is not None and now - rec.arrival >= mw:
                del self.pending[rec.job_id]
                self.closed[rec.job_id] = JobPhase.EXPIRED
                last = "; ".join(r.message for r in self.pending_reasons_of(rec))
                reason = f"expired: pending {now - rec.arrival:.6g} s, max_wait {mw:.6g} s"
                expired.append(Admission(
                    rec.job_id, False, reason + (f" ({last})" if last else ""),
                    reasons=rec.reasons or (),
                ))
        placed: list[Admission] = []
        due = self._uses_flow() and self._drain is None and any(
            self._last_cycle < r.arrival + RESERVE_AFTER <= now for r in self.pending.values()
        )
        if not self.pending or not (self._changed or expired or due):
            return QueueCycle((), tuple(expired))
        self._last_cycle = now
        self.cycles_run += 1
        order = sorted(self.pending.values(), key=lambda r: (-r.spec.priority, r.arrival, r.seq))
        if self._uses_flow():
            placed += self._flow_cycle(now, order)
        else:
            for rec in order:
                got = self._try_place(rec.job_id, rec.spec)
                if isinstance(got, str):
                    rec.reasons = None  # worked out when asked, on the budgets then
                    continue
                del self.pending[rec.job_id]
                placed.append(self._start(rec.job_id, rec.spec, now, *got))
        self._changed = bool(placed)
        return QueueCycle(tuple(placed), tuple(expired))

    def _flow_cycle(self, now: float, order: list[PendingRecord]) -> list[Admission]:
        """A flow cycle, with the drain reservation (docs/decisions.md): the job the
        solver picked to hold nodes (it waited longest, ``reserve_after``) gets a set of
        nodes, kept from every other strict job from then on, and is placed there as
        soon as they have room; the rest of the queue is solved on the other nodes."""
        placed: list[Admission] = []
        if self._drain is not None and self._drain[0] not in self.pending:
            self._drain = None
        held: tuple[str, ...] = ()
        if self._drain is not None:
            hid, held = self._drain
            head = self.pending[hid]
            _, _, rates = self._shape(head.spec)
            room = {n: self.budget(n) - self.committed[n] for n in held}
            nodes = self._assign(head.spec, rates, room, held)
            if nodes is not None:
                del self.pending[hid]
                self._drain = None
                held = ()
                placed.append(self._start(hid, head.spec, now, *self._shape(head.spec)[:2],
                                          rates, nodes))
            else:
                head.reasons = (PendingReason(
                    ReasonKind.RESERVED,
                    f"holds nodes {', '.join(held)}: placed there once the jobs running on "
                    "them finish",
                ),)
        rest = [r for r in order if r.job_id in self.pending
                and (self._drain is None or r.job_id != self._drain[0])]
        jobs = [self._pending_job(r.job_id, r.spec, r.arrival) for r in rest]
        if not jobs:
            return placed
        reply = self._flow_reply(now, jobs, fair=True, held=held)
        if not reply.placements and not any(self.committed.values()):
            # Liveness: fair-share bounds never keep an idle grid idle.
            reply = self._flow_reply(now, jobs, fair=False, held=held)
        for rec in rest:
            nodes = reply.placements.get(rec.job_id)
            if nodes is None:
                why = reply.pending.get(rec.job_id, ())
                if held:
                    why += (PendingReason(
                        ReasonKind.RESERVED,
                        f"nodes {', '.join(held)} are held for job {self._drain[0]}"  # type: ignore[index]
                        " , which has waited longer",
                    ),)
                rec.reasons = why
                continue
            del self.pending[rec.job_id]
            works, weights, rates = self._shape(rec.spec)
            placed.append(self._start(rec.job_id, rec.spec, now, works, weights, rates, nodes))
        if held and self._drain is not None:
            placed += self._backfill(now, self._drain[0], held)
        rid = reply.reserved_for
        if self._drain is None and rid is not None and rid in self.pending:
            spec = self.pending[rid].spec
            _, _, rates = self._shape(spec)
            # The nodes that drain first: least committed, then by name.
            order_n = sorted(self.nodes, key=lambda n: (self.committed[n], n))
            whole = {n: self.budget(n) for n in order_n}
            nodes = self._assign(spec, rates, whole, tuple(order_n))
            if nodes is not None:
                self._drain = (rid, tuple(sorted(set(nodes))))
                self.pending[rid].reasons = (PendingReason(
                    ReasonKind.RESERVED,
                    f"holds nodes {', '.join(self._drain[1])}: placed there once the jobs "
                    "running on them finish",
                ),)
        return placed

    def _backfill(self, now: float, hid: str, held: tuple[str, ...]) -> list[Admission]:
        """EASY backfilling on the held nodes: a pending job whose expected run time
        (``max_i w_i / x_i``, s) ends by the held job's *shadow* time (when the jobs now
        running on the held nodes are expected to have left it room, :meth:`_shadow`)
        may use the free budget anywhere, held nodes included, so the hold does not idle
        what it cannot use yet. Candidates are solved as one flow (fair shares, no new
        hold), in priority then submission order. A job that outruns its estimate delays
        the held one; under pace control a strict subtask runs at its expected rate."""
        shadow = self._shadow(hid, held)
        if shadow is None or shadow <= now:
            return []
        order = sorted(self.pending.values(), key=lambda r: (-r.spec.priority, r.arrival, r.seq))
        cands = []
        for rec in order:
            if rec.job_id == hid or rec.spec.qos is not QosClass.STRICT:
                continue
            works, _, rates = self._shape(rec.spec)
            run = max((w / x for w, x in zip(works, rates) if x > 0), default=math.inf)
            if now + run <= shadow + 1e-9:
                cands.append(rec)
        if not cands:
            return []
        jobs = [self._pending_job(r.job_id, r.spec, r.arrival) for r in cands]
        reply = self._flow_reply(now, jobs, fair=True, reserve=False)
        placed = []
        for rec in cands:
            nodes = reply.placements.get(rec.job_id)
            if nodes is None:
                continue
            del self.pending[rec.job_id]
            works, weights, rates = self._shape(rec.spec)
            placed.append(self._start(rec.job_id, rec.spec, now, works, weights, rates, nodes))
        return placed

    def _shadow(self, hid: str, held: tuple[str, ...]) -> float | None:
        """When the held job ``hid`` is expected to fit on its held nodes (s): for each
        held node, the time its running strict subtasks (each expected to end at its
        start plus ``work / expected rate``) have released enough budget for the held
        job's subtask there; the latest of those. None if it cannot be worked out."""
        spec = self.pending[hid].spec
        _, _, rates = self._shape(spec)
        nodes = self._assign(spec, rates, {n: self.budget(n) for n in held}, held)
        if nodes is None:
            return None
        need = dict(zip(nodes, rates))
        ends: dict[str, list[tuple[float, float]]] = {n: [] for n in need}
        for job in self.jobs.values():
            if job.spec.qos is not QosClass.STRICT:
                continue
            for i in job.running:
                st = job.subtasks[i]
                if st.node in ends and st.expected_rate > 0:
                    ends[st.node].append((job.arrival + st.work / st.expected_rate,
                                          st.expected_rate))
        shadow = -math.inf
        for n, rate in need.items():
            committed = self.committed[n]
            t_n = -math.inf
            for end, r in sorted(ends[n]):
                if committed <= self.budget(n) - rate + 1e-9:
                    break
                committed -= r
                t_n = end
            shadow = max(shadow, t_n)
        return shadow

    def _assign(
        self, spec: JobSpec, rates: list[float], room: Mapping[str, float],
        order: tuple[str, ...],
    ) -> tuple[str, ...] | None:
        """Subtasks (largest rate first) on distinct nodes of ``order`` with the labels and
        ``room[node]`` for them (first fit), or None."""
        used: set[str] = set()
        chosen = [""] * len(rates)
        for i in sorted(range(len(rates)), key=lambda i: (-rates[i], i)):
            labels = spec.labels_of(i)
            for n in order:
                if n not in used and n not in self.down and labels <= self.nodes[n].labels \
                        and rates[i] <= room[n] + 1e-9:
                    chosen[i] = n
                    used.add(n)
                    break
            else:
                return None
        return tuple(chosen)

    def pending_reasons(self, job_id: str) -> tuple[PendingReason, ...]:
        """Why the pending job ``job_id`` is not running, one reason per constraint it
        fails (KeyError if it is not pending)."""
        return self.pending_reasons_of(self.pending[job_id])

    def pending_reasons_of(self, rec: PendingRecord) -> tuple[PendingReason, ...]:
        if rec.reasons is None:
            reply = self._flow_reply(
                rec.arrival, [self._pending_job(rec.job_id, rec.spec, rec.arrival)], fair=False
            )
            rec.reasons = reply.pending.get(rec.job_id) or (
                PendingReason(
                    ReasonKind.GANG,
                    f"{self.placement.name} placement found no distinct nodes for all its "
                    "subtasks at the last cycle; it fits now and is tried again next cycle",
                ),
            )
        return rec.reasons

    def start_estimates(self, now: float) -> Mapping[str, float | None]:
        """Each pending job's estimated start (model s, ``>= now``; ``None``: cannot be
        estimated), like ``squeue --start``: :func:`~global_manager.start_estimate.
        estimate_starts` over the nodes placement may use, the running strict subtasks
        booked until their expected ends (start + work / expected rate), the queue in
        placement order (each job running ``max_i w_i / x_i`` once started) and the drain
        reservation with its :meth:`_shadow` time. Walked again only when the queue, the
        jobs or the nodes changed, or a release event passed."""
        bookings = tuple(
            Booking(st.node, st.expected_rate,
                    job.arrival + st.work / st.expected_rate if st.expected_rate > 0
                    else math.inf)
            for job in self.jobs.values() if job.running and job.spec.qos is QosClass.STRICT
            for st in (job.subtasks[i] for i in sorted(job.running))
        )
        queue = []
        for rec in sorted(self.pending.values(),
                          key=lambda r: (-r.spec.priority, r.arrival, r.seq)):
            works, _, rates = self._shape(rec.spec)
            run = max((w / x for w, x in zip(works, rates) if x > 0), default=math.inf)
            subs = tuple(PendingSubtask(x, rec.spec.labels_of(i)) for i, x in enumerate(rates))
            queue.append(QueuedJob(rec.job_id, subs, run))
        hold = None
        if self._drain is not None and self._drain[0] in self.pending:
            hold = Hold(self._drain[0], self._drain[1], self._shadow(*self._drain))
        nodes = tuple(EstimateNode(n.name, self.budget(n.name), n.labels)
                      for n in self.nodes.values() if n.name not in self.down)
        req = StartEstimateRequest(now, nodes, bookings, tuple(queue), hold)
        return self._estimates.get(req).starts

    def next_expiry(self) -> float | None:
        """The earliest time (s) a pending job's ``max_wait`` runs out, if any."""
        times = [r.arrival + r.spec.max_wait for r in self.pending.values()
                 if r.spec.max_wait is not None]
        return min(times) if times else None

    def job_state(self, job_id: str) -> JobPhase:
        if job_id in self.pending:
            return JobPhase.PENDING
        if job_id in self.closed:
            return self.closed[job_id]
        job = self.jobs.get(job_id)
        if job is None:
            raise KeyError(job_id)
        if job.cancelled:
            return JobPhase.CANCELLED
        return JobPhase.RUNNING if job.running else JobPhase.COMPLETED

    def _uses_flow(self) -> bool:
        return self.placement.name == "flow" and all(
            math.isfinite(b) for b in self.node_budgets().values()
        )

    def _pending_job(self, job_id: str, spec: JobSpec, arrival: float) -> PendingJob:
        _, _, rates = self._shape(spec)
        subs = tuple(PendingSubtask(r, spec.labels_of(i)) for i, r in enumerate(rates))
        return PendingJob(job_id, spec.user, subs, spec.priority, arrival)

    def _node_states(
        self, empty: bool = False, held: tuple[str, ...] = ()
    ) -> tuple[NodeState, ...]:
        """The nodes for the solver; ``held`` ones (drained for a waiting job) have no
        room for anybody else."""
        out = []
        for n in self.nodes.values():
            if n.name in self.down and not empty:
                continue
            b = self.budget(n.name)
            c = 0.0 if empty else self.committed[n.name]
            free = 0.0 if n.name in held else b - c
            out.append(NodeState(n.name, n.cpu_rate, free, n.labels, c))
        return tuple(out)

    def _flow_reply(
        self, now: float, jobs: list[PendingJob], fair: bool, held: tuple[str, ...] = (),
        reserve: bool = True,
    ) -> FlowPlacementReply:
        """Solve one cycle. ``fair``: per-user bounds, each user's weighted-DRF share of
        the grid's QoS capacity (:func:`fair_shares`, equal weights) but never below its
        largest pending job, so that a job larger than its user's share can still run
        when the user holds nothing else (else it would wait as long as anyone else
        has demand, reservation or not); otherwise no bounds."""
        holds = {u: h for u, h in sorted(self.user_held.items()) if h > 0}
        pend: dict[str, float] = {}
        biggest: dict[str, float] = {}
        for j in jobs:
            rate = math.fsum(s.rate for s in j.subtasks)
            pend[j.user] = pend.get(j.user, 0.0) + rate
            biggest[j.user] = max(biggest.get(j.user, 0.0), rate)
        names = list(holds) + [u for u in pend if u not in holds]
        if fair:
            capacity = math.fsum(self.node_budgets().values())
            shares = fair_shares(capacity, [UserShare(u, held=holds.get(u, 0.0)) for u in names],
                                 pend)
            bounds = {u: max(shares[u], biggest.get(u, 0.0)) for u in names}
        else:
            bounds = dict.fromkeys(names, math.inf)
        users = tuple(UserShare(u, held=holds.get(u, 0.0), bound=bounds[u]) for u in names)
        return flow_place_pending(FlowPlacementRequest(
            now, tuple(jobs), self._node_states(held=held), users,
            qos_share=self.config.qos_share,
            reserve_after=RESERVE_AFTER if reserve and not held else None,
        ))

    def _never_placeable(self, job_id: str, spec: JobSpec) -> tuple[PendingReason, ...]:
        """Reasons ``spec`` could not be placed even on an empty grid (labels no node
        carries, a subtask above every whole budget, too few eligible nodes)."""
        if spec.qos is not QosClass.STRICT:
            labels = [spec.labels_of(i) for i in range(spec.n_subtasks)]
            out = [PendingReason(ReasonKind.LABELS,
                                 f"subtask {i}: no node has the labels {', '.join(sorted(lab))}",
                                 i)
                   for i, lab in enumerate(labels)
                   if not any(lab <= n.labels for n in self.nodes.values())]
            return tuple(out)
        if not all(math.isfinite(b) for b in self.node_budgets().values()):
            return ()
        reply = flow_place_pending(FlowPlacementRequest(
            0.0, (self._pending_job(job_id, spec, 0.0),), self._node_states(empty=True),
            (UserShare(spec.user, bound=math.inf),), qos_share=self.config.qos_share,
            reserve_after=None,
        ))
        return reply.pending.get(job_id, ())

    def _rates(self, spec: JobSpec, works: list[float], weights: list[float]) -> list[float]:
        if spec.duration:
            u = max(w / r for w, r in zip(works, weights)) / spec.duration
        else:
            u = self.config.rate_per_weight
        return [r * u for r in weights]

    def _split(
        self, job_id: str, spec: JobSpec, checked: bool
    ) -> tuple[list[float], list[float], list[float], PlacementReply]:
        n = int(spec.parallelism or 0)
        total_work = float(spec.total_work or 0.0)
        # A missing total weight means 1 per subtask, as in job files.
        total_weight = float(spec.total_weight if spec.total_weight is not None else n)
        ranked = self.placement.rank(self._loads(), checked, self.rng)[:n]
        if len(ranked) < n:
            return [], [], [], PlacementReply(
                None, f"{n} subtasks but only {len(ranked)} nodes are up"
            )
        basis = [max(nl.free, 0.0) if checked else nl.cpu_rate for nl in ranked]
        if sum(basis) <= 0:
            basis = [nl.cpu_rate for nl in ranked]
        weights = [total_weight * f / sum(basis) for f in basis]
        works = [total_work * r / total_weight for r in weights]
        rates = self._rates(spec, works, weights)
        if checked:
            for i, (nl, x) in enumerate(zip(ranked, rates)):
                if x > nl.free + 1e-9:
                    reason = f"no free node can take subtask {i} (expected rate {x:.6g} Mcycles/s)"
                    return works, weights, rates, PlacementReply(None, reason)
        return works, weights, rates, PlacementReply(tuple(nl.name for nl in ranked))

    # ---------------------------------------------------------------- lifecycle
    def subtask_finished(self, job_id: str, index: int) -> bool:
        """Release what a finished subtask held; True when the whole job is done."""
        job = self.jobs.get(job_id)
        if job is None or index not in job.running:
            return False
        job.running.discard(index)
        self._release(job.subtasks[index], job.spec)
        return not job.running

    def cancel(self, job_id: str) -> list[Subtask]:
        """Cancel a job; returns the subtasks that were still running (none for a job
        still pending)."""
        if job_id in self.pending:
            del self.pending[job_id]
            self.closed[job_id] = JobPhase.CANCELLED
            return []
        job = self.jobs.get(job_id)
        if job is None:
            raise KeyError(job_id)
        running = [job.subtasks[i] for i in sorted(job.running)]
        for s in running:
            self._release(s, job.spec)
        job.running.clear()
        job.cancelled = True
        return running

    def requeue(self, job_id: str, spec: JobSpec, now: float) -> list[Subtask]:
        """Stop a running job and put it back in the pending queue as ``spec`` (its
        remaining work) from ``now`` (s): its ``max_wait`` counts from here. Returns the
        subtasks that were still running (their budgets are released). Works in either
        queue mode: a requeued job is never dropped for not fitting at once."""
        running = self.cancel(job_id)
        del self.jobs[job_id]
        self._seq += 1
        self.pending[job_id] = PendingRecord(spec, job_id, now, self._seq)
        self._changed = True
        return running

    def _release(self, s: Subtask, spec: JobSpec) -> None:
        self._changed = True
        if spec.qos is QosClass.STRICT:
            self.committed[s.node] = max(0.0, self.committed[s.node] - s.expected_rate)
            held = self.user_held.get(spec.user, 0.0) - s.expected_rate
            self.user_held[spec.user] = held if held > 1e-9 else 0.0
        self.load[s.node] = max(0.0, self.load[s.node] - s.expected_rate)

    def committed_view(self) -> Mapping[str, float]:
        return dict(self.committed)

    # ------------------------------------------------------------ persistence
    def snapshot(self) -> dict[str, Any]:
        """The core's mutable state as JSON-able data (job ids, RNG state, committed and
        load rates in Mcycles/s, what each user holds, nodes down, the pending queue and
        per job its spec, subtasks and running set), for a restarted global manager to
        :meth:`restore`. Specs are written as job-file mappings
        (:func:`workloads.spec.job_to_dict`)."""
        from workloads.spec import job_to_dict

        version, internal, gauss = self.rng.getstate()
        return {
            "next_id": self._next_id,
            "seq": self._seq,
            "rng": [version, list(internal), gauss],
            "committed": dict(self.committed),
            "load": dict(self.load),
            "user_held": dict(self.user_held),
            "down": sorted(self.down),
            "closed": {j: st.value for j, st in self.closed.items()},
            "drain": None if self._drain is None else [self._drain[0], list(self._drain[1])],
            "jobs": [
                {
                    "job_id": j.job_id,
                    "spec": job_to_dict(j.spec),
                    "arrival": j.arrival,
                    "running": sorted(j.running),
                    "cancelled": j.cancelled,
                    "subtasks": [subtask_to_dict(s) for s in j.subtasks],
                }
                for j in self.jobs.values()
            ],
            "pending": [
                {"job_id": r.job_id, "spec": job_to_dict(r.spec), "arrival": r.arrival,
                 "seq": r.seq}
                for r in self.pending.values()
            ],
        }

    def restore(self, snap: Mapping[str, Any]) -> None:
        """Replace the mutable state with a :meth:`snapshot` of a core over the same
        nodes and policy (ValueError naming the field if it does not fit)."""
        from workloads.spec import DEFAULT_USER, parse_job

        def spec_of(d: Mapping[str, Any], job_id: str) -> JobSpec:
            spec = parse_job(d, "journal", allow_local=True, default_user=DEFAULT_USER)
            return _with_job_id(spec, job_id)

        unknown = set(snap["committed"]) ^ set(self.nodes)
        if unknown:
            raise ValueError(f"committed: nodes {sorted(unknown)} do not match this core's")
        version, internal, gauss = snap["rng"]
        self.rng.setstate((int(version), tuple(int(x) for x in internal), gauss))
        self._next_id = int(snap["next_id"])
        self._seq = int(snap.get("seq", 0))
        self.committed = {n: float(snap["committed"][n]) for n in self.nodes}
        self.load = {n: float(snap["load"][n]) for n in self.nodes}
        self.user_held = {str(u): float(h) for u, h in snap.get("user_held", {}).items()}
        self.down = {str(n) for n in snap.get("down", [])} & set(self.nodes)
        self.closed = {str(j): JobPhase(st) for j, st in snap.get("closed", {}).items()}
        drain = snap.get("drain")
        self._drain = None if not drain else (str(drain[0]), tuple(str(n) for n in drain[1]))
        self.jobs = {}
        for j in snap["jobs"]:
            job_id = str(j["job_id"])
            self.jobs[job_id] = JobRecord(
                spec_of(j["spec"], job_id),
                job_id,
                float(j["arrival"]),
                tuple(subtask_from_dict(s) for s in j["subtasks"]),
                {int(i) for i in j["running"]},
                bool(j["cancelled"]),
            )
        self.pending = {}
        for r in snap.get("pending", []):
            job_id = str(r["job_id"])
            self.pending[job_id] = PendingRecord(
                spec_of(r["spec"], job_id), job_id, float(r["arrival"]), int(r["seq"])
            )
        self._changed = True


def _with_job_id(spec: JobSpec, job_id: str) -> JobSpec:
    from dataclasses import replace

    return replace(spec, job_id=job_id)


def _check_split_totals(spec: JobSpec) -> str:
    """Why a job given by ``parallelism`` cannot be split ("" if it can): its total work
    (Mcycles) must be > 0 and its total weight, when given, > 0."""
    w = spec.total_work
    if w is None or not math.isfinite(w) or w <= 0:
        return f"total_work: must be a finite number > 0 Mcycles to split a job, got {w!r}"
    r = spec.total_weight
    if r is not None and (not math.isfinite(r) or r <= 0):
        return f"total_weight: must be a finite number > 0, got {r!r}"
    return ""
