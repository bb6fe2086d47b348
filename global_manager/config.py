"""The scheduling core's configuration, shared by its two drivers: the simulator
(:func:`global_manager.simulator.simulate`) and the live runtime
(:meth:`runtime.config.RuntimeConfig.sim_config`). A module of its own so that the
runtime can build one without importing the simulator; :mod:`global_manager.simulator`
re-exports :class:`SimConfig`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field

from global_manager.core import GlobalConfig, QueueMode
from global_manager.policies import Policy
from local_manager.scheduler import DEFAULT_QUEUE_WEIGHTS, LocalSchedulerConfig
from workloads.model import QueueName
from workloads.validation import Reason, Wording, as_tuple, check_fields, fields_model

#: Field types of :class:`SimConfig` (the dataclass ignores the metadata; the strict
#: pydantic model of its fields checks it).
_Positive = Annotated[float, Field(gt=0)]
_Count = Annotated[int, Field(ge=1)]
_Weight = Annotated[float, Field(ge=0)]


def _reason(text: str) -> Reason:
    """A field's reason for every error, ``text`` followed by the value given."""
    return lambda err: f"{text}, got {err['input']!r}"


_WORDING = Wording(
    reasons={
        **{name: _reason("must be a finite number > 0") for name in ("cycle", "rate_per_weight")},
        **{name: _reason("must be an integer >= 1") for name in ("control_every", "log_every")},
        "max_time": _reason("must be a finite number of seconds (or None)"),
        "queue_weights": _reason("must be three numbers >= 0 (local, qos, best_effort)"),
        "queue_weights[]": _reason("must be a number >= 0"),
    },
)


@functools.cache
def _fields_model() -> type[BaseModel]:
    return fields_model(SimConfig)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The scheduling core's configuration (one record for both drivers).

    ``cycle``: local scheduling cycle ``q`` (s); ``control_every``: cycles per control
    period; ``rate_per_weight``: ``u_t`` default (Mcycles/s per weight unit);
    ``queue_weights``: CPU weights of the local, QoS and best-effort queues;
    ``work_conserving``: pass unused queue shares on; ``max_time``: stop the run there (s,
    ``None`` = when every admitted job has finished); ``log_every``: period records every
    that many periods (and whenever a window fires); ``fast_forward`` and
    ``step_every_cycle``: simulator options (the live runtime steps every cycle);
    ``queue``: :class:`QueueMode`."""

    cycle: _Positive = 30.0
    control_every: _Count = 1
    rate_per_weight: _Positive = 25.0
    queue_weights: Annotated[tuple[_Weight, _Weight, _Weight], BeforeValidator(as_tuple)] = (
        DEFAULT_QUEUE_WEIGHTS[QueueName.LOCAL],
        DEFAULT_QUEUE_WEIGHTS[QueueName.QOS],
        DEFAULT_QUEUE_WEIGHTS[QueueName.BEST_EFFORT],
    )
    work_conserving: bool = True
    max_time: float | None = None
    log_every: _Count = 1
    #: Replay whole quiet stretches of the grid in one go (no arrival, finish, expiry,
    #: re-weighting or window firing): every clock summed cycle by cycle as stepping
    #: sums it, each control period checked on those clocks, so the same bytes out; off
    #: = step every cycle.
    fast_forward: bool = True
    #: The reference mode: every node and the controller through their public cycle
    #: (``LocalScheduler.step``, progress report records, ``ControllerCore.ingest``), as
    #: the live runtime drives them; off, the simulator takes the schedulers' lean path
    #: (the same arithmetic in the same order; :mod:`local_manager.replay`).
    step_every_cycle: bool = False
    #: Lean mode only: a node whose entry nears its end (so that its cap moves every
    #: cycle) replays its last split when it is shown to be the same to the bit
    #: (:meth:`ReplayingScheduler._near_end_split`); off = compute such splits afresh, as
    #: the reference does. The same bytes either way.
    replay_near_end: bool = True
    #: ``reject`` (the paper) or ``wait`` (the pending queue); a string is accepted.
    queue: QueueMode = QueueMode.REJECT

    def __post_init__(self) -> None:
        object.__setattr__(self, "queue", QueueMode.parse(self.queue))
        checked = check_fields(self, _fields_model(), _WORDING)
        object.__setattr__(self, "queue_weights", checked["queue_weights"])
        if sum(self.queue_weights) <= 0:
            raise ValueError("queue_weights: must not all be 0")

    @property
    def qos_share(self) -> float:
        """The QoS queue's CPU fraction (admission budgets are built on it): derived here
        only, from ``queue_weights``."""
        return self.queue_weights[1] / sum(self.queue_weights)

    def global_config(self) -> GlobalConfig:
        """The global manager's configuration under this core configuration."""
        return GlobalConfig(self.rate_per_weight, self.qos_share, self.queue)

    def local_config(self, policy: Policy) -> LocalSchedulerConfig:
        weights = dict(
            zip((QueueName.LOCAL, QueueName.QOS, QueueName.BEST_EFFORT), self.queue_weights)
        )
        return LocalSchedulerConfig(
            weights,
            self.work_conserving,
            policy.virtual_mode,
            lend_paced=policy.lend_paced,
            borrow_idle=policy.borrow_idle,
            useful_caps=policy.useful_caps,
        )
