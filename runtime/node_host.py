"""Several emulated nodes' local managers in one process (``coalloc up --nodes-per-process``).

One Ray actor per emulated node costs a Python worker process each (about 120 MB and a
share of the CPU for Ray's own threads, idle or not): 64 nodes took 8 GB and 0.8 of a core
doing nothing. A :class:`NodeHostActor` hosts several
:class:`~runtime.actors.LocalManagerActor` objects instead. Each keeps everything it has
as its own actor: its :class:`~runtime.node_runtime.NodeRuntime` (scheduler, cycle loop
thread), its ZeroMQ sockets and CURVE keys, its incarnation and its checkpoint file; only
the process, and so the Ray worker, is shared. A crash of the process is a crash of every
node it hosts: Ray restarts the host, and each manager restores its own checkpoint, as a
restarted single-node actor does.

The global manager reaches a hosted node through :class:`HostedNode`, which looks like
the node's own actor handle (``handle.place.remote(subtasks, start)``) and calls the
host's method of the same name with the node's name first. The host is handed the local
manager's class by ``up`` (:class:`ManagerFactory`) rather than importing it:
:mod:`runtime.actors` reaches hosted nodes through this module, which so stays below it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from runtime.config import NAMESPACE, RuntimeConfig, local_manager_name
from runtime.timebase import TimeBase
from workloads.messages import NodeReport
from workloads.model import Node, Subtask

if TYPE_CHECKING:
    from coallocator.security import ClientCurve

#: Prefix of a node host's Ray actor name (``coalloc-lmh-0``, ...).
HOST_PREFIX = "coalloc-lmh-"
#: ``--nodes-per-process`` default: at most this many nodes to a host process. Each
#: process costs about 0.8 CPU s to start (a Ray worker importing the runtime) and a
#: share of Ray's own threads idle; 32 nodes to a process kept every job in step at 256
#: emulated nodes on two cores (docs/decisions.md, "64 nodes up in 15 s").
MAX_NODES_PER_PROCESS = 32
#: Up to this many emulated nodes, each has its own process (the default).
OWN_PROCESS_UP_TO = 8


def host_name(index: int) -> str:
    """The Ray actor name of node host ``index``."""
    return f"{HOST_PREFIX}{index}"


def default_nodes_per_process(emulated: int) -> int:
    """``--nodes-per-process`` when not given: 1 for up to :data:`OWN_PROCESS_UP_TO`
    emulated nodes, else the fewest host processes of at most
    :data:`MAX_NODES_PER_PROCESS` nodes each, as many to each as that count needs (64
    nodes: 2 processes of 32; 100: 4 of 25)."""
    if emulated <= OWN_PROCESS_UP_TO:
        return 1
    processes = -(-emulated // MAX_NODES_PER_PROCESS)
    return -(-emulated // processes)


class _Stoppable(Protocol):
    def stop(self) -> None: ...


class HostedManager(Protocol):
    """What a host asks of each local manager it hosts: the entry points of a
    :class:`~runtime.actors.LocalManagerActor`."""

    @property
    def runtime(self) -> _Stoppable: ...

    def ready(self) -> dict[str, Any]: ...

    def place(self, subtasks: list[Subtask], start: float) -> int: ...

    def cancel(self, job_id: str) -> bool: ...

    def status(self) -> dict[str, Any]: ...

    def report(self, asked: list[tuple[str, int]]) -> NodeReport: ...

    def shutdown(self) -> bool: ...


class ManagerFactory(Protocol):
    """Builds one node's local manager (:class:`~runtime.actors.LocalManagerActor`)."""

    def __call__(
        self, node: Node, config: RuntimeConfig, base: TimeBase, report_endpoint: str,
        command_endpoint: str, output_dir: str | None, curve: ClientCurve | None = None,
        checkpoint: str | None = None,
    ) -> HostedManager: ...


class NodeHostActor:
    """The local managers of ``members`` (node, CURVE keys, checkpoint path) in one
    process, each built by ``manager`` (the local manager's actor class, handed over by
    the deployment so that this module does not import it); every entry point takes the
    node's name first and does what that node's own actor would."""

    def __init__(
        self,
        manager: ManagerFactory,
        members: Sequence[tuple[Node, ClientCurve | None, str | None]],
        config: RuntimeConfig,
        base: TimeBase,
        report_endpoint: str,
        command_endpoint: str,
        output_dir: str | None,
    ) -> None:
        self.managers: dict[str, HostedManager] = {}
        for node, curve, checkpoint in members:
            self.managers[node.name] = manager(
                node, config, base, report_endpoint, command_endpoint, output_dir, curve,
                checkpoint,
            )

    def nodes(self) -> list[str]:
        return list(self.managers)

    def ready(self, node: str) -> dict[str, Any]:
        return dict(self.managers[node].ready(), host=True)

    def place(self, node: str, subtasks: list[Subtask], start: float) -> int:
        return self.managers[node].place(subtasks, start)

    def cancel(self, node: str, job_id: str) -> bool:
        return self.managers[node].cancel(job_id)

    def status(self, node: str) -> dict[str, Any]:
        return self.managers[node].status()

    def report(self, node: str, asked: list[tuple[str, int]]) -> NodeReport:
        return self.managers[node].report(asked)

    def shutdown(self) -> bool:
        """Stop every hosted node (each kills its subtask processes)."""
        for manager in self.managers.values():
            manager.runtime.stop()
        return all(manager.shutdown() for manager in self.managers.values())


class _HostedMethod:
    __slots__ = ("method", "node")

    def __init__(self, method: Any, node: str) -> None:
        self.method = method
        self.node = node

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self.method.remote(self.node, *args, **kwargs)


class HostedNode:
    """A hosted node's local manager, called like an actor handle of its own (module
    docstring)."""

    __slots__ = ("host", "node")

    def __init__(self, host: Any, node: str) -> None:
        self.host = host
        self.node = node

    def __getattr__(self, method: str) -> _HostedMethod:
        if method.startswith("__"):
            raise AttributeError(method)
        return _HostedMethod(getattr(self.host, method), self.node)


def node_handle(node: str, host: str | None) -> Any:
    """What the global manager calls node ``node``'s local manager through: its own actor,
    or (``host``: the name of the host actor it lives in) a :class:`HostedNode`."""
    import ray

    if host is None:
        return ray.get_actor(local_manager_name(node), namespace=NAMESPACE)
    return HostedNode(ray.get_actor(host, namespace=NAMESPACE), node)
