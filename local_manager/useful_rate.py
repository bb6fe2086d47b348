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
- **The cap** (None: none) of a member whose smoothed wait fraction is at least
  :data:`WAITING`: its useful rate times :data:`HEADROOM`, never below ``floor``. A member
  that does not wait in a cycle may be held back by its cap, so the cap probes up: at
  least :data:`PROBE` times the cap in force, and never below what it was granted in that
  cycle. A member that stops waiting altogether (smoothed fraction below
  :data:`WAITING`) loses its cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The cap over the useful rate. Enough to absorb the noise of one cycle's figures (the
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
#: A member that waits less than this fraction of its time (smoothed) is not capped; in a
#: cycle, below it the member counts as not waiting (and its cap probes up).
WAITING = 0.05


@dataclass(frozen=True, slots=True)
class CycleSample:
    """One cycle of a member: CPU its processes used, CPU it was granted (its share times
    the cycle), the cycle's length and the time its application spent waiting, all in
    one unit of time (seconds)."""

    used_s: float
    granted_s: float
    wall_s: float
    waited_s: float

    def __post_init__(self) -> None:
        for name in ("used_s", "granted_s", "wall_s", "waited_s"):
            value = getattr(self, name)
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
    (None before the first cycle), the cap they give (None: no cap) and the cycles seen."""

    useful_rate: float | None = None
    wait_fraction: float | None = None
    cap: float | None = None
    cycles: int = 0


def update(state: UsefulRate, sample: CycleSample, floor: float) -> UsefulRate:
    """The estimate after one more cycle ``sample``; ``floor``: the lowest cap (a rate,
    > 0: a member can always speed up again from it). A cycle of no length changes
    nothing."""
    if not math.isfinite(floor) or floor <= 0:
        raise ValueError(f"floor: must be a finite number > 0, got {floor!r}")
    if sample.wall_s <= 0:
        return state
    rate = sample.useful_s / sample.wall_s
    wait = sample.wait_fraction
    if state.useful_rate is None or state.wait_fraction is None:
        useful, waiting = rate, wait
    else:
        useful = SMOOTHING * rate + (1.0 - SMOOTHING) * state.useful_rate
        waiting = SMOOTHING * wait + (1.0 - SMOOTHING) * state.wait_fraction
    cap: float | None = None
    if waiting >= WAITING:
        cap = max(floor, HEADROOM * useful)
        if wait < WAITING:
            # It did not wait: its cap may be what held it back. Probe up.
            cap = max(cap, sample.granted_s / sample.wall_s)
            if state.cap is not None:
                cap = max(cap, PROBE * state.cap)
    return UsefulRate(useful, waiting, cap, state.cycles + 1)
