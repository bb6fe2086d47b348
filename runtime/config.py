"""The live runtime's configuration and the names it gives things on Ray.

One frozen :class:`RuntimeConfig` travels to every actor, so the global manager, the local
managers and the controller wire the scheduling core exactly as
:func:`global_manager.simulator.simulate` does for the same :class:`SimConfig`
(:meth:`RuntimeConfig.sim_config`): same cycle ``q``, control period, rate per weight,
queue weights and policy.

Units: ``cycle`` and windows in seconds of model time; ``time_scale`` in model seconds per
real second; ``start_margin_s``, ``report_timeout_s`` in real seconds; rates in Mcycles/s.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from global_manager.config import SimConfig
from global_manager.core import QueueMode
from global_manager.policies import Policy, get_policy, policies

#: Ray namespace every coalloc actor lives in.
NAMESPACE = "coalloc"
#: Name of the detached global-manager actor (one per namespace).
GLOBAL_NAME = "coalloc-global"
#: Name of the detached co-allocation controller actor.
CONTROLLER_NAME = "coalloc-controller"
#: Prefix of the local-manager actors' names (``coalloc-lm-<node>``).
LOCAL_PREFIX = "coalloc-lm-"

_SIM_DEFAULTS = SimConfig()

#: Environment variable that moves coalloc's home (state file, logs) away from ~/.coalloc.
HOME_ENV = "COALLOC_HOME"


def local_manager_name(node: str) -> str:
    """The Ray actor name of the local manager of ``node``."""
    return f"{LOCAL_PREFIX}{node}"


def coalloc_home() -> Path:
    """Where coalloc keeps its state file and logs: ``$COALLOC_HOME`` or ``~/.coalloc``."""
    env = os.environ.get(HOME_ENV)
    return Path(env).expanduser() if env else Path.home() / ".coalloc"


class ExecutorKind(str, Enum):
    """How a subtask's work is done on its node."""

    SYNTHETIC = "synthetic"  # Mcycles consumed at the granted rate (no process)
    PROCESS = "process"  # a real command held to its granted CPU share


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """Everything the live runtime's actors need to agree on.

    ``policy``: a name of :data:`global_manager.policies.policies`. ``time_scale``: model
    seconds per real second (100: a 1800 s job runs for 18 s). ``cycle``: the local
    scheduling cycle ``q`` (model s). ``control_every``: cycles per control period.
    ``rate_per_weight``: ``u_t`` default (Mcycles/s per weight unit). ``queue_weights``:
    local, QoS, best-effort CPU weights. ``work_conserving``: pass unused queue shares on.
    ``log_every``: phase-log period records every that many periods (and whenever a window
    fires). ``control_lag``: the controller evaluates the period that ended at a cycle
    boundary this fraction of a cycle later, once that boundary's reports are in (0..1).
    ``start_margin_s``: real seconds between a submission and the cycle boundary at which
    its subtasks start on every node (time for the Ray calls to reach the nodes).
    ``report_port`` / ``command_port``: TCP ports of the controller's report (PULL) and
    command sockets, 0 for an ephemeral port. ``ntp_servers``: ``host[:port]`` strings
    (none: the local clock). ``log_path``: the phase log (JSON Lines) on the controller's
    node. ``seed``: seeds the global manager's RNG (random placement). ``core_mhz``: the
    speed of one CPU of a Ray node that declares no ``coalloc_mhz`` resource.
    ``insecure``: no CURVE on the ZeroMQ channels (debugging only: anyone who reaches the
    controller's ports may then send reports and take commands).
    """

    policy: str = "sq"
    time_scale: float = 100.0
    # The core's parameters default to the simulator's, so that both drive it alike.
    cycle: float = _SIM_DEFAULTS.cycle
    control_every: int = _SIM_DEFAULTS.control_every
    rate_per_weight: float = _SIM_DEFAULTS.rate_per_weight
    queue_weights: tuple[float, float, float] = _SIM_DEFAULTS.queue_weights
    work_conserving: bool = _SIM_DEFAULTS.work_conserving
    log_every: int = _SIM_DEFAULTS.log_every
    control_lag: float = 0.5
    #: A local manager whose loop finds itself more than this many boundaries late was
    #: stalled (SIGSTOP, a frozen VM): it resynchronises to the current boundary instead of
    #: replaying the missed cycles with the weights of the moment.
    stall_cycles: int = 10
    start_margin_s: float = 0.3
    report_port: int = 0
    command_port: int = 0
    ntp_servers: tuple[str, ...] = field(default_factory=tuple)
    log_path: str = ""
    seed: int = 0
    core_mhz: float = 1000.0
    insecure: bool = False
    #: A strict job that does not fit at once: ``wait`` in the pending queue (placed by a
    #: later cycle) or ``reject`` it (the paper's behaviour).
    queue: str = "wait"
    #: Placement policy (a name of :data:`global_manager.admission.placement_policies`):
    #: ``flow`` (min-cost flow over the whole pending queue: gangs, fair shares between
    #: users, labels, priority, waiting) by default; "" keeps the policy's own.
    placement: str = "flow"
    #: Cycles without an answer from a node's local manager before the node is lost and
    #: its gangs are ended by their ``on_node_loss`` policy (after ``stall_cycles`` of
    #: silence it is only stale: placement skips it).
    node_timeout: int = 50

    def __post_init__(self) -> None:
        if self.policy not in policies:
            known = ", ".join(policies.names())
            raise ValueError(f"policy: unknown policy {self.policy!r} (known: {known})")
        for name in ("time_scale", "cycle", "rate_per_weight", "core_mhz"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name}: must be a finite number > 0, got {v!r}")
        if not isinstance(self.control_every, int) or self.control_every < 1:
            raise ValueError(f"control_every: must be an integer >= 1, got {self.control_every!r}")
        if not isinstance(self.log_every, int) or self.log_every < 1:
            raise ValueError(f"log_every: must be an integer >= 1, got {self.log_every!r}")
        if not isinstance(self.stall_cycles, int) or self.stall_cycles < 1:
            raise ValueError(f"stall_cycles: must be an integer >= 1, got {self.stall_cycles!r}")
        from global_manager.admission import placement_policies

        if self.placement and self.placement not in placement_policies:
            known = ", ".join(placement_policies.names())
            raise ValueError(f"placement: unknown placement {self.placement!r} (known: {known})")
        if self.queue not in ("wait", "reject"):
            raise ValueError(f"queue: must be wait or reject, got {self.queue!r}")
        if not isinstance(self.node_timeout, int) or self.node_timeout <= self.stall_cycles:
            raise ValueError(
                f"node_timeout: must be an integer > stall_cycles ({self.stall_cycles}), "
                f"got {self.node_timeout!r}"
            )
        if not 0 <= self.control_lag < 1:
            raise ValueError(f"control_lag: must be within [0, 1) cycles, got {self.control_lag!r}")
        if not math.isfinite(self.start_margin_s) or self.start_margin_s < 0:
            raise ValueError(f"start_margin_s: must be >= 0 s, got {self.start_margin_s!r}")
        for name in ("report_port", "command_port"):
            v = getattr(self, name)
            if not isinstance(v, int) or not 0 <= v <= 65535:
                raise ValueError(f"{name}: must be a TCP port 0-65535 (0: ephemeral), got {v!r}")
        if len(self.queue_weights) != 3:
            raise ValueError("queue_weights: must be three numbers (local, qos, best_effort)")
        # The simulator's and the local scheduler's own checks apply too.
        self.sim_config().local_config(self.get_policy())

    @property
    def real_cycle(self) -> float:
        """The cycle's length in real seconds."""
        return self.cycle / self.time_scale

    @property
    def control_period(self) -> float:
        """The control period in model seconds."""
        return self.cycle * self.control_every

    def sim_config(self) -> SimConfig:
        """The simulator configuration that wires the core the same way."""
        return SimConfig(
            cycle=self.cycle,
            control_every=self.control_every,
            rate_per_weight=self.rate_per_weight,
            queue_weights=tuple(self.queue_weights),  # type: ignore[arg-type]
            work_conserving=self.work_conserving,
            log_every=self.log_every,
            queue=QueueMode(self.queue),
        )

    def get_policy(self) -> Policy:
        """The policy by name, with this configuration's placement."""
        if self.placement:
            return get_policy(self.policy, placement=self.placement)
        return get_policy(self.policy)

    @property
    def qos_share(self) -> float:
        """The QoS queue's CPU fraction (admission budgets are built on it), as the core
        configuration derives it."""
        return self.sim_config().qos_share
