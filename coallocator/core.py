"""The co-allocation controller's state machine: it ingests progress reports, runs the
pure :func:`coallocator.controller.control` every control period and turns its reply into
re-weight commands and phase-log records. No I/O and no clock reads: the driver passes
``now`` and hands the records to a sink (simulator: memory or a file; live: a file).

It tracks every grid QoS job with subtasks (strict and loose) for the phase-difference
statistics, and controls only strict jobs, only when ``enabled``.

Node slack (Mcycles/s) is the node's strict admission budget minus the weight (subtask
plus virtual) its running strict subtasks hold; speed-ups beyond what a virtual subtask
gives back come out of it.

Late reports (``catch_up``). A control period at ``T_R = now`` compares the subtasks'
clocks at ``now``. In the simulator every node has reported for ``now``; live, a local
manager that is late has not yet (it will step the missed cycles one by one when it
catches up, at the weights in force, so its clocks will reach what they would have been),
and a controller that is late may already hold reports for a later boundary. Comparing
such a stale clock with fresh ones would show the lateness as phase difference (a
multiple of one cycle's advance) and steer the gang against it. So, given ``catch_up > 0``
(s), a running subtask whose last report describes another time than ``now``, by at most
``catch_up`` s, is carried to ``now`` at the clock rate of that report (at the rate of
its rate cap before its first report, and when the controller changed the cap at or
after the boundary the report describes), for the decision and for the statistics alike; the
period record marks it (``estimated``: seconds carried, by subtask index) and the summary
counts such periods (``estimated_periods``). The controller changes nothing for a subtask
carried forward by more than a control period: its manager may be a whole period late,
and a late manager applies the commands it finds when it catches up to every cycle it
replays, so a cap meant for one period would act over all the missed ones. Beyond
``catch_up`` the node was stalled and
resynchronises without booking the missed cycles, so its last clock is the truth and is
used as reported. ``catch_up = 0`` (the simulator) never estimates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from coallocator.controller import (
    ControllerConfig,
    ControlMode,
    ControlRequest,
    JobDecision,
    JobState,
    SubtaskState,
    Window,
    control,
    initial_rate_cap,
    phase_difference,
    window_of,
)
from coallocator.messages import ProgressReport, ReweightCommand
from coallocator.phase_log import JobPhaseTracker, PeriodRecord, SummaryRecord, period_record
from workloads.messages import JobRegistration
from workloads.model import QosClass
from workloads.native import picklable_frozen_records

RecordSink = Callable[[PeriodRecord | SummaryRecord], None]


@dataclass(slots=True)
class _SubtaskTrack:
    """One subtask's live state; the controller reads it as its
    :class:`~coallocator.controller.SubtaskView` (units there)."""

    index: int
    node: str
    admitted_weight: float
    weight: float
    virtual_weight: float = 0.0
    virtual_time: float = 0.0
    #: dT_V/dT_R over the last report (x_bar / x); used to replay quiet periods.
    clock_rate: float = 1.0
    #: Pace control's rate cap in force, Mcycles/s (0 = none).
    rate_cap: float = 0.0
    #: available_work / expected_work of the last report (None: not reported).
    capability: float | None = None
    done: bool = False
    #: T_R the last report describes (s); the start before the first report.
    reported_at: float = 0.0
    #: Whether any report has been applied.
    reported: bool = False
    #: T_R of the control period that last changed its rate cap (s; -inf: none).
    cap_set_at: float = -math.inf

    def clock_at(self, now: float, catch_up: float) -> tuple[float, float]:
        """This subtask's ``T_V`` at ``T_R = now`` (s) and how many seconds of it were
        carried forward or back from its last report (0: as reported; see the module
        docstring, "Late reports")."""
        gap = now - self.reported_at
        if gap == 0.0 or abs(gap) > catch_up:
            return self.virtual_time, 0.0
        # Not reported yet (its start cap; the expected rate without one), or re-capped at
        # or after the boundary of its last report (the cycles since ran at the new cap,
        # not at the rate that report measured): the rate of the cap in force.
        fresh_cap = not self.reported or self.cap_set_at >= self.reported_at
        rate = self.capped_rate() if fresh_cap else self.clock_rate
        return self.virtual_time + rate * gap, gap

    def capped_rate(self) -> float:
        """dT_V/dT_R under the rate cap in force: the cap's rate, no more than its node
        said it could give (``capability``); uncapped, that capability, else its last
        clock rate."""
        if self.rate_cap > 0:
            rate = self.rate_cap / self.admitted_weight
            return min(rate, self.capability) if self.capability is not None else rate
        return self.capability if self.capability is not None else self.clock_rate

    def state(self, ahead: float = 0.0, virtual_time: float | None = None) -> SubtaskState:
        """This subtask as a value, its clock moved ``ahead`` s at its last rate (0: as
        last reported); ``virtual_time``: as if that had been reported. For predicted or
        carried clocks only: a control period reads the track itself."""
        tv = self.virtual_time if virtual_time is None else virtual_time
        return SubtaskState(
            self.index,
            self.node,
            tv + self.clock_rate * ahead,
            self.admitted_weight,
            self.weight,
            self.virtual_weight,
            self.clock_rate,
            self.rate_cap,
            self.capability,
        )


def _withhold_late(
    decision: JobDecision, carried: Mapping[str, float], period: float
) -> JobDecision:
    """``decision`` without the changes for subtasks whose clock was carried forward over
    a report more than a control period ``period`` (s) late (``carried``: seconds carried
    by subtask index; see "Late reports"). Such a member's manager, if it is the one that
    is late, is behind by a whole period or more: it applies a command when it catches up
    to every cycle it replays, not only to the cycles after the period the command was
    meant for, so a cap meant for one period would hold it over all the missed ones and
    put it out of step. Its weights and cap stay as they were until its reports are in
    again (its estimate assumed exactly that). A manager only a fraction of a period late
    (one missing report) gets its commands before its next boundary, as on time: were
    they withheld, a node always a little late would never be controlled."""
    late = {int(i) for i, gap in carried.items() if gap > period}
    if not late:
        return decision
    kept = tuple(ch for ch in decision.changes if ch.index not in late)
    if len(kept) == len(decision.changes):
        return decision
    return replace(decision, changes=kept)


@dataclass(slots=True)
class _JobTrack:
    job_id: str
    qos: QosClass
    overall_deviation: float
    asynchrony: float
    subtasks: list[_SubtaskTrack]
    tracker: JobPhaseTracker
    last_phase: float = 0.0
    last_mean: float = 0.0
    last_window: str = "none"
    periods: int = field(default=0)


@dataclass(frozen=True, slots=True)
class JobClockView:
    """A job's clocks as ``status`` shows them: ``T_V`` per subtask, the current and the
    largest phase difference so far (s), the fraction of its control periods (with two or
    more running subtasks) in which the phase difference exceeded ``A_t``, and the
    weights and rate caps in force (Mcycles/s)."""

    job_id: str
    qos: str
    virtual_times: tuple[float, ...]
    phase_difference: float
    mean_virtual: float
    window: str
    weights: tuple[float, ...]
    virtual_weights: tuple[float, ...]
    done: tuple[bool, ...]
    max_phase_difference: float = 0.0
    window_violation_fraction: float | None = None
    rate_caps: tuple[float, ...] = ()
    #: The job's windows ``E_t`` and ``A_t`` (s; inf: none).
    overall_deviation: float = math.inf
    asynchrony: float = math.inf


def violation_fraction(violations: int, periods: int) -> float | None:
    """``violations / periods``; ``None`` before the first period."""
    return violations / periods if periods else None


class ControllerCore:
    """See the module docstring. ``log_every``: write a period record every that many
    periods, and always when a window fired (1 = every period). ``period``: the control
    period ``P`` (s) that pace control predicts over (required for ``mode="pace"``)."""

    def __init__(
        self,
        config: ControllerConfig | None = None,
        enabled: bool = True,
        node_budgets: Mapping[str, float] | None = None,
        sink: RecordSink | None = None,
        log_every: int = 1,
        period: float | None = None,
        catch_up: float = 0.0,
    ) -> None:
        """``catch_up``: the longest span (s) a late report's clock is carried over (module
        docstring, "Late reports"; 0 = never)."""
        if log_every < 1:
            raise ValueError("log_every: must be >= 1 period")
        self.period_length = period
        if (config or ControllerConfig()).mode is ControlMode.PACE and enabled and (
            period is None or not period > 0
        ):
            raise ValueError("period: pace control needs the control period (s > 0)")
        self.config = config or ControllerConfig()
        self.enabled = enabled
        self.node_budgets = dict(node_budgets or {})
        self.sink = sink
        self.log_every = log_every
        if not catch_up >= 0:
            raise ValueError("catch_up: must be >= 0 s")
        self.catch_up = catch_up
        #: Subtask clocks carried over a late report so far (one per subtask and period).
        self.estimated_clocks = 0
        self.jobs: dict[str, _JobTrack] = {}
        self.period = 0
        self._seq = 0
        self.summaries: dict[str, SummaryRecord] = {}

    # -------------------------------------------------------------- membership
    def register_job(self, reg: JobRegistration) -> None:
        """Track a job from ``reg.arrival``; its subtasks' weights start at their admitted
        weights (expected rates, Mcycles/s). Under pace control a strict gang starts at
        the rate cap :func:`initial_rate_cap` gives (the global manager placed it with
        the same)."""
        subs = [_SubtaskTrack(i, node, w, w, virtual_time=reg.arrival, reported_at=reg.arrival)
                for i, node, w in reg.subtasks]
        for st in subs:
            st.rate_cap = initial_rate_cap(
                self.config, self.enabled, reg.qos is QosClass.STRICT, len(subs),
                st.admitted_weight, reg.initial_pace,
            )
        e = float(reg.overall_deviation if reg.overall_deviation is not None else math.inf)
        a = float(reg.asynchrony if reg.asynchrony is not None else math.inf)
        self.jobs[reg.job_id] = _JobTrack(
            job_id=reg.job_id,
            qos=reg.qos,
            overall_deviation=e,
            asynchrony=a,
            subtasks=subs,
            tracker=JobPhaseTracker(reg.job_id, reg.qos.value, len(subs), reg.arrival, a, e),
        )

    def ingest(self, report: ProgressReport) -> bool:
        """Apply one progress report; False if it is for an unknown job or subtask."""
        return self.ingest_progress(
            report.job_id, report.subtask, report.real_time, report.virtual_time,
            report.expected_work, report.granted_work, report.available_work, report.done,
        )

    def ingest_progress(
        self,
        job_id: str,
        subtask: int,
        real_time: float,
        virtual_time: float,
        expected_work: float,
        granted_work: float,
        available_work: float,
        done: bool,
    ) -> bool:
        """:meth:`ingest` of a report given by its fields (the simulator's path, without
        building the record): times in s, work in Mcycles."""
        job = self.jobs.get(job_id)
        if job is None or not 0 <= subtask < len(job.subtasks):
            return False
        st = job.subtasks[subtask]
        if st.done:
            return True
        st.virtual_time = virtual_time
        st.reported_at, st.reported = real_time, True
        if expected_work > 0:
            st.clock_rate = granted_work / expected_work
            st.capability = available_work / expected_work if available_work > 0 else None
        else:
            st.clock_rate = 0.0
            st.capability = None
        if done:
            st.done = True
            job.tracker.finished(real_time)
            if job.tracker.completed:
                self._close(job)
        return True

    def subtask_ended(self, job_id: str, index: int, t: float) -> bool:
        """Mark subtask ``index`` of ``job_id`` done at real time ``t`` (s) without a
        report: it ended while its done report was lost (a restarted controller learns it
        from the global manager). Closes the job when it was the last; False for an
        unknown job or subtask."""
        job = self.jobs.get(job_id)
        if job is None or not 0 <= index < len(job.subtasks):
            return False
        st = job.subtasks[index]
        if not st.done:
            st.done = True
            job.tracker.finished(t)
            if job.tracker.completed:
                self._close(job)
        return True

    def cancel(self, job_id: str, reason: str = "") -> None:
        """Stop tracking ``job_id``; its summary (not completed) carries ``reason``."""
        job = self.jobs.pop(job_id, None)
        if job is not None:
            summary = replace(job.tracker.summary(), reason=reason)
            self._emit(summary)
            self.summaries[job_id] = summary

    def _close(self, job: _JobTrack) -> None:
        summary = job.tracker.summary()
        self.summaries[job.job_id] = summary
        self._emit(summary)
        del self.jobs[job.job_id]

    def _emit(self, record: PeriodRecord | SummaryRecord) -> None:
        if self.sink is not None:
            self.sink(record)

    # ------------------------------------------------------------------ control
    def reported_through(self, t: float) -> bool:
        """Whether every running subtask of every tracked job has a report describing
        ``T_R >= t`` (s), or started at or after ``t``: a control period at ``t`` would
        carry no clock forward (the live controller then evaluates it at once)."""
        for job in self.jobs.values():
            for s in job.subtasks:
                if not s.done and s.reported_at < t:
                    return False
        return True

    def node_slack(self) -> dict[str, float]:
        held: dict[str, float] = {}
        for job in self.jobs.values():
            if job.qos is not QosClass.STRICT:
                continue
            for s in job.subtasks:
                if not s.done:
                    held[s.node] = held.get(s.node, 0.0) + s.weight + s.virtual_weight
        return {n: b - held.get(n, 0.0) for n, b in self.node_budgets.items()}

    def control_period(
        self, now: float, clock_offset: float | None = None, clock_quality: str | None = None
    ) -> list[ReweightCommand]:
        """Run one control period at real time ``now`` (s); return the re-weight commands."""
        self.period += 1
        k = self.period
        controlled: list[_JobTrack] = []
        states: list[JobState] = []
        estimates: list[dict[str, float] | None] = []
        commands: list[ReweightCommand] = []
        for job in self.jobs.values():
            running = [s for s in job.subtasks if not s.done]
            if len(running) < 2:
                if self.enabled and running:
                    # Nobody left to keep in step with: a lone subtask gets its admitted
                    # weight back and its virtual subtask goes, or it would crawl forever.
                    commands.extend(self._restore(job, running[0]))
                continue
            clocks = [s.clock_at(now, self.catch_up) for s in running]
            estimated = {str(s.index): gap for s, (_, gap) in zip(running, clocks) if gap}
            self.estimated_clocks += len(estimated)
            if self.enabled and job.qos is QosClass.STRICT:
                controlled.append(job)
                estimates.append(estimated or None)
                # The controller reads the tracks themselves (read-only); a record only
                # for a clock carried over a late report.
                views = tuple(running) if not estimated else tuple(
                    s.state(virtual_time=tv) if gap else s
                    for s, (tv, gap) in zip(running, clocks)
                )
                states.append(
                    JobState(job.job_id, job.overall_deviation, job.asynchrony, views)
                )
            else:
                self._observe(job, [tv for tv, _ in clocks], now, k, clock_offset,
                              clock_quality, estimated or None)
        if not states:
            return commands
        reply = control(
            ControlRequest(now, tuple(states), self.node_slack(), self.period_length or 0.0),
            self.config,
        )
        for job, decision, carried in zip(controlled, reply.decisions, estimates):
            if carried:
                decision = _withhold_late(decision, carried, self.period_length or 0.0)
            job.tracker.observe(
                decision.phase_difference, decision.mean_virtual - now, carried is not None
            )
            job.last_phase, job.last_mean = decision.phase_difference, decision.mean_virtual
            job.last_window = decision.window.value
            for ch in decision.changes:
                st = job.subtasks[ch.index]
                st.weight, st.virtual_weight = ch.weight, ch.virtual_weight
                if ch.rate_cap != st.rate_cap:
                    st.rate_cap, st.cap_set_at = ch.rate_cap, now
                self._seq += 1
                commands.append(
                    ReweightCommand(
                        job.job_id,
                        ch.index,
                        ch.node,
                        self._seq,
                        ch.weight,
                        ch.virtual_weight,
                        ch.rate_cap,
                    )
                )
            if self.sink is not None and (decision.changes or k % self.log_every == 0):
                weights = {
                    s.index: (s.weight, s.virtual_weight) for s in job.subtasks if not s.done
                }
                self._emit(period_record(decision, k, now, weights, clock_offset, clock_quality,
                                         carried))
        return commands

    def _restore(self, job: _JobTrack, st: _SubtaskTrack) -> list[ReweightCommand]:
        if st.weight == st.admitted_weight and st.virtual_weight == 0.0 and st.rate_cap == 0.0:
            return []
        st.weight, st.virtual_weight, st.rate_cap = st.admitted_weight, 0.0, 0.0
        self._seq += 1
        return [ReweightCommand(job.job_id, st.index, st.node, self._seq, st.weight, 0.0)]

    def _observe(
        self,
        job: _JobTrack,
        virtual_times: list[float],
        real_time: float,
        k: int,
        clock_offset: float | None,
        clock_quality: str | None,
        estimated: dict[str, float] | None = None,
    ) -> None:
        """Book period ``k`` of a job no decision is made for (uncontrolled, or a quiet
        period): its phase difference and deviation from ``real_time`` (s) from the
        running subtasks' ``virtual_times`` (s), logged every ``log_every`` periods;
        ``estimated``: the seconds carried over a late report, by subtask index."""
        phi = phase_difference(virtual_times)
        mean = sum(virtual_times) / len(virtual_times)
        job.tracker.observe(phi, mean - real_time, estimated is not None)
        job.last_phase, job.last_mean, job.last_window = phi, mean, "none"
        if self.sink and job.qos is QosClass.STRICT and k % self.log_every == 0:
            self._log_uncontrolled(job, k, real_time, clock_offset, clock_quality, estimated)

    def _log_uncontrolled(
        self,
        job: _JobTrack,
        k: int,
        now: float,
        offset: float | None,
        quality: str | None,
        estimated: dict[str, float] | None = None,
    ) -> None:
        running = [s for s in job.subtasks if not s.done]
        self._emit(
            PeriodRecord(
                job=job.job_id,
                period=k,
                real_time=now,
                mean_virtual=job.last_mean,
                phase_difference=job.last_phase,
                window="none",
                weights={str(s.index): s.weight for s in running},
                virtual_weights={str(s.index): s.virtual_weight for s in running},
                clock_offset=offset,
                clock_quality=quality,
                estimated=estimated,
            )
        )

    # ------------------------------------------------------------- fast forward
    def quiet_periods(self, now: float, period: float, limit: int) -> int:
        """How many of the next ``limit`` control periods (each ``period`` s, starting at
        ``now``) would find every controlled job inside both windows, if every virtual
        clock kept its last rate. Both window tests are convex in time (an absolute value
        of a linear function; a max minus a min of linear functions), so they hold on a
        whole stretch iff they hold at its ends: the answer is found by bisection."""
        if not self.enabled:
            return limit
        jobs = [
            j
            for j in self.jobs.values()
            if j.qos is QosClass.STRICT and sum(1 for s in j.subtasks if not s.done) >= 2
        ]
        if not jobs:
            return limit

        # Pace control's decisions also need the nodes' slack; no weight moves while the
        # search runs, so it is computed once.
        slack = self.node_slack() if self.config.mode is ControlMode.PACE else None

        def quiet(p: int) -> bool:
            dt = p * period
            t_r = now + dt
            if slack is not None:
                return self._pace_quiet(jobs, t_r, dt, slack)
            for j in jobs:
                tvs = [s.virtual_time + s.clock_rate * dt for s in j.subtasks if not s.done]
                window = window_of(sum(tvs) / len(tvs), max(tvs) - min(tvs), t_r,
                                   j.overall_deviation, j.asynchrony, self.config.ahead)
                if window is not Window.NONE:
                    return False
            return True

        if not quiet(0):
            return 0
        lo, hi = 0, limit  # quiet(lo) holds
        if quiet(hi):
            return hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if quiet(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def _pace_quiet(
        self, jobs: list[_JobTrack], t_r: float, dt: float, slack: Mapping[str, float]
    ) -> bool:
        """Whether pace control would change nothing at ``t_r`` (s) if every virtual clock
        kept its last rate for ``dt`` more seconds. Each test it makes (a rate cap within
        its deadband, a job within its overall window) is the absolute value of a linear
        function of ``dt`` below a bound, so the quiet stretch is an interval."""
        states = tuple(
            JobState(
                j.job_id,
                j.overall_deviation,
                j.asynchrony,
                tuple(s.state(dt) for s in j.subtasks if not s.done),
            )
            for j in jobs
        )
        reply = control(
            ControlRequest(t_r, states, slack, self.period_length or 0.0), self.config
        )
        return not any(d.changes for d in reply.decisions)

    def stretch_quiet_periods(
        self,
        times: Sequence[float],
        clocks: Mapping[tuple[str, int], Sequence[float]],
    ) -> int:
        """How many of the next control periods, at real times ``times`` (s), would decide
        nothing, when at period ``p`` every running subtask's ``T_V`` is
        ``clocks[(job, index)][p]`` (s, what its node will report then, summed cycle by
        cycle as stepping does) and its rates stay those last reported. The exact test
        behind :meth:`fast_forward_stretch` (no extrapolated clock)."""
        if not self.enabled:
            return len(times)
        jobs = []
        for j in self.jobs.values():
            running = [s for s in j.subtasks if not s.done]
            if len(running) == 1 and (
                running[0].weight != running[0].admitted_weight
                or running[0].virtual_weight != 0.0
                or running[0].rate_cap != 0.0
            ):
                return 0  # a lone subtask still to be restored: a command is due
            if j.qos is QosClass.STRICT and len(running) >= 2:
                jobs.append((j, running))
        if not jobs:
            return len(times)
        pace = self.config.mode is ControlMode.PACE
        slack = self.node_slack() if pace else {}
        for p, t_r in enumerate(times):
            if pace:
                states = tuple(
                    JobState(
                        j.job_id, j.overall_deviation, j.asynchrony,
                        tuple(s.state(virtual_time=clocks[(j.job_id, s.index)][p])
                              for s in running),
                    )
                    for j, running in jobs
                )
                reply = control(
                    ControlRequest(t_r, states, slack, self.period_length or 0.0), self.config
                )
                if any(d.changes or d.window is not Window.NONE for d in reply.decisions):
                    return p
                continue
            for j, running in jobs:
                tvs = [clocks[(j.job_id, s.index)][p] for s in running]
                window = window_of(sum(tvs) / len(tvs), phase_difference(tvs), t_r,
                                   j.overall_deviation, j.asynchrony, self.config.ahead)
                if window is not Window.NONE:
                    return p
        return len(times)

    def fast_forward_stretch(
        self,
        times: Sequence[float],
        clocks: Mapping[tuple[str, int], Sequence[float]],
        clock_offset: float | None = None,
        clock_quality: str | None = None,
    ) -> None:
        """Book the control periods at real times ``times`` (s) that
        :meth:`stretch_quiet_periods` found quiet: phase differences observed and logged
        from ``clocks`` (as there), exactly as :meth:`control_period` would with no
        decision. Call it before ingesting the reports that close the stretch."""
        for p, t_r in enumerate(times):
            self.period += 1
            k = self.period
            for job in self.jobs.values():
                running = [s for s in job.subtasks if not s.done]
                if len(running) < 2:
                    continue
                self._observe(job, [clocks[(job.job_id, s.index)][p] for s in running], t_r,
                              k, clock_offset, clock_quality)

    # ------------------------------------------------------------------- status
    def view(self, job_id: str) -> JobClockView | None:
        job = self.jobs.get(job_id)
        if job is None:
            return None
        return JobClockView(
            job_id=job.job_id,
            qos=job.qos.value,
            virtual_times=tuple(s.virtual_time for s in job.subtasks),
            phase_difference=job.last_phase,
            mean_virtual=job.last_mean,
            window=job.last_window,
            weights=tuple(s.weight for s in job.subtasks),
            virtual_weights=tuple(s.virtual_weight for s in job.subtasks),
            done=tuple(s.done for s in job.subtasks),
            max_phase_difference=job.tracker.phi_max,
            window_violation_fraction=violation_fraction(
                job.tracker.window_violations, job.tracker.periods
            ),
            rate_caps=tuple(s.rate_cap for s in job.subtasks),
            overall_deviation=job.overall_deviation,
            asynchrony=job.asynchrony,
        )

    def finish_all(self) -> None:
        """Emit summaries for jobs still open (end of a run)."""
        for job in list(self.jobs.values()):
            summary = job.tracker.summary()
            self.summaries[job.job_id] = summary
            self._emit(summary)
        self.jobs.clear()


# Compiled (workloads/native.py), a frozen record needs its constructor to be unpickled.
picklable_frozen_records(globals())
