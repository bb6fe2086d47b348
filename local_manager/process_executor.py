"""The process executor: one subtask as a real OS process tree, held each scheduling
cycle to the CPU share its local manager grants, with the CPU time it really got measured
(that measurement is x-bar in eq. 4 of the SQ paper, ``docs/model.md`` §3), killed whole
at the end, and adoptable by a new owner after a local-manager restart.

Its parts live in sibling modules, imported from there: :mod:`local_manager.proc_tree`
(process trees and CPU times through psutil, owner markers, the child subreaper),
:mod:`local_manager.cgroups` (cgroup v2 detection, the per-subtask cgroup, ``cpu.max``,
``cgroup.kill``), :mod:`local_manager.pacer` (duty cycling),
:mod:`local_manager.executor_records` (the modes, states, the per-cycle usage and the
checkpoint record) and :mod:`local_manager.exit_recorder`. The sweep for subtasks whose
owner died is :mod:`local_manager.sweep`.

Units
    Time in seconds of the executor's clock (injected; default ``time.monotonic``). CPU time
    in CPU-seconds. A *share* is a fraction of one core, ``0 .. ncores`` (1.0 = one full
    core, 2.0 = two cores). Work in Mcycles: ``Mcycles = cpu_seconds * speed_mhz`` with the
    node's speed in MHz, so one core of a 300 MHz node for 1 s is 300 Mcycles.

Process group and containment (:class:`Containment`)
    The command is an argv list (never a shell string) started with ``start_new_session``,
    so the subtask and every child it forks share one process group (pgid = leader pid);
    signals go to the group with ``killpg``, and separately to every known member that left
    it (``setsid``, ``setpgid``). Which processes are members:
    ``cgroup``: where a writable cgroup v2 directory exists (``COALLOC_CGROUP_PARENT`` or
    this process's own cgroup; no controller needed), each subtask gets a child cgroup
    ``coalloc-<tag>``; the leader (and anything it forked before being stopped) is moved
    in at start, and every process forked inside stays inside whatever it does with
    sessions. ``process_tree``: otherwise, the leader's descendants, found by a full scan
    once a second and through the known members' ``children`` lists in between; every
    process seen is remembered by (pid, create time) and stays a member while it lives,
    also after its parent dies (the owner is a child subreaper, so such orphans become its
    children and are found by the :data:`TAG_ENV` they inherit).

Limiting (:class:`LimitMode`)
    ``duty_cycle``: SIGCONT/SIGSTOP in periods of ``period_s`` (20 ms by default). At the
    start of each period the :class:`DutyCyclePacer` compares the CPU the tree has used in
    the cycle with ``share * elapsed`` and lets it run just long enough to catch up (a
    feedback loop on measured CPU, so a tree that runs on several cores or is slowed by
    other load is still held to its share). Between cycles the tree is stopped.
    ``cgroup_v2``: when the cgroup directory also enables the ``cpu`` controller for its
    children, the subtask cgroup's ``cpu.max`` is ``share * 100 ms`` per 100 ms. A share
    of 0 stops the tree with SIGSTOP in both modes.

Measuring
    ``cgroup`` containment: ``usage_usec`` of the subtask cgroup's ``cpu.stat`` (every
    process that ever ran in it, exited ones included, µs resolution), plus the CPU time
    processes had used before they were moved in. ``process_tree`` containment: the sum
    over members of psutil's ``user + system + children_user + children_system`` (10 ms
    ticks), plus the final figures of members this executor reaped itself (read from the
    zombie before reaping); a member reaped by another member is in that member's
    children times. The leader's exit is detected with ``waitid(WNOWAIT)`` so its final
    times are read before it is reaped. Either way the cumulative figure is kept monotone.

Cleanup
    On finish (the leader exits), on :meth:`ProcessExecutor.cancel`, on ``close()``, on
    garbage collection and at interpreter exit every member gets SIGCONT, SIGTERM, a grace
    period, then SIGKILL (``cgroup.kill`` for a cgroup), and every member that is this
    process's child is reaped. A SIGKILL of the owning process itself runs no cleanup (no
    code can); every subtask process therefore carries :data:`OWNER_ENV` and
    :data:`TAG_ENV` in its environment, and :func:`local_manager.sweep.reap_stale_subtasks`
    (called by a new owner at start-up) kills those whose owner is gone, with their
    descendants and their cgroup, except those being re-attached and those their owner's
    restart file still holds for its restart (``restart_file``).

Exit status
    The command is started through :mod:`local_manager.exit_recorder`: a small Python
    supervisor that is the session and group leader (so :attr:`ProcessExecutor.pid` is the
    recorder's pid, and a pid shown in status is the recorder's), runs the command as its
    only child in the same group, forwards termination signals sent to it alone, and
    writes the command's exit status atomically to a status file (``<tag>.exit`` in
    ``status_dir``, default :func:`~local_manager.exit_recorder.default_status_dir`)
    before it exits the same way. A live owner reads the status as before (``wait`` on
    its child); a re-attached owner, which is not the leader's parent, reads the file.
    The file is removed when the executor finishes or is closed, and by the sweep
    (:mod:`local_manager.sweep`) for the subtasks it kills or whose recorder is gone.

Re-attaching
    :meth:`ProcessExecutor.checkpoint` returns an :class:`ExecutorRecord` (pid, pgid,
    create time, known members, cgroup, mode, and the CPU reading already reported);
    :meth:`ProcessExecutor.attach` adopts the still-running subtask from it in another
    process without killing it, holds it stopped until its next cycle, and measures on:
    the first cycle after attaching reports all CPU used since the reading in the record
    (x-bar of eq. 4 counts from the last checkpointed reading, so nothing is lost or
    counted twice across the restart). The record names the status file (see "Exit
    status"): a re-attached executor is not the leader's parent, so when the leader is
    gone it reads the command's exit status from there; with no file there (the recorder
    itself was SIGKILLed) :attr:`~ProcessExecutor.exit_code` is None and
    :attr:`~ProcessExecutor.exit_reason` says that the status was lost. While it owns the
    subtask, its pid is in the status file's ``.owner`` companion, so the recorder does
    not forward the group signals it sends.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import secrets
import signal
import stat
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from local_manager import exit_recorder
from local_manager.cgroups import (
    CGROUP_NAME_PREFIX,
    CGROUP_PARENT_ENV,
    SubtaskCgroup,
    detect_cgroup_containment,
    detect_cgroup_v2,
)
from local_manager.executor_records import (
    Containment,
    CycleUsage,
    ExecutorRecord,
    ExecutorState,
    LimitMode,
    parse_containment,
    parse_mode,
    select_limit_mode,
    validate_argv,
    validate_env,
)
from local_manager.pacer import DEFAULT_PERIOD_S, DutyCyclePacer, positive
from local_manager.proc_tree import (
    OWNER_ENV,
    PSUTIL,
    RESTART_FILE_ENV,
    TAG_ENV,
    ProcSample,
    TreeCpuMeter,
    acquire_child_subreaper,
    owner_marker,
    release_child_subreaper,
    same_process,
)

log = logging.getLogger("coalloc.local_manager")

#: Default interval (s) between full scans of the machine's processes (psutil reads every
#: process, about 1-3 ms per 100). In between, new members are found through the
#: ``children`` lists of the known ones (process tree) or the cgroup's member list.
DEFAULT_RESCAN_S = 1.0
#: Default time (s) between SIGTERM and SIGKILL.
DEFAULT_GRACE_S = 2.0
#: Poll interval (s) while waiting for a signalled tree to die.
KILL_POLL_S = 0.01
#: How long (s) to wait for SIGKILLed members to become reapable.
KILL_SETTLE_S = 2.0

# The executors of this process that hold a subtask (started or re-attached, not closed).
_LIVE: weakref.WeakSet[ProcessExecutor] = weakref.WeakSet()


def live_tags() -> set[str]:
    """The tags of the subtasks this process's executors hold: no sweep of this
    process kills them (:func:`local_manager.sweep.reap_stale_subtasks`)."""
    return {ex.tag for ex in list(_LIVE) if ex.tag}


def _close_all_at_exit() -> None:
    for ex in list(_LIVE):
        try:
            ex.close(grace_s=min(ex.grace_s, 0.5))
        except Exception:  # best effort at interpreter exit
            pass


atexit.register(_close_all_at_exit)


class ProcessExecutor:
    """Runs one subtask as a real process tree and holds it to a CPU share per cycle.

    ``argv`` is the command (a list of strings; no shell). ``speed_mhz`` is the node's
    speed (MHz) used to express measured CPU in Mcycles. ``stdout``/``stderr`` are files
    the command's output is appended to (None: discarded; the same path for both: one
    merged file); stdin is always ``/dev/null``. ``mode`` forces a :class:`LimitMode`
    (None: cgroup v2 when usable, else duty cycling); ``containment`` forces a
    :class:`Containment` (None: a cgroup when one can be created, else the process tree);
    ``cgroup_parent`` names the cgroup v2 directory to use for both. ``period_s`` is the
    duty-cycle period (s), ``rescan_s`` the interval (s) between full scans for new
    members, ``grace_s`` the SIGTERM-to-SIGKILL delay (s). ``clock``/``sleep`` are the time
    source (s) and the blocking wait used by :meth:`run_cycle` and the kill sequence.
    ``env`` replaces the environment (None: inherit this process's); either way
    :data:`OWNER_ENV` and :data:`TAG_ENV` are added so that the sweep
    (:func:`local_manager.sweep.reap_stale_subtasks`) can find the processes if this owner
    dies without cleaning up. ``status_dir`` is where
    the exit recorder writes the command's exit status (None:
    :func:`~local_manager.exit_recorder.default_status_dir`); see "Exit status" above.
    ``restart_file``: the owner's restart file, when the owner is restarted after a crash
    and re-attaches the subtasks that file names (it goes into the command's environment
    as :data:`RESTART_FILE_ENV`; see :func:`local_manager.sweep.awaiting_reattach_removed`).
    :attr:`exit_reason` says why :attr:`exit_code` is None once the subtask has ended
    without a readable status. :attr:`containment` and :attr:`mode` say how the subtask is
    held, :attr:`containment_reason` and :attr:`mode_reason` why; the log says it once
    per start or re-attach (INFO) and again whenever the kernel refuses the cgroup or
    ``cpu.max`` and the executor falls back (WARNING).

    Use: :meth:`start` (or :meth:`attach` to adopt a running one), then per cycle either
    :meth:`run_cycle` (blocking) or :meth:`begin_cycle`, :meth:`step` until it returns None
    (waiting until the time it returns in between), :meth:`end_cycle`;
    :meth:`checkpoint` between cycles. Finally :meth:`close` (also on GC and at exit).
    After :meth:`start` and :meth:`attach` the subtask is stopped until its next cycle
    grants it CPU.
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
        containment: Containment | str | None = None,
        cgroup_parent: str | os.PathLike[str] | None = None,
        period_s: float = DEFAULT_PERIOD_S,
        rescan_s: float = DEFAULT_RESCAN_S,
        grace_s: float = DEFAULT_GRACE_S,
        ncores: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        proc_root: str | os.PathLike[str] = "/proc",
        reap_orphans: bool = True,
        status_dir: str | os.PathLike[str] | None = None,
        restart_file: str | os.PathLike[str] | None = None,
    ) -> None:
        self.argv = validate_argv(argv)
        self.status_dir = Path(status_dir).absolute() if status_dir is not None else None
        self.restart_file = Path(restart_file).absolute() if restart_file is not None else None
        self.speed_mhz = positive("speed_mhz", speed_mhz)
        self.period_s = positive("period_s", period_s)
        self.rescan_s = positive("rescan_s", rescan_s)
        if not isinstance(grace_s, (int, float)) or not math.isfinite(grace_s) or grace_s < 0:
            raise ValueError(f"grace_s: must be a finite number >= 0, got {grace_s!r}")
        self.grace_s = float(grace_s)
        self.ncores = positive(
            "ncores", ncores if ncores is not None else len(os.sched_getaffinity(0))
        )
        self.cwd = Path(cwd) if cwd is not None else None
        if self.cwd is not None and not self.cwd.is_dir():
            raise ValueError(f"cwd: {str(self.cwd)!r}: not an existing directory")
        self.env = validate_env(env)
        self.stdout = Path(stdout) if stdout is not None else None
        self.stderr = Path(stderr) if stderr is not None else None
        for field_name, path in (("stdout", self.stdout), ("stderr", self.stderr)):
            if path is not None and not path.parent.is_dir():
                raise ValueError(f"{field_name}: {str(path)!r}: parent directory does not exist")
        self.proc_root = Path(proc_root)
        self.reap_orphans = reap_orphans
        self._clock = clock
        self._sleep = sleep

        parent_arg = Path(cgroup_parent) if cgroup_parent is not None else None
        requested = parse_mode(mode)
        if requested is LimitMode.DUTY_CYCLE:
            self._cgroup_parent: Path | None = None
            reason = "duty cycling requested"
        else:
            self._cgroup_parent, reason = detect_cgroup_v2(self.proc_root, parent_arg)
        self.mode = select_limit_mode(requested, self._cgroup_parent, reason)
        self.mode_reason = reason

        wanted = parse_containment(containment)
        if wanted is Containment.PROCESS_TREE:
            self._containment_parent: Path | None = None
            why = "process tree requested"
        else:
            self._containment_parent, why = detect_cgroup_containment(self.proc_root, parent_arg)
            if wanted is Containment.CGROUP and self._containment_parent is None:
                raise ValueError(
                    f"containment: cgroup requested but not available ({why}); set "
                    f"{CGROUP_PARENT_ENV} to a writable cgroup v2 directory"
                )
        self.containment = (
            Containment.CGROUP if self._containment_parent is not None
            else Containment.PROCESS_TREE
        )
        self.containment_reason = why

        self._lock = threading.RLock()
        self._state = ExecutorState.CREATED
        self._popen: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._leader_created = 0.0
        self._leader_is_child = False
        self._tag = ""
        self._meter: TreeCpuMeter | None = None
        self._cgroup: SubtaskCgroup | None = None
        self._cgroup_offset_s = 0.0
        self._outsiders: list[int] = []
        self._owner_kids: set[int] = set()
        self._signalled: set[tuple[int, int]] = set()
        self._group_alive = False
        self._stopped = False
        self._exit_code: int | None = None
        self._status_file: Path | None = None
        self._lost_reason = "exit status lost: its exit recorder ended without recording it"
        self.exit_reason: str | None = None
        self._subreaper = False
        self._pacer = DutyCyclePacer(self.period_s, max_rate=self.ncores)
        self._total_s = 0.0
        self._mark_s = 0.0
        self._in_cycle = False
        self._paced = False
        self._share = 0.0
        self._cycle_start = 0.0
        self._cycle_end = 0.0
        self._last_scan = -math.inf
        self.leftover_pids: tuple[int, ...] = ()
        # A fallback from the containment or limit mode chosen above, and whether the
        # start or re-attach line is in the log yet (a fallback before it is said there).
        self._fell_back = False
        self._announced = False

    # ------------------------------------------------------------------ properties

    @property
    def state(self) -> ExecutorState:
        """Current life-cycle state (does not poll; see :meth:`poll`)."""
        return self._state

    @property
    def pid(self) -> int | None:
        """Pid of the leader, which is also the process group id; None before start. The
        leader is the exit recorder (:mod:`local_manager.exit_recorder`), whose only child
        is the command."""
        return self._pid

    @property
    def pgid(self) -> int | None:
        """Process group id of the subtask (== :attr:`pid`); None before start."""
        return self._pid

    @property
    def tag(self) -> str:
        """The subtask's :data:`TAG_ENV` value ("" before start)."""
        return self._tag

    @property
    def cgroup_path(self) -> Path | None:
        """The subtask's cgroup directory (None: process-tree containment)."""
        return self._cgroup.path if self._cgroup is not None else None

    @property
    def exit_code(self) -> int | None:
        """The command's exit status once it has exited (negative: killed by that signal):
        the leader's, which ends as its command did, or, for a re-attached leader that is
        not this process's child, the one it recorded in its status file. None when
        neither is readable (:attr:`exit_reason` says why)."""
        return self._exit_code

    @property
    def status_file(self) -> Path | None:
        """Where the exit recorder writes the command's exit status (None before start)."""
        return self._status_file

    @property
    def cpu_s_total(self) -> float:
        """CPU-seconds the subtask has consumed since start (as last measured)."""
        return self._total_s

    def members(self) -> list[ProcSample]:
        """The subtask's processes as of now (a full scan; zombies included)."""
        with self._lock:
            if self._meter is None or self._state is not ExecutorState.RUNNING:
                return []
            self._scan()
            return self._meter.members

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
            self._tag = secrets.token_hex(8)
            env = dict(self.env if self.env is not None else os.environ)
            env[OWNER_ENV] = owner_marker()
            env[TAG_ENV] = self._tag
            if self.restart_file is not None:
                env[RESTART_FILE_ENV] = str(self.restart_file)
            else:
                env.pop(RESTART_FILE_ENV, None)  # not an inherited one
            try:
                self._check_executable(env)
                status_dir = self.status_dir or exit_recorder.default_status_dir()
            except (ValueError, OSError):
                self._release_subreaper()
                raise
            self._status_file = exit_recorder.status_path(status_dir, self._tag)
            exit_recorder.remove_status(self._status_file)
            launch = [
                sys.executable, "-I", "-S", exit_recorder.SCRIPT, str(self._status_file),
                "--", *self.argv,
            ]
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
                        launch,
                        cwd=self.cwd,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out if out is not None else subprocess.DEVNULL,
                        stderr=err_target,  # type: ignore[arg-type]
                        start_new_session=True,
                        close_fds=True,
                    )
                except OSError as exc:
                    self._release_subreaper()
                    raise ValueError(
                        f"exit recorder: {sys.executable!r}: cannot execute ({exc.strerror})"
                    ) from None
            finally:
                for f in (out, err):
                    if f is not None:
                        f.close()
            pid = self._popen.pid
            self._pid = pid
            self._group_alive = True
            # Held stopped until the first cycle grants it CPU.
            self._signal(signal.SIGSTOP)
            self._stopped = True
            created = PSUTIL.sample(pid)
            self._leader_created = created.create_time if created is not None else 0.0
            self._leader_is_child = True
            self._meter = self._new_meter({}, 0.0)
            self._start_cgroup(pid)
            self._state = ExecutorState.RUNNING
            _LIVE.add(self)
            self._scan()
            self._update_total()
            self._announce("started")

    def _check_executable(self, env: Mapping[str, str]) -> None:
        """ValueError naming ``argv[0]`` unless it names an executable file (as ``execvp``
        would find it: relative to ``cwd`` when it has a slash, else on the ``PATH`` of
        ``env``). The exit recorder execs it; a failure there would only be an exit
        status (127), so it is checked here first."""
        name = self.argv[0]
        if "/" in name:
            candidates = [Path(self.cwd or ".") / name]
        else:
            candidates = [Path(d or ".") / name for d in os.get_exec_path(dict(env))]
        denied = None
        for path in candidates:
            try:
                st = path.stat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and os.access(path, os.X_OK):
                return
            denied = denied or path
        if denied is not None:
            why = "Is a directory" if denied.is_dir() else "Permission denied"
            raise ValueError(f"argv[0]: {name!r}: cannot execute ({why})")
        where = "" if "/" in name else " on PATH"
        raise ValueError(f"argv[0]: {name!r}: no such executable{where}")

    def _new_meter(self, known: Mapping[int, float], retired_s: float) -> TreeCpuMeter:
        assert self._pid is not None
        return TreeCpuMeter(
            PSUTIL,
            (self._pid, self._leader_created),
            known=known,
            retired_s=retired_s,
            extra_roots=self._extra_roots,
        )

    def _extra_roots(self, full: bool) -> list[int]:
        """Roots beyond the known members: the cgroup's processes, and this process's
        children that carry the subtask's tag (orphans re-parented to the subreaper).
        A full scan examines every child of this process; a refresh only those that are
        new since the last look (the other subtasks' leaders are children too)."""
        roots: list[int] = []
        if self._cgroup is not None:
            try:
                roots.extend(self._cgroup.procs())
            except OSError:
                pass
        kids = PSUTIL.children(os.getpid())
        new = kids if full else [pid for pid in kids if pid not in self._owner_kids]
        self._owner_kids = set(kids)
        known = self._meter.known if self._meter is not None else {}
        for pid in new:
            if pid != self._pid and pid not in known:
                env = PSUTIL.environ(pid)
                if env is not None and env.get(TAG_ENV) == self._tag:
                    roots.append(pid)
        return roots

    def _start_cgroup(self, pid: int) -> None:
        """Create the subtask's cgroup and move the (stopped) leader and anything it has
        forked already into it; on failure fall back to the process tree (and, for
        ``cgroup_v2``, to duty cycling), saying why."""
        parent = self._containment_parent
        if parent is None and self.mode is LimitMode.CGROUP_V2:
            parent = self._cgroup_parent
        if parent is None:
            return
        try:
            self._cgroup = SubtaskCgroup.create(parent, f"{CGROUP_NAME_PREFIX}{self._tag}")
        except OSError as exc:
            self._cgroup = None
            self.containment = Containment.PROCESS_TREE
            self.containment_reason = f"cgroup failed ({exc}); process tree instead"
            if self.mode is LimitMode.CGROUP_V2:
                self.mode = LimitMode.DUTY_CYCLE
                self.mode_reason = f"cgroup v2 failed ({exc}); duty cycling instead"
            self._fall_back()
            return
        self.containment = Containment.CGROUP
        if self.mode is LimitMode.CGROUP_V2:
            try:
                if not self._cgroup.has_cpu_max:
                    raise OSError(
                        f"{self._cgroup.path}: no cpu.max after creation "
                        "(cpu controller missing)"
                    )
                self._cgroup.set_share(0.0)
            except OSError as exc:
                self._cpu_max_failed(exc)
        assert self._meter is not None
        self._meter.scan()
        self._move_into_cgroup()

    def _move_into_cgroup(self) -> None:
        """Move live members that are outside the cgroup into it; their CPU time so far
        is added to the offset (the cgroup counts only what runs inside it)."""
        if self._cgroup is None or self._meter is None:
            return
        try:
            inside = set(self._cgroup.procs())
            outside = [s for s in self._meter.members if not s.is_zombie and s.pid not in inside]
            if not outside:
                return
            self._cgroup.add([s.pid for s in outside])
            # Count only those really inside now: the kernel silently skips a process
            # that is already exiting (it has left its cgroup but is not a zombie yet).
            inside = set(self._cgroup.procs())
            self._cgroup_offset_s += sum(s.cpu_s for s in outside if s.pid in inside)
        except OSError as exc:
            self._cgroup_failed(exc)

    def _cgroup_failed(self, exc: OSError) -> None:
        """The kernel refused the cgroup after all: process tree (and duty cycling) from
        now on, and why. The meter already knows every member."""
        if self._cgroup is not None:
            try:
                self._cgroup.set_share(self.ncores)  # lift the quota on what was moved in
            except OSError:
                pass
            self._cgroup.remove()
        self._cgroup = None
        self.containment = Containment.PROCESS_TREE
        self.containment_reason = f"cgroup failed ({exc}); process tree instead"
        if self.mode is LimitMode.CGROUP_V2:
            self.mode = LimitMode.DUTY_CYCLE
            self.mode_reason = f"cgroup v2 failed ({exc}); duty cycling instead"
        self._fall_back()
        # Accounting continues from the tree: never below what was measured.
        if self._meter is not None:
            self._meter.scan()

    def _cpu_max_failed(self, exc: OSError) -> None:
        """``cpu.max`` cannot be written: duty cycling from now on (the cgroup still
        contains the subtask), and why."""
        if self._cgroup is not None:
            try:
                self._cgroup.set_share(self.ncores)
            except OSError:
                pass
        self.mode = LimitMode.DUTY_CYCLE
        self.mode_reason = f"cgroup v2 failed ({exc}); duty cycling instead"
        self._fall_back()

    def _fall_back(self) -> None:
        """The kernel refused the cgroup or ``cpu.max`` chosen for the subtask: warn in
        the log, now or in the start or re-attach line, so that an operator sees why a
        subtask is held by its process tree or duty cycling rather than its cgroup."""
        self._fell_back = True
        if self._announced:
            self._log_hold(logging.WARNING, "falls back")

    def _announce(self, event: str) -> None:
        """Log how the subtask is held, once per start or re-attach: INFO, or WARNING
        when it already fell back."""
        self._announced = True
        self._log_hold(logging.WARNING if self._fell_back else logging.INFO, event)

    def _log_hold(self, level: int, event: str) -> None:
        log.log(level, "subtask %s (pid %s) %s: %s containment (%s); %s limiting (%s)",
                self._tag, self._pid, event, self.containment.value, self.containment_reason,
                self.mode.value, self.mode_reason)

    # ------------------------------------------------------------------ re-attaching

    def checkpoint(self) -> ExecutorRecord:
        """The record another process needs to adopt this running subtask
        (:meth:`attach`). Take it at the cycle boundary at which the local manager
        checkpoints the subtask's work: its ``reported_cpu_s`` is the CPU already reported
        through :meth:`end_cycle`."""
        with self._lock:
            if self._state is not ExecutorState.RUNNING or self._check_exit():
                raise RuntimeError(f"checkpoint: executor is {self._state.value}, not running")
            assert self._meter is not None and self._pid is not None
            self._scan()
            return ExecutorRecord(
                tag=self._tag,
                argv=self.argv,
                pid=self._pid,
                pgid=self._pid,
                create_time=self._leader_created,
                mode=self.mode,
                containment=self.containment,
                cgroup=str(self._cgroup.path) if self._cgroup is not None else None,
                members=tuple(sorted(self._meter.known.items())),
                reported_cpu_s=self._mark_s,
                retired_cpu_s=self._meter.retired_s,
                cgroup_offset_s=self._cgroup_offset_s,
                status_file=str(self._status_file) if self._status_file is not None else None,
            )

    @classmethod
    def attach(
        cls,
        record: ExecutorRecord,
        *,
        speed_mhz: float,
        period_s: float = DEFAULT_PERIOD_S,
        rescan_s: float = DEFAULT_RESCAN_S,
        grace_s: float = DEFAULT_GRACE_S,
        ncores: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        reap_orphans: bool = True,
    ) -> ProcessExecutor:
        """Adopt the running subtask ``record`` describes (its previous owner is gone),
        without killing it: it is stopped until its next cycle and measured from the
        record's reading on, so the first cycle reports all CPU used since then.

        The record's cgroup is used if it still exists (``cgroup_v2`` limiting only if its
        ``cpu.max`` is still writable); else the process tree from the leader and the
        recorded members, each checked by its create time (a recycled pid is not
        adopted). If the leader has exited meanwhile, the executor finishes at once (any
        remaining members are killed) with the exit status the leader (the exit recorder)
        wrote to the record's status file; with none (the recorder itself was killed),
        :attr:`exit_code` is None and :attr:`exit_reason` says the status was lost.
        """
        ex = cls(
            record.argv,
            speed_mhz=speed_mhz,
            mode=LimitMode.DUTY_CYCLE,
            containment=Containment.PROCESS_TREE,
            period_s=period_s,
            rescan_s=rescan_s,
            grace_s=grace_s,
            ncores=ncores,
            clock=clock,
            sleep=sleep,
            reap_orphans=reap_orphans,
        )
        ex._adopt(record)
        return ex

    def _adopt(self, record: ExecutorRecord) -> None:
        with self._lock:
            if self.reap_orphans:
                self._subreaper = acquire_child_subreaper()
            self._tag = record.tag
            self._pid = record.pid
            self._leader_created = record.create_time
            if record.status_file is not None:
                self._status_file = Path(record.status_file)
            else:
                self._lost_reason = (
                    "exit status unknown: re-attached to a command started without an "
                    "exit recorder"
                )
            leader = PSUTIL.sample(record.pid)
            alive = (
                leader is not None
                and not leader.is_zombie
                and same_process(leader.create_time, record.create_time)
            )
            self._leader_is_child = leader is not None and leader.ppid == os.getpid()
            self.mode, self.mode_reason = LimitMode.DUTY_CYCLE, "re-attached"
            self.containment, self.containment_reason = Containment.PROCESS_TREE, "re-attached"
            if record.cgroup is not None:
                try:
                    self._cgroup = SubtaskCgroup.open(Path(record.cgroup))
                except OSError as exc:
                    self.containment_reason = f"re-attached; cgroup gone ({exc})"
                    self._fall_back()
                else:
                    self.containment = Containment.CGROUP
                    if record.mode is LimitMode.CGROUP_V2 and self._cgroup.has_cpu_max:
                        self.mode = LimitMode.CGROUP_V2
            self._cgroup_offset_s = record.cgroup_offset_s
            self._meter = self._new_meter(dict(record.members), record.retired_cpu_s)
            self._mark_s = self._total_s = record.reported_cpu_s
            self._state = ExecutorState.RUNNING
            self._group_alive = True
            _LIVE.add(self)
            self._scan()
            self._stopped = False
            self._set_stopped(True)  # held until its next cycle grants it CPU
            if self.mode is LimitMode.CGROUP_V2:
                assert self._cgroup is not None
                try:
                    self._cgroup.set_share(0.0)
                except OSError as exc:
                    self._cpu_max_failed(exc)
            self._update_total()
            self._announce("re-attached" if alive else "re-attached, already ended")
            if not alive:
                if record.status_file is not None:
                    self._lost_reason = "ended while its manager was down; exit status lost"
                self._shutdown(ExecutorState.FINISHED, self.grace_s)
            elif self._status_file is not None:
                try:  # not stale while we live; our group signals are not forwarded
                    exit_recorder.write_owner(self._status_file, owner_marker())
                except OSError:
                    pass

    # ------------------------------------------------------------------ cycles

    def begin_cycle(self, share: float, cycle_s: float) -> None:
        """Start a scheduling cycle of ``cycle_s`` s with a CPU share of ``share`` cores."""
        if not isinstance(share, (int, float)) or not math.isfinite(share):
            raise ValueError(f"share: must be a finite number, got {share!r}")
        if not 0 <= share <= self.ncores:
            raise ValueError(f"share: must be within 0..{self.ncores:g} cores, got {share!r}")
        positive("cycle_s", cycle_s)
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
                assert self._cgroup is not None
                self._measure(now, full=now - self._last_scan >= self.rescan_s)
                try:
                    self._cgroup.set_share(self._share)
                except OSError as exc:
                    self._cpu_max_failed(exc)
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
                nxt = self._pacer.tick(now, self._total_s)
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
        """Check for completion without blocking (finishing the tree if the leader exited)."""
        with self._lock:
            if self._state is ExecutorState.RUNNING:
                self._check_exit()
            return self._state

    def cancel(self, grace_s: float | None = None) -> None:
        """Kill every process of the subtask: SIGCONT, SIGTERM, ``grace_s`` s (default:
        the executor's), SIGKILL (``cgroup.kill``); reap what is ours. A leader that had
        already exited counts as finished."""
        with self._lock:
            if self._state is ExecutorState.CREATED:
                self._state = ExecutorState.CANCELLED
                return
            if self._state is not ExecutorState.RUNNING or self._check_exit():
                return
            self._shutdown(ExecutorState.CANCELLED, self.grace_s if grace_s is None else grace_s)

    def close(self, grace_s: float | None = None) -> None:
        """Cancel if still running and release everything (the status file included).
        Idempotent."""
        with self._lock:
            self.cancel(grace_s)
            if self._state is not ExecutorState.RUNNING:
                self._remove_status_file()
            _LIVE.discard(self)

    def _remove_status_file(self) -> None:
        if self._status_file is not None:
            try:
                exit_recorder.remove_status(self._status_file)
            except OSError:
                pass

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
        """``sig`` to the process group and to every live member outside it. Only while
        the group exists: afterwards its id may be reused by someone else."""
        if not self._group_alive or self._pid is None:
            return
        try:
            os.killpg(self._pid, sig)
        except ProcessLookupError:
            pass
        for pid in self._outsiders:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def _set_stopped(self, stopped: bool) -> None:
        if stopped != self._stopped:
            self._signal(signal.SIGSTOP if stopped else signal.SIGCONT)
            self._stopped = stopped

    def _find_outsiders(self) -> None:
        """Live members that left the process group (they need signals of their own);
        one found while the subtask is stopped is stopped at once."""
        assert self._meter is not None
        if self._cgroup is not None:
            # The cgroup lists exactly the live members: cheap, and never a stale pid.
            try:
                pids = self._cgroup.procs()
            except OSError:
                pids = []
            outsiders = []
            for pid in pids:
                try:
                    if os.getpgid(pid) != self._pid:
                        outsiders.append(pid)
                except ProcessLookupError:
                    continue
        else:
            outsiders = [
                s.pid for s in self._meter.members if not s.is_zombie and s.pgid != self._pid
            ]
        if self._stopped and self._group_alive:
            for pid in set(outsiders).difference(self._outsiders):
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    pass
        self._outsiders = outsiders

    def _scan(self) -> None:
        """Full scan: every member, orphans and cgroup members included."""
        assert self._meter is not None
        self._meter.scan()
        self._reap_adopted()
        self._move_into_cgroup()
        self._find_outsiders()

    def _measure(self, now: float, full: bool) -> None:
        assert self._meter is not None
        if full:
            self._scan()
            self._last_scan = now
        elif self._cgroup is None:
            self._meter.refresh()
            self._find_outsiders()
        else:
            self._find_outsiders()
        self._update_total()

    def _update_total(self) -> None:
        assert self._meter is not None
        if self._cgroup is not None:
            try:
                total = self._cgroup_offset_s + self._cgroup.usage_s()
            except OSError:
                return  # removed meanwhile: keep the last reading
        else:
            total = self._meter.total_s
        self._total_s = max(self._total_s, total)

    def _reap_adopted(self) -> None:
        """Reap zombie members that are this process's children (leader excluded: its
        status is read in :meth:`_shutdown`), keeping their final CPU times."""
        assert self._meter is not None
        me = os.getpid()
        for sample in self._meter.members:
            if sample.is_zombie and sample.ppid == me and sample.pid != self._pid:
                self._meter.retire(sample)
                try:
                    os.waitpid(sample.pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def _check_exit(self) -> bool:
        """If the leader has exited, finish the subtask and return True."""
        assert self._pid is not None
        if self._leader_is_child:
            try:
                # WNOWAIT: leave it a zombie, so that its final CPU times can be read.
                flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
                if os.waitid(os.P_PID, self._pid, flags) is None:
                    return False
            except ChildProcessError:
                pass  # someone else reaped it: it has exited all the same
        else:
            leader = PSUTIL.sample(self._pid)
            if (
                leader is not None
                and not leader.is_zombie
                and same_process(leader.create_time, self._leader_created)
            ):
                return False
        self._shutdown(ExecutorState.FINISHED, self.grace_s)
        return True

    def _live_members(self) -> list[ProcSample]:
        assert self._meter is not None
        self._scan()
        return [s for s in self._meter.members if not s.is_zombie]

    def _signal_members(self, sig: int, members: Iterable[ProcSample]) -> None:
        """``sig`` to each member not yet sent ``sig`` (a handler may not be re-entered)."""
        for s in members:
            key = (s.pid, sig)
            if key in self._signalled:
                continue
            self._signalled.add(key)
            try:
                os.kill(s.pid, sig)
            except ProcessLookupError:
                pass

    def _terminate(self, sig: int, timeout_s: float) -> bool:
        """Send ``sig`` once to every live member (the group with one ``killpg``, the
        others, and members that appear meanwhile, one by one; SIGKILL also through
        ``cgroup.kill``) until none is left or ``timeout_s`` s pass; True if none is left.
        No process gets ``sig`` twice: a second SIGTERM means "force" to some programs."""
        deadline = self._clock() + timeout_s
        live = self._live_members()
        if sig == signal.SIGKILL and self._cgroup is not None:
            try:
                self._cgroup.kill()
            except OSError:
                pass
        if self._group_alive and self._pid is not None:
            try:
                os.killpg(self._pid, sig)
            except ProcessLookupError:
                pass
            self._signalled.update((s.pid, sig) for s in live if s.pgid == self._pid)
        while live:
            self._signal_members(sig, live)
            if self._clock() >= deadline:
                return False
            self._sleep(KILL_POLL_S)
            live = self._live_members()
        return True

    def _shutdown(self, final: ExecutorState, grace_s: float) -> None:
        """Terminate every member, account for their CPU, reap ours, mark ``final``."""
        assert self._pid is not None and self._meter is not None
        if self._live_members():
            # SIGCONT first so that stopped members can act on SIGTERM.
            self._signal(signal.SIGCONT)
            self._stopped = False
            if not self._terminate(signal.SIGTERM, grace_s):
                self._terminate(signal.SIGKILL, KILL_SETTLE_S)
        leader = PSUTIL.sample(self._pid)
        if leader is not None and not same_process(leader.create_time, self._leader_created):
            leader = None
        if leader is not None and leader.is_zombie and self._cgroup is None:
            self._meter.retire(leader)
        if self._popen is not None:
            try:
                self._exit_code = self._popen.wait(timeout=KILL_SETTLE_S)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was ignored?
                self._exit_code = None
        elif self._leader_is_child:
            self._exit_code = self._reap_leader()
        if self._exit_code is None and self._status_file is not None:
            # A leader that is not our child (re-attached): what it recorded.
            self._exit_code = exit_recorder.read_status(self._status_file)
        if self._exit_code is None:
            self.exit_reason = self._lost_reason
        self._remove_status_file()
        # Members orphaned by the leader's exit reach us as zombies: reap them too.
        deadline = self._clock() + KILL_SETTLE_S
        self._scan()
        while self._unfinished() and self._clock() < deadline:
            self._sleep(KILL_POLL_S)
            self._scan()
        self._update_total()
        self.leftover_pids = tuple(s.pid for s in self._unfinished())
        self._group_alive = any(not s.is_zombie for s in self._meter.members)
        if self._cgroup is not None:
            # Empty once every member has exited (zombies do not count).
            while not self._cgroup.remove() and self._clock() < deadline:
                self._sleep(KILL_POLL_S)
        self._state = final
        _LIVE.discard(self)
        self._release_subreaper()

    def _unfinished(self) -> list[ProcSample]:
        """Members still alive, or zombies this process has to reap."""
        assert self._meter is not None
        me = os.getpid()
        return [
            s for s in self._meter.members
            if (not s.is_zombie or s.ppid == me) and s.pid != self._pid
        ]

    def _reap_leader(self) -> int | None:
        """Reap a re-attached leader that is this process's child; its exit status."""
        assert self._pid is not None
        deadline = self._clock() + KILL_SETTLE_S
        while True:
            try:
                pid, status = os.waitpid(self._pid, os.WNOHANG)
            except ChildProcessError:
                return None
            if pid:
                return os.waitstatus_to_exitcode(status)
            if self._clock() >= deadline:
                return None
            self._sleep(KILL_POLL_S)

    def _release_subreaper(self) -> None:
        if self._subreaper:
            self._subreaper = False
            release_child_subreaper()
