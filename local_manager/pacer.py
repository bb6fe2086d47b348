"""Duty cycling: the run/stop decisions that hold a process group to a CPU share by
SIGCONT/SIGSTOP (pure: no processes, no clock, no I/O; the executor does the signalling).

Units: time in seconds of the caller's clock, CPU time in CPU-seconds, a share in cores
(1.0 = one full core).
"""

from __future__ import annotations

import math

#: Default duty-cycle period (s): run/stop decisions are taken this often.
DEFAULT_PERIOD_S = 0.02

# Run slices shorter than this (s) are not worth two signals.
_MIN_SLICE_S = 0.001
# Running time (s) needed before the observed CPU rate replaces the prior estimate.
_RATE_MIN_WALL_S = 0.05


def positive(name: str, value: float) -> float:
    """``value`` as a float if it is a finite number > 0; else ValueError naming ``name``."""
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: must be a finite number > 0, got {value!r}")
    return float(value)


class DutyCyclePacer:
    """Run/stop decisions that hold a process group to a CPU share (pure, no I/O).

    Each period of ``period_s`` seconds starts with a decision: with ``used`` the CPU the
    group has consumed so far in the cycle (CPU-s) and ``target = share * (end of this
    period - cycle start)``, the group runs for ``(target - used) / rate`` seconds (at most
    the period) and is stopped for the rest. ``rate`` is the CPU the group consumes per
    second of running (cores), estimated from what it did while running: 1 for a busy
    single process, more for a multi-process group, less when it sleeps or the node is busy.
    Because the decision uses the measured cumulative CPU, errors (tick quantisation, late
    wake-ups, rate misestimates) are corrected in the following periods.

    Drive it with :meth:`begin` and then :meth:`tick` at the times it returns.
    """

    def __init__(self, period_s: float = DEFAULT_PERIOD_S, max_rate: float = 1.0) -> None:
        self.period_s = positive("period_s", period_s)
        self.max_rate = positive("max_rate", max_rate)
        self.rate = 1.0
        self.running = False
        self.run_s = 0.0
        self._share = 0.0
        self._t0 = self._end = self._period_end = self._off_at = 0.0
        self._cpu0 = 0.0
        self._run_since = 0.0
        self._sample_cpu = 0.0
        self._sample_run = 0.0
        self._rate_cpu = 0.0
        self._rate_wall = 0.0
        self._first_tick = True
        self._active = False

    def begin(self, share: float, cycle_s: float, now: float, cpu_s: float) -> None:
        """Start a cycle of ``cycle_s`` s at time ``now``; ``cpu_s`` is the group's CPU
        reading (CPU-s) that the cycle's budget ``share * cycle_s`` is counted from."""
        self._share = share
        self._t0 = now
        self._end = now + cycle_s
        self._period_end = now
        self._off_at = now
        self._cpu0 = cpu_s
        self.run_s = 0.0
        self._run_since = now
        self._sample_cpu = cpu_s
        self._sample_run = 0.0
        self._first_tick = True
        # Older evidence about the rate counts half as much each cycle.
        self._rate_cpu *= 0.5
        self._rate_wall *= 0.5
        self._active = True

    def _set_running(self, running: bool, now: float) -> None:
        if self.running and not running:
            self.run_s += now - self._run_since
        elif running and not self.running:
            self._run_since = now
        self.running = running

    def _run_so_far(self, now: float) -> float:
        return self.run_s + (now - self._run_since if self.running else 0.0)

    def _update_rate(self, now: float, cpu_s: float) -> None:
        run = self._run_so_far(now)
        if self._first_tick:
            # CPU used before the cycle's first decision was not used while we watched.
            self._first_tick = False
            self._sample_cpu, self._sample_run = cpu_s, run
            return
        self._rate_cpu += max(0.0, cpu_s - self._sample_cpu)
        self._rate_wall += run - self._sample_run
        self._sample_cpu, self._sample_run = cpu_s, run
        if self._rate_wall >= _RATE_MIN_WALL_S:
            self.rate = min(self.max_rate, max(0.05, self._rate_cpu / self._rate_wall))

    def decision_due(self, now: float) -> bool:
        """True if a tick at ``now`` uses its CPU reading (a period starts or the cycle
        ends); other ticks only switch the group off and may pass a stale reading."""
        return now >= self._period_end or now >= self._end

    def tick(self, now: float, cpu_s: float) -> float | None:
        """Decide at time ``now`` given the group's CPU reading ``cpu_s`` (CPU-s).

        Afterwards :attr:`running` says whether the group should run; the return value is
        the time of the next decision, or None when the cycle is over (group stopped).
        """
        if not self._active:
            raise RuntimeError("tick: no cycle begun")
        if now >= self._end:
            self._set_running(False, now)
            self._active = False
            return None
        if now >= self._period_end:
            self._update_rate(now, cpu_s)
            period_end = min(now + self.period_s, self._end)
            deficit = self._share * (period_end - self._t0) - (cpu_s - self._cpu0)
            on_s = min(deficit / self.rate, period_end - now) if deficit > 0 else 0.0
            self._period_end = period_end
            if on_s >= _MIN_SLICE_S:
                self._set_running(True, now)
                self._off_at = now + on_s
            else:
                self._set_running(False, now)
        elif self.running and now >= self._off_at:
            self._set_running(False, now)
        if self.running and self._off_at < self._period_end:
            return self._off_at
        return self._period_end

    def finish(self, now: float) -> float:
        """End the cycle early (the group stops); returns the run time (s) of the cycle."""
        self._set_running(False, now)
        self._active = False
        return self.run_s
