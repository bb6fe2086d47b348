"""The global manager's service: :class:`GlobalManagerCore` plus the live job table.

No Ray here: :mod:`runtime.actors` wraps it and supplies a :class:`Dispatch` that reaches
the controller and the local managers. Wiring is the simulator's
(:func:`global_manager.simulator.simulate`): the same core, policy, RNG seed, global
configuration (rate per weight, QoS share) and node budgets; an admitted grid QoS job is
registered with the controller before its subtasks are handed to their nodes.

A submission at model time ``now`` is admitted at the cycle boundary ``b`` at or after
``now + start_margin`` (the margin, in real seconds, lets the Ray calls reach every node in
time): the job's subtasks start at ``b`` on every node, the controller tracks it from
``b``, as the simulator admits a job at the boundary of its arrival. A batch of jobs
(one ``submit`` call) shares one ``b`` and is admitted in order, so the same batch makes
the same decisions as the simulator given the same node loads.

Persistence (write-ahead). Given a ``journal`` path, the service writes its job table and
the core's state (committed and load rates, RNG, job ids) to that file atomically
(:mod:`workloads.atomic`: temporary file, fsync, rename) after every change and before
the change is acted on or answered: an admitted job is written before it is dispatched,
a cancellation before the nodes are told, a subtask outcome before anyone can read it.
A service built over an existing journal recovers from it (a restarted global manager).
A submission may carry a client token; a retried submission with a token already in the
journal gets the recorded answers instead of a second admission (at most once).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from global_manager.core import GlobalConfig, GlobalManagerCore
from runtime.config import RuntimeConfig
from runtime.node_runtime import SubtaskOutcome, SubtaskState
from runtime.timebase import ModelClock, boundary_at_or_after
from workloads.atomic import atomic_write_json
from workloads.model import JobSpec, Node, QosClass, Subtask

log = logging.getLogger("coalloc.runtime")

#: Version of the journal file's layout.
JOURNAL_VERSION = 1
#: How many submission tokens (with their answers) the journal keeps for retries.
TOKENS_KEPT = 256


class JobState(str, Enum):
    """A job's life in the live runtime."""

    REJECTED = "rejected"
    RUNNING = "running"  # admitted; subtasks placed (they start at the job's start time)
    COMPLETED = "completed"  # every subtask finished successfully
    FAILED = "failed"  # every subtask ended, at least one failed
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self is not JobState.RUNNING


class Dispatch(Protocol):
    """How the global manager reaches the other actors."""

    def register(
        self,
        job_id: str,
        qos: QosClass,
        arrival: float,
        subtasks: list[tuple[int, str, float]],
        overall_deviation: float | None,
        asynchrony: float | None,
    ) -> None: ...

    def place(self, node: str, subtasks: list[Subtask], start: float) -> None: ...

    def cancel(self, job_id: str, nodes: Iterable[str]) -> None: ...


@dataclass(slots=True)
class JobInfo:
    """One job in the live job table. Times in model s; ``work`` in Mcycles."""

    job_id: str
    name: str
    qos: str
    state: JobState
    reason: str
    submitted_at: float
    start_at: float | None
    subtasks: list[dict[str, Any]] = field(default_factory=list)
    finished_at: float | None = None
    outcomes: dict[int, dict[str, Any]] = field(default_factory=dict)
    overall_deviation: float | None = None  # model s, as in the job's spec
    asynchrony: float | None = None  # model s, as in the job's spec

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "name": self.name,
            "qos": self.qos,
            "state": self.state.value,
            "reason": self.reason,
            "submitted_at": self.submitted_at,
            "start_at": self.start_at,
            "finished_at": self.finished_at,
            "nodes": [s["node"] for s in self.subtasks],
            "subtasks": [dict(s, **self.outcomes.get(s["index"], {})) for s in self.subtasks],
        }

    def to_record(self) -> dict[str, Any]:
        """Every field as JSON-able data, for the journal (:meth:`from_record` inverts)."""
        return {
            "job_id": self.job_id,
            "name": self.name,
            "qos": self.qos,
            "state": self.state.value,
            "reason": self.reason,
            "submitted_at": self.submitted_at,
            "start_at": self.start_at,
            "subtasks": self.subtasks,
            "finished_at": self.finished_at,
            "outcomes": {str(i): o for i, o in self.outcomes.items()},
            "overall_deviation": self.overall_deviation,
            "asynchrony": self.asynchrony,
        }

    @staticmethod
    def from_record(d: Mapping[str, Any]) -> JobInfo:
        return JobInfo(
            job_id=str(d["job_id"]),
            name=str(d["name"]),
            qos=str(d["qos"]),
            state=JobState(d["state"]),
            reason=str(d["reason"]),
            submitted_at=float(d["submitted_at"]),
            start_at=None if d["start_at"] is None else float(d["start_at"]),
            subtasks=[dict(s) for s in d["subtasks"]],
            finished_at=None if d["finished_at"] is None else float(d["finished_at"]),
            outcomes={int(i): dict(o) for i, o in d["outcomes"].items()},
            overall_deviation=d.get("overall_deviation"),
            asynchrony=d.get("asynchrony"),
        )


class GlobalService:
    """Admission, placement and the job table of the live runtime. Thread-safe."""

    def __init__(
        self,
        nodes: list[Node],
        config: RuntimeConfig,
        clock: ModelClock,
        dispatch: Dispatch,
        journal: Path | None = None,
    ) -> None:
        """``journal``: the file the job table is persisted to (None: not persisted); if
        it exists the service recovers from it (see the module docstring)."""
        self.config = config
        self.clock = clock
        self.dispatch = dispatch
        self.policy = config.get_policy()
        self.core = GlobalManagerCore(
            nodes,
            self.policy,
            GlobalConfig(config.rate_per_weight, config.qos_share),
            random.Random(config.seed),
        )
        self.nodes = list(nodes)
        self.jobs: dict[str, JobInfo] = {}
        self.tokens: dict[str, list[dict[str, Any]]] = {}
        self.journal = journal
        self.recovered = False
        self._lock = threading.RLock()
        if journal is not None and journal.exists():
            self._recover(journal)

    # -------------------------------------------------------------- persistence
    def _persist(self) -> None:
        """Write the job table and the core's state to the journal (caller holds the
        lock). A failed write propagates: nothing is acted on that is not recorded."""
        if self.journal is None:
            return
        atomic_write_json(
            self.journal,
            {
                "version": JOURNAL_VERSION,
                "core": self.core.snapshot(),
                "jobs": [info.to_record() for info in self.jobs.values()],
                "tokens": self.tokens,
            },
        )

    def _recover(self, path: Path) -> None:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != JOURNAL_VERSION:
            raise ValueError(f"{path}: version: unknown journal version {data.get('version')!r}")
        self.core.restore(data["core"])
        self.jobs = {d["job_id"]: JobInfo.from_record(d) for d in data["jobs"]}
        self.tokens = {str(k): list(v) for k, v in data.get("tokens", {}).items()}
        self.recovered = True
        log.warning(
            "global manager recovered %d jobs (%d running) from %s",
            len(self.jobs), sum(1 for j in self.jobs.values() if not j.state.final), path,
        )

    def running_subtasks(self) -> dict[str, list[tuple[str, int]]]:
        """Per node, the (job id, index) of every subtask of a running job that has not
        ended yet: what :meth:`reconcile` asks the nodes about."""
        with self._lock:
            out: dict[str, list[tuple[str, int]]] = {}
            for info in self.jobs.values():
                if info.state is not JobState.RUNNING:
                    continue
                for s in info.subtasks:
                    if s["index"] not in info.outcomes:
                        out.setdefault(s["node"], []).append((info.job_id, s["index"]))
            return out

    def controller_jobs(self) -> list[dict[str, Any]]:
        """The running grid QoS jobs (strict, loose) as a restarted controller tracks
        them again: ``job_id``, ``qos``, ``arrival`` (start boundary, model s),
        ``subtasks`` ((index, node, expected rate in Mcycles/s)), ``overall_deviation``,
        ``asynchrony`` and ``ended`` (index -> model s it ended, as far as known)."""
        grid = (QosClass.STRICT.value, QosClass.LOOSE.value)
        with self._lock:
            return [
                {
                    "job_id": info.job_id,
                    "qos": info.qos,
                    "arrival": info.start_at,
                    "subtasks": [(s["index"], s["node"], s["expected_rate"])
                                 for s in info.subtasks],
                    "overall_deviation": info.overall_deviation,
                    "asynchrony": info.asynchrony,
                    "ended": {i: o["finish_time"] for i, o in info.outcomes.items()},
                }
                for info in self.jobs.values()
                if info.state is JobState.RUNNING and info.qos in grid
            ]

    def reconcile(self, node: str, seen: list[dict[str, Any]]) -> int:
        """Apply what node ``node``'s local manager says about its subtasks (its status
        ``subtasks`` list): an ended subtask the job table still has running is taken as
        its lost ``subtask_ended`` notification. Returns how many were applied."""
        ended = {"finished", "failed"}
        applied = 0
        todo = set(self.running_subtasks().get(node, []))
        for d in seen:
            key = (str(d.get("job_id")), int(d.get("index", -1)))
            if key in todo and d.get("state") in ended:
                self.subtask_ended(
                    SubtaskOutcome(
                        key[0], key[1], node, SubtaskState(d["state"]),
                        float(d.get("finish_time") or self.clock.now()),
                        d.get("exit_code"), str(d.get("reason") or ""),
                    )
                )
                applied += 1
        return applied

    def node_budgets(self) -> dict[str, float]:
        return self.core.node_budgets()

    # --------------------------------------------------------------- submission
    def start_boundary(self) -> float:
        """The boundary a submission made now starts at (model s)."""
        margin = self.config.start_margin_s * self.config.time_scale
        return boundary_at_or_after(self.clock.now() + margin, self.config.cycle)

    def submit(self, specs: list[JobSpec], token: str | None = None) -> list[dict[str, Any]]:
        """Admit and place ``specs`` in order; one answer per job (``job_id``,
        ``admitted``, ``reason``, ``nodes``, ``start_at``). ``token``: the client's id
        of this submission; a retry with the same token gets the first answers."""
        out: list[dict[str, Any]] = []
        with self._lock:
            if token is not None and token in self.tokens:
                return [dict(a) for a in self.tokens[token]]
            now = self.clock.now()
            start = self.start_boundary()
            for spec in specs:
                adm = self.core.submit(spec, start)
                info = JobInfo(
                    job_id=adm.job_id,
                    name=spec.name,
                    qos=spec.qos.value,
                    state=JobState.RUNNING if adm.admitted else JobState.REJECTED,
                    reason=adm.reason,
                    submitted_at=now,
                    start_at=start if adm.admitted else None,
                    subtasks=[
                        {
                            "index": s.index,
                            "node": s.node,
                            "work": s.work,
                            "relative_weight": s.relative_weight,
                            "expected_rate": s.expected_rate,
                            "executor": "process" if s.command else "synthetic",
                        }
                        for s in adm.subtasks
                    ],
                    overall_deviation=spec.overall_deviation,
                    asynchrony=spec.asynchrony,
                )
                self.jobs[adm.job_id] = info
                out.append(
                    {
                        "job_id": adm.job_id,
                        "name": spec.name,
                        "admitted": adm.admitted,
                        "reason": adm.reason,
                        "nodes": [s.node for s in adm.subtasks],
                        "start_at": info.start_at,
                    }
                )
                if token is not None:
                    self.tokens[token] = out
                    while len(self.tokens) > TOKENS_KEPT:
                        del self.tokens[next(iter(self.tokens))]
                self._persist()  # write-ahead: recorded before it is dispatched
                if adm.admitted:
                    self._dispatch(spec, adm.job_id, adm.subtasks, start)
        return out

    def _dispatch(
        self, spec: JobSpec, job_id: str, subtasks: tuple[Subtask, ...], start: float
    ) -> None:
        if spec.qos in (QosClass.STRICT, QosClass.LOOSE):
            self.dispatch.register(
                job_id,
                spec.qos,
                start,
                [(s.index, s.node, s.expected_rate) for s in subtasks],
                spec.overall_deviation,
                spec.asynchrony,
            )
        by_node: dict[str, list[Subtask]] = {}
        for s in subtasks:
            by_node.setdefault(s.node, []).append(s)
        for node, subs in by_node.items():
            self.dispatch.place(node, subs, start)

    # ---------------------------------------------------------------- lifecycle
    def subtask_ended(self, outcome: SubtaskOutcome) -> None:
        """A local manager says a subtask left its node (finished or failed)."""
        with self._lock:
            info = self.jobs.get(outcome.job_id)
            if info is None or info.state is not JobState.RUNNING:
                return
            info.outcomes[outcome.index] = {
                "state": outcome.state.value,
                "finish_time": outcome.finish_time,
                "exit_code": outcome.exit_code,
                "reason": outcome.reason,
            }
            done = self.core.subtask_finished(outcome.job_id, outcome.index)
            if done:
                failed = [o for o in info.outcomes.values() if o["state"] != "finished"]
                info.state = JobState.FAILED if failed else JobState.COMPLETED
                if failed:
                    info.reason = "; ".join(
                        f"subtask {i}: {o['reason']}"
                        for i, o in sorted(info.outcomes.items())
                        if o["state"] != SubtaskState.FINISHED.value
                    )
                info.finished_at = max(o["finish_time"] for o in info.outcomes.values())
            self._persist()

    def cancel(self, job_id: str) -> dict[str, Any] | None:
        """Cancel a job; None for an unknown id. A finished job is left as it is."""
        with self._lock:
            info = self.jobs.get(job_id)
            if info is None:
                return None
            if info.state is not JobState.RUNNING:
                return info.to_dict()
            running = self.core.cancel(job_id)
            info.state = JobState.CANCELLED
            info.finished_at = self.clock.now()
            nodes = sorted({s.node for s in running})
            self._persist()
        self.dispatch.cancel(job_id, nodes)
        return self.job(job_id)

    # ------------------------------------------------------------------ queries
    def job(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            info = self.jobs.get(job_id)
            return info.to_dict() if info is not None else None

    def job_states(self, job_ids: Iterable[str] | None = None) -> dict[str, str]:
        with self._lock:
            ids = list(self.jobs) if job_ids is None else list(job_ids)
            return {j: self.jobs[j].state.value for j in ids if j in self.jobs}

    def describe(self) -> dict[str, Any]:
        """Jobs and nodes (budgets, committed rates) without the other actors' views."""
        with self._lock:
            nodes = [
                {
                    "name": n.name,
                    "speed_mhz": n.speed_mhz,
                    "cores": n.cores,
                    "budget": self.core.budget(n.name),
                    "committed": self.core.committed[n.name],
                    "load": self.core.load[n.name],
                }
                for n in self.nodes
            ]
            jobs = [info.to_dict() for info in self.jobs.values()]
        return {
            "policy": self.policy.name,
            "model_time": self.clock.now(),
            "nodes": nodes,
            "jobs": jobs,
        }
