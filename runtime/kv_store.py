"""The job-scoped key-value store of the rendezvous: addresses and small values that the
members of one run of a job exchange (PMI's KVS, ``torch.distributed.TCPStore``).

Pure: no I/O and no Ray. The global manager holds one :class:`KvStore` and serves it on
its HTTP API (:mod:`runtime.api`); the members reach it with their run's credential
(:mod:`runtime.rendezvous`). Values are text (encode bytes as base64).

Scoping. Every key lives in the namespace of one run (``<job id>`` or ``<job id>.<n>``,
:class:`runtime.jobs.RunId`): a requeued gang is a new run, so it starts with an empty
store. :meth:`KvStore.drop` forgets a run that ended and wakes its waiters with
:class:`RunGone`.

Waiting. :meth:`KvStore.get` waits for a key that is not set yet, up to a timeout, on
one condition variable (a ``put`` wakes every waiter; they re-check their key).

Limits (:class:`KvLimits`) answer with :class:`KvLimitError`, whose message says which
limit and by how much: key length and characters, value size, keys per run, bytes per run.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Container
from dataclasses import dataclass, field

#: Characters a key may hold: a key travels in a URL path and a shell word unquoted.
KEY_PATTERN = re.compile(r"[A-Za-z0-9._:@+-]+")

#: Ended runs remembered, so that a late request of one is refused instead of opening it.
GONE_KEPT = 4096


class KvError(Exception):
    """A request the store refuses; the message is one line for the user."""


class KvLimitError(KvError):
    """A key, value or run over one of the store's limits."""


class RunGone(KvError):
    """The run is not (or no longer) running: its store is gone."""


@dataclass(frozen=True, slots=True)
class KvLimits:
    """``max_key``: characters of a key; ``max_value``: UTF-8 bytes of one value;
    ``max_keys``: keys of one run; ``max_bytes``: bytes of one run's keys and values."""

    max_key: int = 256
    max_value: int = 64 * 1024
    max_keys: int = 1024
    max_bytes: int = 4 * 2**20


@dataclass(slots=True)
class _Run:
    values: dict[str, str] = field(default_factory=dict)
    size: int = 0


def check_key(key: str, limits: KvLimits) -> None:
    """Raise :class:`KvLimitError` unless ``key`` is a valid key."""
    if not key:
        raise KvLimitError("key: empty")
    if len(key) > limits.max_key:
        raise KvLimitError(f"key: {len(key)} characters, more than the {limits.max_key} "
                           "character limit")
    if not KEY_PATTERN.fullmatch(key):
        raise KvLimitError(f"key {key!r}: only letters, digits and . _ : @ + - are allowed")


class KvStore:
    """Every running run's keys and values. Thread-safe. ``monotonic``: the clock the
    waits are measured on (seconds)."""

    def __init__(
        self, limits: KvLimits | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits or KvLimits()
        self._monotonic = monotonic
        self._runs: dict[str, _Run] = {}
        #: Runs dropped, oldest first (at most :data:`GONE_KEPT`; a run id never comes back).
        self._gone: dict[str, None] = {}
        self._cond = threading.Condition()

    def put(self, run: str, key: str, value: str) -> None:
        """Set ``key`` to ``value`` in ``run``'s namespace (replacing what was there) and
        wake the waiters. Raises :class:`KvLimitError` or :class:`RunGone`."""
        lim = self.limits
        check_key(key, lim)
        size = len(value.encode("utf-8", "surrogatepass"))
        with self._cond:
            ns = self._namespace(run)
            if size > lim.max_value:
                raise KvLimitError(f"value of {key}: {size} bytes, more than the "
                                   f"{lim.max_value} byte limit")
            old = ns.values.get(key)
            if old is None and len(ns.values) >= lim.max_keys:
                raise KvLimitError(f"{key}: the run already holds {len(ns.values)} keys, "
                                   f"the limit")
            grown = ns.size + len(key) + size - (
                len(key) + len(old.encode("utf-8", "surrogatepass")) if old is not None else 0)
            if grown > lim.max_bytes:
                raise KvLimitError(f"{key}: the run's keys and values would take {grown} "
                                   f"bytes, more than the {lim.max_bytes} byte limit")
            ns.values[key] = value
            ns.size = grown
            self._cond.notify_all()

    def get(self, run: str, key: str, timeout_s: float = 0.0) -> str | None:
        """The value of ``key`` in ``run``'s namespace, waiting up to ``timeout_s``
        seconds for it to be set; None if it was not set in time. Raises
        :class:`KvLimitError` (a bad key) or :class:`RunGone` (the run ended, before or
        while waiting)."""
        check_key(key, self.limits)
        deadline = self._monotonic() + max(timeout_s, 0.0)
        with self._cond:
            while True:
                value = self._namespace(run).values.get(key)
                if value is not None:
                    return value
                left = deadline - self._monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def keys(self, run: str) -> list[str]:
        """The keys set in ``run``'s namespace, sorted."""
        with self._cond:
            ns = self._runs.get(run)
            return sorted(ns.values) if ns is not None else []

    def drop(self, run: str) -> None:
        """Forget ``run`` (it ended): its keys go, its waiters raise :class:`RunGone`,
        and later requests for it too."""
        with self._cond:
            self._runs.pop(run, None)
            self._forget(run)
            self._cond.notify_all()

    def retain(self, live: Container[str]) -> int:
        """Drop every run not in ``live`` as :meth:`drop` does; returns how many were
        dropped."""
        with self._cond:
            ended = [r for r in self._runs if r not in live]
            for r in ended:
                del self._runs[r]
                self._forget(r)
            if ended:
                self._cond.notify_all()
            return len(ended)

    @property
    def runs(self) -> int:
        """How many runs hold a namespace."""
        with self._cond:
            return len(self._runs)

    def _forget(self, run: str) -> None:
        """Remember that ``run`` ended (caller holds the lock)."""
        self._gone[run] = None
        while len(self._gone) > GONE_KEPT:
            del self._gone[next(iter(self._gone))]

    def _namespace(self, run: str) -> _Run:
        """``run``'s namespace, made on first use (caller holds the lock)."""
        if run in self._gone:
            raise RunGone(f"run {run} has ended: its key-value store is gone")
        ns = self._runs.get(run)
        if ns is None:
            ns = self._runs[run] = _Run()
        return ns
