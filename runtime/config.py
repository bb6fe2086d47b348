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

import dataclasses
import functools
from dataclasses import dataclass, field
from enum import Enum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field

from global_manager.config import SimConfig
from global_manager.core import QueueMode
from global_manager.policies import Policy, get_policy, policies
from runtime.state import HOME_ENV, coalloc_home  # noqa: F401 - re-exported (moved there)
from workloads.validation import Reason, Wording, as_tuple, check_fields, fields_model

#: Ray namespace every coalloc actor lives in.
NAMESPACE = "coalloc"
#: Name of the detached global-manager actor (one per namespace).
GLOBAL_NAME = "coalloc-global"
#: Name of the detached co-allocation controller actor.
CONTROLLER_NAME = "coalloc-controller"
#: Threads of the global manager's default concurrency group (its Ray ``max_concurrency``).
GLOBAL_THREADS = 16
#: The global manager's Ray concurrency group for lease renewals, with its own threads
#: (:data:`LEASE_GROUP_THREADS`): a renewal never queues behind calls that hold the
#: default group's threads (a cancel waiting on an unreachable node, a status of a large
#: table), so a busy global manager does not let healthy nodes' leases run out.
LEASE_GROUP = "lease"
LEASE_GROUP_THREADS = 2
#: Prefix of the local-manager actors' names (``coalloc-lm-<node>``).
LOCAL_PREFIX = "coalloc-lm-"

#: The live runtime's core configuration: the simulator's defaults, but jobs that do not
#: fit wait in the pending queue.
RUNTIME_CORE = SimConfig(queue=QueueMode.WAIT)


def runtime_core(**overrides: Any) -> SimConfig:
    """:data:`RUNTIME_CORE` with some fields changed (``cycle=10.0``, ``queue="reject"``)."""
    return dataclasses.replace(RUNTIME_CORE, **overrides)



def local_manager_name(node: str) -> str:
    """The Ray actor name of the local manager of ``node``."""
    return f"{LOCAL_PREFIX}{node}"


class ExecutorKind(str, Enum):
    """How a subtask's work is done on its node."""

    SYNTHETIC = "synthetic"  # Mcycles consumed at the granted rate (no process)
    PROCESS = "process"  # a real command held to its granted CPU share


#: Field types of :class:`RuntimeConfig` (the dataclass ignores the metadata; the strict
#: pydantic model of its fields checks it).
_Positive = Annotated[float, Field(gt=0)]
_Count = Annotated[int, Field(ge=1)]
_Port = Annotated[int, Field(ge=0, le=65535)]


def _reason(text: str) -> Reason:
    """A field's reason for every error, ``text`` followed by the value given."""
    return lambda err: f"{text}, got {err['input']!r}"


_WORDING = Wording(
    reasons={
        **{name: _reason("must be a finite number > 0") for name in ("time_scale", "core_mhz",
                                                                   "keep_finished_s")},
        "stall_cycles": _reason("must be an integer >= 1"),
        **{name: _reason("must be a TCP port 0-65535 (0: ephemeral)")
           for name in ("report_port", "command_port")},
        "control_lag": _reason("must be within [0, 1) cycles"),
        "start_margin_s": _reason("must be >= 0 s"),
        "node_timeout": _reason("must be an integer > stall_cycles"),
        "lease_s": _reason("must be a finite number of seconds >= 0 (0: the default)"),
    },
)


@functools.cache
def _config_model() -> type[BaseModel]:
    return fields_model(RuntimeConfig, exclude=("core",))


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """Everything the live runtime's actors need to agree on.

    ``core``: the scheduling core's :class:`SimConfig` (cycle ``q`` in model s, cycles per
    control period, ``u_t``, queue weights, work conservation, log period, queue mode),
    read through the properties of the same names. ``policy``: a name of
    :data:`global_manager.policies.policies`. ``time_scale``: model seconds per real
    second (100: a 1800 s job runs for 18 s). ``control_lag``: the controller evaluates
    the period that ended at a cycle boundary this fraction of a cycle later, once that
    boundary's reports are in (0..1).
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

    #: The scheduling core's configuration, the simulator's record (cycle ``q``, control
    #: period, rate per weight, queue weights, work conservation, log period, queue
    #: mode); the live runtime's default waits (``queue: wait``).
    core: SimConfig = field(default_factory=lambda: RUNTIME_CORE)
    policy: str = "sq"
    time_scale: _Positive = 100.0
    control_lag: Annotated[float, Field(ge=0, lt=1)] = 0.5
    #: A local manager whose loop finds itself more than this many boundaries late was
    #: stalled (SIGSTOP, a frozen VM): it resynchronises to the current boundary instead of
    #: replaying the missed cycles with the weights of the moment.
    stall_cycles: _Count = 10
    start_margin_s: Annotated[float, Field(ge=0)] = 0.3
    report_port: _Port = 0
    command_port: _Port = 0
    ntp_servers: Annotated[tuple[str, ...], BeforeValidator(as_tuple)] = field(
        default_factory=tuple
    )
    log_path: str = ""
    seed: int = 0
    core_mhz: _Positive = 1000.0
    insecure: bool = False
    #: Placement policy (a name of :data:`global_manager.placer.placement_policies`):
    #: ``backfill`` (priority and fair-share order, first fit that does not delay the
    #: reservation held for the queue's longest waiter; docs/decisions.md, "Placement
    #: that nobody waits for") by default; "" keeps the policy's own.
    placement: str = "backfill"
    #: Cycles without an answer from a node's local manager before the node is lost and
    #: its gangs are ended by their ``on_node_loss`` policy (after ``stall_cycles`` of
    #: silence it is only stale: placement skips it).
    node_timeout: int = 50
    #: Real seconds a finished job (completed, failed, cancelled, expired, rejected) stays
    #: in the global manager's job table; then it moves to the journal's archive, read by
    #: ``coalloc status --all`` and by its id (``coalloc up --keep-finished``).
    keep_finished_s: _Positive = 86400.0
    #: Real seconds a local manager's lease on being part of the cluster lasts after it
    #: sent its last renewal the global manager granted; a node that cannot renew for a
    #: whole lease fences itself (stops its subtasks: :mod:`runtime.lease`). 0: the
    #: default, :data:`runtime.lease.LEASE_FRACTION` of the node-loss window
    #: (:attr:`loss_window_s`; 10 s at the defaults). Must be shorter than that window
    #: (``coalloc up --lease``).
    lease_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0

    def __post_init__(self) -> None:
        if self.policy not in policies:
            known = ", ".join(policies.names())
            raise ValueError(f"policy: unknown policy {self.policy!r} (known: {known})")
        if not isinstance(self.core, SimConfig):
            raise ValueError(f"core: must be a SimConfig, got {type(self.core).__name__}")
        checked = check_fields(self, _config_model(), _WORDING)
        object.__setattr__(self, "ntp_servers", checked["ntp_servers"])  # a list: a tuple
        from global_manager.placer import placement_policies

        if self.placement and self.placement not in placement_policies:
            known = ", ".join(placement_policies.names())
            raise ValueError(f"placement: unknown placement {self.placement!r} (known: {known})")
        if self.node_timeout <= self.stall_cycles:
            raise ValueError(
                f"node_timeout: must be an integer > stall_cycles ({self.stall_cycles}), "
                f"got {self.node_timeout!r}"
            )
        if self.lease_s and self.lease_s >= self.loss_window_s:
            raise ValueError(
                f"lease: must be shorter than the node-loss window ({self.node_timeout} "
                f"cycles x {self.real_cycle:g} s = {self.loss_window_s:g} s, --node-timeout "
                f"at time scale {self.time_scale:g}), got {self.lease_s:g} s"
            )
        # The simulator's and the local scheduler's own checks apply too.
        self.sim_config().local_config(self.get_policy())

    # The core's parameters, read through: one record, no copies.
    @property
    def cycle(self) -> float:
        """The local scheduling cycle ``q``, model s."""
        return self.core.cycle

    @property
    def control_every(self) -> int:
        return self.core.control_every

    @property
    def rate_per_weight(self) -> float:
        return self.core.rate_per_weight

    @property
    def queue_weights(self) -> tuple[float, float, float]:
        return self.core.queue_weights

    @property
    def log_every(self) -> int:
        return self.core.log_every

    @property
    def queue(self) -> str:
        """``wait`` or ``reject``."""
        return self.core.queue.value

    @property
    def real_cycle(self) -> float:
        """The cycle's length in real seconds."""
        return self.cycle / self.time_scale

    @property
    def loss_window_s(self) -> float:
        """Real seconds of silence after which the global manager declares a node lost
        (``node_timeout`` cycles)."""
        return self.node_timeout * self.real_cycle

    @property
    def lease_seconds(self) -> float:
        """The local managers' lease in real seconds: :attr:`lease_s`, or by default
        :data:`runtime.lease.LEASE_FRACTION` of :attr:`loss_window_s`."""
        from runtime.lease import LEASE_FRACTION

        return self.lease_s or LEASE_FRACTION * self.loss_window_s

    @property
    def control_period(self) -> float:
        """The control period in model seconds."""
        return self.cycle * self.control_every

    def sim_config(self) -> SimConfig:
        """The simulator configuration that wires the core the same way: :attr:`core`."""
        return self.core

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
