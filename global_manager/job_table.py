"""The global manager's job table: the jobs placed (their subtasks and which still
run), the jobs closed without running to completion, and what they hold: per node the
strict expected rate committed and the grid rate loaded, per user the strict rate held
(all Mcycles/s). Plain bookkeeping, no placement and no clock."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from global_manager.cycle import RunningSubtask
from workloads.model import JobPhase, JobSpec, QosClass, Subtask


@dataclass(slots=True)
class JobRecord:
    """A placed job: ``arrival`` is when it was placed (s); ``running``: the indices of
    its subtasks still running."""

    spec: JobSpec
    job_id: str
    arrival: float
    subtasks: tuple[Subtask, ...]
    running: set[int]
    cancelled: bool = False


class JobTable:
    """Jobs by id, closed jobs, and the rates they hold per node and per user."""

    def __init__(self, nodes: Iterable[str]) -> None:
        names = list(nodes)
        self.jobs: dict[str, JobRecord] = {}
        #: Jobs that ended without running to completion: rejected, expired, or
        #: cancelled while pending.
        self.closed: dict[str, JobPhase] = {}
        self.committed: dict[str, float] = dict.fromkeys(names, 0.0)
        self.load: dict[str, float] = dict.fromkeys(names, 0.0)
        #: Strict expected rate each user's running jobs hold (Mcycles/s).
        self.user_held: dict[str, float] = {}
        self.next_id = 0

    def new_job_id(self) -> str:
        self.next_id += 1
        return f"j{self.next_id:05d}"

    def add(
        self, job_id: str, spec: JobSpec, now: float, subtasks: tuple[Subtask, ...]
    ) -> JobRecord:
        """Record ``spec`` placed at ``now`` (s) as ``subtasks``, holding their rates."""
        strict = spec.qos is QosClass.STRICT
        for s in subtasks:
            if strict:
                self.committed[s.node] += s.expected_rate
                self.user_held[spec.user] = self.user_held.get(spec.user, 0.0) + s.expected_rate
            self.load[s.node] += s.expected_rate
        rec = JobRecord(spec, job_id, now, subtasks, {s.index for s in subtasks})
        self.jobs[job_id] = rec
        return rec

    def release(self, s: Subtask, spec: JobSpec) -> None:
        """Give back what the subtask ``s`` of ``spec`` held."""
        if spec.qos is QosClass.STRICT:
            self.committed[s.node] = max(0.0, self.committed[s.node] - s.expected_rate)
            held = self.user_held.get(spec.user, 0.0) - s.expected_rate
            self.user_held[spec.user] = held if held > 1e-9 else 0.0
        self.load[s.node] = max(0.0, self.load[s.node] - s.expected_rate)

    def state(self, job_id: str) -> JobPhase:
        """The phase of a placed or closed job (KeyError if neither)."""
        if job_id in self.closed:
            return self.closed[job_id]
        job = self.jobs.get(job_id)
        if job is None:
            raise KeyError(job_id)
        if job.cancelled:
            return JobPhase.CANCELLED
        return JobPhase.RUNNING if job.running else JobPhase.COMPLETED

    def running_strict(self) -> tuple[RunningSubtask, ...]:
        """The running strict subtasks with their expected ends (placement plus work
        over expected rate, s)."""
        out: list[RunningSubtask] = []
        strict = QosClass.STRICT
        for job in self.jobs.values():
            # Most of a long table has ended: test what is cheap first.
            if not job.running or job.spec.qos is not strict:
                continue
            for i in job.running:
                st = job.subtasks[i]
                if st.expected_rate > 0:
                    out.append(RunningSubtask(st.node, st.expected_rate,
                                              job.arrival + st.work / st.expected_rate))
        return tuple(out)
