"""Model time in the live runtime: the real clock ``T_R`` scaled from a start epoch.

``model = (real - epoch) * scale``: ``real`` is a :class:`clocks.real_clock.RealClock`
reading (s since the Unix epoch, NTP-disciplined, monotonic), ``epoch`` the real time at
which ``coalloc up`` put model time at 0, and ``scale`` the time scale (model seconds per
real second). Every actor builds its own real clock against the same NTP servers and
shares the epoch, so all of them read the same model time; the scheduling cores only see
it through :class:`ModelClock` (a :class:`clocks.base.Clock`).

Cycle boundaries sit at whole multiples of the cycle ``q`` in model time on every node,
like the simulator's steps, so that every local manager steps at the same ``T_R``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from clocks.real_clock import RealClock


class RealTimeSource(Protocol):
    """What :class:`ModelClock` reads: ``now()`` in real seconds (and optionally status)."""

    def now(self) -> float: ...


@dataclass(frozen=True, slots=True)
class TimeBase:
    """The mapping between real time (s since the Unix epoch) and model time (s).

    ``epoch``: real time of model time 0; ``scale``: model seconds per real second (> 0).
    """

    epoch: float
    scale: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.epoch):
            raise ValueError(f"epoch: must be a finite real time in seconds, got {self.epoch!r}")
        if not math.isfinite(self.scale) or self.scale <= 0:
            raise ValueError(f"scale: must be a finite number > 0, got {self.scale!r}")

    def model_at(self, real: float) -> float:
        """Model time (s) at real time ``real`` (s)."""
        return (real - self.epoch) * self.scale

    def real_at(self, model: float) -> float:
        """Real time (s) at model time ``model`` (s)."""
        return self.epoch + model / self.scale


def boundary_at_or_after(t: float, cycle: float) -> float:
    """The first cycle boundary (a whole multiple of ``cycle``, s) at or after ``t`` (s)."""
    k = math.ceil(t / cycle - 1e-9)
    return k * cycle


def boundary_index(t: float, cycle: float) -> int:
    """Index ``k`` of the last boundary ``k * cycle`` at or before ``t`` (s)."""
    return math.floor(t / cycle + 1e-9)


class ModelClock:
    """A :class:`clocks.base.Clock` reading model time from a real clock and a time base."""

    __slots__ = ("real", "base")

    def __init__(self, real: RealTimeSource, base: TimeBase) -> None:
        self.real = real
        self.base = base

    def now(self) -> float:
        """Current model time, s."""
        return self.base.model_at(self.real.now())

    def seconds_until(self, model: float) -> float:
        """Real seconds from now until model time ``model`` (negative if it has passed)."""
        return self.base.real_at(model) - self.real.now()

    def clock_status(self) -> tuple[float | None, str | None]:
        """The real clock's (offset s, quality) for the phase log; (None, None) if unknown."""
        status = getattr(self.real, "status", None)
        if status is None:
            return None, None
        st = status()
        return float(st.offset_s), str(getattr(st.quality, "value", st.quality))


def make_real_clock(servers: Sequence[str]) -> RealClock:
    """A started :class:`clocks.real_clock.RealClock` for ``servers`` (none: local clock)."""
    from clocks.real_clock import RealClock

    clock = RealClock(list(servers))
    if clock.servers:
        # The first sync before anyone reads the clock steps it at once.
        clock.sync()
    return clock.start()
