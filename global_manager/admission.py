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


# Placement lives in :mod:`global_manager.placer`; these names stay importable from here.
from global_manager.placer import (  # noqa: E402
    FlowPlacement,
    LeastLoaded,
    NodeLoad,
    PlacementPolicy,
    PlacementReply,
    PlacementRequest,
    RandomPlacement,
    place,
    placement_policies,
)

__all__ = [
    "AdmissionPolicy",
    "FlowPlacement",
    "LeastLoaded",
    "NoAdmission",
    "NodeLoad",
    "OverbookingAdmission",
    "PlacementPolicy",
    "PlacementReply",
    "PlacementRequest",
    "RandomPlacement",
    "StrictAdmission",
    "admission_policies",
    "place",
    "placement_policies",
]
