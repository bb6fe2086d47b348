"""Admission control: how much strict rate a node may carry
(``docs/model.md`` §3, "Admission").

A node accepts a strict subtask only while the sum of expected rates of its strict
subtasks stays within its *budget*: ``qos_share * cpu_rate`` under strict admission,
``(1 + overbooking) * qos_share * cpu_rate`` under overbooking (SQ: 5 %), unbounded with
no admission control. A job's subtasks go to distinct nodes, all or none.

Rates and budgets in Mcycles/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from global_manager.registry import Registry

__all__ = [
    "AdmissionPolicy",
    "MeasuredCapacityAdmission",
    "NoAdmission",
    "OverbookingAdmission",
    "StrictAdmission",
    "admission_policies",
]


class AdmissionPolicy(Protocol):
    """Decides how much strict expected rate a node may carry (Mcycles/s).

    ``qos_capacity``: the CPU rate the node's QoS queue can get now were it to want the
    whole node (Mcycles/s, :meth:`local_manager.scheduler.LocalScheduler.qos_capacity`),
    as last measured by the node; ``None`` when unknown. Only policies whose
    ``measures_capacity`` is true read it; the driver need not feed it to the others."""

    @property
    def name(self) -> str: ...

    @property
    def measures_capacity(self) -> bool: ...

    def budget(
        self, cpu_rate: float, qos_share: float, qos_capacity: float | None = None
    ) -> float: ...


admission_policies: Registry[AdmissionPolicy] = Registry("admission policy")


@admission_policies.register("strict")
@dataclass(frozen=True, slots=True)
class StrictAdmission:
    """No overbooking: strict rates fit within the QoS queue's share of the CPU."""

    name: str = "strict"
    measures_capacity: bool = False

    def budget(
        self, cpu_rate: float, qos_share: float, qos_capacity: float | None = None
    ) -> float:
        return qos_share * cpu_rate


@admission_policies.register("overbooking")
@dataclass(frozen=True, slots=True)
class OverbookingAdmission:
    """Admit up to ``(1 + ratio)`` times the QoS share (SQ's 5 % by default)."""

    ratio: float = 0.05
    name: str = "overbooking"
    measures_capacity: bool = False

    def __post_init__(self) -> None:
        _check_ratio(self.ratio)

    def budget(
        self, cpu_rate: float, qos_share: float, qos_capacity: float | None = None
    ) -> float:
        return (1.0 + self.ratio) * qos_share * cpu_rate


@admission_policies.register("measured_capacity")
@dataclass(frozen=True, slots=True)
class MeasuredCapacityAdmission:
    """Overbooking on what the QoS queue can really get: ``(1 + ratio)`` times the
    larger of its share of the CPU and its measured capacity (``qos_capacity``, capped at
    the node's rate). On work-conserving queues a node whose grid-local and best-effort
    queues are light gives the QoS queue more than its share; sq paces each gang at what
    its nodes give, so gangs there run faster than their expected rates and the CPU
    their caps leave can carry more strict work. Queues that are not work-conserving
    measure just the share, so this is then :class:`OverbookingAdmission`.

    The risk it takes: when local work arrives later, the node's QoS queue falls back to
    what the split gives it (at least its share), and the gangs there are paced down to
    that; their expected rates are then not all met at once. Measured on the live
    defaults' matrix (``docs/decisions.md``, "Admission by measured QoS capacity"), that
    costs less than it gains; the price moves partly to best-effort work, which no longer
    gets the CPU the caps leave."""

    ratio: float = 0.05
    name: str = "measured_capacity"
    measures_capacity: bool = True

    def __post_init__(self) -> None:
        _check_ratio(self.ratio)

    def budget(
        self, cpu_rate: float, qos_share: float, qos_capacity: float | None = None
    ) -> float:
        base = qos_share * cpu_rate
        if qos_capacity is not None and math.isfinite(qos_capacity) and qos_capacity > base:
            base = min(qos_capacity, cpu_rate)
        return (1.0 + self.ratio) * base


def _check_ratio(ratio: float) -> None:
    if not math.isfinite(ratio) or ratio < 0:
        raise ValueError(f"overbooking ratio: must be a finite number >= 0, got {ratio!r}")


@admission_policies.register("none")
@dataclass(frozen=True, slots=True)
class NoAdmission:
    """No admission control: every node takes every subtask."""

    name: str = "none"
    measures_capacity: bool = False

    def budget(
        self, cpu_rate: float, qos_share: float, qos_capacity: float | None = None
    ) -> float:
        return math.inf
