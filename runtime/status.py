"""The status document and the other answers of the global manager, typed; how they are
built from the job table, the nodes' reports and the controller's view.

One set of pydantic models describes every document the global manager answers with:
:class:`StatusDocument` (``coalloc status --json``, ``GET /api/v1/status``), its
:class:`JobRecord` (``GET /api/v1/jobs/ID``), :class:`QueueRow` (``coalloc queue``),
:class:`SubmitAnswer` and :class:`CancelResult`. The global manager builds them here,
the HTTP API serves them (:func:`to_json`) and publishes their JSON Schema
(:func:`document_schemas`), and the command line and the Python client parse the JSON
back into the same models (:func:`parse_queue` and ``Model.model_validate``); the web
dashboard reads the same JSON.

The JSON keeps one shape per situation: a field a situation does not have is absent
from the document, not null (a finished job has no ``phase_difference``; a subtask that
has not ended has no ``finish_time`` in ``GET /jobs/ID``). The models keep that: a field
nobody set is left out by :func:`to_json` (pydantic's ``exclude_unset``), and a document
parsed from JSON sets exactly the fields it carried. Unknown fields are kept (a newer
server's document parses and prints whole).

The builders take typed records and return models; the global manager's service
(:class:`runtime.global_service.GlobalService`) calls them under its lock. Times are
model seconds unless a name says otherwise (``_s``: real seconds; ``_time``: a
wall-clock ISO 8601 time in UTC).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Literal, Protocol

from pydantic import BaseModel, ConfigDict, JsonValue, TypeAdapter, WithJsonSchema

from local_manager.reported_clock import slow_members
from runtime.jobs import JobInfo
from runtime.metrics import QueueGauges
from workloads.messages import PROGRESS_FIELDS, NodeReport, SubtaskPhase, SubtaskReport
from workloads.model import JobPhase, Node, QosClass

if TYPE_CHECKING:
    from global_manager.core import GlobalManagerCore
    from global_manager.pending_job import PendingReason
    from runtime.config import RuntimeConfig
    from runtime.timebase import TimeBase

#: A JSON value: what counters of the transports and ZAP hold (nested counts and flags).
Json = JsonValue
#: A JSON number as it was given: an integer stays one (a node's ``speed_mhz: 200`` is
#: served as ``200``, not ``200.0``); the schema says ``number``.
Number = Annotated[int | float, WithJsonSchema({"type": "number"})]


class Document(BaseModel):
    """Base of every document: the JSON keys are the field names; fields nobody set are
    left out of the JSON (:func:`to_json`); unknown keys are kept."""

    model_config = ConfigDict(extra="allow")


# ------------------------------------------------------------------------- records


class PendingReasonView(Document):
    """One constraint a pending job fails (:class:`~global_manager.flow_placement.
    PendingReason`): ``kind`` its ``ReasonKind`` value, ``subtask`` the subtask concerned
    (None: the job)."""

    kind: str
    message: str
    subtask: int | None = None


class SubtaskRecord(Document):
    """One subtask of a job's current run: as placed (``work`` Mcycles,
    ``relative_weight`` ``r_i``, ``expected_rate`` ``x_i`` Mcycles/s); how it ended
    (``state``, ``finish_time``, ``exit_code``, ``reason``: set once it ended, or in
    status from its last report); in status also its node's live figures (each set,
    None where not reported yet), the controller's virtual time and done flag while the
    run is tracked, and ``progress`` (0..1; None for a process subtask still running
    that reports none). A subtask whose application reports its progress
    (``docs/coupled.md``, "Progress") also has ``reported_time``, ``reported_end``,
    ``reported_fraction`` (then its ``progress``), ``reported_rate``,
    ``progress_reports``, ``progress_dropped`` (by reason), ``wait_s``, ``waiting`` and
    ``stalled`` (no report within the job's ``stall_after``, or a reported rate far
    below its partners'); one of a ``progress: reported`` job that reports its waits
    also ``useful_rate`` (Mcycles/s it uses outside its waits, smoothed),
    ``wait_fraction`` (0..1, smoothed) and ``useful_cap`` (Mcycles/s its node holds it
    to under pace control; None: none)."""

    index: int
    node: str
    work: Number
    relative_weight: Number
    expected_rate: Number
    executor: Literal["process", "synthetic"]
    state: SubtaskPhase | None = None
    finish_time: Number | None = None
    exit_code: int | None = None
    reason: str | None = None
    done_work: Number | None = None
    weight: Number | None = None
    virtual_weight: Number | None = None
    virtual_time: Number | None = None
    share: Number | None = None
    pid: int | None = None
    cpu_s: Number | None = None
    start_time: Number | None = None
    controller_virtual_time: Number | None = None
    controller_done: bool | None = None
    progress: Number | None = None
    reported_time: Number | None = None
    reported_end: Number | None = None
    reported_fraction: Number | None = None
    reported_rate: Number | None = None
    progress_reports: int | None = None
    progress_dropped: dict[str, int] | None = None
    wait_s: Number | None = None
    waiting: bool | None = None
    stalled: bool | None = None
    useful_rate: Number | None = None
    wait_fraction: Number | None = None
    useful_cap: Number | None = None


class JobPrivate(Document):
    """A job's private parts, shown only to its user and the admins
    (:mod:`runtime.identity`): each subtask's command (None: synthetic), the job's
    ``env`` and each subtask's own."""

    commands: list[list[str] | None]
    env: dict[str, str]
    subtask_env: list[dict[str, str]]


class JobRecord(Document):
    """One job as ``GET /jobs/ID`` and ``status`` show it. Always: its identity, state,
    ``reason``, times, windows (``overall_deviation`` ``E_t``, ``asynchrony`` ``A_t``),
    current run, attempts, ``history`` (one line per run that ended early), ``nodes``
    and ``subtasks``. A running job: ``dispatching`` (its calls to the other actors
    still out). A pending job: ``wait``, ``estimated_start`` (None: cannot be
    estimated), ``estimated_start_time`` and ``pending_reasons``. In status, a run the
    controller tracks: its phase figures (``phase_difference``, ``window``, ...); a run
    it closed: its closing figures (``mean_phase_difference``, ``turnaround``, ...).
    ``private`` (:class:`JobPrivate`): only for its user and the admins."""

    job_id: str
    name: str
    qos: QosClass
    user: str
    priority: int
    state: JobPhase
    reason: str
    submitted_at: Number
    start_at: Number | None = None
    finished_at: Number | None = None
    overall_deviation: Number | None = None
    asynchrony: Number | None = None
    run_id: str
    attempt: int = 1
    history: list[str] = []
    nodes: list[str] = []
    subtasks: list[SubtaskRecord] = []
    dispatching: bool | None = None
    wait: Number | None = None
    estimated_start: Number | None = None
    estimated_start_time: str | None = None
    pending_reasons: list[PendingReasonView] | None = None
    phase_difference: Number | None = None
    max_phase_difference: Number | None = None
    window_violation_fraction: Number | None = None
    mean_virtual: Number | None = None
    window: str | None = None
    rate_caps: list[Number] | None = None
    mean_phase_difference: Number | None = None
    completion_skew: Number | None = None
    turnaround: Number | None = None
    private: JobPrivate | None = None


class QueueRow(Document):
    """One line of ``coalloc queue``: a job not over yet, every field set. ``wait``:
    model s pending so far (a running job: pending before it started);
    ``pending_reasons`` and the estimated start: None for a running job."""

    job_id: str
    name: str
    qos: QosClass
    user: str
    priority: int
    state: JobPhase
    wait: Number | None
    reason: str | None
    nodes: list[str]
    attempt: int
    pending_reasons: list[PendingReasonView] | None
    start_at: Number | None
    estimated_start: Number | None
    estimated_start_time: str | None


class SubmitAnswer(Document):
    """A submission's answer for one job: admitted (running from ``start_at`` on
    ``nodes``), pending (``reason``: why it waits) or rejected (``reason``: why)."""

    job_id: str
    name: str
    admitted: bool
    pending: bool = False
    state: JobPhase | None = None
    reason: str = ""
    nodes: list[str] = []
    start_at: Number | None = None


class CancelResult(Document):
    """One job of a bulk cancel: ``result`` is ``cancelled``, ``already <state>``,
    ``skipped: ...`` or ``unknown job id`` (then only ``job_id`` is set); ``was``: its
    state before, ``state``: after."""

    job_id: str
    result: str
    name: str | None = None
    user: str | None = None
    was: str | None = None
    state: str | None = None


class NodeRecord(Document):
    """A node as the global manager holds it: speed (MHz), cores, labels, QoS budget,
    committed and load rates (Mcycles/s), ``health`` (``up``, ``stale``: out of
    placement, ``lost``: its gangs ended, with ``lost_reason``) and ``silent_cycles``
    since its manager last answered."""

    name: str
    speed_mhz: Number
    cores: Number
    labels: list[str]
    budget: Number
    committed: Number
    load: Number
    health: Literal["up", "stale", "lost"]
    lost_reason: str | None
    silent_cycles: Number


class NodeStatus(NodeRecord):
    """A node as ``status`` shows it: its record and what its last report says.
    ``answering`` while that report is fresh; ``error`` says why not (or its loop's
    error); ``report_age_s``: real s since it (None: never reported)."""

    ray_node_id: str | None
    emulated: bool
    ready: bool
    error: str | None
    answering: bool
    report_age_s: Number | None
    model_time: Number | None
    incarnation: int | None
    running_subtasks: int
    counters: dict[str, Json]
    transport: dict[str, Json]


class JobTable(Document):
    """The global manager's own view (no other actor asked): policy, queue mode, model
    time, nodes, jobs, its counters and its journal's error if it could not be read."""

    policy: str
    queue: str
    model_time: Number
    nodes: list[NodeRecord]
    jobs: list[JobRecord]
    global_counters: dict[str, int]
    journal_error: str | None


# ------------------------------------------------------------ the controller's view


class RunView(Document):
    """The controller's figures of one run (by run id): while tracked (``closed``
    false) its clocks and phase figures, once closed its summary."""

    qos: str | None = None
    closed: bool = False
    virtual_times: list[Number] | None = None
    done: list[bool] | None = None
    phase_difference: Number | None = None
    max_phase_difference: Number | None = None
    window_violation_fraction: Number | None = None
    mean_virtual: Number | None = None
    window: str | None = None
    rate_caps: list[Number] | None = None
    mean_phase_difference: Number | None = None
    completion_skew: Number | None = None
    turnaround: Number | None = None


class SecurityStatus(Document):
    """The transport's security: ``mode`` (``curve``, ``insecure``; ``unknown`` when
    neither the controller nor ``up``'s record says), refused handshakes, and, with
    CURVE, the ZAP counters and the server's public key (public by design)."""

    mode: str
    auth_failures: int | None = None
    refused: dict[str, int] | None = None
    spoofed_node: int | None = None
    zap: dict[str, Json] | None = None
    server_public_key: str | None = None


class ClockView(Document):
    """A real clock's state: ``offset_s`` (NTP offset, real s) and ``quality``; the
    controller's full clock adds its last sync (see :class:`clocks.real_clock.ClockStatus`)."""

    offset_s: Number | None
    quality: str | None
    server: str | None = None
    stratum: int | None = None
    last_sync: Number | None = None
    error: str | None = None
    sync_count: int | None = None
    failure_count: int | None = None
    delay_s: Number | None = None
    slew_remaining_s: Number | None = None


class ControllerView(Document):
    """What the controller's ``status`` answers (the fields the status document uses),
    or its placeholder (:func:`controller_placeholder`) when it did not answer."""

    error: str | None = None
    answering: bool = True
    running: bool | None = None
    report_endpoint: str | None = None
    command_endpoint: str | None = None
    phase_log: str | None = None
    period_time: Number | None = None
    clock: ClockView | None = None
    real_clock: ClockView | None = None
    counters: dict[str, int] = {}
    transport: dict[str, Json] = {}
    commands_transport: dict[str, Json] = {}
    dropped: dict[str, int] | None = None
    security: SecurityStatus | None = None
    jobs: dict[str, RunView] = {}


def controller_placeholder(error: str) -> ControllerView:
    """The controller's view when it did not answer: ``error`` says how."""
    return ControllerView(error=error, answering=False, jobs={}, counters={})


# ------------------------------------------------------------ the status document


class ControllerSummary(Document):
    running: bool | None
    error: str | None
    period_time: Number | None


class StatusCounters(Document):
    """Endpoints and counters: the controller's, its report (``transport``) and command
    channels', reports dropped by reason, and each local manager's (with its
    transport's)."""

    report_endpoint: str | None
    command_endpoint: str | None
    controller: dict[str, int]
    transport: dict[str, Json]
    commands_transport: dict[str, Json]
    dropped: dict[str, int]
    auth_failures: int | None
    local_managers: dict[str, dict[str, Json]]


class GlobalManagerStatus(Document):
    """The global manager itself: its API (or why it is not served), process, whether it
    recovered from its journal, and outcomes reconciliation applied."""

    api: str | None
    api_error: str | None
    pid: int
    recovered: bool
    reconciled: int
    journal: str | None


class StatusDocument(Document):
    """What ``coalloc status --json`` prints and ``GET /api/v1/status`` serves."""

    address: str | None
    policy: str
    queue: str | None
    journal_error: str | None
    global_counters: dict[str, int]
    time_scale: Number
    cycle: Number
    control_period: Number
    model_time: Number
    phase_log: str | None
    report_endpoint: str | None
    security: SecurityStatus
    clock: ClockView | None
    controller: ControllerSummary
    counters: StatusCounters
    nodes: list[NodeStatus]
    jobs: list[JobRecord]
    global_manager: GlobalManagerStatus | None = None


# ----------------------------------------------------------------- serialization

_QUEUE = TypeAdapter(list[QueueRow])
_ANSWERS = TypeAdapter(list[SubmitAnswer])
_CANCELS = TypeAdapter(list[CancelResult])

#: The documents whose JSON Schema the API publishes (``GET /api/v1/schema/NAME``).
DOCUMENTS = ("status", "job", "queue", "submit", "cancel")


def to_json(doc: Document) -> dict[str, Json]:
    """``doc`` as the JSON the API serves: the fields that were set, enums as values."""
    out: dict[str, Json] = doc.model_dump(mode="json", exclude_unset=True)
    return out


def document_schema(name: str) -> dict[str, Json] | None:
    """The JSON Schema (draft 2020-12, as pydantic writes it) of the document ``name``
    (one of :data:`DOCUMENTS`; None: no such document): ``status``
    (:class:`StatusDocument`), ``job`` (:class:`JobRecord`), ``queue`` (a list of
    :class:`QueueRow`), ``submit`` (a list of :class:`SubmitAnswer`), ``cancel`` (a
    list of :class:`CancelResult`)."""
    schema: dict[str, Json]
    if name == "status":
        schema = StatusDocument.model_json_schema(mode="serialization")
    elif name == "job":
        schema = JobRecord.model_json_schema(mode="serialization")
    elif name == "queue":
        schema = _QUEUE.json_schema(mode="serialization")
    elif name == "submit":
        schema = _ANSWERS.json_schema(mode="serialization")
    elif name == "cancel":
        schema = _CANCELS.json_schema(mode="serialization")
    else:
        return None
    return schema


def parse_queue(rows: object) -> list[QueueRow]:
    """``coalloc queue``'s rows from the API's JSON (or the actor's models)."""
    return _QUEUE.validate_python(rows)


def parse_answers(answers: object) -> list[SubmitAnswer]:
    return _ANSWERS.validate_python(answers)


def parse_cancels(results: object) -> list[CancelResult]:
    return _CANCELS.validate_python(results)


# ---------------------------------------------------------- views of the job table


def wall_time(base: TimeBase | None, model: float | None) -> str | None:
    """Model time ``model`` as a wall-clock ISO 8601 time in UTC (None if not known or
    there is no time base)."""
    if model is None or base is None:
        return None
    real = datetime.fromtimestamp(base.real_at(model), tz=timezone.utc)
    return real.isoformat(timespec="seconds")


def reasons_of(core: GlobalManagerCore, job_id: str) -> tuple[PendingReason, ...]:
    """Why the pending job ``job_id`` waits, one reason per constraint it fails."""
    try:
        return core.pending_reasons(job_id)
    except KeyError:
        return ()


def pending_reason(info: JobInfo, reasons: Sequence[PendingReason]) -> str:
    """A pending job's ``reason``: its reasons, one clause each (its recorded reason if
    it has none), with the last requeue's cause. Not its start estimate: a submission's
    answers do not walk the whole queue once per job."""
    if not reasons:
        return info.reason
    reason = "; ".join(r.message for r in reasons)
    if info.history:
        reason += f" (requeued: {info.history[-1]})"
    return reason


def submit_answer(info: JobInfo, core: GlobalManagerCore) -> SubmitAnswer:
    """A submission's answer for ``info``; a pending job's ``reason`` is why it waits,
    one clause per constraint it fails (as ``status JOB`` shows it)."""
    pending = info.state is JobPhase.PENDING
    running = info.state is JobPhase.RUNNING
    return SubmitAnswer(
        job_id=info.job_id,
        name=info.name,
        admitted=running,
        pending=pending,
        state=info.state,
        reason=pending_reason(info, reasons_of(core, info.job_id)) if pending else info.reason,
        nodes=[s.node for s in info.subtasks] if running else [],
        start_at=info.start_at,
    )


def job_record(
    info: JobInfo,
    core: GlobalManagerCore,
    now: float,
    base: TimeBase | None,
    dispatching: bool,
    starts: Mapping[str, float | None] | None = None,
) -> JobRecord:
    """Job ``info`` as ``GET /jobs/ID`` shows it (see :class:`JobRecord`). ``now``: model
    s; ``base``: the clock's time base (wall-clock times); ``dispatching``: its current
    run's calls are still out; ``starts``: every pending job's estimated start (model s),
    needed for a pending job."""
    rec = dict(info.to_dict())
    if info.state is JobPhase.RUNNING:
        rec["dispatching"] = dispatching
    elif info.state is JobPhase.PENDING:
        reasons = reasons_of(core, info.job_id)
        est = (starts or {}).get(info.job_id)
        rec.update(
            wait=now - info.waiting_since,
            estimated_start=est,
            estimated_start_time=wall_time(base, est),
            pending_reasons=[{"kind": r.kind.value, "message": r.message,
                              "subtask": r.subtask} for r in reasons],
            reason=pending_reason(info, reasons),
        )
    return JobRecord.model_validate(rec)


def queue_order(jobs: Iterable[JobInfo]) -> list[JobInfo]:
    """The jobs not over yet, pending first in the order they would be placed (priority,
    then how long they waited), then running."""
    live = [i for i in jobs if not i.state.final]
    live.sort(key=lambda i: (i.state is not JobPhase.PENDING, -i.priority, i.waiting_since,
                             i.job_id))
    return live


def queue_row(info: JobInfo, rec: JobRecord, now: float) -> QueueRow:
    """``coalloc queue``'s line of a job not over yet, from its record."""
    wait = rec.wait
    if info.state is JobPhase.RUNNING:
        wait = (info.start_at or now) - info.waiting_since
    # Every field is set from the record's, already checked: nothing to validate again.
    return QueueRow.model_construct(
        job_id=rec.job_id, name=rec.name, qos=rec.qos, user=rec.user, priority=rec.priority,
        state=rec.state, wait=wait, reason=rec.reason, nodes=rec.nodes, attempt=rec.attempt,
        pending_reasons=rec.pending_reasons, start_at=rec.start_at,
        estimated_start=rec.estimated_start, estimated_start_time=rec.estimated_start_time,
    )


def node_health(name: str, lost: Mapping[str, str], down: Iterable[str]) -> \
        Literal["up", "stale", "lost"]:
    """``lost`` (its gangs were ended), ``stale`` (out of placement) or ``up``."""
    if name in lost:
        return "lost"
    return "stale" if name in down else "up"


def node_record(
    node: Node, core: GlobalManagerCore, lost: Mapping[str, str], silent_cycles: float,
) -> NodeRecord:
    """Node ``node`` as the global manager holds it (see :class:`NodeRecord`)."""
    return NodeRecord(
        name=node.name,
        speed_mhz=node.speed_mhz,
        cores=node.cores,
        labels=sorted(node.labels),
        budget=core.budget(node.name),
        committed=core.committed[node.name],
        load=core.load[node.name],
        health=node_health(node.name, lost, core.down),
        lost_reason=lost.get(node.name),
        silent_cycles=silent_cycles,
    )


def queue_gauges(
    jobs: Iterable[JobInfo], nodes: Iterable[Node], lost: Mapping[str, str],
    down: Iterable[str], now: float,
) -> QueueGauges:
    """Queue length, running jobs, the oldest pending job's wait (model s) and each
    node's health, for the metrics (cheap: no pending reasons are worked out)."""
    pending = 0
    running = 0
    oldest = 0.0
    for info in jobs:
        if info.state is JobPhase.PENDING:
            pending += 1
            oldest = max(oldest, now - info.waiting_since)
        elif info.state is JobPhase.RUNNING:
            running += 1
    down = set(down)
    return QueueGauges(
        pending=pending, running=running, oldest_wait=oldest,
        node_health=tuple((n.name, node_health(n.name, lost, down)) for n in nodes),
    )


# --------------------------------------------------------- assembling the document


class Heard(Protocol):
    """A node's last report and its age (:class:`runtime.node_health.HeardReport`)."""

    @property
    def report(self) -> NodeReport: ...

    @property
    def age_s(self) -> float: ...

    @property
    def fresh(self) -> bool: ...


#: The live fields of a subtask's last report that ``status`` shows on its subtask.
LIVE_FIELDS = ("done_work", "weight", "virtual_weight", "virtual_time", "share", "pid",
               "cpu_s", "start_time")


def node_status(
    node: NodeRecord,
    heard: Heard | None,
    placement: tuple[str | None, bool],
    error: str | None = None,
) -> NodeStatus:
    """One node as ``status`` shows it: ``node`` (the global manager's record of it)
    with what its last report says (``heard``; None: it has not reported since this
    global manager started). A node is ``answering`` while its last report is fresh
    (:data:`~runtime.global_service.REPORT_FRESH_S`); one that is not shows its last
    report's figures, ``answering`` false and an ``error`` saying so (``error``: why its
    last report call failed, if it did). ``placement``: (Ray node id, emulated)."""
    ray_id, emulated = placement
    rep = heard.report if heard is not None else None
    answering = heard is not None and heard.fresh
    if heard is None:
        why: str | None = "not answering (no report since the global manager started)"
    elif not answering:
        why = f"not answering (no report for {heard.age_s:.0f} s)"
    else:
        why = (rep.error or None) if rep is not None else None
    if why is not None and not answering and error and error != "no answer":
        why += f"; last call: {error}"
    return NodeStatus(
        **node.model_dump(),
        ray_node_id=ray_id,
        emulated=emulated,
        ready=answering and rep is not None and rep.loop_running and not rep.error
        and node.health == "up",
        error=why,
        answering=answering,
        report_age_s=heard.age_s if heard is not None else None,
        model_time=rep.model_time if rep is not None else None,
        incarnation=rep.incarnation if rep is not None else None,
        running_subtasks=0 if rep is None else sum(
            1 for s in rep.subtasks if s.state is SubtaskPhase.RUNNING),
        counters=dict(rep.counters) if rep is not None else {},
        transport=dict(rep.transport) if rep is not None else {},
    )


def with_live(sub: SubtaskRecord, live: SubtaskReport | None) -> dict[str, object]:
    """The fields a subtask's last report puts on its record ``sub``: every live field
    (None where not known: also for a subtask its node has not reported yet, placed
    less than a monitor round ago); its state, exit code and reason only where the job
    table has none."""
    out: dict[str, object] = {}
    if live is None:
        for key in (*LIVE_FIELDS, "state", "reason"):
            if key not in sub.model_fields_set:
                out[key] = None
        return out
    for key in LIVE_FIELDS:
        value = getattr(live, key)
        if value is not None or key not in sub.model_fields_set:
            out[key] = value
    for key in PROGRESS_FIELDS:  # only where the subtask has reported progress
        value = getattr(live, key)
        if value is not None:
            out[key] = value
    if sub.state is None:
        out["state"] = live.state
    if sub.exit_code is None and live.exit_code is not None:
        out["exit_code"] = live.exit_code
    if sub.reason is None:
        out["reason"] = live.reason
    return out


def _progress(sub: SubtaskRecord) -> float | None:
    if sub.state is SubtaskPhase.FINISHED:
        return 1.0
    if sub.reported_fraction is not None:
        return float(sub.reported_fraction)
    if sub.executor == "synthetic" and sub.work:
        return min(1.0, float(sub.done_work or 0.0) / float(sub.work))
    return None


#: The controller's figures a job carries while its run is tracked, and once closed.
TRACKED_FIGURES = ("phase_difference", "max_phase_difference", "window_violation_fraction",
                   "mean_virtual", "window", "rate_caps")
CLOSED_FIGURES = ("mean_phase_difference", "max_phase_difference", "completion_skew",
                  "turnaround", "window_violation_fraction")


def _mark_slow(subs: list[SubtaskRecord]) -> None:
    """A running member whose reported rate is far below its partners' is ``stalled``
    (:func:`local_manager.reported_clock.slow_members`)."""
    if sum(s.reported_rate is not None for s in subs) < 2:
        return
    rates = [float(s.reported_rate) if s.reported_rate is not None
             and s.state is SubtaskPhase.RUNNING else None for s in subs]
    for sub, slow in zip(subs, slow_members(rates)):
        if slow:
            sub.stalled = True


def job_status(
    job: JobRecord, view: RunView | None,
    subtask_reports: Mapping[tuple[str, int], SubtaskReport],
) -> JobRecord:
    """Job ``job`` as ``status`` shows it: each subtask with its last report's live
    fields, the controller's clocks and its progress; the job with the controller's
    figures of its run (``view``; None: the controller has none, or the job is
    pending)."""
    if view is None and not job.subtasks:
        return job  # a pending job: nothing to add
    tvs = view.virtual_times if view is not None else None
    subs = []
    for s in job.subtasks:
        update = with_live(s, subtask_reports.get((job.run_id, s.index)))
        if view is not None and tvs is not None and s.index < len(tvs) and not view.closed:
            update["controller_virtual_time"] = tvs[s.index]
            update["controller_done"] = bool((view.done or [])[s.index])
        sub = s.model_copy(update=update)
        sub.progress = _progress(sub)  # set on the copy: it counts as set
        subs.append(sub)
    _mark_slow(subs)
    figures: dict[str, object] = {"subtasks": subs}
    if view is not None:
        for key in CLOSED_FIGURES if view.closed else TRACKED_FIGURES:
            figures[key] = getattr(view, key)
    return job.model_copy(update=figures)


def assemble_status(
    table: JobTable,
    heard: Mapping[str, Heard],
    subtask_reports: Mapping[tuple[str, int], SubtaskReport],
    ctl: ControllerView,
    placements: Sequence[tuple[Node, str, bool]],
    config: RuntimeConfig,
    address: str | None,
    phase_log: str | None,
    security_mode: str,
    job_id: str | None = None,
    errors: Mapping[str, str] | None = None,
) -> StatusDocument:
    """The document ``coalloc status --json`` prints, from typed records: the global
    manager's job table and nodes (``table``: :meth:`GlobalService.describe`), each
    node's last report (``heard``) and each subtask's (``subtask_reports``; both
    :meth:`GlobalService.heard`), and the controller's view (``ctl``; its placeholder
    when it did not answer). ``address``, ``phase_log`` and ``security_mode``: what
    ``up`` recorded, shown when the controller does not say. ``errors``: why a node's
    last report call failed."""
    placement = {node.name: (ray_id, emulated) for node, ray_id, emulated in placements}
    errs = errors or {}
    nodes = [node_status(n, heard.get(n.name), placement.get(n.name, (None, False)),
                         errs.get(n.name))
             for n in table.nodes]
    jobs = []
    for j in table.jobs:
        if job_id is not None and j.job_id != job_id:
            continue
        view = ctl.jobs.get(j.run_id) if j.state is not JobPhase.PENDING else None
        jobs.append(job_status(j, view, subtask_reports))
    transport = ctl.transport
    security = ctl.security
    if security is None:  # the controller did not answer: what up recorded
        security = SecurityStatus(mode=security_mode, auth_failures=None)
    dropped = ctl.dropped
    if dropped is None:
        raw = transport.get("dropped")
        dropped = {str(k): int(v) for k, v in raw.items() if isinstance(v, (int, float))} \
            if isinstance(raw, dict) else {}
    counters = StatusCounters(
        report_endpoint=ctl.report_endpoint,
        command_endpoint=ctl.command_endpoint,
        controller=ctl.counters,
        transport=transport,
        commands_transport=ctl.commands_transport,
        dropped=dropped,
        auth_failures=security.auth_failures,
        local_managers={n.name: dict(n.counters, transport=n.transport) for n in nodes},
    )
    return StatusDocument(
        address=address,
        policy=table.policy,
        queue=table.queue,
        journal_error=table.journal_error,
        global_counters=table.global_counters,
        time_scale=config.time_scale,
        cycle=config.cycle,
        control_period=config.control_period,
        model_time=table.model_time,
        phase_log=ctl.phase_log or phase_log,
        report_endpoint=ctl.report_endpoint,
        security=security,
        clock=ctl.real_clock or ctl.clock,
        controller=ControllerSummary(running=ctl.running, error=ctl.error,
                                     period_time=ctl.period_time),
        counters=counters,
        nodes=nodes,
        jobs=jobs,
    )
