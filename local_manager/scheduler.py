"""The per-node local scheduler core (LRMS), ``docs/model.md`` §3, "Local scheduler".

No I/O and no wall clock: the driver (simulator or live actor) calls :meth:`LocalScheduler.step`
once per scheduling cycle with the real time at the end of the cycle.

Each cycle of length ``q`` seconds the node offers ``speed_mhz * cores * q`` Mcycles:

1. The three queues (grid-local, grid QoS, best effort) get CPU by their weights
   (0.3 / 0.5 / 0.2 by default). In work-conserving mode a queue that cannot use its
   share passes it to the others in proportion to their weights (weighted max-min over
   queues, capped by each queue's demand); otherwise an unused share stays idle.
2. Inside a queue the share is split among entries by weighted max-min on CPU when every
   entry is CPU-only, or by the divisible weighted DRF when some entry has a demand
   vector (memory, IO); each entry is capped by its demand. A queue's share of memory
   and IO is the same fraction of the node as its CPU share.
3. Virtual subtasks sit in the QoS queue with their own weight. In ``idle`` mode (the
   paper) the CPU they win stays idle, so slowing one subtask does not speed up its
   neighbours. In ``work_conserving`` mode it is lent to the best-effort queue for this
   cycle only, so it is "taken back at once" the next cycle. In ``paced`` mode (pace
   control) virtual subtasks are bookkeeping only and take no CPU: a slowed subtask is
   held to its ``rate_cap`` instead, what it leaves goes to the other QoS entries first
   (the queue's water filling), and what the QoS queue then leaves unused *because of
   the caps* is lent, this cycle only, to the best-effort and grid-local queues (by their
   queue weights, each capped by its unmet demand), even when the queues are not
   work-conserving: a slow-down never idles the CPU. Conversely CPU that no queue uses
   in the cycle goes to QoS subtasks that want more (``borrow_idle``; a capped one only
   up to its cap), so the subtask that bounds its job's pace is not held to the QoS
   share of an otherwise idle node.
4. Every placed subtask's virtual clock advances by eqs. (4)-(5); a progress report is
   emitted for every grid QoS subtask.
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

#: The most cycles a quiet countdown (:meth:`LocalScheduler._can_replay`) runs before the
#: quiet test is computed afresh (keeps its rounding margin far below one cycle).
_COUNTDOWN_CAP = 1_000_000


class VirtualSubtaskMode(str, Enum):
    """What happens to the CPU share a virtual subtask wins (``docs/model.md`` §3,
    "Controller", step 5)."""

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
    finished: tuple[tuple[str, int], ...]
    queue_cpu: Mapping[QueueName, float]
    virtual_idle: float
    lent_to_best_effort: float
    used: float
    capacity: float


#: One entry's cycle as :meth:`LocalScheduler._book` booked it: (queue, job id, subtask
#: index, expected work x, granted work, work done, T_V after the cycle (s), finished,
#: available work for the report), work in Mcycles.
BookedRow = tuple[QueueName, str, int, float, float, float, float, bool, float]


@dataclass(slots=True, init=False)
class LeanCycle:
    """A cycle as :meth:`LocalScheduler.step_lean` returns it: ``used`` (Mcycles, the
    sum of the grants in entry order, as :attr:`CycleResult.used`), the grants of the
    grid QoS entries in entry order (``qos_granted``), the finished keys, one
    :data:`BookedRow` per grid QoS entry and what the virtual subtasks held idle
    (Mcycles)."""

    used: float
    qos_granted: list[float]
    finished: list[tuple[str, int]]
    rows: list[BookedRow]
    virtual_idle: float
    #: :meth:`LocalScheduler._book`'s ``quiet_bound`` answer (-1: not asked).
    quiet: int

    # Written out (not generated): one per node per cycle, and a generated constructor
    # stays interpreted when compiled (docs/decisions.md, "Issue 17, seventh pass").
    def __init__(
        self,
        used: float,
        qos_granted: list[float],
        finished: list[tuple[str, int]],
        rows: list[BookedRow],
        virtual_idle: float = 0.0,
        quiet: int = -1,
    ) -> None:
        self.used = used
        self.qos_granted = qos_granted
        self.finished = finished
        self.rows = rows
        self.virtual_idle = virtual_idle
        self.quiet = quiet


@dataclass(slots=True)
class _SplitInputs:
    """What a fresh split (:meth:`LocalScheduler._fresh_split`) read of the entries' work
    left and which of its steps read their caps: kept so that a later cycle in which
    only some caps moved (an entry near its end) can be shown to split the same
    (:meth:`LocalScheduler._near_end_split`). CPU in Mcycles per cycle. Mutable: the
    proof brings ``cap`` up to date as it goes (a split it fails on is dropped)."""

    #: Each running entry's CPU cap (its cores at full speed or its work left, and its
    #: rate cap under pace control), by key.
    cap: dict[tuple[str, int], float]
    #: Under pace control, each rate-capped entry's cap before its rate cap.
    uncapped: dict[tuple[str, int], float]
    by_queue: Mapping[QueueName, list[_Entry]]
    #: Each queue's demand (capped by the node's capacity), in queue order.
    queue_demand: list[float]
    #: The QoS demand the rate caps held back, and the QoS share lent on for it.
    released: float
    lendable: float
    #: Virtual subtasks counted in the QoS queue's demand (not paced).
    n_virtual: int
    #: What each queue's virtual subtasks held (Mcycles).
    queue_idle: Mapping[QueueName, float]
    #: Whether the work-conserving virtual subtasks lent to the best-effort queue, and
    #: whether idle CPU was lent to the QoS queue (both read those queues' caps).
    lent_virtual: bool
    borrowed: bool
    #: Per running entry in order: the entry, its subtask, its key, its cores at full
    #: speed for the cycle and, when pace control caps it, its rate cap for the cycle
    #: (Mcycles; the factors of :meth:`LocalScheduler._fresh_split`'s cap).
    rows: list[tuple[_Entry, Subtask, tuple[str, int], float, float | None]]


@dataclass(slots=True)
class _LastCycle:
    cycle: float
    granted: Mapping[tuple[str, int], float]
    queue_cpu: Mapping[QueueName, float]
    virtual_idle: float
    lent: float
    available: Mapping[tuple[str, int], float] | None = None
    #: What the split read (``None``: not kept; :meth:`LocalScheduler.step` keeps none).
    inputs: _SplitInputs | None = None
    #: Replayed by :meth:`LocalScheduler._near_end_split` (an entry is near its end: the
    #: quiet test fails until the split is dropped).
    near_end: bool = False
    #: The running entries, in order (kept with ``inputs``).
    entries: list[_Entry] | None = None


def _same_float(a: float, b: float) -> bool:
    """Whether two floats are the same number, the sign of a zero included."""
    return a == b and (a != 0.0 or math.copysign(1.0, a) == math.copysign(1.0, b))


class _Entry:
    """A placed subtask with its virtual clock (mutable, owned by the scheduler)."""

    __slots__ = ("subtask", "clock", "queue", "key", "cpu_only")

    def __init__(self, subtask: Subtask, start: float) -> None:
        self.subtask = subtask
        self.clock = VirtualClock(start)
        self.queue = queue_of(subtask.qos)
        # Fixed for the entry's life (the hot loops read them every cycle).
        self.key = subtask.key
        self.cpu_only = subtask.demand.is_cpu_only


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
        self._entries: dict[tuple[str, int], _Entry] = {}
        self._waiting: dict[QueueName, dict[tuple[str, int], _Entry]] = {q: {} for q in _QUEUES}
        self._seq = 0
        # The last cycle's outcome, kept while nothing that decides the split has changed,
        # so that quiet cycles can be replayed in one go (fast_forward).
        self._last: _LastCycle | None = None
        # (the _LastCycle it is about, cycles it is still known to replay): _can_replay.
        self._quiet_known: tuple[_LastCycle, int] | None = None
        # (a _LastCycle, quiet_cycles(cycle, 0) for it), found while booking it.
        self._quiet_next: tuple[_LastCycle, int] | None = None
        # Per (queue, uncapped split): the last water filling's capacity, demands, weights
        # and allocation (_share_queue).
        self._fill_cache: dict[
            tuple[QueueName, bool], tuple[float, list[float], list[float], list[float]]
        ] = {}
        # What the last fresh split read (_fresh_split; kept by step_lean in _LastCycle).
        self._split_inputs: _SplitInputs | None = None
        #: :meth:`step_lean` replays the last split through cycles in which an entry near
        #: its end moved its cap when the split is shown to be the same
        #: (:meth:`_near_end_split`); off: such cycles compute the split afresh. The
        #: simulator's switch (``SimConfig.replay_near_end``); :meth:`step` never does.
        self.replay_near_end = True
        #: How many cycles computed their split afresh (the others replayed one): what the
        #: simulator's speed depends on, counted for tests and profiles.
        self.fresh_splits = 0

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
        entry = _Entry(subtask, now)
        cap = self.config.max_running.get(entry.queue)
        if cap is not None and (self._waiting[entry.queue] or self._running(entry.queue) >= cap):
            self._waiting[entry.queue][subtask.key] = entry
        else:
            self._entries[subtask.key] = entry
        self._last = None

    def _find(self, key: tuple[str, int]) -> _Entry | None:
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
                self._last = None

    @property
    def waiting(self) -> int:
        """How many entries wait for a slot."""
        return sum(len(w) for w in self._waiting.values())

    def remove(self, key: tuple[str, int]) -> Subtask | None:
        """Take a subtask (and its virtual subtask) off the node; ``None`` if absent."""
        entry = self._entries.pop(key, None)
        if entry is None:
            for waiting in self._waiting.values():
                entry = waiting.pop(key, None)
                if entry is not None:
                    break
        self._last = None
        return entry.subtask if entry else None

    def remove_job(self, job_id: str) -> list[Subtask]:
        """Take every subtask of ``job_id`` off the node (cancel)."""
        keys = [k for k in self._entries if k[0] == job_id]
        keys += [k for w in self._waiting.values() for k in w if k[0] == job_id]
        out = [s for s in (self.remove(k) for k in keys) if s is not None]
        self._last = None
        return out

    def set_weights(
        self, key: tuple[str, int], weight: float, virtual_weight: float, rate_cap: float = 0.0
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
            self._last = None
        s.weight = weight
        s.virtual_weight = virtual_weight
        s.rate_cap = rate_cap
        return True

    def restore_clock(self, key: tuple[str, int], virtual_time: float, real_time: float) -> None:
        """Set a subtask's virtual clock to ``virtual_time`` as of real time ``real_time``
        (s): a restarted local manager resumes it from its checkpoint (KeyError if absent)."""
        entry = self._find(key)
        if entry is None:
            raise KeyError(key)
        entry.clock.virtual_time = float(virtual_time)
        entry.clock.previous_real_time = float(real_time)
        self._last = None

    def subtasks(self) -> list[Subtask]:
        """The subtasks on the node: running ones in placement order, then waiting ones."""
        out = [e.subtask for e in self._entries.values()]
        for waiting in self._waiting.values():
            out.extend(e.subtask for e in waiting.values())
        return out

    def get(self, key: tuple[str, int]) -> Subtask | None:
        entry = self._find(key)
        return entry.subtask if entry else None

    def virtual_time(self, key: tuple[str, int]) -> float:
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
        booked and each virtual clock stays where it was (eq. 4 with ``x-bar = 0``)."""
        for e in self._entries.values():
            if e.subtask.finish_time is None and real_time > e.clock.previous_real_time:
                e.clock.advance(real_time, 1.0, 0.0)
        self._last = None

    # ---------------------------------------------------------------------- cycle
    def step(
        self,
        real_time: float,
        cycle: float,
        measured: Mapping[tuple[str, int], float] | None = None,
    ) -> CycleResult:
        """Run one scheduling cycle of ``cycle`` seconds ending at ``real_time`` (s).

        Grants CPU, advances done work and virtual clocks, marks finished subtasks
        (their ``finish_time`` is ``real_time``; they stay on the node until removed)
        and returns what happened.

        ``measured``: for subtasks whose work is a real process, the Mcycles it really
        did in the cycle (its CPU time at the node's speed): their work done, virtual
        clock (eq. 4's granted work ``x-bar``) and report use it instead of the grant, so
        every subtask has one virtual clock, kept here. Their grants still say what the
        scheduler gave them (the live runtime sets the next cycle's CPU share from it).
        """
        if not math.isfinite(cycle) or cycle <= 0:
            raise ValueError(f"cycle: must be a finite number of seconds > 0, got {cycle!r}")
        if not measured and self._can_replay(cycle):
            # Nothing that decides the split has changed since the last cycle: replay it
            # (the same grants a fresh split would compute, without computing them).
            result = self._replay(1, cycle, real_time)
            if result.finished:
                self._last = None
            return result
        entries, granted, queue_cpu, virtual_idle, lent, capacity, available = (
            self._fresh_split(real_time, cycle)
        )
        result = self._account(
            real_time, cycle, entries, granted, queue_cpu, virtual_idle, lent, capacity,
            available=available, measured=measured,
        )
        self._last = (
            None
            if result.finished
            else _LastCycle(cycle, granted, queue_cpu, virtual_idle, lent, available)
        )
        return result

    def step_lean(self, real_time: float, cycle: float) -> LeanCycle:
        """:meth:`step` for the simulator: the same cycle with the same arithmetic (one
        booking loop, :meth:`_book`), returned as plain figures instead of grant and
        report records. The scheduler's state afterwards is the one :meth:`step` leaves.

        Beyond :meth:`step`'s replays, a cycle in which only the caps of entries near
        their end moved replays the last split when :meth:`_near_end_split` shows the
        split would be the same to the bit (``replay_near_end``)."""
        last = self._last
        if last is not None and last.near_end and last.cycle == cycle:
            # The quiet test failed on the last cycle already (an entry near its end);
            # it fails until a finish or a change drops the split: go to the proof.
            held = self._near_end_split(cycle) if self.replay_near_end else None
            if held is None:
                return self._fresh_lean(real_time, cycle)
            return self._replay_lean(held, real_time, cycle)
        if self._can_replay(cycle):
            last = self._last
            assert last is not None
            entries = last.entries
            if entries is None:
                entries = [e for e in self._entries.values() if e.subtask.finish_time is None]
            out = self._book(real_time, cycle, entries, last.granted, last.available, None,
                             all_rows=False)
            self._seq += len(out.qos_granted)
            if out.finished:
                self._last = None
            else:
                out.virtual_idle = last.virtual_idle * 1.0
            return out
        if self.replay_near_end and last is not None and last.inputs is not None:
            held = self._near_end_split(cycle)
            if held is not None:
                return self._replay_lean(held, real_time, cycle)
        return self._fresh_lean(real_time, cycle)

    def _fresh_lean(self, real_time: float, cycle: float) -> LeanCycle:
        """:meth:`step_lean`'s cycle with a split computed afresh."""
        entries, granted, queue_cpu, virtual_idle, lent, capacity, available = (
            self._fresh_split(real_time, cycle)
        )
        out = self._book(real_time, cycle, entries, granted, available, None, quiet_bound=True,
                         all_rows=False)
        self._seq += len(out.qos_granted)
        out.virtual_idle = virtual_idle * 1.0
        if out.finished:
            self._last = None
        else:
            self._last = _LastCycle(
                cycle, granted, queue_cpu, virtual_idle, lent, available, self._split_inputs,
                entries=entries,
            )
            # quiet_cycles(cycle, 0) of the next cycle, already known (nothing changes the
            # state it reads but what also drops _last: add, remove, re-weight).
            self._quiet_next = (self._last, out.quiet)
        return out

    def _replay_lean(self, held: _LastCycle, real_time: float, cycle: float) -> LeanCycle:
        """:meth:`step_lean`'s cycle with the split ``held`` (shown to be this cycle's by
        :meth:`_near_end_split`), which becomes the last split."""
        self._last = held
        entries = held.entries
        assert entries is not None
        out = self._book(real_time, cycle, entries, held.granted, held.available, None,
                         all_rows=False)
        self._seq += len(out.qos_granted)
        out.virtual_idle = held.virtual_idle * 1.0  # as the fresh split's cycle says it
        if out.finished:
            self._last = None
        return out

    def _near_end_split(self, cycle: float) -> _LastCycle | None:
        """The last split as this cycle's, when it is shown to be what
        :meth:`_fresh_split` would compute now, to the bit; ``None`` when that is not
        shown (then compute it).

        Nothing that decides the split changed since it was computed but the work the
        entries did (any add, remove, re-weight or finish drops the last split), so only
        the caps of entries with less than a full-speed cycle of work left can have moved.
        The proof, for queues that are not work-conserving: the rate-capped entries'
        caps before their rate caps did not move (so neither did what the caps release,
        nor the uncapped estimates they feed); in each queue where a cap moved, the
        queue's demand (the same sum in the same order) gives the queue the same CPU, no
        step that reads the queue's caps besides its own water filling ran (lending to
        it, borrowing idle CPU into it, the uncapped estimates of the QoS queue, DRF),
        and that water filling, computed again on the new caps, gives every entry and
        the virtual subtasks the same figures. Every other step of the split reads the
        same numbers as before, so it does the same operations on them."""
        last = self._last
        if last is None or last.cycle != cycle or self.config.work_conserving:
            return None
        inputs = last.inputs
        if inputs is None:
            return None
        cap = inputs.cap
        uncapped = inputs.uncapped
        copysign = math.copysign
        moved: list[QueueName] = []
        uncapped_moved = False
        for e, s, key, per, rate_cap in inputs.rows:
            # _fresh_split's cap, the same arithmetic.
            left = s.work - s.done_work
            c = left if left < per else per
            if rate_cap is not None:
                u = uncapped[key]
                if c != u or (c == 0.0 and copysign(1.0, c) != copysign(1.0, u)):
                    uncapped[key] = c
                    uncapped_moved = True
                if rate_cap < c:
                    c = rate_cap
            o = cap[key]
            if c != o or (c == 0.0 and copysign(1.0, c) != copysign(1.0, o)):
                cap[key] = c
                if e.queue not in moved:
                    moved.append(e.queue)
        last.near_end = True
        if not moved and not uncapped_moved:
            return last
        node = self.node
        full_cpu = node.speed_mhz * min(1.0, node.cores) * cycle
        capacity = node.cpu_rate * cycle
        shares = self._queue_shares
        qos = QueueName.QOS
        qi = _QUEUES.index(qos)
        queue_demand = list(inputs.queue_demand)
        for q in moved:
            members = inputs.by_queue[q]
            if q is qos:
                if inputs.borrowed:
                    return None
            elif inputs.lendable > 0 or (q is QueueName.BEST_EFFORT and inputs.lent_virtual):
                return None
            for e in members:
                if not e.cpu_only:
                    return None
            d = sum(cap[e.key] for e in members)
            if q is qos:
                d += capacity * inputs.n_virtual
            qn = _QUEUES.index(q)
            demand = queue_demand[qn] = min(d, capacity)
            queue_cpu = min(demand, shares[qn] * capacity)  # _split_queues, not conserving
            if not _same_float(queue_cpu, last.queue_cpu[q]):
                return None
            if queue_cpu <= 0:
                continue  # not shared: no grant before or now
            fill: dict[tuple[str, int], float] = {}
            idle = self._share_queue(members, queue_cpu, cap, q, full_cpu, capacity, fill)
            if not _same_float(idle, inputs.queue_idle[q]):
                return None
            granted = last.granted
            for e in members:
                if not _same_float(fill[e.key], granted[e.key]):
                    return None
        if not uncapped_moved and qos not in moved:
            return last
        # What the rate caps release and the QoS share lent on for it: _fresh_split's
        # sums in its order; the lending must be the same (it read the other queues' caps).
        released = 0.0
        if uncapped_moved:
            for _e, s, key, _per, rate_cap in inputs.rows:
                if rate_cap is not None:
                    c = uncapped[key]
                    if s.rate_cap * cycle < c:
                        released += c - s.rate_cap * cycle
        else:
            released = inputs.released
        lendable = 0.0
        if released > 0 and self.config.lend_paced:
            qos_share_cpu = shares[qi] * capacity
            wanted = min(queue_demand[qi] + released, capacity)
            lendable = max(
                0.0, min(wanted, qos_share_cpu) - min(queue_demand[qi], qos_share_cpu)
            )
        if not _same_float(lendable, inputs.lendable):
            return None
        inputs.released = released
        inputs.queue_demand = queue_demand
        if last.available is None:
            return last
        # The uncapped estimates are the split's own output, computed afresh on the
        # grants shown to be the same.
        borrow = self.config.borrow_idle  # paced and not work-conserving here
        available = self._available_uncapped(
            inputs.by_queue[qos], uncapped, cap, queue_demand, released, capacity, full_cpu,
            borrow,
        )
        last.available = available
        return last

    def _can_replay(self, cycle: float) -> bool:
        """Whether the last cycle's split holds for one more cycle of ``cycle`` s
        (``quiet_cycles(cycle, 0) >= 1``). A fresh answer ``k`` is kept as a countdown,
        less a margin for the rounding of the work done in between, so the quiet test is
        computed again only near its end: the same answer, not recomputed every cycle."""
        last = self._last
        if last is None or last.cycle != cycle:
            return False
        known = self._quiet_known
        if known is not None and known[0] is last and known[1] >= 1:
            self._quiet_known = (last, known[1] - 1)
            return True
        ahead = self._quiet_next
        self._quiet_next = None  # true only for the cycle right after the booking
        k = ahead[1] if ahead is not None and ahead[0] is last else self.quiet_cycles(cycle, 0)
        if k < 1:
            return False
        # After this cycle k - 1 more are quiet; the work done moves each bound by one
        # cycle up to rounding (at most 2.3e-16 of the bound, <= k, per cycle), kept far
        # below the margin of 2 by how long a countdown may run.
        self._quiet_known = (last, min(k - 3, _COUNTDOWN_CAP, int(1e15 / k)))
        return True

    def _fresh_split(
        self, real_time: float, cycle: float
    ) -> tuple[
        list[_Entry], dict[tuple[str, int], float], dict[QueueName, float], float, float,
        float, dict[tuple[str, int], float] | None,
    ]:
        """Compute this cycle's split from scratch (the module docstring's rules): the
        running entries, their grants (Mcycles), each queue's CPU, what virtual subtasks
        held idle and what was lent (Mcycles), the node's capacity (Mcycles) and, per
        capped QoS subtask, what it would get uncapped (``None``: no caps)."""
        self.fresh_splits += 1
        node = self.node
        capacity = node.cpu_rate * cycle
        full_cpu = node.speed_mhz * min(1.0, node.cores) * cycle  # one core, full speed
        self._start_waiting(real_time - cycle)
        entries = [e for e in self._entries.values() if e.subtask.finish_time is None]
        by_queue: dict[QueueName, list[_Entry]] = {q: [] for q in _QUEUES}
        # CPU each entry could use this cycle (Mcycles): its cores at full speed, capped
        # by the work it has left.
        cap: dict[tuple[str, int], float] = {}
        n_virtual = 0
        paced = self.config.virtual_mode is VirtualSubtaskMode.PACED
        released = 0.0  # QoS demand (Mcycles) the rate caps hold back this cycle
        uncapped: dict[tuple[str, int], float] = {}  # demand of capped entries without cap
        rows: list[tuple[_Entry, Subtask, tuple[str, int], float, float | None]] = []
        for e in entries:
            s = e.subtask
            by_queue[e.queue].append(e)
            cores = s.demand.cpu
            per = full_cpu if cores == 1.0 else min(cores, node.cores) * node.speed_mhz * cycle
            left = s.work - s.done_work
            c = left if left < per else per
            rate_cap = None
            if paced:
                if s.rate_cap > 0:
                    uncapped[e.key] = c
                    rate_cap = s.rate_cap * cycle
                if s.rate_cap > 0 and s.rate_cap * cycle < c:
                    released += c - s.rate_cap * cycle
                    c = s.rate_cap * cycle
            elif s.virtual_weight > 0 and e.queue is QueueName.QOS:
                n_virtual += 1
            cap[e.key] = c
            rows.append((e, s, e.key, per, rate_cap))

        queue_demand: list[float] = []
        for q in _QUEUES:
            d = sum(cap[e.key] for e in by_queue[q])
            if q is QueueName.QOS:
                # A virtual subtask may hold the whole node (a weight holder, not a
                # process): were it capped at one core, on a node whose QoS share is more
                # than a core the slowed subtask would keep the rest whatever its weight.
                d += capacity * n_virtual
            queue_demand.append(min(d, capacity))

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

        granted: dict[tuple[str, int], float] = {}
        virtual_idle = 0.0
        queue_idle: dict[QueueName, float] = {}
        for q in _QUEUES:
            members = by_queue[q]
            if not members or queue_cpu[q] <= 0:
                continue
            idle = self._share_queue(members, queue_cpu[q], cap, q, full_cpu, capacity, granted)
            queue_idle[q] = idle
            virtual_idle += idle

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

        available: dict[tuple[str, int], float] | None = None
        if uncapped:
            available = self._available_uncapped(
                by_queue[QueueName.QOS], uncapped, cap, queue_demand, released, capacity,
                full_cpu, borrow,
            )
        self._split_inputs = _SplitInputs(
            cap, uncapped, by_queue, queue_demand, released, lendable, n_virtual, queue_idle,
            lent_virtual, borrowed, rows,
        )
        return entries, granted, queue_cpu, virtual_idle, lent, capacity, available

    def _available_uncapped(
        self,
        qos: list[_Entry],
        uncapped: Mapping[tuple[str, int], float],
        cap: Mapping[tuple[str, int], float],
        queue_demand: list[float],
        released: float,
        capacity: float,
        full_cpu: float,
        borrow: bool,
    ) -> dict[tuple[str, int], float]:
        """What each capped QoS subtask would get this cycle were every rate cap on the
        node lifted at once (Mcycles): the queues split the node with the QoS queue's
        uncapped demand, so what the caps passed on to the grid-local and best-effort
        queues (or left idle, where idle CPU may be borrowed) is the QoS queue's to take
        back; inside the queue the subtasks share it by weight as they would uncapped.

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
        shares: dict[tuple[str, int], float] = {}
        self._share_queue(qos, qos_cpu, demands, QueueName.QOS, full_cpu, capacity, shares,
                          uncapped=True)
        return {key: shares.get(key, 0.0) for key in uncapped}

    def qos_capacity(self, cycle: float) -> float:
        """The CPU rate (Mcycles/s) the grid QoS queue would get in a cycle of ``cycle`` s
        starting now were its demand the whole node: the node's rate less what the
        grid-local and best-effort queues hold against it. Work-conserving queues give
        the QoS queue what the others leave (the whole node when they are empty); queues
        that are not work-conserving give it its share, whatever the others do.

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

    def _split_queues(self, capacity: float, demand: list[float]) -> dict[QueueName, float]:
        shares = self._queue_shares
        if self.config.work_conserving:
            alloc = water_fill(capacity, demand, shares)
            return dict(zip(_QUEUES, alloc))
        return {q: min(d, w * capacity) for q, d, w in zip(_QUEUES, demand, shares)}

    def _share_queue(
        self,
        members: list[_Entry],
        queue_cpu: float,
        cap: Mapping[tuple[str, int], float],
        queue: QueueName,
        full_cpu: float,
        capacity: float,
        granted: dict[tuple[str, int], float],
        uncapped: bool = False,
    ) -> float:
        """Split ``queue_cpu`` Mcycles among a queue's entries (and its virtual subtasks),
        writing each real entry's grant into ``granted``; return what the virtual subtasks
        held (Mcycles). ``uncapped``: the split is :meth:`_available_uncapped`'s (kept apart
        in the cache of the last water filling per queue)."""
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
            # The same water filling as the last time this queue was shared with the same
            # figures (another queue's entry changed) is the same list: reuse it.
            slot = (queue, uncapped)
            hit = self._fill_cache.get(slot)
            if (hit is not None and hit[0] == queue_cpu and hit[1] == demands
                    and hit[2] == weights):
                alloc = hit[3]
            else:
                alloc = water_fill(queue_cpu, demands, weights)
                self._fill_cache[slot] = (queue_cpu, demands, weights, alloc)
        for i in range(n_real):
            granted[members[i].key] = alloc[i]
        return float(sum(alloc[n_real:]))

    def _drf_share(
        self,
        members: list[_Entry],
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
        members: list[_Entry],
        spare: float,
        cap: Mapping[tuple[str, int], float],
        granted: dict[tuple[str, int], float],
    ) -> float:
        """Give up to ``spare`` Mcycles to the unmet demand of ``members`` (one queue's
        entries), by their weights; returns what was given."""
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
        by_queue: Mapping[QueueName, list[_Entry]],
        spare: float,
        cap: Mapping[tuple[str, int], float],
        granted: dict[tuple[str, int], float],
    ) -> float:
        """Lend up to ``spare`` Mcycles of QoS share to the unmet demand of the
        best-effort and grid-local queues, split between them by their queue weights
        (water filling, each capped by its unmet demand); returns what was lent."""
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

    # ------------------------------------------------------------- fast forward
    def quiet_cycles(self, cycle: float, margin: int = 1) -> int:
        """How many more cycles of ``cycle`` s would split the CPU exactly as the last one.

        That holds while no subtask is added, removed or re-weighted and every running
        subtask keeps more work than one full-speed cycle (its cap) and than its expected
        work per cycle, at the start of each of those cycles; with the default ``margin``
        also at the end of the last one (so none of them finishes a subtask). 0 when the
        last cycle cannot be replayed.
        """
        last = self._last
        if last is None or last.cycle != cycle or last.near_end:
            # near_end: the quiet test failed on this split (an entry with a grant has
            # less than its floor left), and work done only lowers what is left.
            return 0
        node = self.node
        bound = math.inf
        for e in self._entries.values():
            s = e.subtask
            g = last.granted.get(e.key, 0.0)
            if g <= 0:
                continue
            cores = s.demand.cpu if s.demand is not None else 1.0
            floor = max(min(cores, node.cores) * node.speed_mhz * cycle, s.expected_rate * cycle)
            bound = min(bound, (s.remaining - floor) / g)
        if bound == math.inf:
            return 1 << 30
        return max(0, int(bound) + 1 - margin) if bound >= 0 else 0

    def preview_qos_clocks(
        self, times: list[float]
    ) -> dict[tuple[str, int], tuple[list[float], list[float], float, float]]:
        """What replaying the last split over ``len(times)`` cycles ending at ``times``
        (s) would report for each grid QoS subtask, without changing anything: its
        ``T_V`` after each cycle (s), its expected work in each cycle, its grant and its
        available work per cycle (Mcycles), with :meth:`_repeat`'s arithmetic (so
        :meth:`fast_forward` then leaves exactly these clocks)."""
        last = self._last
        assert last is not None
        out: dict[tuple[str, int], tuple[list[float], list[float], float, float]] = {}
        qos = QueueName.QOS
        for e in self._entries.values():
            s = e.subtask
            if e.queue is not qos or s.finish_time is not None:
                continue
            g = last.granted.get(e.key, 0.0)
            per = s.expected_rate * last.cycle
            done = s.done_work
            vt = e.clock.virtual_time
            prev = e.clock.previous_real_time
            tvs: list[float] = []
            xs: list[float] = []
            for t in times:
                left = s.work - done
                x = per if per < left else left
                done += g
                if x > 0:
                    vt += (g / x) * (t - prev)
                prev = t
                tvs.append(vt)
                xs.append(x)
            a = g
            if last.available is not None and e.key in last.available:
                a = last.available[e.key]
            out[e.key] = (tvs, xs, g, a)
        return out

    def last_cycle_totals(self) -> tuple[float, float | None, float]:
        """One replayed cycle's totals as :meth:`step_lean` books them: CPU used (the
        grants summed in entry order), the grid QoS grants' ``fsum`` (``None``: no QoS
        entry) and what virtual subtasks held idle, Mcycles."""
        last = self._last
        assert last is not None
        used = 0.0
        qos: list[float] = []
        for e in self._entries.values():
            if e.subtask.finish_time is not None:
                continue
            g = last.granted.get(e.key, 0.0)
            used += g
            if e.queue is QueueName.QOS:
                qos.append(g)
        return used, (math.fsum(qos) if qos else None), last.virtual_idle * 1.0

    def fast_forward(self, cycles: int, cycle: float, real_time: float) -> CycleResult:
        """Replay the last cycle ``cycles`` times at once, ending at ``real_time`` (s).

        Exact (up to rounding) when ``cycles <= quiet_cycles(cycle)``: each entry gets
        ``cycles`` times its last grant and its virtual clock moves by eq. (4) over the
        whole span. One progress report per QoS subtask covers the span.
        """
        if self._last is None or cycles < 1 or cycles > self.quiet_cycles(cycle):
            raise ValueError(f"fast_forward: {cycles} cycles cannot be replayed exactly")
        result = self._replay(cycles, cycle, real_time)
        self._quiet_known = self._quiet_next = None  # both counted from single cycles
        assert not result.finished, "fast_forward went past a subtask's finish"
        return result

    def _replay(self, cycles: int, cycle: float, real_time: float) -> CycleResult:
        """Book ``cycles`` cycles with the last cycle's split (the caller checked it holds)."""
        last = self._last
        assert last is not None
        entries = [e for e in self._entries.values() if e.subtask.finish_time is None]
        return self._account(
            real_time,
            cycle,
            entries,
            last.granted,
            last.queue_cpu,
            last.virtual_idle,
            last.lent,
            self.node.cpu_rate * cycle,
            repeat=cycles,
            available=last.available,
        )

    @staticmethod
    def _repeat(
        e: _Entry, per: float, g1: float, cycle: float, repeat: int
    ) -> tuple[float, float, float, float]:
        """Book ``repeat`` cycles of grant ``g1`` on one entry with the very arithmetic
        :meth:`step` would use cycle by cycle (so the result is bit-identical to stepping).
        Returns the total expected and granted work and the work left afterwards (all
        Mcycles), and the new ``T_V`` (s)."""
        s = e.subtask
        clock = e.clock
        t = clock.previous_real_time
        x_total = g_total = 0.0
        for _ in range(repeat):
            left = s.work - s.done_work
            x = per if per < left else left
            s.done_work += g1
            t += cycle
            if x > 0:
                clock.advance(t, x, g1)
            else:
                clock.advance(t, 0.0, 0.0)
            x_total += x
            g_total += g1
        return x_total, g_total, s.work - s.done_work, clock.virtual_time

    def _book(
        self,
        real_time: float,
        cycle: float,
        entries: Iterable[_Entry],
        granted: Mapping[tuple[str, int], float],
        available: Mapping[tuple[str, int], float] | None,
        measured: Mapping[tuple[str, int], float] | None,
        repeat: int = 1,
        quiet_bound: bool = False,
        all_rows: bool = True,
    ) -> LeanCycle:
        """The one booking loop of every cycle (:meth:`step`, :meth:`step_lean`,
        :meth:`fast_forward`): book ``repeat`` identical cycles of ``cycle`` s whose
        per-cycle grants are ``granted`` (Mcycles) on ``entries``, in their order: work
        done, eq. (4) on each virtual clock, finishes. ``available``: per capped subtask,
        the Mcycles per cycle it could have had without its cap (reported as
        ``available_work``; the others report their grant). ``measured``: work a process
        really did (replaces the grant in the work done and the clock). ``quiet_bound``
        (one cycle, no ``measured``): also find what :meth:`quiet_cycles` ``(cycle, 0)``
        will answer next cycle if ``granted`` becomes the last split (the same
        arithmetic on the same figures, while the loop has them at hand). ``all_rows``
        off: rows only for the grid QoS entries (what the simulator reads)."""
        m = float(repeat)
        bound = math.inf
        node = self.node
        used = 0.0
        rows: list[BookedRow] = []
        qos_granted: list[float] = []
        finished: list[tuple[str, int]] = []
        qos = QueueName.QOS
        grant_of = granted.get
        for e in entries:
            s = e.subtask
            key = e.key  # (s.job_id, s.index), fixed for the entry's life
            left = s.work - s.done_work
            # Expected work per cycle (x in eq. 4): the admitted rate, but never more
            # than the work left, so a subtask finishing mid-cycle is not "late".
            per = s.expected_rate * cycle
            if repeat == 1:
                x = per if per < left else left
                g = grant_of(key, 0.0)
                # Work really done: what a process measured, else the grant.
                w = measured[key] if measured is not None and key in measured else g
                s.done_work += w
                clock = e.clock
                if x > 0 and w >= 0 and real_time >= clock.previous_real_time:
                    # VirtualClock.advance(real_time, x, w), inlined (the same arithmetic).
                    clock.virtual_time += (w / x) * (real_time - clock.previous_real_time)
                    clock.previous_real_time = real_time
                    tv = clock.virtual_time
                elif x > 0:
                    tv = clock.advance(real_time, x, w)  # raises
                else:
                    tv = clock.advance(real_time, 0, 0)
                done = left - w <= WORK_EPSILON
                if quiet_bound and g > 0:
                    cores = s.demand.cpu if s.demand is not None else 1.0
                    floor = max(
                        min(cores, node.cores) * node.speed_mhz * cycle, s.expected_rate * cycle
                    )
                    remaining = s.work - s.done_work
                    bound = min(bound, ((remaining if remaining > 0.0 else 0.0) - floor) / g)
            else:
                x, g, left, tv = self._repeat(e, per, granted.get(key, 0.0), cycle, repeat)
                w = g
                done = left <= WORK_EPSILON
            used += g
            if done:
                s.done_work = s.work
                s.finish_time = real_time
                finished.append(key)
            if e.queue is qos:
                qos_granted.append(g)
                a = available[key] * m if available is not None and key in available else g
                rows.append((qos, s.job_id, s.index, x, g, w, tv, done, a))
            elif all_rows:
                rows.append((e.queue, s.job_id, s.index, x, g, w, tv, done, g))
        out = LeanCycle(used, qos_granted, finished, rows)
        if quiet_bound:
            out.quiet = (
                1 << 30 if bound == math.inf else (int(bound) + 1 if bound >= 0 else 0)
            )
        return out

    def _account(
        self,
        real_time: float,
        cycle: float,
        entries: Iterable[_Entry],
        granted: Mapping[tuple[str, int], float],
        queue_cpu: Mapping[QueueName, float],
        virtual_idle: float,
        lent: float,
        capacity: float,
        repeat: int = 1,
        available: Mapping[tuple[str, int], float] | None = None,
        measured: Mapping[tuple[str, int], float] | None = None,
    ) -> CycleResult:
        """Book ``repeat`` identical cycles (:meth:`_book`) and return them as a
        :class:`CycleResult` with totals over the span: a grant per entry, a progress
        report per grid QoS subtask."""
        m = float(repeat)
        node_name = self.node.name
        booked = self._book(real_time, cycle, entries, granted, available, measured, repeat)
        qos = QueueName.QOS
        incarnation = self.incarnation
        seq = self._seq
        grants: list[Grant] = []
        reports: list[ProgressReport] = []
        for queue, job_id, index, x, g, w, tv, done, a in booked.rows:
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
            finished=tuple(booked.finished),
            queue_cpu={q: c * m for q, c in queue_cpu.items()},
            virtual_idle=virtual_idle * m,
            lent_to_best_effort=lent * m,
            used=booked.used,
            capacity=capacity * m,
        )


# Compiled (workloads/native.py), a frozen record needs its constructor to be unpickled.
picklable_frozen_records(globals())
