"""The global grid resource manager's core (GGRMS): expected rates and admission,
composing a job table (:mod:`global_manager.job_table`), a pending queue
(:mod:`global_manager.pending_queue`) and the policy's placer
(:mod:`global_manager.placer`). No I/O, no clock reads: ``now`` is passed in.

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
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from coallocator.controller import guaranteed_pace, initial_rate_cap
from global_manager.admission import AdmissionPolicy
from global_manager.cycle import (
    RESERVE_AFTER,
    CycleRequest,
    GridNode,
    NodeHold,
    Placement,
    RunningSubtask,
)
from global_manager.flow_policy import explain, hold_shadow, never_placeable
from global_manager.job_table import JobRecord, JobTable
from global_manager.pending_job import (
    PendingJob,
    PendingReason,
    ReasonKind,
    SplitShape,
    expected_rates,
)
from global_manager.pending_queue import PendingQueue, PendingRecord
from global_manager.placer import PlacementPolicy, placement_policies
from global_manager.policies import Policy
from global_manager.start_estimate import (
    Booking,
    EstimateCache,
    EstimateNode,
    Hold,
    StartEstimateRequest,
)
from workloads.model import (
    Demand,
    JobPhase,
    JobSpec,
    Node,
    QosClass,
    Subtask,
)
from workloads.native import picklable_frozen_records
from workloads.records import from_record, to_record

__all__ = [
    "RESERVE_AFTER",
    "Admission",
    "GlobalConfig",
    "GlobalManagerCore",
    "JobRecord",
    "PendingRecord",
    "QueueCycle",
    "QueueMode",
]


#: Job shapes whose reasons the core memoises (:meth:`GlobalManagerCore._explain`); past
#: this many the memo starts again.
SHAPES_MEMOISED = 4096


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


@dataclass(frozen=True, slots=True)
class GlobalConfig:
    """``rate_per_weight``: Mcycles/s per unit of relative weight (``u_t`` default);
    ``qos_share``: the QoS queue's CPU fraction, which admission budgets are built on;
    ``queue``: :class:`QueueMode` (a string is accepted and parsed; read it as
    :attr:`queue_mode`)."""

    rate_per_weight: float = 25.0
    qos_share: float = 0.5
    # Typed as what it accepts: a compiled build (workloads/native.py) checks the type.
    queue: QueueMode | str = QueueMode.REJECT

    def __post_init__(self) -> None:
        object.__setattr__(self, "queue", QueueMode.parse(self.queue))
        if not math.isfinite(self.rate_per_weight) or self.rate_per_weight <= 0:
            raise ValueError("rate_per_weight: must be a finite number > 0 (Mcycles/s per weight)")
        if not 0 < self.qos_share <= 1:
            raise ValueError("qos_share: must be within (0, 1]")

    @property
    def queue_mode(self) -> QueueMode:
        """``queue`` as a mode (``__post_init__`` parsed it already)."""
        queue = self.queue
        return queue if isinstance(queue, QueueMode) else QueueMode.parse(queue)


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


class GlobalManagerCore:
    """Admission and placement over a :class:`~global_manager.job_table.JobTable`, a
    :class:`~global_manager.pending_queue.PendingQueue` and the policy's placer
    (:mod:`global_manager.placer`). Deterministic given its RNG."""

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
        self.table = JobTable(self.nodes)
        self.queue = PendingQueue()
        #: Nodes placement skips: their manager is dead, stale or lost (live runtime).
        self.down: set[str] = set()
        self._estimates = EstimateCache()
        #: The QoS capacity each node last measured (Mcycles/s), for admission policies
        #: that read it (:meth:`observe_qos_capacity`).
        self.qos_capacity: dict[str, float] = {}
        #: Job id -> (its spec, its queue arrival, what placement and the start
        #: estimates see of it): a pending job is presented to every placement cycle
        #: and every estimate unchanged (``_queued``).
        self._queued_memo: dict[str, tuple[JobSpec, float, PendingJob]] = {}
        #: Bumped whenever what placement sees of the grid changes (a placement, a
        #: release, a node down or up, a measured capacity, a restore): the reasons
        #: memoised below are good while it stays the same.
        self._grid_version = 0
        #: Why a pending job does not fit the grid as it stands, by the job's shape
        #: (:meth:`pending_reasons_of`), for ``_grid_version``.
        self._explained: dict[tuple[object, ...], tuple[PendingReason, ...]] = {}
        self._explained_at = -1
        #: Why a job could never be placed, by its shape (:meth:`_never_placeable`): the
        #: nodes and their budget ceilings do not change.
        self._never: dict[tuple[object, ...], tuple[PendingReason, ...]] = {}
        #: The running strict subtasks (:meth:`JobTable.running_strict`) at
        #: ``_running_at`` (a ``_grid_version``): a placement cycle over a large table
        #: does not walk every job again when none started or ended.
        self._running: tuple[RunningSubtask, ...] = ()
        self._running_at = -1

    # ------------------------------------------------------- the parts' state
    @property
    def jobs(self) -> dict[str, JobRecord]:
        return self.table.jobs

    @property
    def closed(self) -> dict[str, JobPhase]:
        """Jobs that ended without running to completion: rejected, expired, or
        cancelled while pending."""
        return self.table.closed

    @property
    def committed(self) -> dict[str, float]:
        return self.table.committed

    @property
    def load(self) -> dict[str, float]:
        return self.table.load

    @property
    def user_held(self) -> dict[str, float]:
        """Strict expected rate each user's running jobs hold (Mcycles/s)."""
        return self.table.user_held

    @property
    def pending(self) -> dict[str, PendingRecord]:
        return self.queue.records

    @property
    def cycles_run(self) -> int:
        """Placement cycles run (not skipped) by :meth:`place_pending`."""
        return self.queue.cycles_run

    # ------------------------------------------------------------------ queries
    def budget(self, node: str) -> float:
        """Strict expected rate ``node`` may carry under the policy's admission, Mcycles/s."""
        n = self.nodes[node]
        return self.admission.budget(
            n.cpu_rate, self.config.qos_share, self.qos_capacity.get(node)
        )

    @property
    def measures_capacity(self) -> bool:
        """Whether admission reads the nodes' measured QoS capacity: only then need the
        driver call :meth:`observe_qos_capacity`."""
        return self.admission.measures_capacity

    def observe_qos_capacity(self, node: str, rate: float) -> bool:
        """Record what ``node``'s QoS queue can get now (Mcycles/s, as
        :meth:`local_manager.scheduler.LocalScheduler.qos_capacity` measures it). True if
        that moved the node's budget; the next placement cycle then runs even when no
        job arrived or ended. A rate that is not a finite number >= 0 is ignored."""
        if node not in self.nodes:
            raise KeyError(node)
        if not math.isfinite(rate) or rate < 0 or self.qos_capacity.get(node) == rate:
            return False
        before = self.budget(node)
        self.qos_capacity[node] = rate
        self._grid_version += 1
        if self.budget(node) == before:
            return False
        self.queue.changed = True
        return True

    def node_budgets(self) -> dict[str, float]:
        return {n: self.budget(n) for n in self.nodes}

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
        self.queue.changed = True
        self._grid_version += 1
        return True

    def budget_ceiling(self, node: str) -> float:
        """The most strict expected rate ``node`` could ever carry under the policy's
        admission (Mcycles/s): its budget with the whole node measured as QoS capacity
        (the same as :meth:`budget` for admissions that do not measure it)."""
        n = self.nodes[node]
        return self.admission.budget(n.cpu_rate, self.config.qos_share, n.cpu_rate)

    def _grid(self, ceiling: bool = False) -> tuple[GridNode, ...]:
        """The nodes as placement sees them; ``ceiling``: with their budget ceilings (what
        "could this job ever be placed" asks) instead of their budgets now."""
        budget = self.budget_ceiling if ceiling else self.budget
        return tuple(
            GridNode(n.name, n.cpu_rate, budget(n.name), self.committed[n.name],
                     self.load[n.name], n.labels, n.name not in self.down)
            for n in self.nodes.values()
        )

    def _request(
        self, now: float, jobs: tuple[PendingJob, ...], queue: bool
    ) -> CycleRequest:
        return CycleRequest(
            now, jobs, self._grid(), self.config.qos_share, queue=queue,
            held=dict(self.user_held),
            running=self._running_strict() if queue else (),
            hold=self.queue.hold,
        )

    def _running_strict(self) -> tuple[RunningSubtask, ...]:
        """The running strict subtasks with their expected ends, walked again only when
        a job started or a subtask was released since the last walk."""
        if self._running_at != self._grid_version:
            self._running = self.table.running_strict()
            self._running_at = self._grid_version
        return self._running

    # --------------------------------------------------------------- submission
    def new_job_id(self) -> str:
        return self.table.new_job_id()

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
            works, weights, rates = self._shape(spec)
            return self._start(job_id, spec, now, Placement(
                (spec.node,), tuple(works), tuple(weights), tuple(rates)))
        if n > len(self.nodes):
            return Admission(job_id, False, f"{n} subtasks but only {len(self.nodes)} nodes")
        up = len(self.nodes) - len(self.down)
        waits = spec.qos is QosClass.STRICT and self.config.queue_mode is QueueMode.WAIT
        if n > up and not waits:
            return Admission(
                job_id, False,
                f"{n} subtasks but only {up} of {len(self.nodes)} nodes are up "
                f"(down: {', '.join(sorted(self.down))})",
            )
        if not spec.subtasks:
            bad = _check_split_totals(spec)
            if bad:
                return Admission(job_id, False, bad)
        job = self._queued(job_id, spec, now)
        if waits or any(spec.labels_of(i) for i in range(n)):
            # Against the budget ceilings: a budget on measured capacity moves with the
            # node's other work, and a job that fits an idle node waits for one.
            never = self._never_placeable(job)
            if never:
                msg = "; ".join(r.message for r in never)
                return Admission(job_id, False, msg, reasons=never)
        if waits:
            self.queue.add(spec, job_id, now)
            return Admission(
                job_id, False, "pending: waits for the next placement cycle", pending=True
            )
        reply = self.placement.schedule(self._request(now, (job,), queue=False), self.rng)
        got = reply.placed.get(job_id)
        if got is None:
            return Admission(job_id, False, reply.messages.get(job_id, ""),
                             reasons=reply.reasons.get(job_id, ()))
        return self._start(job_id, spec, now, got)

    @staticmethod
    def _shape_key(job: PendingJob) -> tuple[object, ...]:
        """What the reasons a job alone gets from a flow solve depend on: its user (named
        in a fair-share reason), its subtasks' rates and labels, and whether it is strict.
        Not its id, priority or arrival: a job solved alone ranks first, and
        :func:`~global_manager.flow_policy.explain` solves it at its own arrival."""
        return (job.user, job.strict, job.rates, job.labels)

    def _never_placeable(self, job: PendingJob) -> tuple[PendingReason, ...]:
        """:func:`~global_manager.flow_policy.never_placeable` on the budget ceilings, memoised
        by the job's shape (the nodes, their speeds, labels and ceilings are fixed): a
        batch of like jobs pays one solve over the grid, not one each."""
        key = self._shape_key(job)
        got = self._never.get(key)
        if got is None:
            got = never_placeable(job, self._grid(ceiling=True), self.config.qos_share)
            if len(self._never) >= SHAPES_MEMOISED:
                self._never.clear()
            self._never[key] = got
        return got

    def _shape(self, spec: JobSpec) -> tuple[list[float], list[float], list[float]]:
        """Works, relative weights and expected rates of a job's subtasks. A job given by
        ``parallelism`` is split evenly here (the flow solver and the reasons use this;
        greedy placement splits it on the nodes it picks, :class:`SplitShape`)."""
        if spec.subtasks:
            works = [s.work for s in spec.subtasks]
            weights = [s.weight for s in spec.subtasks]
        else:
            n = int(spec.parallelism or 0)
            total_weight = float(spec.total_weight if spec.total_weight is not None else n)
            weights = [total_weight / n] * n
            works = [float(spec.total_work or 0.0) / n] * n
        return works, weights, expected_rates(works, weights, spec.duration,
                                              self.config.rate_per_weight)

    def _queued(self, job_id: str, spec: JobSpec, arrival: float) -> PendingJob:
        """``spec`` as placement sees it (built once per job, spec and arrival)."""
        memo = self._queued_memo.get(job_id)
        if memo is not None and memo[0] is spec and memo[1] == arrival:
            return memo[2]
        if len(self._queued_memo) > 64 + 2 * len(self.pending):
            # Forget the jobs that left the queue (amortised over the cycles).
            self._queued_memo = {j: m for j, m in self._queued_memo.items()
                                 if j in self.pending}
        job = self._build_queued(job_id, spec, arrival)
        self._queued_memo[job_id] = (spec, arrival, job)
        return job

    def _build_queued(self, job_id: str, spec: JobSpec, arrival: float) -> PendingJob:
        works, weights, rates = self._shape(spec)
        split = None
        if not spec.subtasks:
            n = int(spec.parallelism or 0)
            split = SplitShape(
                n, float(spec.total_work or 0.0),
                float(spec.total_weight if spec.total_weight is not None else n),
                spec.duration, self.config.rate_per_weight,
            )
        return PendingJob(
            job_id, spec.user, tuple(works), tuple(weights), tuple(rates),
            tuple(spec.labels_of(i) for i in range(spec.n_subtasks)),
            spec.qos is QosClass.STRICT, spec.priority, arrival, split,
        )

    def _start(self, job_id: str, spec: JobSpec, now: float, p: Placement) -> Admission:
        strict = spec.qos is QosClass.STRICT
        subtasks = []
        pace = self._guaranteed_pace(spec, list(p.rates), p.nodes) if strict else 1.0
        for i, node in enumerate(p.nodes):
            src = spec.subtasks[i] if spec.subtasks else None
            subtasks.append(
                Subtask(
                    job_id=job_id,
                    index=i,
                    node=node,
                    qos=spec.qos,
                    work=p.works[i],
                    relative_weight=p.weights[i],
                    expected_rate=p.rates[i],
                    weight=p.rates[i],
                    demand=(src.demand if src and src.demand else Demand()),
                    command=src.command if src else None,
                    progress=spec.progress,
                    start_time=now,
                    rate_cap=initial_rate_cap(
                        self.policy.controller_config,
                        self.policy.controller,
                        strict,
                        len(p.nodes),
                        p.rates[i],
                        pace,
                    ),
                )
            )
        self.table.add(job_id, spec, now, tuple(subtasks))
        self._grid_version += 1
        return Admission(job_id, True, "", tuple(subtasks), placed_at=now)

    def _guaranteed_pace(
        self, spec: JobSpec, rates: list[float], nodes: tuple[str, ...], booked: bool = False
    ) -> float:
        """The pace a strict gang placed on ``nodes`` starts at
        (:func:`coallocator.controller.guaranteed_pace`), from the nodes' QoS shares and
        the strict rates they carry with the gang (``booked``: the gang is in the table
        already, its rates counted in what its nodes carry)."""
        members = []
        for i, name in enumerate(nodes):
            node = self.nodes[name]
            demand = spec.subtasks[i].demand if spec.subtasks else None
            cores = demand.cpu if demand is not None else 1.0
            members.append((
                rates[i],
                self.config.qos_share * node.cpu_rate,
                self.committed[name] if booked else self.committed[name] + rates[i],
                min(cores, node.cores) * node.speed_mhz,
            ))
        return guaranteed_pace(members)

    def _settle_pace(self, adm: Admission) -> Admission:
        """``adm``, a gang placed in this placement cycle, with the start caps of the
        pace its nodes are sure to give once every gang of the cycle is on them: the
        gangs a cycle places all start on its boundary, so a gang placed early in the
        cycle, priced on nodes the later ones then also booked, would start faster
        than its members sharing a node can go, and its gang would drift apart in its
        first period (docs/decisions.md, "Pace control").
        Bookings only grow within a cycle, so this only lowers a pace; a gang whose
        nodes nobody else booked keeps its caps to the bit."""
        job = self.jobs[adm.job_id]
        spec, subs = job.spec, job.subtasks
        if spec.qos is not QosClass.STRICT or not subs:
            return adm
        rates = [s.expected_rate for s in subs]
        pace = self._guaranteed_pace(spec, rates, tuple(s.node for s in subs), booked=True)
        caps = [
            initial_rate_cap(self.policy.controller_config, self.policy.controller, True,
                             len(subs), x, pace)
            for x in rates
        ]
        if all(c == s.rate_cap for c, s in zip(caps, subs)):
            return adm
        job.subtasks = tuple(replace(s, rate_cap=c) for s, c in zip(subs, caps))
        return replace(adm, subtasks=job.subtasks)

    # ------------------------------------------------------------ pending queue
    def _reserve_after(self) -> float | None:
        """Seconds of waiting after which the placer may hold nodes (None: never)."""
        finite = all(math.isfinite(b) for b in self.node_budgets().values())
        return RESERVE_AFTER if self.placement.reserves and finite else None

    def place_pending(self, now: float) -> QueueCycle:
        """One placement cycle at ``now`` (s): expire the pending jobs whose ``max_wait``
        ran out, then place what the placer places of the queue (in priority then
        submission order), all or nothing per job.

        A cycle is skipped when nothing changed since the last one placed nothing (no
        submission, release, expiry or placement, and for a placer that holds nodes no
        job reaching :data:`RESERVE_AFTER` of waiting): the budgets, shares and queue are
        the same, so it would place nothing either."""
        expired: list[Admission] = []
        for rec in self.queue.expiring(now):
            mw = rec.spec.max_wait
            self.closed[rec.job_id] = JobPhase.EXPIRED
            last = "; ".join(r.message for r in self.pending_reasons_of(rec))
            reason = f"expired: pending {now - rec.arrival:.6g} s, max_wait {mw:.6g} s"
            expired.append(Admission(
                rec.job_id, False, reason + (f" ({last})" if last else ""),
                reasons=rec.reasons or (),
            ))
        reserve_after = self._reserve_after()
        due = reserve_after is not None and self.queue.reserve_due(now, reserve_after)
        if not self.pending or not (self.queue.changed or expired or due):
            return QueueCycle((), tuple(expired))
        self.queue.last_cycle = now
        self.queue.cycles_run += 1
        order = self.queue.ordered()
        jobs = tuple(self._queued(r.job_id, r.spec, r.arrival) for r in order)
        reply = self.placement.schedule(self._request(now, jobs, queue=True), self.rng)
        placed: list[Admission] = []
        for job_id, p in reply.placed.items():
            rec = self.pending.pop(job_id)
            placed.append(self._start(job_id, rec.spec, now, p))
        placed = [self._settle_pace(adm) for adm in placed]
        for rec in order:
            if rec.job_id in self.pending:
                rec.reasons = reply.reasons.get(rec.job_id)
        self.queue.hold = reply.hold
        self.queue.changed = bool(placed)
        return QueueCycle(tuple(placed), tuple(expired))

    def pending_reasons(self, job_id: str) -> tuple[PendingReason, ...]:
        """Why the pending job ``job_id`` is not running, one reason per constraint it
        fails (KeyError if it is not pending)."""
        return self.pending_reasons_of(self.pending[job_id])

    def pending_reasons_of(self, rec: PendingRecord) -> tuple[PendingReason, ...]:
        if rec.reasons is None:
            why = self._explain(self._queued(rec.job_id, rec.spec, rec.arrival))
            rec.reasons = why or (
                PendingReason(
                    ReasonKind.GANG,
                    f"{self.placement.name} placement found no distinct nodes for all its "
                    "subtasks at the last cycle; it fits now and is tried again next cycle",
                ),
            )
        return rec.reasons

    def _explain(self, job: PendingJob) -> tuple[PendingReason, ...]:
        """Why ``job`` alone does not fit the grid as it stands
        (:func:`~global_manager.flow_policy.explain`; empty if it fits), memoised by the job's
        shape until the grid changes: a queue of like jobs, asked about one after the
        other (a submission's answers, ``coalloc queue``), pays one solve over the grid."""
        if self._explained_at != self._grid_version:
            self._explained.clear()
            self._explained_at = self._grid_version
        key = self._shape_key(job)
        got = self._explained.get(key)
        if got is None:
            got = explain(self._request(job.arrival, (job,), queue=False)).get(job.job_id, ())
            if len(self._explained) >= SHAPES_MEMOISED:
                self._explained.clear()
            self._explained[key] = got
        return got

    def start_estimates(self, now: float) -> Mapping[str, float | None]:
        """Each pending job's estimated start (model s, ``>= now``; ``None``: cannot be
        estimated), like ``squeue --start``: :func:`~global_manager.start_estimate.
        estimate_starts` over the nodes placement may use, the running strict subtasks
        booked until their expected ends (start + work / expected rate), the queue in
        placement order (each job running ``max_i w_i / x_i`` once started) and the drain
        reservation with its shadow time (:func:`~global_manager.flow_policy.hold_shadow`).
        Walked again only when the queue, the jobs or the nodes changed, or a release
        event passed."""
        bookings = tuple(
            Booking(st.node, st.expected_rate,
                    job.arrival + st.work / st.expected_rate if st.expected_rate > 0
                    else math.inf)
            for job in self.jobs.values() if job.running and job.spec.qos is QosClass.STRICT
            for st in (job.subtasks[i] for i in sorted(job.running))
        )
        queue = [self._queued(rec.job_id, rec.spec, rec.arrival)
                 for rec in sorted(self.pending.values(),
                                   key=lambda r: (-r.spec.priority, r.arrival, r.seq))]
        hold = None
        drain = self.queue.hold
        if drain is not None and drain.job_id in self.pending:
            head = self.pending[drain.job_id]
            shadow = hold_shadow(
                self._request(now, (), queue=True),
                self._queued(head.job_id, head.spec, head.arrival), drain.nodes,
            )
            hold = Hold(drain.job_id, drain.nodes, shadow)
        nodes = tuple(EstimateNode(n.name, self.budget(n.name), n.labels)
                      for n in self.nodes.values() if n.name not in self.down)
        req = StartEstimateRequest(now, nodes, bookings, tuple(queue), hold)
        return self._estimates.get(req).starts

    def next_expiry(self) -> float | None:
        """The earliest time (s) a pending job's ``max_wait`` runs out, if any."""
        return self.queue.next_expiry()

    def job_state(self, job_id: str) -> JobPhase:
        if job_id in self.pending:
            return JobPhase.PENDING
        return self.table.state(job_id)

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
        self.queue.add(spec, job_id, now)
        return running

    def _release(self, s: Subtask, spec: JobSpec) -> None:
        self.queue.changed = True
        self.table.release(s, spec)
        self._grid_version += 1

    def committed_view(self) -> Mapping[str, float]:
        return dict(self.committed)

    # ------------------------------------------------------------ persistence
    def snapshot(self) -> dict[str, Any]:
        """The core's mutable state as JSON-able data (job ids, RNG state, committed and
        load rates in Mcycles/s, what each user holds, nodes down, the pending queue and
        per job its spec, subtasks and running set), for a restarted global manager to
        :meth:`restore`. Specs and subtasks are records (:mod:`workloads.records`, work
        in Mcycles). The same as :meth:`snapshot_state` with
        ``closed`` and every :meth:`snapshot_job` and :meth:`snapshot_pending`."""
        return {
            **self.snapshot_state(),
            "closed": {j: st.value for j, st in self.closed.items()},
            "jobs": [self.snapshot_job(j) for j in self.jobs],
            "pending": [self.snapshot_pending(j) for j in self.pending],
        }

    def snapshot_state(self) -> dict[str, Any]:
        """The part of :meth:`snapshot` that is not per job (ids, RNG, rates, holdings,
        nodes down, the drain hold): what a journal rewrites on every change."""
        version, internal, gauss = self.rng.getstate()
        hold = self.queue.hold
        return {
            "next_id": self.table.next_id,
            "seq": self.queue.seq,
            "rng": [version, list(internal), gauss],
            "committed": dict(self.committed),
            "load": dict(self.load),
            "user_held": dict(self.user_held),
            "down": sorted(self.down),
            "drain": None if hold is None else [hold.job_id, list(hold.nodes)],
        }

    def snapshot_job(self, job_id: str) -> dict[str, Any] | None:
        """Placed job ``job_id`` as :meth:`snapshot` writes it (None: not placed)."""
        j = self.jobs.get(job_id)
        if j is None:
            return None
        return {
            "job_id": j.job_id,
            "spec": to_record(_with_job_id(j.spec, j.job_id)),  # as restore gives it
            "arrival": j.arrival,
            "running": sorted(j.running),
            "cancelled": j.cancelled,
            "subtasks": [to_record(s) for s in j.subtasks],
        }

    def snapshot_pending(self, job_id: str) -> dict[str, Any] | None:
        """Pending job ``job_id`` as :meth:`snapshot` writes it (None: not pending)."""
        r = self.pending.get(job_id)
        if r is None:
            return None
        return {"job_id": r.job_id, "spec": to_record(_with_job_id(r.spec, r.job_id)),
                "arrival": r.arrival,
                "seq": r.seq}

    def forget(self, job_id: str) -> None:
        """Drop job ``job_id`` if it is over (no subtask running, not pending): a finished
        job past its retention. Its id stays used (ids come from a counter)."""
        if job_id in self.pending:
            raise ValueError(f"{job_id}: pending, not over")
        job = self.jobs.get(job_id)
        if job is not None and job.running:
            raise ValueError(f"{job_id}: running, not over")
        self.jobs.pop(job_id, None)
        self.closed.pop(job_id, None)

    def restore(self, snap: Mapping[str, Any]) -> None:
        """Replace the mutable state with a :meth:`snapshot` of a core over the same
        nodes and policy (ValueError naming the field if it does not fit)."""

        def spec_of(d: Mapping[str, Any], job_id: str) -> JobSpec:
            return _with_job_id(from_record(JobSpec, d), job_id)

        unknown = set(snap["committed"]) ^ set(self.nodes)
        if unknown:
            raise ValueError(f"committed: nodes {sorted(unknown)} do not match this core's")
        version, internal, gauss = snap["rng"]
        self.rng.setstate((int(version), tuple(int(x) for x in internal), gauss))
        table = JobTable(self.nodes)
        table.next_id = int(snap["next_id"])
        table.committed = {n: float(snap["committed"][n]) for n in self.nodes}
        table.load = {n: float(snap["load"][n]) for n in self.nodes}
        table.user_held = {str(u): float(h) for u, h in snap.get("user_held", {}).items()}
        table.closed = {str(j): JobPhase(st) for j, st in snap.get("closed", {}).items()}
        for j in snap["jobs"]:
            job_id = str(j["job_id"])
            table.jobs[job_id] = JobRecord(
                spec_of(j["spec"], job_id),
                job_id,
                float(j["arrival"]),
                tuple(from_record(Subtask, s) for s in j["subtasks"]),
                {int(i) for i in j["running"]},
                bool(j["cancelled"]),
            )
        queue = PendingQueue()
        queue.seq = int(snap.get("seq", 0))
        drain = snap.get("drain")
        queue.hold = None if not drain else NodeHold(str(drain[0]),
                                                      tuple(str(n) for n in drain[1]))
        for r in snap.get("pending", []):
            job_id = str(r["job_id"])
            queue.records[job_id] = PendingRecord(
                spec_of(r["spec"], job_id), job_id, float(r["arrival"]), int(r["seq"])
            )
        queue.changed = True
        queue.last_cycle = self.queue.last_cycle
        queue.cycles_run = self.queue.cycles_run
        self.table, self.queue = table, queue
        self.down = {str(n) for n in snap.get("down", [])} & set(self.nodes)
        self._grid_version += 1


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


# Compiled (workloads/native.py), a frozen record needs its constructor to be unpickled.
picklable_frozen_records(globals())
