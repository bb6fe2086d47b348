"""How a placed run reaches the other actors: the controller's registration first (a grid
QoS run), then one ``place`` call per node, the nodes at once.

:class:`Dispatch` is the global manager's way to the controller and the local managers
(Ray calls in :mod:`runtime.actors`, in memory in tests). :func:`send` makes one run's
calls and reports what answered; the global manager commits or rolls back the run on
that (:meth:`runtime.global_service.GlobalService._settle`). No lock is held here: a node
that hangs holds only the caller, for at most its call's timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from global_manager.engine import start_run
from runtime.jobs import PendingDispatch
from workloads.messages import JobRegistration
from workloads.model import Subtask

#: Most ``place`` calls of one run made at once (one worker thread each).
DISPATCH_WORKERS = 16


class Dispatch(Protocol):
    """How the global manager reaches the other actors. A call that cannot reach its
    actor raises (any exception); :meth:`cancel` never raises and returns the nodes it
    could not reach."""

    def register(self, reg: JobRegistration) -> None: ...

    def place(self, node: str, subtasks: list[Subtask], start: float) -> None: ...

    def cancel(self, job_id: str, nodes: Iterable[str], reason: str = "") -> list[str]: ...


class DispatchFailed(Exception):
    """Placing a job on the other actors failed: ``actor`` names the one that did not
    answer (``the controller`` or ``the local manager of node X``), ``node`` is X."""

    def __init__(self, actor: str, node: str | None, cause: BaseException) -> None:
        self.actor = actor
        self.node = node
        self.cause = cause
        super().__init__(f"{actor} is unreachable ({type(cause).__name__})")


def send(
    run: PendingDispatch, dispatch: Dispatch, now: Callable[[], float],
    took: Callable[[float], None],
) -> tuple[list[str], list[DispatchFailed]]:
    """Make ``run``'s calls through ``dispatch``: the controller's registration first (a
    grid QoS run; nothing else is sent if it fails), then one ``place`` per node, the
    nodes at once (the calls block: one worker thread per node beyond the first). Each
    call that answers is timed on ``now`` (model s) and passed to ``took`` (its start).
    Returns the nodes reached and the failures (the controller's, or one per node that
    did not answer, in the order of the nodes)."""

    def register(reg: JobRegistration) -> None:
        began = now()
        try:
            dispatch.register(reg)
        except Exception as exc:  # noqa: BLE001 - any failure aborts the dispatch
            raise DispatchFailed("the controller", None, exc) from exc
        took(began)

    groups: dict[str, list[Subtask]] = {}

    def collect(node: str, group: list[Subtask]) -> None:
        groups[node] = group

    try:
        start_run(run.registration, run.subtasks, register, collect)
    except DispatchFailed as failed:
        return [], [failed]

    def place(node: str) -> DispatchFailed | None:
        began = now()
        try:
            dispatch.place(node, groups[node], run.start)
        except Exception as exc:  # noqa: BLE001
            return DispatchFailed(f"the local manager of node {node}", node, exc)
        took(began)
        return None

    nodes = list(groups)
    if len(nodes) <= 1:
        results = [place(n) for n in nodes]
    else:
        with ThreadPoolExecutor(max_workers=min(len(nodes), DISPATCH_WORKERS),
                                thread_name_prefix="coalloc-dispatch") as pool:
            results = list(pool.map(place, nodes))
    reached = [n for n, r in zip(nodes, results) if r is None]
    return reached, [r for r in results if r is not None]
