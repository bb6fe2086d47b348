"""The global manager's service: :class:`GlobalManagerCore` plus the live job table.

No Ray here: :mod:`runtime.actors` wraps it and supplies a :class:`Dispatch` that reaches
the controller and the local managers. Wiring is the simulator's
(:func:`global_manager.simulator.simulate`): the same core, policy, RNG seed, global
configuration (rate per weight, QoS share) and node budgets; an admitted grid QoS job is
registered with the controller before its subtasks are handed to their nodes.

A submission at model time ``now`` is admitted at the cycle boundary ``b`` at or after
``now + margin`` (the margin, in real seconds, lets the Ray calls reach every node in
time: ``start_margin_s``, or more when recent dispatch calls were slow,
:mod:`runtime.start_margin`): the job's subtasks start at ``b`` on every node, the
controller tracks it from ``b``, as the simulator admits a job at the boundary of its
arrival. A batch of jobs (one ``submit`` call) shares one ``b`` and is admitted in order,
so the same batch makes the same decisions as the simulator given the same node loads.

Persistence (write-ahead). Given a ``journal`` path, the service records what changed
(the changed jobs' rows, the core's state: committed and load rates, user holdings, RNG,
job ids) in that journal (:mod:`runtime.journal`, sqlite in WAL mode), one transaction
after every change and before the change is acted on or answered: an admitted job is
written before it is dispatched, a cancellation before the nodes are told, a subtask
outcome before anyone can read it. A service built over an existing journal recovers
from it (a restarted global manager). A submission may carry a client token; a retried
submission with a token already in the journal gets the recorded answers instead of a
second admission (at most once). Finished jobs move to the journal's archive after
``keep_finished_s`` (:meth:`GlobalService.archive_finished`).
"""

from __future__ import annotations

import heapq
import json
import logging
import random
import threading
import time
from collections.abc import Container, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Protocol

from global_manager.core import GlobalManagerCore, QueueMode
from global_manager.engine import start_run
from runtime.config import RuntimeConfig
from runtime.journal import Journal, Sync, journal_files
from runtime.metrics import NullGlobalMetrics, QueueGauges
from runtime.start_margin import StartMargin, dispatch_calls
from runtime.status import (
    JobRecord,
    JobTable,
    QueueRow,
    job_record,
    node_record,
    queue_gauges,
    queue_order,
    queue_row,
    submit_answer,
    to_json,
)
from runtime.timebase import ModelClock, boundary_at_or_after
from workloads.messages import (
    JobRegistration,
    NodeReport,
    SubtaskOutcome,
    SubtaskPhase,
    SubtaskReport,
    initial_pace_of,
)
from workloads.model import EndPolicy, JobPhase, JobSpec, Node, QosClass, Subtask
from workloads.records import from_record, to_record
from workloads.spec import DEFAULT_USER, parse_job

log = logging.getLogger("coalloc.runtime")

#: Version of the journal's records (its ``meta`` table's ``version``): 4, records of
#: :mod:`workloads.records`; 3, specs as job-file mappings (read, and rewritten as 4).
JOURNAL_VERSION = 4
#: Versions whose specs are job-file mappings (:meth:`JobInfo.from_file_record`).
FILE_SPEC_VERSIONS = (2, 3)
#: The journal's tables (:class:`runtime.journal.Journal`), each keyed by id: ``meta``
#: (the core's :data:`CORE_STATE_KEYS`, ``version``, ``lost``, ``counters``), ``jobs``
#: (the job table), ``core_jobs``, ``pending`` and ``closed`` (the core's placed, pending
#: and closed jobs), ``tokens`` (submission answers) and ``archive`` (finished jobs past
#: their retention, as status shows them).
JOURNAL_TABLES = ("meta", "jobs", "core_jobs", "pending", "closed", "tokens", "archive")
#: Log pages (4 KiB) after which a journal write folds the log into the file itself;
#: normally :meth:`GlobalService.checkpoint_journal` does it first, off the writer's path.
JOURNAL_AUTOCHECKPOINT_PAGES = 8192
#: The keys of :meth:`GlobalManagerCore.snapshot_state`.
CORE_STATE_KEYS = ("next_id", "seq", "rng", "committed", "load", "user_held", "down", "drain")
#: How many submission tokens (with their answers) the journal keeps for retries.
TOKENS_KEPT = 256


def read_journal(path: Path) -> dict[str, dict[str, Any]]:
    """The tables of the global manager's journal at ``path`` (:data:`JOURNAL_TABLES`,
    each ``{id: record}``), for inspection; :class:`runtime.journal.JournalUnreadable` if
    it is not one."""
    journal = Journal(path, JOURNAL_TABLES)
    try:
        return journal.load()
    finally:
        journal.close()


class Dispatch(Protocol):
    """How the global manager reaches the other actors. A call that cannot reach its
    actor raises (any exception); :meth:`cancel` never raises and returns the nodes it
    could not reach."""

    def register(self, reg: JobRegistration) -> None: ...

    def place(self, node: str, subtasks: list[Subtask], start: float) -> None: ...

    def cancel(self, job_id: str, nodes: Iterable[str], reason: str = "") -> list[str]: ...


class DispatchFailed(Exception):
    """Placing a job on the other actors failed: ``actor`` names the one that did not
    answer (``the controller`` or ``the local manager of node X``), ``node`` is X."""

    def __init__(self, actor: str, node: str | None, cause: BaseException) -> None:
        self.actor = actor
        self.node = node
        self.cause = cause
        super().__init__(f"{actor} is unreachable ({type(cause).__name__})")


#: Most ``place`` calls of one run made at once (one worker thread each).
DISPATCH_WORKERS = 16
#: How long (real s) a node whose local manager Ray is restarting may stay silent before
#: it is lost, if that is longer than ``node_timeout`` cycles: a restart (a new worker
#: process, the imports, the checkpoint restored) took over 15 s on a loaded 2-core
#: machine, where ``node_timeout`` is 15 s at the default time scale. A manager that never
#: comes back is still lost, after ``max(node_timeout cycles, this)``.
MANAGER_RESTART_WAIT_S = 120.0
#: Real seconds a node's last :class:`NodeReport` stays fresh: ``status`` shows a node
#: whose last report is older (three of the monitor's once-a-second rounds missed) as not
#: answering. ``status`` answers from these reports; it never waits on a node.
REPORT_FRESH_S = 3.0


@dataclass(frozen=True, slots=True)
class HeardReport:
    """A node's last :class:`NodeReport` as the global manager holds it, and ``age_s``
    (real s since it arrived, when it was read)."""

    report: NodeReport
    age_s: float = 0.0

    @property
    def fresh(self) -> bool:
        """Not older than :data:`REPORT_FRESH_S`."""
        return self.age_s <= REPORT_FRESH_S


@dataclass(frozen=True, slots=True)
class RunId:
    """One run of a job: its ``dispatch``-th placement (1 for the first). The controller
    and the local managers know it by ``str(run)``: the job id for the first run, then
    ``<job id>.<n>``, so that what a stopped run left behind is never taken for the
    current one."""

    job_id: str
    dispatch: int = 1

    def __str__(self) -> str:
        return self.job_id if self.dispatch <= 1 else f"{self.job_id}.{self.dispatch}"

    @staticmethod
    def parse(text: str, job_ids: Container[str]) -> RunId:
        """The run named ``text``; ``job_ids``: the jobs known (a job id may hold dots)."""
        if text in job_ids:
            return RunId(text)
        job_id, _, n = text.rpartition(".")
        return RunId(job_id, int(n)) if job_id and n.isdigit() else RunId(text)


@dataclass(frozen=True, slots=True)
class Reservation:
    """A run placed and journaled under the lock, to be handed to the other actors
    outside it: ``subtasks`` carry the run id; ``start``: model s the run starts;
    ``registration``: the controller's (grid QoS runs only)."""

    run: RunId
    subtasks: tuple[Subtask, ...]
    start: float
    registration: JobRegistration | None


class Executor(str, Enum):
    """How a placed subtask runs on its node: a command's process, or synthetic work."""

    PROCESS = "process"
    SYNTHETIC = "synthetic"


@dataclass(frozen=True, slots=True)
class PlacedSubtask:
    """One subtask of a job's current run as placed: ``work`` in Mcycles (what this run
    was given), ``relative_weight`` the job file's ``r_i``, ``expected_rate`` ``x_i`` in
    Mcycles/s."""

    index: int
    node: str
    work: float
    relative_weight: float
    expected_rate: float
    executor: Executor

    @staticmethod
    def of(s: Subtask) -> PlacedSubtask:
        return PlacedSubtask(
            s.index, s.node, s.work, s.relative_weight, s.expected_rate,
            Executor.PROCESS if s.command else Executor.SYNTHETIC,
        )


@dataclass(frozen=True, slots=True)
class SubtaskEnd:
    """How a subtask of a job's current run left its node: ``finish_time`` in model s;
    ``exit_code`` for a process subtask; ``reason``: why it failed."""

    state: SubtaskPhase
    finish_time: float
    exit_code: int | None = None
    reason: str = ""


@dataclass(slots=True)
class JobInfo:
    """One job in the live job table. Times in model s.

    ``spec``: the job as submitted, with its ``job_id`` (what a requeue starts from; its
    name, QoS class, user, priority and windows are read from it). ``subtasks``: its
    current run's placement (none while pending); ``outcomes``: how those that ended
    ended, by index. ``dispatches``: how many times it was placed, which names its
    current run (:attr:`run`). ``attempt``: runs started (requeues count); ``history``:
    one line per run that ended early."""

    job_id: str
    spec: JobSpec
    state: JobPhase
    reason: str
    submitted_at: float
    start_at: float | None = None
    subtasks: tuple[PlacedSubtask, ...] = ()
    finished_at: float | None = None
    outcomes: dict[int, SubtaskEnd] = field(default_factory=dict)
    dispatches: int = 0
    attempt: int = 1
    history: list[str] = field(default_factory=list)
    queued_at: float | None = None  # model s it (re)entered the pending queue
    #: Fraction of the job's work its current run was given (requeues start from the
    #: gang's last common progress).
    work_left: float = 1.0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def qos(self) -> QosClass:
        return self.spec.qos

    @property
    def user(self) -> str:
        return self.spec.user

    @property
    def priority(self) -> int:
        return self.spec.priority

    @property
    def overall_deviation(self) -> float | None:
        """``E_t``, model s, as in the job's spec."""
        return self.spec.overall_deviation

    @property
    def asynchrony(self) -> float | None:
        """``A_t``, model s, as in the job's spec."""
        return self.spec.asynchrony

    @property
    def run(self) -> RunId:
        """Its current run (the first until it is placed)."""
        return RunId(self.job_id, max(self.dispatches, 1))

    @property
    def run_id(self) -> str:
        """Its current run's id on the controller and the local managers."""
        return str(self.run)

    def open_subtasks(self) -> list[PlacedSubtask]:
        """Its current run's subtasks that have not ended."""
        return [s for s in self.subtasks if s.index not in self.outcomes]

    def to_dict(self) -> dict[str, Any]:
        """The job as status shows it (JSON-able)."""
        subtasks = []
        for s in self.subtasks:
            d: dict[str, Any] = {
                "index": s.index, "node": s.node, "work": s.work,
                "relative_weight": s.relative_weight, "expected_rate": s.expected_rate,
                "executor": s.executor.value,
            }
            o = self.outcomes.get(s.index)
            if o is not None:
                d.update(state=o.state.value, finish_time=o.finish_time,
                         exit_code=o.exit_code, reason=o.reason)
            subtasks.append(d)
        return {
            "job_id": self.job_id,
            "name": self.name,
            "qos": self.qos.value,
            "user": self.user,
            "priority": self.priority,
            "state": self.state.value,
            "reason": self.reason,
            "submitted_at": self.submitted_at,
            "start_at": self.start_at,
            "finished_at": self.finished_at,
            "overall_deviation": self.overall_deviation,
            "asynchrony": self.asynchrony,
            "run_id": self.run_id,
            "attempt": self.attempt,
            "history": list(self.history),
            "nodes": [s.node for s in self.subtasks],
            "subtasks": subtasks,
        }

    def to_record(self) -> dict[str, Any]:
        """Every field as JSON-able data, for the journal (:mod:`workloads.records`;
        :meth:`from_record` inverts)."""
        record: dict[str, Any] = to_record(self)
        return record

    @staticmethod
    def from_record(d: Mapping[str, Any]) -> JobInfo:
        return from_record(JobInfo, d)

    @staticmethod
    def from_file_record(d: Mapping[str, Any]) -> JobInfo:
        """A job as journal versions 2 and 3 wrote it: every field, its spec as a
        job-file mapping (:func:`workloads.spec.job_to_dict`, work in seconds), and
        name, QoS class, user, priority and windows (the spec's) beside it."""
        job_id = str(d["job_id"])
        spec = parse_job(d["spec"], "journal", allow_local=True, default_user=DEFAULT_USER)
        fields = {k: d[k] for k in JobInfo.__dataclass_fields__ if k in d}
        return from_record(JobInfo, dict(fields, spec=to_record(replace(spec, job_id=job_id))))


class GlobalService:
    """Admission, the pending queue, placement, node health and the job table of the
    live runtime. Thread-safe."""

    #: How far a journal write is durable: ``NORMAL``, it survives this process's crash,
    #: the failure the journal is read after (a Ray restart of the actor in the same
    #: cluster; docs/decisions.md, "A journal whose writes cost what changed").
    journal_sync: ClassVar[Sync] = Sync.NORMAL

    def __init__(
        self,
        nodes: list[Node],
        config: RuntimeConfig,
        clock: ModelClock,
        dispatch: Dispatch,
        journal: Path | None = None,
        metrics: NullGlobalMetrics | None = None,
    ) -> None:
        """``journal``: the file the job table is persisted to (None: not persisted); if
        it exists the service recovers from it (see the module docstring); ``metrics``:
        its observability hooks (:mod:`runtime.metrics`)."""
        self.config = config
        self.metrics = metrics or NullGlobalMetrics()
        self.clock = clock
        self.dispatch = dispatch
        self.start_margin = StartMargin(config.start_margin_s)
        self.policy = config.get_policy()
        self.core = GlobalManagerCore(
            nodes,
            self.policy,
            config.sim_config().global_config(),
            random.Random(config.seed),
        )
        self.nodes = list(nodes)
        self.jobs: dict[str, JobInfo] = {}
        self.tokens: dict[str, list[dict[str, Any]]] = {}
        #: Nodes lost (node -> why): their gangs were ended; back when they answer again.
        self.lost: dict[str, str] = {}
        #: Model time each node's manager last answered with its loop running (not
        #: journaled: a recovered service gives every node a full timeout again).
        self.last_seen: dict[str, float] = {n.name: clock.now() for n in nodes}
        #: Last known work done (Mcycles) per (run id, subtask index), from the nodes.
        self.progress: dict[tuple[str, int], float] = {}
        #: Each node's last report and when it came (model s): what ``status`` shows of
        #: the nodes (not journaled: a recovered service has none until they report).
        self.node_reports: dict[str, tuple[NodeReport, float]] = {}
        #: The last report of each subtask of a job in the table, by (run id, index):
        #: what ``status`` shows of a subtask, also after it left its node.
        self.subtask_reports: dict[tuple[str, int], SubtaskReport] = {}
        self.counters: dict[str, int] = {
            "requeued": 0, "failed_node_loss": 0, "failed_subtask": 0, "dispatch_failed": 0,
            "zombies_cancelled": 0, "nodes_lost": 0,
        }
        self.journal = journal
        #: Subtask outcomes reconciliation applied (their notifications were lost).
        self.reconciled = 0
        self.recovered = False
        self.journal_error: str | None = None
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()
        #: Finished jobs stay in the job table this long (model s), then move to the
        #: journal's archive (``status --all``).
        self.keep_finished = config.keep_finished_s * config.time_scale
        #: Jobs changed since the last journal write (what :meth:`_persist` writes), in
        #: the order they were first changed (new jobs: in the order they were made).
        self._dirty: dict[str, None] = {}
        self._dirty_tokens: set[str] = set()
        #: The core's record of each placed job as last written (a new record, after a
        #: requeue, is written at the end, where the core keeps it), and the order of the
        #: placements since the last write (the core keeps its records in that order).
        self._core_written: dict[str, object] = {}
        self._placements: dict[str, int] = {}
        #: (model s it may leave the table, job id) of finished jobs, a heap.
        self._leaving: list[tuple[float, str]] = []
        #: Archived jobs when there is no journal (their status records, by id).
        self._archived: dict[str, dict[str, Any]] = {}
        self._journal: Journal | None = None
        #: Runs being dispatched (job id -> run): reserved and journaled, their calls to
        #: the controller and the nodes out (not journaled: a recovered service finds
        #: what a dispatch cut short left by reconciliation, as before).
        self._dispatching: dict[str, RunId] = {}
        if journal is not None:
            self._open_journal(journal)

    # -------------------------------------------------------------- persistence
    def _persist(self) -> None:
        """Write what changed since the last write (the core's counters, RNG, rates and
        holdings, lost nodes, counters, and every changed job and token) to the journal
        in one transaction (caller holds the lock). A failed write propagates: nothing is
        acted on that is not recorded (what it would have written is written by the next
        one)."""
        dirty, self._dirty = self._dirty, {}
        tokens, self._dirty_tokens = self._dirty_tokens, set()
        for job_id in dirty:
            info = self.jobs.get(job_id)
            if info is not None and info.state.final:
                heapq.heappush(self._leaving, (self._ended_at(info) + self.keep_finished,
                                               job_id))
        j = self._journal
        if j is None:
            return
        try:
            for key, value in self.core.snapshot_state().items():
                j.put("meta", key, value)
            j.put("meta", "version", JOURNAL_VERSION)
            j.put("meta", "lost", self.lost)
            j.put("meta", "counters", self.counters)
            placed = [job_id for job_id in dirty if self._write_job(j, job_id)]
            placed.sort(key=lambda job_id: self._placements.get(job_id, 0))
            for job_id in placed:
                j.delete("core_jobs", job_id)  # a new record goes to the end
                j.put("core_jobs", job_id, self.core.snapshot_job(job_id))
                self._core_written[job_id] = self.core.jobs[job_id]
            for token in tokens:
                if token in self.tokens:
                    j.put("tokens", token, self.tokens[token])
                else:
                    j.delete("tokens", token)
            j.commit()
            self._placements.clear()
        except BaseException:
            j.rollback()
            self._dirty.update(dirty)
            self._dirty_tokens |= tokens
            for job_id in dirty:  # where the core's record stands is not known now
                self._core_written.pop(job_id, None)
            raise

    def _mark(self, job_id: str) -> None:
        """Job ``job_id`` changed: the next :meth:`_persist` writes it."""
        self._dirty.setdefault(job_id, None)

    def _write_job(self, j: Journal, job_id: str) -> bool:
        """Stage job ``job_id``'s rows: the job table's record and the core's (placed,
        pending or closed), each deleted where the job has none. True if the core's
        record is new (placed since it was last written): the caller writes it, in the
        order of the placements."""
        info = self.jobs.get(job_id)
        if info is None:
            j.delete("jobs", job_id)
        else:
            j.put("jobs", job_id, info.to_record())
        rec = self.core.jobs.get(job_id)
        if rec is None:
            self._core_written.pop(job_id, None)
            j.delete("core_jobs", job_id)
        elif self._core_written.get(job_id) is rec:
            j.put("core_jobs", job_id, self.core.snapshot_job(job_id))
        pending = self.core.snapshot_pending(job_id)
        if pending is None:
            j.delete("pending", job_id)
        else:
            j.put("pending", job_id, pending)
        closed = self.core.closed.get(job_id)
        if closed is None:
            j.delete("closed", job_id)
        else:
            j.put("closed", job_id, closed.value)
        return rec is not None and self._core_written.get(job_id) is not rec

    def _write_all(self) -> None:
        """Write the whole table into the (empty) journal, in one transaction."""
        for job_id in self.jobs:
            self._mark(job_id)
        for job_id in self.core.jobs:
            self._mark(job_id)
        self._placements = {job_id: i for i, job_id in enumerate(self.core.jobs)}
        self._dirty_tokens.update(self.tokens)
        self._persist()

    def _open_journal(self, path: Path) -> None:
        """Open the journal, recovering from it if it holds a table. One that cannot be
        read (a disk error, a hand edit, another version) is moved aside as
        ``<name>.corrupt-<ms>`` (with its WAL files) and the service starts empty, saying
        so in ``journal_error`` (shown by status), rather than failing every restart. A
        whole-file JSON journal of the version before (a manager restarted on newer code)
        is read, kept as ``<name>.v2-<ms>``, and its table written into a new journal; a
        sqlite journal of version 3 (specs as job-file mappings) is read and rewritten in
        this version's records in one transaction."""
        journal: Journal | None = None
        imported = False
        try:
            if path.is_file() and path.read_bytes()[:1] == b"{":
                self._import_json_journal(path)
                imported = True
            journal = Journal(path, JOURNAL_TABLES, ("meta",), self.journal_sync,
                              JOURNAL_AUTOCHECKPOINT_PAGES)
            data = journal.load()
            if data["meta"]:
                # An older version's records are rewritten in this one's, in one write.
                imported = self._recover(data)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            if journal is not None:
                journal.close()
            stamp = int(time.time() * 1000)
            aside = path.with_name(f"{path.name}.corrupt-{stamp}")
            for f in journal_files(path):
                if f.exists():
                    f.replace(f.with_name(f"{aside.name}{f.name[len(path.name):]}"))
            self.journal_error = (
                f"{path}: unreadable journal ({type(exc).__name__}: {exc}); moved to {aside}, "
                "started with an empty job table"
            )
            log.error("%s", self.journal_error)
            self.core = GlobalManagerCore(
                self.nodes, self.policy, self.core.config, random.Random(self.config.seed)
            )
            self.jobs, self.tokens, self.lost = {}, {}, {}
            self._core_written, self._leaving = {}, []
            self.recovered = False
            journal = Journal(path, JOURNAL_TABLES, ("meta",), self.journal_sync,
                              JOURNAL_AUTOCHECKPOINT_PAGES)
            imported = False
        self._journal = journal
        if imported:
            self._write_all()

    def _import_json_journal(self, path: Path) -> None:
        """Recover from a whole-file JSON journal (version 2), then move it aside."""
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != 2:
            raise ValueError(f"version: unknown journal version {data.get('version')!r}")
        self.core.restore(data["core"], file_specs=True)
        self.jobs = {d["job_id"]: JobInfo.from_file_record(d) for d in data["jobs"]}
        self.tokens = {str(k): list(v) for k, v in data.get("tokens", {}).items()}
        self.lost = {str(k): str(v) for k, v in data.get("lost", {}).items()}
        self.counters.update({str(k): int(v) for k, v in data.get("counters", {}).items()})
        self._leaving = [(self._ended_at(i) + self.keep_finished, i.job_id)
                         for i in self.jobs.values() if i.state.final]
        heapq.heapify(self._leaving)
        path.replace(path.with_name(f"{path.name}.v2-{int(time.time() * 1000)}"))
        self.recovered = True
        log.warning("global manager recovered %d jobs from %s (a version 2 journal, kept "
                    "beside it)", len(self.jobs), path)

    def _recover(self, data: Mapping[str, Mapping[str, Any]]) -> bool:
        """Rebuild the core and the job table from the journal's tables. True if they
        are of the version before (:data:`FILE_SPEC_VERSIONS`): the caller rewrites
        them."""
        meta = data["meta"]
        version = meta.get("version")
        if version != JOURNAL_VERSION and version not in FILE_SPEC_VERSIONS:
            raise ValueError(f"version: unknown journal version {version!r}")
        old = version in FILE_SPEC_VERSIONS
        read_job = JobInfo.from_file_record if old else JobInfo.from_record
        snap = {k: meta[k] for k in CORE_STATE_KEYS}
        snap["closed"] = dict(data["closed"])
        snap["jobs"] = list(data["core_jobs"].values())
        snap["pending"] = sorted(data["pending"].values(), key=lambda r: int(r["seq"]))
        self.core.restore(snap, file_specs=old)
        self.jobs = {str(k): read_job(d) for k, d in data["jobs"].items()}
        self.tokens = {str(k): list(v) for k, v in data["tokens"].items()}
        self.lost = {str(k): str(v) for k, v in meta.get("lost", {}).items()}
        self.counters.update({str(k): int(v) for k, v in meta.get("counters", {}).items()})
        self._core_written = dict(self.core.jobs)
        self._leaving = [(self._ended_at(i) + self.keep_finished, i.job_id)
                         for i in self.jobs.values() if i.state.final]
        heapq.heapify(self._leaving)
        self.recovered = True
        log.warning(
            "global manager recovered %d jobs (%d running, %d pending) from %s",
            len(self.jobs),
            sum(1 for j in self.jobs.values() if j.state is JobPhase.RUNNING),
            sum(1 for j in self.jobs.values() if j.state is JobPhase.PENDING),
            self.journal,
        )
        if old:
            log.warning("%s: a version %s journal, rewritten as version %d", self.journal,
                        version, JOURNAL_VERSION)
        return old

    def checkpoint_journal(self) -> int:
        """Fold the journal's log into its file (the actor's monitor loop calls this
        every second), outside the lock: journal writes go on meanwhile, and no write
        pays for a checkpoint. Returns the log's length in pages (0: no journal)."""
        with self._checkpoint_lock:
            return 0 if self._journal is None else self._journal.checkpoint()

    def close(self) -> None:
        """Close the journal (the service is not used after this)."""
        with self._checkpoint_lock, self._lock:
            if self._journal is not None:
                self._journal.close()
                self._journal = None

    # ------------------------------------------------------------------ retention
    @staticmethod
    def _ended_at(info: JobInfo) -> float:
        """Model s a finished job ended (a job rejected at once: its submission)."""
        return info.finished_at if info.finished_at is not None else info.submitted_at

    def archive_finished(self) -> int:
        """Move the jobs that finished more than ``keep_finished`` ago out of the job
        table into the journal's archive (read by ``status --all`` and by id). Returns
        how many moved."""
        with self._lock:
            now = self.clock.now()
            moved: list[JobInfo] = []
            while self._leaving and self._leaving[0][0] <= now:
                _, job_id = heapq.heappop(self._leaving)
                info = self.jobs.get(job_id)
                if info is None or not info.state.final or \
                        self._ended_at(info) + self.keep_finished > now:
                    continue
                moved.append(info)
            if not moved:
                return 0
            j = self._journal
            if j is not None:  # recorded first: a failed write leaves the table as it was
                try:
                    for info in moved:
                        j.put("archive", info.job_id, info.to_dict())
                        for table in ("jobs", "core_jobs", "pending", "closed"):
                            j.delete(table, info.job_id)
                    j.commit()
                except BaseException:
                    j.rollback()
                    for info in moved:
                        heapq.heappush(self._leaving, (now, info.job_id))
                    raise
            for info in moved:
                if j is None:
                    self._archived[info.job_id] = info.to_dict()
                del self.jobs[info.job_id]
                self.core.forget(info.job_id)
                self._core_written.pop(info.job_id, None)
                self._dirty.pop(info.job_id, None)
                for n in range(1, info.dispatches + 1):
                    for s in info.subtasks:
                        key = (str(RunId(info.job_id, n)), s.index)
                        self.progress.pop(key, None)
                        self.subtask_reports.pop(key, None)
            log.info("%d finished jobs archived (kept %.6g model s)", len(moved),
                     self.keep_finished)
            return len(moved)

    def archived(self, job_id: str) -> dict[str, Any] | None:
        """The record of an archived job (None: not archived)."""
        with self._lock:
            if self._journal is None:
                rec = self._archived.get(job_id)
                return None if rec is None else dict(rec)
            value = self._journal.get("archive", job_id)
            return dict(value) if isinstance(value, dict) else None

    def archived_jobs(self) -> list[dict[str, Any]]:
        """Every archived job's record, oldest archived first."""
        with self._lock:
            if self._journal is None:
                return [dict(r) for r in self._archived.values()]
            return [dict(r) for r in self._journal.values("archive")]

    # ------------------------------------------------------------------ helpers
    def _info_of_run(self, run_id: str) -> JobInfo | None:
        """The running job whose current run is ``run_id`` (None: an old run, or a job
        that is not running)."""
        run = RunId.parse(run_id, self.jobs)
        info = self.jobs.get(run.job_id)
        if info is None or info.state is not JobPhase.RUNNING:
            return None
        return info if info.run == run else None

    def running_subtasks(self, node: str | None = None) -> dict[str, list[tuple[str, int]]]:
        """Per node (only ``node`` if given), the (run id, index) of every subtask of a
        running job that has not ended yet: what :meth:`reconcile` asks the nodes about."""
        with self._lock:
            out: dict[str, list[tuple[str, int]]] = {}
            for info in self.jobs.values():
                if info.state is not JobPhase.RUNNING:
                    continue
                for s in info.open_subtasks():
                    if node in (None, s.node):
                        out.setdefault(s.node, []).append((info.run_id, s.index))
            return out

    def _open_on(self, node: str) -> set[tuple[str, int]]:
        return set(self.running_subtasks(node).get(node, []))

    def controller_jobs(
        self, also: Iterable[str] = ()
    ) -> list[tuple[JobRegistration, dict[int, float]]]:
        """The running grid QoS jobs (strict, loose) as a restarted controller tracks
        them again: each run's registration (its run id as ``job_id``) and which of its
        subtasks ended when (index -> model s), as far as known; ``also``: runs the dead
        controller tracked, listed whatever their state now if they are still their
        job's current run (one that completed while the controller was down is then
        closed with its summary)."""
        grid = (QosClass.STRICT.value, QosClass.LOOSE.value)
        wanted = set(also)
        with self._lock:
            return [
                (
                    JobRegistration(
                        info.run_id, info.qos, float(info.start_at or 0),
                        tuple((s.index, s.node, s.expected_rate) for s in info.subtasks),
                        info.overall_deviation, info.asynchrony,
                    ),
                    {i: o.finish_time for i, o in info.outcomes.items()},
                )
                for info in self.jobs.values()
                if info.qos in grid and (info.state is JobPhase.RUNNING or (
                    info.state is not JobPhase.PENDING and info.subtasks
                    and info.run_id in wanted))
            ]

    def ended_runs(
        self, run_ids: Iterable[str], before: float
    ) -> dict[str, tuple[dict[int, float], str]]:
        """Of ``run_ids`` (runs the controller still tracks), those that ended here at or
        before model time ``before``: run id -> (subtask index -> model s it ended, why
        the run ended: "" completed, else its job's state, or "superseded" for a run its
        job replaced or is waiting to replace after a requeue). The
        controller closes them: a done report lost on the way (a kill mid-send) must not
        leave a run open in the phase log forever."""
        out: dict[str, tuple[dict[int, float], str]] = {}
        with self._lock:
            for run_id in run_ids:
                job_id = run_id if run_id in self.jobs else run_id.rsplit(".", 1)[0]
                info = self.jobs.get(job_id)
                if info is None:
                    continue
                if info.run_id != run_id or info.state is JobPhase.PENDING:
                    out[run_id] = ({}, "superseded")  # requeued: a later run, or waiting
                elif info.state is not JobPhase.RUNNING and info.finished_at is not None \
                        and info.finished_at <= before:
                    ends = {i: o.finish_time for i, o in info.outcomes.items()}
                    why = "" if info.state is JobPhase.COMPLETED else info.state.value
                    out[run_id] = (ends, why)
        return out

    def apply_report(self, report: NodeReport) -> list[str]:
        """What the monitor does with a node's answer (:class:`NodeReport`): the node is
        alive if its loop runs, its measured QoS capacity is observed, its subtasks are
        reconciled (:meth:`reconcile`). Returns the runs to stop there
        (:meth:`runs_to_stop`): the caller cancels them on the node. The report is kept
        for ``status`` (:meth:`heard`)."""
        self.keep_report(report)
        self.node_answered(report.node, report.loop_running)
        self.observe_qos_capacity(report.node, report.qos_capacity)
        self.reconciled += self.reconcile(report.node, report.subtasks)
        return self.runs_to_stop(report.node, report.subtasks)

    def keep_report(self, report: NodeReport) -> None:
        """Keep ``report`` as its node's last, and its subtasks' reports (those of runs
        of jobs in the table) as theirs: what ``status`` is assembled from."""
        with self._lock:
            self.node_reports[report.node] = (report, self.clock.now())
            for r in report.subtasks:
                if RunId.parse(r.run_id, self.jobs).job_id in self.jobs:
                    self.subtask_reports[r.key] = r

    def heard(self) -> tuple[dict[str, HeardReport], dict[tuple[str, int], SubtaskReport]]:
        """What ``status`` shows of the nodes and their subtasks, without asking them:
        each node's last report with its age (nodes not heard from since this service
        started are absent), and the last report of each subtask (:meth:`keep_report`)."""
        with self._lock:
            now = self.clock.now()
            scale = self.clock.base.scale  # model s per real s
            nodes = {
                name: HeardReport(rep, max(0.0, (now - at) / scale))
                for name, (rep, at) in self.node_reports.items()
            }
            return nodes, dict(self.subtask_reports)

    def reconcile(self, node: str, seen: Sequence[SubtaskReport]) -> int:
        """Apply what node ``node``'s local manager says about its subtasks (its
        :class:`NodeReport`'s): work done is kept (a requeue starts from it); an ended
        subtask the job table still has running is taken as its lost ``subtask_ended``
        notification; a running job's subtask the node does not know, well after its
        start, ends that run. Returns how many outcomes were applied."""
        applied = 0
        todo = self._open_on(node)
        if self._missing(node, todo - {r.key for r in seen}):
            todo = self._open_on(node)
        for r in seen:
            if r.done_work is not None:
                self.progress[r.key] = r.done_work
            if r.key in todo and r.ended:
                self.subtask_ended(SubtaskOutcome(
                    r.run_id, r.index, node, r.state,
                    r.finish_time if r.finish_time is not None else self.clock.now(),
                    r.exit_code, r.reason,
                ))
                applied += 1
        return applied

    def runs_to_stop(self, node: str, seen: Sequence[SubtaskReport]) -> list[str]:
        """Run ids still on ``node`` (its report's subtasks) that are not a current run
        there: a run stopped while the node could not be reached (lost, stale, a failed
        dispatch). The caller cancels them there."""
        with self._lock:
            todo = self._open_on(node)
            zombies = sorted({
                r.run_id for r in seen
                if r.live and r.key not in todo and not self._ended_in_current_run(*r.key)
            })
            self.counters["zombies_cancelled"] += len(zombies)
            return zombies

    def _ended_in_current_run(self, run_id: str, index: int) -> bool:
        """Whether subtask ``index`` of run ``run_id`` is recorded as ended and the run
        is its job's current one: a node view taken just before that subtask finished
        still shows it running; it is no zombie (caller holds the lock)."""
        run = RunId.parse(run_id, self.jobs)
        info = self.jobs.get(run.job_id)
        return info is not None and info.run == run \
            and index in info.outcomes

    def _missing(self, node: str, keys: set[tuple[str, int]]) -> bool:
        """Subtasks of running jobs that ``node``'s manager does not know, well after
        their start (a dispatch cut short by a crash of the global manager, a manager
        killed before its checkpoint named them; not a run still being dispatched, whose
        calls decide): their runs are ended whole and
        requeued whatever ``on_node_loss`` says (up to ``max_attempts``). The subtask did
        no work that can be kept: it never started there, or its process was reaped as
        an orphan by the restarted manager, so running the job again loses nothing a
        failure would keep; the node itself is not lost."""
        if not keys:
            return False
        stops = []
        with self._lock:
            late = self.clock.now() - self.config.stall_cycles * self.config.cycle
            for run_id in sorted({k[0] for k in keys}):
                info = self._info_of_run(run_id)
                if info is None or info.start_at is None or info.start_at > late \
                        or self._dispatching.get(info.job_id) == info.run:
                    continue  # not late yet, or its place call is still out
                why = f"its subtask on node {node} is not there (lost by its local manager)"
                stops.append(self._end_run(info, why, EndPolicy.REQUEUE, loss=True))
            if stops:
                self._persist()
        self._send_stops(stops)
        return bool(stops)

    def node_budgets(self) -> dict[str, float]:
        return self.core.node_budgets()

    def observe_qos_capacity(self, node: str, rate: Any) -> bool:
        """``node``'s local manager measured what its QoS queue can get now (Mcycles/s,
        its status ``qos_capacity``); admission by measured capacity budgets on it. A
        missing or malformed value is ignored. True if the node's budget moved."""
        if not self.core.measures_capacity or node not in self.core.nodes:
            return False
        try:
            value = float(rate)
        except (TypeError, ValueError):
            return False
        with self._lock:
            return self.core.observe_qos_capacity(node, value)

    # ------------------------------------------------------------- node health
    def node_answered(self, node: str, loop_running: bool) -> None:
        """``node``'s local manager answered a status call (its loop running or not).
        A node that was lost or stale is put back into placement."""
        with self._lock:
            if not loop_running:
                return
            self.last_seen[node] = self.clock.now()
            back = self.core.set_node_down(node, False)
            if node in self.lost:
                log.warning("node %s answers again (was lost: %s)", node, self.lost.pop(node))
                back = True
            if back:
                self._persist()

    def check_nodes(
        self, last_errors: Mapping[str, str] | None = None, restarting: Container[str] = ()
    ) -> list[str]:
        """Mark nodes whose manager has been silent: after ``stall_cycles`` cycles it is
        stale (placement skips it); after ``node_timeout`` cycles it is lost, and every
        running job with a subtask there is ended whole by its ``on_node_loss`` policy.
        ``last_errors``: node -> what the last status call gave instead of an answer,
        for the reason. ``restarting``: nodes whose manager Ray is restarting (not
        silent by itself: it re-attaches its subtasks when it is back); such a node is
        lost only after :data:`MANAGER_RESTART_WAIT_S` real s of silence, if that is
        longer. Returns the nodes lost by this call."""
        errors = dict(last_errors or {})
        now = self.clock.now()
        cycle = self.config.cycle
        newly: list[str] = []
        with self._lock:
            for n in self.nodes:
                silent = (now - self.last_seen.get(n.name, now)) / cycle
                if n.name in self.lost:
                    continue
                waited_s = silent * self.config.real_cycle
                if silent > self.config.node_timeout and (
                    n.name not in restarting or waited_s > MANAGER_RESTART_WAIT_S
                ):
                    why = f"no answer from its local manager for {silent:.0f} cycles"
                    if n.name in restarting:
                        why += f" ({waited_s:.0f} s), Ray still restarting it"
                    elif n.name in errors:
                        why += f", last: {errors[n.name]}"
                    self.lost[n.name] = why
                    self.counters["nodes_lost"] += 1
                    self.core.set_node_down(n.name)
                    newly.append(n.name)
                    log.error("node %s lost: %s", n.name, why)
                elif silent > self.config.stall_cycles:
                    if self.core.set_node_down(n.name):
                        log.warning("node %s stale: silent for %.0f cycles", n.name, silent)
                        self._persist()
            if not newly:
                return []
            stops: list[tuple[str, list[str], str]] = []
            for info in list(self.jobs.values()):
                if info.state is not JobPhase.RUNNING:
                    continue
                hit = [s for s in info.open_subtasks() if s.node in newly]
                if not hit:
                    continue
                node = hit[0].node
                why = f"node {node} lost ({self.lost[node]})"
                stops.append(self._end_run(info, why, info.spec.node_loss_policy(), loss=True))
            self._persist()
        self._send_stops(stops)
        return newly

    # --------------------------------------------------------------- submission
    def start_boundary(self, calls: int = 1) -> float:
        """The boundary a submission made now starts at (model s), for a dispatch of
        ``calls`` sequential calls (:class:`runtime.start_margin.StartMargin`)."""
        margin = self.start_margin.seconds(calls) * self.config.time_scale
        return boundary_at_or_after(self.clock.now() + margin, self.config.cycle)

    def submit(self, specs: list[JobSpec], token: str | None = None) -> list[dict[str, Any]]:
        """Admit ``specs`` in order, then run a placement cycle; one answer per job
        (``job_id``, ``admitted``, ``pending``, ``reason``, ``nodes``, ``start_at``).
        ``token``: the client's id of this submission; a retry with the same token gets
        the first answers."""
        with self._lock:
            if token is not None and token in self.tokens:
                return [dict(a) for a in self.tokens[token]]
            now = self.clock.now()
            start = self.start_boundary(dispatch_calls([len(s.subtasks) for s in specs]))
            ids: list[str] = []
            placed: list[tuple[JobInfo, tuple[Subtask, ...]]] = []
            for spec in specs:
                adm = self.core.submit(spec, start)
                if adm.pending:
                    state = JobPhase.PENDING
                elif adm.admitted:
                    state = JobPhase.RUNNING
                else:
                    state = JobPhase.REJECTED
                info = JobInfo(
                    job_id=adm.job_id,
                    spec=replace(spec, job_id=adm.job_id),
                    state=state,
                    reason=adm.reason,
                    submitted_at=now,
                    queued_at=now if adm.pending else None,
                )
                self.jobs[adm.job_id] = info
                self._mark(adm.job_id)
                ids.append(adm.job_id)
                if adm.admitted:
                    self._placed(info, adm.subtasks, start)
                    placed.append((info, adm.subtasks))
            placed += self._cycle(start)[0]
            out = [self._answer(self.jobs[j]) for j in ids]
            if token is not None:
                self.tokens[token] = out
                self._dirty_tokens.add(token)
                while len(self.tokens) > TOKENS_KEPT:
                    oldest = next(iter(self.tokens))
                    del self.tokens[oldest]
                    self._dirty_tokens.add(oldest)
            self._persist()  # write-ahead: recorded before it is dispatched
            reservations = [self._reserve(info, subtasks, start) for info, subtasks in placed]
        self._dispatch_all(reservations)  # outside the lock
        with self._lock:
            after = [self._answer(self.jobs[j]) for j in ids]
            if after != out:  # a dispatch failed: the retry token must answer as now
                out = after
                if token is not None and token in self.tokens:
                    self.tokens[token] = out
                    self._dirty_tokens.add(token)
                self._persist()
        return [dict(a) for a in out]

    def _answer(self, info: JobInfo) -> dict[str, Any]:
        """A submission's answer (:func:`runtime.status.submit_answer`) as the JSON the
        token table keeps."""
        return to_json(submit_answer(info, self.core))

    def place_pending(self) -> int:
        """One placement cycle of the pending queue (the global manager runs it every
        cycle): expire what waited past its ``max_wait``, place what fits, dispatch it.
        Returns how many jobs were placed."""
        with self._lock:
            # Usually one job leaves the queue per cycle: the largest one's calls.
            gangs = [len(r.spec.subtasks) for r in self.core.pending.values()]
            start = self.start_boundary(dispatch_calls([max(gangs, default=1)]))
            placed, expired = self._cycle(start)
            if not placed and not expired:
                return 0
            self._persist()  # write-ahead; a dispatch that fails records its own outcome
            reservations = [self._reserve(info, subtasks, start) for info, subtasks in placed]
        self._dispatch_all(reservations)  # outside the lock
        return len(reservations)

    def _cycle(self, start: float) -> tuple[list[tuple[JobInfo, tuple[Subtask, ...]]], bool]:
        """The core's placement cycle at ``start``, applied to the job table (caller holds
        the lock, persists and dispatches): the runs placed, and whether any job
        expired."""
        ran, began = self.core.cycles_run, time.perf_counter()
        cyc = self.core.place_pending(start)
        if self.core.cycles_run != ran:
            self.metrics.placement_cycle(time.perf_counter() - began)
        for adm in cyc.expired:
            info = self.jobs[adm.job_id]
            info.state = JobPhase.EXPIRED
            self._mark(info.job_id)
            info.reason = adm.reason
            info.finished_at = self.clock.now()
        out = []
        for adm in cyc.placed:
            info = self.jobs[adm.job_id]
            self._placed(info, adm.subtasks, start)
            out.append((info, adm.subtasks))
        return out, bool(cyc.expired)

    def _placed(self, info: JobInfo, subtasks: tuple[Subtask, ...], start: float) -> None:
        self._mark(info.job_id)
        self._placements[info.job_id] = len(self._placements) + 1
        info.state = JobPhase.RUNNING
        info.reason = ""
        info.start_at = start
        info.outcomes = {}
        info.dispatches += 1
        info.subtasks = tuple(PlacedSubtask.of(s) for s in subtasks)

    def _reserve(self, info: JobInfo, subtasks: tuple[Subtask, ...], start: float) -> Reservation:
        """What dispatching the run just placed (and journaled) for ``info`` sends; the
        job is marked as being dispatched (caller holds the lock). The core has already
        committed the run's budgets: :meth:`_settle` keeps or returns them."""
        run = info.run
        subs = tuple(replace(s, job_id=str(run)) for s in subtasks)
        qos = info.qos
        registration = JobRegistration(
            str(run), qos, start, tuple((s.index, s.node, s.expected_rate) for s in subs),
            info.overall_deviation, info.asynchrony, initial_pace_of(subs),
        ) if qos in (QosClass.STRICT, QosClass.LOOSE) else None
        self._dispatching[info.job_id] = run
        return Reservation(run, subs, start, registration)

    def _dispatch_all(self, reservations: list[Reservation]) -> None:
        """Hand reserved runs to the other actors, one after the other (caller does NOT
        hold the lock: a node that hangs holds only this caller, for at most its Ray
        call's timeout), each committed or rolled back under the lock when its calls
        have answered (:meth:`_settle`)."""
        for i, res in enumerate(reservations):
            try:
                reached, failures = self._send(res)
                with self._lock:
                    stops = self._settle(res, reached, failures)
            except BaseException:
                # Not settled (a journal write failed, ...): what is left is no longer
                # being dispatched; the reconciliation ends what never reached its nodes.
                with self._lock:
                    for left in reservations[i:]:
                        if self._dispatching.get(left.run.job_id) == left.run:
                            del self._dispatching[left.run.job_id]
                raise
            self._send_stops(stops)

    def _send(self, res: Reservation) -> tuple[list[str], list[DispatchFailed]]:
        """Make a reserved run's calls (outside the lock): the controller's registration
        first (a grid QoS run; nothing else is sent if it fails), then one ``place`` per
        node, the nodes at once (the Dispatch calls block: one worker thread per node
        beyond the first). Returns the nodes reached and the failures (the controller's,
        or one per node that did not answer, in the order of the nodes)."""

        def took(began: float) -> None:
            # Real seconds on the service's clock (a manual clock in tests: 0).
            self.start_margin.observe_call((self.clock.now() - began) / self.config.time_scale)

        def register(reg: JobRegistration) -> None:
            began = self.clock.now()
            try:
                self.dispatch.register(reg)
            except Exception as exc:  # noqa: BLE001 - any failure aborts the dispatch
                raise DispatchFailed("the controller", None, exc) from exc
            took(began)

        groups: dict[str, list[Subtask]] = {}

        def collect(node: str, group: list[Subtask]) -> None:
            groups[node] = group

        try:
            start_run(res.registration, res.subtasks, register, collect)
        except DispatchFailed as failed:
            return [], [failed]

        def place(node: str) -> DispatchFailed | None:
            began = self.clock.now()
            try:
                self.dispatch.place(node, groups[node], res.start)
            except Exception as exc:  # noqa: BLE001
                return DispatchFailed(f"the local manager of node {node}", node, exc)
            took(began)
            return None

        nodes = list(groups)
        if len(nodes) <= 1:
            results = [place(n) for n in nodes]
        else:
            with ThreadPoolExecutor(max_workers=min(len(nodes), DISPATCH_WORKERS),
                                    thread_name_prefix="coalloc-dispatch") as pool:
                results = list(pool.map(place, nodes))
        reached = [n for n, r in zip(nodes, results) if r is None]
        return reached, [r for r in results if r is not None]

    def _settle(
        self, res: Reservation, reached: list[str], failures: list[DispatchFailed]
    ) -> list[tuple[str, list[str], str]]:
        """Commit or roll back a dispatched run (caller holds the lock; this persists
        what it changes). All reached: the run stays as recorded. A failure: what was
        placed is cancelled, the budgets return, a node that did not answer leaves
        placement, and the job goes back to the queue (``queue: wait``, or a requeue)
        or is rejected naming that actor. A run that stopped being its job's current
        one while its calls were out (cancelled, ended by a node loss) is cancelled on
        the nodes it reached (the stop sent then may have arrived before it). Returns
        the stops to send, after the lock is released."""
        job_id = res.run.job_id
        if self._dispatching.get(job_id) == res.run:
            del self._dispatching[job_id]
        info = self.jobs.get(job_id)
        current = info is not None and info.state is JobPhase.RUNNING and info.run == res.run
        run_id = str(res.run)
        if info is None or not current:
            if not reached and res.registration is None:
                return []
            log.warning("%s: run %s ended while it was being dispatched; stopping it on %s",
                        job_id, run_id, ", ".join(reached) or "the controller")
            return [(run_id, reached, "ended while it was being dispatched")]
        if not failures:
            return []
        failed = failures[0]
        self.counters["dispatch_failed"] += 1
        self._mark(job_id)
        for f in failures:
            if f.node is not None:
                self.core.set_node_down(f.node)
        spec = info.spec
        why = f"not started: {failed}; nothing of it stays placed"
        log.warning("%s: %s", job_id, why)
        if self.core.config.queue_mode is QueueMode.WAIT or info.attempt > 1 or info.history:
            self.core.requeue(job_id, spec, res.start)
            info.state = JobPhase.PENDING
            info.queued_at = self.clock.now()
            info.reason = why + "; back in the queue"
        else:
            self.core.cancel(job_id)
            info.state = JobPhase.REJECTED
            info.reason = why
        info.subtasks = ()
        self._persist()
        return [(run_id, reached, f"dispatch failed: {failed}")]

    # ---------------------------------------------------------------- lifecycle
    def subtask_ended(self, outcome: SubtaskOutcome) -> None:
        """A local manager says a subtask left its node (finished or failed). A failed
        subtask ends its whole job by the job's ``on_failure`` policy."""
        stops: list[tuple[str, list[str], str]] = []
        with self._lock:
            info = self._info_of_run(outcome.job_id)
            if info is None or outcome.index in info.outcomes:
                return
            self._mark(info.job_id)
            info.outcomes[outcome.index] = SubtaskEnd(
                outcome.state, outcome.finish_time, outcome.exit_code, outcome.reason
            )
            if outcome.state is not SubtaskPhase.FINISHED:
                why = f"subtask {outcome.index} {outcome.state.value} on {outcome.node}"
                if outcome.reason:
                    why += f": {outcome.reason}"
                stops.append(self._end_run(info, why, info.spec.on_failure, loss=False))
            elif self.core.subtask_finished(info.job_id, outcome.index):
                info.state = JobPhase.COMPLETED
                info.finished_at = max(o.finish_time for o in info.outcomes.values())
            self._persist()
        self._send_stops(stops)

    def _end_run(
        self, info: JobInfo, why: str, policy: EndPolicy, loss: bool
    ) -> tuple[str, list[str], str]:
        """End the running job's current run whole (caller holds the lock and persists):
        every member stops, budgets return, then a requeue (remaining work, on a new
        placement) or a failure. Returns (run id, nodes to stop, reason) for
        :meth:`_send_stops`, done after the lock is released."""
        self._mark(info.job_id)
        spec = info.spec
        run_id = info.run_id
        now = self.clock.now()
        requeue = policy is EndPolicy.REQUEUE and info.attempt < spec.max_attempts
        if requeue:
            running = self.core.requeue(info.job_id, self._remaining(info, spec), now)
            info.attempt += 1
            info.history.append(f"run {run_id}: {why}; requeued")
            info.state = JobPhase.PENDING
            info.queued_at = now
            info.reason = f"requeued after {why}"
            self.counters["requeued"] += 1
            stop_reason = f"requeued: {why}"
        else:
            running = self.core.cancel(info.job_id)
            info.history.append(f"run {run_id}: {why}")
            info.state = JobPhase.FAILED
            info.finished_at = now
            info.reason = why
            if policy is EndPolicy.REQUEUE:
                info.reason += f" (requeued {info.attempt - 1} times: max_attempts reached)"
            self.counters["failed_node_loss" if loss else "failed_subtask"] += 1
            stop_reason = f"failed: {why}"
        nodes = sorted({s.node for s in running} | {s.node for s in info.subtasks})
        if requeue:  # pending again: no nodes until it is placed anew (history says where)
            info.subtasks = ()
        log.warning("%s: %s", info.job_id, info.reason)
        return run_id, nodes, stop_reason

    def _remaining(self, info: JobInfo, spec: JobSpec) -> JobSpec:
        """The job to requeue: synthetic work from the gang's last common progress (the
        least fraction done of any member, as last reported), commands from the start."""
        frac = 1.0
        run_id = info.run_id
        for s in info.subtasks:
            o = info.outcomes.get(s.index)
            if o is not None and o.state is SubtaskPhase.FINISHED:
                continue
            done = self.progress.get((run_id, s.index), 0.0)
            frac = min(frac, done / s.work if s.work > 0 else 0.0)
        if any(s.command for s in spec.subtasks) or not info.subtasks:
            frac = 0.0
        frac = min(max(frac, 0.0), 0.99)
        info.work_left *= 1.0 - frac
        left = info.work_left
        if spec.subtasks:
            subs = tuple(replace(s, work=s.work * left) for s in spec.subtasks)
            return replace(spec, subtasks=subs)
        return replace(spec, total_work=(spec.total_work or 0.0) * left)

    def _send_stops(self, stops: list[tuple[str, list[str], str]]) -> None:
        """Stop ended runs on their nodes and the controller (outside the lock: a node
        that does not answer must not hold the job table)."""
        for run_id, nodes, reason in stops:
            unreached = self.dispatch.cancel(run_id, nodes, reason)
            if unreached:
                log.warning("%s: could not reach %s to stop it (stopped when they answer)",
                            run_id, ", ".join(unreached))

    def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel a job; None for an unknown id. A finished job is left as it is."""
        if job_id not in self.jobs:
            return None
        self.cancel_many([job_id])
        return self.job(job_id)

    def cancel_many(
        self, job_ids: Iterable[str] | None, user: str | None = None,
        state: str | None = None,
    ) -> list[dict[str, Any]]:
        """Cancel jobs as ``scancel`` does: those named by ``job_ids`` (None: every job not
        over yet) that belong to ``user`` and are in ``state`` (``pending`` or
        ``running``; None: any). One result per job named or selected, in order:
        ``job_id``, ``name``, ``user``, ``was`` (its state before), ``state`` (after)
        and ``result``: ``cancelled``, ``already <state>`` (a job that was over:
        left as it is), ``skipped: ...`` (named, but another user's or in another
        state) or ``unknown job id``. One journal write for the lot; running jobs are
        stopped on their nodes afterwards, outside the lock."""
        out: list[dict[str, Any]] = []
        stops: list[tuple[str, list[str], str]] = []
        with self._lock:
            if job_ids is None:
                ids = [j for j, i in self.jobs.items() if not i.state.final]
            else:
                ids = list(dict.fromkeys(job_ids))
            now = self.clock.now()
            changed = False
            for job_id in ids:
                info = self.jobs.get(job_id)
                if info is None:
                    old = self.archived(job_id)
                    if old is None:
                        out.append({"job_id": job_id, "result": "unknown job id"})
                    else:
                        out.append({"job_id": job_id, "name": old["name"], "user": old["user"],
                                    "was": old["state"], "state": old["state"],
                                    "result": f"already {old['state']}"})
                    continue
                was = info.state.value
                skip = []
                if user is not None and info.user != user:
                    skip.append(f"user {info.user}")
                if state is not None and was != state:
                    skip.append(f"{was}, not {state}")
                if skip and job_ids is None:
                    continue
                rec = {"job_id": job_id, "name": info.name, "user": info.user, "was": was}
                if skip:
                    out.append(dict(rec, state=was, result="skipped: " + "; ".join(skip)))
                    continue
                if info.state.final:
                    out.append(dict(rec, state=was, result=f"already {was}"))
                    continue
                running = self.core.cancel(job_id)
                info.state = JobPhase.CANCELLED
                self._mark(job_id)
                info.finished_at = now
                changed = True
                if was == JobPhase.RUNNING.value:
                    stops.append((info.run_id,
                                  sorted({s.node for s in running}), "cancelled"))
                out.append(dict(rec, state=info.state.value, result="cancelled"))
            if changed:
                self._persist()
        self._send_stops(stops)
        return out

    # ------------------------------------------------------------------ views
    # The documents are built by runtime.status; these take the lock and hand it the
    # table's records.
    def start_estimates(self) -> Mapping[str, float | None]:
        """Each pending job's estimated start (model s; None: cannot be estimated),
        from the next start boundary (:meth:`GlobalManagerCore.start_estimates`: walked
        again only when the queue, the jobs or the nodes changed)."""
        with self._lock:
            return self.core.start_estimates(self.start_boundary())

    def _record(self, info: JobInfo, starts: Mapping[str, float | None] | None = None
                ) -> JobRecord:
        """``info`` as ``GET /jobs/ID`` shows it (caller holds the lock); ``starts``:
        the start estimates, worked out here for a pending job if not given."""
        if starts is None and info.state is JobPhase.PENDING:
            starts = self.start_estimates()
        return job_record(info, self.core, self.clock.now(), getattr(self.clock, "base", None),
                          self._dispatching.get(info.job_id) == info.run, starts)

    def job(self, job_id: str) -> JobRecord | None:
        """Job ``job_id``'s record, from the job table or the archive (None: unknown)."""
        with self._lock:
            info = self.jobs.get(job_id)
            if info is not None:
                return self._record(info)
            old = self.archived(job_id)
            return None if old is None else JobRecord.model_validate(old)

    def job_states(self, job_ids: Iterable[str] | None = None) -> dict[str, str]:
        """Each job's state (None: every job in the job table; named jobs are looked up
        in the archive too)."""
        with self._lock:
            if job_ids is None:
                return {j: i.state.value for j, i in self.jobs.items()}
            out = {}
            for j in job_ids:
                info = self.jobs.get(j)
                if info is not None:
                    out[j] = info.state.value
                    continue
                old = self.archived(j)
                if old is not None:
                    out[j] = str(old["state"])
            return out

    def queue(self) -> list[QueueRow]:
        """Pending and running jobs, pending first in the order they would be placed
        (priority, then wait), each with user, priority, wait (model s), reason and, for
        a pending job, its estimated start (model s and wall-clock ISO 8601 UTC)."""
        with self._lock:
            now = self.clock.now()
            starts = self.start_estimates()
            return [queue_row(info, self._record(info, starts), now)
                    for info in queue_order(self.jobs.values())]

    def describe(self, job_id: str | None = None, archived: bool = False) -> JobTable:
        """Jobs and nodes (budgets, committed rates, health) without the other actors'
        views. ``job_id``: only that job (from the archive if it is there); ``archived``:
        the archived jobs too, after those of the job table."""
        with self._lock:
            now = self.clock.now()
            nodes = [
                node_record(n, self.core, self.lost,
                            (now - self.last_seen.get(n.name, now)) / self.config.cycle)
                for n in self.nodes
            ]
            if job_id is None:
                starts = self.start_estimates()
                jobs = [self._record(info, starts) for info in self.jobs.values()]
                if archived:
                    jobs += [JobRecord.model_validate(r) for r in self.archived_jobs()]
            else:
                one = self.job(job_id)
                jobs = [] if one is None else [one]
            return JobTable(
                policy=self.policy.name,
                queue=self.core.config.queue_mode.value,
                model_time=self.clock.now(),
                nodes=nodes,
                jobs=jobs,
                global_counters=dict(self.counters),
                journal_error=self.journal_error,
            )

    def gauges(self) -> QueueGauges:
        """Queue length, running jobs, the oldest pending job's wait (model s) and each
        node's health, for the metrics (cheap: no pending reasons are worked out)."""
        with self._lock:
            return queue_gauges(self.jobs.values(), self.nodes, self.lost, self.core.down,
                                self.clock.now())
