"""The SQ co-allocation controller as a pure solver (DESIGN §3 "Controller").

:func:`control` maps a frozen :class:`ControlRequest` (the virtual clocks and weights of
every running strict job, and each node's overbooking slack) to a :class:`ControlReply`
(per job: the window that fired, the factors and the new weights). The driver — the
simulator or the live controller actor — builds the request from live state and applies
the reply; nothing here does I/O or reads a clock.

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
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum


class Window(str, Enum):
    """Which window fired for a job in a control period."""

    NONE = "none"
    OVERALL_BEHIND = "overall_behind"
    OVERALL_AHEAD = "overall_ahead"
    ASYNCHRONY = "asynchrony"
    #: The job is behind but none of its subtasks could be sped up (no virtual weight to
    #: take back, no slack): the asynchrony window's slow-downs were applied instead.
    OVERALL_BEHIND_ASYNCHRONY = "overall_behind+asynchrony"


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

    def __post_init__(self) -> None:
        if not math.isfinite(self.gain) or self.gain <= 0:
            raise ValueError(f"gain: must be a finite number > 0 (1/s), got {self.gain!r}")
        if not 0 <= self.weight_floor <= 1:
            raise ValueError(f"weight_floor: must be within 0..1, got {self.weight_floor!r}")


@dataclass(frozen=True, slots=True)
class SubtaskState:
    """One running subtask as the controller sees it.

    ``admitted_weight`` is ``r_i`` (its expected rate ``x_i``, Mcycles/s); ``weight`` and
    ``virtual_weight`` the current scheduling weights (Mcycles/s); ``virtual_time`` ``T_V``
    (s).
    """

    index: int
    node: str
    virtual_time: float
    admitted_weight: float
    weight: float
    virtual_weight: float


@dataclass(frozen=True, slots=True)
class JobState:
    """A strict job: its windows ``E_t`` and ``A_t`` (s) and its running subtasks."""

    job_id: str
    overall_deviation: float
    asynchrony: float
    subtasks: tuple[SubtaskState, ...]


@dataclass(frozen=True, slots=True)
class ControlRequest:
    """Everything one control period needs. ``real_time`` is ``T_R`` (s); ``node_slack``
    the weight (Mcycles/s) each node can still hand out beyond what it holds."""

    real_time: float
    jobs: tuple[JobState, ...]
    node_slack: Mapping[str, float] = field(default_factory=dict)


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
    for job in request.jobs:
        decisions.append(_control_job(job, request.real_time, cfg, slack))
    return ControlReply(decisions=tuple(decisions), node_slack=slack)


def _control_job(
    job: JobState, real_time: float, cfg: ControllerConfig, slack: dict[str, float]
) -> JobDecision:
    subs = job.subtasks
    if not subs:
        return JobDecision(job.job_id, real_time, 0.0, Window.NONE, ())
    tvs = [s.virtual_time for s in subs]
    mean_v = sum(tvs) / len(tvs)
    phi = phase_difference(tvs)
    k = cfg.gain
    factors: list[float]  # signed: > 0 speed up, < 0 slow down
    deviation = mean_v - real_time
    overall = deviation < -job.overall_deviation or (
        deviation > job.overall_deviation and cfg.ahead is AheadPolicy.SLOW
    )
    if overall:
        window = Window.OVERALL_AHEAD if deviation > 0 else Window.OVERALL_BEHIND
        if cfg.overall_factor is OverallFactor.UNIFORM:
            factors = [-deviation * s.admitted_weight * k for s in subs]
        else:
            factors = [(real_time - s.virtual_time) * s.admitted_weight * k for s in subs]
    elif phi > job.asynchrony:
        window = Window.ASYNCHRONY
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
    s: SubtaskState, factor: float, cfg: ControllerConfig, slack: dict[str, float]
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
