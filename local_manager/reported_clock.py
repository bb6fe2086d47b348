"""A subtask's reported progress and the virtual clock it gives (``progress: reported``;
``docs/coupled.md``, "Progress"): what its application last reported, the checks a
report must pass, the mapping of the reported time onto the subtask's nominal duration,
and stall detection. No I/O and no clock of its own: times are model seconds passed in.

The mapping. A subtask of nominal work ``W`` (Mcycles) at expected rate ``x`` (Mcycles/s)
has a nominal duration ``D = W / x``. Having reported ``t`` of ``t_end`` it has done the
fraction ``f = min(1, t / t_end)``, and its virtual clock is ``T_V = start + f * D``. The
scheduler keeps the one clock (eq. 4): :func:`reported_work` is the work ``x_bar`` to book
for a cycle so that eq. 4 lands on that ``T_V`` (0 when it is already there: a member
that reports nothing new falls behind real time, as one that got no CPU does).

Stalled. A member is stalled when no report came for ``stall_after`` model s (counted
from its start until the first), or when its reported rate (``f`` per model s since its
start) is below :data:`SLOW_RATIO` of the median of its partners' (:func:`slow_members`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from local_manager.progress_wire import DropReason, ProgressDatagram

#: A member whose reported rate is below this fraction of its partners' median is
#: stalled ("a rate far below its partners'").
SLOW_RATIO = 0.1


class ReportedProgress:
    """What one subtask's application has reported (mutable; owned by its node's loop).

    ``start``: model s the subtask started; ``end``: the job file's ``progress_end`` (None:
    the reports must carry ``t_end``); ``needs_end``: whether a report with no total known
    is dropped (``progress: reported``; under ``cpu`` reports are only shown)."""

    __slots__ = ("start", "end", "needs_end", "t", "t_end", "reports", "dropped", "wait_s",
                 "waiting", "last_at")

    def __init__(self, start: float, end: float | None = None, needs_end: bool = True) -> None:
        self.start = start
        self.end = end
        self.needs_end = needs_end
        self.t: float | None = None
        self.t_end: float | None = None
        self.reports = 0
        self.dropped: dict[str, int] = {}
        self.wait_s = 0.0
        self.waiting = False
        self.last_at: float | None = None  # model s of the last report accepted

    def to_dict(self) -> dict[str, object]:
        """Its state as JSON-able data (a local manager's checkpoint)."""
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ReportedProgress:
        """The tracker :meth:`to_dict` wrote (KeyError, TypeError, ValueError if not)."""
        p = cls(_num(data["start"]), _opt(data["end"]), bool(data["needs_end"]))
        p.t, p.t_end = _opt(data["t"]), _opt(data["t_end"])
        p.reports = int(_num(data["reports"]))
        dropped = data["dropped"]
        if not isinstance(dropped, dict):
            raise TypeError("dropped: not a mapping")
        p.dropped = {str(k): int(_num(v)) for k, v in dropped.items()}
        p.wait_s, p.waiting = _num(data["wait_s"]), bool(data["waiting"])
        p.last_at = _opt(data["last_at"])
        return p

    def drop(self, reason: DropReason) -> DropReason:
        self.dropped[reason.value] = self.dropped.get(reason.value, 0) + 1
        return reason

    def accept(self, d: ProgressDatagram, now: float) -> DropReason | None:
        """Take report ``d`` received at model s ``now``; the reason if it is dropped
        (time going backwards; no total known under ``reported``)."""
        if self.t is not None and d.t < self.t:
            return self.drop(DropReason.BACKWARDS)
        if self.needs_end and d.t_end is None and self.t_end is None and self.end is None:
            return self.drop(DropReason.NO_END)
        self.t = d.t
        if d.t_end is not None:
            self.t_end = d.t_end
        self.wait_s = max(self.wait_s, d.wait_s)
        self.waiting = d.waiting
        self.reports += 1
        self.last_at = now
        return None

    @property
    def total(self) -> float | None:
        """The application's total: the last ``t_end`` reported, else ``progress_end``."""
        return self.t_end if self.t_end is not None else self.end

    @property
    def fraction(self) -> float | None:
        """``min(1, t / t_end)``; None before a report or while the total is unknown."""
        total = self.total
        if self.t is None or total is None:
            return None
        return min(1.0, self.t / total)

    def virtual_time(self, nominal_s: float) -> float:
        """``start + f * D`` for a nominal duration ``D`` = ``nominal_s`` (model s)."""
        return reported_virtual_time(self.start, nominal_s, self.fraction or 0.0)

    def silent_for(self, now: float) -> float:
        """Model s since the last report (since the start before the first)."""
        return now - (self.last_at if self.last_at is not None else self.start)

    def stalled(self, now: float, stall_after: float | None) -> bool:
        """No report for longer than ``stall_after`` model s (None: never stalled)."""
        return stall_after is not None and self.silent_for(now) > stall_after

    def rate(self, now: float) -> float | None:
        """Fraction per model s since the start; None while unknown."""
        f = self.fraction
        if f is None or now <= self.start:
            return None
        return f / (now - self.start)


def _num(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not a number: {value!r}")
    return float(value)


def _opt(value: object) -> float | None:
    return None if value is None else _num(value)


def reported_virtual_time(start: float, nominal_s: float, fraction: float) -> float:
    """The virtual clock of a subtask that has done ``fraction`` (0..1) of its nominal
    duration ``nominal_s`` since ``start`` (model s)."""
    return start + min(max(fraction, 0.0), 1.0) * nominal_s


def reported_work(target: float, current: float, rate: float) -> float:
    """The work (Mcycles) to book for a cycle so that eq. 4 moves a clock at ``current``
    to ``target`` (model s), for a subtask of expected rate ``rate`` (Mcycles/s): eq. 4
    gives ``dT_V = (x_bar / x) * q`` with ``x = rate * q``, so ``x_bar = dT_V * rate``.
    Never negative: a clock does not go back."""
    return max(0.0, target - current) * rate


def slow_members(rates: Sequence[float | None], ratio: float = SLOW_RATIO) -> list[bool]:
    """For each member's reported rate (None: unknown), whether it is far below its
    partners': below ``ratio`` times the median of the others' known rates (a member
    with no partner rate known, or partners at rate 0, is never slow)."""
    out = []
    for i, r in enumerate(rates):
        others = [x for j, x in enumerate(rates) if j != i and x is not None]
        if r is None or not others:
            out.append(False)
            continue
        median = statistics.median(others)
        out.append(median > 0 and r < ratio * median)
    return out
