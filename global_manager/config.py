"""The scheduling core's configuration, shared by its two drivers: the simulator
(:func:`global_manager.simulator.simulate`) and the live runtime
(:meth:`runtime.config.RuntimeConfig.sim_config`). A module of its own so that the
runtime can build one without importing the simulator; :mod:`global_manager.simulator`
re-exports :class:`SimConfig`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from global_manager.core import GlobalConfig, QueueMode
from global_manager.policies import Policy
from local_manager.scheduler import DEFAULT_QUEUE_WEIGHTS, LocalSchedulerConfig
from workloads.model import QueueName


@dataclass(frozen=True, slots=True)
class SimConfig:
    """``cycle``: local scheduling cycle ``q`` (s); ``control_every``: cycles per control
    period; ``rate_per_weight``: ``u_t`` default (Mcycles/s per weight unit);
    ``queue_weights``: CPU weights of the local, QoS and best-effort queues;
    ``work_conserving``: pass unused queue shares on; ``max_time``: stop the run there (s,
    ``None`` = when every admitted job has finished); ``log_every``: period records every
    that many periods (and whenever a window fires)."""

    cycle: float = 30.0
    control_every: int = 1
    rate_per_weight: float = 25.0
    queue_weights: tuple[float, float, float] = (
        DEFAULT_QUEUE_WEIGHTS[QueueName.LOCAL],
        DEFAULT_QUEUE_WEIGHTS[QueueName.QOS],
        DEFAULT_QUEUE_WEIGHTS[QueueName.BEST_EFFORT],
    )
    work_conserving: bool = True
    max_time: float | None = None
    log_every: int = 1
    #: Replay whole quiet stretches of the grid in one go: the same work and clock
    #: arithmetic as stepping, so the same decisions; off = step every cycle.
    fast_forward: bool = True
    #: ``reject`` (the paper) or ``wait`` (the pending queue); a string is accepted.
    queue: QueueMode = QueueMode.REJECT

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "queue", QueueMode(self.queue))
        except ValueError:
            known = ", ".join(m.value for m in QueueMode)
            raise ValueError(f"queue: must be one of {known}, got {self.queue!r}") from None
        if not math.isfinite(self.cycle) or self.cycle <= 0:
            raise ValueError("cycle: must be a finite number of seconds > 0")
        if self.control_every < 1:
            raise ValueError("control_every: must be >= 1 cycle")

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
        )
