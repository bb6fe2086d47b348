"""Progress the application reports: ``coalloc.progress.report(t, t_end)`` and
``with coalloc.progress.waiting():``, for a subtask's process to tell its node's local
manager how far it has come in its own time (steps, simulated seconds) and when it waits
at an exchange (``docs/coupled.md``, "Progress").

A call only stores the value (a few hundred ns; ``bench/bench_progress.py``); a daemon
thread sends the latest one as one datagram (:mod:`local_manager.progress_wire`) at most
every :data:`MIN_INTERVAL_S`, as BOINC's ``boinc_fraction_done`` does, and once more at
interpreter exit, so the last value reaches the node. Outside coalloc (no
``COALLOC_PROGRESS_ADDR`` and ``COALLOC_PROGRESS_KEY`` in the environment) every call
does nothing, so a code can keep its calls when it runs alone.

A value that is not a finite number >= 0 (``t``) or > 0 (``t_end``) raises
:class:`ValueError` at the call, in or outside coalloc. The node drops reports whose time
goes backwards (``docs/wire.md``).
"""

from __future__ import annotations

import atexit
import math
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from local_manager.progress_wire import ADDR_ENV, KEY_ENV, encode, parse_addr

#: Shortest time between two datagrams of one process, s (the rate cap).
MIN_INTERVAL_S = 0.1

_INF = math.inf


class Reporter:
    """The sender of one process: the latest value (stored by :func:`report`), the time
    spent waiting, and the thread that sends them. ``clock``: seconds, for the waits."""

    __slots__ = ("addr", "key", "latest", "waiting", "wait_s", "_wait_began", "_sent",
                 "_sock", "_stop", "_thread", "interval_s", "sent", "send_errors", "_lock",
                 "wakeups")

    def __init__(self, addr: tuple[str, int], key: str,
                 interval_s: float = MIN_INTERVAL_S) -> None:
        self.addr = addr
        self.key = key
        self.interval_s = interval_s
        # (t, t_end) of the last call; None before the first.
        self.latest: tuple[float, float | None] | None = None
        self.waiting = False
        self.wait_s = 0.0
        self._wait_began = 0.0
        self._sent: tuple[object, bool, float] | None = None
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one flush at a time (the thread, atexit)
        self.sent = 0
        self.send_errors = 0
        self.wakeups = 0  # the thread's looks at the latest value

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="coalloc-progress",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.flush()
            self.wakeups += 1

    def flush(self) -> bool:
        """Send the latest state if it changed since the last datagram; True if sent."""
        with self._lock:
            latest, waiting, wait_s = self.latest, self.waiting, self.wait_s
            state = (latest, waiting, wait_s)
            if latest is None or state == self._sent:
                return False
            data = encode(self.key, latest[0], latest[1], wait_s, waiting)
            try:
                self._sock.sendto(data, self.addr)
            except OSError:  # the node is gone or busy: the next change tries again
                self.send_errors += 1
                return False
            self._sent = state
            self.sent += 1
            return True

    def close(self) -> None:
        """Stop the thread, send what is left, close the socket."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)
        self.flush()
        self._sock.close()

    def begin_wait(self, now: float) -> None:
        self._wait_began = now
        self.waiting = True

    def end_wait(self, now: float) -> None:
        self.wait_s += max(0.0, now - self._wait_began)
        self.waiting = False


def reporter_from_env(env: Mapping[str, str]) -> Reporter | None:
    """The reporter ``env`` asks for; None outside coalloc (either variable absent). A
    malformed address raises ValueError (coalloc set it: a wrong one is a bug)."""
    addr, key = env.get(ADDR_ENV), env.get(KEY_ENV)
    if not addr or not key:
        return None
    return Reporter(parse_addr(addr), key)


_REPORTER: Reporter | None = None


def _install(reporter: Reporter | None) -> None:
    """Make ``reporter`` this process's (tests and the bench; None: do nothing)."""
    global _REPORTER
    old, _REPORTER = _REPORTER, reporter
    if old is not None and old is not reporter:
        old.close()
    if reporter is not None:
        reporter.start()


def _close_at_exit() -> None:
    if _REPORTER is not None:
        _REPORTER.close()


def report(t: float, t_end: float | None = None) -> None:
    """The application has reached ``t`` of its own time (steps, simulated seconds) out
    of ``t_end`` (None: the total is not known here; the job file's ``progress_end``
    gives it). Stores the value and returns; the sending is the thread's."""
    if not 0.0 <= t < _INF:
        raise ValueError(f"t: must be a finite number >= 0, got {t!r}")
    if t_end is not None and not 0.0 < t_end < _INF:
        raise ValueError(f"t_end: must be a finite number > 0, got {t_end!r}")
    r = _REPORTER
    if r is not None:
        r.latest = (t, t_end)


@contextmanager
def waiting() -> Iterator[None]:
    """Marks the time inside as spent waiting at an exchange (shown in ``status``)."""
    r = _REPORTER
    if r is None:
        yield
        return
    r.begin_wait(time.monotonic())
    try:
        yield
    finally:
        r.end_wait(time.monotonic())


def enabled() -> bool:
    """Whether reports go anywhere (the process runs as a coalloc subtask)."""
    return _REPORTER is not None


_install(reporter_from_env(os.environ))
atexit.register(_close_at_exit)
