"""Typed records of the grid model: nodes, jobs, subtasks, QoS classes.

Units (``docs/model.md`` §3): work in Mcycles (1 Mcycle = 1e6 CPU cycles); the grid standard CPU
is 1 GHz = 1000 Mcycles/s, so a subtask "of 2000 s" carries 2,000,000 Mcycles. Node speed
in MHz (= Mcycles/s of one core). Rates and scheduling weights in Mcycles/s. Times and
windows in seconds of model time. Memory in MB, IO bandwidth in MB/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

#: Mcycles per second of the grid standard CPU (1 GHz).
STANDARD_MHZ: float = 1000.0


class QosClass(str, Enum):
    """Service class of a job; it decides the local queue and whether SQ controls it.

    ``local`` is node-local work (the paper's grid-local job flow): it is generated per
    node and runs in the node's local queue; it is never submitted through the global
    manager.
    """

    STRICT = "strict"
    LOOSE = "loose"
    BEST_EFFORT = "best_effort"
    LOCAL = "local"


class JobPhase(str, Enum):
    """Where a job is in its life, in the simulator's core and in the live runtime."""

    PENDING = "pending"  # in the queue: waits for room
    RUNNING = "running"  # placed; its subtasks run (or start at its start boundary)
    COMPLETED = "completed"  # every subtask finished successfully
    FAILED = "failed"  # a subtask failed or its node was lost (policy ``fail``; live only)
    CANCELLED = "cancelled"
    EXPIRED = "expired"  # pending longer than its ``max_wait``
    REJECTED = "rejected"

    @property
    def final(self) -> bool:
        return self not in (JobPhase.PENDING, JobPhase.RUNNING)


class EndPolicy(str, Enum):
    """What happens to a running job when one of its subtasks cannot go on: its node is
    lost (``on_node_loss``) or its process fails (``on_failure``). The whole gang is
    always stopped first (never a half-dead gang); then the job is ``requeue``-d on a new
    placement (synthetic work from the gang's last common progress, commands from the
    start) or it ``fail``-s with the reason."""

    REQUEUE = "requeue"
    FAIL = "fail"


class WaitMode(str, Enum):
    """What a member of a coupled job does while it waits at an exchange for its partners:
    ``spin`` uses its CPU grant without progress (MPI's default busy polling), ``block``
    uses nothing, so its share goes to other work on the node."""

    SPIN = "spin"
    BLOCK = "block"
class ProgressMode(str, Enum):
    """What moves a process subtask's virtual clock: the CPU time it gets (``cpu``, the
    default) or the progress its application reports (``reported``)."""

    CPU = "cpu"
    REPORTED = "reported"


@dataclass(frozen=True, slots=True)
class ProgressSpec:
    """A job's ``progress`` settings (the job file's ``progress``, ``progress_end`` and
    ``stall_after``). ``end``: the application's total in its own unit when its reports
    do not carry one; ``stall_after``: model s without a report after which a member is
    ``stalled`` (None: no stall detection)."""

    mode: ProgressMode = ProgressMode.REPORTED
    end: float | None = None
    stall_after: float | None = None


class QueueName(str, Enum):
    """The three queues of a local manager (``docs/model.md`` §3, "Local scheduler")."""

    LOCAL = "local"
    QOS = "qos"
    BEST_EFFORT = "best_effort"


def queue_of(qos: QosClass) -> QueueName:
    """The local queue that serves a subtask of class ``qos``."""
    if qos is QosClass.LOCAL:
        return QueueName.LOCAL
    if qos is QosClass.BEST_EFFORT:
        return QueueName.BEST_EFFORT
    return QueueName.QOS


@dataclass(frozen=True, slots=True)
class Demand:
    """A per-subtask resource demand: what the subtask uses when it runs at full speed.

    ``cpu`` in cores (a single-threaded subtask uses 1), ``memory_mb`` in MB, ``io_mbps``
    in MB/s. Local queues share these with weighted DRF (``docs/model.md`` §3, "Local scheduler").
    """

    cpu: float = 1.0
    memory_mb: float = 0.0
    io_mbps: float = 0.0

    def __post_init__(self) -> None:
        for name in ("cpu", "memory_mb", "io_mbps"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"demand.{name}: must be a finite number >= 0, got {v!r}")
        if self.cpu <= 0:
            raise ValueError(f"demand.cpu: must be > 0 cores, got {self.cpu!r}")

    @property
    def is_cpu_only(self) -> bool:
        return self.memory_mb == 0 and self.io_mbps == 0


@dataclass(frozen=True, slots=True)
class Node:
    """A grid node (one local manager).

    ``speed_mhz`` is the speed of one core (Mcycles/s); ``cores`` the number of cores,
    so the node's CPU capacity is ``speed_mhz * cores`` Mcycles/s. ``memory_mb`` and
    ``io_mbps`` bound the multi-resource demands of the subtasks placed on it.
    """

    name: str
    speed_mhz: float
    cores: float = 1.0
    memory_mb: float = 16384.0
    io_mbps: float = 1000.0
    #: Labels placement constraints ask for (``labels`` of a subtask: all must be here).
    labels: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("node.name: must be a non-empty string")
        if not isinstance(self.labels, frozenset):
            object.__setattr__(self, "labels", frozenset(self.labels))
        for attr in ("speed_mhz", "cores", "memory_mb", "io_mbps"):
            v = getattr(self, attr)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(
                    f"node {self.name}: {attr}: must be a finite number > 0, got {v!r}"
                )

    @property
    def cpu_rate(self) -> float:
        """Total CPU capacity, Mcycles/s."""
        return self.speed_mhz * self.cores


@dataclass(frozen=True, slots=True)
class SubtaskSpec:
    """One subtask of a job as submitted.

    ``work`` in Mcycles (job files give reference CPU-seconds at the 1 GHz standard;
    the loader multiplies by :data:`STANDARD_MHZ`). ``weight`` is the relative weight
    ``r_i`` (> 0). ``command`` is an argv list for the process executor, or ``None``
    for the synthetic executor. ``labels``: labels the subtask's node must carry (all).
    ``env``: (name, value) pairs its command's environment gets on top of the job's
    ``env`` and the rendezvous variables (:mod:`runtime.rendezvous`).
    """

    work: float
    weight: float = 1.0
    demand: Demand | None = None
    command: tuple[str, ...] | None = None
    labels: frozenset[str] = frozenset()
    env: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not math.isfinite(self.work) or self.work <= 0:
            raise ValueError(f"work: must be a finite number > 0, got {self.work!r}")
        if not math.isfinite(self.weight) or self.weight <= 0:
            raise ValueError(f"weight: must be a finite number > 0, got {self.weight!r}")
        if not isinstance(self.labels, frozenset):
            object.__setattr__(self, "labels", frozenset(self.labels))


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job as submitted to the global manager.

    Either ``subtasks`` is given, or ``parallelism`` with ``total_work`` (Mcycles) and
    ``total_weight``; the global manager then splits the job itself on the nodes it
    picks (see :meth:`global_manager.core.GlobalManagerCore._split`).

    ``overall_deviation`` (``E_t``) and ``asynchrony`` (``A_t``) are the strict QoS
    windows in seconds; ``duration`` (``D_t``) an optional target duration in seconds;
    ``arrival`` the submission time in seconds of model time (generators set it; live
    submissions use the clock).
    """

    name: str
    qos: QosClass
    subtasks: tuple[SubtaskSpec, ...] = ()
    overall_deviation: float | None = None
    asynchrony: float | None = None
    duration: float | None = None
    parallelism: int | None = None
    total_work: float | None = None
    total_weight: float | None = None
    arrival: float = 0.0
    job_id: str = ""
    #: Node name a ``local`` job is pinned to (local jobs never travel).
    node: str | None = None
    user: str = "default"
    priority: int = 0
    max_wait: float | None = None
    #: On the loss of a node under a running subtask; None: ``requeue`` when every
    #: subtask is synthetic, ``fail`` when any runs a command.
    on_node_loss: EndPolicy | None = None
    #: When a subtask's process fails (a command exiting non-zero, killed).
    on_failure: EndPolicy = EndPolicy.FAIL
    #: Runs at most (the first one and its requeues) before a requeue becomes a failure.
    max_attempts: int = 3
    #: (name, value) pairs every command of the job gets in its environment, over the
    #: rendezvous variables (a subtask's own ``env`` wins over these).
    env: tuple[tuple[str, str], ...] = ()
    #: Coupled members (the simulator's model): they exchange every ``coupling`` s of
    #: their nominal time (work over expected rate) and none passes an exchange before
    #: all have reached it; ``None``: independent members.
    coupling: float | None = None
    #: What a coupled member does while it waits at an exchange.
    wait: WaitMode = WaitMode.SPIN

    def __post_init__(self) -> None:
        c = self.coupling
        if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float))
                              or not math.isfinite(c) or c <= 0):
            raise ValueError(f"coupling: must be a finite number of seconds > 0, got {c!r}")
    #: How its process subtasks' clocks move (None: by CPU time, ``progress: cpu``).
    progress: ProgressSpec | None = None

    def node_loss_policy(self) -> EndPolicy:
        """``on_node_loss``, or its default for this job's executors."""
        if self.on_node_loss is not None:
            return self.on_node_loss
        if any(s.command for s in self.subtasks):
            return EndPolicy.FAIL
        return EndPolicy.REQUEUE

    @property
    def n_subtasks(self) -> int:
        return len(self.subtasks) if self.subtasks else int(self.parallelism or 0)

    def labels_of(self, index: int) -> frozenset[str]:
        """Labels subtask ``index`` asks for (none for jobs given by ``parallelism``)."""
        return self.subtasks[index].labels if self.subtasks else frozenset()


@dataclass(slots=True)
class Subtask:
    """A placed subtask: live state kept by its local manager.

    ``expected_rate`` is ``x_i = r_i * u_t`` (Mcycles/s) fixed at admission;
    ``weight`` the current scheduling weight (Mcycles/s, starts at ``expected_rate``)
    and ``virtual_weight`` the weight of its virtual subtask (Mcycles/s, 0 until the
    controller first slows it down); ``rate_cap`` the most CPU it may take per second
    under pace control (Mcycles/s; 0 = no cap). ``done_work`` in Mcycles.
    """

    job_id: str
    index: int
    node: str
    qos: QosClass
    work: float
    relative_weight: float
    expected_rate: float
    weight: float
    demand: Demand = field(default_factory=Demand)
    virtual_weight: float = 0.0
    rate_cap: float = 0.0
    done_work: float = 0.0
    start_time: float = 0.0
    finish_time: float | None = None
    command: tuple[str, ...] | None = None
    #: What its command's environment gets on top of its local manager's: the
    #: rendezvous variables and the job file's ``env`` (set at dispatch). Holds the
    #: run's key-value credential: never shown (no repr).
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    #: Its job's progress settings (None: its clock moves by CPU time).
    progress: ProgressSpec | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.job_id, self.index)

    @property
    def remaining(self) -> float:
        """Work still to do, Mcycles."""
        return max(0.0, self.work - self.done_work)

    @property
    def finished(self) -> bool:
        return self.finish_time is not None


@dataclass(frozen=True, slots=True)
class Workload:
    """The nodes and jobs of one run.

    Node names are unique; jobs that carry a ``job_id`` carry unique ones; local jobs name
    an existing node. The simulator takes jobs in arrival order (a stable sort), so
    ``jobs`` need not be sorted. ``seed`` and ``params`` record provenance when the
    workload was generated (both ``None`` for a trace or a hand-made workload).
    """

    nodes: tuple[Node, ...]
    jobs: tuple[JobSpec, ...]
    seed: int | None = None
    params: Any = None

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("Workload.nodes: must hold at least one node")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"Workload.nodes: node names must be unique, got {names}")
        ids: set[str] = set()
        for i, job in enumerate(self.jobs):
            if job.job_id:
                if job.job_id in ids:
                    raise ValueError(f"Workload.jobs[{i}].job_id: {job.job_id!r} is used twice")
                ids.add(job.job_id)
            if job.qos is QosClass.LOCAL and job.node not in names:
                raise ValueError(f"Workload.jobs[{i}].node: no node named {job.node!r}")

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    def jobs_of(self, *classes: QosClass) -> tuple[JobSpec, ...]:
        """The jobs of the given QoS classes, in arrival order."""
        return tuple(sorted((j for j in self.jobs if j.qos in classes), key=lambda j: j.arrival))
