"""The live runtime's job records: a job in the global manager's job table
(:class:`JobInfo`), its runs (:class:`RunId`), its placed subtasks and how they ended, and
a run placed but not yet handed to the other actors (:class:`PendingDispatch`), and a
submission's answers kept under its idempotency token (:class:`Answered`).

Times in model s, work in Mcycles, rates in Mcycles/s. No Ray and no I/O here: the
records are JSON-able through :mod:`workloads.records` (the journal's rows).
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from workloads.messages import JobRegistration, SubtaskPhase
from workloads.model import JobPhase, JobSpec, QosClass, Subtask
from workloads.records import from_record, to_record


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
class PendingDispatch:
    """A run placed and journaled under the global manager's lock, to be handed to the
    other actors outside it: ``subtasks`` carry the run id; ``start``: model s the run
    starts; ``registration``: the controller's (grid QoS runs only)."""

    run: RunId
    subtasks: tuple[Subtask, ...]
    start: float
    registration: JobRegistration | None


#: Real seconds a submission's idempotency token (with its answers) is kept after it was
#: answered: a client that got no answer may retry with the same token for this long and
#: get the first answers, whatever the timing (``coalloc submit`` keeps an unanswered
#: submission's token for as long, then asks the user to check: coalloc/submissions.py).
TOKEN_KEEP_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Answered:
    """The answers a submission got (one JSON answer per job), kept under its client's
    idempotency token so that a retry gets them again; ``answered_at``: model s they were
    first given (the token is kept for a set time after it)."""

    answered_at: float
    answers: tuple[dict[str, Any], ...]

    def to_record(self) -> dict[str, Any]:
        return {"answered_at": self.answered_at, "answers": list(self.answers)}

    @staticmethod
    def from_record(data: Mapping[str, Any]) -> Answered:
        """The journal's row (:meth:`to_record`)."""
        return Answered(float(data["answered_at"]), tuple(data["answers"]))


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
    #: Model s before which its next run must not start (a requeue after a node loss:
    #: the lost node's lease may not have lapsed; ``runtime.lease``). None: no bound.
    not_before: float | None = None

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
    def waiting_since(self) -> float:
        """Model s its wait began: when it last (re)entered the pending queue, else its
        submission."""
        return self.queued_at if self.queued_at is not None else self.submitted_at

    @property
    def ended_at(self) -> float:
        """Model s a finished job ended (a job rejected at once: its submission)."""
        return self.finished_at if self.finished_at is not None else self.submitted_at

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
            "private": {
                "commands": [None if t.command is None else list(t.command)
                             for t in self.spec.subtasks],
                "env": dict(self.spec.env),
                "subtask_env": [dict(t.env) for t in self.spec.subtasks],
            },
        }

    def to_record(self) -> dict[str, Any]:
        """Every field as JSON-able data, for the journal (:mod:`workloads.records`;
        :meth:`from_record` inverts)."""
        record: dict[str, Any] = to_record(self)
        return record

    @staticmethod
    def from_record(d: Mapping[str, Any]) -> JobInfo:
        return from_record(JobInfo, d)
