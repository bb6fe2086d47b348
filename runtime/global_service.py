"""The global manager's service: :class:`GlobalManagerCore` plus the live job table.

No Ray here: :mod:`runtime.actors` wraps it and supplies a :class:`~runtime.dispatch.Dispatch`
that reaches the controller and the local managers. Wiring is the simulator's
(:func:`global_manager.simulator.simulate`): the same core, policy, RNG seed, global
configuration (rate per weight, QoS share) and node budgets; an admitted grid QoS job is
registered with the controller before its subtasks are handed to their nodes.

A submission at model time ``now`` is admitted at the cycle boundary ``b`` at or after
``now + margin`` (the margin, in real seconds, lets the Ray calls reach every node in
time: ``start_margin_s``, or more when recent dispatch calls were slow,
:mod:`runtime.start_margin`): the job's subtasks start at ``b`` on every node, the
controller tracks it from ``b``, as the simulator admits a job at the boundary of its
arrival. A batch of jobs (one ``submit`` call) shares one ``b`` and is admitted in order,
so the same batch makes the same decisions as the simulator given the same node loads.

The dispatch transaction: a run is placed and journaled under the lock
(:meth:`GlobalService._reserve`, a :class:`~runtime.jobs.PendingDispatch`), its calls are
made outside it (:func:`runtime.dispatch.send`), and it is committed or rolled back under
the lock when they have answered (:meth:`GlobalService._settle`).

Persistence (write-ahead, :mod:`runtime.job_journal`). Given a ``journal`` path, the
service records what changed in that journal, one transaction after every change and
before the change is acted on or answered: an admitted job is written before it is
dispatched, a cancellation before the nodes are told, a subtask outcome before anyone can
read it. A service built over an existing journal recovers from it (a restarted global
manager). A submission may carry a client token; a retried submission with a token
already in the journal gets the recorded answers instead of a second admission (at most
once, for :data:`~runtime.jobs.TOKEN_KEEP_S` real s after the first answer). Finished
jobs move to the journal's archive after ``keep_finished_s``
(:meth:`GlobalService.archive_finished`).

Node health (:mod:`runtime.node_health`) decides which nodes are stale or lost; this
service acts on it (placement skips them, gangs on a lost node end) and reconciles its
job table with what each node reports (:meth:`GlobalService.apply_report`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from global_manager.core import GlobalManagerCore, QueueMode
from runtime.config import RuntimeConfig
from runtime.dispatch import Dispatch, DispatchFailed, send
from runtime.identity import (
    AdminSeed,
    Credential,
    Identity,
    Refusal,
    Registry,
    Role,
    new_token,
)
from runtime.job_journal import UNREADABLE, JobJournal
from runtime.jobs import (
    TOKEN_KEEP_S,
    Answered,
    JobInfo,
    PendingDispatch,
    PlacedSubtask,
    RunId,
    SubtaskEnd,
)
from runtime.journal import Sync
from runtime.kv_store import KvStore, RunGone
from runtime.lease import Answer, LeaseLedger, LeaseTerms
from runtime.metrics import NullGlobalMetrics, QueueGauges
from runtime.node_health import HeardReport, NodeHealth
from runtime.rendezvous import KvAccess, Member, PortPool, run_env
from runtime.start_margin import StartMargin, dispatch_calls
from runtime.status import (
    JobRecord,
    JobTable,
    QueueRow,
    job_record,
    node_record,
    queue_gauges,
    queue_order,
    queue_row,
    submit_answer,
    to_json,
)
from runtime.timebase import ModelClock, boundary_at_or_after
from workloads.messages import (
    JobRegistration,
    NodeReport,
    SubtaskOutcome,
    SubtaskPhase,
    SubtaskReport,
    initial_pace_of,
)
from workloads.model import EndPolicy, JobPhase, JobSpec, Node, QosClass, Subtask

log = logging.getLogger("coalloc.runtime")

#: At most this many tokens are kept (memory); one forgotten younger than
#: :data:`TOKEN_KEEP_S` is logged and counted (``tokens_forgotten_early``).
TOKENS_KEPT = 65_536


class GlobalService:
    """Admission, the pending queue, placement, node health and the job table of the
    live runtime. Thread-safe."""

    #: How far a journal write is durable: ``NORMAL``, it survives this process's crash,
    #: the failure the journal is read after (a Ray restart of the actor in the same
    #: cluster; docs/decisions.md, "A journal whose writes cost what changed").
    journal_sync: ClassVar[Sync] = Sync.NORMAL

    def __init__(
        self,
        nodes: list[Node],
        config: RuntimeConfig,
        clock: ModelClock,
        dispatch: Dispatch,
        journal: Path | None = None,
        metrics: NullGlobalMetrics | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``journal``: the file the job table is persisted to (None: not persisted); if
        it exists the service recovers from it (see the module docstring); ``metrics``:
        its observability hooks (:mod:`runtime.metrics`); ``monotonic``: the real
        monotonic clock the nodes' leases are kept on (:mod:`runtime.lease`)."""
        self.config = config
        self.metrics = metrics or NullGlobalMetrics()
        self.clock = clock
        self.dispatch = dispatch
        self.start_margin = StartMargin(config.start_margin_s)
        self.policy = config.get_policy()
        self.core = GlobalManagerCore(
            nodes,
            self.policy,
            config.sim_config().global_config(),
            random.Random(config.seed),
        )
        self.nodes = list(nodes)
        self.jobs: dict[str, JobInfo] = {}
        self.tokens: dict[str, Answered] = {}
        self.health = NodeHealth((n.name for n in nodes), clock.now())
        #: Last known work done (Mcycles) per (run id, subtask index), from the nodes.
        self.progress: dict[tuple[str, int], float] = {}
        #: The last report of each subtask of a job in the table, by (run id, index):
        #: what ``status`` shows of a subtask, also after it left its node.
        self.subtask_reports: dict[tuple[str, int], SubtaskReport] = {}
        self.counters: dict[str, int] = {
            "requeued": 0, "failed_node_loss": 0, "failed_subtask": 0, "dispatch_failed": 0,
            "zombies_cancelled": 0, "nodes_lost": 0, "tokens_forgotten_early": 0,
            "stale_reports": 0, "stale_outcomes": 0,
        }
        self.journal = journal
        #: Subtask outcomes reconciliation applied (their notifications were lost).
        self.reconciled = 0
        self.recovered = False
        self.journal_error: str | None = None
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()
        #: Finished jobs stay in the job table this long (model s), then move to the
        #: journal's archive (``status --all``).
        self.keep_finished = config.keep_finished_s * config.time_scale
        self._store = JobJournal(self.keep_finished, self.journal_sync)
        #: Runs being dispatched (job id -> run): reserved and journaled, their calls to
        #: the controller and the nodes out (not journaled: a recovered service finds
        #: what a dispatch cut short left by reconciliation).
        self._dispatching: dict[str, RunId] = {}
        #: The rendezvous (:mod:`runtime.rendezvous`): node name -> address (MASTER_ADDR;
        #: the actor fills it from Ray), the key-value store and how members reach it
        #: (None: no HTTP API, no store in the members' environment), MASTER_PORTs.
        self.addresses: dict[str, str] = {}
        self.kv = KvStore()
        self.kv_access: KvAccess | None = None
        self.ports = PortPool()
        #: The API's credentials (:mod:`runtime.identity`; none until :meth:`open_users`).
        self.users = Registry("")
        if journal is not None:
            self._open_journal(journal)
        #: The nodes' leases (:mod:`runtime.lease`), under their own lock: renewals are
        #: answered without the job table's. Not journaled: a restarted service takes
        #: every node as granted at its start.
        self.monotonic = monotonic
        self.leases = LeaseLedger(LeaseTerms(config.lease_seconds), (n.name for n in nodes),
                                  monotonic(), lost=self.health.lost)
        self._lease_lock = threading.Lock()

    @property
    def lost(self) -> dict[str, str]:
        """Nodes lost (node -> why): their gangs were ended; back when they answer."""
        return self.health.lost

    @property
    def last_seen(self) -> dict[str, float]:
        """Model time each node's manager last answered with its loop running."""
        return self.health.last_seen

    # -------------------------------------------------------------- persistence
    def _persist(self) -> None:
        """Write what changed since the last write to the journal in one transaction
        (caller holds the lock; :meth:`JobJournal.write`). A failed write propagates:
        nothing is acted on that is not recorded."""
        self._store.write(self.core, self.jobs, self.tokens, self.lost, self.counters)

    def _mark(self, job_id: str) -> None:
        """Job ``job_id`` changed: the next :meth:`_persist` writes it."""
        self._store.changed(job_id)

    def _write_all(self) -> None:
        """Write the whole table into the (empty) journal, in one transaction."""
        self._store.write_all(self.core, self.jobs, self.tokens, self.lost, self.counters)

    def _open_journal(self, path: Path) -> None:
        """Open the journal, recovering from it if it holds a table. One that cannot be
        read (a disk error, a hand edit, another format or version) is moved aside
        (:meth:`JobJournal.set_aside`) and the service starts empty, saying so in
        ``journal_error`` (shown by status), rather than failing every restart."""
        try:
            found = self._store.open(path, self.core)
        except UNREADABLE as exc:
            self.journal_error = self._store.set_aside(exc)
            self.core = GlobalManagerCore(
                self.nodes, self.policy, self.core.config, random.Random(self.config.seed)
            )
            return
        if found is not None:
            self.jobs, self.tokens = found.jobs, found.tokens
            self.health.lost = found.lost
            self.counters.update(found.counters)
            self.recovered = True

    def checkpoint_journal(self) -> int:
        """Fold the journal's log into its file (the actor's monitor loop calls this
        every second), outside the lock: journal writes go on meanwhile, and no write
        pays for a checkpoint. Returns the log's length in pages (0: no journal)."""
        with self._checkpoint_lock:
            return self._store.checkpoint()

    def close(self) -> None:
        """Close the journal (the service is not used after this)."""
        with self._checkpoint_lock, self._lock:
            self._store.close()

    # ---------------------------------------------------------------- credentials
    def open_users(self, seed: AdminSeed) -> None:
        """The API's credentials: those the journal holds, hashed under ``seed``'s key,
        and ``up``'s admin if the journal has no user of that name (a restarted manager
        keeps what was added and revoked since)."""
        with self._lock:
            self.users = Registry(seed.salt, self._store.users())
            if seed.admin not in self.users.credentials:
                cred = Credential(seed.admin, Role.ADMIN, seed.admin_digest, time.time())
                self._store.write_user(cred)
                self.users.credentials[cred.name] = cred

    def authenticate(self, token: str | None) -> Identity | Refusal:
        """Who an API request's ``token`` is; a refusal is counted (``api_refused_<why>``
        in the counters status shows)."""
        with self._lock:
            who = self.users.authenticate(token)
            if isinstance(who, Refusal):
                key = f"api_refused_{who.value}"
                self.counters[key] = self.counters.get(key, 0) + 1
            return who

    def add_user(self, name: str, role: Role) -> tuple[Credential, str]:
        """A new credential for ``name``: its record and its token (the only time the
        token exists here: only its hash is kept). ValueError: a bad or taken name."""
        with self._lock:
            token = new_token()
            before = self.users.credentials.get(name)
            cred = self.users.add(name, role, token, time.time())
            try:
                self._store.write_user(cred)
            except BaseException:
                if before is None:
                    del self.users.credentials[name]
                else:
                    self.users.credentials[name] = before
                raise
            log.info("API credential added for %s (%s)", name, role.value)
            return cred, token

    def revoke_user(self, name: str) -> Credential:
        """Revoke ``name``'s credential (KeyError: no such user; ValueError: the last
        admin)."""
        with self._lock:
            before = self.users.credentials[name]
            cred = self.users.revoke(name, time.time())
            try:
                self._store.write_user(cred)
            except BaseException:
                self.users.credentials[name] = before
                raise
            log.info("API credential of %s revoked", name)
            return cred

    def list_users(self) -> list[Credential]:
        """Every credential (in force or revoked), by name."""
        with self._lock:
            return sorted(self.users.credentials.values(), key=lambda c: c.name)

    def job_owners(self, job_ids: Iterable[str]) -> dict[str, str]:
        """The user of each named job (job table or archive; unknown ids left out)."""
        with self._lock:
            out = {}
            for j in job_ids:
                info = self.jobs.get(j)
                if info is not None:
                    out[j] = info.user
                    continue
                old = self._store.archived(j)
                if old is not None:
                    out[j] = str(old["user"])
            return out

    # ------------------------------------------------------------------ retention
    def archive_finished(self) -> int:
        """Move the jobs that finished more than ``keep_finished`` ago out of the job
        table into the journal's archive (read by ``status --all`` and by id). Returns
        how many moved."""
        with self._lock:
            if self.kv.runs:
                self.kv.retain({i.run_id for i in self.jobs.values()
                                if i.state is JobPhase.RUNNING})
            now = self.clock.now()
            moved = self._store.due(self.jobs, now)
            if not moved:
                return 0
            self._store.archive(moved, now)  # recorded first: a failure leaves the table
            for info in moved:
                del self.jobs[info.job_id]
                self.core.forget(info.job_id)
                for n in range(1, info.dispatches + 1):
                    for s in info.subtasks:
                        key = (str(RunId(info.job_id, n)), s.index)
                        self.progress.pop(key, None)
                        self.subtask_reports.pop(key, None)
            log.info("%d finished jobs archived (kept %.6g model s)", len(moved),
                     self.keep_finished)
            return len(moved)

    def archived(self, job_id: str) -> dict[str, Any] | None:
        """The record of an archived job (None: not archived)."""
        with self._lock:
            return self._store.archived(job_id)

    def archived_jobs(self) -> list[dict[str, Any]]:
        """Every archived job's record, oldest archived first."""
        with self._lock:
            return self._store.archived_jobs()

    # ------------------------------------------- the nodes' reports, reconciled
    def _info_of_run(self, run_id: str) -> JobInfo | None:
        """The running job whose current run is ``run_id`` (None: an old run, or a job
        that is not running)."""
        run = RunId.parse(run_id, self.jobs)
        info = self.jobs.get(run.job_id)
        if info is None or info.state is not JobPhase.RUNNING:
            return None
        return info if info.run == run else None

    def running_subtasks(self, node: str | None = None) -> dict[str, list[tuple[str, int]]]:
        """Per node (only ``node`` if given), the (run id, index) of every subtask of a
        running job that has not ended yet: what :meth:`reconcile` asks the nodes about."""
        with self._lock:
            out: dict[str, list[tuple[str, int]]] = {}
            for info in self.jobs.values():
                if info.state is not JobPhase.RUNNING:
                    continue
                for s in info.open_subtasks():
                    if node in (None, s.node):
                        out.setdefault(s.node, []).append((info.run_id, s.index))
            return out

    def _open_on(self, node: str) -> set[tuple[str, int]]:
        return set(self.running_subtasks(node).get(node, []))

    def apply_report(self, report: NodeReport) -> list[str]:
        """What the monitor does with a node's answer (:class:`NodeReport`): the node is
        alive if its loop runs, its measured QoS capacity is observed, its subtasks are
        reconciled (:meth:`reconcile`). Returns the runs to stop there
        (:meth:`runs_to_stop`): the caller cancels them on the node. The report is kept
        for ``status`` (:meth:`heard`). A report of an incarnation retired by a loss is
        dropped and counted (``stale_reports``): the node rejoins under a new one."""
        with self._lease_lock:
            fresh = self.leases.heard(report.node, report.incarnation)
        if not fresh:
            with self._lock:
                self.counters["stale_reports"] += 1
            return []
        self.keep_report(report)
        self.node_answered(report.node, report.loop_running)
        self.observe_qos_capacity(report.node, report.qos_capacity)
        self.reconciled += self.reconcile(report.node, report.subtasks)
        return self.runs_to_stop(report.node, report.subtasks)

    def keep_report(self, report: NodeReport) -> None:
        """Keep ``report`` as its node's last, and its subtasks' reports (those of runs
        of jobs in the table) as theirs: what ``status`` is assembled from."""
        with self._lock:
            self.health.keep(report, self.clock.now())
            for r in report.subtasks:
                if RunId.parse(r.run_id, self.jobs).job_id in self.jobs:
                    self.subtask_reports[r.key] = r

    def heard(self) -> tuple[dict[str, HeardReport], dict[tuple[str, int], SubtaskReport]]:
        """What ``status`` shows of the nodes and their subtasks, without asking them:
        each node's last report with its age (nodes not heard from since this service
        started are absent), and the last report of each subtask (:meth:`keep_report`)."""
        with self._lock:
            nodes = self.health.heard(self.clock.now(), self.clock.base.scale)
            return nodes, dict(self.subtask_reports)

    def reconcile(self, node: str, seen: Sequence[SubtaskReport]) -> int:
        """Apply what node ``node``'s local manager says about its subtasks (its
        :class:`NodeReport`'s): work done is kept (a requeue starts from it); an ended
        subtask the job table still has running is taken as its lost ``subtask_ended``
        notification; a running job's subtask the node does not know, well after its
        start, ends that run. Returns how many outcomes were applied."""
        applied = 0
        todo = self._open_on(node)
        if self._missing(node, todo - {r.key for r in seen}):
            todo = self._open_on(node)
        for r in seen:
            if r.done_work is not None:
                self.progress[r.key] = r.done_work
            if r.key in todo and r.ended:
                self.subtask_ended(SubtaskOutcome(
                    r.run_id, r.index, node, r.state,
                    r.finish_time if r.finish_time is not None else self.clock.now(),
                    r.exit_code, r.reason,
                ))
                applied += 1
        return applied

    def runs_to_stop(self, node: str, seen: Sequence[SubtaskReport]) -> list[str]:
        """Run ids still on ``node`` (its report's subtasks) that are not a current run
        there: a run stopped while the node could not be reached (lost, stale, a failed
        dispatch). The caller cancels them there."""
        with self._lock:
            todo = self._open_on(node)
            zombies = sorted({
                r.run_id for r in seen
                if r.live and r.key not in todo and not self._ended_in_current_run(*r.key)
            })
            self.counters["zombies_cancelled"] += len(zombies)
            return zombies

    def _ended_in_current_run(self, run_id: str, index: int) -> bool:
        """Whether subtask ``index`` of run ``run_id`` is recorded as ended and the run
        is its job's current one: a node view taken just before that subtask finished
        still shows it running; it is no zombie (caller holds the lock)."""
        run = RunId.parse(run_id, self.jobs)
        info = self.jobs.get(run.job_id)
        return info is not None and info.run == run \
            and index in info.outcomes

    def _missing(self, node: str, keys: set[tuple[str, int]]) -> bool:
        """Subtasks of running jobs that ``node``'s manager does not know, well after
        their start (a dispatch cut short by a crash of the global manager, a manager
        killed before its checkpoint named them; not a run still being dispatched, whose
        calls decide): their runs are ended whole and
        requeued whatever ``on_node_loss`` says (up to ``max_attempts``). The subtask did
        no work that can be kept: it never started there, or its process was reaped as
        an orphan by the restarted manager, so running the job again loses nothing a
        failure would keep; the node itself is not lost."""
        if not keys:
            return False
        stops = []
        with self._lock:
            late = self.clock.now() - self.config.stall_cycles * self.config.cycle
            for run_id in sorted({k[0] for k in keys}):
                info = self._info_of_run(run_id)
                if info is None or info.start_at is None or info.start_at > late \
                        or self._dispatching.get(info.job_id) == info.run:
                    continue  # not late yet, or its place call is still out
                why = f"its subtask on node {node} is not there (lost by its local manager)"
                stops.append(self._end_run(info, why, EndPolicy.REQUEUE, loss=True))
            if stops:
                self._persist()
        self._send_stops(stops)
        return bool(stops)

    # ------------------------------------------------------------- node health
    def renew_lease(self, node: str, incarnation: int) -> Answer:
        """``node``'s local manager, as ``incarnation``, renews its lease
        (:meth:`LeaseLedger.renew`): granted, or ``lost`` for an incarnation retired by
        a loss (the node fences and rejoins under a new one). Not under the job table's
        lock: a journal write does not hold a renewal."""
        with self._lease_lock:
            answer = self.leases.renew(node, incarnation, self.monotonic())
        if answer is Answer.LOST:
            log.warning("node %s: lease renewal of incarnation %d refused: it was declared "
                        "lost (the node fences and rejoins under a new incarnation)",
                        node, incarnation)
        return answer

    def lease_counters(self) -> dict[str, int]:
        """Renewals refused (``stale_renewals``) and lost nodes rejoined."""
        with self._lease_lock:
            return dict(self.leases.counters)

    def _restart_after(self, nodes: Iterable[str]) -> float | None:
        """Model s before which a new run of a gang that ran on ``nodes`` (lost now) must
        not start: when their leases have certainly lapsed (None: they have)."""
        with self._lease_lock:
            lapse = max((self.leases.lapse_at(n) for n in nodes
                         if n in self.leases.granted_at), default=None)
        if lapse is None:
            return None
        wait = lapse - self.monotonic()
        return self.clock.now() + wait * self.config.time_scale if wait > 0 else None

    def node_budgets(self) -> dict[str, float]:
        return self.core.node_budgets()

    def observe_qos_capacity(self, node: str, rate: float) -> bool:
        """``node``'s local manager measured what its QoS queue can get now (Mcycles/s,
        its report's ``qos_capacity``); admission by measured capacity budgets on it. A
        rate that is not a finite number >= 0 is ignored. True if the node's budget
        moved."""
        if not self.core.measures_capacity or node not in self.core.nodes:
            return False
        with self._lock:
            return self.core.observe_qos_capacity(node, float(rate))

    def node_answered(self, node: str, loop_running: bool) -> None:
        """``node``'s local manager answered a status call (its loop running or not).
        A node that was lost or stale is put back into placement."""
        with self._lock:
            if not loop_running:
                return
            with self._lease_lock:
                if node in self.leases.lost:
                    return  # back once it has rejoined under a new incarnation (its lease)
            back = self.core.set_node_down(node, False)
            was_lost = self.health.answered(node, self.clock.now())
            if was_lost is not None:
                log.warning("node %s answers again (was lost: %s)", node, was_lost)
                back = True
            if back:
                self._persist()

    def check_nodes(
        self, last_errors: Mapping[str, str] | None = None, restarting: Container[str] = ()
    ) -> list[str]:
        """Mark nodes whose manager has been silent (:meth:`NodeHealth.check`): a stale
        node leaves placement; every running job with a subtask on a node lost now is
        ended whole by its ``on_node_loss`` policy. ``last_errors``: node -> what the
        last status call gave instead of an answer, for the reason. ``restarting``: nodes
        whose manager Ray is restarting (lost later, see :mod:`runtime.node_health`).
        Returns the nodes lost by this call."""
        now = self.clock.now()
        with self._lock:
            silence = self.health.check(now, self.config, last_errors or {}, restarting)
            if silence.gap:
                log.warning("no node check for %.1f s (the global manager was stopped or "
                            "slow): the nodes' silence over it is not counted",
                            silence.gap / self.config.time_scale)
            for node in silence.stale:
                if self.core.set_node_down(node):
                    log.warning("node %s stale: silent for %.0f cycles", node,
                                self.health.silent_cycles(node, now, self.config.cycle))
                    self._persist()
            if not silence.lost:
                return []
            for node, why in silence.lost.items():
                self.counters["nodes_lost"] += 1
                self.core.set_node_down(node)
                with self._lease_lock:
                    self.leases.declare_lost(node)
                log.error("node %s lost: %s", node, why)
            stops: list[tuple[str, list[str], str]] = []
            for info in list(self.jobs.values()):
                if info.state is not JobPhase.RUNNING:
                    continue
                hit = [s for s in info.open_subtasks() if s.node in silence.lost]
                if not hit:
                    continue
                node = hit[0].node
                why = f"node {node} lost ({self.lost[node]})"
                run_id, nodes, reason = self._end_run(
                    info, why, info.spec.node_loss_policy(), loss=True,
                    lost_nodes={s.node for s in hit})
                # Not the lost nodes: they fence the run themselves (their lease), and one
                # that answers again has it stopped by the reconciliation. A call to one
                # waits for its whole timeout, and would hold back the stops of the other
                # nodes (and of the other runs) while the new attempt may start.
                stops.append((run_id, [n for n in nodes if n not in silence.lost], reason))
            self._persist()
        self._send_stops(stops)
        return list(silence.lost)

    # ------------------------------------------------- the controller's questions
    def controller_jobs(
        self, also: Iterable[str] = ()
    ) -> list[tuple[JobRegistration, dict[int, float]]]:
        """The running grid QoS jobs (strict, loose) as a restarted controller tracks
        them again: each run's registration (its run id as ``job_id``) and which of its
        subtasks ended when (index -> model s), as far as known; ``also``: runs the dead
        controller tracked, listed whatever their state now if they are still their
        job's current run (one that completed while the controller was down is then
        closed with its summary)."""
        grid = (QosClass.STRICT.value, QosClass.LOOSE.value)
        wanted = set(also)
        with self._lock:
            return [
                (
                    JobRegistration(
                        info.run_id, info.qos, float(info.start_at or 0),
                        tuple((s.index, s.node, s.expected_rate) for s in info.subtasks),
                        info.overall_deviation, info.asynchrony,
                    ),
                    {i: o.finish_time for i, o in info.outcomes.items()},
                )
                for info in self.jobs.values()
                if info.qos in grid and (info.state is JobPhase.RUNNING or (
                    info.state is not JobPhase.PENDING and info.subtasks
                    and info.run_id in wanted))
            ]

    def ended_runs(
        self, run_ids: Iterable[str], before: float
    ) -> dict[str, tuple[dict[int, float], str]]:
        """Of ``run_ids`` (runs the controller still tracks), those that ended here at or
        before model time ``before``: run id -> (subtask index -> model s it ended, why
        the run ended: "" completed, else its job's state, or "superseded" for a run its
        job replaced or is waiting to replace after a requeue). The
        controller closes them: a done report lost on the way (a kill mid-send) must not
        leave a run open in the phase log forever."""
        out: dict[str, tuple[dict[int, float], str]] = {}
        with self._lock:
            for run_id in run_ids:
                info = self.jobs.get(RunId.parse(run_id, self.jobs).job_id)
                if info is None:
                    continue
                if info.run_id != run_id or info.state is JobPhase.PENDING:
                    out[run_id] = ({}, "superseded")  # requeued: a later run, or waiting
                elif info.state is not JobPhase.RUNNING and info.finished_at is not None \
                        and info.finished_at <= before:
                    ends = {i: o.finish_time for i, o in info.outcomes.items()}
                    why = "" if info.state is JobPhase.COMPLETED else info.state.value
                    out[run_id] = (ends, why)
        return out

    # --------------------------------------------------------------- submission
    def start_boundary(self, calls: int = 1) -> float:
        """The boundary a submission made now starts at (model s), for a dispatch of
        ``calls`` sequential calls (:class:`runtime.start_margin.StartMargin`)."""
        margin = self.start_margin.seconds(calls) * self.config.time_scale
        return boundary_at_or_after(self.clock.now() + margin, self.config.cycle)

    def submit(self, specs: list[JobSpec], token: str | None = None) -> list[dict[str, Any]]:
        """Admit ``specs`` in order, then run a placement cycle; one answer per job
        (``job_id``, ``admitted``, ``pending``, ``reason``, ``nodes``, ``start_at``).
        ``token``: the client's id of this submission; a retry with the same token gets
        the first answers."""
        with self._lock:
            now = self.clock.now()
            self._forget_tokens(now)
            if token is not None and token in self.tokens:
                return [dict(a) for a in self.tokens[token].answers]
            start = self.start_boundary(dispatch_calls([len(s.subtasks) for s in specs]))
            ids: list[str] = []
            placed: list[tuple[JobInfo, tuple[Subtask, ...]]] = []
            for spec in specs:
                adm = self.core.submit(spec, start)
                if adm.pending:
                    state = JobPhase.PENDING
                elif adm.admitted:
                    state = JobPhase.RUNNING
                else:
                    state = JobPhase.REJECTED
                info = JobInfo(
                    job_id=adm.job_id,
                    spec=replace(spec, job_id=adm.job_id),
                    state=state,
                    reason=adm.reason,
                    submitted_at=now,
                    queued_at=now if adm.pending else None,
                )
                self.jobs[adm.job_id] = info
                self._mark(adm.job_id)
                ids.append(adm.job_id)
                if adm.admitted:
                    self._placed(info, adm.subtasks, start)
                    placed.append((info, adm.subtasks))
            placed += self._cycle(start)[0]
            out = [self._answer(self.jobs[j]) for j in ids]
            if token is not None:
                self.tokens[token] = Answered(now, tuple(out))
                self._store.token_changed(token)
                while len(self.tokens) > TOKENS_KEPT:
                    self._forget_token(next(iter(self.tokens)), early=True)
            self._persist()  # write-ahead: recorded before it is dispatched
            reservations = [self._reserve(info, subtasks, info.start_at or start)
                            for info, subtasks in placed]
        self._dispatch_all(reservations)  # outside the lock
        with self._lock:
            after = [self._answer(self.jobs[j]) for j in ids]
            if after != out:  # a dispatch failed: the retry token must answer as now
                out = after
                if token is not None and token in self.tokens:
                    self.tokens[token] = Answered(self.tokens[token].answered_at, tuple(out))
                    self._store.token_changed(token)
                self._persist()
        return [dict(a) for a in out]

    def _forget_tokens(self, now: float) -> None:
        """Forget the tokens answered more than :data:`TOKEN_KEEP_S` real s before model
        time ``now`` (the table is in the order they were answered)."""
        keep = TOKEN_KEEP_S * self.config.time_scale
        while self.tokens:
            oldest = next(iter(self.tokens))
            if self.tokens[oldest].answered_at + keep > now:
                return
            self._forget_token(oldest, early=False)

    def _forget_token(self, token: str, early: bool) -> None:
        del self.tokens[token]
        self._store.token_changed(token)
        if early:
            # A retry of that submission would now make its jobs again: say so.
            self.counters["tokens_forgotten_early"] += 1
            log.warning("forgot a submission token younger than %g s (over %d kept): a "
                        "retry of that submission would be applied again",
                        TOKEN_KEEP_S, TOKENS_KEPT)

    def _answer(self, info: JobInfo) -> dict[str, Any]:
        """A submission's answer (:func:`runtime.status.submit_answer`) as the JSON the
        token table keeps."""
        return to_json(submit_answer(info, self.core))

    def place_pending(self) -> int:
        """One placement cycle of the pending queue (the global manager runs it every
        cycle): expire what waited past its ``max_wait``, place what fits, dispatch it.
        Returns how many jobs were placed."""
        with self._lock:
            # Usually one job leaves the queue per cycle: the largest one's calls.
            gangs = [len(r.spec.subtasks) for r in self.core.pending.values()]
            start = self.start_boundary(dispatch_calls([max(gangs, default=1)]))
            placed, expired = self._cycle(start)
            if not placed and not expired:
                return 0
            self._persist()  # write-ahead; a dispatch that fails records its own outcome
            reservations = [self._reserve(info, subtasks, info.start_at or start)
                            for info, subtasks in placed]
        self._dispatch_all(reservations)  # outside the lock
        return len(reservations)

    def _cycle(self, start: float) -> tuple[list[tuple[JobInfo, tuple[Subtask, ...]]], bool]:
        """The core's placement cycle at ``start``, applied to the job table (caller holds
        the lock, persists and dispatches): the runs placed, and whether any job
        expired."""
        ran, began = self.core.cycles_run, time.perf_counter()
        cyc = self.core.place_pending(start)
        if self.core.cycles_run != ran:
            self.metrics.placement_cycle(time.perf_counter() - began)
        for adm in cyc.expired:
            info = self.jobs[adm.job_id]
            info.state = JobPhase.EXPIRED
            self._mark(info.job_id)
            info.reason = adm.reason
            info.finished_at = self.clock.now()
        out = []
        for adm in cyc.placed:
            info = self.jobs[adm.job_id]
            at = start
            if info.not_before is not None and info.not_before > start:
                # A lost node's lease may not have lapsed: its run starts after it.
                at = boundary_at_or_after(info.not_before, self.config.cycle)
            self._placed(info, adm.subtasks, at)
            out.append((info, adm.subtasks))
        return out, bool(cyc.expired)

    def _placed(self, info: JobInfo, subtasks: tuple[Subtask, ...], start: float) -> None:
        """Job ``info`` was placed (a new run starting at ``start``, model s)."""
        self._store.placed(info.job_id)
        info.state = JobPhase.RUNNING
        info.reason = ""
        info.start_at = start
        info.not_before = None
        info.outcomes = {}
        info.dispatches += 1
        info.subtasks = tuple(PlacedSubtask.of(s) for s in subtasks)

    # ----------------------------------------------------------------- dispatch
    def _reserve(
        self, info: JobInfo, subtasks: tuple[Subtask, ...], start: float
    ) -> PendingDispatch:
        """What dispatching the run just placed (and journaled) for ``info`` sends; the
        job is marked as being dispatched (caller holds the lock). The core has already
        committed the run's budgets: :meth:`_settle` keeps or returns them."""
        run = info.run
        envs = self._rendezvous(info, str(run), subtasks)
        subs = tuple(replace(s, job_id=str(run), env=envs.get(s.index, ()))
                     for s in subtasks)
        qos = info.qos
        registration = JobRegistration(
            str(run), qos, start, tuple((s.index, s.node, s.expected_rate) for s in subs),
            info.overall_deviation, info.asynchrony, initial_pace_of(subs),
        ) if qos in (QosClass.STRICT, QosClass.LOOSE) else None
        self._dispatching[info.job_id] = run
        return PendingDispatch(run, subs, start, registration)

    def _rendezvous(
        self, info: JobInfo, run: str, subtasks: tuple[Subtask, ...]
    ) -> dict[int, tuple[tuple[str, str], ...]]:
        """The environment of each process subtask of ``run`` (by index; caller holds
        the lock): :func:`runtime.rendezvous.run_env`, MASTER_PORT taken on member 0's
        node."""
        if not any(s.command for s in subtasks):
            return {}
        members = [Member(s.index, s.node) for s in subtasks]
        first = min(members, key=lambda m: m.index)

        def live(other: str) -> bool:
            return self._info_of_run(other) is not None or any(
                str(r) == other for r in self._dispatching.values())

        port = self.ports.take(first.node, run, live)
        spec = info.spec
        own = {i: s.env for i, s in enumerate(spec.subtasks) if s.env}
        return run_env(info.job_id, info.attempt, run, members, self.addresses, port,
                       self.kv_access, spec.env, own)

    # ------------------------------------------------------ key-value store
    def kv_put(self, run: str, key: str, value: str) -> None:
        """Set ``key`` in running run ``run``'s store (:mod:`runtime.kv_store`). Raises
        :class:`~runtime.kv_store.KvError`."""
        self._kv_live(run)
        self.kv.put(run, key, value)

    def kv_get(self, run: str, key: str, timeout_s: float) -> str | None:
        """``key`` of running run ``run``'s store, waiting up to ``timeout_s`` (real s;
        the service's lock is not held while waiting). None: not set in time."""
        self._kv_live(run)
        return self.kv.get(run, key, timeout_s)

    def _kv_live(self, run: str) -> None:
        with self._lock:
            if self._info_of_run(run) is None:
                raise RunGone(f"run {run} is not running: its key-value store is gone")

    def _dispatch_all(self, reservations: list[PendingDispatch]) -> None:
        """Hand reserved runs to the other actors, one after the other (caller does NOT
        hold the lock: a node that hangs holds only this caller, for at most its Ray
        call's timeout), each committed or rolled back under the lock when its calls
        have answered (:meth:`_settle`)."""
        for i, res in enumerate(reservations):
            try:
                reached, failures = send(res, self.dispatch, self.clock.now, self._took)
                with self._lock:
                    stops = self._settle(res, reached, failures)
            except BaseException:
                # Not settled (a journal write failed, ...): what is left is no longer
                # being dispatched; the reconciliation ends what never reached its nodes.
                with self._lock:
                    for left in reservations[i:]:
                        if self._dispatching.get(left.run.job_id) == left.run:
                            del self._dispatching[left.run.job_id]
                raise
            self._send_stops(stops)

    def _took(self, began: float) -> None:
        """A dispatch call begun at model time ``began`` answered: its real seconds (on
        the service's clock; a manual clock in tests: 0) feed the start margin."""
        self.start_margin.observe_call((self.clock.now() - began) / self.config.time_scale)

    def _settle(
        self, res: PendingDispatch, reached: list[str], failures: list[DispatchFailed]
    ) -> list[tuple[str, list[str], str]]:
        """Commit or roll back a dispatched run (caller holds the lock; this persists
        what it changes). All reached: the run stays as recorded. A failure: what was
        placed is cancelled, the budgets return, a node that did not answer leaves
        placement, and the job goes back to the queue (``queue: wait``, or a requeue)
        or is rejected naming that actor. A run that stopped being its job's current
        one while its calls were out (cancelled, ended by a node loss) is cancelled on
        the nodes it reached (the stop sent then may have arrived before it). Returns
        the stops to send, after the lock is released."""
        job_id = res.run.job_id
        if self._dispatching.get(job_id) == res.run:
            del self._dispatching[job_id]
        info = self.jobs.get(job_id)
        current = info is not None and info.state is JobPhase.RUNNING and info.run == res.run
        run_id = str(res.run)
        if info is None or not current:
            if not reached and res.registration is None:
                return []
            log.warning("%s: run %s ended while it was being dispatched; stopping it on %s",
                        job_id, run_id, ", ".join(reached) or "the controller")
            return [(run_id, reached, "ended while it was being dispatched")]
        if not failures:
            return []
        failed = failures[0]
        self.counters["dispatch_failed"] += 1
        self._mark(job_id)
        for f in failures:
            if f.node is not None:
                self.core.set_node_down(f.node)
        spec = info.spec
        why = f"not started: {failed}; nothing of it stays placed"
        log.warning("%s: %s", job_id, why)
        if self.core.config.queue_mode is QueueMode.WAIT or info.attempt > 1 or info.history:
            self.core.requeue(job_id, spec, res.start)
            info.state = JobPhase.PENDING
            info.queued_at = self.clock.now()
            info.reason = why + "; back in the queue"
        else:
            self.core.cancel(job_id)
            info.state = JobPhase.REJECTED
            info.reason = why
        info.subtasks = ()
        self._persist()
        return [(run_id, reached, f"dispatch failed: {failed}")]

    # ---------------------------------------------------------------- lifecycle
    def subtask_ended(self, outcome: SubtaskOutcome) -> None:
        """A local manager says a subtask left its node (finished or failed). A failed
        subtask ends its whole job by the job's ``on_failure`` policy."""
        stops: list[tuple[str, list[str], str]] = []
        with self._lock:
            info = self._info_of_run(outcome.job_id)
            if info is None:
                self.counters["stale_outcomes"] += 1  # of a run that is no longer current
                return
            if outcome.index in info.outcomes:
                return
            self._mark(info.job_id)
            info.outcomes[outcome.index] = SubtaskEnd(
                outcome.state, outcome.finish_time, outcome.exit_code, outcome.reason
            )
            if outcome.state is SubtaskPhase.FENCED:
                # Its node held no lease: as if it had been lost (its gang's policy).
                why = f"subtask {outcome.index} {outcome.reason} on {outcome.node}"
                stops.append(self._end_run(info, why, info.spec.node_loss_policy(), loss=True))
            elif outcome.state is not SubtaskPhase.FINISHED:
                why = f"subtask {outcome.index} {outcome.state.value} on {outcome.node}"
                if outcome.reason:
                    why += f": {outcome.reason}"
                stops.append(self._end_run(info, why, info.spec.on_failure, loss=False))
            elif self.core.subtask_finished(info.job_id, outcome.index):
                info.state = JobPhase.COMPLETED
                info.finished_at = max(o.finish_time for o in info.outcomes.values())
            self._persist()
        self._send_stops(stops)

    def _end_run(
        self, info: JobInfo, why: str, policy: EndPolicy, loss: bool,
        lost_nodes: Iterable[str] = (),
    ) -> tuple[str, list[str], str]:
        """End the running job's current run whole (caller holds the lock and persists):
        every member stops, budgets return, then a requeue (remaining work, on a new
        placement) or a failure. ``lost_nodes``: nodes of the run declared lost, which
        cannot be told to stop it: a requeued run starts again only once their leases
        have lapsed (they fenced it by then; ``not_before``). Returns (run id, nodes to
        stop, reason) for :meth:`_send_stops`, done after the lock is released."""
        self._mark(info.job_id)
        spec = info.spec
        run_id = info.run_id
        self.kv.drop(run_id)
        now = self.clock.now()
        requeue = policy is EndPolicy.REQUEUE and info.attempt < spec.max_attempts
        if requeue:
            running = self.core.requeue(info.job_id, self._remaining(info, spec), now)
            info.attempt += 1
            info.history.append(f"run {run_id}: {why}; requeued")
            info.state = JobPhase.PENDING
            info.queued_at = now
            info.reason = f"requeued after {why}"
            info.not_before = self._restart_after(lost_nodes)
            if info.not_before is not None:
                info.reason += (f"; starts after the lost node's lease lapsed (model s "
                                f"{info.not_before:.0f})")
            self.counters["requeued"] += 1
            stop_reason = f"requeued: {why}"
        else:
            running = self.core.cancel(info.job_id)
            info.history.append(f"run {run_id}: {why}")
            info.state = JobPhase.FAILED
            info.finished_at = now
            info.reason = why
            if policy is EndPolicy.REQUEUE:
                info.reason += f" (requeued {info.attempt - 1} times: max_attempts reached)"
            self.counters["failed_node_loss" if loss else "failed_subtask"] += 1
            stop_reason = f"failed: {why}"
        nodes = sorted({s.node for s in running} | {s.node for s in info.subtasks})
        if requeue:  # pending again: no nodes until it is placed anew (history says where)
            info.subtasks = ()
        log.warning("%s: %s", info.job_id, info.reason)
        return run_id, nodes, stop_reason

    def _remaining(self, info: JobInfo, spec: JobSpec) -> JobSpec:
        """The job to requeue: synthetic work from the gang's last common progress (the
        least fraction done of any member, as last reported), commands from the start."""
        frac = 1.0
        run_id = info.run_id
        for s in info.subtasks:
            o = info.outcomes.get(s.index)
            if o is not None and o.state is SubtaskPhase.FINISHED:
                continue
            done = self.progress.get((run_id, s.index), 0.0)
            frac = min(frac, done / s.work if s.work > 0 else 0.0)
        if any(s.command for s in spec.subtasks) or not info.subtasks:
            frac = 0.0
        frac = min(max(frac, 0.0), 0.99)
        info.work_left *= 1.0 - frac
        left = info.work_left
        if spec.subtasks:
            subs = tuple(replace(s, work=s.work * left) for s in spec.subtasks)
            return replace(spec, subtasks=subs)
        return replace(spec, total_work=(spec.total_work or 0.0) * left)

    def _send_stops(self, stops: list[tuple[str, list[str], str]]) -> None:
        """Stop ended runs on their nodes and the controller (outside the lock: a node
        that does not answer must not hold the job table)."""
        for run_id, nodes, reason in stops:
            unreached = self.dispatch.cancel(run_id, nodes, reason)
            if unreached:
                log.warning("%s: could not reach %s to stop it (stopped when they answer)",
                            run_id, ", ".join(unreached))

    def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel a job; None for an unknown id. A finished job is left as it is."""
        if job_id not in self.jobs:
            return None
        self.cancel_many([job_id])
        return self.job(job_id)

    def cancel_many(
        self, job_ids: Iterable[str] | None, user: str | None = None,
        state: str | None = None,
    ) -> list[dict[str, Any]]:
        """Cancel jobs as ``scancel`` does: those named by ``job_ids`` (None: every job not
        over yet) that belong to ``user`` and are in ``state`` (``pending`` or
        ``running``; None: any). One result per job named or selected, in order:
        ``job_id``, ``name``, ``user``, ``was`` (its state before), ``state`` (after)
        and ``result``: ``cancelled``, ``already <state>`` (a job that was over:
        left as it is), ``skipped: ...`` (named, but another user's or in another
        state) or ``unknown job id``. One journal write for the lot; running jobs are
        stopped on their nodes afterwards, outside the lock."""
        out: list[dict[str, Any]] = []
        stops: list[tuple[str, list[str], str]] = []
        with self._lock:
            if job_ids is None:
                ids = [j for j, i in self.jobs.items() if not i.state.final]
            else:
                ids = list(dict.fromkeys(job_ids))
            now = self.clock.now()
            changed = False
            for job_id in ids:
                info = self.jobs.get(job_id)
                if info is None:
                    old = self.archived(job_id)
                    if old is None:
                        out.append({"job_id": job_id, "result": "unknown job id"})
                    else:
                        out.append({"job_id": job_id, "name": old["name"], "user": old["user"],
                                    "was": old["state"], "state": old["state"],
                                    "result": f"already {old['state']}"})
                    continue
                was = info.state.value
                skip = []
                if user is not None and info.user != user:
                    skip.append(f"user {info.user}")
                if state is not None and was != state:
                    skip.append(f"{was}, not {state}")
                if skip and job_ids is None:
                    continue
                rec = {"job_id": job_id, "name": info.name, "user": info.user, "was": was}
                if skip:
                    out.append(dict(rec, state=was, result="skipped: " + "; ".join(skip)))
                    continue
                if info.state.final:
                    out.append(dict(rec, state=was, result=f"already {was}"))
                    continue
                running = self.core.cancel(job_id)
                info.state = JobPhase.CANCELLED
                self._mark(job_id)
                info.finished_at = now
                changed = True
                if was == JobPhase.RUNNING.value:
                    stops.append((info.run_id,
                                  sorted({s.node for s in running}), "cancelled"))
                out.append(dict(rec, state=info.state.value, result="cancelled"))
            if changed:
                self._persist()
        self._send_stops(stops)
        return out

    # ------------------------------------------------------------------ views
    # The documents are built by runtime.status; these take the lock and hand it the
    # table's records.
    def start_estimates(self) -> Mapping[str, float | None]:
        """Each pending job's estimated start (model s; None: cannot be estimated),
        from the next start boundary (:meth:`GlobalManagerCore.start_estimates`: walked
        again only when the queue, the jobs or the nodes changed)."""
        with self._lock:
            return self.core.start_estimates(self.start_boundary())

    def _record(self, info: JobInfo, starts: Mapping[str, float | None] | None = None
                ) -> JobRecord:
        """``info`` as ``GET /jobs/ID`` shows it (caller holds the lock); ``starts``:
        the start estimates, worked out here for a pending job if not given."""
        if starts is None and info.state is JobPhase.PENDING:
            starts = self.start_estimates()
        return job_record(info, self.core, self.clock.now(), getattr(self.clock, "base", None),
                          self._dispatching.get(info.job_id) == info.run, starts)

    def job(self, job_id: str) -> JobRecord | None:
        """Job ``job_id``'s record, from the job table or the archive (None: unknown)."""
        with self._lock:
            info = self.jobs.get(job_id)
            if info is not None:
                return self._record(info)
            old = self.archived(job_id)
            return None if old is None else JobRecord.model_validate(old)

    def job_states(self, job_ids: Iterable[str] | None = None) -> dict[str, str]:
        """Each job's state (None: every job in the job table; named jobs are looked up
        in the archive too)."""
        with self._lock:
            if job_ids is None:
                return {j: i.state.value for j, i in self.jobs.items()}
            out = {}
            for j in job_ids:
                info = self.jobs.get(j)
                if info is not None:
                    out[j] = info.state.value
                    continue
                old = self.archived(j)
                if old is not None:
                    out[j] = str(old["state"])
            return out

    def queue(self) -> list[QueueRow]:
        """Pending and running jobs, pending first in the order they would be placed
        (priority, then wait), each with user, priority, wait (model s), reason and, for
        a pending job, its estimated start (model s and wall-clock ISO 8601 UTC)."""
        with self._lock:
            now = self.clock.now()
            starts = self.start_estimates()
            return [queue_row(info, self._record(info, starts), now)
                    for info in queue_order(self.jobs.values())]

    def describe(self, job_id: str | None = None, archived: bool = False) -> JobTable:
        """Jobs and nodes (budgets, committed rates, health) without the other actors'
        views. ``job_id``: only that job (from the archive if it is there); ``archived``:
        the archived jobs too, after those of the job table."""
        with self._lock:
            now = self.clock.now()
            nodes = [
                node_record(n, self.core, self.lost,
                            (now - self.last_seen.get(n.name, now)) / self.config.cycle)
                for n in self.nodes
            ]
            if job_id is None:
                starts = self.start_estimates()
                jobs = [self._record(info, starts) for info in self.jobs.values()]
                if archived:
                    jobs += [JobRecord.model_validate(r) for r in self.archived_jobs()]
            else:
                one = self.job(job_id)
                jobs = [] if one is None else [one]
            return JobTable(
                policy=self.policy.name,
                queue=self.core.config.queue_mode.value,
                model_time=self.clock.now(),
                nodes=nodes,
                jobs=jobs,
                global_counters={**self.counters, **self.lease_counters()},
                journal_error=self.journal_error,
            )

    def gauges(self) -> QueueGauges:
        """Queue length, running jobs, the oldest pending job's wait (model s) and each
        node's health, for the metrics (cheap: no pending reasons are worked out)."""
        with self._lock:
            return queue_gauges(self.jobs.values(), self.nodes, self.lost, self.core.down,
                                self.clock.now())
