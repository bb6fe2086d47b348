"""The global grid resource manager's core (GGRMS): job table, expected rates,
admission and all-or-nothing placement. No I/O, no clock reads: ``now`` is passed in.

Expected rate (DESIGN §3): subtask ``i`` of job ``t`` gets ``x_i = r_i * u_t`` Mcycles/s,
where ``u_t`` is the grid's ``rate_per_weight`` (Mcycles/s per weight unit) or, for a job
with a target duration ``D_t``, ``max_i(w_i / r_i) / D_t``.

Jobs given as ``parallelism: N`` with total work ``W`` and total weight ``R`` are split on
the ``N`` nodes the placement policy ranks first: node ``j`` gets weight
``r_j = R * f_j / sum f`` where ``f_j`` is its free strict budget (strict jobs) or its CPU
rate (others), and work ``w_j = W * r_j / R``. Then ``w_j / r_j = W / R`` for every
subtask, so at their expected rates they all finish together.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from coallocator.controller import initial_rate_cap
from global_manager.admission import (
    AdmissionPolicy,
    NodeLoad,
    PlacementPolicy,
    PlacementReply,
    PlacementRequest,
    place,
    placement_policies,
)
from global_manager.policies import Policy
from workloads.model import Demand, JobSpec, Node, QosClass, Subtask


@dataclass(frozen=True, slots=True)
class GlobalConfig:
    """``rate_per_weight``: Mcycles/s per unit of relative weight (``u_t`` default);
    ``qos_share``: the QoS queue's CPU fraction, which admission budgets are built on."""

    rate_per_weight: float = 25.0
    qos_share: float = 0.5

    def __post_init__(self) -> None:
        if not math.isfinite(self.rate_per_weight) or self.rate_per_weight <= 0:
            raise ValueError("rate_per_weight: must be a finite number > 0 (Mcycles/s per weight)")
        if not 0 < self.qos_share <= 1:
            raise ValueError("qos_share: must be within (0, 1]")


@dataclass(frozen=True, slots=True)
class Admission:
    """The global manager's answer to a submission."""

    job_id: str
    admitted: bool
    reason: str
    subtasks: tuple[Subtask, ...] = ()


@dataclass(slots=True)
class JobRecord:
    spec: JobSpec
    job_id: str
    arrival: float
    subtasks: tuple[Subtask, ...]
    running: set[int]
    cancelled: bool = False


class GlobalManagerCore:
    """Admission, placement and the job table. Deterministic given its RNG."""

    def __init__(
        self,
        nodes: Iterable[Node],
        policy: Policy,
        config: GlobalConfig | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.nodes: dict[str, Node] = {}
        for n in nodes:
            if n.name in self.nodes:
                raise ValueError(f"nodes: duplicate node name {n.name!r}")
            self.nodes[n.name] = n
        if not self.nodes:
            raise ValueError("nodes: at least one node is needed")
        self.policy = policy
        self.config = config or GlobalConfig()
        self.rng = rng or random.Random(0)
        self.admission: AdmissionPolicy = policy.admission_policy()
        self.placement: PlacementPolicy = placement_policies.create(policy.placement)
        self.committed: dict[str, float] = {n: 0.0 for n in self.nodes}
        self.load: dict[str, float] = {n: 0.0 for n in self.nodes}
        self.jobs: dict[str, JobRecord] = {}
        self._next_id = 0

    # ------------------------------------------------------------------ queries
    def budget(self, node: str) -> float:
        """Strict expected rate ``node`` may carry under the policy's admission, Mcycles/s."""
        n = self.nodes[node]
        return self.admission.budget(n.cpu_rate, self.config.qos_share)

    def node_budgets(self) -> dict[str, float]:
        return {n: self.budget(n) for n in self.nodes}

    def _loads(self) -> tuple[NodeLoad, ...]:
        return tuple(
            NodeLoad(
                n.name, n.cpu_rate, self.committed[n.name], self.budget(n.name), self.load[n.name]
            )
            for n in self.nodes.values()
        )

    # --------------------------------------------------------------- submission
    def new_job_id(self) -> str:
        self._next_id += 1
        return f"j{self._next_id:05d}"

    def submit(self, spec: JobSpec, now: float) -> Admission:
        """Admit and place ``spec`` at time ``now`` (s), all or nothing."""
        job_id = spec.job_id or self.new_job_id()
        if job_id in self.jobs:
            return Admission(job_id, False, f"job id {job_id!r} is already in use")
        n = spec.n_subtasks
        if n <= 0:
            return Admission(job_id, False, "job has no subtasks")
        if spec.qos is QosClass.LOCAL:
            if spec.node not in self.nodes or len(spec.subtasks) != 1:
                return Admission(
                    job_id,
                    False,
                    f"local job needs one subtask on a known node, got node {spec.node!r}",
                )
            works = [spec.subtasks[0].work]
            weights = [spec.subtasks[0].weight]
            rates = self._rates(spec, works, weights)
            reply = PlacementReply((spec.node,))
        elif n > len(self.nodes):
            return Admission(job_id, False, f"{n} subtasks but only {len(self.nodes)} nodes")
        else:
            checked = spec.qos is QosClass.STRICT
            if spec.subtasks:
                works = [s.work for s in spec.subtasks]
                weights = [s.weight for s in spec.subtasks]
                rates = self._rates(spec, works, weights)
                reply = place(
                    PlacementRequest(job_id, tuple(rates), checked, self._loads()),
                    self.placement,
                    self.rng,
                )
            else:
                bad = _check_split_totals(spec)
                if bad:
                    return Admission(job_id, False, bad)
                works, weights, rates, reply = self._split(job_id, spec, checked)
        if not reply.admitted or reply.nodes is None:
            return Admission(job_id, False, reply.reason)

        subtasks = []
        strict = spec.qos is QosClass.STRICT
        for i, node in enumerate(reply.nodes):
            src = spec.subtasks[i] if spec.subtasks else None
            subtasks.append(
                Subtask(
                    job_id=job_id,
                    index=i,
                    node=node,
                    qos=spec.qos,
                    work=works[i],
                    relative_weight=weights[i],
                    expected_rate=rates[i],
                    weight=rates[i],
                    demand=(src.demand if src and src.demand else Demand()),
                    command=src.command if src else None,
                    start_time=now,
                    rate_cap=initial_rate_cap(
                        self.policy.controller_config,
                        self.policy.controller,
                        strict,
                        len(reply.nodes),
                        rates[i],
                    ),
                )
            )
        for s in subtasks:
            if spec.qos is QosClass.STRICT:
                self.committed[s.node] += s.expected_rate
            self.load[s.node] += s.expected_rate
        self.jobs[job_id] = JobRecord(
            spec, job_id, now, tuple(subtasks), {s.index for s in subtasks}
        )
        return Admission(job_id, True, "", tuple(subtasks))

    def _rates(self, spec: JobSpec, works: list[float], weights: list[float]) -> list[float]:
        if spec.duration:
            u = max(w / r for w, r in zip(works, weights)) / spec.duration
        else:
            u = self.config.rate_per_weight
        return [r * u for r in weights]

    def _split(
        self, job_id: str, spec: JobSpec, checked: bool
    ) -> tuple[list[float], list[float], list[float], PlacementReply]:
        n = int(spec.parallelism or 0)
        total_work = float(spec.total_work or 0.0)
        # A missing total weight means 1 per subtask, as in job files.
        total_weight = float(spec.total_weight if spec.total_weight is not None else n)
        ranked = self.placement.rank(self._loads(), checked, self.rng)[:n]
        basis = [max(nl.free, 0.0) if checked else nl.cpu_rate for nl in ranked]
        if sum(basis) <= 0:
            basis = [nl.cpu_rate for nl in ranked]
        weights = [total_weight * f / sum(basis) for f in basis]
        works = [total_work * r / total_weight for r in weights]
        rates = self._rates(spec, works, weights)
        if checked:
            for i, (nl, x) in enumerate(zip(ranked, rates)):
                if x > nl.free + 1e-9:
                    reason = f"no free node can take subtask {i} (expected rate {x:.6g} Mcycles/s)"
                    return works, weights, rates, PlacementReply(None, reason)
        return works, weights, rates, PlacementReply(tuple(nl.name for nl in ranked))

    # ---------------------------------------------------------------- lifecycle
    def subtask_finished(self, job_id: str, index: int) -> bool:
        """Release what a finished subtask held; True when the whole job is done."""
        job = self.jobs.get(job_id)
        if job is None or index not in job.running:
            return False
        job.running.discard(index)
        self._release(job.subtasks[index], job.spec.qos)
        return not job.running

    def cancel(self, job_id: str) -> list[Subtask]:
        """Cancel a job; returns the subtasks that were still running."""
        job = self.jobs.get(job_id)
        if job is None:
            raise KeyError(job_id)
        running = [job.subtasks[i] for i in sorted(job.running)]
        for s in running:
            self._release(s, job.spec.qos)
        job.running.clear()
        job.cancelled = True
        return running

    def _release(self, s: Subtask, qos: QosClass) -> None:
        if qos is QosClass.STRICT:
            self.committed[s.node] = max(0.0, self.committed[s.node] - s.expected_rate)
        self.load[s.node] = max(0.0, self.load[s.node] - s.expected_rate)

    def committed_view(self) -> Mapping[str, float]:
        return dict(self.committed)

    # ------------------------------------------------------------ persistence
    def snapshot(self) -> dict[str, Any]:
        """The core's mutable state as JSON-able data (job ids, RNG state, committed and
        load rates in Mcycles/s, and per job its QoS, subtasks and running set), for a
        restarted global manager to :meth:`restore`. Job specs are reduced to name and
        QoS: a restored job is only ever finished or cancelled, never re-placed."""
        version, internal, gauss = self.rng.getstate()
        return {
            "next_id": self._next_id,
            "rng": [version, list(internal), gauss],
            "committed": dict(self.committed),
            "load": dict(self.load),
            "jobs": [
                {
                    "job_id": j.job_id,
                    "name": j.spec.name,
                    "qos": j.spec.qos.value,
                    "arrival": j.arrival,
                    "running": sorted(j.running),
                    "cancelled": j.cancelled,
                    "subtasks": [_subtask_to_dict(s) for s in j.subtasks],
                }
                for j in self.jobs.values()
            ],
        }

    def restore(self, snap: Mapping[str, Any]) -> None:
        """Replace the mutable state with a :meth:`snapshot` of a core over the same
        nodes and policy (ValueError naming the field if it does not fit)."""
        unknown = set(snap["committed"]) ^ set(self.nodes)
        if unknown:
            raise ValueError(f"committed: nodes {sorted(unknown)} do not match this core's")
        version, internal, gauss = snap["rng"]
        self.rng.setstate((int(version), tuple(int(x) for x in internal), gauss))
        self._next_id = int(snap["next_id"])
        self.committed = {n: float(snap["committed"][n]) for n in self.nodes}
        self.load = {n: float(snap["load"][n]) for n in self.nodes}
        self.jobs = {}
        for j in snap["jobs"]:
            qos = QosClass(j["qos"])
            self.jobs[j["job_id"]] = JobRecord(
                JobSpec(name=str(j["name"]), qos=qos, job_id=str(j["job_id"])),
                str(j["job_id"]),
                float(j["arrival"]),
                tuple(_subtask_from_dict(s) for s in j["subtasks"]),
                {int(i) for i in j["running"]},
                bool(j["cancelled"]),
            )


def _subtask_to_dict(s: Subtask) -> dict[str, Any]:
    """A placed subtask as JSON-able data (enums as values, tuples as lists)."""
    d = {f: getattr(s, f) for f in Subtask.__dataclass_fields__}
    d["qos"] = s.qos.value
    d["demand"] = {f: getattr(s.demand, f) for f in Demand.__dataclass_fields__}
    d["command"] = list(s.command) if s.command is not None else None
    return d


def _subtask_from_dict(d: Mapping[str, Any]) -> Subtask:
    """The inverse of :func:`_subtask_to_dict`."""
    fields = dict(d)
    fields["qos"] = QosClass(fields["qos"])
    fields["demand"] = Demand(**fields["demand"])
    if fields.get("command") is not None:
        fields["command"] = tuple(fields["command"])
    return Subtask(**fields)


def _check_split_totals(spec: JobSpec) -> str:
    """Why a job given by ``parallelism`` cannot be split ("" if it can): its total work
    (Mcycles) must be > 0 and its total weight, when given, > 0."""
    w = spec.total_work
    if w is None or not math.isfinite(w) or w <= 0:
        return f"total_work: must be a finite number > 0 Mcycles to split a job, got {w!r}"
    r = spec.total_weight
    if r is not None and (not math.isfinite(r) or r <= 0):
        return f"total_weight: must be a finite number > 0, got {r!r}"
    return ""
