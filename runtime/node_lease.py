"""A local manager's lease thread: it keeps the node's lease (:mod:`runtime.lease`) with
the global manager over Ray calls, fences the node (:meth:`NodeRuntime.fence`) when the
lease runs out, lifts the fence when a renewal is granted again, and rejoins under a new
incarnation when the global manager says the node was declared lost.

The rules (when to renew, when to fence) are :class:`~runtime.lease.NodeLease`'s; this
module only carries its calls and answers, so it holds the Ray edge and the node's side
effects, nothing to decide.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from runtime.config import CONTROLLER_NAME, LEASE_GROUP, NAMESPACE
from runtime.lease import RENEW_RETRY_S, Answer, NodeLease
from runtime.node_runtime import NodeRuntime

log = logging.getLogger("coalloc.runtime")


class LeaseKeeper:
    """Node ``node``'s lease ``lease`` kept for ``runtime``; ``global_manager()`` gives
    the global manager's handle, ``forget_global()`` drops it after a failed call."""

    def __init__(self, node: str, runtime: NodeRuntime, lease: NodeLease,
                 global_manager: Callable[[], Any], forget_global: Callable[[], None]) -> None:
        self.node = node
        self.runtime = runtime
        self.lease = lease
        self._global = global_manager
        self._forget_global = forget_global
        self._error = ""  # the last failed renewal's error
        self._stop = threading.Event()
        runtime.lease_confirmed_at = lease.confirmed_at
        runtime.counters.update(lease_renewals=0, lease_failures=0)

    def stop(self) -> None:
        """End :meth:`run` (the manager shuts down)."""
        self._stop.set()

    def view(self) -> dict[str, Any]:
        """The lease as this node holds it: held, real s since the send of its last
        granted renewal, the lease, the last renewal error."""
        now = time.monotonic()
        return {"held": self.lease.held(now), "age_s": round(now - self.lease.confirmed_at, 3),
                "lease_s": self.lease.terms.lease_s, "renewals_out": len(self.lease.out()),
                "last_error": self._error}

    def run(self) -> None:
        """Renew the lease: a renewal every third of it (sooner after a failure), answers
        taken as they come; without a lease, fence the node; told it was lost, fence,
        take a new incarnation and renew under it. Ends with :meth:`stop`."""
        import ray

        out: dict[Any, int] = {}  # renewal call -> its token
        failing = ""
        while not self._stop.is_set():
            try:
                wait = self._round(out)
                failing = ""
            except Exception as exc:  # noqa: BLE001 - the lease thread must not die
                why = f"{type(exc).__name__}: {exc}"
                if why != failing:
                    log.exception("node %s: lease round failed", self.node)
                failing, wait = why, RENEW_RETRY_S
            if out:
                ray.wait(list(out), num_returns=1, timeout=wait)
            else:
                self._stop.wait(wait)

    def _failed(self, exc: BaseException) -> None:
        self.runtime.counters["lease_failures"] += 1
        self._error = f"{type(exc).__name__}: {exc}"[:300]

    def _round(self, out: dict[Any, int]) -> float:
        """One look at the lease: take the answers in, fence or lift the fence, send a
        renewal if one is due; ``out`` (renewal call -> its token) is updated in place.
        Returns the real s to the next look."""
        import ray

        now = time.monotonic()
        self.lease.look(now)
        if out:
            ready, _ = ray.wait(list(out), num_returns=len(out), timeout=0)
            for ref in ready:
                token = out.pop(ref)
                try:
                    answer: Answer | None = Answer(ray.get(ref, timeout=0))
                except Exception as exc:  # noqa: BLE001 - the lease says when it matters
                    answer = None
                    self._failed(exc)
                else:
                    self.runtime.counters["lease_renewals"] += 1
                got = self.lease.answered(token, answer)
                if got is Answer.REJOINED:
                    # A new incarnation of a node declared lost: what it re-attached
                    # from before (a restart meanwhile) may run elsewhere now.
                    self.runtime.fence("the global manager had declared this node "
                                       "lost", timeout=5.0)
                elif got is Answer.LOST:
                    self._rejoin(now)
                    out.clear()
                    break
        given_up = set(self.lease.give_up(now))
        for ref in [r for r, t in out.items() if t in given_up]:
            del out[ref]
        self.runtime.lease_confirmed_at = self.lease.confirmed_at
        if self.lease.held(now):
            if self.runtime.unleased is not None:
                log.warning("node %s: lease renewed; subtasks may start again", self.node)
                self.runtime.leased()
        elif self.runtime.unleased is None and self.lease.must_fence(now):
            since = now - self.lease.confirmed_at
            self.runtime.fence(
                f"no lease: the last renewal the global manager granted was sent "
                f"{since:.1f} s ago (lease {self.lease.terms.lease_s:g} s)", timeout=5.0)
        if self.lease.due(now):
            token = self.lease.send(now)
            try:
                renew = self._global().renew_lease.options(concurrency_group=LEASE_GROUP)
                out[renew.remote(self.node, self.runtime.incarnation)] = token
            except Exception as exc:  # noqa: BLE001 - no global manager: retried soon
                self._forget_global()
                self.lease.answered(token, None)
                self._failed(exc)
        return max(0.0, self.lease.next_look(now) - time.monotonic())

    def _rejoin(self, now: float) -> None:
        """The global manager declared this node lost: fence what still runs, take a new
        incarnation, tell the controller (reports of the old one are dropped there as
        ``old_incarnation``) and renew under it."""
        old = self.runtime.incarnation
        self.runtime.fence("the global manager declared this node lost", timeout=5.0)
        inc = self.runtime.rejoin()
        self.lease.rejoin(now)
        log.warning("node %s: the global manager declared incarnation %d lost; rejoining "
                    "as incarnation %d", self.node, old, inc)
        try:
            import ray

            ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE).register_node.remote(
                self.node, inc)
        except Exception:  # noqa: BLE001 - its first report registers it there too
            log.info("node %s: cannot reach the controller to register incarnation %d",
                     self.node, inc)
