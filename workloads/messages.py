"""Messages between local managers and the co-allocation controller.

These are plain frozen records with no I/O; :mod:`coallocator.wire` encodes them as
msgpack frames for ZeroMQ, and the simulator passes them directly.

Units: times in seconds of model time, work in Mcycles (1 Mcycle = 1e6 CPU cycles;
the grid standard CPU is 1 GHz = 1000 Mcycles/s), weights in Mcycles/s (a subtask's
scheduling weight starts at its expected rate ``x_i``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from workloads.model import QosClass

if TYPE_CHECKING:
    from workloads.model import JobSpec, Subtask


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """One subtask's progress after one local scheduling cycle (eqs. 3-5).

    ``incarnation`` identifies one run of the reporting local manager (a restarted
    manager gets a new one); ``seq`` increases by one per report within an incarnation,
    so (node, incarnation, seq) identifies a report and duplicates can be ignored.
    """

    job_id: str
    subtask: int
    node: str
    incarnation: int
    seq: int
    real_time: float  # T_R after the cycle, s
    virtual_time: float  # T_V after the cycle, s
    expected_work: float  # x: Mcycles the subtask should have had in the cycle
    granted_work: float  # x-bar: Mcycles it really got in the cycle
    done: bool = False  # the subtask finished its work in this cycle
    #: Mcycles the node could have given it in the cycle without its rate cap (pace
    #: control's capability estimate; equal to ``granted_work`` when uncapped, 0 = not
    #: known).
    available_work: float = 0.0


@dataclass(frozen=True, slots=True)
class ReweightCommand:
    """The controller's order to a local manager: set a subtask's scheduling weight and
    the weight of its virtual subtask (both Mcycles/s, >= 0), and its rate cap
    (Mcycles/s; 0 = no cap): under pace control a subtask ahead of its siblings is held
    to the rate that keeps it in step, and the node gives what it leaves to other work."""

    job_id: str
    subtask: int
    node: str
    seq: int
    weight: float
    virtual_weight: float
    rate_cap: float = 0.0


@dataclass(frozen=True, slots=True)
class JobRegistration:
    """A placed grid QoS job (strict or loose) as the controller tracks it: its id (the
    run id in the live runtime), class, start boundary ``arrival`` (model s), its
    subtasks as (index, node, admitted weight = expected rate in Mcycles/s) and its
    windows ``E_t`` and ``A_t`` (model s; None: no window)."""

    job_id: str
    qos: QosClass
    arrival: float
    subtasks: tuple[tuple[int, str, float], ...]
    overall_deviation: float | None = None
    asynchrony: float | None = None
    #: The pace (a multiple of each subtask's expected rate, >= 1) the gang starts
    #: capped at under pace control: the global manager placed it with the same caps.
    initial_pace: float = 1.0

    @staticmethod
    def of(job_id: str, spec: JobSpec, start: float, placed: Iterable[Subtask]
           ) -> JobRegistration:
        """The registration of ``spec``'s placed subtasks under ``job_id`` from ``start``."""
        return JobRegistration(
            job_id, spec.qos, start,
            tuple((s.index, s.node, s.expected_rate) for s in placed),
            spec.overall_deviation, spec.asynchrony, initial_pace_of(placed),
        )


def initial_pace_of(placed: Iterable[Subtask]) -> float:
    """The pace a placed gang starts at: its members' initial rate caps over their
    expected rates (1 when uncapped)."""
    for s in placed:
        if s.rate_cap > 0 and s.expected_rate > 0:
            return s.rate_cap / s.expected_rate
    return 1.0


class SubtaskPhase(str, Enum):
    """Where a subtask is on its node."""

    PENDING = "pending"  # submitted, waiting for its start boundary
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"
    #: Stopped by its node, which could no longer renew its lease (``runtime.lease``):
    #: its global manager may have declared the node lost and started it elsewhere.
    FENCED = "fenced"


@dataclass(frozen=True, slots=True)
class SubtaskOutcome:
    """A subtask left its node: finished, failed or cancelled. ``finish_time`` in model s;
    ``exit_code`` for process subtasks; ``reason`` says why it failed."""

    job_id: str
    index: int
    node: str
    state: SubtaskPhase
    finish_time: float
    exit_code: int | None = None
    reason: str = ""


#: The fields of a :class:`SubtaskReport` that its application's reported progress sets.
PROGRESS_FIELDS = ("reported_time", "reported_end", "reported_fraction", "reported_rate",
                   "progress_reports", "progress_dropped", "wait_s", "waiting", "stalled",
                   "useful_rate", "wait_fraction", "useful_cap")


@dataclass(frozen=True, slots=True)
class SubtaskReport:
    """One subtask as its local manager reports it to the global manager's
    reconciliation: ``run_id`` (its job id on the node: the run's id), ``index``,
    ``state``, ``done_work`` (Mcycles done so far; None: not known), and for one that
    ended, ``finish_time`` (model s), ``exit_code`` (process subtasks) and ``reason``.

    What ``coalloc status`` shows of it (None: not known, or not of this kind of
    subtask): ``start_time`` (model s of its start boundary), ``weight`` and
    ``virtual_weight`` (Mcycles/s, the local scheduler's), ``virtual_time`` (model s,
    its virtual clock), and for a process subtask ``share`` (of a core), ``pid`` and
    ``cpu_s`` (CPU s its processes used).

    Progress its application reported (``docs/coupled.md``, "Progress"; None: it has
    reported none): ``reported_time`` and ``reported_end`` (its own unit),
    ``reported_fraction`` (0..1), ``reported_rate`` (fraction per model s since its
    start), ``progress_reports`` accepted and ``progress_dropped`` by reason, ``wait_s``
    (s it spent waiting at exchanges) and ``waiting``; ``stalled`` (``progress:
    reported`` with ``stall_after``: no report for that long). Of a ``progress:
    reported`` member that reports its waits: ``useful_rate`` (Mcycles/s it uses outside
    its waits, smoothed), ``wait_fraction`` (0..1, smoothed) and ``useful_cap``
    (Mcycles/s its node holds it to under pace control; None: none;
    :mod:`local_manager.useful_rate`)."""

    run_id: str
    index: int
    state: SubtaskPhase
    done_work: float | None = None
    finish_time: float | None = None
    exit_code: int | None = None
    reason: str = ""
    start_time: float | None = None
    weight: float | None = None
    virtual_weight: float | None = None
    virtual_time: float | None = None
    share: float | None = None
    pid: int | None = None
    cpu_s: float | None = None
    reported_time: float | None = None
    reported_end: float | None = None
    reported_fraction: float | None = None
    reported_rate: float | None = None
    progress_reports: int | None = None
    progress_dropped: dict[str, int] | None = None
    wait_s: float | None = None
    waiting: bool | None = None
    stalled: bool | None = None
    useful_rate: float | None = None
    wait_fraction: float | None = None
    useful_cap: float | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.run_id, self.index)

    @property
    def ended(self) -> bool:
        return self.state in (SubtaskPhase.FINISHED, SubtaskPhase.FAILED, SubtaskPhase.FENCED)

    @property
    def live(self) -> bool:
        """Still on the node: waiting for its start boundary or running."""
        return self.state in (SubtaskPhase.PENDING, SubtaskPhase.RUNNING)


@dataclass(frozen=True, slots=True)
class NodeReport:
    """What a local manager tells the global manager every second (its cheap ``report``
    call; the status document is for people): whether its cycle loop runs
    (``loop_running``), what its QoS queue can get now (``qos_capacity``, Mcycles/s),
    every subtask still on it and, of those that left it, the ones the global manager
    asked about (it still has them running).

    Also what ``coalloc status`` shows of the node, so that ``status`` answers from the
    global manager's last reports and never waits on a node: ``incarnation``,
    ``model_time`` (model s of its last boundary), ``error`` (why its loop died; empty:
    it did not), ``counters`` (its cycle and report counters) and ``transport`` (its
    report sender's and command subscriber's counters, as they count them). No history:
    the ended subtasks it keeps for people stay on the node."""

    node: str
    loop_running: bool
    qos_capacity: float
    subtasks: tuple[SubtaskReport, ...] = ()
    incarnation: int | None = None
    model_time: float | None = None
    error: str = ""
    counters: Mapping[str, int] = field(default_factory=dict)
    transport: Mapping[str, Any] = field(default_factory=dict)
