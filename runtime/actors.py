"""The Ray actors of the live runtime: thin shells over the services.

* :class:`GlobalManagerActor` (named ``coalloc-global``, detached, namespace ``coalloc``):
  :class:`~runtime.global_service.GlobalService`; the entry point of clients; holds the
  report endpoint and the names of the other actors.
* :class:`ControllerActor` (``coalloc-controller``): binds the report (PULL) and command
  sockets on its Ray node's address (never all interfaces) and runs
  :class:`~runtime.controller_service.ControllerService`. Given the runtime's CURVE keys
  it runs a ZAP authenticator that admits only the local managers' keys.
* :class:`LocalManagerActor` (``coalloc-lm-<node>``, one per grid node, pinned to its Ray
  node): runs :class:`~runtime.node_runtime.NodeRuntime` in a thread.

They are plain classes; :mod:`runtime.deploy` turns them into Ray actors with
``ray.remote(...).options(...)``. All are threaded actors (``max_concurrency`` > 1) so
that status calls are answered while the loops run. What they answer is built elsewhere:
the status document and the job table's views by :mod:`runtime.status`. Beside the
actors, the global manager's monitor plumbing: its report calls out
(:class:`ReportCalls`) and which local managers Ray is restarting (:class:`RestartWatch`,
from Ray's state API).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from runtime.api import ApiServer
from runtime.config import (
    CONTROLLER_NAME,
    GLOBAL_NAME,
    NAMESPACE,
    RuntimeConfig,
)
from runtime.controller_service import ControllerService
from runtime.global_service import GlobalService
from runtime.identity import AdminSeed, Credential, Identity, Refusal, Role, check_submit
from runtime.journal import journal_files
from runtime.lease import LeaseTerms, NodeLease
from runtime.node_host import HostedNode, node_handle
from runtime.node_lease import LeaseKeeper
from runtime.node_runtime import NodeRuntime
from runtime.rendezvous import KvAccess
from runtime.status import (
    CancelResult,
    ControllerView,
    GlobalManagerStatus,
    JobRecord,
    QueueRow,
    StatusDocument,
    SubmitAnswer,
    assemble_status,
    controller_placeholder,
    parse_answers,
    parse_cancels,
)
from runtime.timebase import ModelClock, TimeBase, make_real_clock
from workloads.messages import (
    JobRegistration,
    NodeReport,
    SubtaskOutcome,
    SubtaskPhase,
)
from workloads.model import JobSpec, Node, Subtask

if TYPE_CHECKING:
    from ray import ObjectRef

    from coallocator.security import ClientCurve, ServerCurve

log = logging.getLogger("coalloc.runtime")

#: A call's reference (a Ray ``ObjectRef``; any hashable value in tests).
_Ref = TypeVar("_Ref", bound=Hashable)

#: Real seconds the monitor waits for the local managers' reports (all at once) before
#: counting a node as silent this round.
STATUS_TIMEOUT_S = 5.0
#: Real seconds ``status`` waits, overall, for the views of every local manager and the
#: controller (asked at once); those that have not answered by then are shown as not
#: answering, so one stopped node does not hold ``coalloc status``.
STATUS_DEADLINE_S = 1.0
#: Real seconds the global manager waits for a controller or local-manager call.
CALL_TIMEOUT_S = 30.0
#: Real seconds between two reconciliations of the global manager's job table with the
#: local managers' views (finished-subtask notifications lost while it was down).
RECONCILE_S = 5.0
#: Real seconds between two health checks of the local managers by the global manager
#: (each also reconciles that node's subtasks with the job table).
MONITOR_S = 1.0
#: Real seconds a (restarted) global manager keeps trying to bind its API port.
API_BIND_WAIT_S = 10.0


def _node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


def _node_addresses(placements: list[tuple[Node, str, bool]]) -> dict[str, str]:
    """Each grid node's address (its Ray node's), by node name: MASTER_ADDR of a run
    whose member 0 runs there. A node Ray does not list is left out (loopback)."""
    import ray

    try:
        by_id = {n["NodeID"]: str(n["NodeManagerAddress"]) for n in ray.nodes()}
    except Exception:  # noqa: BLE001 - best effort: members then see the loopback address
        log.warning("cannot read the Ray nodes' addresses; MASTER_ADDR is the loopback")
        return {}
    return {node.name: by_id[rid] for node, rid, _ in placements if rid in by_id}


def _port_of(endpoint: str) -> int:
    """The TCP port of a ZeroMQ endpoint ``tcp://host:port``."""
    return int(endpoint.rsplit(":", 1)[1])


def _node_ip() -> str:
    import ray.util

    return str(ray.util.get_node_ip_address())


def _checkpointed_tags(ckpt: Path) -> set[str]:
    """Tags of the process subtasks named by this deployment's local-manager checkpoints
    on this machine: ``ckpt`` and its siblings ``lm-*-<same epoch>.json``."""
    epoch = ckpt.name.rsplit("-", 1)[-1]
    tags: set[str] = set()
    for path in ckpt.parent.glob(f"lm-*-{epoch}"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            for d in data.get("subtasks", []):
                rec = d.get("executor")
                if isinstance(rec, dict) and rec.get("tag"):
                    tags.add(str(rec["tag"]))
        except (OSError, ValueError, AttributeError, TypeError):
            continue
    return tags


# ----------------------------------------------------------------------- controller


class ControllerActor:
    """The co-allocation controller on its node (see the module docstring)."""

    def __init__(
        self,
        config: RuntimeConfig,
        base: TimeBase,
        node_budgets: dict[str, float],
        log_path: str | None,
        curve: ServerCurve | None = None,
        checkpoint: str | None = None,
    ) -> None:
        """``curve``: the runtime's CURVE keys (None: plaintext sockets, ``--insecure``);
        ``checkpoint``: its restart file. Built again by Ray after a crash, it rebinds the
        ports recorded there, drops reports applied before the crash and tracks the
        running jobs again (asks the global manager)."""
        from runtime.metrics import RayControllerMetrics

        ckpt = Path(checkpoint) if checkpoint else None
        recorded: dict[str, Any] = {}
        if ckpt is not None and ckpt.exists():
            recorded = ControllerService.read_checkpoint(ckpt)
        report_port = int(recorded.get("report_port") or config.report_port or 0)
        command_port = int(recorded.get("command_port") or config.command_port or 0)
        self.config = config
        self.real = make_real_clock(config.ntp_servers)
        self.clock = ModelClock(self.real, base)
        from coallocator.security import NodeAuthenticator
        from coallocator.transport import CommandPublisher, ReportReceiver

        host = _node_ip()
        self.auth = NodeAuthenticator(curve) if curve is not None else None
        self.receiver = ReportReceiver(host, report_port or None, auth=self.auth)
        self.publisher = CommandPublisher(host, command_port or None, auth=self.auth)
        self.service = ControllerService(
            config,
            self.clock,
            node_budgets,
            self.receiver,
            self.publisher,
            Path(log_path) if log_path else None,
            RayControllerMetrics(),
            ckpt,
            {
                "report_port": _port_of(self.receiver.endpoint),
                "command_port": _port_of(self.publisher.endpoint),
            },
        )
        self.service.write_checkpoint()  # the ports, before any local manager connects
        self.resumed = 0
        self._thread = threading.Thread(
            target=self.service.run, name="coalloc-controller", daemon=True
        )
        self._thread.start()
        threading.Thread(
            target=self._resync_loop, name="coalloc-controller-resync", daemon=True
        ).start()

    def _resync_loop(self) -> None:
        """Every :data:`RECONCILE_S`: after a restart, track again the running jobs the
        global manager lists and mark the subtasks it knows ended (their done reports
        went to the dead process); always, close the tracked runs the global manager says
        ended more than ``stall_cycles`` cycles ago (a done report lost on the way). Ends
        when the controller stops."""
        import ray

        gm: Any = None
        settle = self.config.stall_cycles * self.config.cycle
        while self._thread.is_alive():
            try:
                if gm is None:
                    gm = ray.get_actor(GLOBAL_NAME, namespace=NAMESPACE)
                if self.service.recovered:
                    # Also the runs the dead controller tracked: one that ended while it
                    # was down is resumed with every subtask ended, so it closes.
                    orphans = self.service.orphaned_runs()
                    jobs = ray.get(gm.controller_jobs.remote(orphans), timeout=CALL_TIMEOUT_S)
                    self.service.orphans_asked(orphans)
                    for reg, ended in jobs:
                        if self.service.resume_job(reg, ended):
                            self.resumed += 1
                        else:
                            for i, t in ended.items():
                                self.service.subtask_ended(reg.job_id, i, t)
                tracked = self.service.tracked_jobs()
                if tracked:
                    over = ray.get(gm.ended_runs.remote(tracked, self.clock.now() - settle),
                                   timeout=CALL_TIMEOUT_S)
                    for run_id, (ends, why) in over.items():
                        self.service.close_run(run_id, ends, why)
            except Exception as exc:  # noqa: BLE001 - the global manager may be restarting
                log.info("controller resync: %s", type(exc).__name__)
            time.sleep(RECONCILE_S)

    def ready(self) -> dict[str, Any]:
        return {
            "ray_node_id": _node_id(),
            "pid": os.getpid(),
            "report_endpoint": self.receiver.endpoint,
            "command_endpoint": self.publisher.endpoint,
            "running": self._thread.is_alive(),
            "secure": self.auth is not None,
            "recovered": self.service.recovered,
            "resumed": self.resumed,
        }

    def register_node(self, node: str, incarnation: int) -> None:
        """``node``'s local manager runs as ``incarnation`` from now on."""
        self.service.register_node(node, incarnation)

    def register_job(self, reg: JobRegistration) -> None:
        self.service.register_job(reg)

    def cancel(self, job_id: str, reason: str = "") -> None:
        """Stop tracking ``job_id``; its summary in the phase log carries ``reason``."""
        self.service.cancel(job_id, reason)

    def status(self) -> dict[str, Any]:
        st = self.service.status()
        st["running"] = self._thread.is_alive()
        st["real_clock"] = self.real.status().to_dict()
        if self.auth is not None:
            st["security"]["zap"] = self.auth.counters()
            # public by design (CurveZMQ): other local-manager implementations need it
            st["security"]["server_public_key"] = self.auth.curve.server.public.decode()
        return st

    def shutdown(self) -> bool:
        """``down``: stop, close the sockets, remove the checkpoint (nothing to resume)."""
        self.service.stop()
        self._thread.join(timeout=5.0)
        self.service.close()
        if self.service.checkpoint is not None:
            self.service.checkpoint.unlink(missing_ok=True)
        self.receiver.close()
        self.publisher.close()
        if self.auth is not None:
            self.auth.close()
        self.real.close()
        return True


# -------------------------------------------------------------------- local manager


class LocalManagerActor:
    """One grid node's local manager (see the module docstring)."""

    def __init__(
        self,
        node: Node,
        config: RuntimeConfig,
        base: TimeBase,
        report_endpoint: str,
        command_endpoint: str,
        output_dir: str | None,
        curve: ClientCurve | None = None,
        checkpoint: str | None = None,
    ) -> None:
        """``curve``: this node's CURVE keys (None: plaintext, ``--insecure``);
        ``checkpoint``: the file on this node its subtask state is written to every
        boundary. Built again by Ray after a crash (max_restarts) it restores that state:
        synthetic subtasks resume, running process subtasks are re-attached (their
        processes are kept; other orphans of this node are reaped), with a new
        incarnation."""
        from local_manager.executor_records import ExecutorRecord
        from local_manager.process_executor import ProcessExecutor
        from local_manager.sweep import reap_stale_subtasks
        from runtime.metrics import RayNodeMetrics

        ckpt = Path(checkpoint) if checkpoint else None
        saved: dict[str, Any] | None = None
        if ckpt is not None:
            ckpt.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                saved = json.loads(ckpt.read_text(encoding="utf-8"))
            except FileNotFoundError:
                saved = None
            except (OSError, ValueError) as exc:
                log.warning("%s: unreadable checkpoint (%s); starting empty", ckpt, exc)
        # Subtask processes of a local manager that was SIGKILLed (ray.kill) are orphans;
        # those a checkpoint names are adopted instead: by this manager below, or by
        # another node's manager on this machine (emulated nodes, several raylets on one
        # host) when Ray restarts it.
        keep = _checkpointed_tags(ckpt) if ckpt is not None else set()
        self.reaped = len(reap_stale_subtasks(keep_tags=keep, own_restart_file=ckpt))
        self.node = node
        self.config = config
        self.real = make_real_clock(config.ntp_servers)
        self.clock = ModelClock(self.real, base)
        from coallocator.transport import CommandSubscriber, ReportSender

        self.sender = ReportSender(report_endpoint, curve=curve)
        self.subscriber = CommandSubscriber(command_endpoint, node.name, curve=curve)
        self._gm: Any = None
        self.runtime = NodeRuntime(
            node,
            config,
            self.clock,
            self.sender,
            self.subscriber,
            self._ended,
            output_dir=Path(output_dir) if output_dir else None,
            checkpoint=ckpt,
        )
        self.restored = 0
        if saved is not None:

            def attach(record: dict[str, Any]) -> Any:
                return ProcessExecutor.attach(
                    ExecutorRecord.from_dict(record, str(ckpt)), speed_mhz=node.speed_mhz,
                    grace_s=1.0,
                )

            try:
                self.restored = self.runtime.restore(saved, attach)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("%s: cannot restore (%s); starting empty", ckpt, exc)
        self.metrics = RayNodeMetrics(node.name)
        # The lease: a restarted manager holds it from its predecessor's last granted
        # renewal (its checkpoint; same host, so the same monotonic clock), never longer.
        held = saved.get("lease_confirmed_at") if saved is not None else None
        self.lease = LeaseKeeper(
            node.name, self.runtime,
            NodeLease(LeaseTerms(config.lease_seconds), time.monotonic(),
                      float(held) if isinstance(held, (int, float)) else None),
            self._global, self._forget_global,
        )
        self._thread = threading.Thread(
            target=self.runtime.run, name=f"coalloc-lm-{node.name}", daemon=True
        )
        self._thread.start()
        threading.Thread(
            target=self.lease.run, name=f"coalloc-lease-{node.name}", daemon=True
        ).start()

    def _global(self) -> Any:
        """The global manager's handle (looked up once, again after a failure)."""
        import ray

        if self._gm is None:
            self._gm = ray.get_actor(GLOBAL_NAME, namespace=NAMESPACE)
        return self._gm

    def _forget_global(self) -> None:
        """A call to the global manager failed: look its handle up again next time."""
        self._gm = None

    def _ended(self, outcome: SubtaskOutcome) -> None:
        """Tell the global manager (fire and forget) that a subtask left the node."""
        try:
            self._global().subtask_ended.remote(outcome)
        except Exception:  # noqa: BLE001 - the global manager may be gone (down)
            log.warning("cannot reach the global manager about %s", outcome)

    def ready(self) -> dict[str, Any]:
        return {
            "node": self.node.name,
            "ray_node_id": _node_id(),
            "pid": os.getpid(),
            "incarnation": self.runtime.incarnation,
            "running": self._thread.is_alive(),
            "reaped_stale": self.reaped,
            "restored": self.restored,
            "lease": self.lease.view(),
        }

    def place(self, subtasks: list[Subtask], start: float) -> int:
        self.runtime.submit(subtasks, start)
        return len(subtasks)

    def cancel(self, job_id: str) -> bool:
        return self.runtime.cancel_job(job_id)

    def report(self, asked: list[tuple[str, int]]) -> NodeReport:
        """The global manager's once-a-second question (cheap; :meth:`NodeRuntime.report`):
        ``asked``: the (run id, index) it still has running here. With this node's
        transport counters (what ``status`` shows). Also refreshes this node's metrics."""
        rep = self.runtime.report(asked)
        alive = rep.loop_running and self._thread.is_alive()
        self.metrics.update(dict(rep.counters),
                            sum(1 for s in rep.subtasks if s.state is SubtaskPhase.RUNNING),
                            sum(1 for s in rep.subtasks if s.stalled))
        return dataclasses.replace(rep, loop_running=alive, transport={
            "sender": dict(self.sender.counters()),
            "subscriber": dict(self.subscriber.counters()),
        })

    def status(self) -> dict[str, Any]:
        snap = self.runtime.snapshot()
        snap["ray_node_id"] = _node_id()
        snap["pid"] = os.getpid()
        snap["loop_alive"] = self._thread.is_alive()
        snap["transport"] = {
            "sender": dict(self.sender.counters()),
            "subscriber": dict(self.subscriber.counters()),
        }
        running = sum(1 for s in snap.get("subtasks", []) if s["state"] == "running")
        stalled = sum(1 for s in snap.get("subtasks", []) if s.get("stalled"))
        self.metrics.update(snap.get("counters", {}), running, stalled)
        return snap

    def shutdown(self) -> bool:
        """Stop the loop, kill every subtask process, close the sockets."""
        self.lease.stop()
        self.runtime.stop()
        self._thread.join(timeout=15.0)
        if self.runtime.checkpoint is not None:  # down: nothing is left to resume
            self.runtime.checkpoint.unlink(missing_ok=True)
        self.sender.close()
        self.subscriber.close()
        self.real.close()
        return True


# ------------------------------------------------------------------- global manager


class ReportCalls(Generic[_Ref]):
    """The monitor's report calls still out (no Ray here: a call is any hashable
    reference). A node with a call out is not asked again; a call out longer than
    ``give_up_s`` real s is given up, so its node is asked again next round."""

    def __init__(self, give_up_s: float) -> None:
        self.give_up_s = give_up_s
        self._out: dict[_Ref, tuple[str, float]] = {}  # ref -> (node, asked at, real s)

    def to_ask(self, nodes: Iterable[str]) -> list[str]:
        """Those of ``nodes`` with no call out, in their order."""
        busy = {node for node, _ in self._out.values()}
        return [n for n in nodes if n not in busy]

    def asked(self, ref: _Ref, node: str, at: float) -> None:
        """``node`` was asked at ``at`` (real s); ``ref`` is the call's reference."""
        self._out[ref] = (node, at)

    def refs(self) -> list[_Ref]:
        """The calls out."""
        return list(self._out)

    def came(self, ref: _Ref) -> str:
        """Call ``ref`` came back (an answer or an error): no longer out. Its node."""
        return self._out.pop(ref)[0]

    def still_out(self, now: float) -> list[str]:
        """The nodes with a call out at ``now`` (real s); the calls out longer than
        ``give_up_s`` are given up (their nodes listed all the same)."""
        nodes = []
        for ref, (node, at) in list(self._out.items()):
            nodes.append(node)
            if now - at > self.give_up_s:
                del self._out[ref]
        return nodes


#: Real seconds the state API's query for restarting actors may take.
STATE_API_TIMEOUT_S = 1
#: Real seconds before the state API is asked again after it did not answer (a cluster
#: without Ray's dashboard, which serves it, never will).
STATE_API_RETRY_S = 60.0


def restarting_actors(actor_ids: Collection[str]) -> set[str] | None:
    """Of ``actor_ids`` (hex), those Ray's actor table says it is restarting, from one
    query of Ray's state API (:func:`ray.util.state.list_actors`, state
    ``RESTARTING``). None when the state API did not answer: it is served by Ray's
    dashboard, which a cluster may run without (``coalloc up``'s own head does)."""
    from ray.util.state import list_actors

    try:
        found = list_actors(filters=[("state", "=", "RESTARTING")],
                            timeout=STATE_API_TIMEOUT_S, raise_on_missing_output=False)
    except Exception:  # noqa: BLE001 - no dashboard, or it did not answer in time
        return None
    return {str(a.actor_id) for a in found} & set(actor_ids)


class RestartWatch:
    """Which local managers Ray is restarting, as the monitor sees them (no Ray here:
    ``actor_id`` names a node's actor, ``query`` is :func:`restarting_actors`).

    A node is seen restarting either way: its actor's state in Ray's actor table was
    ``RESTARTING`` at some check, or a call to it failed with ``ActorUnavailableError``
    (Ray's "may come back"; ``ActorDiedError`` is "will not", a call that only timed
    out says nothing: a hung manager). Kept until the node answers: the restarted actor
    is ``ALIVE`` in the table a while before calls reach it on a loaded machine (the
    caller learns its new address late). When the table cannot be read (no dashboard)
    the failed calls alone say it, and the table is asked again only after
    :data:`STATE_API_RETRY_S`."""

    def __init__(
        self, actor_id: Callable[[str], str],
        query: Callable[[Collection[str]], set[str] | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.actor_id = actor_id
        self.query = query
        self.clock = clock
        self.seen: set[str] = set()
        self._table_back_at = 0.0  # monotonic s the table may be asked again

    def answered(self, node: str) -> None:
        """``node`` answered: it is not restarting (any more)."""
        self.seen.discard(node)

    def restarting(self, nodes: Iterable[str], last_error: Mapping[str, str]) -> set[str]:
        """Those of ``nodes`` (which did not answer) whose local manager Ray has been
        restarting since they last answered; ``last_error``: node -> the name of the
        exception its last call gave."""
        nodes = list(nodes)
        for node in nodes:
            if last_error.get(node) == "ActorUnavailableError":
                self.seen.add(node)
        unknown = [n for n in nodes if n not in self.seen]
        if unknown and self.clock() >= self._table_back_at:
            ids: dict[str, str] = {}
            for node in unknown:
                try:
                    ids[self.actor_id(node)] = node
                except Exception:  # noqa: BLE001 - no handle: the failed call says
                    continue
            found = self.query(list(ids)) if ids else set()
            if found is None:
                self._table_back_at = self.clock() + STATE_API_RETRY_S
            else:
                self.seen.update(ids[a] for a in found if a in ids)
        return self.seen.intersection(nodes)


class _RayDispatch:
    """Reaches the controller and the local managers through Ray calls; not the nodes in
    ``cut`` (:meth:`GlobalManagerActor.isolate`)."""

    def __init__(
        self, controller: Any, local_managers: dict[str, Any], cut: Collection[str] = ()
    ) -> None:
        self.controller = controller
        self.local_managers = local_managers
        self.cut = cut

    def register(self, reg: JobRegistration) -> None:
        import ray

        ray.get(self.controller.register_job.remote(reg), timeout=CALL_TIMEOUT_S)

    def place(self, node: str, subtasks: list[Subtask], start: float) -> None:
        import ray

        if node in self.cut:
            raise ConnectionError(f"node {node} is cut off")
        ray.get(self.local_managers[node].place.remote(subtasks, start), timeout=CALL_TIMEOUT_S)

    def cancel(self, job_id: str, nodes: Iterable[str], reason: str = "") -> list[str]:
        """Stop run ``job_id`` on ``nodes`` and the controller; never raises. Returns the
        actors that could not be reached (a node's zombie run is cancelled by the
        reconciliation once its manager answers again)."""
        import ray

        unreached = [f"node {n}" for n in nodes if n in self.cut]
        calls = [(f"node {n}", self.local_managers[n].cancel.remote(job_id)) for n in nodes
                 if n not in self.cut]
        calls.append(("the controller", self.controller.cancel.remote(job_id, reason)))
        for who, ref in calls:
            try:
                ray.get(ref, timeout=CALL_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - reported, the rest still stopped
                log.warning("cancel %s on %s: %s", job_id, who, type(exc).__name__)
                unreached.append(who)
        return unreached


class GlobalManagerActor:
    """The global manager (see the module docstring). ``placements``: (node, Ray node id,
    emulated) per local manager; ``info``: what ``up`` recorded (endpoints, log path,
    actor names), shown by ``status``."""

    def __init__(
        self,
        placements: list[tuple[Node, str, bool]],
        config: RuntimeConfig,
        base: TimeBase,
        info: dict[str, Any],
        auth: AdminSeed | None = None,
    ) -> None:
        """``auth``: the HTTP API's credentials' key, first admin and the runs'
        key-value secret (None: no API); the API listens on this node's address, port
        ``info["api_port"]`` (see :mod:`runtime.api`)."""
        import ray

        self.config = config
        self.base = base
        self.info = dict(info)
        self.placements = placements
        self.real = make_real_clock(config.ntp_servers)
        self.clock = ModelClock(self.real, base)
        self.controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
        # A node's own actor, or its place in a node host (``up --nodes-per-process``).
        hosts = dict(self.info.get("node_hosts") or {})
        self.local_managers = {
            node.name: node_handle(node.name, hosts.get(node.name)) for node, _, _ in placements
        }
        journal = self.info.get("gm_journal")
        from runtime.metrics import RayGlobalMetrics

        self.metrics = RayGlobalMetrics()
        #: Nodes this manager acts as if cut off from (:meth:`isolate`; fault tests).
        self._cut: set[str] = set()
        # Built by Ray again after a crash (max_restarts): the journal is then recovered.
        self.service = GlobalService(
            [node for node, _, _ in placements],
            config,
            self.clock,
            _RayDispatch(self.controller, self.local_managers, self._cut),
            Path(journal) if journal else None,
            self.metrics,
        )
        self._restarts = RestartWatch(self._actor_id, restarting_actors)
        #: Why each node's last report call gave no report (cleared by its next one).
        self._report_errors: dict[str, str] = {}
        self._first_round = threading.Event()  # the monitor's first round is over
        self._stop = threading.Event()
        self._monitor = threading.Thread(
            target=self._monitor_loop, name="coalloc-gm-monitor", daemon=True
        )
        self._monitor.start()
        self._queue = threading.Thread(
            target=self._queue_loop, name="coalloc-gm-queue", daemon=True
        )
        self._queue.start()
        self.service.addresses = _node_addresses(placements)
        self.api: ApiServer | None = None
        self.api_error: str | None = None
        if auth is not None:
            self.service.open_users(auth)
            self.api = self._serve_api(int(self.info.get("api_port") or 0), auth.kv_secret)
        if self.api is not None and auth is not None:
            # The members' key-value store is served on the API, their credentials
            # derived from the deployment's key-value secret (runtime.rendezvous): no
            # user's credential, so revoking one never touches a running job.
            self.service.kv_access = KvAccess(self.api.url, auth.kv_secret)

    def _serve_api(self, port: int, kv_secret: str) -> ApiServer | None:
        """The HTTP API on this node's address and ``port``. A restarted global manager
        binds the same port again: its predecessor's socket may take a moment to go, so
        binding is retried for :data:`API_BIND_WAIT_S`; then the error is logged and shown
        by ``status`` (clients fall back to nothing: they say the API does not answer)."""
        host = _node_ip()
        deadline = time.monotonic() + API_BIND_WAIT_S
        while True:
            try:
                return ApiServer(self, host, port, kv=self.service, kv_secret=kv_secret)
            except OSError as exc:
                if time.monotonic() >= deadline:
                    self.api_error = f"cannot serve the API on {host}:{port}: {exc}"
                    log.error("%s", self.api_error)
                    return None
                time.sleep(0.2)

    def _queue_loop(self) -> None:
        """Every cycle: a placement cycle of the pending queue (cheap when nothing
        changed: the core skips it), then the finished jobs past their retention move to
        the archive (cheap: a heap of when each may leave)."""
        every = max(self.config.real_cycle, 0.05)
        while not self._stop.wait(every):
            try:
                self.service.place_pending()
                self.service.archive_finished()
            except Exception:  # noqa: BLE001 - logged; the next cycle tries again
                log.exception("placement cycle failed")

    def _monitor_loop(self) -> None:
        """Every :data:`MONITOR_S` (the first round at once): ask every local manager for
        its :class:`~workloads.messages.NodeReport` (naming the subtasks the job table
        has running there) and wait at most :data:`MONITOR_S` for this round's answers.
        A node whose earlier call is still out is not asked again (its answer is taken
        when it comes, in a later round); a call out longer than
        :data:`STATUS_TIMEOUT_S` is given up and asked again. So one stopped node holds
        no round: the other nodes' reports stay fresh for ``status``. An answer marks
        the node alive and is reconciled with the job table (ended subtasks whose
        notifications were lost, work done, runs to stop there); then silent nodes
        become stale, and lost after ``node_timeout`` cycles; last, the journal's log is
        folded into its file."""
        import ray

        wait = 0.0
        calls: ReportCalls[ObjectRef[NodeReport]] = ReportCalls(STATUS_TIMEOUT_S)
        while not self._stop.wait(wait):
            began = time.monotonic()
            asked = self.service.running_subtasks()
            earlier = calls.refs()
            new = []
            cut = set(self._cut)
            for n in cut:
                self._report_errors[n] = "cut off"
            for n in calls.to_ask(n for n in self.local_managers if n not in cut):
                ref = self.local_managers[n].report.remote(asked.get(n, []))
                calls.asked(ref, n, began)
                new.append(ref)
            ready: list[ObjectRef[NodeReport]] = []
            if new:
                ready, _ = ray.wait(new, num_returns=len(new), timeout=MONITOR_S)
            if earlier:
                ready += ray.wait(earlier, num_returns=len(earlier), timeout=0)[0]
            answered = set()
            for ref in ready:
                node = calls.came(ref)
                if node in cut:
                    continue  # asked before the cut: not heard
                try:
                    report = ray.get(ref, timeout=0)
                except Exception as exc:  # noqa: BLE001 - that node did not answer
                    self._report_errors[node] = type(exc).__name__
                    continue
                self._report_errors.pop(node, None)
                answered.add(node)
                self._restarts.answered(node)
                try:
                    for run_id in self.service.apply_report(report):
                        self.local_managers[node].cancel.remote(run_id)
                except Exception:  # noqa: BLE001 - asked again next time
                    log.exception("reconcile with %s", node)
            for node in calls.still_out(time.monotonic()):
                self._report_errors.setdefault(node, "no answer")
            last_error = dict(self._report_errors)
            try:
                restarting = self._restarts.restarting(
                    [n for n in self.local_managers if n not in answered], last_error
                )
                self.service.check_nodes(last_error, restarting)
                self.metrics.state(self.service.gauges())
            except Exception:  # noqa: BLE001
                log.exception("node check failed")
            try:
                self.service.checkpoint_journal()  # off the writers' path
            except Exception:  # noqa: BLE001 - a journal write checkpoints in the end
                log.exception("journal checkpoint failed")
            self._first_round.set()
            wait = max(0.0, MONITOR_S - (time.monotonic() - began))

    def _actor_id(self, node: str) -> str:
        """The Ray actor id (hex) that runs ``node``'s local manager (its node host's)."""
        handle = self.local_managers[node]
        actor = handle.host if isinstance(handle, HostedNode) else handle
        return str(actor._actor_id.hex())

    def ready(self) -> dict[str, Any]:
        """This manager's identity; answered once the monitor's first round is over (at
        most :data:`STATUS_TIMEOUT_S` plus a round), so that ``status`` after ``up`` has
        every node's first report."""
        self._first_round.wait(STATUS_TIMEOUT_S + MONITOR_S)
        return {
            "ray_node_id": _node_id(),
            "pid": os.getpid(),
            "nodes": len(self.placements),
            "recovered": self.service.recovered,
            "reconciled": self.service.reconciled,
            "api": self.api.url if self.api is not None else None,
            "api_error": self.api_error,
        }

    def deployment(self) -> dict[str, Any]:
        """What clients need: endpoints, log path, actor names, nodes and configuration."""
        return dict(
            self.info,
            nodes=[node.name for node, _, _ in self.placements],
            n_nodes=len(self.placements),
            time_scale=self.config.time_scale,
            cycle=self.config.cycle,
        )

    def submit(self, specs: list[JobSpec], token: str | None = None) -> list[SubmitAnswer]:
        """``token``: the client's id of this submission (a retry is answered once)."""
        return parse_answers(self.service.submit(list(specs), token))

    def submit_documents(
        self, jobs: list[Mapping[str, Any]], token: str | None, who: Identity
    ) -> list[SubmitAnswer]:
        """:meth:`submit` of job mappings (the API's body) by user ``who`` (a job naming
        no user is ``who``'s; :func:`~runtime.identity.check_submit`): each is checked as
        a job file's entry is, against this deployment's node count; the first bad one
        raises :class:`~workloads.spec.SpecError` naming ``jobs[i]`` and the field."""
        from workloads.spec import check_fits, parse_job

        n = len(self.placements)
        specs = []
        for i, doc in enumerate(jobs):
            spec = parse_job(doc, "request", i, n_nodes=n, default_user=who.name)
            check_fits(spec, n, "request", i)
            specs.append(spec)
        check_submit(who, (s.user for s in specs))
        return parse_answers(self.service.submit(specs, token))

    def submit_file(
        self, text: str, source: str, token: str | None, who: Identity
    ) -> list[SubmitAnswer]:
        """:meth:`submit` of a job file's text (the API's body) by user ``who`` (as
        :meth:`submit_documents`), checked as :func:`~workloads.spec.load_jobs` checks
        the file ``source``, against this deployment's node count (errors name
        ``source``)."""
        from workloads.spec import load_jobs_text

        specs = load_jobs_text(text, source, len(self.placements), default_user=who.name)
        check_submit(who, (s.user for s in specs))
        return parse_answers(self.service.submit(specs, token))

    # ------------------------------------------------------- the API's users
    def authenticate(self, token: str | None) -> Identity | Refusal:
        return self.service.authenticate(token)

    def job_owners(self, job_ids: list[str]) -> dict[str, str]:
        return self.service.job_owners(job_ids)

    def list_users(self) -> list[dict[str, object]]:
        return [_user_view(c) for c in self.service.list_users()]

    def add_user(self, name: str, role: Role) -> dict[str, object]:
        cred, token = self.service.add_user(name, role)
        return dict(_user_view(cred), token=token)

    def revoke_user(self, name: str) -> dict[str, object] | None:
        try:
            return _user_view(self.service.revoke_user(name))
        except KeyError:
            return None

    def cancel_jobs(
        self, job_ids: list[str] | None, user: str | None = None, state: str | None = None
    ) -> list[CancelResult]:
        """Bulk cancel, as ``scancel`` (see ``GlobalService.cancel_many``)."""
        return parse_cancels(self.service.cancel_many(job_ids, user, state))

    def subtask_ended(self, outcome: SubtaskOutcome) -> None:
        if outcome.node in self._cut:
            return
        self.service.subtask_ended(outcome)

    def renew_lease(self, node: str, incarnation: int) -> str:
        """``node``'s local manager renews its lease (``runtime.lease``): the
        :class:`~runtime.lease.Answer`'s value."""
        if node in self._cut:
            raise ConnectionError(f"node {node} is cut off")
        return self.service.renew_lease(node, incarnation).value

    def isolate(self, nodes: list[str]) -> list[str]:
        """For fault tests: act from now on as if the links to ``nodes`` were cut on this
        side (one side of a partition that leaves the node's processes and its report
        channel to the controller alone): their lease renewals fail, their reports and
        subtask outcomes are not heard, and no call is made to them. ``[]`` heals. Not
        kept across a restart. Returns the nodes cut."""
        unknown = sorted(set(nodes) - set(self.local_managers))
        if unknown:
            raise ValueError(f"isolate: unknown nodes {', '.join(unknown)}")
        self._cut.clear()
        self._cut.update(nodes)
        log.warning("fault injection: nodes cut off: %s", ", ".join(sorted(nodes)) or "none")
        return sorted(self._cut)

    def hold(self, seconds: float) -> float:
        """For fault tests: keep one of the default concurrency group's threads for
        ``seconds`` (real s), as a call slow to answer does (a cancel waiting on an
        unreachable node). Lease renewals have a group of their own
        (:data:`~runtime.config.LEASE_GROUP`) and are answered meanwhile."""
        time.sleep(seconds)
        return seconds

    def cancel(self, job_id: str) -> JobRecord | None:
        return self.service.cancel(job_id)

    def job(self, job_id: str) -> JobRecord | None:
        return self.service.job(job_id)

    def job_states(self, job_ids: list[str] | None = None) -> dict[str, str]:
        return self.service.job_states(job_ids)

    def queue(self) -> list[QueueRow]:
        """Pending and running jobs with user, priority, wait and reason."""
        return self.service.queue()

    def ended_runs(
        self, run_ids: list[str], before: float
    ) -> dict[str, tuple[dict[int, float], str]]:
        return self.service.ended_runs(run_ids, before)

    def controller_jobs(
        self, also: list[str] | None = None
    ) -> list[tuple[JobRegistration, dict[int, float]]]:
        """What a restarted controller tracks again (see ``GlobalService``)."""
        return self.service.controller_jobs(also or ())

    def status(self, job_id: str | None = None, all_jobs: bool = False) -> StatusDocument:
        """Jobs, subtasks, nodes, virtual clocks, phase differences and counters.
        ``job_id``: only that job (also when archived); ``all_jobs``: the archived jobs
        (finished past ``keep_finished_s``) too. The nodes' part comes from their last
        reports (the monitor's, once a second): no node is asked, so a stopped one does
        not hold the answer; the controller is asked, with :data:`STATUS_DEADLINE_S`."""
        import ray

        desc = self.service.describe(job_id, archived=all_jobs)
        heard, subtasks = self.service.heard()
        ctl_ref = self.controller.status.remote()
        ready, _ = ray.wait([ctl_ref], num_returns=1, timeout=STATUS_DEADLINE_S)
        ctl = _view(ctl_ref, set(ready))
        phase_log = self.info.get("phase_log")
        journal = self.info.get("gm_journal")
        st = assemble_status(
            desc, heard, subtasks, ctl, self.placements, self.config,
            address=self.info.get("address"),
            phase_log=str(phase_log) if phase_log else None,
            security_mode=str(self.info.get("transport_security", "unknown")),
            job_id=job_id, errors=dict(self._report_errors),
        )
        return st.model_copy(update={"global_manager": GlobalManagerStatus(
            api=self.api.url if self.api is not None else None,
            api_error=self.api_error,
            pid=os.getpid(),
            recovered=self.service.recovered,
            reconciled=self.service.reconciled,
            journal=str(journal) if journal else None,
        )})

    def shutdown(self) -> bool:
        """``down``: stop and remove the journal (nothing is left to recover)."""
        self._stop.set()
        if self.api is not None:
            self.api.close()
            self.api = None
        journal = self.info.get("gm_journal")
        self.service.close()
        if journal:
            for path in journal_files(Path(journal)):
                path.unlink(missing_ok=True)
        self.real.close()
        return True


def _user_view(cred: Credential) -> dict[str, object]:
    """A credential as ``GET /users`` lists it: never its hash."""
    return {"name": cred.name, "role": cred.role.value, "created": cred.created,
            "revoked": cred.revoked}


def _view(ref: ObjectRef[dict[str, object]], answered: set[ObjectRef[dict[str, object]]]
          ) -> ControllerView:
    """The controller's status view from ``ref``; if it is not among ``answered`` (not
    back within :data:`STATUS_DEADLINE_S`) or failed, its placeholder saying so."""
    import ray

    if ref not in answered:
        return controller_placeholder(
            f"not answering (no answer within {STATUS_DEADLINE_S:g} s)")
    try:
        return ControllerView.model_validate(ray.get(ref, timeout=0))
    except Exception as exc:  # noqa: BLE001 - shown as unreachable
        return controller_placeholder(f"unreachable: {type(exc).__name__}")
