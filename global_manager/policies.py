"""Whole scheduling policies, registered by name (DESIGN §3 "Policies compared").

A policy bundles the admission policy, whether the SQ controller runs, and what
virtual subtasks do with their share:

| name | admission | controller | virtual subtasks |
| --- | --- | --- | --- |
| ``strict`` | strict | off | (none) — the paper's baseline |
| ``sq`` | 5 % overbooking | on | idle — the paper's scheme |
| ``none`` | none | off | (none) |
| ``sq_no_overbooking`` | strict | on | idle |
| ``sq_work_conserving`` | 5 % overbooking | on | lent to best effort |
| ``sq_let_ahead`` | 5 % overbooking | on, jobs ahead of real time are not slowed | idle |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from coallocator.controller import AheadPolicy, ControllerConfig
from global_manager.admission import admission_policies
from global_manager.registry import Registry
from local_manager.scheduler import VirtualSubtaskMode


class PolicyName(str, Enum):
    STRICT = "strict"
    SQ = "sq"
    NONE = "none"
    SQ_NO_OVERBOOKING = "sq_no_overbooking"
    SQ_WORK_CONSERVING = "sq_work_conserving"
    SQ_LET_AHEAD = "sq_let_ahead"


@dataclass(frozen=True, slots=True)
class Policy:
    """A named scheduling policy. ``admission`` names an entry of
    :data:`global_manager.admission.admission_policies`; ``overbooking`` is its ratio
    (only for ``overbooking``); ``placement`` names a placement policy."""

    name: str
    admission: str
    controller: bool
    overbooking: float = 0.0
    virtual_mode: VirtualSubtaskMode = VirtualSubtaskMode.IDLE
    placement: str = "least_loaded"
    controller_config: ControllerConfig = field(default_factory=ControllerConfig)

    def admission_policy(self):  # -> AdmissionPolicy
        if self.admission == "overbooking":
            return admission_policies.create("overbooking", ratio=self.overbooking)
        return admission_policies.create(self.admission)


policies: Registry[Policy] = Registry("policy")


@policies.register(PolicyName.STRICT.value)
def _strict(**kw: object) -> Policy:
    return Policy(name="strict", admission="strict", controller=False, **kw)  # type: ignore[arg-type]


@policies.register(PolicyName.SQ.value)
def _sq(**kw: object) -> Policy:
    kw.setdefault("overbooking", 0.05)
    return Policy(name="sq", admission="overbooking", controller=True, **kw)  # type: ignore[arg-type]


@policies.register(PolicyName.NONE.value)
def _none(**kw: object) -> Policy:
    return Policy(name="none", admission="none", controller=False, **kw)  # type: ignore[arg-type]


@policies.register(PolicyName.SQ_NO_OVERBOOKING.value)
def _sq_no_overbooking(**kw: object) -> Policy:
    return Policy(name="sq_no_overbooking", admission="strict", controller=True, **kw)  # type: ignore[arg-type]


@policies.register(PolicyName.SQ_WORK_CONSERVING.value)
def _sq_work_conserving(**kw: object) -> Policy:
    kw.setdefault("overbooking", 0.05)
    kw.setdefault("virtual_mode", VirtualSubtaskMode.WORK_CONSERVING)
    return Policy(name="sq_work_conserving", admission="overbooking", controller=True, **kw)  # type: ignore[arg-type]


@policies.register(PolicyName.SQ_LET_AHEAD.value)
def _sq_let_ahead(**kw: object) -> Policy:
    kw.setdefault("overbooking", 0.05)
    kw.setdefault("controller_config", ControllerConfig(ahead=AheadPolicy.LET_RUN))
    return Policy(name="sq_let_ahead", admission="overbooking", controller=True, **kw)  # type: ignore[arg-type]


def get_policy(name: str, **overrides: object) -> Policy:
    """The policy registered as ``name`` with optional field overrides
    (e.g. ``placement="random"``, ``overbooking=0.1``)."""
    return policies.create(name, **overrides)
