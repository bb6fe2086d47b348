"""The deterministic discrete-time simulator: drives the scheduling core (global manager
core, one local scheduler per node, the controller core) with a :class:`ManualClock`.

Each step: submit the jobs that have arrived, run one local scheduling cycle on every
busy node, feed the progress reports to the controller, release finished subtasks, and
every ``control_every`` cycles run a control period whose re-weight commands go back to
the local schedulers. When the grid is empty the clock jumps to the cycle boundary at or
after the next arrival. One seeded RNG per run; the same inputs give the same bytes out.

Two ways through a cycle give the same bytes: the reference
(``SimConfig.step_every_cycle``) drives every node and the controller through their
public per-cycle path (:meth:`LocalScheduler.step`, which splits every cycle afresh,
progress report records, :meth:`ControllerCore.ingest`) as the live runtime does; the
default takes the schedulers' lean path (:mod:`local_manager.replay`:
:meth:`ReplayingScheduler.step_lean`, the model's booking loop with its figures handed to
:meth:`ControllerCore.ingest_progress` without records). Each node replays its last split
while nothing that decides it changed (a countdown, not a test every cycle) and through
cycles in which entries near their end move their caps when the split is shown to be the
same to the bit (``SimConfig.replay_near_end``). ``SimConfig.fast_forward`` (on by
default) also replays whole quiet stretches of the grid (:func:`_replay_stretch`): the
clocks summed cycle by cycle and every control period checked on them, so the bytes stay
stepping's.

Coupled jobs (:attr:`JobSpec.coupling`; :mod:`global_manager.coupling`) make a run
step every cycle through the reference path, in two halves: every busy node splits its
CPU (:meth:`LocalScheduler.plan`), each coupled job plays its exchanges on its members'
grants, members that block at an exchange have their demand lowered to what they can do
and their nodes split again (a few passes), and then every node books its split with the
coupled members' useful work as their work done (:meth:`LocalScheduler.commit`'s
``measured``): what a spinning member got beyond it is CPU spent spinning, never progress.
A run with no coupled job takes the paths above unchanged, so its bytes are the same.

With ``SimConfig.queue == "wait"`` strict jobs that do not fit wait in the global
manager's pending queue; each step, after the arrivals, one placement cycle
(:meth:`GlobalManagerCore.place_pending`) places what fits and expires what waited past
its ``max_wait``. Fast-forwarded stretches end at the next expiry; a pending job can
only start when a subtask finishes or a job arrives or expires, and those end a
stretch too. A job still pending when the run ends (``max_time``, or nothing left that
could free capacity) ends in state ``pending``.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from clocks.base import ManualClock
from coallocator.core import ControllerCore
from coallocator.phase_log import PeriodRecord, SummaryRecord, to_json_line
from global_manager.config import SimConfig
from global_manager.core import Admission, GlobalManagerCore, QueueMode
from global_manager.coupling import CoupledJob, Member
from global_manager.engine import apply_commands, control_cycle, node_cycle, start_run
from global_manager.policies import Policy, get_policy
from local_manager.replay import ReplayingScheduler
from local_manager.scheduler import WORK_EPSILON, CycleResult, Key, Split
from workloads.messages import JobRegistration
from workloads.model import JobPhase, JobSpec, QosClass, QueueName, Subtask, WaitMode, Workload
from workloads.native import picklable_frozen_records


@dataclass(frozen=True, slots=True)
class JobResult:
    """One job's outcome. Times in seconds; phase differences over the control periods
    with at least two running subtasks."""

    job_id: str
    name: str
    qos: str
    subtasks: int
    arrival: float
    admitted: bool
    reason: str
    completed: bool
    mean_phase_difference: float | None
    max_phase_difference: float | None
    completion_skew: float | None
    turnaround: float | None
    nodes: tuple[str, ...] = ()
    #: Control periods with >= 2 running subtasks, and of those the ones in which the
    #: phase difference exceeded ``A_t`` / ``|mean T_V - T_R|`` exceeded ``E_t``.
    control_periods: int = 0
    window_violations: int = 0
    overall_violations: int = 0
    #: Placement time minus arrival (s), for jobs that were placed.
    wait: float | None = None
    #: completed, running (cut by max_time), pending, expired or rejected.
    state: str = ""
    user: str = "default"
    #: The first estimate of its start (s, :meth:`GlobalManagerCore.start_estimates`),
    #: made when it was still pending after its arrival's placement cycle; None if it
    #: never waited or could not be estimated.
    estimated_start: float | None = None


@dataclass(frozen=True, slots=True)
class RunResult:
    """Everything a run produced: per-job results, per-node utilisation (CPU used by
    subtasks over CPU offered, 0..1), the end time (s) and cycle count;
    ``qos_utilization``: CPU used by grid QoS subtasks over the QoS queue's share of the
    CPU offered (0..1, grid-wide); ``idle_virtual_fraction``: CPU won by virtual subtasks
    and left idle over CPU offered (0..1, grid-wide)."""

    policy: str
    seed: int
    jobs: tuple[JobResult, ...]
    utilization: dict[str, float]
    end_time: float
    cycles: int
    records: tuple[PeriodRecord | SummaryRecord, ...] = field(default=())
    qos_utilization: float = 0.0
    idle_virtual_fraction: float = 0.0
    #: Placement cycles run (``queue: wait``; cycles with nothing new are skipped), and
    #: the wall time all calls took (s; measured, so not part of :meth:`to_json`).
    placement_cycles: int = 0
    placement_seconds: float = 0.0
    #: Runs with coupled jobs only (``None`` otherwise).
    coupling: CouplingTotals | None = None

    def to_json(self) -> str:
        """Deterministic JSON of the results (without the log records and wall times)."""
        d = asdict(self)
        d.pop("records")
        d.pop("placement_seconds")
        if d["coupling"] is None:
            d.pop("coupling")
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    def strict_completed(self, min_subtasks: int = 2) -> list[JobResult]:
        """Completed strict jobs with at least ``min_subtasks`` subtasks (the paper's
        population for phase-difference averages)."""
        return [
            j for j in self.jobs if j.qos == "strict" and j.completed and j.subtasks >= min_subtasks
        ]


@dataclass(frozen=True, slots=True)
class CouplingTotals:
    """CPU (Mcycles, grid-wide, the whole run or up to ``max_time``) of a run with coupled
    jobs: what coupled members spent spinning at exchanges (granted, used, no progress),
    what blocked members were granted and left unused in a cycle the blocking passes did
    not settle, and what the grid-local and best-effort queues' entries got."""

    spin_cpu: float = 0.0
    blocked_cpu: float = 0.0
    local_cpu: float = 0.0
    best_effort_cpu: float = 0.0


ProgressFn = Callable[[float], None]

#: Splits per node and cycle at most when coupled members block: each pass lowers the
#: demand of the members that would wait (their share goes to the node's other work).
_BLOCK_PASSES = 4

_QOS = QueueName.QOS


def simulate(
    workload: Workload,
    policy: Policy | str,
    seed: int = 0,
    config: SimConfig | None = None,
    log_path: str | Path | None = None,
    keep_records: bool = False,
    progress: ProgressFn | None = None,
) -> RunResult:
    """Run ``workload`` under ``policy`` with one RNG seeded by ``seed``.

    ``log_path`` gets the phase-difference log (JSON Lines); ``keep_records`` keeps the
    records in the result too. ``progress`` is called with the fraction of arrivals
    processed (0..1) now and then.
    """
    cfg = config or SimConfig()
    pol = get_policy(policy) if isinstance(policy, str) else policy
    rng = random.Random(seed)
    clock = ManualClock(0.0)
    records: list[PeriodRecord | SummaryRecord] = []
    log_fh = None
    if log_path is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        log_fh = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 - closed in finally

    def sink(rec: PeriodRecord | SummaryRecord) -> None:
        if keep_records:
            records.append(rec)
        if log_fh is not None:
            log_fh.write(to_json_line(rec) + "\n")

    qos_share = cfg.qos_share
    gm = GlobalManagerCore(workload.nodes, pol, cfg.global_config(), rng)
    waits = cfg.queue is QueueMode.WAIT
    placement_seconds = 0.0
    local_cfg = cfg.local_config(pol)
    schedulers = {n.name: ReplayingScheduler(n, local_cfg) for n in workload.nodes}
    for sched in schedulers.values():
        sched.replay_near_end = cfg.replay_near_end
    ctl = ControllerCore(
        pol.controller_config,
        pol.controller,
        gm.node_budgets(),
        sink if (keep_records or log_fh is not None) else None,
        cfg.log_every,
        cfg.cycle * cfg.control_every,
    )

    results: dict[str, _Outcome] = {}
    used = {n.name: 0.0 for n in workload.nodes}
    used_qos = virtual_idle = 0.0  # Mcycles, grid-wide
    jobs = sorted(workload.jobs, key=lambda j: j.arrival)
    next_job = 0
    cycles = 0
    q = cfg.cycle
    active = 0  # subtasks placed and not finished
    # Coupled jobs step every cycle (the module docstring).
    coupled_run = any(j.coupling is not None for j in workload.jobs)
    stepping = cfg.step_every_cycle or coupled_run
    couplings: dict[str, CoupledJob] = {}
    totals = [0.0, 0.0, 0.0, 0.0]  # CouplingTotals' fields, in order
    sentinel: list[ReplayingScheduler] = []  # _quiet_span's first node to ask
    measures = gm.measures_capacity
    ingest = ctl.ingest_progress
    try:
        while True:
            now = clock.now()
            admitted_before = next_job
            if measures:
                # At each boundary, as the live global manager hears each node's status:
                # work admitted at this boundary is measured at the next one. Queues that
                # are not work-conserving measure their share, always the same: once is
                # enough (observing an unchanged rate does nothing).
                _observe_capacity(gm, schedulers, q)
                measures = cfg.work_conserving
            while next_job < len(jobs) and jobs[next_job].arrival <= now:
                active += _admit(jobs[next_job], now, gm, schedulers, ctl, results, couplings)
                next_job += 1
            if progress is not None and next_job // 64 > admitted_before // 64:
                progress(next_job / len(jobs))
            if waits and gm.pending:
                t0 = time.perf_counter()
                cyc = gm.place_pending(now)
                placement_seconds += time.perf_counter() - t0
                for adm in cyc.placed:
                    active += _start(results[adm.job_id], adm, now, schedulers, ctl, couplings)
                for adm in cyc.expired:
                    results[adm.job_id].admission = adm
                _first_estimates(gm, now, results)
            expiry = gm.next_expiry() if waits else None
            if active == 0:
                nxt = jobs[next_job].arrival if next_job < len(jobs) else math.inf
                if expiry is not None:
                    nxt = min(nxt, expiry)
                if not math.isfinite(nxt):
                    break
                # Idle grid: jump to the cycle boundary at or after the next event (for a
                # subnormal time nxt / q underflows to 0: step once more so it is reached).
                boundary = math.ceil(nxt / q) * q
                if boundary < nxt:
                    boundary += q
                clock.set(max(now + (q if nxt <= now else 0.0), boundary))
                continue
            if cfg.max_time is not None and now >= cfg.max_time:
                break
            span = (
                0 if stepping
                else _quiet_span(now, q, cycles, cfg, schedulers, ctl, jobs, next_job, expiry,
                                 sentinel)
            )
            if span >= 2:
                # Nothing would change for ``span`` cycles: replay what stays quiet.
                replayed, used_qos, virtual_idle = _replay_stretch(
                    now, q, span, cfg.control_every, schedulers, ctl, clock, used, used_qos,
                    virtual_idle,
                )
                if replayed:
                    cycles += replayed
                    continue
            end = clock.advance(q)
            cycles += 1
            if not stepping:
                # The same cycle as below through the schedulers' lean path: the same
                # arithmetic in the same order, without the grant and report records.
                for name, sched in schedulers.items():
                    if not len(sched):
                        continue
                    lean = sched.step_lean(end, q)
                    used[name] += lean.used
                    if lean.qos_granted:
                        used_qos += math.fsum(lean.qos_granted)
                    virtual_idle += lean.virtual_idle
                    for queue, job_id, index, x, _g, w, tv, done, a in lean.rows:
                        if queue is _QOS:
                            ingest(job_id, index, end, tv, x, w, a, done)
                    for key in lean.finished:
                        sched.remove(key)
                        active -= 1
                        if gm.subtask_finished(*key):
                            results[key[0]].completed_at = end
                if cycles % cfg.control_every == 0:
                    control_cycle(
                        ctl, end, lambda cmd: apply_commands(schedulers[cmd.node], (cmd,))
                    )
                continue
            cycle_results = (
                _coupled_cycle(end, q, schedulers, couplings, totals) if couplings else None
            )
            for name, sched in schedulers.items():
                unused = 0.0
                if cycle_results is not None:
                    stepped, unused = cycle_results.get(name, (None, 0.0))
                else:
                    # Commands were applied when they were sent (an in-memory channel).
                    stepped, _ = node_cycle(sched, (), end, q)
                if stepped is None:
                    continue
                if coupled_run:
                    _other_cpu(stepped, totals)
                used[name] += stepped.used - unused
                used_qos += _qos_used(stepped) - unused
                virtual_idle += stepped.virtual_idle
                for rep in stepped.reports:
                    ctl.ingest(rep)
                for key in stepped.finished:
                    sched.remove(key)
                    active -= 1
                    job_done = gm.subtask_finished(*key)
                    if job_done:
                        results[key[0]].completed_at = end
                        couplings.pop(key[0], None)
            if cycles % cfg.control_every == 0:
                control_cycle(ctl, end, lambda cmd: apply_commands(schedulers[cmd.node], (cmd,)))
        ctl.finish_all()
    finally:
        if log_fh is not None:
            log_fh.close()
    if progress is not None:
        progress(1.0)

    end_time = clock.now()
    job_results = tuple(_job_result(results[jid], ctl, gm) for jid in sorted(results))
    # Utilisation over the whole run, idle stretches included.
    horizon = {n.name: n.cpu_rate * end_time for n in workload.nodes}
    util = {n: (used[n] / horizon[n] if horizon[n] > 0 else 0.0) for n in sorted(used)}
    offered = math.fsum(horizon.values())
    return RunResult(
        pol.name,
        seed,
        job_results,
        util,
        end_time,
        cycles,
        tuple(records),
        qos_utilization=used_qos / (qos_share * offered) if offered > 0 else 0.0,
        idle_virtual_fraction=virtual_idle / offered if offered > 0 else 0.0,
        placement_cycles=gm.cycles_run,
        placement_seconds=placement_seconds,
        coupling=CouplingTotals(*totals) if coupled_run else None,
    )


def _coupled_cycle(
    end: float,
    q: float,
    schedulers: dict[str, ReplayingScheduler],
    couplings: dict[str, CoupledJob],
    totals: list[float],
) -> dict[str, tuple[CycleResult, float]]:
    """One cycle of every busy node with coupled jobs running (the module docstring):
    per node, its cycle result and the CPU its blocked members were granted and left
    unused (Mcycles). Adds what was spun and left unused to ``totals``
    (:class:`CouplingTotals`' fields, in order)."""
    busy = {name: sched for name, sched in schedulers.items() if len(sched)}
    splits: dict[str, Split] = {name: sched.plan(end, q) for name, sched in busy.items()}

    def grants(job: CoupledJob) -> list[float]:
        return [
            splits[m.node].granted.get(m.key, 0.0) if m.node in splits else 0.0
            for m in job.members
        ]

    blocking = [job for job in couplings.values() if job.wait is WaitMode.BLOCK]
    limits: dict[str, dict[Key, float]] = {}
    for _ in range(_BLOCK_PASSES - 1):
        changed: dict[str, None] = {}  # nodes to split again, in a fixed order
        for job in blocking:
            got = grants(job)
            for m, g, w in zip(job.members, got, job.useful(got, q)):
                if g - w > WORK_EPSILON:
                    limits.setdefault(m.node, {})[m.key] = w
                    changed[m.node] = None
        if not changed:
            break
        for name in changed:
            sched = busy[name]
            sched.limit_demand(limits[name])
            splits[name] = sched.plan(end, q)
            sched.limit_demand(None)

    measured: dict[str, dict[Key, float]] = {}
    unused: dict[str, float] = {}
    for job in couplings.values():
        got = grants(job)
        spins = job.wait is WaitMode.SPIN
        for m, g, w in zip(job.members, got, job.advance(got, q)):
            if m.node not in splits:
                continue
            measured.setdefault(m.node, {})[m.key] = w
            if g > w:
                if spins:
                    totals[0] += g - w
                else:
                    totals[1] += g - w
                    unused[m.node] = unused.get(m.node, 0.0) + (g - w)
    return {
        name: (sched.commit(end, q, splits[name], measured.get(name)), unused.get(name, 0.0))
        for name, sched in busy.items()
    }


def _other_cpu(res: CycleResult, totals: list[float]) -> None:
    """Add what one node's grid-local and best-effort entries got in a cycle to
    ``totals`` (:class:`CouplingTotals`' fields, in order)."""
    for grant in res.grants:
        if grant.queue is QueueName.LOCAL:
            totals[2] += grant.granted_work
        elif grant.queue is QueueName.BEST_EFFORT:
            totals[3] += grant.granted_work


def _qos_used(res: CycleResult) -> float:
    """CPU (Mcycles) the grid QoS subtasks of one node used in a cycle result."""
    return math.fsum(g.granted_work for g in res.grants if g.queue is QueueName.QOS)


def _replay_stretch(
    now: float,
    q: float,
    span: int,
    control_every: int,
    schedulers: dict[str, ReplayingScheduler],
    ctl: ControllerCore,
    clock: ManualClock,
    used: dict[str, float],
    used_qos: float,
    virtual_idle: float,
) -> tuple[int, float, float]:
    """Replay up to ``span`` quiet cycles from ``now`` (s) in one go, with stepping's
    bytes: every node's clocks are summed cycle by cycle (previewed, then booked by
    :meth:`ReplayingScheduler.fast_forward` with the same arithmetic), the controller checks
    each period on those exact clocks (:meth:`ControllerCore.stretch_quiet_periods`) and
    the stretch ends before the first period that would decide something; the
    utilisation sums are added cycle by cycle, node by node, as stepping adds them.
    Returns the cycles replayed (0: none, step) and the new QoS-used and virtual-idle
    sums (Mcycles)."""
    times: list[float] = []
    t = now
    for _ in range(span):
        t += float(q)  # ManualClock.advance's sum
        times.append(t)
    busy = [(name, sched) for name, sched in schedulers.items() if len(sched)]
    previews: dict[tuple[str, int], tuple[list[float], list[float], float, float]] = {}
    for _, sched in busy:
        previews.update(sched.preview_qos_clocks(times))
    ce = control_every
    clocks = {key: p[0][ce - 1::ce] for key, p in previews.items()}
    periods = ctl.stretch_quiet_periods(times[ce - 1::ce][: span // ce], clocks)
    replayed = periods * ce
    if replayed < 2:
        return 0, used_qos, virtual_idle
    totals = [(name, sched.last_cycle_totals()) for name, sched in busy]
    end = now
    for _ in range(replayed):
        end = clock.advance(q)
    ctl.fast_forward_stretch(times[ce - 1::ce][:periods], clocks)
    for _, sched in busy:
        sched.fast_forward(replayed, q)
    for _ in range(replayed):
        for name, (u, qos_used, idle) in totals:
            used[name] += u
            if qos_used is not None:
                used_qos += qos_used
            virtual_idle += idle
    last = replayed - 1
    for (job_id, index), (tvs, xs, g, a) in previews.items():
        ctl.ingest_progress(job_id, index, end, tvs[last], xs[last], g, a, False)
    return replayed, used_qos, virtual_idle


def _quiet_span(
    now: float,
    q: float,
    cycles: int,
    cfg: SimConfig,
    schedulers: dict[str, ReplayingScheduler],
    ctl: ControllerCore,
    jobs: list[JobSpec],
    next_job: int,
    expiry: float | None = None,
    sentinel: list[ReplayingScheduler] | None = None,
) -> int:
    """How many cycles from ``now`` can be replayed without changing any decision: no
    arrival, no expiry, no finish, no re-weighting, and no control window firing before
    their end.
    A multiple of ``control_every``; 0 or 1 means step normally. ``sentinel``: a list
    holding the node whose quiet test answered < 2 last (asked first, then updated)."""
    if sentinel is None:
        sentinel = []
    ce = cfg.control_every
    if not cfg.fast_forward or cycles % ce:
        return 0
    if sentinel:
        # The node that ended the last test first: it usually still does (the answer is
        # the same whichever node is asked first).
        sched = sentinel[0]
        if len(sched) and sched.quiet_cycles(q) < 2:
            return 0
    span = 1 << 30
    for sched in schedulers.values():
        if len(sched):
            span = min(span, sched.quiet_cycles(q))
            if span < 2:
                sentinel[:] = [sched]
                return 0
    if next_job < len(jobs):
        span = min(span, math.ceil((jobs[next_job].arrival - now) / q))
    if cfg.max_time is not None:
        span = min(span, math.ceil((cfg.max_time - now) / q))
    if expiry is not None:
        span = min(span, math.ceil((expiry - now) / q))
    periods = span // ce
    if periods < 1:
        return 0
    return ctl.quiet_periods(now, q * ce, periods) * ce


@dataclass(slots=True)
class _Outcome:
    """What the simulator keeps per submitted job until the run ends."""

    spec: JobSpec
    admission: Admission
    completed_at: float | None = None
    estimated: bool = False
    estimated_start: float | None = None


def _observe_capacity(
    gm: GlobalManagerCore, schedulers: dict[str, ReplayingScheduler], cycle: float
) -> None:
    """Feed admission the QoS capacity each node measures now (Mcycles/s): what the
    live local managers report in their status."""
    for name, sched in schedulers.items():
        gm.observe_qos_capacity(name, sched.qos_capacity(cycle))


def _first_estimates(gm: GlobalManagerCore, now: float, results: dict[str, _Outcome]) -> None:
    """Record the first start estimate of every job newly in the pending queue."""
    new = [results[j] for j in gm.pending if not results[j].estimated]
    if not new:
        return
    starts = gm.start_estimates(now)
    for out in new:
        out.estimated = True
        out.estimated_start = starts.get(out.admission.job_id)


def _admit(
    spec: JobSpec,
    now: float,
    gm: GlobalManagerCore,
    schedulers: dict[str, ReplayingScheduler],
    ctl: ControllerCore,
    results: dict[str, _Outcome],
    couplings: dict[str, CoupledJob],
) -> int:
    adm = gm.submit(spec, now)
    out = results[adm.job_id] = _Outcome(spec, adm)
    if not adm.admitted:
        return 0
    return _start(out, adm, now, schedulers, ctl, couplings)


def _start(
    out: _Outcome,
    adm: Admission,
    now: float,
    schedulers: dict[str, ReplayingScheduler],
    ctl: ControllerCore,
    couplings: dict[str, CoupledJob],
) -> int:
    """Hand a placed job's subtasks to their nodes and the controller (and a coupled
    job's members to their exchanges)."""
    out.admission = adm
    spec = out.spec
    if spec.coupling is not None and len(adm.subtasks) >= 2:
        couplings[adm.job_id] = CoupledJob(
            [Member(s.job_id, s.index, s.node, s.work, s.expected_rate) for s in adm.subtasks],
            spec.coupling,
            spec.wait,
        )
    grid = spec.qos in (QosClass.STRICT, QosClass.LOOSE)

    def place(node: str, group: list[Subtask]) -> None:
        for s in group:
            schedulers[node].add(s, now)

    start_run(
        JobRegistration.of(adm.job_id, spec, now, adm.subtasks) if grid else None,
        adm.subtasks, ctl.register_job, place,
    )
    return len(adm.subtasks)


def _job_result(r: _Outcome, ctl: ControllerCore, gm: GlobalManagerCore) -> JobResult:
    spec, adm = r.spec, r.admission
    summary = ctl.summaries.get(adm.job_id)
    if r.completed_at is not None:
        state = JobPhase.COMPLETED.value
    elif adm.admitted:
        state = JobPhase.RUNNING.value
    elif adm.job_id in gm.pending:
        state = JobPhase.PENDING.value
    else:
        state = gm.closed.get(adm.job_id, JobPhase.REJECTED).value
    reason = adm.reason
    if state == JobPhase.PENDING.value:
        reason = "; ".join(x.message for x in gm.pending_reasons(adm.job_id))
    return JobResult(
        job_id=adm.job_id,
        name=spec.name,
        qos=spec.qos.value,
        subtasks=spec.n_subtasks,
        arrival=spec.arrival,
        admitted=adm.admitted,
        reason=reason,
        completed=r.completed_at is not None,
        mean_phase_difference=summary.mean_phase_difference if summary else None,
        max_phase_difference=summary.max_phase_difference if summary else None,
        completion_skew=summary.completion_skew if summary else None,
        turnaround=(r.completed_at - spec.arrival) if r.completed_at is not None else None,
        nodes=tuple(s.node for s in adm.subtasks),
        control_periods=summary.periods if summary else 0,
        window_violations=summary.window_violations if summary else 0,
        overall_violations=summary.overall_violations if summary else 0,
        wait=(adm.placed_at - spec.arrival) if adm.placed_at is not None else None,
        state=state,
        user=spec.user,
        estimated_start=r.estimated_start,
    )


# Compiled (workloads/native.py), a frozen record needs its constructor to be unpickled.
picklable_frozen_records(globals())
