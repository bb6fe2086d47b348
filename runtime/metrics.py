"""Ray metrics (``ray.util.metrics``) of the live runtime, exported by Ray's Prometheus
endpoint: phase difference per job, reports received and dropped, weights.

Names (Ray adds its ``ray_`` prefix on export):

| metric | kind | tags | unit |
| --- | --- | --- | --- |
| ``coalloc_phase_difference_seconds`` | gauge | job | model s |
| ``coalloc_reports_received`` | counter | | reports |
| ``coalloc_reports_dropped`` | counter | reason | frames |
| ``coalloc_subtask_weight`` | gauge | job, subtask | Mcycles/s |
| ``coalloc_virtual_weight`` | gauge | job, subtask | Mcycles/s |
| ``coalloc_node_reports_sent`` | counter | node | reports |
| ``coalloc_node_reports_send_dropped`` | counter | node | reports |
| ``coalloc_node_subtasks`` | gauge | node | subtasks |
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


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
        from ray.util.metrics import Counter, Gauge

        self.phase = Gauge(
            "coalloc_phase_difference_seconds",
            description="Phase difference of a job at the last control period (model s).",
            tag_keys=("job",),
        )
        self.received = Counter(
            "coalloc_reports_received", description="Progress reports decoded by the controller."
        )
        self.dropped = Counter(
            "coalloc_reports_dropped",
            description="Report frames dropped by the controller, by reason.",
            tag_keys=("reason",),
        )
        self.weight = Gauge(
            "coalloc_subtask_weight",
            description="Scheduling weight of a subtask (Mcycles/s).",
            tag_keys=("job", "subtask"),
        )
        self.virtual_weight = Gauge(
            "coalloc_virtual_weight",
            description="Weight of a subtask's virtual subtask (Mcycles/s).",
            tag_keys=("job", "subtask"),
        )
        self._received: dict[str, int] = {}  # one key, "received"
        self._dropped: dict[str, int] = {}

    def period(self, views: Iterable[Any], received: int, dropped: Mapping[str, int]) -> None:
        for v in views:
            self.phase.set(float(v.phase_difference), tags={"job": v.job_id})
            for i, (w, vw) in enumerate(zip(v.weights, v.virtual_weights)):
                tags = {"job": v.job_id, "subtask": str(i)}
                self.weight.set(float(w), tags=tags)
                self.virtual_weight.set(float(vw), tags=tags)
        _add_growth(self.received, self._received, "received", received)
        for reason, count in dropped.items():
            _add_growth(self.dropped, self._dropped, reason, count, {"reason": str(reason)})


class RayNodeMetrics:
    """A local manager's metrics; :meth:`update` is called with its counters."""

    def __init__(self, node: str) -> None:
        from ray.util.metrics import Counter, Gauge

        self.node = node
        self.sent = Counter(
            "coalloc_node_reports_sent",
            description="Progress reports a local manager sent.",
            tag_keys=("node",),
        )
        self.send_dropped = Counter(
            "coalloc_node_reports_send_dropped",
            description="Progress reports a local manager dropped (send queue full).",
            tag_keys=("node",),
        )
        self.subtasks = Gauge(
            "coalloc_node_subtasks",
            description="Subtasks running on a node.",
            tag_keys=("node",),
        )
        self._last: dict[str, int] = {}

    def update(self, counters: Mapping[str, int], running: int) -> None:
        tags = {"node": self.node}
        for key, metric in (("reports_sent", self.sent), ("reports_dropped", self.send_dropped)):
            _add_growth(metric, self._last, key, int(counters.get(key, 0)), tags)
        self.subtasks.set(float(running), tags=tags)
