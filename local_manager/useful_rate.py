"""A coupled member's useful rate and the cap it gives (``docs/coupled.md``, "Caps from
the useful rate"; ``docs/decisions.md``, "The coupled targets, where each stands").

A member that waits at its exchanges uses only part of the CPU it is given: the rest goes
into the wait (spun away by a polling member, left unused by a blocking one). Pace control
cannot see this when the members run in lockstep (no reported clock is ahead), and the
caps it sets follow what each node says it could give, which a busy host overstates. So
the node itself estimates, every cycle, the CPU each waiting member needs to keep pace
with its partners, and holds it to a little more than that.

One cycle of a member (:class:`CycleSample`) is what its processes used (``used_s``, CPU
seconds), what it was granted (``granted_s``: its share times the cycle, CPU seconds),
the cycle's length (``wall_s``) and the seconds its application spent inside
``coalloc.progress.waiting()`` during it (``waited_s``). Pure: no I/O and no clock; any
time unit will do as long as all four use the same one, and rates are in that unit's CPU
per unit of time (cores, for seconds).

- **Wait fraction** ``w = waited_s / wall_s`` (0..1).
- **Useful CPU** of the cycle: ``min(used_s, granted_s * (1 - w))``, "its grant less its
  wait". A spinning member uses its whole grant, so this is what it used outside its
  waits. A blocking member uses nothing while it waits, so it is what it used. Where the
  host gave less than the grant, a spinner's figure comes out high; once it is capped
  below what the host gives, it is exact again.
- **Useful rate**: the useful CPU over ``wall_s``, smoothed by an exponential average of
  weight :data:`SMOOTHING` (the first cycle is taken as it is), as is the wait fraction.
- **Cost and pace.** With ``progress`` (the reported time it advanced in the cycle), the
  useful CPU per unit of progress (``cost``, smoothed as above) and the progress per unit
  of time (``pace``, smoothed by :data:`PACE_SMOOTHING`); ``reference`` is the best pace
  seen. Its **need** is ``cost * reference``: the CPU it needs to keep its best pace
  (its useful rate where no progress is known).
- **The cap** (None: none) of a member whose smoothed wait fraction reached
  :data:`ENGAGE` (it keeps it while the fraction stays at :data:`WAITING` or more): its
  need times :data:`HEADROOM`, never below ``floor`` (the node passes :data:`FLOOR` of
  the member's expected rate) nor below the lowest cap found safe (below). A member that
  does not wait in a cycle may be held back by its cap, so the cap probes up: at least
  :data:`PROBE` times the cap in force, and never below what it was granted in that
  cycle. A member that stops waiting altogether loses its cap.

Why the need is set from the best pace and not from this cycle's useful rate: the members
of a coupled job wait for each other, so a member held below what it needs slows its
partners, who then wait more and look as if they need less. Caps set from the useful rate
alone spiral down together (measured live: every member at its floor, the stencil 2-4x
slower). The CPU a step costs does not move when the pace falls, so a cap from it does
not follow the fall.

**The guard: a cap must not slow the member.** Held at a small share, a member that
polls is stopped for most of each duty-cycle period, so a partner's message often arrives
while it is stopped: the cap adds latency to every exchange, beyond its CPU. When a
capped member's pace stays more than :data:`SLOWER` below its reference for
:data:`SLOWED_CYCLES` cycles, its cap was too low: the cap in force times :data:`PROBE`
becomes the lowest cap it gets (``safe``), which relaxes by :data:`RELAX` a cycle while
its pace holds. Where the host itself slows everything, the guard fires too: the member
is capped less, never slowed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

#: The cap over the need. Enough to absorb the noise of one cycle's figures (the
#: application sends its ``wait_s`` at most every 0.1 s, so in a 0.3 s cycle the wait
#: seen moves by up to a third of the cycle) once smoothing has halved it, and to let a
#: member that falls behind catch up; what is not used of it is spun (a polling member)
#: or left to others (a blocking one): a capped spinner spins ``1 - 1/HEADROOM`` (13 %)
#: of what it gets.
HEADROOM = 1.15
#: How much a capped member that did not wait in a cycle may have next (times its cap):
#: a member the cap held back reaches its need again within a few cycles.
PROBE = 1.5
#: Weight of the newest cycle in the smoothed useful rate and wait fraction.
SMOOTHING = 0.5
#: Weight of the newest cycle in the smoothed pace: lower than :data:`SMOOTHING`, since a
#: cycle's reported progress moves in whole steps and the last report of a cycle may be
#: 0.1 s old.
PACE_SMOOTHING = 0.3
#: A capped member whose smoothed pace stays this fraction below its best pace for
#: :data:`SLOWED_CYCLES` cycles in a row was slowed by its cap. On the loaded 2-core host
#: of the live bench the smoothed pace moves by 15-20 % with no cap changed (a threshold
#: of 0.15 fired every few cycles and kept every member near its uncapped share), while a
#: cap in the latency trap halves it.
SLOWER = 0.3
SLOWED_CYCLES = 2
#: While its pace holds, the lowest cap found safe relaxes by this factor a cycle, so that
#: a guard fired by the host's noise (or by a partner's cap) heals within about 15 cycles
#: and the cap can follow the need down again.
RELAX = 0.97
#: The lowest cap the node sets, as a fraction of the member's expected rate ``x_i`` (the
#: rate it was admitted at): an estimate gone wrong costs a member at most half its
#: admitted rate, for the two cycles its probe takes to bring it back above it.
FLOOR = 0.5
#: A member is capped once it waits this fraction of its time (smoothed): the member that
#: sets its gang's pace waits only for the jitter of its partners' steps, and never gets a
#: cap.
ENGAGE = 0.2
#: A member that waits less than this fraction of its time (smoothed) is not capped; in a
#: cycle, below it the member counts as not waiting (and its cap probes up).
WAITING = 0.05


@dataclass(frozen=True, slots=True)
class CycleSample:
    """One cycle of a member: CPU its processes used, CPU it was granted (its share times
    the cycle), the cycle's length and the time its application spent waiting, all in
    one unit of time (seconds); ``progress``: the reported time it advanced in the cycle,
    in its own unit (None: not known)."""

    used_s: float
    granted_s: float
    wall_s: float
    waited_s: float
    progress: float | None = None

    def __post_init__(self) -> None:
        for name in ("used_s", "granted_s", "wall_s", "waited_s", "progress"):
            value = getattr(self, name)
            if name == "progress" and value is None:
                continue
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: must be a finite number >= 0, got {value!r}")

    @property
    def wait_fraction(self) -> float:
        """The part of the cycle spent waiting (0..1; 0 for a cycle of no length)."""
        if self.wall_s <= 0:
            return 0.0
        return min(1.0, self.waited_s / self.wall_s)

    @property
    def useful_s(self) -> float:
        """The CPU the member used outside its waits: its grant less its wait, never more
        than it used."""
        return min(self.used_s, self.granted_s * (1.0 - self.wait_fraction))


@dataclass(frozen=True, slots=True)
class UsefulRate:
    """A member's estimate after some cycles: the smoothed useful rate and wait fraction
    (None before the first cycle), the cap they give (None: no cap) and the cycles seen;
    the smoothed useful CPU per unit of progress (``cost``) and pace (progress per unit
    of time), the best pace seen (``reference``), the lowest cap found safe (``safe``, 0:
    none yet) and the cycles in a row its pace has been below the reference
    (``slowed``); None: not known."""

    useful_rate: float | None = None
    wait_fraction: float | None = None
    cap: float | None = None
    cycles: int = 0
    cost: float | None = None
    pace: float | None = None
    reference: float | None = None
    safe: float = 0.0
    slowed: int = 0

    @property
    def need(self) -> float | None:
        """The rate it needs to keep the best pace seen: its cost times that pace (its
        useful rate where either is not known)."""
        if self.cost is not None and self.reference is not None:
            return self.cost * self.reference
        return self.useful_rate


def _smooth(old: float | None, new: float, weight: float) -> float:
    return new if old is None else weight * new + (1.0 - weight) * old


def update(state: UsefulRate, sample: CycleSample, floor: float) -> UsefulRate:
    """The estimate after one more cycle ``sample`` (lived under ``state.cap``);
    ``floor``: the lowest cap (a rate, > 0: a member can always speed up again from it).
    A cycle of no length changes nothing."""
    if not math.isfinite(floor) or floor <= 0:
        raise ValueError(f"floor: must be a finite number > 0, got {floor!r}")
    if sample.wall_s <= 0:
        return state
    wait = sample.wait_fraction
    useful = _smooth(state.useful_rate, sample.useful_s / sample.wall_s, SMOOTHING)
    waiting = _smooth(state.wait_fraction, wait, SMOOTHING)
    cost, pace, reference = state.cost, state.pace, state.reference
    safe, slowed = state.safe, 0
    if sample.progress is not None:
        if sample.progress > 0:
            cost = _smooth(cost, sample.useful_s / sample.progress, SMOOTHING)
        pace = _smooth(pace, sample.progress / sample.wall_s, PACE_SMOOTHING)
        if state.cap is not None and reference is not None and pace < (1.0 - SLOWER) * reference:
            slowed = state.slowed + 1
            if slowed >= SLOWED_CYCLES:
                # The cap slowed it (and its partners): not that low again for a while.
                safe = max(safe, PROBE * state.cap)
                pace, slowed = reference, 0  # judge the next cap afresh
        else:
            safe *= RELAX
        reference = pace if reference is None else max(reference, pace)
    est = UsefulRate(useful, waiting, None, state.cycles + 1, cost, pace, reference, safe, slowed)
    if waiting < (WAITING if state.cap is not None else ENGAGE):
        return est
    need = est.need
    cap = max(floor, HEADROOM * (need if need is not None else useful), safe)
    if wait < WAITING:
        # It did not wait: its cap may be what held it back. Probe up.
        cap = max(cap, sample.granted_s / sample.wall_s)
        if state.cap is not None:
            cap = max(cap, PROBE * state.cap)
    return dataclasses.replace(est, cap=cap)
