"""Which nodes' local managers answer: when each last answered, which are lost and why,
and each node's last :class:`~workloads.messages.NodeReport`.

The global manager's monitor asks every node for a report once a real second. A node
whose manager has been silent for ``stall_cycles`` cycles is stale (placement skips it);
after ``node_timeout`` cycles it is lost, or, if Ray is restarting its manager, after
:data:`MANAGER_RESTART_WAIT_S` real s if that is longer. :class:`NodeHealth` decides
which nodes are stale and lost; the global manager (:mod:`runtime.global_service`) acts on
it: it takes stale nodes out of placement and ends the gangs of lost ones. A node that
answers again is back.

No Ray and no locking here: the global manager calls this under its lock.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass

from runtime.config import RuntimeConfig
from workloads.messages import NodeReport

#: How long (real s) a node whose local manager Ray is restarting may stay silent before
#: it is lost, if that is longer than ``node_timeout`` cycles: a restart (a new worker
#: process, the imports, the checkpoint restored) took over 15 s on a loaded 2-core
#: machine, where ``node_timeout`` is 15 s at the default time scale. A manager that never
#: comes back is still lost, after ``max(node_timeout cycles, this)``.
MANAGER_RESTART_WAIT_S = 120.0
#: Real seconds a node's last :class:`NodeReport` stays fresh: ``status`` shows a node
#: whose last report is older (three of the monitor's once-a-second rounds missed) as not
#: answering. ``status`` answers from these reports; it never waits on a node.
REPORT_FRESH_S = 3.0
#: Real seconds between two node checks beyond which the global manager itself was not
#: running (SIGSTOPped, a frozen VM, a stalled host; the monitor checks every second):
#: the nodes' silence over that gap is not counted against them, so a global manager
#: that comes back does not declare nodes lost for its own downtime. (A restarted one
#: starts every node's count afresh: ``last_seen`` is not journaled.)
CHECK_GAP_S = 3.0


@dataclass(frozen=True, slots=True)
class HeardReport:
    """A node's last :class:`NodeReport` as the global manager holds it, and ``age_s``
    (real s since it arrived, when it was read)."""

    report: NodeReport
    age_s: float = 0.0

    @property
    def fresh(self) -> bool:
        """Not older than :data:`REPORT_FRESH_S`."""
        return self.age_s <= REPORT_FRESH_S


@dataclass(frozen=True, slots=True)
class Silence:
    """What a check of the nodes found: ``lost``, the nodes lost by it (node -> why, in
    the order of the nodes); ``stale``, the nodes silent past ``stall_cycles`` but not
    lost (stale already or not)."""

    lost: dict[str, str]
    stale: list[str]
    #: Model s since the previous check not counted as silence (0: none; see
    #: :data:`CHECK_GAP_S`).
    gap: float = 0.0


class NodeHealth:
    """The health of ``nodes`` (names), every node answering at model time ``now``."""

    def __init__(self, nodes: Iterable[str], now: float) -> None:
        self.nodes = list(nodes)
        #: Nodes lost (node -> why): their gangs were ended; back when they answer again.
        self.lost: dict[str, str] = {}
        #: Model time each node's manager last answered with its loop running (not
        #: journaled: a recovered service gives every node a full timeout again).
        self.last_seen: dict[str, float] = {n: now for n in self.nodes}
        #: Each node's last report and when it came (model s): what ``status`` shows of
        #: the nodes (not journaled: a recovered service has none until they report).
        self.reports: dict[str, tuple[NodeReport, float]] = {}
        #: Model time of the last :meth:`check` (None: none yet).
        self.checked_at: float | None = None

    def answered(self, node: str, now: float) -> str | None:
        """``node``'s manager answered at ``now`` with its loop running. Returns why it
        was lost if it was (it is back), else None."""
        self.last_seen[node] = now
        return self.lost.pop(node, None)

    def silent_cycles(self, node: str, now: float, cycle: float) -> float:
        """Cycles of ``cycle`` model s since ``node`` last answered."""
        return (now - self.last_seen.get(node, now)) / cycle

    def check(
        self, now: float, config: RuntimeConfig, errors: Mapping[str, str],
        restarting: Container[str],
    ) -> Silence:
        """Mark the nodes lost whose managers have been silent too long at ``now`` (see
        the module docstring); ``errors``: node -> what the last status call gave instead
        of an answer, for the reason; ``restarting``: nodes whose manager Ray is
        restarting. Silence over a gap of more than :data:`CHECK_GAP_S` since the last
        check is not counted (the global manager was not running)."""
        lost: dict[str, str] = {}
        stale: list[str] = []
        gap = 0.0
        if self.checked_at is not None and now - self.checked_at > CHECK_GAP_S * config.time_scale:
            gap = now - self.checked_at
            for node in self.last_seen:
                self.last_seen[node] += gap
        self.checked_at = now
        for node in self.nodes:
            if node in self.lost:
                continue
            silent = self.silent_cycles(node, now, config.cycle)
            waited_s = silent * config.real_cycle
            if silent > config.node_timeout and (
                node not in restarting or waited_s > MANAGER_RESTART_WAIT_S
            ):
                why = f"no answer from its local manager for {silent:.0f} cycles"
                if node in restarting:
                    why += f" ({waited_s:.0f} s), Ray still restarting it"
                elif node in errors:
                    why += f", last: {errors[node]}"
                self.lost[node] = lost[node] = why
            elif silent > config.stall_cycles:
                stale.append(node)
        return Silence(lost, stale, gap)

    def keep(self, report: NodeReport, now: float) -> None:
        """Keep ``report``, arrived at model time ``now``, as its node's last."""
        self.reports[report.node] = (report, now)

    def heard(self, now: float, scale: float) -> dict[str, HeardReport]:
        """Each node's last report with its age at ``now`` (``scale``: model s per real
        s); nodes not heard from are absent."""
        return {
            name: HeardReport(rep, max(0.0, (now - at) / scale))
            for name, (rep, at) in self.reports.items()
        }
