"""The rendezvous environment: what every process subtask of a run finds in its
environment, so that the members of a gang know who and where they are.

Pure: no I/O, no Ray. The global manager builds it when it dispatches a run
(:meth:`runtime.global_service.GlobalService._reserve`) and it travels on the
:class:`~workloads.model.Subtask` record to the member's local manager, which adds it to
the command's environment (docs/coupled.md has the table):

- ``COALLOC_JOB_ID``, ``COALLOC_ATTEMPT`` (1, 2 after a requeue, ...), ``COALLOC_RUN``
  (the run's id, what the key-value store is scoped to), ``COALLOC_SUBTASK`` (the
  member's index), ``COALLOC_SUBTASKS`` (the count), ``COALLOC_NODE``;
- ``torchrun``'s: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
  ``MASTER_ADDR`` (member 0's node address) and ``MASTER_PORT`` (:class:`PortPool`);
- the variables that make MPI libraries yield or block while they wait
  (:data:`MPI_WAIT_ENV`);
- ``COALLOC_KV_URL`` and ``COALLOC_KV_TOKEN``: the run's key-value store
  (:mod:`runtime.kv_store`) and its credential (:func:`kv_token`), when the global
  manager serves its HTTP API.

The job file's ``env`` (the job's, then the subtask's) is applied last: it overrides any
of these.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

#: Open MPI: yield the core while polling; Intel MPI: wait in the kernel instead of
#: polling; MPICH (ch3:nemesis): yield after every poll instead of every 1,000.
MPI_WAIT_ENV: tuple[tuple[str, str], ...] = (
    ("OMPI_MCA_mpi_yield_when_idle", "1"),
    ("I_MPI_WAIT_MODE", "1"),
    ("MPIR_CVAR_POLLS_BEFORE_YIELD", "1"),
)
#: MASTER_PORT is picked from this range (inclusive), as torchrun's default 29500 starts it.
PORT_RANGE: tuple[int, int] = (29500, 29999)
#: Where member 0's node address is not known (an in-memory runtime in tests).
LOOPBACK = "127.0.0.1"

KV_URL_ENV = "COALLOC_KV_URL"
KV_TOKEN_ENV = "COALLOC_KV_TOKEN"
RUN_ENV = "COALLOC_RUN"


def kv_token(secret: str, run: str) -> str:
    """The key-value credential of ``run``: an HMAC of its id under ``secret`` (the API
    token), so it names one run only, and a restarted global manager checks it without
    having stored it."""
    return hmac.new(secret.encode("utf-8"), b"coalloc-kv\0" + run.encode("utf-8"),
                    hashlib.sha256).hexdigest()


def kv_token_ok(secret: str, run: str, given: str) -> bool:
    """Whether ``given`` is ``run``'s credential (constant-time)."""
    return hmac.compare_digest(kv_token(secret, run).encode("ascii"),
                               given.encode("utf-8", "surrogateescape"))


@dataclass(frozen=True, slots=True)
class KvAccess:
    """Where the members reach the key-value store: the API's ``url`` and the ``secret``
    their credentials derive from."""

    url: str
    secret: str


class PortPool:
    """MASTER_PORT: per node, the lowest port of :data:`PORT_RANGE` that no other running
    run of coalloc holds there (as Slurm hands out its reserved ``MpiParams=ports`` range).
    It cannot know about other programs: the range should be left to coalloc. Not
    thread-safe (the global manager's lock guards it)."""

    def __init__(self, ports: tuple[int, int] = PORT_RANGE) -> None:
        if not 0 < ports[0] <= ports[1] < 65536:
            raise ValueError(f"ports: expected 0 < first <= last < 65536, got {ports}")
        self.ports = ports
        self._held: dict[str, dict[int, str]] = {}  # node -> port -> run

    def take(self, node: str, run: str, live: Callable[[str], bool]) -> int:
        """A port for ``run`` on ``node``, held until its run is no longer ``live`` (ports
        of ended runs are freed here). When every port is held, the one held the
        longest is shared (a warning in the docs: no run is refused for it)."""
        held = self._held.setdefault(node, {})
        for port, owner in list(held.items()):
            if owner != run and not live(owner):
                del held[port]
        for port, owner in held.items():
            if owner == run:
                return port
        first, last = self.ports
        for port in range(first, last + 1):
            if port not in held:
                held[port] = run
                return port
        port = next(iter(held))
        del held[port]
        held[port] = run
        return port

    def held(self, node: str) -> dict[int, str]:
        return dict(self._held.get(node, {}))


@dataclass(frozen=True, slots=True)
class Member:
    """One member of a run as placed: its ``index`` and ``node``."""

    index: int
    node: str


def run_env(
    job_id: str, attempt: int, run: str, members: Sequence[Member],
    addresses: Mapping[str, str], master_port: int, kv: KvAccess | None,
    job_env: Sequence[tuple[str, str]] = (),
    subtask_env: Mapping[int, Sequence[tuple[str, str]]] | None = None,
) -> dict[int, tuple[tuple[str, str], ...]]:
    """The environment of every member of ``run``, by index. ``addresses``: node name to
    address (a node not in it: :data:`LOOPBACK`); ``master_port``: the port on member 0's
    node; ``job_env`` and ``subtask_env``: the job file's overrides."""
    count = len(members)
    first = min(members, key=lambda m: m.index) if members else None
    master = addresses.get(first.node, LOOPBACK) if first is not None else LOOPBACK
    by_node: dict[str, list[int]] = {}
    for m in sorted(members, key=lambda m: m.index):
        by_node.setdefault(m.node, []).append(m.index)
    token = kv_token(kv.secret, run) if kv is not None else None
    out: dict[int, tuple[tuple[str, str], ...]] = {}
    for m in members:
        local = by_node[m.node]
        env: dict[str, str] = {
            "COALLOC_JOB_ID": job_id,
            "COALLOC_ATTEMPT": str(attempt),
            RUN_ENV: run,
            "COALLOC_SUBTASK": str(m.index),
            "COALLOC_SUBTASKS": str(count),
            "COALLOC_NODE": m.node,
            "RANK": str(m.index),
            "WORLD_SIZE": str(count),
            "LOCAL_RANK": str(local.index(m.index)),
            "LOCAL_WORLD_SIZE": str(len(local)),
            "MASTER_ADDR": master,
            "MASTER_PORT": str(master_port),
        }
        env.update(MPI_WAIT_ENV)
        if kv is not None and token is not None:
            env[KV_URL_ENV] = kv.url
            env[KV_TOKEN_ENV] = token
        env.update(job_env)
        env.update((subtask_env or {}).get(m.index, ()))
        out[m.index] = tuple(env.items())
    return out
