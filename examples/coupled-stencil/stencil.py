"""A coupled application for coalloc: a 1-D heat equation (an explicit Jacobi step) whose
cells are split over the members of a job, which exchange their boundary cells every step
over ZeroMQ (docs/coupled.md, "A coupled application: the stencil").

Each member owns a contiguous block of the cells. It binds a ZeroMQ PULL socket on its
node, publishes that address in its run's key-value store (``coalloc.job.put``), reads
its neighbours' (``coalloc.job.get``) and connects a PUSH socket to each. Every step it
does its step's work, sends its first and last cell to its neighbours, waits for theirs,
and updates its block. At the end every member sends its block to member 0, which prints
a checksum of the whole field: the same for any number of members and any timing, since
every cell goes through the same floating-point operations in the same order.

Its settings come from the environment (a job file's ``env``, the job's or a subtask's):

* ``STENCIL_CELLS`` (default 4096) and ``STENCIL_STEPS`` (default 400);
* ``STENCIL_COST``: the member's extra work per step, in units of ``STENCIL_UNIT_MS`` ms
  of CPU (defaults 1 and 2): members with different costs are imbalanced, as the
  components of a multi-physics code are;
* ``STENCIL_WAIT``: how a member waits for its neighbours: ``spin`` (the default, as MPI
  waits: it polls its socket without a timeout, busy) or ``block`` (it polls with a
  timeout, asleep in the kernel);
* ``STENCIL_HOST``: the address to publish (default: that of the interface that routes
  to the key-value store).

It reports its step through ``coalloc.progress`` where that module exists, and marks its
waits with ``coalloc.progress.waiting()``. Each member prints, and puts in the store as
``stencil.stats.<rank>``, its CPU spent computing and waiting, and when its steps began
and ended (epoch s). Run alone (outside coalloc) it is one member that owns every cell.
Needs numpy and pyzmq.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import numpy as np

#: Diffusion number of the explicit step (stable for <= 0.5).
R = 0.25
#: Fixed temperatures beyond the first and the last cell.
LEFT_EDGE, RIGHT_EDGE = 1.0, 0.0
#: Seconds a member waits for the store or a neighbour before giving up.
TIMEOUT_S = 300.0
#: Poll timeout of a blocking wait (ms).
BLOCK_POLL_MS = 100

_HEADER = struct.Struct("!ii")  # sender rank, step (-1: the final block)
_FINAL = -1


@dataclass(frozen=True, slots=True)
class Settings:
    cells: int
    steps: int
    cost: float
    unit_ms: float
    wait: str


def settings(environ: dict[str, str] | os._Environ[str]) -> Settings:
    """The member's settings from its environment; a bad value exits with one line."""

    def number(name: str, default: str, kind: Callable[[str], Any]) -> Any:
        text = environ.get(name, default)
        try:
            value = kind(text)
        except ValueError:
            sys.exit(f"stencil: {name}={text!r}: not a number")
        if not value >= 0:
            sys.exit(f"stencil: {name}={text!r}: expected a number >= 0")
        return value

    wait = environ.get("STENCIL_WAIT", "spin")
    if wait not in ("spin", "block"):
        sys.exit(f"stencil: STENCIL_WAIT={wait!r}: expected spin or block")
    return Settings(cells=number("STENCIL_CELLS", "4096", int),
                    steps=number("STENCIL_STEPS", "400", int),
                    cost=number("STENCIL_COST", "1", float),
                    unit_ms=number("STENCIL_UNIT_MS", "2", float), wait=wait)


def initial(cells: int) -> np.ndarray:
    """The starting field: integer arithmetic only, so any slice of it is exact."""
    i = np.arange(cells, dtype=np.int64)
    return ((i * 7919) % 1000).astype(np.float64) / 1000.0


def bounds(cells: int, members: int, rank: int) -> tuple[int, int]:
    """The cells ``[first, last)`` that member ``rank`` of ``members`` owns."""
    return rank * cells // members, (rank + 1) * cells // members


def advance(block: np.ndarray, left: float, right: float) -> np.ndarray:
    """One explicit step of ``block`` given the cell beyond each end."""
    ext = np.concatenate(([left], block, [right]))
    mid = ext[1:-1]
    return mid + R * (ext[:-2] - 2.0 * mid + ext[2:])


def checksum(field: np.ndarray) -> str:
    """The field's checksum: SHA-256 of its little-endian float64 bytes (16 hex digits)."""
    return hashlib.sha256(np.ascontiguousarray(field, dtype="<f8").tobytes()).hexdigest()[:16]


def solve(cells: int, steps: int, members: int = 1) -> np.ndarray:
    """The whole computation in one process, split into ``members`` blocks exactly as the
    members split it (the reference the tests compare against)."""
    field = initial(cells)
    blocks = [field[slice(*bounds(cells, members, r))] for r in range(members)]
    for _ in range(steps):
        blocks = [advance(b, float(blocks[r - 1][-1]) if r > 0 else LEFT_EDGE,
                          float(blocks[r + 1][0]) if r < members - 1 else RIGHT_EDGE)
                  for r, b in enumerate(blocks)]
    return np.concatenate(blocks)


def burn(cpu_s: float) -> None:
    """Use ``cpu_s`` seconds of this process's CPU (the member's work of a step)."""
    end = time.process_time() + cpu_s
    x = 0
    while time.process_time() < end:
        for i in range(200):
            x += i * i


def _progress() -> Any:
    """coalloc's progress API where this coalloc has it, else None."""
    try:
        import coalloc.progress as progress
    except ImportError:
        return None
    return progress


def _publish_host(environ: dict[str, str] | os._Environ[str]) -> str:
    """The address the neighbours reach this node at: ``STENCIL_HOST``, else that of the
    interface that routes to the key-value store's host."""
    if environ.get("STENCIL_HOST"):
        return environ["STENCIL_HOST"]
    target = urlsplit(environ.get("COALLOC_KV_URL", "")).hostname or "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((target, 9))  # UDP connect: picks a route, sends nothing
        return str(probe.getsockname()[0])


class Member:
    """One member's sockets, its received messages and its wait accounting."""

    def __init__(self, rank: int, members: int, wait: str) -> None:
        import zmq

        self.zmq = zmq
        self.rank, self.members, self.wait_mode = rank, members, wait
        self.ctx = zmq.Context()
        self.inbox = self.ctx.socket(zmq.PULL)
        self.port = self.inbox.bind_to_random_port("tcp://*")
        self.out: dict[int, Any] = {}
        self.got: dict[tuple[int, int], bytes] = {}
        self.wait_cpu_s = 0.0
        self.wait_wall_s = 0.0
        self.progress = _progress()

    def connect(self, addresses: dict[int, str]) -> None:
        for rank, addr in addresses.items():
            sock = self.ctx.socket(self.zmq.PUSH)
            sock.setsockopt(self.zmq.LINGER, int(TIMEOUT_S * 1000))
            sock.connect(addr)
            self.out[rank] = sock

    def send(self, to: int, step: int, payload: bytes) -> None:
        self.out[to].send_multipart([_HEADER.pack(self.rank, step), payload])

    def _take(self, flags: int) -> bool:
        try:
            header, payload = self.inbox.recv_multipart(flags)
        except self.zmq.Again:
            return False
        sender, step = _HEADER.unpack(header)
        self.got[(sender, step)] = payload
        return True

    @contextlib.contextmanager
    def _waiting(self) -> Iterator[None]:
        cpu, wall = time.process_time(), time.perf_counter()
        marker = self.progress.waiting() if self.progress is not None else contextlib.nullcontext()
        with marker:
            yield
        self.wait_cpu_s += time.process_time() - cpu
        self.wait_wall_s += time.perf_counter() - wall

    def receive(self, wanted: list[tuple[int, int]]) -> list[bytes]:
        """The payloads of ``wanted`` (sender, step), waiting for them as the member's
        wait mode says."""
        missing = [w for w in wanted if w not in self.got]
        if missing:
            with self._waiting():
                deadline = time.monotonic() + TIMEOUT_S
                while any(w not in self.got for w in missing):
                    if self.wait_mode == "spin":
                        self._take(self.zmq.NOBLOCK)
                    elif self.inbox.poll(BLOCK_POLL_MS):
                        self._take(0)
                    if time.monotonic() > deadline:
                        sys.exit(f"stencil: member {self.rank}: no word from "
                                 f"{sorted(set(s for s, _ in missing))} in {TIMEOUT_S:g} s")
        return [self.got.pop(w) for w in wanted]

    def close(self) -> None:
        for sock in self.out.values():
            sock.close()
        self.inbox.close(linger=0)
        self.ctx.term()


def _value(payload: bytes) -> float:
    return float(np.frombuffer(payload, dtype="<f8")[0])


def run(environ: dict[str, str] | os._Environ[str]) -> int:
    s = settings(environ)
    import coalloc.job

    inside = coalloc.job.inside(environ)
    rank = coalloc.job.rank(environ) if inside else 0
    members = coalloc.job.size(environ) if inside else 1
    if s.cells < members:
        sys.exit(f"stencil: STENCIL_CELLS={s.cells}: fewer cells than the {members} members")
    me = Member(rank, members, s.wait)
    neighbours = [r for r in (rank - 1, rank + 1) if 0 <= r < members]
    targets = sorted(set(neighbours) | ({0} if rank > 0 else set()))
    if members > 1:
        coalloc.job.put(f"stencil.addr.{rank}", f"tcp://{_publish_host(environ)}:{me.port}")
        me.connect({r: coalloc.job.get(f"stencil.addr.{r}", timeout=TIMEOUT_S)
                    for r in targets})
    block = initial(s.cells)[slice(*bounds(s.cells, members, rank))]
    per_step_s = s.cost * s.unit_ms / 1000.0
    compute_cpu = 0.0
    started = time.time()
    for step in range(s.steps):
        cpu = time.process_time()
        burn(per_step_s)
        compute_cpu += time.process_time() - cpu
        for r in neighbours:
            edge = block[:1] if r < rank else block[-1:]
            me.send(r, step, edge.astype("<f8").tobytes())
        halos = dict(zip(neighbours, me.receive([(r, step) for r in neighbours])))
        left = _value(halos[rank - 1]) if rank > 0 else LEFT_EDGE
        right = _value(halos[rank + 1]) if rank < members - 1 else RIGHT_EDGE
        cpu = time.process_time()
        block = advance(block, left, right)
        compute_cpu += time.process_time() - cpu
        if me.progress is not None:
            me.progress.report(step + 1, s.steps)
    if rank == 0:
        rest = me.receive([(r, _FINAL) for r in range(1, members)])
        field = np.concatenate([block] + [np.frombuffer(p, dtype="<f8") for p in rest])
    else:
        me.send(0, _FINAL, block.astype("<f8").tobytes())
    stats = {"rank": rank, "members": members, "steps": s.steps, "cost": s.cost,
             "wait": s.wait, "compute_cpu_s": round(compute_cpu, 4),
             "wait_cpu_s": round(me.wait_cpu_s, 4), "wait_wall_s": round(me.wait_wall_s, 4),
             "started": round(started, 3), "ended": round(time.time(), 3)}
    print("stencil stats " + json.dumps(stats, sort_keys=True), flush=True)
    if inside and environ.get("COALLOC_KV_URL"):
        coalloc.job.put(f"stencil.stats.{rank}", json.dumps(stats, sort_keys=True))
    if rank == 0:
        print(f"stencil checksum {checksum(field)} cells {s.cells} steps {s.steps} "
              f"members {members}", flush=True)
    me.close()
    return 0


if __name__ == "__main__":
    sys.exit(run(os.environ))
