"""The process executor: one subtask as a real OS process group, held each scheduling
cycle to the CPU share its local manager grants, with the CPU time it really got measured
from ``/proc`` (that measurement is x-bar in eq. 4 of the SQ paper, DESIGN §3).

Units
    Time in seconds of the executor's clock (injected; default ``time.monotonic``). CPU time
    in CPU-seconds. A *share* is a fraction of one core, ``0 .. ncores`` (1.0 = one full
    core, 2.0 = two cores). Work in Mcycles: ``Mcycles = cpu_seconds * speed_mhz`` with the
    node's speed in MHz, so one core of a 300 MHz node for 1 s is 300 Mcycles.

Process group
    The command is an argv list (never a shell string) started with ``start_new_session``,
    so the subtask and every child it forks share one process group (pgid = leader pid)
    and one session; signals go to the whole group with ``killpg``. A process that leaves
    the group on purpose (``setsid``/``setpgid``, daemons) is out of reach and not measured.

Limiting (:class:`LimitMode`)
    ``duty_cycle``: SIGCONT/SIGSTOP on the group in periods of ``period_s`` (20 ms by
    default). At the start of each period the :class:`DutyCyclePacer` compares the CPU the
    group has used in the cycle with ``share * elapsed`` and lets it run just long enough to
    catch up (a feedback loop on measured CPU, so a group that runs on several cores or is
    slowed by other load is still held to its share). Between cycles the group is stopped.
    ``cgroup_v2``: when a writable cgroup v2 directory with the ``cpu`` controller enabled
    for its children is available (``COALLOC_CGROUP_PARENT`` or this process's own cgroup),
    each subtask gets a child cgroup whose ``cpu.max`` is ``share * 100 ms`` per 100 ms;
    the group's processes are moved into it at start and at every cycle. A share of 0
    stops the group with SIGSTOP in both modes.

Measuring
    CPU time of the group = ``utime + stime + cutime + cstime`` (clock ticks,
    ``SC_CLK_TCK``) summed over every process whose ``/proc/<pid>/stat`` names the group,
    plus the final figures of members this executor reaped itself (read from the zombie
    before reaping). A member reaped by another member is in that member's ``cutime``. The
    leader's exit is detected with ``waitid(WNOWAIT)`` so its final times are read before it
    is reaped. Members are found by a full scan of ``/proc`` once a second (and at
    start, finish and cancel) and in between through the ``children`` lists of the known
    ones. Processes that vanish between listing and reading are skipped. Parents are read
    before their children, so a member reaped during a reading is missed for that reading
    rather than counted twice; the cumulative figure is kept monotone.

Cleanup
    On finish (the leader exits), on :meth:`ProcessExecutor.cancel`, on ``close()``, on
    garbage collection and at interpreter exit the group gets SIGCONT, SIGTERM, a grace
    period, then SIGKILL, and every member is reaped. By default the owning process is a
    child subreaper (``PR_SET_CHILD_SUBREAPER``) while it has running subtasks, so that
    orphaned members are re-parented to it and reaped here even where PID 1 does not reap.
    A SIGKILL of the owning process itself runs no cleanup (no code can); every subtask
    process therefore carries ``COALLOC_EXECUTOR_OWNER`` in its environment, and
    :func:`reap_stale_subtasks` (called by a new owner at start-up) kills those whose owner
    is gone.
"""

from __future__ import annotations

import atexit
import ctypes
import math
import os
import signal
import subprocess
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

#: Default duty-cycle period (s): run/stop decisions are taken this often.
DEFAULT_PERIOD_S = 0.02
#: Default interval (s) between full ``/proc`` scans (a scan reads every process on the
#: machine, about 1-3 ms per 100 processes). In between, new members are found through
#: the ``children`` lists of the known ones; a full scan also finds members re-parented
#: away from the group's tree (orphans).
DEFAULT_RESCAN_S = 1.0
#: Default time (s) between SIGTERM and SIGKILL.
DEFAULT_GRACE_S = 2.0
#: cgroup v2 bandwidth period (µs) written to ``cpu.max``.
CGROUP_PERIOD_US = 100_000
#: Smallest quota (µs) the kernel accepts in ``cpu.max``.
CGROUP_MIN_QUOTA_US = 1_000
#: Environment variable naming a delegated cgroup v2 directory to create subtask cgroups in.
CGROUP_PARENT_ENV = "COALLOC_CGROUP_PARENT"

# Run slices shorter than this (s) are not worth two signals.
_MIN_SLICE_S = 0.001
# Running time (s) needed before the observed CPU rate replaces the prior estimate.
_RATE_MIN_WALL_S = 0.05
# Poll interval (s) while waiting for a signalled group to die.
_KILL_POLL_S = 0.01
# How long (s) to wait for SIGKILLed members to become reapable.
_KILL_SETTLE_S = 2.0
_PR_SET_CHILD_SUBREAPER = 36


class LimitMode(str, Enum):
    """How the executor holds a process group to its CPU share."""

    DUTY_CYCLE = "duty_cycle"
    CGROUP_V2 = "cgroup_v2"


class ExecutorState(str, Enum):
    """Life cycle of one executor: created -> running -> finished | cancelled."""

    CREATED = "created"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class CycleUsage:
    """What one subtask really got in one local scheduling cycle.

    ``cpu_s`` is the CPU time (CPU-seconds) the process group consumed since the end of
    the previous cycle (x-bar of eq. 4 in CPU-seconds); ``mcycles`` is the same in Mcycles
    (``cpu_s * speed_mhz``). ``wall_s`` is the cycle's length on the executor clock (s),
    ``run_s`` the part of it during which the group was allowed to run (s).
    ``granted_share`` is the share asked for (cores). ``exit_code`` is set once the leader
    has exited (negative: killed by that signal).
    """

    granted_share: float
    wall_s: float
    run_s: float
    cpu_s: float
    mcycles: float
    mode: LimitMode
    state: ExecutorState
    exit_code: int | None

    @property
    def achieved_share(self) -> float:
        """CPU the group got per second of the cycle (cores); 0 for an empty cycle."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


# --------------------------------------------------------------------------- validation


def validate_argv(argv: object) -> tuple[str, ...]:
    """Check that ``argv`` is a non-empty list (or tuple) of strings; return it as a tuple.

    A single string is refused on purpose: no shell ever parses the command.
    """
    if isinstance(argv, (str, bytes)):
        raise ValueError(
            "argv: must be a list of strings, not a single string (no shell is used; "
            "split the command into its arguments)"
        )
    if not isinstance(argv, (list, tuple)):
        raise ValueError(f"argv: must be a list of strings, got {type(argv).__name__}")
    if not argv:
        raise ValueError("argv: must not be empty (argv[0] is the executable)")
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):
            raise ValueError(f"argv[{i}]: must be a string, got {type(arg).__name__}")
        if "\x00" in arg:
            raise ValueError(f"argv[{i}]: must not contain a NUL character")
    if not argv[0]:
        raise ValueError("argv[0]: must name an executable, got an empty string")
    return tuple(argv)


def _validate_env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    if env is None:
        return None
    out: dict[str, str] = {}
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\x00" in key:
            raise ValueError(f"env[{key!r}]: name must be a non-empty string without '=' or NUL")
        if not isinstance(value, str) or "\x00" in value:
            raise ValueError(f"env[{key!r}]: value must be a string without NUL")
        out[key] = value
    return out


def _positive(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: must be a finite number > 0, got {value!r}")
    return float(value)


def share_for_grant(granted_mcycles: float, speed_mhz: float, cycle_s: float) -> float:
    """The CPU share (cores) that gives ``granted_mcycles`` in a cycle of ``cycle_s``
    seconds on a node of ``speed_mhz`` MHz: ``granted / (speed * cycle)``."""
    _positive("speed_mhz", speed_mhz)
    _positive("cycle_s", cycle_s)
    if not math.isfinite(granted_mcycles) or granted_mcycles < 0:
        raise ValueError(f"granted_mcycles: must be a finite number >= 0, got {granted_mcycles!r}")
    return granted_mcycles / (speed_mhz * cycle_s)


# --------------------------------------------------------------------------- /proc


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the executor uses. Times in clock ticks."""

    pid: int
    state: str
    ppid: int
    pgrp: int
    utime: int
    stime: int
    cutime: int
    cstime: int
    starttime: int

    @property
    def ticks(self) -> int:
        """CPU time of the process and of the children it has reaped (clock ticks)."""
        return self.utime + self.stime + self.cutime + self.cstime

    @property
    def is_zombie(self) -> bool:
        """Exited but not yet reaped (``Z``) or being torn down (``X``)."""
        return self.state in ("Z", "X")


def parse_proc_stat(data: bytes, source: str = "stat") -> ProcStat:
    """Parse one ``/proc/<pid>/stat`` line (proc(5)).

    The command name (field 2) is in parentheses and may itself hold spaces and
    parentheses, so the fields after it are found from the *last* ``)``.
    """
    try:
        lpar = data.index(b"(")
        rpar = data.rindex(b")")
        pid = int(data[:lpar])
        rest = data[rpar + 2 :].split()
        # rest[0] is field 3 (state): field n of proc(5) is rest[n - 3].
        return ProcStat(
            pid=pid,
            state=rest[0].decode("ascii"),
            ppid=int(rest[1]),
            pgrp=int(rest[2]),
            utime=int(rest[11]),
            stime=int(rest[12]),
            cutime=int(rest[13]),
            cstime=int(rest[14]),
            starttime=int(rest[19]),
        )
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"{source}: malformed /proc stat line ({exc})") from None


class ProcFs:
    """Reads process records from a proc file system (``root``, default ``/proc``).

    ``clk_tck`` is the tick length the stat times are counted in (ticks per second).
    """

    def __init__(self, root: Path = Path("/proc"), clk_tck: int | None = None) -> None:
        self.root = Path(root)
        self._root_s = str(self.root)
        self.clk_tck = int(clk_tck if clk_tck is not None else os.sysconf("SC_CLK_TCK"))
        if self.clk_tck <= 0:
            raise ValueError(f"clk_tck: must be > 0, got {self.clk_tck}")

    def _read(self, pid: int) -> bytes | None:
        # Plain strings, not pathlib: a full scan reads every process on the machine.
        try:
            with open(f"{self._root_s}/{pid}/stat", "rb") as f:
                return f.read() or None
        except OSError:
            # ENOENT or ESRCH: the process exited (and was reaped) after we listed it.
            return None

    def read_stat(self, pid: int) -> ProcStat | None:
        """The stat record of ``pid``, or None if the process is gone (or unreadable)."""
        data = self._read(pid)
        return parse_proc_stat(data, f"{self._root_s}/{pid}/stat") if data else None

    def children(self, pid: int) -> list[int]:
        """Children of ``pid``'s main thread (``task/<pid>/children``); [] if unavailable."""
        try:
            with open(f"{self._root_s}/{pid}/task/{pid}/children", "rb") as f:
                return [int(c) for c in f.read().split()]
        except OSError:
            return []

    def pids(self) -> list[int]:
        """Every pid listed under the root, ascending (parents tend to come first)."""
        try:
            names = os.listdir(self._root_s)
        except OSError:
            return []
        return sorted(int(n) for n in names if n.isdigit())

    def group(self, pgid: int) -> list[ProcStat]:
        """Every process (zombies included) whose process group is ``pgid``."""
        out = []
        want = str(pgid).encode()
        for pid in self.pids():
            data = self._read(pid)
            if data is None:
                continue
            # Cheap pre-filter on field 5 (pgrp) before the full parse.
            rest = data[data.rfind(b")") + 2 :].split(None, 3)
            if len(rest) > 2 and rest[2] == want:
                out.append(parse_proc_stat(data, f"{self._root_s}/{pid}/stat"))
        return out


class GroupCpuMeter:
    """Cumulative CPU time of one process group (x-bar's source), in clock ticks.

    :meth:`scan` lists the whole proc file system (finds every member; about 1-3 ms per
    100 processes); :meth:`refresh` re-reads the members already known and follows their
    ``/proc/<pid>/task/<pid>/children`` lists to new ones (cheap; misses orphans and
    children forked by non-main threads until the next scan, which then counts their
    whole CPU time). A member reaped by this process is handed to :meth:`retire` first,
    so its time is kept.
    """

    def __init__(self, procfs: ProcFs, pgid: int) -> None:
        self.procfs = procfs
        self.pgid = pgid
        self._members: dict[int, ProcStat] = {}
        self._retired = 0
        self._high = 0

    def _update(self) -> None:
        total = self._retired + sum(st.ticks for st in self._members.values())
        self._high = max(self._high, total)

    def scan(self) -> list[ProcStat]:
        """Full scan; returns the current members."""
        members = self.procfs.group(self.pgid)
        self._members = {st.pid: st for st in members}
        self._update()
        return members

    def refresh(self) -> None:
        """Re-read the known members and their descendants; drop those gone or no longer
        in the group (or whose pid now belongs to a process started at another time)."""
        fresh: dict[int, ProcStat] = {}
        # Parents before children (ascending pids, then each one's children after it):
        # a child reaped between the two reads is then missed once, not counted twice.
        todo = deque(sorted(self._members))
        while todo:
            pid = todo.popleft()
            if pid in fresh:
                continue
            st = self.procfs.read_stat(pid)
            if st is None or st.pgrp != self.pgid:
                continue
            old = self._members.get(pid)
            if old is not None and old.starttime != st.starttime:
                continue
            fresh[pid] = st
            if not st.is_zombie:
                todo.extend(self.procfs.children(pid))
        self._members = fresh
        self._update()

    def retire(self, stat: ProcStat) -> None:
        """Keep the final figures of a member this process is about to reap."""
        self._retired += stat.ticks
        self._members.pop(stat.pid, None)
        self._update()

    @property
    def members(self) -> list[ProcStat]:
        """The members seen by the last scan or refresh."""
        return list(self._members.values())

    @property
    def total_ticks(self) -> int:
        """Cumulative CPU time of the group since it started (ticks, monotone)."""
        return self._high

    @property
    def total_s(self) -> float:
        """Cumulative CPU time of the group since it started (CPU-seconds)."""
        return self._high / self.procfs.clk_tck


# --------------------------------------------------------------------------- cgroup v2


def _unescape_mount_field(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo (octal).
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def cgroup2_mounts(mountinfo: str) -> list[tuple[str, Path]]:
    """The cgroup v2 mounts in a ``/proc/self/mountinfo`` text: (cgroup root, mount point)."""
    mounts = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep or not right.split() or right.split()[0] != "cgroup2":
            continue
        fields = left.split()
        if len(fields) >= 5:
            root, point = _unescape_mount_field(fields[3]), _unescape_mount_field(fields[4])
            mounts.append((root, Path(point)))
    return mounts


def own_cgroup2_path(proc_cgroup: str) -> str | None:
    """This process's cgroup v2 path from a ``/proc/self/cgroup`` text (the ``0::`` line)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def cgroup_parent_usable(parent: Path) -> bool:
    """True if child cgroups of ``parent`` get the cpu controller and we may create them."""
    try:
        enabled = (Path(parent) / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False
    return "cpu" in enabled and os.access(parent, os.W_OK | os.X_OK)


def detect_cgroup_v2(
    proc_root: Path = Path("/proc"), parent: Path | None = None
) -> tuple[Path | None, str]:
    """Find a cgroup v2 directory to create subtask cgroups in; (path or None, reason).

    Candidates: ``parent`` if given, else ``$COALLOC_CGROUP_PARENT``, else this process's
    own cgroup v2 directory. It is usable when its ``cgroup.subtree_control`` enables
    ``cpu`` and it is writable (a delegated subtree). Nothing is written here.
    """
    if parent is None and os.environ.get(CGROUP_PARENT_ENV):
        parent = Path(os.environ[CGROUP_PARENT_ENV])
    if parent is None:
        try:
            mountinfo = (Path(proc_root) / "self" / "mountinfo").read_text()
            own = own_cgroup2_path((Path(proc_root) / "self" / "cgroup").read_text())
        except OSError as exc:
            return None, f"cannot read cgroup information: {exc.strerror}"
        mounts = cgroup2_mounts(mountinfo)
        if not mounts:
            return None, "no cgroup v2 file system is mounted"
        if own is None:
            return None, "this process is in no cgroup v2 hierarchy"
        for root, mount_point in mounts:
            if own == root or own.startswith(root.rstrip("/") + "/"):
                parent = mount_point / own[len(root) :].lstrip("/")
                break
        else:
            return None, "this process's cgroup v2 is not visible under any mount"
    if not cgroup_parent_usable(parent):
        return None, f"{parent}: cpu controller not enabled for children, or not writable"
    return parent, f"{parent}: writable cgroup v2 with the cpu controller"


def cpu_max_value(share: float, period_us: int = CGROUP_PERIOD_US) -> str:
    """The ``cpu.max`` line for ``share`` cores: ``"<quota_us> <period_us>"``.

    The quota may exceed the period (several cores); it never goes below the kernel's
    minimum of 1000 µs (a share of 0 is enforced with SIGSTOP instead).
    """
    quota = max(CGROUP_MIN_QUOTA_US, round(share * period_us))
    return f"{quota} {period_us}"


class CgroupCpuLimit:
    """One subtask's child cgroup under a delegated cgroup v2 directory."""

    def __init__(self, parent: Path, name: str) -> None:
        self.path = Path(parent) / name
        self.path.mkdir(exist_ok=True)
        if not (self.path / "cpu.max").exists():
            self.remove()
            raise OSError(f"{self.path}: no cpu.max after creation (cpu controller missing)")

    def set_share(self, share: float) -> None:
        """Write ``cpu.max`` for ``share`` cores."""
        (self.path / "cpu.max").write_text(cpu_max_value(share))

    def add(self, pids: Iterable[int]) -> None:
        """Move processes into the cgroup; processes that have exited are skipped."""
        for pid in pids:
            try:
                (self.path / "cgroup.procs").write_text(str(pid))
            except ProcessLookupError:
                continue

    def remove(self) -> None:
        """Remove the cgroup (only possible once it is empty; errors are ignored)."""
        try:
            self.path.rmdir()
        except OSError:
            pass


# --------------------------------------------------------------------------- pacing


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
        self.period_s = _positive("period_s", period_s)
        self.max_rate = _positive("max_rate", max_rate)
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


# --------------------------------------------------------------------------- executor

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
    death come back to this process to be reaped instead of going to PID 1 (which in some
    containers never reaps); so do orphans of any other child of this process, which is
    why it is on only while subtasks run.
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


#: Environment variable every subtask process carries: ``<owner pid>:<owner start time>``
#: (start time in clock ticks since boot, from /proc), naming the process that started it.
OWNER_ENV = "COALLOC_EXECUTOR_OWNER"


def owner_marker(proc_root: Path = Path("/proc")) -> str:
    """This process's owner marker (see :data:`OWNER_ENV`); the start time guards against
    a recycled pid."""
    st = ProcFs(proc_root).read_stat(os.getpid())
    return f"{os.getpid()}:{st.starttime if st is not None else 0}"


def stale_subtasks(proc_root: Path = Path("/proc")) -> list[int]:
    """Pids of subtask processes whose owner no longer exists.

    A process is a stale subtask when its environment (as it was at exec,
    ``/proc/<pid>/environ``) carries :data:`OWNER_ENV` naming a pid that is gone or now
    has another start time. Processes of other users are skipped (unreadable).
    """
    fs = ProcFs(proc_root)
    key = OWNER_ENV.encode() + b"="
    alive: dict[bytes, bool] = {}
    stale = []
    for pid in fs.pids():
        if pid == os.getpid():
            continue
        try:
            with open(f"{fs.root}/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        owner = next((v[len(key) :] for v in environ.split(b"\0") if v.startswith(key)), None)
        if owner is None:
            continue
        if owner not in alive:
            owner_pid, _, owner_start = owner.partition(b":")
            st = fs.read_stat(int(owner_pid)) if owner_pid.isdigit() else None
            alive[owner] = st is not None and str(st.starttime).encode() == owner_start
        if not alive[owner]:
            stale.append(pid)
    return stale


def reap_stale_subtasks(proc_root: Path = Path("/proc")) -> list[int]:
    """SIGKILL every subtask process whose owner no longer exists; return their pids.

    For the one exit no cleanup code survives: the owner SIGKILLed (``ray.kill`` on the
    local-manager actor). Its subtasks would keep running, or stay stopped, forever; a new
    local manager calls this at start-up. See :func:`stale_subtasks`.
    """
    killed = []
    for pid in stale_subtasks(proc_root):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return killed


_LIVE: weakref.WeakSet[ProcessExecutor] = weakref.WeakSet()


def _close_all_at_exit() -> None:
    for ex in list(_LIVE):
        try:
            ex.close(grace_s=min(ex.grace_s, 0.5))
        except Exception:  # best effort at interpreter exit
            pass


atexit.register(_close_all_at_exit)


class ProcessExecutor:
    """Runs one subtask as a real process group and holds it to a CPU share per cycle.

    ``argv`` is the command (a list of strings; no shell). ``speed_mhz`` is the node's
    speed (MHz) used to express measured CPU in Mcycles. ``stdout``/``stderr`` are files
    the command's output is appended to (None: discarded; the same path for both: one
    merged file); stdin is always ``/dev/null``. ``mode`` forces a :class:`LimitMode`
    (None: cgroup v2 when usable, else duty cycling). ``period_s`` is the duty-cycle period
    (s), ``rescan_s`` the interval (s) between full scans for new group members,
    ``grace_s`` the SIGTERM-to-SIGKILL delay (s). ``clock``/``sleep`` are the time source
    (s) and the blocking wait used by :meth:`run_cycle` and the kill sequence. ``env``
    replaces the environment (None: inherit this process's); either way
    :data:`OWNER_ENV` is added so that :func:`reap_stale_subtasks` can find the processes
    if this owner dies without cleaning up.

    Use: :meth:`start`, then per cycle either :meth:`run_cycle` (blocking) or
    :meth:`begin_cycle`, :meth:`step` until it returns None (waiting until the time it
    returns in between), :meth:`end_cycle`. Finally :meth:`close` (also on GC and at exit).
    After :meth:`start` the group is stopped until its first cycle grants it CPU.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        speed_mhz: float,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        stdout: str | os.PathLike[str] | None = None,
        stderr: str | os.PathLike[str] | None = None,
        mode: LimitMode | str | None = None,
        cgroup_parent: str | os.PathLike[str] | None = None,
        period_s: float = DEFAULT_PERIOD_S,
        rescan_s: float = DEFAULT_RESCAN_S,
        grace_s: float = DEFAULT_GRACE_S,
        ncores: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        proc_root: str | os.PathLike[str] = "/proc",
        reap_orphans: bool = True,
    ) -> None:
        self.argv = validate_argv(argv)
        self.speed_mhz = _positive("speed_mhz", speed_mhz)
        self.period_s = _positive("period_s", period_s)
        self.rescan_s = _positive("rescan_s", rescan_s)
        if not isinstance(grace_s, (int, float)) or not math.isfinite(grace_s) or grace_s < 0:
            raise ValueError(f"grace_s: must be a finite number >= 0, got {grace_s!r}")
        self.grace_s = float(grace_s)
        self.ncores = _positive(
            "ncores", ncores if ncores is not None else len(os.sched_getaffinity(0))
        )
        self.cwd = Path(cwd) if cwd is not None else None
        if self.cwd is not None and not self.cwd.is_dir():
            raise ValueError(f"cwd: {str(self.cwd)!r}: not an existing directory")
        self.env = _validate_env(env)
        self.stdout = Path(stdout) if stdout is not None else None
        self.stderr = Path(stderr) if stderr is not None else None
        for field_name, path in (("stdout", self.stdout), ("stderr", self.stderr)):
            if path is not None and not path.parent.is_dir():
                raise ValueError(f"{field_name}: {str(path)!r}: parent directory does not exist")
        self.proc_root = Path(proc_root)
        self.reap_orphans = reap_orphans
        self._clock = clock
        self._sleep = sleep

        requested = _parse_mode(mode)
        if requested is LimitMode.DUTY_CYCLE:
            self._cgroup_parent: Path | None = None
            reason = "duty cycling requested"
        else:
            self._cgroup_parent, reason = detect_cgroup_v2(
                self.proc_root, Path(cgroup_parent) if cgroup_parent is not None else None
            )
        self.mode = select_limit_mode(requested, self._cgroup_parent, reason)
        self.mode_reason = reason

        self._lock = threading.RLock()
        self._state = ExecutorState.CREATED
        self._popen: subprocess.Popen[bytes] | None = None
        self._meter: GroupCpuMeter | None = None
        self._cgroup: CgroupCpuLimit | None = None
        self._group_alive = False
        self._stopped = False
        self._exit_code: int | None = None
        self._subreaper = False
        self._pacer = DutyCyclePacer(self.period_s, max_rate=self.ncores)
        self._mark_s = 0.0
        self._in_cycle = False
        self._paced = False
        self._share = 0.0
        self._cycle_start = 0.0
        self._cycle_end = 0.0
        self._last_scan = -math.inf
        self.leftover_pids: tuple[int, ...] = ()

    # ------------------------------------------------------------------ properties

    @property
    def state(self) -> ExecutorState:
        """Current life-cycle state (does not poll; see :meth:`poll`)."""
        return self._state

    @property
    def pid(self) -> int | None:
        """Pid of the leader, which is also the process group id; None before start."""
        return self._popen.pid if self._popen is not None else None

    @property
    def pgid(self) -> int | None:
        """Process group id of the subtask (== :attr:`pid`); None before start."""
        return self.pid

    @property
    def exit_code(self) -> int | None:
        """The leader's exit status once it has exited (negative: killed by that signal)."""
        return self._exit_code

    @property
    def cpu_s_total(self) -> float:
        """CPU-seconds the group has consumed since start (as last measured)."""
        return self._meter.total_s if self._meter is not None else 0.0

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        """Start the command in a new session and process group, stopped.

        Raises ValueError naming ``argv[0]`` when the executable cannot be found or run.
        """
        with self._lock:
            if self._state is not ExecutorState.CREATED:
                raise RuntimeError(f"start: executor is {self._state.value}, not created")
            if self.reap_orphans and not self._subreaper:
                self._subreaper = acquire_child_subreaper()
            env = dict(self.env if self.env is not None else os.environ)
            env[OWNER_ENV] = owner_marker(self.proc_root)
            out = err = None
            try:
                out = open(self.stdout, "ab") if self.stdout is not None else None
                if self.stderr is not None and self.stderr == self.stdout:
                    err_target: int | object = subprocess.STDOUT
                else:
                    err = open(self.stderr, "ab") if self.stderr is not None else None
                    err_target = err if err is not None else subprocess.DEVNULL
                try:
                    self._popen = subprocess.Popen(
                        list(self.argv),
                        cwd=self.cwd,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out if out is not None else subprocess.DEVNULL,
                        stderr=err_target,  # type: ignore[arg-type]
                        start_new_session=True,
                        close_fds=True,
                    )
                except FileNotFoundError:
                    where = "" if "/" in self.argv[0] else " on PATH"
                    raise ValueError(
                        f"argv[0]: {self.argv[0]!r}: no such executable{where}"
                    ) from None
                except OSError as exc:
                    raise ValueError(
                        f"argv[0]: {self.argv[0]!r}: cannot execute ({exc.strerror})"
                    ) from None
            finally:
                for f in (out, err):
                    if f is not None:
                        f.close()
            pid = self._popen.pid
            self._group_alive = True
            self._meter = GroupCpuMeter(ProcFs(self.proc_root), pid)
            # Held stopped until the first cycle grants it CPU.
            self._signal(signal.SIGSTOP)
            self._stopped = True
            if self.mode is LimitMode.CGROUP_V2:
                self._start_cgroup(pid)
            self._state = ExecutorState.RUNNING
            _LIVE.add(self)
            self._meter.scan()

    def _start_cgroup(self, pid: int) -> None:
        assert self._cgroup_parent is not None
        try:
            self._cgroup = CgroupCpuLimit(self._cgroup_parent, f"coalloc-{os.getpid()}-{pid}")
            self._cgroup.set_share(0.0)
            self._cgroup.add([pid])
        except OSError as exc:
            self._cgroup_failed(exc)

    def _cgroup_failed(self, exc: OSError) -> None:
        """Detection said yes but the kernel said no: duty cycling from now on, and why."""
        if self._cgroup is not None:
            try:
                self._cgroup.set_share(self.ncores)  # lift the quota on what was moved in
            except OSError:
                pass
            self._cgroup.remove()
        self._cgroup = None
        self.mode = LimitMode.DUTY_CYCLE
        self.mode_reason = f"cgroup v2 failed ({exc}); duty cycling instead"

    # ------------------------------------------------------------------ cycles

    def begin_cycle(self, share: float, cycle_s: float) -> None:
        """Start a scheduling cycle of ``cycle_s`` s with a CPU share of ``share`` cores."""
        if not isinstance(share, (int, float)) or not math.isfinite(share):
            raise ValueError(f"share: must be a finite number, got {share!r}")
        if not 0 <= share <= self.ncores:
            raise ValueError(f"share: must be within 0..{self.ncores:g} cores, got {share!r}")
        _positive("cycle_s", cycle_s)
        with self._lock:
            if self._state is ExecutorState.CREATED:
                raise RuntimeError("begin_cycle: executor not started")
            if self._in_cycle:
                raise RuntimeError("begin_cycle: the previous cycle has not ended")
            now = self._clock()
            self._in_cycle = True
            self._paced = False
            self._share = float(share)
            self._cycle_start = now
            self._cycle_end = now + cycle_s
            if self._state is not ExecutorState.RUNNING or self._check_exit():
                return
            if self.mode is LimitMode.CGROUP_V2:
                assert self._cgroup is not None and self._meter is not None
                self._measure(now, full=now - self._last_scan >= self.rescan_s)
                try:
                    self._cgroup.set_share(self._share)
                    # Children forked since the last cycle are in the cgroup already
                    # (inherited); this catches members moved out by someone else.
                    self._cgroup.add(st.pid for st in self._meter.members if not st.is_zombie)
                except OSError as exc:
                    self._cgroup_failed(exc)
                else:
                    self._set_stopped(self._share <= 0)
            if self.mode is LimitMode.DUTY_CYCLE:
                self._pacer.begin(self._share, cycle_s, now, self._mark_s)
                self._paced = True

    def step(self) -> float | None:
        """Do what is due now (signals, measurement, completion check).

        Returns the clock time at which to call again, or None when the cycle is over
        (time is up, or the subtask finished or was cancelled). Never blocks, except for
        the kill sequence when the leader has exited and other members remain.
        """
        with self._lock:
            if not self._in_cycle:
                raise RuntimeError("step: no cycle begun")
            if self._state is not ExecutorState.RUNNING or self._check_exit():
                return None
            now = self._clock()
            full = now - self._last_scan >= self.rescan_s
            if full or (self.mode is LimitMode.DUTY_CYCLE and self._pacer.decision_due(now)):
                # Off-switches need no reading; in cgroup mode only end_cycle needs one.
                self._measure(now, full=full)
            if self.mode is LimitMode.DUTY_CYCLE:
                assert self._meter is not None
                nxt = self._pacer.tick(now, self._meter.total_s)
                self._set_stopped(not self._pacer.running)
                return nxt
            if now >= self._cycle_end:
                return None
            return min(self._cycle_end, now + self.period_s)

    def end_cycle(self) -> CycleUsage:
        """Close the cycle and report what the group really got in it."""
        with self._lock:
            if not self._in_cycle:
                raise RuntimeError("end_cycle: no cycle begun")
            now = self._clock()
            run_s = 0.0
            if self._state is ExecutorState.RUNNING and not self._check_exit():
                self._measure(now, full=now - self._last_scan >= self.rescan_s)
                if self.mode is LimitMode.DUTY_CYCLE:
                    run_s = self._pacer.finish(now)
                    self._set_stopped(True)
                else:
                    run_s = now - self._cycle_start if self._share > 0 else 0.0
            elif self._paced:
                run_s = self._pacer.finish(now)
            total = self.cpu_s_total
            cpu_s = max(0.0, total - self._mark_s)
            self._mark_s = total
            self._in_cycle = False
            return CycleUsage(
                granted_share=self._share,
                wall_s=max(0.0, now - self._cycle_start),
                run_s=run_s,
                cpu_s=cpu_s,
                mcycles=cpu_s * self.speed_mhz,
                mode=self.mode,
                state=self._state,
                exit_code=self._exit_code,
            )

    def run_cycle(self, share: float, cycle_s: float) -> CycleUsage:
        """One whole cycle, blocking for up to ``cycle_s`` s (less if the subtask ends)."""
        self.begin_cycle(share, cycle_s)
        while (nxt := self.step()) is not None:
            delay = nxt - self._clock()
            if delay > 0:
                self._sleep(delay)
        return self.end_cycle()

    # ------------------------------------------------------------------ completion

    def poll(self) -> ExecutorState:
        """Check for completion without blocking (finishing the group if the leader exited)."""
        with self._lock:
            if self._state is ExecutorState.RUNNING:
                self._check_exit()
            return self._state

    def cancel(self, grace_s: float | None = None) -> None:
        """Kill the whole group: SIGCONT, SIGTERM, ``grace_s`` s (default: the executor's),
        SIGKILL; reap everything. A leader that had already exited counts as finished."""
        with self._lock:
            if self._state is ExecutorState.CREATED:
                self._state = ExecutorState.CANCELLED
                return
            if self._state is not ExecutorState.RUNNING or self._check_exit():
                return
            self._shutdown(ExecutorState.CANCELLED, self.grace_s if grace_s is None else grace_s)

    def close(self, grace_s: float | None = None) -> None:
        """Cancel if still running and release everything. Idempotent."""
        with self._lock:
            self.cancel(grace_s)
            _LIVE.discard(self)

    def __enter__(self) -> ProcessExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if getattr(self, "_state", None) is ExecutorState.RUNNING:
                self.close(grace_s=min(self.grace_s, 0.5))
        except Exception:  # never raise from a finaliser
            pass

    # ------------------------------------------------------------------ internals

    def _signal(self, sig: int) -> None:
        # Only while the group exists: afterwards its id may be reused by someone else.
        if self._group_alive and self._popen is not None:
            try:
                os.killpg(self._popen.pid, sig)
            except ProcessLookupError:
                pass

    def _set_stopped(self, stopped: bool) -> None:
        if stopped != self._stopped:
            self._signal(signal.SIGSTOP if stopped else signal.SIGCONT)
            self._stopped = stopped

    def _measure(self, now: float, full: bool) -> None:
        assert self._meter is not None
        if full:
            self._meter.scan()
            self._reap_adopted()
            self._last_scan = now
        else:
            self._meter.refresh()

    def _reap_adopted(self) -> None:
        """Reap zombie members that were re-parented to this process (leader excluded)."""
        assert self._meter is not None and self._popen is not None
        me = os.getpid()
        for st in self._meter.members:
            if st.is_zombie and st.ppid == me and st.pid != self._popen.pid:
                self._meter.retire(st)
                try:
                    os.waitpid(st.pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def _check_exit(self) -> bool:
        """If the leader has exited, finish the group and return True."""
        assert self._popen is not None
        try:
            # WNOWAIT: leave it a zombie, so that its final CPU times can still be read.
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            if os.waitid(os.P_PID, self._popen.pid, flags) is None:
                return False
        except ChildProcessError:
            pass  # someone else reaped it: it has exited all the same
        self._shutdown(ExecutorState.FINISHED, self.grace_s)
        return True

    def _live_members(self) -> list[ProcStat]:
        assert self._meter is not None
        self._meter.scan()
        self._reap_adopted()
        return [st for st in self._meter.members if not st.is_zombie]

    def _wait_group_dead(self, timeout_s: float) -> bool:
        deadline = self._clock() + timeout_s
        while self._live_members():
            if self._clock() >= deadline:
                return False
            self._sleep(_KILL_POLL_S)
        return True

    def _shutdown(self, final: ExecutorState, grace_s: float) -> None:
        """Terminate every member, account for their CPU, reap them, mark ``final``."""
        assert self._popen is not None and self._meter is not None
        if self._live_members():
            # SIGCONT first so that stopped members can act on SIGTERM.
            self._signal(signal.SIGCONT)
            self._signal(signal.SIGTERM)
            self._stopped = False
            if not self._wait_group_dead(grace_s):
                self._signal(signal.SIGKILL)
                self._wait_group_dead(_KILL_SETTLE_S)
        leader = self._meter.procfs.read_stat(self._popen.pid)
        if leader is not None and leader.pgrp == self._popen.pid:
            self._meter.retire(leader)
        try:
            self._exit_code = self._popen.wait(timeout=_KILL_SETTLE_S)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was ignored?
            self._exit_code = None
        # Members orphaned by the leader's exit reach us as zombies: reap them too.
        deadline = self._clock() + _KILL_SETTLE_S
        self._meter.scan()
        self._reap_adopted()
        while self._meter.members and self._clock() < deadline:
            self._sleep(_KILL_POLL_S)
            self._meter.scan()
            self._reap_adopted()
        self.leftover_pids = tuple(st.pid for st in self._meter.members)
        self._group_alive = bool(self.leftover_pids)
        if self._cgroup is not None:
            self._cgroup.remove()
        self._state = final
        _LIVE.discard(self)
        if self._subreaper:
            self._subreaper = False
            release_child_subreaper()


def _parse_mode(mode: LimitMode | str | None) -> LimitMode | None:
    if mode is None or isinstance(mode, LimitMode):
        return mode
    try:
        return LimitMode(mode)
    except ValueError:
        choices = ", ".join(m.value for m in LimitMode)
        raise ValueError(f"mode: unknown limit mode {mode!r} (choose {choices})") from None


def select_limit_mode(
    requested: LimitMode | None, cgroup_parent: Path | None, reason: str = ""
) -> LimitMode:
    """The limit mode to use: ``requested`` if possible, else cgroup v2 when a usable
    cgroup parent was found, else duty cycling. Asking for cgroup v2 without one fails."""
    if requested is LimitMode.CGROUP_V2 and cgroup_parent is None:
        raise ValueError(
            f"mode: cgroup_v2 requested but not available ({reason}); set "
            f"{CGROUP_PARENT_ENV} to a delegated cgroup v2 directory with +cpu in "
            "cgroup.subtree_control"
        )
    if requested is not None:
        return requested
    return LimitMode.CGROUP_V2 if cgroup_parent is not None else LimitMode.DUTY_CYCLE
