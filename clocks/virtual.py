"""Per-subtask virtual clocks, eqs. (3)-(5) of the SQ paper.

A subtask that starts at real time ``tau_0`` has ``T_R = T_RP = T_V = tau_0``. After each
local scheduling cycle the real clock has moved on (``T_R' = T_R + q``, eq. 3) and

    T_V' = T_V + (x_bar / x) * (T_R' - T_RP)        (eq. 4)
    T_RP = T_R'                                       (eq. 5)

where ``x`` is the CPU work (Mcycles) the subtask was expected to get in the cycle and
``x_bar`` what it really got. A subtask that got exactly what it expected keeps
``T_V = T_R``; one that got less falls behind, one that got more runs ahead.
"""

from __future__ import annotations

import math


class VirtualClock:
    """The virtual clock ``T_V`` of one subtask. All values in seconds of model time."""

    __slots__ = ("virtual_time", "previous_real_time")

    def __init__(self, start: float) -> None:
        if not math.isfinite(start):
            raise ValueError(f"start: must be a finite time in seconds, got {start!r}")
        self.virtual_time = float(start)
        self.previous_real_time = float(start)

    def advance(self, real_time: float, expected_work: float, granted_work: float) -> float:
        """Apply eqs. (4)-(5) at the end of a cycle; return the new ``T_V`` (s).

        ``real_time`` is ``T_R'`` (s, not earlier than the previous call), ``expected_work``
        ``x`` and ``granted_work`` ``x_bar`` (both Mcycles, >= 0). A cycle in which nothing
        was expected (``x == 0``) leaves the clock where it is: the subtask was not meant
        to progress, so it neither falls behind nor runs ahead.
        """
        dt = real_time - self.previous_real_time
        if dt < 0:
            raise ValueError(
                f"real_time: {real_time!r} is earlier than the previous cycle end "
                f"{self.previous_real_time!r}"
            )
        if expected_work < 0 or granted_work < 0:
            raise ValueError("expected_work and granted_work must be >= 0 Mcycles")
        if expected_work > 0:
            self.virtual_time += (granted_work / expected_work) * dt
        self.previous_real_time = real_time
        return self.virtual_time

    def __repr__(self) -> str:
        return f"VirtualClock(T_V={self.virtual_time!r}, T_RP={self.previous_real_time!r})"
