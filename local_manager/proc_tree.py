"""Process trees and their CPU time, read with psutil: which processes belong to a
subtask, how much CPU they have used, and which subtask processes lost their owner.

Units
    CPU time in CPU-seconds; a process's ``cpu_s`` is ``user + system + children_user +
    children_system`` (psutil's ``cpu_times()``: its own time and that of the children it
    has reaped). ``create_time`` is psutil's process start time (s since the epoch); a pid
    together with its create time names one process even after the pid is reused.

Membership
    A subtask's processes are its leader and every descendant, found through the parent
    links of every process on the machine (:meth:`TreeCpuMeter.scan`, a full scan through
    psutil) or, cheaply between scans, through the ``children`` lists of the processes
    already known (:meth:`TreeCpuMeter.refresh`). Every process seen once is remembered by
    (pid, create time) and stays a member, a root of further descent, for as long as it
    lives, wherever it moves: a child that calls ``setsid()`` keeps its parent, and an
    orphan re-parented to the owner (a child subreaper) or to PID 1 is still known. Extra
    roots (the processes of the subtask's cgroup, orphans carrying its tag) come from the
    caller.

The one file read here that psutil does not offer is ``/proc/<pid>/task/<pid>/children``
(a process's direct children without reading every process on the machine: psutil's
``children()`` always scans the whole of ``/proc``), used between full scans.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import psutil

#: Environment variable every subtask process carries: ``<owner pid>:<owner create time>``
#: (create time in s since the epoch, 3 decimals), naming the process that started it.
OWNER_ENV = "COALLOC_EXECUTOR_OWNER"
#: Environment variable every subtask process carries: the subtask's tag (random hex),
#: inherited by every descendant that keeps its environment (``setsid`` children too).
TAG_ENV = "COALLOC_SUBTASK_TAG"
#: Environment variable a subtask process carries when its owner is restarted after a
#: crash: the owner's restart file (absolute path), which names (by tag) the subtasks the
#: restarted owner re-attaches. Until it does, sweeps by other owners leave them alone.
RESTART_FILE_ENV = "COALLOC_RESTART_FILE"
#: Two create times (s) closer than this name the same process (psutil derives them from
#: 10 ms clock ticks and the boot time; a recycled pid starts much later).
SAME_PROCESS_S = 0.05

_PR_SET_CHILD_SUBREAPER = 36
_ZOMBIE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def same_process(create_time_a: float, create_time_b: float) -> bool:
    """True if two create times (s) of one pid name the same process."""
    return abs(create_time_a - create_time_b) < SAME_PROCESS_S


@dataclass(frozen=True, slots=True)
class ProcSample:
    """One reading of one process.

    ``status`` is psutil's (``"running"``, ``"sleeping"``, ``"stopped"``, ``"zombie"``, ...);
    ``pgid`` is None when the process vanished before its group could be read;
    ``create_time`` in s since the epoch; ``cpu_s`` its CPU time plus that of the children
    it has reaped (CPU-seconds).
    """

    pid: int
    ppid: int
    pgid: int | None
    status: str
    create_time: float
    cpu_s: float

    @property
    def is_zombie(self) -> bool:
        """Exited but not yet reaped (or being torn down)."""
        return self.status in _ZOMBIE

    @property
    def is_stopped(self) -> bool:
        """Stopped by a signal (SIGSTOP) or a tracer."""
        return self.status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)


class ProcessTable(Protocol):
    """Where process readings come from (psutil on the real machine; a fake in tests)."""

    def sample(self, pid: int) -> ProcSample | None:
        """A reading of ``pid``; None if it is gone (or unreadable)."""

    def children(self, pid: int) -> list[int]:
        """Direct children of ``pid`` without a full scan; may miss some ([] if unknown)."""

    def descendants(self, pid: int) -> list[int]:
        """Every descendant of ``pid``, parents before children (a full scan); [] if
        ``pid`` is gone."""

    def pids(self) -> list[int]:
        """Every pid on the machine, ascending."""

    def environ(self, pid: int) -> dict[str, str] | None:
        """``pid``'s environment as it was at exec; None if unreadable (another user's,
        a zombie, gone)."""


class PsutilTable:
    """The machine's processes through psutil."""

    def sample(self, pid: int) -> ProcSample | None:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                t = proc.cpu_times()
                ppid, status, created = proc.ppid(), proc.status(), proc.create_time()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        try:
            pgid: int | None = os.getpgid(pid)
        except OSError:
            pgid = None
        cpu_s = t.user + t.system + t.children_user + t.children_system
        return ProcSample(pid, ppid, pgid, status, created, cpu_s)

    def children(self, pid: int) -> list[int]:
        try:
            with open(f"{psutil.PROCFS_PATH}/{pid}/task/{pid}/children", "rb") as f:
                return [int(c) for c in f.read().split()]
        except OSError:
            return []

    def descendants(self, pid: int) -> list[int]:
        try:
            return [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return []

    def pids(self) -> list[int]:
        return sorted(psutil.pids())

    def environ(self, pid: int) -> dict[str, str] | None:
        try:
            return psutil.Process(pid).environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            return None


#: The table used when none is given.
PSUTIL = PsutilTable()


def process_create_time(pid: int, table: ProcessTable = PSUTIL) -> float | None:
    """``pid``'s create time (s since the epoch), None if it is gone."""
    sample = table.sample(pid)
    return sample.create_time if sample is not None else None


class TreeCpuMeter:
    """Cumulative CPU time of one subtask's process tree (x-bar's source), CPU-seconds.

    The tree starts from ``root`` (pid, create time) and the processes in ``known`` (pid
    -> create time, e.g. from a checkpoint); ``retired_s`` is CPU already counted for
    processes no longer present. :meth:`scan` is a full scan (every process's parent);
    :meth:`refresh` re-reads the known members and follows their ``children`` lists
    (cheap; misses children of non-main threads until the next scan, which then counts
    their whole CPU time). Both also descend from the pids ``extra_roots`` returns
    (called with True on a full scan, False on a refresh). A member reaped by the caller
    is handed to :meth:`retire` first, so its time is kept. The total never decreases.
    """

    def __init__(
        self,
        table: ProcessTable,
        root: tuple[int, float],
        *,
        known: Mapping[int, float] | None = None,
        retired_s: float = 0.0,
        extra_roots: Callable[[bool], Iterable[int]] | None = None,
    ) -> None:
        self.table = table
        self.root_pid = root[0]
        self._known: dict[int, float] = dict(known or {})
        self._known[root[0]] = root[1]
        self._extra_roots = extra_roots
        self._members: dict[int, ProcSample] = {}
        self._retired = float(retired_s)
        self._high = self._retired

    def _update(self) -> None:
        total = self._retired + sum(s.cpu_s for s in self._members.values())
        self._high = max(self._high, total)

    def _read(self, pid: int) -> ProcSample | None:
        """``pid``'s reading, None if it is gone or its pid now names another process."""
        sample = self.table.sample(pid)
        if sample is None:
            return None
        seen = self._known.get(pid)
        if seen is not None and not same_process(seen, sample.create_time):
            return None
        return sample

    def _ordered_roots(self, full: bool) -> list[int]:
        roots = set(self._known)
        if self._extra_roots is not None:
            roots.update(self._extra_roots(full))
        # In order of creation (parents before children), unknown ones last.
        return sorted(roots, key=lambda p: (self._known.get(p, math.inf), p))

    def _settle(self, fresh: dict[int, ProcSample]) -> None:
        self._members = fresh
        # Forget the dead (a pid never comes back with the same create time).
        self._known = {pid: s.create_time for pid, s in fresh.items()}
        self._update()

    def scan(self) -> list[ProcSample]:
        """Full scan; returns the current members.

        Parents are read before their children (roots in order of creation, then each
        one's descendants after it): a child reaped between the two reads is then missed
        once, not counted twice.
        """
        fresh: dict[int, ProcSample] = {}
        for root in self._ordered_roots(True):
            if root in fresh:
                continue  # a descendant of an earlier root
            sample = self._read(root)
            if sample is None:
                continue
            fresh[root] = sample
            if sample.is_zombie:
                continue
            for pid in self.table.descendants(root):
                if pid not in fresh and (child := self._read(pid)) is not None:
                    fresh[pid] = child
        self._settle(fresh)
        return self.members

    def refresh(self) -> None:
        """Re-read the known members and follow their children lists (no full scan)."""
        fresh: dict[int, ProcSample] = {}
        todo = deque(self._ordered_roots(False))
        while todo:
            pid = todo.popleft()
            if pid in fresh or (sample := self._read(pid)) is None:
                continue
            fresh[pid] = sample
            if not sample.is_zombie:
                todo.extend(self.table.children(pid))
        self._settle(fresh)

    def retire(self, sample: ProcSample) -> None:
        """Keep the final figures of a member the caller is about to reap."""
        self._retired += sample.cpu_s
        self._members.pop(sample.pid, None)
        self._known.pop(sample.pid, None)
        self._update()

    @property
    def members(self) -> list[ProcSample]:
        """The members seen by the last scan or refresh (zombies included)."""
        return list(self._members.values())

    @property
    def known(self) -> dict[int, float]:
        """Every member (pid -> create time) as of the last scan or refresh."""
        return dict(self._known)

    @property
    def retired_s(self) -> float:
        """CPU-seconds of members retired (reaped here) so far."""
        return self._retired

    @property
    def total_s(self) -> float:
        """Cumulative CPU time of the tree (CPU-seconds, monotone)."""
        return self._high


# --------------------------------------------------------------------------- ownership


def owner_marker(table: ProcessTable = PSUTIL) -> str:
    """This process's owner marker (see :data:`OWNER_ENV`); the create time guards
    against a recycled pid."""
    me = os.getpid()
    created = process_create_time(me, table)
    return f"{me}:{created if created is not None else 0.0:.3f}"


def owner_alive(marker: str, table: ProcessTable = PSUTIL) -> bool:
    """True if the owner ``marker`` ("pid:create time") names a process that still
    exists (the same one: its create time matches)."""
    return _owner_alive(marker, table)


def _owner_alive(marker: str, table: ProcessTable) -> bool:
    pid_s, _, created_s = marker.partition(":")
    try:
        pid, created = int(pid_s), float(created_s)
    except ValueError:
        return False  # unparsable: treated as gone
    now = process_create_time(pid, table) if pid > 0 else None
    return now is not None and same_process(now, created)


def stale_subtasks(
    table: ProcessTable = PSUTIL, keep_tags: Iterable[str] = ()
) -> list[int]:
    """Pids of subtask processes whose owner no longer exists, ascending.

    A process is a stale subtask when its environment (as it was at exec) carries
    :data:`OWNER_ENV` naming a process that is gone (or whose pid now names a process
    created at another time), unless its :data:`TAG_ENV` is in ``keep_tags`` (subtasks
    being re-attached). Processes whose environment cannot be read (other users',
    zombies) are skipped; this process never counts.
    """
    keep = set(keep_tags)
    alive: dict[str, bool] = {}
    stale = []
    me = os.getpid()
    for pid in table.pids():
        if pid == me:
            continue
        env = table.environ(pid)
        if not env or OWNER_ENV not in env:
            continue
        if env.get(TAG_ENV) in keep:
            continue
        owner = env[OWNER_ENV]
        if owner not in alive:
            alive[owner] = _owner_alive(owner, table)
        if not alive[owner]:
            stale.append(pid)
    return stale


# --------------------------------------------------------------------------- subreaper

_SUBREAPER_LOCK = threading.Lock()
_subreaper_users = 0


def _prctl_subreaper(on: bool) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def acquire_child_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux); True on success.

    Counted: the attribute stays on until every acquirer has called
    :func:`release_child_subreaper`. While it is on, members orphaned by their parent's
    death come back to this process to be reaped (and found: they become its children)
    instead of going to PID 1 (which in some containers never reaps); so do orphans of any
    other child of this process, which is why it is on only while subtasks run.
    """
    global _subreaper_users
    with _SUBREAPER_LOCK:
        if _subreaper_users == 0 and not _prctl_subreaper(True):
            return False
        _subreaper_users += 1
        return True


def release_child_subreaper() -> None:
    """Undo one successful :func:`acquire_child_subreaper`."""
    global _subreaper_users
    with _SUBREAPER_LOCK:
        if _subreaper_users > 0:
            _subreaper_users -= 1
            if _subreaper_users == 0:
                _prctl_subreaper(False)
