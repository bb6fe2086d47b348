"""The co-allocation controller's service loop: :class:`ControllerCore` driven by real time.

No Ray here (:mod:`runtime.actors` wraps it). Reports come from a :class:`ReportSource`
(the transport's ZeroMQ PULL receiver), commands go to a :class:`CommandSink` (the
transport's command publisher).

Timing. The control period ``P = control_every * q`` (model s). The period that ends at
the boundary ``k * P`` is evaluated as soon as every running subtask's report for that
boundary is in, and at the latest ``control_lag * q`` model seconds after it (a late local
manager's clocks are then carried, below); ``control_period`` is called with
``T_R = k * P`` (the time those reports describe), exactly as the simulator calls it after
stepping every node to ``k * P``. The commands reach the local managers before their next
boundary and so act on the cycle ending at ``k * P + q``, again as in the simulator.
Reports are ingested as they arrive; the transport has already dropped (and counted) bad
frames, duplicates and (with CURVE) reports whose node is not the node of the key that
sent them.

Late local managers. A local manager that is late steps the missed cycles one by one when
it catches up (up to ``stall_cycles``), so the reports it owes for the period being
evaluated have not arrived yet; the controller core carries its clocks at their last rate
to the period's time instead of comparing stale clocks with fresh ones (``catch_up``,
:mod:`coallocator.core`, "Late reports"). Counted in ``estimated_clocks``.

The controller's view. A report is also checked against what the controller knows before
it is applied: its ``node`` must be the node its subtask was placed on (else it is
dropped as ``wrong_node``), and its ``incarnation`` must be that node's current one (else
``old_incarnation``), by :class:`Incarnations`' rule.

Restart. Given a ``checkpoint`` path, the service writes there after every control period
(atomically, :mod:`workloads.atomic`) the highest report ``seq`` it has applied per
(node, incarnation), each node's current incarnation and whatever the caller adds
(the actor's bound ports). A service built over an existing checkpoint (a controller Ray
restarted) drops every report whose seq is at or below the recorded one for its
(node, incarnation), counted ``replayed``: a report is applied at most once into the
state that survives a restart. Jobs come back through :meth:`resume_job` (the actor asks
the global manager); their virtual clocks come back with the next reports (a report
carries its subtask's absolute T_V). Phase statistics of a resumed job restart at its
resumption; the phase log is appended to.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from coallocator.core import ControllerCore, JobClockView, violation_fraction
from coallocator.messages import ProgressReport, ReweightCommand
from coallocator.phase_log import PeriodRecord, PhaseLogWriter, SummaryRecord
from global_manager.engine import control_cycle
from runtime.config import RuntimeConfig
from runtime.timebase import ModelClock, boundary_index
from workloads.atomic import atomic_write_json
from workloads.messages import JobRegistration

#: Version of the controller checkpoint's layout.
CHECKPOINT_VERSION = 1

#: Missed control periods run one by one when the loop is late; beyond that it jumps.
MAX_CATCH_UP = 100

#: Real seconds between two exports of the tracked jobs' metrics (:class:`Metrics`): Ray's
#: metrics agents export every 10 s (``metrics_report_interval_ms``), so setting every
#: job's gauges every control period (0.3 s by default) only repeated values, and at
#: thousands of gangs it cost a tenth of each period (docs/decisions.md, "Scale: 64 nodes
#: up in 15 s, bench_scale at 1,000 nodes").
METRICS_EVERY_S = 5.0


class ReportSource(Protocol):
    """Decoded progress reports. ``poll`` waits up to ``timeout_s`` real seconds for the
    first one and returns everything that has arrived; ``counters`` are the transport's
    (received, dropped by reason)."""

    endpoint: str

    def poll(self, timeout_s: float) -> list[ProgressReport]: ...

    def counters(self) -> Mapping[str, Any]: ...

    def close(self) -> None: ...


class CommandSink(Protocol):
    """Sends re-weight commands to the local managers without blocking."""

    endpoint: str

    def publish(self, command: ReweightCommand) -> bool: ...

    def poll_incoming(self) -> int:
        """Read what peers sent on the command channel (without blocking); returns how
        many messages. The loop calls it continuously so that nothing piles up."""
        ...

    def counters(self) -> Mapping[str, Any]: ...

    def close(self) -> None: ...


class Metrics(Protocol):
    """Observability hooks (Ray's ``ray.util.metrics`` in the actor; no-ops in tests)."""

    def period(self, views: Iterable[JobClockView], received: int, dropped: Mapping[str, int],
               now: float | None = None) -> None:
        """After the control period at model time ``now`` (s): the tracked jobs' views,
        reports received and frames dropped by reason (running totals)."""
        ...


class NullMetrics:
    def period(self, views: Iterable[JobClockView], received: int, dropped: Mapping[str, int],
               now: float | None = None) -> None:
        return None


#: Replaced incarnations remembered per node.
RETIRED_INCARNATIONS = 16


class Incarnations:
    """Per node, the current incarnation of its local manager and the ones it replaced.

    Rule: the first incarnation seen for a node (registered by ``up`` from the manager's
    ``ready``, or in its first report) is current. A report of the current incarnation
    is applied; one of a replaced incarnation (one of the last ``keep`` that were
    current) is dropped as ``old_incarnation``: a manager that Ray restarted, or that was
    partitioned away, must not move its subtasks' clocks once its successor reports. A
    report of an incarnation never seen before is a restarted manager: it becomes current
    and the previous one is replaced. :meth:`register` makes an incarnation current
    outright (a restarted manager registers itself before it reports).

    Incarnations are random (:func:`runtime.node_runtime.new_incarnation`), so "newer"
    means "seen later", not a larger number. Memory: one int and ``keep`` ints per node
    that hosts a subtask."""

    __slots__ = ("keep", "_current", "_retired")

    def __init__(self, keep: int = RETIRED_INCARNATIONS) -> None:
        self.keep = keep
        self._current: dict[str, int] = {}
        self._retired: dict[str, deque[int]] = {}

    def current(self, node: str) -> int | None:
        return self._current.get(node)

    def register(self, node: str, incarnation: int) -> None:
        """Make ``incarnation`` the node's current one."""
        retired = self._retired.setdefault(node, deque(maxlen=self.keep))
        cur = self._current.get(node)
        if cur is not None and cur != incarnation:
            retired.append(cur)
        if incarnation in retired:
            retired.remove(incarnation)
        self._current[node] = incarnation

    def check(self, node: str, incarnation: int) -> bool:
        """Whether a report of ``incarnation`` from ``node`` may be applied (see the class
        docstring; a new incarnation is recorded as current)."""
        cur = self._current.get(node)
        if cur == incarnation:
            return True
        if cur is not None and incarnation in self._retired.get(node, ()):
            return False
        self.register(node, incarnation)
        return True

    def snapshot(self) -> dict[str, int]:
        return dict(self._current)


class ControllerService:
    """See the module docstring. Thread-safe: :meth:`register_job`, :meth:`cancel`,
    :meth:`status` may be called while :meth:`run` runs in another thread."""

    def __init__(
        self,
        config: RuntimeConfig,
        clock: ModelClock,
        node_budgets: Mapping[str, float],
        reports: ReportSource,
        commands: CommandSink,
        log_path: Path | None,
        metrics: Metrics | None = None,
        checkpoint: Path | None = None,
        checkpoint_extra: Mapping[str, Any] | None = None,
    ) -> None:
        """``checkpoint``: the restart file (None: none; see the module docstring);
        ``checkpoint_extra``: JSON-able data written with it (the bound ports)."""
        self.config = config
        self.clock = clock
        self.reports = reports
        self.commands = commands
        self.metrics = metrics or NullMetrics()
        policy = config.get_policy()
        self.log_path = log_path
        self._writer = PhaseLogWriter(log_path) if log_path is not None else None
        self.core = ControllerCore(
            policy.controller_config,
            policy.controller,
            dict(node_budgets),
            self._write,
            config.log_every,
            config.control_period,
            # A local manager up to ``stall_cycles`` late steps the missed cycles when it
            # catches up: until then its clocks are carried at their last rate (a report
            # from one that was later resynchronises without the missed work).
            catch_up=config.stall_cycles * config.cycle,
        )
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._pending_jobs: dict[str, JobRegistration] = {}
        self.period_time: float | None = None
        self.counters: dict[str, int] = {
            "reports_received": 0,
            "reports_applied": 0,
            "reports_unknown_job": 0,
            "reports_wrong_node": 0,
            "reports_old_incarnation": 0,
            "reports_replayed": 0,
            "periods": 0,
            "late_periods": 0,
            "skipped_periods": 0,
            "commands_sent": 0,
            "commands_dropped": 0,
        }
        #: Model time of the last metrics export (:data:`METRICS_EVERY_S`).
        self._metrics_at = -math.inf
        self.incarnations = Incarnations()
        self.checkpoint = checkpoint
        self.checkpoint_extra = dict(checkpoint_extra or {})
        self._checkpoint_made = False  # written once by this process
        #: (node, incarnation) -> highest seq applied (written to the checkpoint).
        self._applied: dict[tuple[str, int], int] = {}
        #: (node, incarnation) -> seq at or below which reports were applied before a
        #: restart (read from the checkpoint).
        self._floor: dict[tuple[str, int], int] = {}
        self.recovered = False
        #: Runs the previous process tracked (from its checkpoint) not asked about yet.
        self._orphans: set[str] = set()
        if checkpoint is not None and checkpoint.exists():
            self._recover(checkpoint)

    # ------------------------------------------------------------- restart
    @staticmethod
    def read_checkpoint(path: Path) -> dict[str, Any]:
        """The checkpoint's content (ValueError naming the file if it is not one)."""
        import json

        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"{path}: version: not a controller checkpoint")
        return data

    def _recover(self, path: Path) -> None:
        data = self.read_checkpoint(path)
        for node, inc, seq in data.get("applied", []):
            self._floor[(str(node), int(inc))] = int(seq)
        self._applied = dict(self._floor)
        for node, inc in data.get("incarnations", {}).items():
            self.incarnations.register(str(node), int(inc))
        self._orphans = {str(j) for j in data.get("tracked", [])}
        self._drop_summarised_orphans()
        self.recovered = True

    def _drop_summarised_orphans(self) -> None:
        """Forget the orphaned runs whose summary the previous process wrote (it closed
        them after its last checkpoint): read once, at a restart."""
        if not self._orphans or self.log_path is None or not self.log_path.exists():
            return
        import json

        with self.log_path.open("r", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if '"type":"summary"' not in line:
                    continue
                try:
                    self._orphans.discard(str(json.loads(line).get("job")))
                except ValueError:  # a torn line: not a summary that was written
                    continue

    def write_checkpoint(self) -> None:
        """Write the checkpoint now (the loop does after every control period)."""
        if self.checkpoint is None:
            return
        with self._lock:
            doc = dict(
                self.checkpoint_extra,
                version=CHECKPOINT_VERSION,
                applied=[[n, i, s] for (n, i), s in sorted(self._applied.items())],
                incarnations=self.incarnations.snapshot(),
                tracked=sorted(set(self.core.jobs) | set(self._pending_jobs) | self._orphans),
            )
        if self._checkpoint_made and not self.checkpoint.exists():
            return  # `down` removed it: made once, then only replaced (as a node's)
        atomic_write_json(self.checkpoint, doc)
        self._checkpoint_made = True

    def resume_job(self, reg: JobRegistration, ended: Mapping[int, float]) -> bool:
        """Track again a job that was running before a restart; ``ended``: subtask index
        -> real time (model s) it ended, as the global manager knows. False if tracked
        already (nothing changes)."""
        with self._lock:
            if reg.job_id in self.core.jobs or reg.job_id in self._pending_jobs:
                return False
            if reg.arrival <= self.clock.now():
                self.core.register_job(reg)
            else:
                self._pending_jobs[reg.job_id] = reg
                return True
            for index, t in sorted(ended.items()):
                self.core.subtask_ended(reg.job_id, index, t)
            self._flush()
            return True

    def subtask_ended(self, job_id: str, index: int, t: float) -> None:
        """The global manager says subtask ``index`` of ``job_id`` ended (model s ``t``)
        though its done report was not applied here (a safety net after a restart)."""
        with self._lock:
            self.core.subtask_ended(job_id, index, t)
            self._flush()

    def orphaned_runs(self) -> list[str]:
        """The runs the previous process tracked that this one does not track and has not
        asked the global manager about yet (after a restart)."""
        with self._lock:
            return sorted(self._orphans - set(self.core.jobs) - set(self._pending_jobs))

    def orphans_asked(self, runs: Iterable[str]) -> None:
        """The global manager was asked about ``runs`` (what it listed is tracked now)."""
        with self._lock:
            self._orphans.difference_update(runs)

    def close_run(self, run_id: str, ended: Mapping[int, float], reason: str) -> None:
        """The global manager says run ``run_id`` is over (``ended``: subtask index ->
        model s it ended; ``reason``: "" completed, else why): mark those subtasks ended
        (a completed run closes with its summary), then stop tracking it if it is still
        open, with ``reason``. Counted in ``runs_closed``."""
        with self._lock:
            if run_id not in self.core.jobs and run_id not in self._pending_jobs:
                return
            self.counters["runs_closed"] = self.counters.get("runs_closed", 0) + 1
            for index, t in sorted(ended.items()):
                self.core.subtask_ended(run_id, index, t)
            if run_id in self.core.jobs or run_id in self._pending_jobs:
                self.cancel(run_id, reason or "ended")
            self._flush()

    def tracked_jobs(self) -> list[str]:
        with self._lock:
            return list(self.core.jobs) + list(self._pending_jobs)

    # ------------------------------------------------------------------ the sink
    def _write(self, record: PeriodRecord | SummaryRecord) -> None:
        if self._writer is not None:
            self._writer.write(record)
            if isinstance(record, SummaryRecord):
                # A job just ended: readers of the live log should see it at once.
                self._writer.flush()

    # ------------------------------------------------------------- entry points
    def register_job(self, reg: JobRegistration) -> None:
        """Track a grid QoS job (strict or loose) from model time ``reg.arrival`` (its
        start boundary), as :meth:`ControllerCore.register_job`.

        The job joins right after the control period that ends at ``arrival`` (or at once
        if that period has run), as the simulator admits a job after that period's
        control: a job that has not started yet is never observed."""
        with self._lock:
            if self.period_time is not None and reg.arrival <= self.period_time:
                self.core.register_job(reg)
            else:
                self._pending_jobs[reg.job_id] = reg

    def _join_pending(self, t: float) -> None:
        """Register the pending jobs whose start is at or before model time ``t``."""
        for job_id, reg in list(self._pending_jobs.items()):
            if reg.arrival <= t + 1e-9:
                del self._pending_jobs[job_id]
                self.core.register_job(reg)

    def cancel(self, job_id: str, reason: str = "") -> None:
        """Stop tracking ``job_id``; ``reason`` (cancelled, requeued after a node loss,
        failed) goes into its summary record in the phase log."""
        with self._lock:
            if self._pending_jobs.pop(job_id, None) is not None:
                return
            self.core.cancel(job_id, reason)
            self._flush()

    def register_node(self, node: str, incarnation: int) -> None:
        """The local manager of ``node`` runs as ``incarnation`` from now on (see
        :class:`Incarnations`)."""
        with self._lock:
            self.incarnations.register(node, incarnation)

    def _placed_on(self, job_id: str, index: int) -> str | None:
        """The node the controller placed subtask ``index`` of ``job_id`` on (None: an
        unknown job or subtask)."""
        job = self.core.jobs.get(job_id)
        if job is not None:
            return job.subtasks[index].node if 0 <= index < len(job.subtasks) else None
        pending = self._pending_jobs.get(job_id)
        if pending is not None:
            for i, node, _ in pending.subtasks:
                if i == index:
                    return str(node)
        return None

    def ingest(self, reports: Iterable[ProgressReport]) -> None:
        """Apply decoded reports (the transport has dropped bad frames and duplicates),
        after checking them against the controller's view (module docstring)."""
        with self._lock:
            for rep in reports:
                self.counters["reports_received"] += 1
                placed = self._placed_on(rep.job_id, rep.subtask)
                if placed is None:
                    self.counters["reports_unknown_job"] += 1
                    continue
                if rep.node != placed:
                    self.counters["reports_wrong_node"] += 1
                    continue
                if not self.incarnations.check(rep.node, rep.incarnation):
                    self.counters["reports_old_incarnation"] += 1
                    continue
                stream = (rep.node, rep.incarnation)
                if rep.seq <= self._floor.get(stream, -1):
                    self.counters["reports_replayed"] += 1
                    continue
                if rep.seq > self._applied.get(stream, -1):
                    self._applied[stream] = rep.seq
                if rep.job_id in self._pending_jobs:
                    # A report after the job's start: its period has passed here.
                    self._join_pending(rep.real_time)
                if self.core.ingest(rep):
                    self.counters["reports_applied"] += 1
                else:
                    self.counters["reports_unknown_job"] += 1

    def reported_through(self, t: float) -> bool:
        """Whether every running subtask the controller tracks has reported the boundary
        at model time ``t`` (or a later one)."""
        with self._lock:
            return self.core.reported_through(t)

    def control(self, t: float) -> list[ReweightCommand]:
        """Run the control period ending at model time ``t`` and send its commands."""
        offset, quality = self.clock.clock_status()

        def send(cmd: ReweightCommand) -> None:
            # A non-blocking send (ROUTER, bounded queue): safe under the lock.
            if self.commands.publish(cmd):
                self.counters["commands_sent"] += 1
            else:
                self.counters["commands_dropped"] += 1

        with self._lock:
            cmds = control_cycle(self.core, t, send, offset, quality)
            self.period_time = t
            self._join_pending(t)
            self.counters["periods"] += 1
            self._flush()
            export = t - self._metrics_at >= METRICS_EVERY_S * self.config.time_scale
            if not export:
                return cmds
            self._metrics_at = t
            views = [v for v in (self.core.view(j) for j in list(self.core.jobs)) if v]
            counters = dict(self.counters)
        dropped = self._dropped_by_reason(dict(self.reports.counters()), counters)
        self.metrics.period(views, counters["reports_received"], dropped, t)
        return cmds

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        """Close the log (summaries of jobs still open are not written: they did not end)."""
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None

    def _flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        """Ingest reports continuously; run a control period every ``P`` model seconds."""
        period = self.config.control_period
        lag = self.config.control_lag * self.config.cycle
        k = boundary_index(self.clock.now() - lag, period) + 1
        while not self._stop.is_set():
            due = k * period + lag
            while not self._stop.is_set():
                wait = self.clock.seconds_until(due)
                if wait <= 0:
                    break
                got = self.reports.poll(min(wait, 0.05))
                self.ingest(got)
                self.commands.poll_incoming()
                if got and self.reported_through(k * period):
                    break  # every report for the boundary is in: the commands go sooner
            if self._stop.is_set():
                break
            self.ingest(self.reports.poll(0.0))
            self.commands.poll_incoming()
            behind = boundary_index(self.clock.now() - lag, period) - k
            if behind > MAX_CATCH_UP:
                self.counters["skipped_periods"] += behind
                k += behind
            elif behind >= 1:
                self.counters["late_periods"] += 1
            self.control(k * period)
            try:
                self.write_checkpoint()
            except OSError:  # a full disk must not stop the control loop
                self.counters["checkpoint_errors"] = self.counters.get("checkpoint_errors", 0) + 1
            k += 1

    # ------------------------------------------------------------------ status
    @staticmethod
    def _dropped_by_reason(
        transport: Mapping[str, Any], counters: Mapping[str, int]
    ) -> dict[str, int]:
        """Every drop by reason (frames, running totals): the transport's, and the
        controller's own checks."""
        dropped = {str(k): int(v) for k, v in transport.get("dropped", {}).items()}
        dropped["wrong_node"] = dropped.get("wrong_node", 0) + counters["reports_wrong_node"]
        dropped["old_incarnation"] = (
            dropped.get("old_incarnation", 0) + counters["reports_old_incarnation"]
        )
        dropped["replayed"] = counters["reports_replayed"]
        return dropped

    def status(self) -> dict[str, Any]:
        """Counters, endpoints, clock and every tracked job's clocks (JSON-able)."""
        offset, quality = self.clock.clock_status()
        with self._lock:
            jobs: dict[str, Any] = {}
            for job_id in list(self.core.jobs):
                v = self.core.view(job_id)
                if v is None:
                    continue
                jobs[job_id] = {
                    "qos": v.qos,
                    "virtual_times": list(v.virtual_times),
                    "phase_difference": v.phase_difference,
                    "max_phase_difference": v.max_phase_difference,
                    "window_violation_fraction": v.window_violation_fraction,
                    "rate_caps": list(v.rate_caps),
                    "mean_virtual": v.mean_virtual,
                    "window": v.window,
                    "weights": list(v.weights),
                    "virtual_weights": list(v.virtual_weights),
                    "done": list(v.done),
                    "closed": False,
                }
            for job_id, summ in self.core.summaries.items():
                jobs.setdefault(
                    job_id,
                    {
                        "qos": summ.qos,
                        "closed": True,
                        "completed": summ.completed,
                        "mean_phase_difference": summ.mean_phase_difference,
                        "max_phase_difference": summ.max_phase_difference,
                        "window_violation_fraction": violation_fraction(
                            summ.window_violations, summ.periods
                        ),
                        "completion_skew": summ.completion_skew,
                        "turnaround": summ.turnaround,
                    },
                )
            counters = dict(self.counters, estimated_clocks=self.core.estimated_clocks)
            incarnations = self.incarnations.snapshot()
        transport = dict(self.reports.counters())
        commands = dict(self.commands.counters())
        dropped = self._dropped_by_reason(transport, counters)
        secure = bool(transport.get("secure")) and bool(commands.get("secure"))
        security = {
            "mode": "curve" if secure else "insecure",
            "auth_failures": int(transport.get("auth_failures", 0))
            + int(commands.get("auth_failures", 0)),
            "refused": {
                kind: int(transport.get("refused", {}).get(kind, 0))
                + int(commands.get("refused", {}).get(kind, 0))
                for kind in ("plaintext", "unknown_key", "bad_handshake")
            },
            "spoofed_node": int(transport.get("dropped", {}).get("spoofed_node", 0))
            + int(commands.get("spoofed_node", 0)),
        }
        return {
            "report_endpoint": self.reports.endpoint,
            "command_endpoint": self.commands.endpoint,
            "phase_log": str(self.log_path) if self.log_path is not None else None,
            "period_time": self.period_time,
            "model_time": self.clock.now(),
            "clock": {"offset_s": offset, "quality": quality},
            "counters": counters,
            "transport": transport,
            "commands_transport": commands,
            "dropped": dropped,
            "security": security,
            "incarnations": incarnations,
            "recovered": self.recovered,
            "jobs": jobs,
        }
