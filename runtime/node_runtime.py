"""One local manager's cycle loop: the node's :class:`LocalScheduler` driven by real time.

No Ray here (the actor in :mod:`runtime.actors` wraps this class), so the loop can be
tested with a fake clock and fake channels.

Cycle rule (the simulator's order, on the real clock):
every cycle boundary ``b`` (a whole multiple of the cycle ``q`` in model time, the same on
every node) the loop

1. applies the re-weight commands that arrived since the last boundary (the controller
   evaluated the period ending at ``b - q`` a fraction of a cycle after it, so they take
   effect for the cycle ending at ``b``, as in the simulator);
2. closes the cycle of every process subtask (CPU measured from ``/proc``);
3. steps the scheduler: ``LocalScheduler.step(b, q)`` (a boundary missed because the
   process was late is still stepped, once per missed boundary, so the model outcome of a
   synthetic run does not depend on lateness; but a loop more than ``stall_cycles``
   boundaries late was stalled, and :meth:`NodeRuntime.resync` moves it to the boundary
   before the current one without booking work, so that the current weights are not
   replayed over the missed span);
4. sends one progress report per QoS subtask and tells the owner about finished subtasks;
5. starts the subtasks submitted for boundary ``b`` (a submission that arrives after its
   boundary but before the next one is started on its boundary before step 3, so the
   cycle it missed is stepped with it as in the simulator, and is counted in
   ``late_placements``; one that arrives later still starts at the last boundary before
   step 3 and is counted in ``late_starts``: its gang is out of step by what it missed);
6. opens the next cycle of every process subtask with the share its grant stands for.

Executors. *Synthetic* subtasks are the scheduler's own bookkeeping: the work in Mcycles
is consumed at the granted rate. *Process* subtasks (a ``command``) run as a real process
group under :class:`local_manager.process_executor.ProcessExecutor`. The scheduler sees
them with unbounded work (a command ends when it exits, not when an estimate runs out), so
it keeps granting them CPU; the grant of the cycle that just ended sets the CPU share of
the next one (``grant / (speed * q)`` of a core, capped by the host's cores), and the CPU
time measured in that cycle, ``cpu_s * time_scale * speed`` Mcycles, is ``x-bar`` in
eq. (4): the scheduler takes it as the subtask's measured work
(``LocalScheduler.step(..., measured)``), so its one virtual clock advances by it and its
progress report carries that clock, not the grant. The subtask finishes when its command
exits (exit status 0: success).

Reported progress (``docs/coupled.md``, "Progress") is received by the node's
:class:`runtime.node_progress.NodeProgress` (its socket, keys, trackers and drop counters).

Checkpoint and restart. Given a ``checkpoint`` path, every boundary ends by writing the
node's subtask state there atomically (:mod:`workloads.atomic`): per subtask its placement
(work done in Mcycles, weights and rate cap in Mcycles/s), its state and virtual clock,
and for a running process subtask the executor's record
(:meth:`~local_manager.process_executor.ProcessExecutor.checkpoint`) and its measured work;
plus the subtasks waiting for their start boundary and the recent history. A runtime
built by a restarted local manager calls :meth:`restore`: synthetic subtasks continue
from their checkpointed work and clocks (the cycles the manager was dead did no work and
are not replayed), process subtasks are re-attached without a kill. Its incarnation is a
new one. A re-attached command's exit status is read from the file its exit recorder
wrote (:mod:`local_manager.exit_recorder`; the new manager is not its parent): non-zero
or killed by a signal, it fails as without the restart; with no status recorded (the
recorder itself was SIGKILLed) it fails, and the reason says the status was lost.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import queue
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from coallocator.messages import ProgressReport, ReweightCommand
from global_manager.engine import apply_commands
from local_manager.executor_records import CycleUsage, ExecutorRecord, ExecutorState
from local_manager.exit_recorder import describe as describe_exit
from local_manager.scheduler import CycleResult, LocalScheduler
from runtime.config import ExecutorKind, RuntimeConfig
from runtime.node_progress import NodeProgress
from runtime.timebase import ModelClock, boundary_index
from workloads.atomic import atomic_write_json
from workloads.messages import (
    PROGRESS_FIELDS,
    NodeReport,
    SubtaskOutcome,
    SubtaskPhase,
    SubtaskReport,
)
from workloads.model import Node, Subtask
from workloads.records import from_record, to_record

#: Version of the local manager checkpoint's layout.
CHECKPOINT_VERSION = 1

#: Boundaries stepped one by one when the loop is late; beyond that the clock jumps.
MAX_CATCH_UP = 1000
#: Finished subtasks kept for ``status`` after they left the node.
HISTORY = 2000
_ENDED = (ExecutorState.FINISHED, ExecutorState.CANCELLED)
#: SIGTERM-to-SIGKILL grace (s) of a fenced subtask's processes: short, since the same
#: job may start elsewhere soon (within ``runtime.lease.LEASE_MARGIN_S``).
FENCE_GRACE_S = 0.5

log = logging.getLogger("coalloc.runtime")


class ReportSink(Protocol):
    """Where progress reports go (the transport's ZeroMQ PUSH sender). ``send`` never
    blocks; False means the report was dropped."""

    def send(self, report: ProgressReport) -> bool: ...


class CommandSource(Protocol):
    """Where re-weight commands come from (the transport's command subscriber).
    ``poll`` returns what has arrived without blocking."""

    def poll(self) -> list[ReweightCommand]: ...


class SubtaskProcess(Protocol):
    """What the loop needs of a process subtask's executor
    (:class:`local_manager.process_executor.ProcessExecutor`, or a test's fake): CPU in
    CPU-seconds, shares in cores, times in seconds of the executor's clock."""

    @property
    def pid(self) -> int | None: ...
    @property
    def cpu_s_total(self) -> float: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def ncores(self) -> float: ...
    def start(self) -> None: ...
    def begin_cycle(self, share: float, cycle_s: float) -> None: ...
    def step(self) -> float | None: ...
    def end_cycle(self) -> CycleUsage: ...
    def checkpoint(self) -> ExecutorRecord: ...
    def close(self, grace_s: float | None = None) -> None: ...


#: ``process_factory(argv, speed_mhz, output, env)``: a process subtask's executor, not
#: started; ``env``: what its environment gets on top of this process's (the rendezvous).
ProcessFactory = Callable[
    [tuple[str, ...], float, Path | None, tuple[tuple[str, str], ...]], SubtaskProcess]

FinishFn = Callable[[SubtaskOutcome], None]


class _ProcessRun:
    """A process subtask's executor and measured work (its virtual clock is the
    scheduler's, advanced by the measured work)."""

    __slots__ = (
        "executor", "measured", "share", "in_cycle", "next_at", "exited", "failure",
        "reattached",
    )

    def __init__(self, executor: SubtaskProcess | None) -> None:
        # None when the command could not be started.
        self.executor: SubtaskProcess | None = executor
        self.failure: str | None = None
        self.measured = 0.0  # Mcycles of model work measured so far
        self.share = 0.0  # cores granted in the current cycle
        self.in_cycle = False
        self.next_at: float | None = None  # executor clock time of its next step
        self.exited = False
        self.reattached = False  # adopted from a dead manager's checkpoint


class _Record:
    """What ``status`` shows about one subtask on this node."""

    __slots__ = (
        "subtask", "kind", "state", "exit_code", "reason", "start", "finish", "virtual_time",
        "measured",
    )

    def __init__(self, subtask: Subtask, kind: ExecutorKind, start: float) -> None:
        self.subtask = subtask
        self.kind = kind
        self.state = SubtaskPhase.PENDING
        self.exit_code: int | None = None
        self.reason = ""
        self.start = start
        self.finish: float | None = None
        self.virtual_time: float | None = None  # T_V at the last boundary, s
        self.measured: float | None = None  # Mcycles a process subtask really got


def new_incarnation() -> int:
    """A fresh incarnation number for a local manager's reports (random, 31 bits)."""
    return secrets.randbits(31)


class NodeRuntime:
    """The cycle loop of one node. Thread-safe entry points: :meth:`submit`,
    :meth:`cancel_job`, :meth:`snapshot`, :meth:`stop`; :meth:`run` is the loop itself
    (one thread). ``process_factory(argv, speed_mhz, output)`` builds a process executor
    (default: :class:`local_manager.process_executor.ProcessExecutor`)."""

    def __init__(
        self,
        node: Node,
        config: RuntimeConfig,
        clock: ModelClock,
        reports: ReportSink,
        commands: CommandSource | None,
        on_finish: FinishFn,
        incarnation: int | None = None,
        output_dir: Path | None = None,
        process_factory: ProcessFactory | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        checkpoint: Path | None = None,
    ) -> None:
        """``checkpoint``: the file each boundary's state is written to (None: none)."""
        self.node = node
        self.config = config
        self.clock = clock
        self.reports = reports
        self.commands = commands
        self.on_finish = on_finish
        self.incarnation = new_incarnation() if incarnation is None else incarnation
        self.output_dir = output_dir
        # Real processes (not a test's factory): they carry this node's checkpoint as
        # their restart file, so that sweeps by other managers on the machine leave them
        # to this node's restarted manager (see reap_stale_subtasks).
        self._own_processes = process_factory is None
        self._process_factory = process_factory or self._real_process
        self._monotonic = monotonic
        policy = config.get_policy()
        self.scheduler = LocalScheduler(
            node, config.sim_config().local_config(policy), self.incarnation
        )
        self.q = config.cycle
        self._actions: queue.SimpleQueue[tuple[str, Any, threading.Event | None]] = (
            queue.SimpleQueue()
        )
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.RLock()  # the loop's state, against status readers
        self._pending: dict[float, list[Subtask]] = {}
        self._records: dict[tuple[str, int], _Record] = {}
        self._history: OrderedDict[tuple[str, int], dict[str, Any]] = OrderedDict()
        self._procs: dict[tuple[str, int], _ProcessRun] = {}
        self._last_grants: dict[tuple[str, int], float] = {}
        self._last_boundary: float | None = None
        self.counters: dict[str, int] = {
            "cycles": 0,
            "late_cycles": 0,
            "skipped_cycles": 0,
            "stalls": 0,
            "late_starts": 0,
            "late_placements": 0,
            "reports_sent": 0,
            "reports_dropped": 0,
            "commands_applied": 0,
            "commands_unknown": 0,
            "commands_other_node": 0,
        }
        self.counters["checkpoint_errors"] = 0
        self.counters["restored_subtasks"] = 0
        #: Subtasks this node stopped because it held no lease (``runtime.lease``).
        self.counters["fenced"] = 0
        #: Why the node holds no lease (None: it holds one): it starts nothing meanwhile.
        self.unleased: str | None = None
        #: Monotonic real s its lease counts from (its owner's; None: no lease kept),
        #: checkpointed with subtasks so that a restarted manager holds it no longer.
        self.lease_confirmed_at: float | None = None
        #: The reported-progress receiving (its counters are in ``counters``).
        self.progress = NodeProgress(self.counters)
        self.running = False
        self.error: str | None = None
        self.checkpoint = checkpoint
        self._checkpoint_made = False  # written once by this process
        #: The last idle state written (boundary left out; None: not idle).
        self._idle_written: dict[str, Any] | None = None

    def _real_process(
        self, argv: tuple[str, ...], speed_mhz: float, output: Path | None,
        env: tuple[tuple[str, str], ...] = (),
    ) -> SubtaskProcess:
        return _default_process_factory(argv, speed_mhz, output, restart_file=self.checkpoint,
                                        env=env)

    @property
    def progress_address(self) -> str | None:
        """``HOST:PORT`` of the node's progress socket (None until a process subtask
        started, or when it could not be opened)."""
        return self.progress.address

    def progress_env(self, key: tuple[str, int]) -> dict[str, str]:
        """What subtask ``key``'s environment carries to report progress (empty: none)."""
        if key not in self._records:
            return {}
        return self.progress.env(key)

    # ----------------------------------------------------------------- checkpoint
    def checkpoint_state(self) -> dict[str, Any]:
        """The node's subtask state as JSON-able data (see the module docstring)."""
        with self._lock:
            subtasks = []
            for key, rec in self._records.items():
                if rec.state not in (SubtaskPhase.PENDING, SubtaskPhase.RUNNING):
                    continue
                s = self.scheduler.get(key) or rec.subtask
                d: dict[str, Any] = {
                    "subtask": _subtask_dict(rec.subtask, s),
                    "kind": rec.kind.value,
                    "state": rec.state.value,
                    "start": rec.start,
                }
                run = self._procs.get(key)
                if run is not None:
                    d["measured"] = run.measured
                    d["virtual_time"] = self.scheduler.virtual_time(key)
                    if run.executor is not None and not run.exited:
                        try:
                            d["executor"] = run.executor.checkpoint().to_dict()
                        except RuntimeError:  # it has just exited: noticed next cycle
                            pass
                elif self.scheduler.get(key) is not None:
                    d["virtual_time"] = self.scheduler.virtual_time(key)
                saved = self.progress.checkpoint_entry(key)
                if saved is not None:
                    d["progress"] = saved
                subtasks.append(d)
            state: dict[str, Any] = {
                "version": CHECKPOINT_VERSION,
                "node": self.node.name,
                "incarnation": self.incarnation,
                "boundary": self._last_boundary,
                "subtasks": subtasks,
                "history": list(self._history.values())[-200:],
            }
            if self.progress.address is not None:
                state["progress_address"] = self.progress.address
            if subtasks and self.lease_confirmed_at is not None:
                state["lease_confirmed_at"] = self.lease_confirmed_at
            return state

    def write_checkpoint(self) -> None:
        """Write :meth:`checkpoint_state` to the checkpoint file (if any), atomically. A
        node with no subtask whose last written state had none either and the same
        history is not written again: only the boundary would change, and a restore
        needs it only for subtasks (an idle node costs no fsync per cycle)."""
        if self.checkpoint is None:
            return
        if self._checkpoint_made and not self.checkpoint.exists():
            # `down` removed it (this manager did not answer its shutdown, e.g. it was
            # stopped, and runs on until Ray's kill lands): a restart file is made once
            # and then only replaced, never made again.
            return
        state = self.checkpoint_state()
        idle = None if state["subtasks"] else dict(state, boundary=None)
        if idle is not None and idle == self._idle_written:
            return
        try:
            atomic_write_json(self.checkpoint, state)
        except (OSError, ValueError):
            self.counters["checkpoint_errors"] += 1
            return
        self._checkpoint_made = True
        self._idle_written = idle

    def restore(
        self, data: dict[str, Any], attach: Callable[[dict[str, Any]], SubtaskProcess]
    ) -> int:
        """Take over a dead manager's subtasks from its :meth:`checkpoint_state`, before
        :meth:`run`. ``attach(record)`` adopts a running process subtask from its executor
        record (ProcessExecutor.attach). Returns how many subtasks were restored."""
        if data.get("version") != CHECKPOINT_VERSION or data.get("node") != self.node.name:
            raise ValueError("checkpoint: not this node's local manager checkpoint")
        n = 0
        with self._lock:
            for h in data.get("history", []):
                self._history[(str(h["job_id"]), int(h["index"]))] = dict(h)
            for d in data["subtasks"]:
                s = from_record(Subtask, d["subtask"])
                kind = ExecutorKind(d["kind"])
                rec = _Record(s, kind, float(d["start"]))
                self._records[s.key] = rec
                n += 1
                if d["state"] == SubtaskPhase.PENDING.value:
                    self._pending.setdefault(float(d["start"]), []).append(s)
                    continue
                rec.state = SubtaskPhase.RUNNING
                tv = float(d.get("virtual_time", d["start"]))
                if kind is ExecutorKind.PROCESS:
                    self.scheduler.add(dataclasses.replace(s, work=math.inf), float(d["start"]))
                    run = _ProcessRun(None)
                    run.measured = float(d.get("measured", 0.0))
                    run.reattached = True
                    if "executor" in d:
                        try:
                            run.executor = attach(d["executor"])
                        except (OSError, ValueError, RuntimeError) as exc:
                            run.exited, run.failure = True, f"cannot re-attach: {exc}"
                    else:
                        run.exited, run.failure = True, "no executor record to re-attach"
                    self._procs[s.key] = run
                else:
                    self.scheduler.add(s, float(d["start"]))
                self.scheduler.restore_clock(s.key, tv, float(data.get("boundary") or tv))
                if "progress" in d:
                    self.progress.restore(s, d["progress"], data.get("progress_address"))
            self.counters["restored_subtasks"] += n
        return n

    # ----------------------------------------------------------------- entry points
    def submit(self, subtasks: list[Subtask], start: float) -> None:
        """Start ``subtasks`` (all for this node) at the cycle boundary ``start`` (model s)."""
        for s in subtasks:
            if s.node != self.node.name:
                raise ValueError(f"subtask {s.key}: is for node {s.node!r}, not {self.node.name!r}")
        self._actions.put(("add", (list(subtasks), float(start)), None))
        self._kick.set()

    def cancel_job(self, job_id: str, timeout: float | None = 10.0) -> bool:
        """Take every subtask of ``job_id`` off the node, killing its processes. Blocks
        until done (or ``timeout`` real s); True when the loop has applied it."""
        return self._apply_now("cancel", job_id, timeout)

    def fence(self, why: str, timeout: float | None = 10.0) -> bool:
        """The node holds no lease (``why``): stop every subtask on it (kill its
        processes with their process group; a synthetic subtask stops), each ``fenced``
        with one log line, and start none until :meth:`leased`. Blocks until applied (or
        ``timeout`` real s); True when the loop has applied it."""
        with self._lock:
            self.unleased = why
        return self._apply_now("fence", why, timeout)

    def _apply_now(self, action: str, argument: str, timeout: float | None) -> bool:
        """Queue ``action`` for the loop and wait until it is applied (or ``timeout`` real
        s); with the loop not running, apply it here. True when applied."""
        done = threading.Event()
        self._actions.put((action, argument, done))
        self._kick.set()
        if not self.running:
            with self._lock:
                self._drain_actions(self._last_boundary or 0.0, immediate_only=True)
                self._retire_ended()
        return done.wait(timeout)

    def leased(self) -> None:
        """The node holds its lease again: it may start subtasks."""
        with self._lock:
            self.unleased = None

    def rejoin(self) -> int:
        """Take a new incarnation (the global manager declared the old one lost): every
        report from now on carries it. Returns it."""
        with self._lock:
            self.incarnation = new_incarnation()
            self.scheduler.incarnation = self.incarnation
            return self.incarnation

    def stop(self) -> None:
        """Ask the loop to end; it kills every process it started before returning."""
        self._stop.set()
        self._kick.set()

    def snapshot(self) -> dict[str, Any]:
        """The node's state as of the last boundary (plain JSON-able dict)."""
        with self._lock:
            subtasks = [self._describe(rec) for rec in self._records.values()]
            subtasks += list(self._history.values())
            return {
                "node": self.node.name,
                "speed_mhz": self.node.speed_mhz,
                "cores": self.node.cores,
                "incarnation": self.incarnation,
                "model_time": self._last_boundary,
                "running": self.running,
                "error": self.error,
                "counters": dict(self.counters),
                "subtasks": subtasks,
                # What the QoS queue can get now (Mcycles/s), for admission by measured
                # capacity in the global manager.
                "qos_capacity": self.scheduler.qos_capacity(self.q),
            }

    def report(self, asked: Iterable[tuple[str, int]] = ()) -> NodeReport:
        """The node's :class:`~workloads.messages.NodeReport` as of the last boundary:
        every subtask still here, and of those that left, the ones named in ``asked``
        ((run id, index): those the global manager still has running here). Cheap: no
        history is copied, no description built."""
        with self._lock:
            subtasks = [self._report(rec) for rec in self._records.values()]
            for key in asked:
                h = self._history.get((str(key[0]), int(key[1])))
                if h is not None:
                    subtasks.append(SubtaskReport(
                        str(h["job_id"]), int(h["index"]), SubtaskPhase(h["state"]),
                        h.get("done_work"), h.get("finish_time"), h.get("exit_code"),
                        str(h.get("reason") or ""), h.get("start_time"), h.get("weight"),
                        h.get("virtual_weight"), h.get("virtual_time"), h.get("share"),
                        h.get("pid"), h.get("cpu_s"),
                        **{k: h[k] for k in PROGRESS_FIELDS if k in h},
                    ))
            return NodeReport(self.node.name, self.running,
                              self.scheduler.qos_capacity(self.q), tuple(subtasks),
                              self.incarnation, self._last_boundary, self.error or "",
                              dict(self.counters))

    def _report(self, rec: _Record) -> SubtaskReport:
        """One subtask's report: its live fields, the one place they are worked out
        (:meth:`_describe` shows them in the node's status document)."""
        s = rec.subtask
        key = s.key
        run = self._procs.get(key)
        live = self.scheduler.get(key)
        share = pid = cpu = None
        vt: float | None = None
        if run is not None:
            done: float | None = run.measured
            vt = self.scheduler.virtual_time(key) if live is not None else rec.virtual_time
            share = run.share
            if run.executor is not None:
                pid, cpu = run.executor.pid, run.executor.cpu_s_total
            else:
                cpu = 0.0
        elif rec.measured is not None:
            done = rec.measured
        else:
            done = s.work if rec.state is SubtaskPhase.FINISHED \
                else (live if live is not None else s).done_work
            vt = self.scheduler.virtual_time(key) if live is not None else rec.virtual_time
        weights = live if live is not None else s
        return SubtaskReport(s.job_id, s.index, rec.state, done, rec.finish, rec.exit_code,
                             rec.reason, rec.start, weights.weight, weights.virtual_weight,
                             vt, share, pid, cpu, **self._progress_fields(rec))

    def _progress_fields(self, rec: _Record) -> dict[str, Any]:
        """A subtask's reported progress as its report's fields (none: it has none)."""
        return self.progress.fields(rec.subtask, rec.state is SubtaskPhase.RUNNING,
                                    self._last_boundary)

    # ----------------------------------------------------------------- the loop
    def run(self) -> None:
        """The loop: step every boundary until :meth:`stop`; then clean up."""
        self.running = True
        try:
            k = boundary_index(self.clock.now(), self.q) + 1
            while not self._stop.is_set():
                b = k * self.q
                self._wait_until(b)
                if self._stop.is_set():
                    break
                now = self.clock.now()
                behind = boundary_index(now, self.q) - k
                if behind > min(MAX_CATCH_UP, self.config.stall_cycles):
                    # Far too late (the process was suspended): resynchronise, say so.
                    k += behind
                    b = k * self.q
                    self.resync(b - self.q, behind)
                elif behind >= 1:
                    self.counters["late_cycles"] += 1
                self.tick(b)
                k += 1
        except Exception as exc:  # the loop must not die silently: status shows it
            self.error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self.running = False
            with self._lock:
                self._close_all()

    def resync(self, b: float, missed: int) -> None:
        """After a stall of ``missed`` boundaries, move the node to boundary ``b`` (model
        s) without booking work for the span: synthetic subtasks did not run (their
        virtual clocks stay, so they fall behind and the controller sees it), process
        subtasks report what they measured at the next boundary. Counted in ``stalls``
        and ``skipped_cycles``."""
        with self._lock:
            self.counters["stalls"] += 1
            self.counters["skipped_cycles"] += missed
            self.scheduler.skip_to(b)
            self._last_boundary = b

    def tick(self, b: float) -> CycleResult | None:
        """Everything that happens at boundary ``b`` (model s); see the module docstring."""
        with self._lock:
            self._apply_commands()
            usage, cycles = self._end_process_cycles()
            last = self._last_boundary
            if last is not None:
                # Placements that arrived after their boundary join the cycle ending at b.
                self._drain_actions(b, immediate_only=True)
                self._start_overdue(last)
            result = None
            self.progress.drain(b)
            if len(self.scheduler):
                # A process subtask's work is what it measured (0 when it did not run).
                measured = {key: usage.get(key, 0.0) for key in self._procs}
                self.progress.reported_measure(measured, self.scheduler)
                # Coupled members that wait are held near their useful rate (pace control).
                self.scheduler.set_useful_caps(
                    self.progress.useful_caps(cycles, self.scheduler, self.node.speed_mhz))
                result = self.scheduler.step(
                    b, b - last if last is not None else self.q, measured
                )
                self._account(result, b)
            self._last_boundary = b
            self.counters["cycles"] += 1
            self._drain_actions(b, immediate_only=False)
            self._begin_process_cycles(b)
            self._retire_ended()
            self.write_checkpoint()
            return result

    # ----------------------------------------------------------------- internals
    def _wait_until(self, b: float) -> None:
        """Sleep until model time ``b``, driving process executors and immediate actions."""
        deadline = self._monotonic() + self.clock.seconds_until(b)
        while not self._stop.is_set():
            now = self._monotonic()
            if now >= deadline:
                return
            wake = deadline
            for run in self._procs.values():
                if run.in_cycle and run.next_at is not None:
                    assert run.executor is not None  # in a cycle: it was started
                    if run.next_at <= now:
                        run.next_at = run.executor.step()
                    if run.next_at is not None:
                        wake = min(wake, run.next_at)
            if self._kick.is_set():
                self._kick.clear()
                with self._lock:
                    self._drain_actions(b, immediate_only=True)
                    self._retire_ended()
            self._kick.wait(max(0.0, wake - self._monotonic()))

    def _apply_commands(self) -> None:
        if self.commands is None:
            return
        counts = apply_commands(self.scheduler, self.commands.poll())
        self.counters["commands_other_node"] += counts.other_node
        self.counters["commands_applied"] += counts.applied
        self.counters["commands_unknown"] += counts.unknown

    def _end_process_cycles(
        self,
    ) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int], CycleUsage]]:
        """Close every process subtask's cycle; measured model Mcycles per subtask, and
        each one's cycle as its executor saw it."""
        measured: dict[tuple[str, int], float] = {}
        cycles: dict[tuple[str, int], CycleUsage] = {}
        scale = self.config.time_scale
        for key, run in self._procs.items():
            if not run.in_cycle:
                continue
            assert run.executor is not None  # in a cycle: it was started
            usage = cycles[key] = run.executor.end_cycle()
            run.in_cycle = False
            run.next_at = None
            # CPU-seconds of real time at the node's speed, in model time.
            m = usage.cpu_s * scale * self.node.speed_mhz
            run.measured += m
            measured[key] = m
            if usage.exit_code is not None or usage.state in _ENDED:
                run.exited = True
        return measured, cycles

    def _account(self, result: CycleResult, b: float) -> None:
        self._last_grants = {(g.job_id, g.subtask): g.granted_work for g in result.grants}
        finished: list[SubtaskOutcome] = []
        for key in result.finished:
            # Synthetic subtasks finish when their work is done.
            self._remove(key)
            rec = self._records.get(key)
            if rec is not None:
                rec.state, rec.finish = SubtaskPhase.FINISHED, b
                finished.append(SubtaskOutcome(key[0], key[1], self.node.name, rec.state, b))
        reports = list(result.reports)
        if self._procs:
            reports = [self._process_report(r) for r in reports]
            for key, run in list(self._procs.items()):
                if run.exited:
                    finished.append(self._process_exit(key, b))
        for rep in reports:
            rec = self._records.get((rep.job_id, rep.subtask))
            if rec is not None:
                rec.virtual_time = rep.virtual_time
            self._send(rep)
        for outcome in finished:
            self.on_finish(outcome)

    def _process_report(self, rep: ProgressReport) -> ProgressReport:
        """A process subtask is done when its command has exited (the scheduler booked
        its measured work and advanced its clock)."""
        run = self._procs.get((rep.job_id, rep.subtask))
        if run is None or not run.exited:
            return rep
        return dataclasses.replace(rep, done=True)

    def _process_exit(self, key: tuple[str, int], b: float) -> SubtaskOutcome:
        run = self._procs.pop(key)
        self._remove(key)
        rec = self._records[key]
        self.progress.close(key)
        code = run.executor.exit_code if run.executor is not None else None
        rec.exit_code, rec.finish, rec.measured = code, b, run.measured
        if code == 0 and run.failure is None:
            rec.state = SubtaskPhase.FINISHED
        else:
            rec.state = SubtaskPhase.FAILED
            if run.failure is not None:
                rec.reason = run.failure
            elif code is None:  # no one could read it (the executor says why)
                why = getattr(run.executor, "exit_reason", None) or "exit status unknown"
                rec.reason = f"command failed: {why}"
            else:
                rec.reason = f"command failed: {describe_exit(code)}"
            if run.reattached and run.failure is None:
                rec.reason += " (re-attached after a local manager restart)"
        if run.executor is not None:
            run.executor.close()
        return SubtaskOutcome(
            key[0], key[1], self.node.name, rec.state, b, code, rec.reason
        )

    def _begin_process_cycles(self, b: float) -> None:
        cycle_real = self.config.real_cycle
        for key, run in self._procs.items():
            if run.exited or run.in_cycle:
                continue
            assert run.executor is not None  # one that could not start has exited
            rec = self._records[key]
            s = rec.subtask
            grant = self._last_grants.get(key)
            if grant is None:
                # First cycle: no grant yet; run at the expected rate.
                grant = s.expected_rate * self.q
            share = grant / (self.node.speed_mhz * self.q)
            share = min(max(share, 0.0), float(run.executor.ncores))
            run.share = share
            run.executor.begin_cycle(share, cycle_real)
            run.in_cycle = True
            run.next_at = self._monotonic()

    def _drain_actions(self, b: float, immediate_only: bool) -> None:
        """Apply queued actions. Cancels apply at once; additions are parked until their
        start boundary (``immediate_only``: only park them, start nothing)."""
        deferred: list[tuple[str, Any, threading.Event | None]] = []
        while True:
            try:
                action = self._actions.get_nowait()
            except queue.Empty:
                break
            kind, arg, done = action
            if kind == "cancel":
                self._cancel(arg, b)
            elif kind == "fence":
                self._fence(arg, b)
            elif kind == "add":
                subtasks, start = arg
                self._pending.setdefault(start, []).extend(subtasks)
                for s in subtasks:
                    kind_ = ExecutorKind.PROCESS if s.command else ExecutorKind.SYNTHETIC
                    self._records[s.key] = _Record(s, kind_, start)
                    self.progress.forget(s.key)  # a new record: no progress yet
            else:  # pragma: no cover - only the kinds above are queued
                deferred.append(action)
            if done is not None:
                done.set()
        for action in deferred:
            self._actions.put(action)
        if immediate_only:
            return
        for start in sorted(t for t in self._pending if t <= b + 1e-9):
            late = start < b - 1e-9
            for s in self._pending.pop(start):
                if late:
                    self.counters["late_starts"] += 1
                self._start(s, b)

    def _start_overdue(self, last: float) -> None:
        """Start the parked subtasks whose start boundary is at or before ``last`` (the
        boundary the loop stepped last, model s) on it, before the cycle after it is
        stepped (module docstring, step 5)."""
        for start in sorted(t for t in self._pending if t <= last + 1e-9):
            on_time = start >= last - 1e-9
            for s in self._pending.pop(start):
                self.counters["late_placements" if on_time else "late_starts"] += 1
                self._start(s, last)

    def _start(self, s: Subtask, b: float) -> None:
        rec = self._records.get(s.key)
        if rec is None or rec.state is not SubtaskPhase.PENDING:
            return  # cancelled while pending
        rec.start = b
        if self.unleased is not None:
            self._fence_one(rec, None, self.unleased, b)
            return
        if rec.kind is ExecutorKind.PROCESS:
            assert s.command is not None
            out = None
            if self.output_dir is not None:
                self.output_dir.mkdir(parents=True, exist_ok=True)
                out = self.output_dir / f"{s.job_id}-{s.index}.log"
            executor = None
            failure: str | None = None
            # Where and with which key it reports its progress.
            env = tuple(self.progress.open(rec.subtask, b).items())
            try:
                executor = self._process_factory(
                    tuple(s.command), self.node.speed_mhz, out, s.env + env)
                executor.start()
            except (ValueError, OSError) as exc:
                # It will never progress: it leaves at the next boundary, reported done.
                failure = str(exc)
            # The scheduler must not finish it by an estimate: unbounded work.
            self.scheduler.add(dataclasses.replace(s, work=math.inf), b)
            run = _ProcessRun(executor)
            if failure is not None:
                run.exited, run.failure = True, failure
            self._procs[s.key] = run
        else:
            self.scheduler.add(s, b)
        rec.state = SubtaskPhase.RUNNING

    def _cancel(self, job_id: str, b: float) -> None:
        for key, rec in list(self._records.items()):
            if key[0] != job_id or rec.state not in (SubtaskPhase.PENDING, SubtaskPhase.RUNNING):
                continue
            run = self._procs.pop(key, None)
            self.progress.close(key)
            if run is not None:
                rec.measured = run.measured
            if run is not None and run.executor is not None:
                run.executor.close()
                rec.exit_code = run.executor.exit_code
            self._remove(key)
            rec.state, rec.finish = SubtaskPhase.CANCELLED, b
        for start, subs in list(self._pending.items()):
            self._pending[start] = [s for s in subs if s.job_id != job_id]
            if not self._pending[start]:
                del self._pending[start]

    def _fence(self, why: str, b: float) -> None:
        """Stop every subtask on the node, ``fenced`` (see :meth:`fence`)."""
        for key, rec in list(self._records.items()):
            if rec.state not in (SubtaskPhase.PENDING, SubtaskPhase.RUNNING):
                continue
            run = self._procs.pop(key, None)
            self._remove(key)
            self._fence_one(rec, run, why, b)
        self._pending.clear()

    def _fence_one(self, rec: _Record, run: _ProcessRun | None, why: str, b: float) -> None:
        """Fence one subtask: kill its processes (a short grace), mark it, log one line,
        tell the owner."""
        key = rec.subtask.key
        pid = None
        self.progress.close(key)
        if run is not None:
            rec.measured = run.measured
            if run.executor is not None:
                pid = run.executor.pid
                run.executor.close(grace_s=FENCE_GRACE_S)
                rec.exit_code = run.executor.exit_code
        rec.state, rec.finish = SubtaskPhase.FENCED, b
        rec.reason = f"fenced: {why}"
        self.counters["fenced"] += 1
        what = f"process group of pid {pid} killed" if pid is not None else (
            "its command stopped" if rec.kind is ExecutorKind.PROCESS else "synthetic work stopped")
        log.warning("node %s: fenced subtask %s[%d] (%s): %s", self.node.name, key[0], key[1],
                    what, why)
        self.on_finish(SubtaskOutcome(key[0], key[1], self.node.name, rec.state, b,
                                      rec.exit_code, rec.reason))

    def _send(self, report: ProgressReport) -> None:
        if self.reports.send(report):
            self.counters["reports_sent"] += 1
        else:
            self.counters["reports_dropped"] += 1

    def _close_all(self) -> None:
        for key, run in list(self._procs.items()):
            try:
                if run.executor is not None:
                    run.executor.close()
            except Exception:  # noqa: BLE001 - best effort while shutting down
                pass
            rec = self._records.get(key)
            if rec is not None and rec.state is SubtaskPhase.RUNNING:
                rec.state = SubtaskPhase.CANCELLED
        self._procs.clear()
        self.progress.close_all()
        if self._own_processes:
            # Also the subtasks orphaned by a local manager that was killed on this node
            # (their owner is gone): `coalloc down` leaves none behind. Those of another
            # node's manager that Ray is restarting stay for it to re-attach.
            from local_manager.sweep import reap_stale_subtasks

            try:
                reap_stale_subtasks(own_restart_file=self.checkpoint)
            except Exception:  # noqa: BLE001 - best effort while shutting down
                pass

    def _retire_ended(self) -> None:
        """Move subtasks that left the node to the bounded history (described once)."""
        for key, rec in list(self._records.items()):
            if rec.state in (SubtaskPhase.PENDING, SubtaskPhase.RUNNING):
                continue
            del self._records[key]
            self._history[key] = self._describe(rec)
            self.progress.forget(key)
            while len(self._history) > HISTORY:
                self._history.popitem(last=False)

    def _remove(self, key: tuple[str, int]) -> None:
        """Take a subtask off the scheduler, keeping its last work done on its record
        (the scheduler owns the live copy while it runs)."""
        live = self.scheduler.get(key)
        rec = self._records.get(key)
        if live is not None and rec is not None:
            rec.subtask.done_work = live.done_work
        self.scheduler.remove(key)

    def _describe(self, rec: _Record) -> dict[str, Any]:
        """One subtask of the node's status document: its placement and the live fields
        of its report (:meth:`_report`), as many of them as its kind has."""
        s = rec.subtask
        rep = self._report(rec)
        d: dict[str, Any] = {
            "job_id": s.job_id,
            "index": s.index,
            "qos": s.qos.value,
            "executor": rec.kind.value,
            "state": rec.state.value,
            "work": s.work,
            "expected_rate": s.expected_rate,
            "start_time": rec.start,
            "finish_time": rec.finish,
            "exit_code": rec.exit_code,
            "reason": rec.reason,
            "weight": rep.weight,
            "virtual_weight": rep.virtual_weight,
            "done_work": rep.done_work,
        }
        running = s.key in self._procs
        if running or rec.measured is None:  # an ended process subtask shows no clock
            d["virtual_time"] = rep.virtual_time
        if running:
            d.update(share=rep.share, pid=rep.pid, cpu_s=rep.cpu_s)
        d.update(self._progress_fields(rec))
        return d




def _subtask_dict(placed: Subtask, live: Subtask) -> dict[str, Any]:
    """A subtask as JSON-able data: placement from ``placed``, the changing fields (work
    done, weights, rate cap) from the scheduler's ``live`` copy."""
    d: dict[str, Any] = to_record(placed)
    for f in ("done_work", "weight", "virtual_weight", "rate_cap"):
        d[f] = getattr(live, f)
    return d


def _default_process_factory(
    argv: tuple[str, ...], speed_mhz: float, output: Path | None,
    restart_file: Path | None = None, env: tuple[tuple[str, str], ...] = (),
) -> SubtaskProcess:
    """A real process subtask; ``restart_file``: its node's checkpoint (None: none);
    ``env``: added to this process's environment (none: it is inherited as it is)."""
    import os

    from local_manager.process_executor import ProcessExecutor

    return ProcessExecutor(
        list(argv), speed_mhz=speed_mhz, stdout=output, stderr=output, grace_s=1.0,
        restart_file=restart_file, env={**os.environ, **dict(env)} if env else None,
    )
