"""The simulator's fast path through a node's cycles: replay the last CPU split while it
provably stays the same, to the bit.

**The speed trick.** :meth:`LocalScheduler.step <local_manager.scheduler.LocalScheduler.step>`
computes every cycle's split afresh (water filling, DRF, lending). But the split reads
nothing that moves from one cycle to the next except each entry's work left, and that
only through its CPU cap, ``min(work left, cores at full speed)`` (and its rate cap).
While every running entry has more than a full-speed cycle of work left, every cap, and so
the whole split, is the one of the last cycle: :class:`ReplayingScheduler` keeps the last
:class:`~local_manager.scheduler.Split` and books it again. The simulator drives it with
:meth:`ReplayingScheduler.step_lean`; it has three ways to a cycle's split:

1. **Replay** while the quiet test holds (:meth:`ReplayingScheduler.quiet_cycles`: no
   entry ends within the cycle). The test's answer ``k`` is kept as a countdown
   (:meth:`ReplayingScheduler._can_replay`), so it is computed only near its end.
2. **The near-end proof** (:meth:`ReplayingScheduler._near_end_split`): an entry near its
   end lowers its cap every cycle. On queues that are not work-conserving the proof
   recomputes only what reads the moved caps (the queue's own water filling) and shows
   every figure the split produced is the same float; otherwise it gives up.
3. **Afresh**: the model's split, after any add, remove, re-weight or finish.

And :meth:`ReplayingScheduler.fast_forward` books a whole quiet stretch of ``n`` cycles at
once (the simulator's ``_replay_stretch``).

**Why the bytes are the same.** Every path books through the model's one booking loop
(:meth:`LocalScheduler._book <local_manager.scheduler.LocalScheduler._book>`) or, for a
stretch, through :meth:`ReplayingScheduler._repeat`, which does that loop's arithmetic
cycle by cycle. A replayed split is used only when recomputing it would do the same
operations on the same numbers (the quiet test) or is shown to give the same floats (the
proof, which compares with the sign of zero): the grants, and so every clock, report and
sum, are the ones :meth:`LocalScheduler.step` gives. ``tests/unit/local_manager/
test_local_manager_replay.py`` checks each path against the model on random nodes, and the
simulator's reference mode (``SimConfig.step_every_cycle``, which steps the model) against
this one on whole runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from local_manager.scheduler import (
    WORK_EPSILON,
    BookedRow,
    CycleResult,
    Entry,
    Key,
    LocalScheduler,
    LocalSchedulerConfig,
    Split,
)
from workloads.model import Node, QueueName
from workloads.native import picklable_frozen_records

#: The most cycles a quiet countdown (:meth:`ReplayingScheduler._can_replay`) runs before
#: the quiet test is computed afresh (keeps its rounding margin far below one cycle).
_COUNTDOWN_CAP = 1_000_000

_QUEUES: tuple[QueueName, ...] = tuple(QueueName)  # the model's queue order


@dataclass(frozen=True, slots=True)
class LeanCycle:
    """A cycle as :meth:`ReplayingScheduler.step_lean` returns it: ``used`` (Mcycles, the
    sum of the grants in entry order, as :attr:`CycleResult.used`), the grants of the
    grid QoS entries in entry order (``qos_granted``), the finished keys, one
    :data:`~local_manager.scheduler.BookedRow` per grid QoS entry and what the virtual
    subtasks held idle (Mcycles)."""

    used: float
    qos_granted: list[float]
    finished: list[Key]
    rows: list[BookedRow]
    virtual_idle: float


@dataclass(slots=True)
class _LastCycle:
    """The split being replayed and what the near-end proof keeps up to date about it."""

    cycle: float
    split: Split
    #: The split's uncapped estimates, QoS demand and released demand as of the last cycle
    #: (the proof recomputes them when caps move).
    available: dict[Key, float] | None
    queue_demand: list[float]
    released: float
    #: The quiet test failed on this split (an entry with a grant has less than its floor
    #: left); it fails until the split is dropped, since work done only lowers what is
    #: left: each cycle goes to the proof.
    near_end: bool = False


def _same_float(a: float, b: float) -> bool:
    """Whether two floats are the same number, the sign of a zero included."""
    return a == b and (a != 0.0 or math.copysign(1.0, a) == math.copysign(1.0, b))


class ReplayingScheduler(LocalScheduler):
    """A :class:`~local_manager.scheduler.LocalScheduler` that replays its last split
    while it provably stays the same (the module docstring). :meth:`step` stays the
    model's: it computes its split afresh."""

    def __init__(
        self, node: Node, config: LocalSchedulerConfig | None = None, incarnation: int = 0
    ) -> None:
        super().__init__(node, config, incarnation)
        # The last split, kept while nothing that decides it has changed.
        self._last: _LastCycle | None = None
        # (the _LastCycle it is about, cycles it is still known to replay): _can_replay.
        self._quiet_known: tuple[_LastCycle, int] | None = None
        #: Replay through cycles in which an entry near its end moved its cap when the
        #: split is shown to be the same (:meth:`_near_end_split`); off: such cycles
        #: compute the split afresh. The simulator's ``SimConfig.replay_near_end``.
        self.replay_near_end = True
        #: How many cycles computed their split afresh (the others replayed one): what the
        #: simulator's speed depends on, counted for tests and profiles.
        self.fresh_splits = 0

    def _inputs_changed(self) -> None:
        self._last = None

    def step(
        self,
        real_time: float,
        cycle: float,
        measured: Mapping[Key, float] | None = None,
    ) -> CycleResult:
        """The model's cycle (:meth:`LocalScheduler.step`), afresh; the replay restarts
        from the next :meth:`step_lean`."""
        self._last = None
        return super().step(real_time, cycle, measured)

    # --------------------------------------------------------------- one cycle
    def step_lean(self, real_time: float, cycle: float) -> LeanCycle:
        """:meth:`step` for the simulator: the same cycle with the same arithmetic (the
        model's booking loop), returned as plain figures instead of grant and report
        records, with the last split replayed where it is the same (the module
        docstring). The scheduler's state afterwards is the one :meth:`step` leaves."""
        last = self._last
        if last is not None and last.near_end and last.cycle == cycle:
            held = self._near_end_split(cycle) if self.replay_near_end else None
            if held is None:
                return self._fresh_lean(real_time, cycle)
            return self._replay_lean(held, real_time, cycle)
        if self._can_replay(cycle):
            assert last is not None
            return self._replay_lean(last, real_time, cycle)
        if self.replay_near_end and last is not None:
            held = self._near_end_split(cycle)
            if held is not None:
                return self._replay_lean(held, real_time, cycle)
        return self._fresh_lean(real_time, cycle)

    def _fresh_lean(self, real_time: float, cycle: float) -> LeanCycle:
        """:meth:`step_lean`'s cycle with the model's split computed afresh."""
        self.fresh_splits += 1
        split = self._split(real_time, cycle)
        used, qos_granted, finished, rows = self._book(
            real_time, cycle, split.entries, split.granted, split.available, None,
            all_rows=False,
        )
        self._seq += len(qos_granted)
        self._last = None if finished else _LastCycle(
            cycle, split, split.available, split.queue_demand, split.released
        )
        return LeanCycle(used, qos_granted, finished, rows, split.virtual_idle)

    def _replay_lean(self, held: _LastCycle, real_time: float, cycle: float) -> LeanCycle:
        """:meth:`step_lean`'s cycle with the split ``held``, which stays the last split
        unless an entry finishes."""
        self._last = held
        split = held.split
        used, qos_granted, finished, rows = self._book(
            real_time, cycle, split.entries, split.granted, held.available, None,
            all_rows=False,
        )
        self._seq += len(qos_granted)
        if finished:
            self._last = None
        return LeanCycle(used, qos_granted, finished, rows, split.virtual_idle)

    # ---------------------------------------------------------- the quiet test
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
            return 0
        node = self.node
        granted = last.split.granted
        bound = math.inf
        for e in self._entries.values():
            s = e.subtask
            g = granted.get(e.key, 0.0)
            if g <= 0:
                continue
            cores = s.demand.cpu if s.demand is not None else 1.0
            floor = max(min(cores, node.cores) * node.speed_mhz * cycle, s.expected_rate * cycle)
            bound = min(bound, (s.remaining - floor) / g)
        if bound == math.inf:
            return 1 << 30
        return max(0, int(bound) + 1 - margin) if bound >= 0 else 0

    def _can_replay(self, cycle: float) -> bool:
        """Whether the last split holds for one more cycle of ``cycle`` s
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
        k = self.quiet_cycles(cycle, 0)
        if k < 1:
            return False
        # After this cycle k - 1 more are quiet; the work done moves each bound by one
        # cycle up to rounding (at most 2.3e-16 of the bound, <= k, per cycle), kept far
        # below the margin of 2 by how long a countdown may run.
        self._quiet_known = (last, min(k - 3, _COUNTDOWN_CAP, int(1e15 / k)))
        return True

    # ------------------------------------------------------- the near-end proof
    def _near_end_split(self, cycle: float) -> _LastCycle | None:
        """The last split as this cycle's, when it is shown to be what the model's
        :meth:`_split` would compute now, to the bit; ``None`` when that is not shown
        (then compute it).

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
        same numbers as before, so it does the same operations on them.

        The split's ``cap`` and ``uncapped`` are brought up to date in place (the split
        is this object's alone once booked); a split the proof fails on is dropped."""
        last = self._last
        if last is None or last.cycle != cycle or self.config.work_conserving:
            return None
        split = last.split
        cap = split.cap
        uncapped = split.uncapped
        copysign = math.copysign
        moved: list[QueueName] = []
        uncapped_moved = False
        for e, s, key, per, rate_cap in split.limits:
            # The model's cap, the same arithmetic.
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
        queue_demand = list(last.queue_demand)
        for q in moved:
            members = split.by_queue[q]
            if q is qos:
                if split.borrowed:
                    return None
            elif split.lendable > 0 or (q is QueueName.BEST_EFFORT and split.lent_virtual):
                return None
            for e in members:
                if not e.cpu_only:
                    return None
            d = sum(cap[e.key] for e in members)
            if q is qos:
                d += capacity * split.n_virtual
            qn = _QUEUES.index(q)
            demand = queue_demand[qn] = min(d, capacity)
            queue_cpu = min(demand, shares[qn] * capacity)  # _split_queues, not conserving
            if not _same_float(queue_cpu, split.queue_cpu[q]):
                return None
            if queue_cpu <= 0:
                continue  # not shared: no grant before or now
            fill: dict[Key, float] = {}
            idle = self._share_queue(members, queue_cpu, cap, q, full_cpu, capacity, fill)
            if not _same_float(idle, split.queue_idle[q]):
                return None
            granted = split.granted
            for e in members:
                if not _same_float(fill[e.key], granted[e.key]):
                    return None
        if not uncapped_moved and qos not in moved:
            return last
        # What the rate caps release and the QoS share lent on for it: the model's sums in
        # its order; the lending must be the same (it read the other queues' caps).
        released = 0.0
        if uncapped_moved:
            for _e, _s, key, _per, rate_cap in split.limits:
                if rate_cap is not None:
                    c = uncapped[key]
                    if rate_cap < c:
                        released += c - rate_cap
        else:
            released = last.released
        lendable = 0.0
        if released > 0 and self.config.lend_paced:
            qos_share_cpu = shares[qi] * capacity
            wanted = min(queue_demand[qi] + released, capacity)
            lendable = max(
                0.0, min(wanted, qos_share_cpu) - min(queue_demand[qi], qos_share_cpu)
            )
        if not _same_float(lendable, split.lendable):
            return None
        last.released = released
        last.queue_demand = queue_demand
        if last.available is None:
            return last
        # The uncapped estimates are the split's own output, computed afresh on the
        # grants shown to be the same.
        borrow = self.config.borrow_idle  # paced and not work-conserving here
        last.available = self._available_uncapped(
            split.by_queue[qos], uncapped, cap, queue_demand, released, capacity, full_cpu,
            borrow,
        )
        return last

    # -------------------------------------------------------- quiet stretches
    def preview_qos_clocks(
        self, times: list[float]
    ) -> dict[Key, tuple[list[float], list[float], float, float]]:
        """What replaying the last split over ``len(times)`` cycles ending at ``times``
        (s) would report for each grid QoS subtask, without changing anything: its
        ``T_V`` after each cycle (s), its expected work in each cycle, its grant and its
        available work per cycle (Mcycles), with :meth:`_repeat`'s arithmetic (so
        :meth:`fast_forward` then leaves exactly these clocks)."""
        last = self._last
        assert last is not None
        granted = last.split.granted
        out: dict[Key, tuple[list[float], list[float], float, float]] = {}
        qos = QueueName.QOS
        for e in self._entries.values():
            s = e.subtask
            if e.queue is not qos or s.finish_time is not None:
                continue
            g = granted.get(e.key, 0.0)
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
        granted = last.split.granted
        used = 0.0
        qos: list[float] = []
        for e in self._entries.values():
            if e.subtask.finish_time is not None:
                continue
            g = granted.get(e.key, 0.0)
            used += g
            if e.queue is QueueName.QOS:
                qos.append(g)
        return used, (math.fsum(qos) if qos else None), last.split.virtual_idle

    def fast_forward(self, cycles: int, cycle: float) -> None:
        """Book the last split ``cycles`` times at once, cycle by cycle with the booking
        loop's arithmetic (:meth:`_repeat`), as ``cycles`` calls of :meth:`step_lean`
        would; only when ``cycles <= quiet_cycles(cycle)`` (no entry finishes)."""
        last = self._last
        if last is None or cycles < 1 or cycles > self.quiet_cycles(cycle):
            raise ValueError(f"fast_forward: {cycles} cycles cannot be replayed exactly")
        granted = last.split.granted
        qos = QueueName.QOS
        for e in self._entries.values():
            s = e.subtask
            if s.finish_time is not None:
                continue
            left = self._repeat(e, s.expected_rate * cycle, granted.get(e.key, 0.0), cycle,
                                cycles)
            assert left > WORK_EPSILON, "fast_forward went past a subtask's finish"
            if e.queue is qos:
                self._seq += 1  # one report covers the stretch
        self._quiet_known = None  # counted from single cycles

    @staticmethod
    def _repeat(e: Entry, per: float, g1: float, cycle: float, repeat: int) -> float:
        """Book ``repeat`` cycles of grant ``g1`` on one entry with the very arithmetic
        of the booking loop, cycle by cycle (so the result is bit-identical to stepping);
        returns the work left afterwards (Mcycles)."""
        s = e.subtask
        clock = e.clock
        t = clock.previous_real_time
        for _ in range(repeat):
            left = s.work - s.done_work
            x = per if per < left else left
            s.done_work += g1
            t += cycle
            if x > 0:
                clock.advance(t, x, g1)
            else:
                clock.advance(t, 0.0, 0.0)
        return s.work - s.done_work


# Compiled (workloads/native.py), a frozen record needs its constructor to be unpickled.
picklable_frozen_records(globals())
