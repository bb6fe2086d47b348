"""The local scheduler of one node: ``docs/model.md`` §3, "Local scheduler (per node, per
cycle)", with the virtual subtasks of "Controller" step 5, the rate caps of pace control
("The local scheduler's ``paced`` mode") and the clocks of eqs. (3)-(5).

No I/O and no wall clock: the driver (the live local manager, or the simulator's reference
mode) calls :meth:`LocalScheduler.step` once per cycle of ``q`` seconds with the real time
at the cycle's end. The node offers ``speed_mhz * cores * q`` Mcycles per cycle:

1. **Three queues.** Grid-local, grid QoS (strict and loose QoS subtasks and their virtual
   subtasks) and best effort get the CPU by their weights, 0.3 / 0.5 / 0.2 by default
   (:meth:`LocalScheduler._split_queues`). Work conserving (the default), a queue that
   cannot use its share passes it to the others in proportion to their weights (weighted
   max-min over the queues, each capped by its demand); otherwise, as in the paper, an
   unused share stays idle.
2. **Weighted DRF inside a queue** (:meth:`LocalScheduler._share_queue`). A queue's share
   is split among its entries by weight, each capped by its demand: weighted max-min
   (water filling) when every entry is CPU-only, the divisible weighted DRF when one has a
   memory or IO demand (:meth:`LocalScheduler._drf_share`; the queue's memory and IO are
   its CPU fraction of the node's). An entry's demand is its cores at full speed for the
   cycle, never more than the work it has left. A subtask's weight starts at its expected
   rate ``x_i``, so a fully loaded QoS queue gives each subtask its expected rate.
3. **Virtual subtasks** ("Controller" step 4-5). The controller slows a subtask by moving
   weight to its virtual subtask, which sits in the QoS queue with that weight. What the
   mode (:class:`VirtualSubtaskMode`) does with the share a virtual subtask wins:

   - ``idle`` (the paper): it stays idle, so slowing one subtask does not speed up its
     neighbours;
   - ``work_conserving``: it is lent to the best-effort queue for this cycle only, so it
     is taken back at once the next cycle (:meth:`LocalScheduler._lend`);
   - ``paced`` (pace control): virtual subtasks are bookkeeping only and take no CPU. A
     slowed subtask is held to its ``rate_cap`` instead (or to a lower useful cap that
     the node set, :meth:`LocalScheduler.set_useful_caps`); what it leaves goes to the
     other QoS entries first (the queue's water filling), and what the QoS queue then leaves
     unused *because of the caps* is lent, this cycle only, to the best-effort and
     grid-local queues (:meth:`LocalScheduler._lend_to_queues`), even when the queues are
     not work-conserving: a slow-down never idles the CPU. CPU that no queue uses goes to
     QoS subtasks that want more (``borrow_idle``; a capped one only up to its cap), so
     the subtask that bounds its job's pace is not held to the QoS share of an otherwise
     idle node. Each capped subtask also reports what it would have got with every cap
     lifted (``available_work``, "What a node can give";
     :meth:`LocalScheduler._available_uncapped`).
4. **Clocks** (:meth:`LocalScheduler._book`). Every placed subtask's virtual clock moves by
   eqs. (4)-(5): ``T_V' = T_V + (x_bar / x) (T_R' - T_RP)``, where ``x`` is its expected
   work in the cycle (its expected rate times ``q``, never more than the work it has
   left) and ``x_bar`` the work it got. Every grid QoS subtask sends a progress report.

The capacity that admission by measured capacity reads (``C`` of "Admission") is
:meth:`LocalScheduler.qos_capacity`. The simulator's lean path, which replays a split
while it provably stays the same, is :mod:`local_manager.replay`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from clocks.virtual import VirtualClock
from fairness.drf import drf
from fairness.single import water_fill
from workloads.messages import ProgressReport
from workloads.model import Node, QosClass, QueueName, Subtask, queue_of
from workloads.native import picklable_frozen_records

DEFAULT_QUEUE_WEIGHTS: Mapping[QueueName, float] = {
    QueueName.LOCAL: 0.3,
    QueueName.QOS: 0.5,
    QueueName.BEST_EFFORT: 0.2,
}

_QUEUES: tuple[QueueName, ...] = tuple(QueueName)

#: Entries of the grid-local and best-effort queues that share the CPU at once (a node's
#: "slots"); more wait in arrival order. Bounds the per-cycle work under overload too.
DEFAULT_MAX_RUNNING: Mapping[QueueName, int | None] = {
    QueueName.LOCAL: 8,
    QueueName.QOS: None,
    QueueName.BEST_EFFORT: 8,
}

#: Work below this many Mcycles counts as done (absorbs float rounding).
WORK_EPSILON = 1e-6

#: A subtask's key: (job id, subtask index).
Key = tuple[str, int]


class VirtualSubtaskMode(str, Enum):
    """What happens to the CPU share a virtual subtask wins (``docs/model.md`` §3,
    "Controller", step 5; rule 3 of the module docstring)."""

    IDLE = "idle"
    WORK_CONSERVING = "work_conserving"
    PACED = "paced"


@dataclass(frozen=True, slots=True)
class LocalSchedulerConfig:
    """Configuration of one local scheduler.

    ``queue_weights`` are CPU fractions per queue (they need not sum to 1; they are
    normalised). ``work_conserving`` redistributes an unused queue share to the other
    queues. ``virtual_mode`` decides what a virtual subtask's share is used for.
    ``max_running`` caps how many entries of a queue share its CPU at once (``None``:
    no cap); the rest wait in arrival order and start, with fresh clocks, as running ones
    finish. The grid QoS queue is never capped: a co-allocated subtask that waited would
    break its job's phase.
    """

    queue_weights: Mapping[QueueName, float] = field(
        default_factory=lambda: dict(DEFAULT_QUEUE_WEIGHTS)
    )
    work_conserving: bool = True
    virtual_mode: VirtualSubtaskMode = VirtualSubtaskMode.IDLE
    max_running: Mapping[QueueName, int | None] = field(
        default_factory=lambda: dict(DEFAULT_MAX_RUNNING)
    )
    #: ``paced`` mode: lend what the rate caps leave of the QoS share to the best-effort
    #: and grid-local queues (off: it stays idle unless other QoS work takes it).
    lend_paced: bool = True
    #: ``paced`` mode: CPU that no queue uses this cycle goes to QoS subtasks that want
    #: more (capped ones only up to their caps), even when the queues are not
    #: work-conserving: the subtask that bounds its job's pace runs faster.
    borrow_idle: bool = True
    #: ``paced`` mode: apply the useful caps the node sets
    #: (:meth:`LocalScheduler.set_useful_caps`); off, they are kept and not applied.
    useful_caps: bool = False

    def __post_init__(self) -> None:
        for q in QueueName:
            w = self.queue_weights.get(q)
            if w is None or not math.isfinite(w) or w < 0:
                raise ValueError(f"queue_weights[{q.value}]: must be a finite number >= 0")
        if sum(self.queue_weights.values()) <= 0:
            raise ValueError("queue_weights: at least one queue weight must be > 0")
        for q, cap in self.max_running.items():
            if cap is not None and (not isinstance(cap, int) or cap < 1):
                raise ValueError(f"max_running[{q.value}]: must be an integer >= 1 or None")
        if self.max_running.get(QueueName.QOS) is not None:
            raise ValueError("max_running[qos]: the grid QoS queue cannot be capped")

    def share(self, queue: QueueName) -> float:
        """The normalised CPU fraction of ``queue`` (0..1)."""
        return self.queue_weights[queue] / sum(self.queue_weights.values())


@dataclass(frozen=True, slots=True)
class Grant:
    """What one entry got in one cycle. Work in Mcycles."""

    job_id: str
    subtask: int
    queue: QueueName
    expected_work: float
    granted_work: float
    virtual_time: float


@dataclass(frozen=True, slots=True)
class CycleResult:
    """The outcome of one local scheduling cycle on one node.

    ``queue_cpu`` is the CPU (Mcycles) each queue received, ``virtual_idle`` what the
    virtual subtasks held idle, ``lent_to_best_effort`` what they lent (work-conserving
    mode), ``used`` the CPU really consumed by subtasks and ``capacity`` what the node
    offered, all in Mcycles for this cycle.
    """

    node: str
    real_time: float
    grants: tuple[Grant, ...]
    reports: tuple[ProgressReport, ...]
    finished: tuple[Key, ...]
    queue_cpu: Mapping[QueueName, float]
    virtual_idle: float
    lent_to_best_effort: float
    used: float
    capacity: float


#: One entry's cycle as :meth:`LocalScheduler._book` booked it: (queue, job id, subtask
#: index, expected work x, granted work, work done x_bar, T_V after the cycle (s),
#: finished, available work for the report), work in Mcycles.
BookedRow = tuple[QueueName, str, int, float, float, float, float, bool, float]

#: What :meth:`LocalScheduler._book` returns: the CPU used (the grants summed in entry
#: order), the grid QoS entries' grants in entry order, the finished keys and the rows.
Booking = tuple[float, list[float], list[Key], list[BookedRow]]


class Entry:
    """A placed subtask with its virtual clock (mutable, owned by the scheduler)."""

    __slots__ = ("subtask", "clock", "queue", "key", "cpu_only")

    def __init__(self, subtask: Subtask, start: float) -> None:
        self.subtask = subtask
        self.clock = VirtualClock(start)
        self.queue = queue_of(subtask.qos)
        # Fixed for the entry's life (the hot loops read them every cycle).
        self.key = subtask.key
        self.cpu_only = subtask.demand.is_cpu_only


@dataclass(frozen=True, slots=True)
class Split:
    """One cycle's division of the node's CPU (rules 1-3 of the module docstring) and the
    figures it was computed from. CPU in Mcycles for the cycle."""

    #: The running entries, in placement order.
    entries: list[Entry]
    #: Each running entry's grant.
    granted: dict[Key, float]
    #: What each queue received (rule 1).
    queue_cpu: dict[QueueName, float]
    #: What virtual subtasks held idle, and what was lent to other queues (rule 3).
    virtual_idle: float
    lent: float
    #: What the node offers.
    capacity: float
    #: Per rate-capped QoS subtask, what it would get with every cap lifted (``None``: no
    #: caps).
    available: dict[Key, float] | None
    #: Each running entry's CPU cap: its cores at full speed or its work left, and its
    #: rate cap under pace control.
    cap: dict[Key, float]
    #: Under pace control, each rate-capped entry's cap before its rate cap.
    uncapped: dict[Key, float]
    by_queue: dict[QueueName, list[Entry]]
    #: Each queue's demand (capped by the node's capacity), in queue order.
    queue_demand: list[float]
    #: The QoS demand the rate caps held back, and the QoS share lent on for it.
    released: float
    lendable: float
    #: Virtual subtasks counted in the QoS queue's demand (not paced).
    n_virtual: int
    #: What each queue's virtual subtasks held.
    queue_idle: dict[QueueName, float]
    #: Whether the work-conserving virtual subtasks lent to the best-effort queue, and
    #: whether idle CPU was lent to the QoS queue.
    lent_virtual: bool
    borrowed: bool
    #: Per running entry in order: the entry, its subtask, its key, its cores at full
    #: speed and, under pace control, its rate cap for the cycle (Mcycles: the lower of
    #: the controller's and its useful cap; the factors of ``cap``).
    limits: list[tuple[Entry, Subtask, Key, float, float | None]]


class LocalScheduler:
    """The scheduling core of one node. See the module docstring for the cycle rules.

    ``incarnation`` tags the progress reports of this scheduler's life (a restarted
    local manager uses a new one), ``seq`` numbers them.
    """

    def __init__(
        self, node: Node, config: LocalSchedulerConfig | None = None, incarnation: int = 0
    ) -> None:
        self.node = node
        self.config = config or LocalSchedulerConfig()
        self.incarnation = incarnation
        self._queue_shares = [max(self.config.share(q), 1e-12) for q in QueueName]
        # Running entries (share the CPU) and, per capped queue, waiting ones in arrival
        # order; a key is in exactly one of them.
        self._entries: dict[Key, Entry] = {}
        self._waiting: dict[QueueName, dict[Key, Entry]] = {q: {} for q in _QUEUES}
        self._seq = 0
        # Per entry, the most CPU (Mcycles) it can use in the next split (a coupled member
        # that blocks at an exchange): set by :meth:`limit_demand`, usually empty.
        self._demand_limits: Mapping[Key, float] = {}
        # Under pace control, per entry, the rate (Mcycles/s) its useful rate allows it
        # (:meth:`set_useful_caps`; the live node's, usually empty).
        self._useful_caps: Mapping[Key, float] = {}

    def _inputs_changed(self) -> None:
        """Something the split reads besides the work done changed: an entry was added,
        removed or started, a weight or rate cap moved, or a clock was set. Nothing to do
        here, where every cycle is split afresh; a subclass that reuses a split
        (:class:`local_manager.replay.ReplayingScheduler`) drops it."""

    # ----------------------------------------------------------------- membership
    def add(self, subtask: Subtask, now: float) -> None:
        """Place ``subtask`` on this node at real time ``now`` (s); its clocks start there.
        The scheduler keeps its own copy (it owns the subtask's live state: done work,
        weights, finish time; :meth:`get` reads it): the caller's record is not changed."""
        if subtask.node != self.node.name:
            raise ValueError(
                f"subtask {subtask.key} is for node {subtask.node!r}, not {self.node.name!r}"
            )
        if self._find(subtask.key) is not None:
            raise ValueError(f"subtask {subtask.key} is already on node {self.node.name!r}")
        subtask = dataclasses.replace(subtask, start_time=now)
        entry = Entry(subtask, now)
        cap = self.config.max_running.get(entry.queue)
        if cap is not None and (self._waiting[entry.queue] or self._running(entry.queue) >= cap):
            self._waiting[entry.queue][subtask.key] = entry
        else:
            self._entries[subtask.key] = entry
        self._inputs_changed()

    def _find(self, key: Key) -> Entry | None:
        entry = self._entries.get(key)
        if entry is None:
            for waiting in self._waiting.values():
                entry = waiting.get(key)
                if entry is not None:
                    break
        return entry

    def _running(self, queue: QueueName) -> int:
        return sum(
            1 for e in self._entries.values() if e.queue is queue and e.subtask.finish_time is None
        )

    def _start_waiting(self, start: float) -> None:
        """Fill the free slots of capped queues from their waiting lines; the clocks of
        the entries that start are set to ``start`` (s)."""
        for q, waiting in self._waiting.items():
            if not waiting:
                continue
            cap = self.config.max_running.get(q)
            free = len(waiting) if cap is None else cap - self._running(q)
            while free > 0 and waiting:
                key = next(iter(waiting))
                entry = waiting.pop(key)
                entry.clock = VirtualClock(start)
                self._entries[key] = entry
                free -= 1
                self._inputs_changed()

    @property
    def waiting(self) -> int:
        """How many entries wait for a slot."""
        return sum(len(w) for w in self._waiting.values())

    def remove(self, key: Key) -> Subtask | None:
        """Take a subtask (and its virtual subtask) off the node; ``None`` if absent."""
        entry = self._entries.pop(key, None)
        if entry is None:
            for waiting in self._waiting.values():
                entry = waiting.pop(key, None)
                if entry is not None:
                    break
        self._inputs_changed()
        return entry.subtask if entry else None

    def remove_job(self, job_id: str) -> list[Subtask]:
        """Take every subtask of ``job_id`` off the node (cancel)."""
        keys = [k for k in self._entries if k[0] == job_id]
        keys += [k for w in self._waiting.values() for k in w if k[0] == job_id]
        out = [s for s in (self.remove(k) for k in keys) if s is not None]
        self._inputs_changed()
        return out

    def set_weights(
        self, key: Key, weight: float, virtual_weight: float, rate_cap: float = 0.0
    ) -> bool:
        """Apply a controller decision (Mcycles/s, all >= 0; ``rate_cap`` 0 = no cap).
        False if the subtask is gone."""
        if (
            not (math.isfinite(weight) and math.isfinite(virtual_weight))
            or not math.isfinite(rate_cap)
            or weight < 0
            or virtual_weight < 0
            or rate_cap < 0
        ):
            raise ValueError(
                f"weights for {key}: must be finite and >= 0, got {weight!r}, "
                f"{virtual_weight!r}, rate cap {rate_cap!r}"
            )
        entry = self._find(key)
        if entry is None:
            return False
        s = entry.subtask
        if s.weight != weight or s.virtual_weight != virtual_weight or s.rate_cap != rate_cap:
            self._inputs_changed()
        s.weight = weight
        s.virtual_weight = virtual_weight
        s.rate_cap = rate_cap
        return True

    def restore_clock(self, key: Key, virtual_time: float, real_time: float) -> None:
        """Set a subtask's virtual clock to ``virtual_time`` as of real time ``real_time``
        (s): a restarted local manager resumes it from its checkpoint (KeyError if absent)."""
        entry = self._find(key)
        if entry is None:
            raise KeyError(key)
        entry.clock.virtual_time = float(virtual_time)
        entry.clock.previous_real_time = float(real_time)
        self._inputs_changed()

    def subtasks(self) -> list[Subtask]:
        """The subtasks on the node: running ones in placement order, then waiting ones."""
        out = [e.subtask for e in self._entries.values()]
        for waiting in self._waiting.values():
            out.extend(e.subtask for e in waiting.values())
        return out

    def get(self, key: Key) -> Subtask | None:
        entry = self._find(key)
        return entry.subtask if entry else None

    def virtual_time(self, key: Key) -> float:
        """``T_V`` of a subtask on this node, s."""
        entry = self._find(key)
        if entry is None:
            raise KeyError(key)
        return entry.clock.virtual_time

    def qos_weight_total(self, strict_only: bool = True) -> float:
        """Sum of QoS-queue weights (subtask plus virtual), Mcycles/s."""
        total = 0.0
        for e in self._entries.values():
            s = e.subtask
            if e.queue is QueueName.QOS and (not strict_only or s.qos is QosClass.STRICT):
                total += s.weight + s.virtual_weight
        return total

    def __len__(self) -> int:
        """Subtasks on the node, running or waiting."""
        w = self._waiting
        return (
            len(self._entries)
            + len(w[QueueName.LOCAL])
            + len(w[QueueName.QOS])
            + len(w[QueueName.BEST_EFFORT])
        )

    def skip_to(self, real_time: float) -> None:
        """Move every running subtask's clocks to ``real_time`` (s) without CPU: the node
        did not run its subtasks in between (its manager was stalled), so no work is
        booked and each virtual clock stays where it was (eq. 4 with ``x_bar = 0``)."""
        for e in self._entries.values():
            if e.subtask.finish_time is None and real_time > e.clock.previous_real_time:
                e.clock.advance(real_time, 1.0, 0.0)
        self._inputs_changed()

    def limit_demand(self, limits: Mapping[Key, float] | None) -> None:
        """Hold each keyed entry's demand in the splits to come to at most its value
        (Mcycles per cycle; ``None`` or empty: no limits): a coupled member that blocks
        at an exchange uses no more than it can do before it, and its share goes to the
        node's other work (the queues' and the water filling's own rules)."""
        self._demand_limits = dict(limits) if limits else {}
        self._inputs_changed()

    def set_useful_caps(self, caps: Mapping[Key, float] | None) -> None:
        """Under pace control, hold each keyed entry to at most its useful cap
        (Mcycles/s, > 0; ``None`` or empty: none) in the splits to come, as a rate cap:
        the lower of it and the controller's ``rate_cap`` holds. A coupled member that
        waits at its exchanges is held near the CPU it uses outside its waits
        (:mod:`local_manager.useful_rate`); what it leaves goes to the node's other work by
        the queues' rules, and its ``available_work`` still says what it could get with
        every cap lifted. Outside pace control, or with the configuration's
        ``useful_caps`` off, the caps are kept and not applied."""
        new = dict(caps) if caps else {}
        for key, cap in new.items():
            if not math.isfinite(cap) or cap <= 0:
                raise ValueError(f"useful cap for {key}: must be finite and > 0, got {cap!r}")
        if new != self._useful_caps:
            self._inputs_changed()
        self._useful_caps = new

    @property
    def applies_useful_caps(self) -> bool:
        """Whether useful caps apply: under pace control, with ``useful_caps`` on."""
        return self.config.useful_caps and self.config.virtual_mode is VirtualSubtaskMode.PACED

    # ---------------------------------------------------------------------- cycle
    def plan(self, real_time: float, cycle: float) -> Split:
        """The first half of :meth:`step`: the split of the cycle of ``cycle`` s ending at
        ``real_time`` (s), nothing booked (a driver that decides each entry's work done
        from every node's grants, :mod:`global_manager.coupling`, books it with
        :meth:`commit`). Waiting entries whose slot freed start here."""
        if not math.isfinite(cycle) or cycle <= 0:
            raise ValueError(f"cycle: must be a finite number of seconds > 0, got {cycle!r}")
        return self._split(real_time, cycle)

    def commit(
        self,
        real_time: float,
        cycle: float,
        split: Split,
        measured: Mapping[Key, float] | None = None,
    ) -> CycleResult:
        """The second half of :meth:`step`: book ``split`` (from :meth:`plan` of the same
        cycle) with ``measured`` as in :meth:`step`."""
        return self._account(real_time, cycle, split, measured)

    def step(
        self,
        real_time: float,
        cycle: float,
        measured: Mapping[Key, float] | None = None,
    ) -> CycleResult:
        """Run one scheduling cycle of ``cycle`` seconds ending at ``real_time`` (s).

        Splits the CPU (rules 1-3), advances done work and virtual clocks (rule 4), marks
        finished subtasks (their ``finish_time`` is ``real_time``; they stay on the node
        until removed) and returns what happened.

        ``measured``: for subtasks whose work is a real process, the Mcycles it really
        did in the cycle (its CPU time at the node's speed): their work done, virtual
        clock (eq. 4's ``x_bar``) and report use it instead of the grant, so every
        subtask has one virtual clock, kept here. Their grants still say what the
        scheduler gave them (the live runtime sets the next cycle's CPU share from it).
        """
        if not math.isfinite(cycle) or cycle <= 0:
            raise ValueError(f"cycle: must be a finite number of seconds > 0, got {cycle!r}")
        return self._account(real_time, cycle, self._split(real_time, cycle), measured)

    # ---------------------------------------------------------------- the split
    def _split(self, real_time: float, cycle: float) -> Split:
        """Split the CPU of the cycle of ``cycle`` s ending at ``real_time`` (s) among the
        running entries, rules 1-3 of the module docstring; waiting entries whose slot
        freed start first."""
        node = self.node
        capacity = node.cpu_rate * cycle
        full_cpu = node.speed_mhz * min(1.0, node.cores) * cycle  # one core, full speed
        self._start_waiting(real_time - cycle)
        entries = [e for e in self._entries.values() if e.subtask.finish_time is None]
        by_queue: dict[QueueName, list[Entry]] = {q: [] for q in _QUEUES}
        # CPU each entry could use this cycle (Mcycles): its cores at full speed, capped
        # by the work it has left.
        cap: dict[Key, float] = {}
        n_virtual = 0
        paced = self.config.virtual_mode is VirtualSubtaskMode.PACED
        released = 0.0  # QoS demand (Mcycles) the rate caps hold back this cycle
        uncapped: dict[Key, float] = {}  # demand of capped entries without cap
        limits_of = self._demand_limits
        useful_of = self._useful_caps if self.config.useful_caps else None
        limits: list[tuple[Entry, Subtask, Key, float, float | None]] = []
        for e in entries:
            s = e.subtask
            by_queue[e.queue].append(e)
            cores = s.demand.cpu
            per = full_cpu if cores == 1.0 else min(cores, node.cores) * node.speed_mhz * cycle
            left = s.work - s.done_work
            c = left if left < per else per
            if limits_of:
                lim = limits_of.get(e.key)
                if lim is not None and lim < c:
                    c = lim if lim > 0.0 else 0.0
            rate_cap = None
            if paced:
                rc = s.rate_cap
                if useful_of:
                    u = useful_of.get(e.key)
                    if u is not None and (rc <= 0 or u < rc):
                        rc = u
                if rc > 0:
                    uncapped[e.key] = c
                    rate_cap = rc * cycle
                    if rate_cap < c:
                        released += c - rate_cap
                        c = rate_cap
            elif s.virtual_weight > 0 and e.queue is QueueName.QOS:
                n_virtual += 1
            cap[e.key] = c
            limits.append((e, s, e.key, per, rate_cap))

        queue_demand: list[float] = []
        for q in _QUEUES:
            d = sum(cap[e.key] for e in by_queue[q])
            if q is QueueName.QOS:
                # A virtual subtask may hold the whole node (a weight holder, not a
                # process): were it capped at one core, on a node whose QoS share is more
                # than a core the slowed subtask would keep the rest whatever its weight.
                d += capacity * n_virtual
            queue_demand.append(min(d, capacity))

        # Rule 1: the queues.
        queue_cpu = self._split_queues(capacity, queue_demand)
        lendable = 0.0
        qos_share_cpu = self._queue_shares[_QUEUES.index(QueueName.QOS)] * capacity
        if released > 0 and self.config.lend_paced and not self.config.work_conserving:
            # The QoS share the caps left unused (beyond what the queue could not have used
            # anyway) is lent to the other queues: a slow-down does not idle the CPU.
            qi = _QUEUES.index(QueueName.QOS)
            wanted = min(queue_demand[qi] + released, capacity)
            lendable = max(
                0.0, min(wanted, qos_share_cpu) - min(queue_demand[qi], qos_share_cpu)
            )

        # Rule 2: inside each queue (with its virtual subtasks).
        granted: dict[Key, float] = {}
        virtual_idle = 0.0
        queue_idle: dict[QueueName, float] = {}
        for q in _QUEUES:
            members = by_queue[q]
            if not members or queue_cpu[q] <= 0:
                continue
            idle = self._share_queue(members, queue_cpu[q], cap, q, full_cpu, capacity, granted)
            queue_idle[q] = idle
            virtual_idle += idle

        # Rule 3: what the virtual subtasks and the rate caps leave.
        lent = 0.0
        lent_virtual = False
        if self.config.virtual_mode is VirtualSubtaskMode.WORK_CONSERVING and virtual_idle > 0:
            lent_virtual = True
            lent = self._lend(
                by_queue[QueueName.BEST_EFFORT], virtual_idle, cap, granted
            )
            virtual_idle -= lent
        lent_from_qos = 0.0
        if lendable > 0:
            lent_from_qos = self._lend_to_queues(by_queue, lendable, cap, granted)
            lent += lent_from_qos
        borrow = paced and self.config.borrow_idle and not self.config.work_conserving
        borrowed = False
        if borrow:
            idle = capacity - sum(queue_cpu.values()) - lent
            if idle > 1e-9 * capacity:
                borrowed = True
                lent += self._lend(by_queue[QueueName.QOS], idle, cap, granted)

        available: dict[Key, float] | None = None
        if uncapped:
            available = self._available_uncapped(
                by_queue[QueueName.QOS], uncapped, cap, queue_demand, released, capacity,
                full_cpu, borrow,
            )
        return Split(
            entries, granted, queue_cpu, virtual_idle, lent, capacity, available, cap,
            uncapped, by_queue, queue_demand, released, lendable, n_virtual, queue_idle,
            lent_virtual, borrowed, limits,
        )

    def _split_queues(self, capacity: float, demand: list[float]) -> dict[QueueName, float]:
        """Rule 1: the CPU of each queue (Mcycles) given each queue's demand, by the
        queue weights; work conserving, weighted max-min over the queues."""
        shares = self._queue_shares
        if self.config.work_conserving:
            alloc = water_fill(capacity, demand, shares)
            return dict(zip(_QUEUES, alloc))
        return {q: min(d, w * capacity) for q, d, w in zip(_QUEUES, demand, shares)}

    def _share_queue(
        self,
        members: list[Entry],
        queue_cpu: float,
        cap: Mapping[Key, float],
        queue: QueueName,
        full_cpu: float,
        capacity: float,
        granted: dict[Key, float],
    ) -> float:
        """Rule 2: split ``queue_cpu`` Mcycles among a queue's entries (and its virtual
        subtasks, which may hold the whole node), writing each real entry's grant into
        ``granted``; return what the virtual subtasks held (Mcycles)."""
        weights: list[float] = []
        demands: list[float] = []
        multi = False
        for e in members:
            s = e.subtask
            weights.append(s.weight if s.weight > 1e-9 else 1e-9)
            demands.append(cap[e.key])
            if not multi and not e.cpu_only:
                multi = True
        n_real = len(members)
        if queue is QueueName.QOS:
            for e in members:
                vw = e.subtask.virtual_weight
                if vw > 0:
                    # Floored like the real weights: a subnormal weight overflows the split.
                    weights.append(vw if vw > 1e-9 else 1e-9)
                    demands.append(capacity)
        if multi:
            alloc = self._drf_share(members, demands, weights, queue_cpu, full_cpu, capacity)
        else:
            alloc = water_fill(queue_cpu, demands, weights)
        for i in range(n_real):
            granted[members[i].key] = alloc[i]
        return float(sum(alloc[n_real:]))

    def _drf_share(
        self,
        members: list[Entry],
        demands: list[float],
        weights: list[float],
        queue_cpu: float,
        full_cpu: float,
        capacity: float,
    ) -> list[float]:
        """Divisible weighted DRF inside a queue whose entries have memory or IO demands.

        One "task" of an entry is the entry running at its CPU cap for the cycle; it then
        uses its memory and IO in proportion to that cap (a fraction of full speed). The
        queue's memory and IO pools are its CPU fraction of the node's."""
        rows: list[list[float]] = []
        for i, c in enumerate(demands):
            if i < len(members):
                d = members[i].subtask.demand
                # Fraction of the entry's own full speed (all its cores), not of one core.
                full = min(d.cpu, self.node.cores) * full_cpu
                frac = c / full if full > 0 else 0.0
                rows.append([c, d.memory_mb * frac, d.io_mbps * frac])
            else:
                rows.append([c, 0.0, 0.0])
        fraction = queue_cpu / capacity if capacity > 0 else 0.0
        pool = [queue_cpu, self.node.memory_mb * fraction, self.node.io_mbps * fraction]
        live = [i for i, r in enumerate(rows) if r[0] > 0]
        out = [0.0] * len(rows)
        if not live:
            return out
        result = drf(
            pool,
            [rows[i] for i in live],
            weights=[weights[i] for i in live],
            max_tasks=[1.0] * len(live),
            divisible=True,
        )
        for i, t in zip(live, result.tasks):
            out[i] = t * rows[i][0]
        return out

    @staticmethod
    def _lend(
        members: list[Entry],
        spare: float,
        cap: Mapping[Key, float],
        granted: dict[Key, float],
    ) -> float:
        """Rule 3: give up to ``spare`` Mcycles to the unmet demand of ``members`` (one
        queue's entries), by their weights; returns what was given."""
        if not members:
            return 0.0
        unmet = [max(0.0, cap[e.key] - granted.get(e.key, 0.0)) for e in members]
        total = sum(unmet)
        if total <= 0:
            return 0.0
        weights = [max(e.subtask.weight, 1e-9) for e in members]
        extra = water_fill(min(spare, total), unmet, weights)
        for e, x in zip(members, extra):
            granted[e.key] = granted.get(e.key, 0.0) + x
        return float(sum(extra))

    def _lend_to_queues(
        self,
        by_queue: Mapping[QueueName, list[Entry]],
        spare: float,
        cap: Mapping[Key, float],
        granted: dict[Key, float],
    ) -> float:
        """Rule 3, pace control: lend up to ``spare`` Mcycles of QoS share to the unmet
        demand of the best-effort and grid-local queues, split between them by their queue
        weights (water filling, each capped by its unmet demand); returns what was lent."""
        targets = (QueueName.BEST_EFFORT, QueueName.LOCAL)
        unmet = [
            sum(max(0.0, cap[e.key] - granted.get(e.key, 0.0)) for e in by_queue[q])
            for q in targets
        ]
        if sum(unmet) <= 0:
            return 0.0
        shares = [self._queue_shares[_QUEUES.index(q)] for q in targets]
        split = water_fill(min(spare, sum(unmet)), unmet, shares)
        lent = 0.0
        for q, amount in zip(targets, split):
            if amount > 0:
                lent += self._lend(by_queue[q], amount, cap, granted)
        return lent

    def _available_uncapped(
        self,
        qos: list[Entry],
        uncapped: Mapping[Key, float],
        cap: Mapping[Key, float],
        queue_demand: list[float],
        released: float,
        capacity: float,
        full_cpu: float,
        borrow: bool,
    ) -> dict[Key, float]:
        """What each capped QoS subtask would get this cycle were every rate cap on the
        node lifted at once (Mcycles; ``available_work``, ``docs/model.md`` "What a node
        can give"): the queues split the node with the QoS queue's uncapped demand, so
        what the caps passed on to the grid-local and best-effort queues (or left idle,
        where idle CPU may be borrowed) is the QoS queue's to take back; inside the queue
        the subtasks share it by weight as they would uncapped.

        Every capped subtask on the node is counted as a competitor, not only the one
        asking: the controller shares what a node can give among the gangs that need it
        (:func:`coallocator.controller.gang_paces`), so each report says the node's fair
        level, not a claim on everything the others leave."""
        qi = _QUEUES.index(QueueName.QOS)
        lifted_demand = min(queue_demand[qi] + released, capacity)
        if self.config.work_conserving:
            lifted = list(queue_demand)
            lifted[qi] = lifted_demand
            qos_cpu = self._split_queues(capacity, lifted)[QueueName.QOS]
        elif borrow:
            others = sum(
                min(d, w * capacity)
                for q, d, w in zip(_QUEUES, queue_demand, self._queue_shares)
                if q is not QueueName.QOS
            )
            qos_cpu = min(lifted_demand, capacity - others)
        else:
            qos_cpu = min(lifted_demand, self._queue_shares[qi] * capacity)
        demands = dict(cap)
        demands.update(uncapped)
        shares: dict[Key, float] = {}
        self._share_queue(qos, qos_cpu, demands, QueueName.QOS, full_cpu, capacity, shares)
        return {key: shares.get(key, 0.0) for key in uncapped}

    def qos_capacity(self, cycle: float) -> float:
        """The CPU rate (Mcycles/s) the grid QoS queue would get in a cycle of ``cycle`` s
        starting now were its demand the whole node (``C`` of ``docs/model.md``
        "Admission"): the node's rate less what the grid-local and best-effort queues hold
        against it. Work-conserving queues give the QoS queue what the others leave (the
        whole node when they are empty); queues that are not work-conserving give it its
        share, whatever the others do.

        What admission by measured capacity
        (:class:`global_manager.admission.MeasuredCapacityAdmission`) reads: it depends on
        the other queues' running entries and the work they have left, never on the QoS
        queue's own subtasks, so admitting more strict work does not change it."""
        if not math.isfinite(cycle) or cycle <= 0:
            raise ValueError(f"cycle: must be a finite number of seconds > 0, got {cycle!r}")
        node = self.node
        capacity = node.cpu_rate * cycle
        qi = _QUEUES.index(QueueName.QOS)
        if not self.config.work_conserving:
            return self._queue_shares[qi] * capacity / cycle
        full_cpu = node.speed_mhz * min(1.0, node.cores) * cycle
        demand = [0.0] * len(_QUEUES)
        for e in self._entries.values():
            s = e.subtask
            if e.queue is QueueName.QOS or s.finish_time is not None:
                continue
            cores = s.demand.cpu
            per = full_cpu if cores == 1.0 else min(cores, node.cores) * node.speed_mhz * cycle
            left = s.work - s.done_work
            demand[_QUEUES.index(e.queue)] += left if left < per else per
        for i, d in enumerate(demand):
            demand[i] = min(d, capacity)
        demand[qi] = capacity
        return self._split_queues(capacity, demand)[QueueName.QOS] / cycle

    # ------------------------------------------------------------- the clocks
    def _book(
        self,
        real_time: float,
        cycle: float,
        entries: Iterable[Entry],
        granted: Mapping[Key, float],
        available: Mapping[Key, float] | None,
        measured: Mapping[Key, float] | None,
        all_rows: bool = True,
    ) -> Booking:
        """Rule 4, the booking loop of every cycle (the simulator's lean path books with it
        too, so both give the same bits): on ``entries``, in their order, book the cycle
        of ``cycle`` s ending at ``real_time`` (s) whose grants are ``granted`` (Mcycles):
        work done, eqs. (4)-(5) on each virtual clock, finishes. ``available``: per
        capped subtask, the Mcycles it could have had without its cap (reported as
        ``available_work``; the others report their grant). ``measured``: work a process
        really did (replaces the grant in the work done and the clock). ``all_rows`` off:
        rows only for the grid QoS entries."""
        used = 0.0
        rows: list[BookedRow] = []
        qos_granted: list[float] = []
        finished: list[Key] = []
        qos = QueueName.QOS
        grant_of = granted.get
        for e in entries:
            s = e.subtask
            key = e.key
            left = s.work - s.done_work
            # Expected work in the cycle (x of eq. 4): the admitted rate, but never more
            # than the work left, so a subtask finishing mid-cycle is not "late".
            per = s.expected_rate * cycle
            x = per if per < left else left
            g = grant_of(key, 0.0)
            # Work really done (x_bar): what a process measured, else the grant.
            w = measured[key] if measured is not None and key in measured else g
            s.done_work += w
            clock = e.clock
            if x > 0 and w >= 0 and real_time >= clock.previous_real_time:
                # Eqs. (4)-(5) as VirtualClock.advance computes them, written here because
                # this loop runs for every entry of every cycle.
                clock.virtual_time += (w / x) * (real_time - clock.previous_real_time)
                clock.previous_real_time = real_time
                tv = clock.virtual_time
            elif x > 0:
                tv = clock.advance(real_time, x, w)  # raises
            else:
                tv = clock.advance(real_time, 0, 0)
            done = left - w <= WORK_EPSILON
            used += g
            if done:
                s.done_work = s.work
                s.finish_time = real_time
                finished.append(key)
            if e.queue is qos:
                qos_granted.append(g)
                a = available[key] if available is not None and key in available else g
                rows.append((qos, s.job_id, s.index, x, g, w, tv, done, a))
            elif all_rows:
                rows.append((e.queue, s.job_id, s.index, x, g, w, tv, done, g))
        return used, qos_granted, finished, rows

    def _account(
        self,
        real_time: float,
        cycle: float,
        split: Split,
        measured: Mapping[Key, float] | None,
    ) -> CycleResult:
        """Book the cycle (:meth:`_book`) and return it as a :class:`CycleResult`: a grant
        per entry, a progress report per grid QoS subtask."""
        node_name = self.node.name
        used, _, finished, rows = self._book(
            real_time, cycle, split.entries, split.granted, split.available, measured
        )
        qos = QueueName.QOS
        incarnation = self.incarnation
        seq = self._seq
        grants: list[Grant] = []
        reports: list[ProgressReport] = []
        for queue, job_id, index, x, g, w, tv, done, a in rows:
            grants.append(Grant(job_id, index, queue, x, g, tv))
            if queue is qos:
                seq += 1
                reports.append(
                    ProgressReport(
                        job_id, index, node_name, incarnation, seq, real_time, tv, x, w, done, a
                    )
                )
        self._seq = seq
        return CycleResult(
            node=node_name,
            real_time=real_time,
            grants=tuple(grants),
            reports=tuple(reports),
            finished=tuple(finished),
            queue_cpu=split.queue_cpu,
            virtual_idle=split.virtual_idle,
            lent_to_best_effort=split.lent,
            used=used,
            capacity=split.capacity,
        )


# Compiled (workloads/native.py), a frozen record needs its constructor to be unpickled.
picklable_frozen_records(globals())
