"""A node's reported-progress receiving (``docs/coupled.md``, "Progress"), for
:class:`runtime.node_runtime.NodeRuntime`.

Every process subtask finds, in its environment, the address of the node's progress
socket (:class:`runtime.progress_listener.ProgressListener`, opened with the first process
subtask) and a key of its own; each boundary drains the socket before the cycle is
stepped. Datagrams that do not parse, carry an unknown key, or go back in time are
dropped and counted (the node's ``progress_dropped_<reason>`` counters, and per subtask
in its report); the subtask runs on. Under ``progress: reported`` the work booked for a
process subtask is not its CPU time but what moves its clock to the reported time mapped
onto its nominal duration (:mod:`local_manager.reported_clock`), so the controller paces
it by the progress it reports.

Under pace control a member of a ``progress: reported`` job that reports its waits is
also held near its useful rate (:mod:`local_manager.useful_rate`): every boundary
:meth:`NodeProgress.useful_caps` takes each such member's cycle (the CPU it used, its
share, the cycle's length) with the seconds it reported waiting since the last boundary,
and gives the caps for the scheduler (:meth:`LocalScheduler.set_useful_caps`).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from local_manager.executor_records import CycleUsage
from local_manager.progress_wire import ADDR_ENV, KEY_ENV, DatagramError, DropReason, parse_addr
from local_manager.reported_clock import ReportedProgress, reported_work
from local_manager.scheduler import LocalScheduler
from local_manager.useful_rate import FLOOR, CycleSample, UsefulRate, update
from runtime.progress_listener import ProgressListener
from workloads.model import ProgressMode, Subtask

Key = tuple[str, int]


class _Tracked:
    """One subtask's reported progress and the key it reports with (None: it has none);
    its useful-rate estimate (rates in cores), the ``wait_s`` and time it had reported at
    the last boundary it was estimated, and the useful cap in force (Mcycles/s; None:
    none)."""

    __slots__ = ("subtask", "progress", "token", "useful", "wait_seen", "t_seen", "cap",
                 "speed")

    def __init__(self, subtask: Subtask, progress: ReportedProgress, token: str | None) -> None:
        self.subtask = subtask
        self.progress = progress
        self.token = token
        self.useful = UsefulRate()
        self.wait_seen = progress.wait_s
        self.t_seen = progress.t
        self.cap: float | None = None
        self.speed = 0.0  # the node's Mcycles/s per core, once estimated


class NodeProgress:
    """The node's progress socket, the per-subtask keys and trackers, and the drop
    counters (kept in ``counters``: the node's own counters dict, shared)."""

    def __init__(self, counters: dict[str, int]) -> None:
        self.counters = counters
        counters["progress_received"] = 0
        for reason in DropReason:
            counters[f"progress_dropped_{reason.value}"] = 0
        self._listener: ProgressListener | None = None
        self._keys: dict[str, Key] = {}  # reporting key -> subtask it is open for
        self._tracked: dict[Key, _Tracked] = {}

    @property
    def address(self) -> str | None:
        """``HOST:PORT`` of the node's progress socket (None until a process subtask
        started, or when it could not be opened)."""
        return self._listener.address if self._listener is not None else None

    def env(self, key: Key) -> dict[str, str]:
        """What subtask ``key``'s environment carries to report progress (empty: none)."""
        t = self._tracked.get(key)
        if t is None or t.token is None or self._listener is None:
            return {}
        return {ADDR_ENV: self._listener.address, KEY_ENV: t.token}

    def get(self, key: Key) -> ReportedProgress | None:
        """Subtask ``key``'s tracker (None: it has none)."""
        t = self._tracked.get(key)
        return t.progress if t is not None else None

    def open(self, subtask: Subtask, b: float) -> dict[str, str]:
        """Give a process subtask its progress key and tracker, opening the node's socket
        with the first; the environment it starts with (empty if the socket cannot be
        opened: it then runs with no reporting, counted in ``progress_socket_errors``)."""
        if self._listener is None:
            try:
                self._listener = ProgressListener()
            except OSError:
                self._socket_error()
                return {}
        spec = subtask.progress
        reported = spec is not None and spec.mode is ProgressMode.REPORTED
        progress = ReportedProgress(b, spec.end if spec is not None else None, reported)
        token = secrets.token_hex(16)
        self._tracked[subtask.key] = _Tracked(subtask, progress, token)
        self._keys[token] = subtask.key
        return self.env(subtask.key)

    def close(self, key: Key) -> None:
        """The subtask left: its key no longer reports (its tracker stays for status)."""
        t = self._tracked.get(key)
        if t is not None and t.token is not None:
            self._keys.pop(t.token, None)

    def forget(self, key: Key) -> None:
        """Drop subtask ``key``'s tracker (its record is gone or replaced)."""
        self._tracked.pop(key, None)

    def close_all(self) -> None:
        """No key reports any more; the socket is closed (trackers stay for status)."""
        self._keys.clear()
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def drain(self, now: float) -> None:
        """Take the datagrams that arrived since the last boundary (model s ``now``)."""
        if self._listener is None:
            return
        for item in self._listener.drain():
            if isinstance(item, DatagramError):
                self._count_drop(item.reason)
                continue
            key = self._keys.get(item.key)
            t = self._tracked.get(key) if key is not None else None
            if t is None:
                self._count_drop(DropReason.BAD_KEY)
                continue
            reason = t.progress.accept(item, now)
            if reason is not None:
                self._count_drop(reason)
            else:
                self.counters["progress_received"] += 1

    def _count_drop(self, reason: DropReason) -> None:
        self.counters[f"progress_dropped_{reason.value}"] += 1

    def _socket_error(self) -> None:
        self.counters["progress_socket_errors"] = \
            self.counters.get("progress_socket_errors", 0) + 1

    def reported_measure(self, measured: dict[Key, float], scheduler: LocalScheduler) -> None:
        """Under ``progress: reported``, replace a process subtask's measured work by
        what moves its clock to its reported progress (module docstring)."""
        for key in measured:
            t = self._tracked.get(key)
            spec = t.subtask.progress if t is not None else None
            if t is None or spec is None or spec.mode is not ProgressMode.REPORTED \
                    or scheduler.get(key) is None:
                continue
            s = t.subtask
            nominal = s.work / s.expected_rate if s.expected_rate > 0 else 0.0
            target = t.progress.virtual_time(nominal)
            measured[key] = reported_work(target, scheduler.virtual_time(key),
                                          s.expected_rate)

    def useful_caps(self, cycles: Mapping[Key, CycleUsage], scheduler: LocalScheduler,
                    speed_mhz: float) -> dict[Key, float]:
        """Each member's useful-rate estimate moved on by the cycle it just ended
        (``cycles``: its executor's figures), and the useful caps (Mcycles/s) for the
        scheduler: for the members of ``progress: reported`` jobs that wait, where the
        scheduler applies them (:attr:`LocalScheduler.applies_useful_caps`). A member
        inside a wait that has not ended and that reported none ending since the last
        boundary gives no figure this cycle (its wait is not counted yet); it keeps its
        cap."""
        caps: dict[Key, float] = {}
        paced = scheduler.applies_useful_caps
        for key, usage in cycles.items():
            t = self._tracked.get(key)
            spec = t.subtask.progress if t is not None else None
            live = scheduler.get(key)
            if t is None or spec is None or spec.mode is not ProgressMode.REPORTED \
                    or live is None or speed_mhz <= 0:
                continue
            p = t.progress
            waited = max(0.0, p.wait_s - t.wait_seen)
            if not (waited == 0.0 and p.waiting):
                advanced = None
                if p.t is not None and t.t_seen is not None:
                    advanced = max(0.0, p.t - t.t_seen)
                t.wait_seen, t.t_seen = p.wait_s, p.t
                floor = FLOOR * live.expected_rate / speed_mhz
                if floor > 0:
                    sample = CycleSample(usage.cpu_s, usage.granted_share * usage.wall_s,
                                         usage.wall_s, waited, advanced)
                    t.useful = update(t.useful, sample, floor)
                    t.speed = speed_mhz
            cap = t.useful.cap
            t.cap = cap * speed_mhz if cap is not None and paced else None
            if t.cap is not None:
                caps[key] = t.cap
        return caps

    def fields(self, subtask: Subtask, live: bool, now: float | None) -> dict[str, Any]:
        """A subtask's reported progress as its report's fields (none: it has none);
        ``live``: it runs; ``now``: the last boundary (None: none yet)."""
        t = self._tracked.get(subtask.key)
        if t is None:
            return {}
        p = t.progress
        if p.reports == 0 and not p.dropped and subtask.progress is None:
            return {}
        now = now if now is not None else p.start
        spec = subtask.progress
        return {
            "reported_time": p.t, "reported_end": p.total, "reported_fraction": p.fraction,
            "reported_rate": p.rate(now) if live else None,
            "progress_reports": p.reports, "progress_dropped": dict(p.dropped),
            "wait_s": p.wait_s, "waiting": p.waiting and live,
            "stalled": live and spec is not None and p.stalled(now, spec.stall_after),
            **self._useful_fields(t, live),
        }

    @staticmethod
    def _useful_fields(t: _Tracked, live: bool) -> dict[str, Any]:
        """Its useful-rate estimate (Mcycles/s) and wait fraction, and the useful cap in
        force (Mcycles/s); none before its first estimate."""
        u = t.useful
        if u.useful_rate is None or not live:
            return {}
        return {"useful_rate": u.useful_rate * t.speed, "wait_fraction": u.wait_fraction,
                "useful_cap": t.cap}

    # ----------------------------------------------------------------- checkpoint
    def checkpoint_entry(self, key: Key) -> dict[str, Any] | None:
        """Subtask ``key``'s progress for the node's checkpoint (None: nothing to keep)."""
        t = self._tracked.get(key)
        if t is None or t.token is None:
            return None
        return dict(t.progress.to_dict(), key=t.token)

    def restore(self, subtask: Subtask, saved: dict[str, Any], address: object) -> None:
        """A re-attached subtask's reported progress, and the node's progress socket on
        the port its processes know (a new port if it is taken: their reports are then
        lost, counted in ``progress_socket_moved``)."""
        try:
            progress = ReportedProgress.from_dict(saved)
        except (KeyError, TypeError, ValueError):
            return
        token = str(saved.get("key") or "") or None
        self._tracked[subtask.key] = _Tracked(subtask, progress, token)
        if token is None:
            return
        self._keys[token] = subtask.key
        if self._listener is not None:
            return
        host, port = "127.0.0.1", 0
        if isinstance(address, str):
            try:
                host, port = parse_addr(address)
            except ValueError:
                pass
        try:
            self._listener = ProgressListener(host, port)
        except OSError:
            self.counters["progress_socket_moved"] = 1
            try:
                self._listener = ProgressListener()
            except OSError:
                self._socket_error()
