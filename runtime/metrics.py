"""Ray metrics (``ray.util.metrics``) of the live runtime, exported by Ray's Prometheus
endpoint on every node (``docs/observability.md``).

:data:`METRICS` defines every metric once (name, kind, tags, unit, description); the
adapters below build their Ray metrics from it, and the names Prometheus sees are derived
from it (:meth:`MetricDef.prometheus_names`: Ray adds its ``ray_`` prefix, a counter gets
``_total``, a histogram ``_bucket``/``_sum``/``_count``). The Grafana dashboard
(``deploy/grafana/coalloc.json``) is checked against those names.

Tags. A job is tagged ``job_id``, not ``job``: Prometheus gives every scraped series the
``job`` label of its scrape job, and renames a clashing label of the target to
``exported_job``.

Ray cannot remove a tag set from a metric: when the controller stops tracking a job, its
per-job and per-subtask gauges are set to NaN once (a gap in a graph, not a line frozen at
its last value).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

#: The prefix Ray puts before the name of every application metric it exports.
RAY_PREFIX = "ray_"
#: A local manager's counters of dropped progress datagrams: this prefix, then the reason.
PROGRESS_DROPPED = "progress_dropped_"


class MetricKind(str, Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


class Component(str, Enum):
    """The actor whose process exports a metric."""

    CONTROLLER = "controller"
    LOCAL_MANAGER = "local manager"
    GLOBAL_MANAGER = "global manager"


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One metric: ``name`` as given to Ray, ``unit`` in words, ``boundaries`` the bucket
    upper bounds of a histogram (in its unit)."""

    name: str
    kind: MetricKind
    component: Component
    tags: tuple[str, ...]
    unit: str
    description: str
    boundaries: tuple[float, ...] = ()

    @property
    def exported(self) -> str:
        """The metric's name in Prometheus (before any counter or histogram suffix)."""
        return RAY_PREFIX + self.name

    def prometheus_names(self) -> tuple[str, ...]:
        """Every series name Prometheus stores for this metric."""
        base = self.exported
        if self.kind is MetricKind.COUNTER:
            return (base + "_total",)
        if self.kind is MetricKind.HISTOGRAM:
            return (base + "_bucket", base + "_sum", base + "_count")
        return (base,)

    def build(self) -> Any:
        """The Ray metric (``ray.util.metrics``; imported here so that the definitions
        can be read without Ray)."""
        from ray.util import metrics

        if self.kind is MetricKind.COUNTER:
            return metrics.Counter(self.name, description=self.description, tag_keys=self.tags)
        if self.kind is MetricKind.HISTOGRAM:
            return metrics.Histogram(self.name, description=self.description,
                                     boundaries=list(self.boundaries), tag_keys=self.tags)
        return metrics.Gauge(self.name, description=self.description, tag_keys=self.tags)


_C, _L, _G = Component.CONTROLLER, Component.LOCAL_MANAGER, Component.GLOBAL_MANAGER
_GAUGE, _COUNTER = MetricKind.GAUGE, MetricKind.COUNTER

#: Real seconds: the bucket bounds of the placement cycle's duration.
CYCLE_BUCKETS_S: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)

#: Every metric the runtime exports.
METRICS: tuple[MetricDef, ...] = (
    MetricDef("coalloc_phase_difference_seconds", _GAUGE, _C, ("job_id",), "model s",
              "Phase difference (max - min virtual time of its running subtasks) of a "
              "strict job at the last control period."),
    MetricDef("coalloc_asynchrony_window_seconds", _GAUGE, _C, ("job_id",), "model s",
              "A job's asynchrony window A_t (not set for a job without one)."),
    MetricDef("coalloc_overall_deviation_seconds", _GAUGE, _C, ("job_id",), "model s",
              "Mean virtual time of a job minus the period's model time (negative: "
              "behind) at the last control period."),
    MetricDef("coalloc_overall_window_seconds", _GAUGE, _C, ("job_id",), "model s",
              "A job's overall deviation window E_t (not set for a job without one)."),
    MetricDef("coalloc_subtask_weight", _GAUGE, _C, ("job_id", "subtask"), "Mcycles/s",
              "Scheduling weight of a subtask."),
    MetricDef("coalloc_virtual_weight", _GAUGE, _C, ("job_id", "subtask"), "Mcycles/s",
              "Weight of a subtask's virtual subtask."),
    MetricDef("coalloc_rate_cap", _GAUGE, _C, ("job_id", "subtask"), "Mcycles/s",
              "Rate cap in force on a subtask (pace control; 0: none)."),
    MetricDef("coalloc_tracked_jobs", _GAUGE, _C, (), "jobs",
              "Jobs the controller tracks (running grid QoS jobs)."),
    MetricDef("coalloc_reports_received", _COUNTER, _C, (), "reports",
              "Progress reports decoded by the controller."),
    MetricDef("coalloc_reports_dropped", _COUNTER, _C, ("reason",), "frames",
              "Report frames dropped by the controller, by reason (docs/wire.md)."),
    MetricDef("coalloc_node_reports_sent", _COUNTER, _L, ("node",), "reports",
              "Progress reports a local manager sent."),
    MetricDef("coalloc_node_reports_send_dropped", _COUNTER, _L, ("node",), "reports",
              "Progress reports a local manager dropped (send queue full)."),
    MetricDef("coalloc_node_fenced_subtasks", _COUNTER, _L, ("node",), "subtasks",
              "Subtasks a local manager stopped because it held no lease (fenced)."),
    MetricDef("coalloc_node_subtasks", _GAUGE, _L, ("node",), "subtasks",
              "Subtasks running on a node."),
    MetricDef("coalloc_stalled_subtasks", _GAUGE, _L, ("node",), "subtasks",
              "Subtasks on a node whose reported progress stalled (no report within their "
              "job's stall_after)."),
    MetricDef("coalloc_progress_reports", _COUNTER, _L, ("node",), "datagrams",
              "Progress datagrams a local manager accepted from its subtasks."),
    MetricDef("coalloc_progress_dropped", _COUNTER, _L, ("node", "reason"), "datagrams",
              "Progress datagrams a local manager dropped, by reason (docs/wire.md)."),
    MetricDef("coalloc_pending_jobs", _GAUGE, _G, (), "jobs",
              "Jobs in the pending queue (queue length)."),
    MetricDef("coalloc_running_jobs", _GAUGE, _G, (), "jobs", "Jobs running."),
    MetricDef("coalloc_oldest_pending_wait_seconds", _GAUGE, _G, (), "model s",
              "How long the longest-waiting pending job has waited (0: none pending)."),
    MetricDef("coalloc_nodes", _GAUGE, _G, ("health",), "nodes",
              "Grid nodes by health (up, stale, lost)."),
    MetricDef("coalloc_node_health", _GAUGE, _G, ("node", "health"), "1 or 0",
              "1 for a node's current health, 0 for the others."),
    MetricDef("coalloc_placement_cycle_seconds", MetricKind.HISTOGRAM, _G, (), "real s",
              "Duration of a placement cycle of the pending queue that ran (skipped "
              "cycles, when nothing changed, are not counted).", CYCLE_BUCKETS_S),
)

#: Node health values (as ``status`` shows them).
NODE_HEALTH: tuple[str, ...] = ("up", "stale", "lost")


def metric(name: str) -> MetricDef:
    """The definition of metric ``name`` (KeyError if there is none)."""
    for m in METRICS:
        if m.name == name:
            return m
    raise KeyError(name)


def exported_names() -> frozenset[str]:
    """Every series name the runtime's metrics have in Prometheus."""
    return frozenset(n for m in METRICS for n in m.prometheus_names())


def _build(component: Component) -> dict[str, Any]:
    return {m.name: m.build() for m in METRICS if m.component is component}


def _add_growth(
    counter: Any, last: dict[str, int], key: str, total: int, tags: dict[str, str] | None = None
) -> None:
    """Ray counters take increments, the runtime keeps running totals: add to ``counter``
    how far ``total`` has grown past the total last seen under ``key`` (nothing if it has
    not grown: Ray refuses increments <= 0)."""
    seen = last.get(key, 0)
    if total > seen:
        counter.inc(total - seen, tags=tags)
        last[key] = total


class RayControllerMetrics:
    """The controller's metrics; :meth:`period` is called after every control period."""

    def __init__(self) -> None:
        self.m = _build(Component.CONTROLLER)
        self._received: dict[str, int] = {}  # one key, "received"
        self._dropped: dict[str, int] = {}
        #: Job -> its number of subtasks, for the jobs seen at the last period.
        self._jobs: dict[str, int] = {}

    def _set_job(self, job: str, n: int, values: Mapping[str, Iterable[float]],
                 per_job: Mapping[str, float]) -> None:
        for name, value in per_job.items():
            if not math.isinf(value):
                self.m[name].set(float(value), tags={"job_id": job})
        for name, seq in values.items():
            for i, v in enumerate(seq):
                if i < n:
                    self.m[name].set(float(v), tags={"job_id": job, "subtask": str(i)})

    def period(self, views: Iterable[Any], received: int, dropped: Mapping[str, int],
               now: float | None = None) -> None:
        """``views``: the tracked jobs' :class:`~coallocator.core.JobClockView`;
        ``received``/``dropped``: running totals; ``now``: the period's model time (s)."""
        seen: dict[str, int] = {}
        for v in views:
            n = len(v.weights)
            seen[v.job_id] = n
            per_job = {
                "coalloc_asynchrony_window_seconds": float(v.asynchrony),
                "coalloc_overall_window_seconds": float(v.overall_deviation),
            }
            if sum(not d for d in v.done) >= 2:  # else the controller no longer measures
                per_job["coalloc_phase_difference_seconds"] = float(v.phase_difference)
                if now is not None:
                    per_job["coalloc_overall_deviation_seconds"] = float(v.mean_virtual) - now
            self._set_job(v.job_id, n, {
                "coalloc_subtask_weight": v.weights,
                "coalloc_virtual_weight": v.virtual_weights,
                "coalloc_rate_cap": v.rate_caps,
            }, per_job)
        for job, n in self._jobs.items():
            if job not in seen:  # no longer tracked: a gap from now on
                nan = math.nan
                self._set_job(
                    job, n,
                    {k: (nan,) * n for k in ("coalloc_subtask_weight", "coalloc_virtual_weight",
                                            "coalloc_rate_cap")},
                    {k: nan for k in ("coalloc_phase_difference_seconds",
                                      "coalloc_asynchrony_window_seconds",
                                      "coalloc_overall_window_seconds",
                                      "coalloc_overall_deviation_seconds")},
                )
        self._jobs = seen
        self.m["coalloc_tracked_jobs"].set(float(len(seen)))
        _add_growth(self.m["coalloc_reports_received"], self._received, "received", received)
        for reason, count in dropped.items():
            _add_growth(self.m["coalloc_reports_dropped"], self._dropped, reason, count,
                        {"reason": str(reason)})


class RayNodeMetrics:
    """A local manager's metrics; :meth:`update` is called with its counters."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.m = _build(Component.LOCAL_MANAGER)
        self._last: dict[str, int] = {}

    def update(self, counters: Mapping[str, int], running: int, stalled: int = 0) -> None:
        tags = {"node": self.node}
        for key, name in (("reports_sent", "coalloc_node_reports_sent"),
                          ("reports_dropped", "coalloc_node_reports_send_dropped"),
                          ("progress_received", "coalloc_progress_reports"),
                          ("fenced", "coalloc_node_fenced_subtasks")):
            _add_growth(self.m[name], self._last, key, int(counters.get(key, 0)), tags)
        for key, total in counters.items():
            if key.startswith(PROGRESS_DROPPED):
                reason = key[len(PROGRESS_DROPPED):]
                _add_growth(self.m["coalloc_progress_dropped"], self._last, key, int(total),
                            {"node": self.node, "reason": reason})
        self.m["coalloc_node_subtasks"].set(float(running), tags=tags)
        self.m["coalloc_stalled_subtasks"].set(float(stalled), tags=tags)


@dataclass(frozen=True, slots=True)
class QueueGauges:
    """The global manager's state as the metrics show it: jobs ``pending`` and
    ``running``, the ``oldest_wait`` of a pending job (model s; 0 with none pending) and
    each node's health (``up``, ``stale`` or ``lost``)."""

    pending: int
    running: int
    oldest_wait: float
    node_health: tuple[tuple[str, str], ...]


class NullGlobalMetrics:
    """The global manager's observability hooks, doing nothing (tests, the simulator)."""

    def placement_cycle(self, seconds: float) -> None:
        return None

    def state(self, gauges: QueueGauges) -> None:
        return None


class RayGlobalMetrics(NullGlobalMetrics):
    """The global manager's metrics: :meth:`placement_cycle` after every placement cycle
    that ran (its duration in real s), :meth:`state` every health check."""

    def __init__(self) -> None:
        self.m = _build(Component.GLOBAL_MANAGER)

    def placement_cycle(self, seconds: float) -> None:
        self.m["coalloc_placement_cycle_seconds"].observe(max(float(seconds), 0.0))

    def state(self, gauges: QueueGauges) -> None:
        self.m["coalloc_pending_jobs"].set(float(gauges.pending))
        self.m["coalloc_running_jobs"].set(float(gauges.running))
        self.m["coalloc_oldest_pending_wait_seconds"].set(float(gauges.oldest_wait))
        counts = dict.fromkeys(NODE_HEALTH, 0)
        for node, health in gauges.node_health:
            counts[health] = counts.get(health, 0) + 1
            for h in NODE_HEALTH:
                self.m["coalloc_node_health"].set(
                    1.0 if h == health else 0.0, tags={"node": node, "health": h}
                )
        for health, count in counts.items():
            self.m["coalloc_nodes"].set(float(count), tags={"health": health})
