"""The SQ co-allocation controller as a pure solver (``docs/model.md`` §3, "Controller").

:func:`control` maps a :class:`ControlRequest` (the virtual clocks and weights of every
running strict job, read through :class:`SubtaskView`, and each node's overbooking slack),
which it only reads, to a :class:`ControlReply` (per job: the window that fired, the
factors and the new weights). The driver — the simulator or the live controller actor —
builds the request over its live state and applies the reply; nothing here does I/O or
reads a clock.

Units: times and windows in seconds; weights, factors and slack in Mcycles/s; the gain
``k`` in 1/s (default 1/100, eq. 7).

Per strict job, every control period:

1. ``mean_virtual = mean_i T_V,i`` over the subtasks still running.
2. Overall error window: if ``|mean_virtual - T_R| > E_t`` the running subtasks are sped
   up (job behind) or slowed down (job ahead): each by its own lag,
   ``(T_R - T_V,i) * r_i * k`` (``overall_factor="per_subtask"``, the default), or all by
   the job's lag ``(T_R - mean_virtual) * r_i * k`` (``"uniform"``).
3. Otherwise the asynchrony window: if ``max T_V - min T_V > A_t``, subtasks ahead of the
   mean are slowed by ``SF_d,i = (T_V,i - mean) * r_i * k`` and those behind sped up by
   ``SF_u,i = (mean - T_V,i) * r_i * k`` (``asynchrony_targets="all"``), or only the fastest
   and the slowest one (``"extremes"``, the paper's literal wording).
4. Slowing moves weight from the subtask to its virtual subtask (never below the floor,
   ``weight_floor * r_i``); what a slowed subtask and its virtual subtask hold beyond
   ``r_i`` (weight an earlier speed-up took from the slack) goes back to the node's slack.
   Speeding moves weight back from the virtual subtask first, then from the node's
   overbooking slack (consumed in request order: jobs, then subtasks).

``r_i`` is the subtask's admitted scheduling weight (its expected rate ``x_i``).

**Pace control** (``mode="pace"``, the product's ``sq``) replaces steps 2-4 by rate
matching. From each running subtask's clock rate over the last period (``rho_i =
dT_V/dT_R = x-bar / x``) it predicts where each can get by the next period,
``T_V,i + c_i * P`` (``c_i = rho_i``; a subtask held at its rate cap and getting all of it
may be able to go faster, so it does not bound the group: ``c_i = inf``), and aims every
subtask at the furthest point they can *all* reach, ``T_next = min_i (T_V,i + c_i * P)``.
A subtask that needs all it can get runs uncapped; every other one is held to the rate
cap ``(T_next - T_V,i) / P * x_i`` (never below ``weight_floor * x_i``), which also
removes the phase difference it has (the feedback term). The group thus runs at its
slowest member's pace, and what the faster members leave stays with their nodes' other
work (the local scheduler's ``paced`` mode). A new cap within ``pace_deadband`` (relative)
of the current one is not sent. Jobs ahead of real time are let run (their admission
budget is freed sooner); a job behind by more than ``E_t`` has its bounding subtasks sped
up from their nodes' overbooking slack by ``(T_R - T_V,i) * r_i * k`` (and given it back
once the job is within the window again). The windows stay as guard rails and for
reporting (``Window`` names what held the job back: ``pace`` for a rate-matching change).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from workloads.native import picklable_frozen_records


class Window(str, Enum):
    """Which window fired for a job in a control period."""

    NONE = "none"
    OVERALL_BEHIND = "overall_behind"
    OVERALL_AHEAD = "overall_ahead"
    ASYNCHRONY = "asynchrony"
    #: The job is behind but none of its subtasks could be sped up (no virtual weight to
    #: take back, no slack): the asynchrony window's slow-downs were applied instead.
    OVERALL_BEHIND_ASYNCHRONY = "overall_behind+asynchrony"
    #: Pace control changed a rate cap (the job is within its overall window).
    PACE = "pace"


class ControlMode(str, Enum):
    """``windows``: the paper's bang-bang windows with virtual subtasks (``sq_paper``);
    ``pace``: rate matching with rate caps (``sq``). See the module docstring."""

    WINDOWS = "windows"
    PACE = "pace"


class OverallFactor(str, Enum):
    """How the overall error window sizes its factors (the paper gives no formula).

    ``per_subtask``: each subtask is steered towards real time by its own lag,
    ``(T_R - T_V,i) * r_i * k``, so the correction also shrinks the asynchrony;
    ``uniform``: every subtask moves by the job's lag ``(T_R - mean T_V) * r_i * k``.
    """

    PER_SUBTASK = "per_subtask"
    UNIFORM = "uniform"


class AheadPolicy(str, Enum):
    """What the overall error window does with a job that runs *ahead* of real time.

    ``slow``: slow it back into the window (the paper's literal rule: the window bounds
    both acceleration and delay). ``let_run``: leave it (only the asynchrony window
    applies), so a job whose subtasks all get spare CPU finishes early and frees its
    admission budget sooner; a job *behind* is always sped up.
    """

    SLOW = "slow"
    LET_RUN = "let_run"


class AsynchronyTargets(str, Enum):
    """Which subtasks the asynchrony window corrects."""

    ALL = "all"
    EXTREMES = "extremes"


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """``gain`` is ``k`` in 1/s; ``weight_floor`` a fraction of ``r_i`` (0..1)."""

    gain: float = 1.0 / 100.0
    weight_floor: float = 0.01
    asynchrony_targets: AsynchronyTargets = AsynchronyTargets.ALL
    overall_factor: OverallFactor = OverallFactor.PER_SUBTASK
    ahead: AheadPolicy = AheadPolicy.SLOW
    #: When the overall window finds the job behind but no weight can be found to speed
    #: any subtask up, test the asynchrony window in the same period (and apply its
    #: slow-downs) instead of letting a window that cannot act block the other.
    starved_asynchrony: bool = True
    mode: ControlMode = ControlMode.WINDOWS
    #: Pace control: a new rate cap within this fraction of the current one is not sent.
    pace_deadband: float = 0.01
    #: Pace control: speed up a job behind its overall window from the overbooking slack.
    straggler_boost: bool = True
    #: Pace control: how far (a fraction of the job's asynchrony window ``A_t``, 0..1)
    #: a member may run ahead of where its gang's laggard will be next period. 0 keeps
    #: the gang in step (the product's default); larger leads let members on fast nodes
    #: finish sooner and free their node, at the price of a phase difference up to about
    #: ``pace_lead * A_t`` (``docs/decisions.md``, "The price of being in step").
    pace_lead: float = 0.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.pace_lead) or not 0 <= self.pace_lead <= 1:
            raise ValueError(
                f"pace_lead: must be within [0, 1] (a fraction of A_t), got {self.pace_lead!r}"
            )
        if not math.isfinite(self.pace_deadband) or not 0 <= self.pace_deadband < 1:
            raise ValueError(
                f"pace_deadband: must be within [0, 1), got {self.pace_deadband!r}"
            )
        if not math.isfinite(self.gain) or self.gain <= 0:
            raise ValueError(f"gain: must be a finite number > 0 (1/s), got {self.gain!r}")
        if not 0 <= self.weight_floor <= 1:
            raise ValueError(f"weight_floor: must be within 0..1, got {self.weight_floor!r}")


class SubtaskView(Protocol):
    """What the controller reads of one running subtask, read-only.

    ``admitted_weight`` is ``r_i`` (its expected rate ``x_i``, Mcycles/s); ``weight`` and
    ``virtual_weight`` the current scheduling weights (Mcycles/s); ``virtual_time`` ``T_V``
    (s); ``clock_rate`` ``dT_V/dT_R`` over the last period (x-bar / x; pace control only);
    ``rate_cap`` the rate cap in force (Mcycles/s; 0 = none; pace control only);
    ``capability`` what the node could have given it per unit of expected rate over the
    last period without its cap (``available_work / expected_work``; ``None``: not
    reported).

    The driver passes its own per-subtask tracks (``coallocator.core``), as placement's
    fit reads its nodes (``global_manager.fit.RankedNode``): a control period runs for
    every running subtask, so nothing is copied for it. :class:`SubtaskState` is the
    same as a value, for a clock the driver predicts or carries.
    """

    @property
    def index(self) -> int: ...

    @property
    def node(self) -> str: ...

    @property
    def virtual_time(self) -> float: ...

    @property
    def admitted_weight(self) -> float: ...

    @property
    def weight(self) -> float: ...

    @property
    def virtual_weight(self) -> float: ...

    @property
    def clock_rate(self) -> float: ...

    @property
    def rate_cap(self) -> float: ...

    @property
    def capability(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class SubtaskState:
    """A :class:`SubtaskView` as a value (units there)."""

    index: int
    node: str
    virtual_time: float
    admitted_weight: float
    weight: float
    virtual_weight: float
    clock_rate: float = 1.0
    rate_cap: float = 0.0
    capability: float | None = None


@dataclass(frozen=True, slots=True)
class JobState:
    """A strict job: its windows ``E_t`` and ``A_t`` (s) and its running subtasks."""

    job_id: str
    overall_deviation: float
    asynchrony: float
    subtasks: tuple[SubtaskView, ...]


@dataclass(frozen=True, slots=True)
class ControlRequest:
    """Everything one control period needs. ``real_time`` is ``T_R`` (s); ``node_slack``
    the weight (Mcycles/s) each node can still hand out beyond what it holds."""

    real_time: float
    jobs: tuple[JobState, ...]
    node_slack: Mapping[str, float] = field(default_factory=dict)
    #: The control period ``P`` (s); pace control predicts one period ahead.
    period: float = 0.0


@dataclass(frozen=True, slots=True)
class WeightChange:
    """New weights for one subtask; ``factor`` is the signed factor applied (Mcycles/s,
    negative = slowed down) and ``from_slack`` the weight taken from the node's slack."""

    index: int
    node: str
    factor: float
    weight: float
    virtual_weight: float
    from_slack: float = 0.0
    #: Pace control: the new rate cap (Mcycles/s; 0 = none).
    rate_cap: float = 0.0


@dataclass(frozen=True, slots=True)
class JobDecision:
    """The controller's finding and action for one job in one period."""

    job_id: str
    mean_virtual: float
    phase_difference: float
    window: Window
    changes: tuple[WeightChange, ...]


@dataclass(frozen=True, slots=True)
class ControlReply:
    decisions: tuple[JobDecision, ...]
    node_slack: Mapping[str, float]


def phase_difference(virtual_times: list[float] | tuple[float, ...]) -> float:
    """``Phi = max_i T_V,i - min_i T_V,i`` (s); 0 for fewer than two subtasks."""
    if len(virtual_times) < 2:
        return 0.0
    return max(virtual_times) - min(virtual_times)


def control(request: ControlRequest, config: ControllerConfig | None = None) -> ControlReply:
    """One control period of SQ. Pure: same request, same reply."""
    cfg = config or ControllerConfig()
    slack = {n: max(0.0, float(v)) for n, v in request.node_slack.items()}
    decisions = []
    if cfg.mode is ControlMode.PACE and not (
        math.isfinite(request.period) and request.period > 0
    ):
        raise ValueError(f"period: pace control needs a period > 0 s, got {request.period!r}")
    paces = gang_paces(request.jobs) if cfg.mode is ControlMode.PACE else {}
    for job in request.jobs:
        if cfg.mode is ControlMode.PACE:
            decisions.append(
                _pace_job(job, request.real_time, request.period, cfg, slack, paces.get(job.job_id))
            )
        else:
            decisions.append(_control_job(job, request.real_time, cfg, slack))
    return ControlReply(decisions=tuple(decisions), node_slack=slack)


def window_of(
    mean_virtual: float,
    phase: float,
    real_time: float,
    overall_deviation: float,
    asynchrony: float,
    ahead: AheadPolicy = AheadPolicy.SLOW,
) -> Window:
    """The window a job's clocks fire (s throughout): the overall error window when the
    mean virtual time is more than ``E_t`` behind real time, or ahead of it under
    :attr:`AheadPolicy.SLOW`; else the asynchrony window when the phase difference
    exceeds ``A_t``; else none. The one window test of the controller and of its
    fast-forward (:meth:`coallocator.core.ControllerCore.quiet_periods`)."""
    deviation = mean_virtual - real_time
    if deviation < -overall_deviation or (
        deviation > overall_deviation and ahead is AheadPolicy.SLOW
    ):
        return Window.OVERALL_AHEAD if deviation > 0 else Window.OVERALL_BEHIND
    if phase > asynchrony:
        return Window.ASYNCHRONY
    return Window.NONE


def _clocks(subs: tuple[SubtaskView, ...]) -> tuple[list[float], float, float]:
    """A job's virtual times, their mean and its phase difference (s)."""
    tvs = [s.virtual_time for s in subs]
    return tvs, sum(tvs) / len(tvs), phase_difference(tvs)


def _control_job(
    job: JobState, real_time: float, cfg: ControllerConfig, slack: dict[str, float]
) -> JobDecision:
    subs = job.subtasks
    if not subs:
        return JobDecision(job.job_id, real_time, 0.0, Window.NONE, ())
    tvs, mean_v, phi = _clocks(subs)
    k = cfg.gain
    factors: list[float]  # signed: > 0 speed up, < 0 slow down
    deviation = mean_v - real_time
    window = window_of(mean_v, phi, real_time, job.overall_deviation, job.asynchrony, cfg.ahead)
    if window in (Window.OVERALL_AHEAD, Window.OVERALL_BEHIND):
        if cfg.overall_factor is OverallFactor.UNIFORM:
            factors = [-deviation * s.admitted_weight * k for s in subs]
        else:
            factors = [(real_time - s.virtual_time) * s.admitted_weight * k for s in subs]
    elif window is Window.ASYNCHRONY:
        factors = [(mean_v - s.virtual_time) * s.admitted_weight * k for s in subs]
        if cfg.asynchrony_targets is AsynchronyTargets.EXTREMES:
            fastest = max(range(len(subs)), key=lambda i: (tvs[i], -i))
            slowest = min(range(len(subs)), key=lambda i: (tvs[i], i))
            factors = [f if i in (fastest, slowest) else 0.0 for i, f in enumerate(factors)]
    else:
        return JobDecision(job.job_id, mean_v, phi, Window.NONE, ())

    trial = dict(slack)
    changes = [_apply(s, f, cfg, trial) for s, f in zip(subs, factors) if f != 0.0]
    sped_up = any(
        ch.factor > 0 and ch.weight > s.weight
        for s, ch in zip((s for s, f in zip(subs, factors) if f != 0.0), changes)
    )
    if (
        window is Window.OVERALL_BEHIND
        and cfg.starved_asynchrony
        and phi > job.asynchrony
        and not sped_up
    ):
        # No subtask could be sped up: instead of a correction that cannot act, pull the
        # subtasks ahead of the mean back, as the asynchrony window would.
        window = Window.OVERALL_BEHIND_ASYNCHRONY
        changes = [
            _apply(s, (mean_v - s.virtual_time) * s.admitted_weight * k, cfg, slack)
            for s in subs
            if s.virtual_time > mean_v
        ]
    else:
        slack.update(trial)
    return JobDecision(job.job_id, mean_v, phi, window, tuple(changes))


def _apply(
    s: SubtaskView, factor: float, cfg: ControllerConfig, slack: dict[str, float]
) -> WeightChange:
    weight, virtual = s.weight, s.virtual_weight
    from_slack = 0.0
    if factor < 0:
        floor = cfg.weight_floor * s.admitted_weight
        moved = max(0.0, min(-factor, weight - floor))
        weight -= moved
        virtual += moved
        # Weight beyond the admitted rate came from the node's slack: a slowed subtask
        # gives it back rather than parking it in its virtual subtask.
        excess = weight + virtual - s.admitted_weight
        if excess > 0:
            back_to_slack = min(virtual, excess)
            virtual -= back_to_slack
            slack[s.node] = slack.get(s.node, 0.0) + back_to_slack
    else:
        back = min(virtual, factor)
        virtual -= back
        weight += back
        rest = factor - back
        if rest > 0:
            from_slack = min(rest, slack.get(s.node, 0.0))
            if from_slack > 0:
                slack[s.node] = slack.get(s.node, 0.0) - from_slack
                weight += from_slack
    return WeightChange(s.index, s.node, factor, weight, virtual, from_slack)


#: A subtask got "all of its cap" when it got at least this fraction of it.
_SATURATED = 1.0 - 1e-6


def initial_rate_cap(
    config: ControllerConfig,
    enabled: bool,
    strict: bool,
    n_subtasks: int,
    expected_rate: float,
    pace: float = 1.0,
) -> float:
    """The rate cap (Mcycles/s; 0 = none) a subtask starts with: under pace control a
    strict gang of two or more starts at ``pace`` times its expected rate (``pace``: the
    gang's guaranteed pace, :func:`guaranteed_pace`; 1 = the expected rate), so its first
    period runs in step and measures each node's capability (the global manager places
    it with this cap, the controller registers it with the same)."""
    if enabled and config.mode is ControlMode.PACE and strict and n_subtasks >= 2:
        return expected_rate * max(1.0, pace)
    return 0.0


def guaranteed_pace(members: Iterable[tuple[float, float, float, float]]) -> float:
    """The pace (a multiple of the expected rate, >= 1) every member of a gang is sure to
    reach on its node in its first period, before any node has reported: per member
    ``(expected rate x_i, its node's QoS share of the CPU, the strict expected rates the
    node carries with the gang placed, the member's full speed)``, all Mcycles/s.

    The QoS queue gives its strict subtasks at least its share split by their weights
    (their expected rates), whatever the other queues ask, so a member gets at least
    ``x_i * qos_cpu / booked``, and never more than its full speed. A gang that starts
    at the least of these over its members runs in step from the first period and
    loses no cycle at the expected rate on nodes that could give more (the first
    reports then say what each node can really give). Never below 1: admission
    guarantees the expected rate."""
    pace = math.inf
    for expected, qos_cpu, booked, full_speed in members:
        if expected <= 0:
            continue
        share = qos_cpu / booked if booked > 0 else math.inf
        pace = min(pace, share, full_speed / expected)
    return max(1.0, pace) if math.isfinite(pace) else 1.0


def pace_targets(subs: tuple[SubtaskView, ...], period: float) -> tuple[float, list[float]]:
    """Pace control's prediction for one job: ``T_next`` (s), the furthest virtual time
    every running subtask can reach by the next period, and each subtask's capability
    ``c_i``: what its node reported it could have had (``capability``), else its clock
    rate, or ``inf`` when it is held at its cap, got all of it and nothing says more."""
    caps: list[float] = []
    for s in subs:
        if s.capability is not None:
            caps.append(max(0.0, s.capability))
            continue
        held = s.rate_cap > 0 and s.clock_rate * s.admitted_weight >= s.rate_cap * _SATURATED
        caps.append(math.inf if held else max(0.0, s.clock_rate))
    if all(math.isinf(c) for c in caps):
        # Every one is held at its cap: none tells what the group could do, so every cap
        # is lifted (capability 0: each "needs all it can get"); the next period measures.
        reach = [s.virtual_time + max(0.0, s.clock_rate) * period for s in subs]
        return max(reach), [0.0] * len(subs)
    return min(s.virtual_time + c * period for s, c in zip(subs, caps)), caps


#: Two paces within this relative distance are one level of the filling.
_LEVEL_TOLERANCE = 1e-9


def gang_paces(jobs: Iterable[JobState]) -> dict[str, float]:
    """Each gang's pace (a multiple of its members' expected rates) by max-min fair
    progressive filling over the nodes, from what the nodes reported.

    A member's ``capability`` ``c_i`` is what its node would give it with every rate cap
    there lifted (its fair share of the node, per unit of expected rate), so a node
    ``n`` can give the gangs' members on it ``C_n = sum_i c_i x_i`` Mcycles/s in all. A
    member whose ``c_i`` is below the node's level ``max_i c_i`` is held by its own
    demand (its full speed) and never takes more than ``c_i``. Every gang's pace rises
    together; a gang stops when a node it uses is full or a member reaches its full
    speed; the others go on rising into what it leaves. So a gang held back on one
    node gives what it does not use on its other nodes to the gangs that can use it
    (a fast node's CPU is not kept for a member that only paces behind a slow one), and
    no gang runs slower than at its slowest node's fair level, what an uncoordinated
    member would get there (the strict baseline).

    Gangs with a member whose capability is not known yet are left out (the caller
    falls back to the member's clock rate for them)."""
    members: dict[str, list[tuple[str, float, float]]] = {}  # job -> (node, x, c)
    for job in jobs:
        if not job.subtasks or any(s.capability is None for s in job.subtasks):
            continue
        members[job.job_id] = [
            (s.node, s.admitted_weight, max(0.0, s.capability or 0.0)) for s in job.subtasks
        ]
    room: dict[str, float] = {}
    level: dict[str, float] = {}
    for ms in members.values():
        for node, x, c in ms:
            room[node] = room.get(node, 0.0) + c * x
            level[node] = max(level.get(node, 0.0), c)
    paces: dict[str, float] = {}
    active = dict(members)
    while active:
        weight: dict[str, float] = {}
        for ms in active.values():
            for node, x, _ in ms:
                weight[node] = weight.get(node, 0.0) + x
        # The next pace at which a node fills up or a member reaches its own limit.
        node_level = {n: max(0.0, room[n]) / w for n, w in weight.items() if w > 0}
        bound = {
            jid: min(
                [node_level.get(n, math.inf) for n, _, _ in ms]
                + [c for n, _, c in ms if c < level[n] * (1 - _LEVEL_TOLERANCE)]
            )
            for jid, ms in active.items()
        }
        t = min(bound.values())
        if not math.isfinite(t):
            for jid in active:
                paces[jid] = 0.0
            break
        done = [jid for jid, b in bound.items() if b <= t * (1 + _LEVEL_TOLERANCE)]
        for jid in done:
            paces[jid] = t
            for node, x, _ in active.pop(jid):
                room[node] -= t * x
    return paces


def _pace_job(
    job: JobState,
    real_time: float,
    period: float,
    cfg: ControllerConfig,
    slack: dict[str, float],
    pace: float | None = None,
) -> JobDecision:
    subs = job.subtasks
    if not subs:
        return JobDecision(job.job_id, real_time, 0.0, Window.NONE, ())
    _, mean_v, phi = _clocks(subs)
    if pace is not None:
        # Every member aims where the last one gets at the gang's pace: the laggard runs
        # at the pace, the others just enough to meet it (the feedback term), which also
        # removes the phase difference.
        t_next = min(s.virtual_time for s in subs) + pace * period
        capability = [
            s.capability if s.capability is not None else math.inf for s in subs
        ]
    else:
        t_next, capability = pace_targets(subs, period)
    behind = mean_v - real_time < -job.overall_deviation
    window = Window.NONE
    changes: list[WeightChange] = []
    # A member may run this far (s of virtual time) beyond the gang's next point.
    lead = (
        cfg.pace_lead * job.asynchrony
        if cfg.pace_lead and math.isfinite(job.asynchrony) else 0.0
    )
    for s, c in zip(subs, capability):
        x = s.admitted_weight
        need = max(0.0, (t_next - s.virtual_time) / period)
        allowed = max(0.0, (t_next + lead - s.virtual_time) / period) if lead else need
        floor = cfg.weight_floor
        bounding = need >= c * _SATURATED
        if pace is not None:
            # The gang's pace is what the nodes can give it (gang_paces): held to it.
            cap = max(allowed, floor) * x
        elif bounding and s.capability is None:
            cap = 0.0  # it needs all it can get, and only running uncapped tells how much
        elif bounding:
            # It bounds the group: held to what its node said it can give, so a node that
            # has more next period cannot pull it ahead (its report then says so).
            cap = max(c, floor) * x
        else:
            cap = max(allowed, floor) * x
        weight, from_slack = s.weight, 0.0
        if (cap == 0.0 or (pace is not None and bounding)) and behind and cfg.straggler_boost:
            # A bounding subtask of a job behind its window: more weight from the slack.
            want = (real_time - s.virtual_time) * x * cfg.gain
            from_slack = min(max(0.0, want), slack.get(s.node, 0.0))
            if from_slack > 0:
                slack[s.node] = slack.get(s.node, 0.0) - from_slack
                weight += from_slack
        elif not behind and weight > x:
            # Back within the window: weight borrowed from the slack goes back.
            slack[s.node] = slack.get(s.node, 0.0) + (weight - x)
            weight = x
        cap_moved = (cap == 0.0) != (s.rate_cap == 0.0) or (
            cap > 0 and abs(cap - s.rate_cap) > cfg.pace_deadband * s.rate_cap
        )
        if not cap_moved:
            cap = s.rate_cap
        if cap_moved or weight != s.weight or s.virtual_weight != 0.0:
            changes.append(
                WeightChange(s.index, s.node, weight - s.weight, weight, 0.0, from_slack, cap)
            )
    if changes:
        if behind:
            window = Window.OVERALL_BEHIND
        elif phi > job.asynchrony:
            window = Window.ASYNCHRONY
        else:
            window = Window.PACE
    return JobDecision(job.job_id, mean_v, phi, window, tuple(changes))


# Compiled (workloads/native.py), a frozen record needs its constructor to be unpickled.
picklable_frozen_records(globals())
