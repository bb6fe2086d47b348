"""The clock interface the scheduling cores read time from.

Cores never call ``time.time()``; they are handed a ``Clock``. The simulator and the
tests use ``ManualClock`` (deterministic, advanced by hand); the live runtime uses
``clocks.real_clock.RealClock`` (one global real time ``T_R``, NTP-disciplined).
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """A source of model time."""

    def now(self) -> float:
        """Return the current time in seconds of model time."""
        ...


class ManualClock:
    """A deterministic clock that only moves when told to.

    ``now()`` returns the value set by the constructor, ``set`` and ``advance``, in
    seconds. Time never goes backwards: ``advance`` takes ``dt >= 0`` and ``set`` takes
    ``t >= now()``.
    """

    __slots__ = ("_t",)

    def __init__(self, start: float = 0.0) -> None:
        if not math.isfinite(start):
            raise ValueError(f"start: must be a finite number of seconds, got {start!r}")
        self._t = float(start)

    def now(self) -> float:
        """Current model time, seconds."""
        return self._t

    def advance(self, dt: float) -> float:
        """Move time forward by ``dt`` seconds (``dt >= 0``); return the new time."""
        if not math.isfinite(dt) or dt < 0:
            raise ValueError(f"dt: must be a finite number of seconds >= 0, got {dt!r}")
        self._t += float(dt)
        return self._t

    def set(self, t: float) -> None:
        """Jump to time ``t`` seconds; ``t`` must not be earlier than ``now()``."""
        if not math.isfinite(t):
            raise ValueError(f"t: must be a finite number of seconds, got {t!r}")
        if t < self._t:
            raise ValueError(f"t: {t!r} is earlier than the current time {self._t!r}")
        self._t = float(t)

    def __repr__(self) -> str:
        return f"ManualClock(t={self._t!r})"
