"""Whole scheduling policies, registered by name (docs/model.md "Policies compared").

A policy bundles the admission policy, whether the SQ controller runs and how, and what
virtual subtasks do with their share:

| name | admission | controller | what a slowed subtask gives up |
| --- | --- | --- | --- |
| ``sq`` | 5 % over measured QoS capacity | pace control (rate caps) | other work on its node |
| ``strict`` | strict | off | (never slowed) — the paper's baseline |
| ``none`` | none | off | (never slowed) |
| ``sq_paper`` | 5 % overbooking | the paper's windows | idle (virtual subtask) |
| ``sq_no_overbooking`` | strict | the paper's windows | idle |
| ``sq_work_conserving`` | 5 % overbooking | the paper's windows | lent to best effort |
| ``sq_let_ahead`` | 5 % overbooking | windows; jobs ahead are not slowed | idle |
| ``sq_no_lend`` | 5 % overbooking | pace control | other QoS work only |
| ``sq_no_boost`` | 5 % overbooking | pace control, no speed-up from slack | as ``sq`` |
| ``sq_no_borrow`` | 5 % overbooking | pace control; QoS work never uses idle CPU | as ``sq`` |
| ``sq_useful`` | 5 % overbooking | pace control; waiting members held near their need | as ``sq`` |

``sq`` is the product's default; ``sq_paper`` reproduces the paper and the three rows
after it are its ablations, the last four are ``sq``'s (``sq_useful``: the nodes'
useful-rate caps, ``docs/decisions.md``, "Caps from the useful rate"). Any field can be
overridden by name (``get_policy("sq", overbooking=0.2)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from coallocator.controller import AheadPolicy, ControllerConfig, ControlMode
from global_manager.admission import admission_policies
from global_manager.registry import Registry
from local_manager.scheduler import VirtualSubtaskMode


class PolicyName(str, Enum):
    STRICT = "strict"
    SQ = "sq"
    SQ_PAPER = "sq_paper"
    SQ_NO_LEND = "sq_no_lend"
    SQ_NO_BOOST = "sq_no_boost"
    SQ_NO_BORROW = "sq_no_borrow"
    NONE = "none"
    SQ_NO_OVERBOOKING = "sq_no_overbooking"
    SQ_WORK_CONSERVING = "sq_work_conserving"
    SQ_LET_AHEAD = "sq_let_ahead"
    SQ_LEAD = "sq_lead"
    SQ_USEFUL = "sq_useful"


#: Admission policies that take an overbooking ratio.
OVERBOOKING_ADMISSIONS = frozenset({"overbooking", "measured_capacity"})


@dataclass(frozen=True, slots=True)
class Policy:
    """A named scheduling policy. ``admission`` names an entry of
    :data:`global_manager.admission.admission_policies`; ``overbooking`` is its ratio
    (only for ``overbooking``); ``placement`` names a placement policy; ``lend_paced``:
    under pace control, lend what capped subtasks leave to the best-effort and grid-local
    queues (see :mod:`local_manager.scheduler`); ``useful_caps``: under pace control,
    the nodes hold coupled members that wait near their useful rate
    (:mod:`local_manager.useful_rate`)."""

    name: str
    admission: str
    controller: bool
    overbooking: float = 0.0
    virtual_mode: VirtualSubtaskMode = VirtualSubtaskMode.IDLE
    placement: str = "least_loaded"
    controller_config: ControllerConfig = field(default_factory=ControllerConfig)
    lend_paced: bool = True
    borrow_idle: bool = True
    useful_caps: bool = False

    @property
    def overbooks(self) -> bool:
        """Whether admission overbooks by :attr:`overbooking` (its ratio applies)."""
        return self.admission in OVERBOOKING_ADMISSIONS

    def admission_policy(self):  # -> AdmissionPolicy
        if self.overbooks:
            return admission_policies.create(self.admission, ratio=self.overbooking)
        return admission_policies.create(self.admission)


policies: Registry[Policy] = Registry("policy")


@policies.register(PolicyName.STRICT.value)
def _strict(**kw: object) -> Policy:
    return Policy(name="strict", admission="strict", controller=False, **kw)  # type: ignore[arg-type]


#: The product's pace controller.
PACE = ControllerConfig(mode=ControlMode.PACE)


@policies.register(PolicyName.SQ.value)
def _sq(**kw: object) -> Policy:
    kw.setdefault("overbooking", 0.05)
    kw.setdefault("controller_config", PACE)
    kw.setdefault("virtual_mode", VirtualSubtaskMode.PACED)
    kw.setdefault("admission", "measured_capacity")
    return Policy(name="sq", controller=True, **kw)  # type: ignore[arg-type]


#: ``sq_lead``'s lead: half of each job's asynchrony window (``docs/decisions.md``, "The
#: price of being in step": the largest lead measured that keeps window violations under
#: 1 %).
SQ_LEAD_FRACTION = 0.5


@policies.register(PolicyName.SQ_LEAD.value)
def _sq_lead(**kw: object) -> Policy:
    """``sq`` whose members may run ahead of their gang's laggard by up to half of the
    job's asynchrony window: turnaround before phase difference, still inside ``A_t``."""
    kw.setdefault(
        "controller_config", ControllerConfig(mode=ControlMode.PACE, pace_lead=SQ_LEAD_FRACTION)
    )
    return _renamed(_sq(**kw), "sq_lead")


@policies.register(PolicyName.SQ_USEFUL.value)
def _sq_useful(**kw: object) -> Policy:
    """``sq`` whose nodes also hold each coupled member that waits near the CPU it needs
    (``progress: reported`` members; ``docs/decisions.md``, "Caps from the useful
    rate")."""
    kw.setdefault("useful_caps", True)
    return _renamed(_sq(**kw), "sq_useful")


@policies.register(PolicyName.SQ_NO_LEND.value)
def _sq_no_lend(**kw: object) -> Policy:
    kw.setdefault("lend_paced", False)
    policy = _sq(**kw)
    return _renamed(policy, "sq_no_lend")


@policies.register(PolicyName.SQ_NO_BOOST.value)
def _sq_no_boost(**kw: object) -> Policy:
    kw.setdefault(
        "controller_config", ControllerConfig(mode=ControlMode.PACE, straggler_boost=False)
    )
    return _renamed(_sq(**kw), "sq_no_boost")


@policies.register(PolicyName.SQ_NO_BORROW.value)
def _sq_no_borrow(**kw: object) -> Policy:
    kw.setdefault("borrow_idle", False)
    return _renamed(_sq(**kw), "sq_no_borrow")


@policies.register(PolicyName.SQ_PAPER.value)
def _sq_paper(**kw: object) -> Policy:
    kw.setdefault("overbooking", 0.05)
    return Policy(name="sq_paper", admission="overbooking", controller=True, **kw)  # type: ignore[arg-type]


def _renamed(policy: Policy, name: str) -> Policy:
    from dataclasses import replace

    return replace(policy, name=name)


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
