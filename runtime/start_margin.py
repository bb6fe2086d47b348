"""How far ahead of a submission its gang's start boundary is set (real seconds).

Every member of a gang must start on the same cycle boundary (the simulator starts them
together). The global manager picks the boundary when it admits a job and then makes its
dispatch calls (the controller's registration, then the placements on every
node at once); a node whose placement arrives after that boundary starts its subtask a cycle
late, and the gang is out of step from its first period. A fixed margin that suffices on
an idle machine does not on a loaded one, where one Ray call can take a tenth of a second
or more. So the margin is learnt: the configured ``floor_s``, or ``headroom`` times the
slowest of the last ``keep`` dispatch calls times the number of calls the dispatch will
make, whichever is larger, at most ``ceiling_s``. No clock is read here: the caller
times its calls.
"""

from __future__ import annotations

import threading
from collections import deque

#: Dispatch calls remembered.
KEEP_CALLS = 32
#: How many times the slowest recent call a dispatch is given per call.
HEADROOM = 2.0
#: The longest margin (real s): a start no later than this after a submission.
CEILING_S = 5.0


class StartMargin:
    """The learnt start margin (see the module docstring). Thread-safe: the dispatch
    calls it times run outside the global manager's lock, several at once."""

    __slots__ = ("floor_s", "headroom", "ceiling_s", "_calls", "_guard")

    def __init__(
        self,
        floor_s: float,
        headroom: float = HEADROOM,
        ceiling_s: float = CEILING_S,
        keep: int = KEEP_CALLS,
    ) -> None:
        if floor_s < 0 or headroom <= 0 or keep < 1:
            raise ValueError("start margin: floor_s >= 0, headroom > 0, keep >= 1")
        self.floor_s = floor_s
        self.headroom = headroom
        self.ceiling_s = max(ceiling_s, floor_s)
        self._calls: deque[float] = deque(maxlen=keep)
        self._guard = threading.Lock()

    def observe_call(self, seconds: float) -> None:
        """One dispatch call took ``seconds`` real seconds (negative: clock noise, 0)."""
        with self._guard:
            self._calls.append(max(0.0, seconds))

    @property
    def slowest_call_s(self) -> float:
        """The slowest of the remembered calls (real s; 0 before the first)."""
        with self._guard:
            return max(self._calls, default=0.0)

    def seconds(self, calls: int = 1) -> float:
        """The margin (real s) for a dispatch of ``calls`` sequential calls."""
        learnt = self.headroom * max(1, calls) * self.slowest_call_s
        return min(self.ceiling_s, max(self.floor_s, learnt))


def dispatch_calls(subtask_counts: list[int]) -> int:
    """The calls, one after the other, that a dispatch of gangs of ``subtask_counts``
    subtasks makes: per gang the controller's registration, then its placements, made on
    all its nodes at once (one round)."""
    return sum(1 + (1 if n > 0 else 0) for n in subtask_counts)
