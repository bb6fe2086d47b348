"""Admission control and placement: pure solvers over frozen requests
(``docs/model.md`` §3, "Admission").

A node accepts a strict subtask only while the sum of expected rates of its strict
subtasks stays within its *budget*: ``qos_share * cpu_rate`` under strict admission,
``(1 + overbooking) * qos_share * cpu_rate`` under overbooking (SQ: 5 %), unbounded with
no admission control. A job's subtasks go to distinct nodes, all or none.

Rates and budgets in Mcycles/s.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Protocol

from global_manager.registry import Registry


class AdmissionPolicy(Protocol):
    """Decides how much strict expected rate a node may carry (Mcycles/s)."""

    @property
    def name(self) -> str: ...

    def budget(self, cpu_rate: float, qos_share: float) -> float: ...


admission_policies: Registry[AdmissionPolicy] = Registry("admission policy")


@admission_policies.register("strict")
@dataclass(frozen=True, slots=True)
class StrictAdmission:
    """No overbooking: strict rates fit within the QoS queue's share of the CPU."""

    name: str = "strict"

    def budget(self, cpu_rate: float, qos_share: float) -> float:
        return qos_share * cpu_rate


@admission_policies.register("overbooking")
@dataclass(frozen=True, slots=True)
class OverbookingAdmission:
    """Admit up to ``(1 + ratio)`` times the QoS share (SQ's 5 % by default)."""

    ratio: float = 0.05
    name: str = "overbooking"

    def __post_init__(self) -> None:
        if not math.isfinite(self.ratio) or self.ratio < 0:
            raise ValueError(f"overbooking ratio: must be a finite number >= 0, got {self.ratio!r}")

    def budget(self, cpu_rate: float, qos_share: float) -> float:
        return (1.0 + self.ratio) * qos_share * cpu_rate


@admission_policies.register("none")
@dataclass(frozen=True, slots=True)
class NoAdmission:
    """No admission control: every node takes every subtask."""

    name: str = "none"

    def budget(self, cpu_rate: float, qos_share: float) -> float:
        return math.inf


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """A node as placement sees it. ``committed``: strict expected rates it carries;
    ``budget``: what admission lets it carry; ``load``: all grid QoS and best-effort
    weights on it. All Mcycles/s."""

    name: str
    cpu_rate: float
    committed: float
    budget: float
    load: float

    @property
    def free(self) -> float:
        return self.budget - self.committed


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """Place ``rates`` (one expected rate per subtask, Mcycles/s) on distinct nodes.
    ``checked``: whether the rates count against the budgets (strict jobs)."""

    job_id: str
    rates: tuple[float, ...]
    checked: bool
    nodes: tuple[NodeLoad, ...]


@dataclass(frozen=True, slots=True)
class PlacementReply:
    """``nodes[i]`` is the node of subtask ``i``; ``None`` with a ``reason`` if rejected."""

    nodes: tuple[str, ...] | None
    reason: str = ""

    @property
    def admitted(self) -> bool:
        return self.nodes is not None


class PlacementPolicy(Protocol):
    """Orders the nodes a job's subtasks are tried on."""

    @property
    def name(self) -> str: ...

    def rank(
        self, nodes: tuple[NodeLoad, ...], checked: bool, rng: random.Random
    ) -> list[NodeLoad]:
        """Nodes in the order they should be tried."""
        ...


placement_policies: Registry[PlacementPolicy] = Registry("placement policy")


@placement_policies.register("least_loaded")
@dataclass(frozen=True, slots=True)
class LeastLoaded:
    """Most free budget first for strict jobs, lowest load per MHz for the others;
    ties by node name so the order is deterministic."""

    name: str = "least_loaded"

    def rank(
        self, nodes: tuple[NodeLoad, ...], checked: bool, rng: random.Random
    ) -> list[NodeLoad]:
        if checked:
            return sorted(nodes, key=lambda n: (-n.free, n.name))
        return sorted(nodes, key=lambda n: (n.load / n.cpu_rate, n.name))


@placement_policies.register("flow")
@dataclass(frozen=True, slots=True)
class FlowPlacement:
    """Strict jobs: the min-cost flow of :mod:`global_manager.flow_placement`, run by
    :class:`global_manager.core.GlobalManagerCore` over the whole pending queue. This
    ranking (as ``least_loaded``) serves the others and jobs split by parallelism."""

    name: str = "flow"

    def rank(
        self, nodes: tuple[NodeLoad, ...], checked: bool, rng: random.Random
    ) -> list[NodeLoad]:
        return LeastLoaded().rank(nodes, checked, rng)


@placement_policies.register("random")
@dataclass(frozen=True, slots=True)
class RandomPlacement:
    """A uniformly random order drawn from the run's seeded RNG."""

    name: str = "random"

    def rank(
        self, nodes: tuple[NodeLoad, ...], checked: bool, rng: random.Random
    ) -> list[NodeLoad]:
        order = sorted(nodes, key=lambda n: n.name)
        rng.shuffle(order)
        return order


def place(request: PlacementRequest, policy: PlacementPolicy, rng: random.Random) -> PlacementReply:
    """All-or-nothing placement on distinct nodes.

    Subtasks are taken in decreasing rate (ties by index); each goes to the first node in
    the policy's order that is still unused and, for checked jobs, has room for it. Pure
    apart from the draws ``policy`` makes from ``rng``.
    """
    n = len(request.rates)
    if n == 0:
        return PlacementReply(None, "job has no subtasks")
    if n > len(request.nodes):
        return PlacementReply(None, f"{n} subtasks but only {len(request.nodes)} nodes")
    ranked = policy.rank(request.nodes, request.checked, rng)
    used: set[str] = set()
    chosen: list[str | None] = [None] * n
    for i in sorted(range(n), key=lambda i: (-request.rates[i], i)):
        rate = request.rates[i]
        for node in ranked:
            if node.name in used:
                continue
            if request.checked and rate > node.free + 1e-9:
                continue
            chosen[i] = node.name
            used.add(node.name)
            break
        else:
            return PlacementReply(
                None,
                f"no free node can take subtask {i} (expected rate {rate:.6g} Mcycles/s)",
            )
    return PlacementReply(tuple(c for c in chosen if c is not None))
