"""Controller ingest and report-to-reweight latency over loopback ZeroMQ.

Run: ``python3 bench/bench_ingest.py [--reports 200000] [--rounds 3] [--latency 2000]``.

Ingest, reports/s. The same N distinct frames each time (64 jobs x 8 subtasks on 64
nodes, each node with its own sequence numbers), pushed into the receiving socket's
queue before the clock starts, so that the receiver's own cost is measured, not the
sender's:

  (a)  reference: a raw pyzmq PULL ``recv()`` + ``msgpack.unpackb`` of every frame;
  (a') a second reference, the floor of any receiver that hands out the core's records:
       (a) plus ``ProgressReport(*fields)``, no checks at all;
  (b)  :class:`coallocator.transport.ReportReceiver`: receive, multipart check, decode,
       validate, de-duplicate and build the records;
  (c)  (b) plus the controller's ingest of every report. ``--apply core`` (default) feeds
       them to a :class:`coallocator.core.ControllerCore` with the 64 jobs registered;
       ``--apply MODULE:NAME`` names a factory ``NAME(jobs)`` returning
       ``apply(reports: list[ProgressReport])``, where ``jobs`` maps job id to its
       ``[(subtask, node), ...]`` (e.g. the live runtime's controller service);
       ``--apply none`` skips it. A hook that cannot be imported is skipped with a message.

Each variant runs ``--rounds`` times, interleaved; the best round counts (the least
disturbed by other processes on a shared machine). Ratios are against (a); the target
for (b) is >= 0.5. Wall-clock rates are printed, and the same ratios on process CPU time
(less sensitive to other processes' load).

Latency (transport alone, one thread plays both ends): a local manager's ReportSender
sends a report, the controller's ReportReceiver polls it and its CommandPublisher sends
a ReweightCommand back, the node's CommandSubscriber polls it. p50 and p99 of that round
trip in microseconds, against the same round trip over raw pyzmq PUSH/PULL and
ROUTER/DEALER with msgpack, blocking receives, in the same run. ``measure_round_trip``
takes a ``between`` callable (report -> commands) for an extension with the controller.
"""

from __future__ import annotations

import argparse
import importlib
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coallocator.messages import ProgressReport, ReweightCommand  # noqa: E402
from coallocator.transport import (  # noqa: E402
    CommandPublisher,
    CommandSubscriber,
    ReportReceiver,
    ReportSender,
)
from coallocator.wire import encode_report  # noqa: E402
from workloads.messages import JobRegistration

Apply = Callable[[list[ProgressReport]], object]


JOBS = 64
SUBTASKS = 8
NODES = 64


def job_layout() -> dict[str, list[tuple[int, str]]]:
    """Job id -> [(subtask, node)]: every job's subtasks on distinct nodes, every node
    hosting SUBTASKS subtasks."""
    return {
        f"job-{j:04d}": [(i, f"node-{(j + i * SUBTASKS) % NODES:03d}") for i in range(SUBTASKS)]
        for j in range(JOBS)
    }


def make_frames(n: int) -> list[bytes]:
    """``n`` distinct, valid report frames cycling over the job layout; each node numbers
    its own reports 0, 1, 2, ..."""
    streams = [(job, sub, node) for job, subs in job_layout().items() for sub, node in subs]
    next_seq: dict[str, int] = {}
    frames = []
    for i in range(n):
        job, sub, node = streams[i % len(streams)]
        seq = next_seq.get(node, 0)
        next_seq[node] = seq + 1
        cycle = i // len(streams)
        t = 10.0 * (cycle + 1)
        frames.append(
            encode_report(
                ProgressReport(
                    job_id=job,
                    subtask=sub,
                    node=node,
                    incarnation=1,
                    seq=seq,
                    real_time=t,
                    virtual_time=t * (0.97 + 0.01 * (sub % 4)),
                    expected_work=6000.0,
                    granted_work=5820.0 + 60.0 * (sub % 4),
                    done=False,
                )
            )
        )
    return frames


def _preload(ctx: zmq.Context[Any], endpoint: str, frames: Sequence[bytes]) -> zmq.Socket[Any]:
    """Push every frame towards ``endpoint`` and wait until the link is idle; the
    caller closes the returned PUSH socket after draining."""
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 0)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(endpoint)
    send = push.send
    for frame in frames:
        send(frame)
    time.sleep(0.5 + len(frames) * 2e-6)  # let the I/O threads move them across
    return push


def run_raw(ctx: zmq.Context[Any], frames: Sequence[bytes], build: bool = False) -> Timing:
    """(a) / (a'): receive and unpack every frame with plain pyzmq + msgpack (and build
    the records without any check)."""
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 0)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = _preload(ctx, f"tcp://127.0.0.1:{port}", frames)
    recv = pull.recv
    unpackb = msgpack.unpackb
    record = ProgressReport
    timing = Timing.start()
    if build:
        for _ in range(len(frames)):
            record(*unpackb(recv())[2:])
    else:
        for _ in range(len(frames)):
            unpackb(recv())
    timing.stop()
    push.close()
    pull.close()
    return timing


def run_receiver(
    ctx: zmq.Context[Any], frames: Sequence[bytes], apply: Apply | None = None
) -> Timing:
    """(b) / (c): ReportReceiver delivers every frame as a report (and ``apply`` consumes
    each batch)."""
    with ReportReceiver(rcvhwm=0, context=ctx) as rx:
        push = _preload(ctx, rx.endpoint, frames)
        poll = rx.poll
        got = 0
        n = len(frames)
        timing = Timing.start()
        while got < n:
            batch = poll(1.0)
            if not batch:
                raise RuntimeError(f"receiver stalled after {got} of {n} reports: "
                                   f"{rx.counters()}")
            if apply is not None:
                apply(batch)
            got += len(batch)
        timing.stop()
        push.close()
        if rx.counters()["accepted"] != n:
            raise RuntimeError(f"receiver did not accept every frame: {rx.counters()}")
        return timing


@dataclass(slots=True)
class Timing:
    """Wall-clock and process CPU seconds of one run."""

    wall0: float
    cpu0: float
    wall: float = 0.0
    cpu: float = 0.0

    @classmethod
    def start(cls) -> Timing:
        return cls(time.perf_counter(), time.process_time())

    def stop(self) -> None:
        self.wall = time.perf_counter() - self.wall0
        self.cpu = time.process_time() - self.cpu0


def core_apply(jobs: dict[str, list[tuple[int, str]]]) -> Apply:
    """The default hook: a ControllerCore with every job registered (strict, 100 s
    windows); apply = ``core.ingest`` of every report."""
    from coallocator.core import ControllerCore
    from workloads.model import QosClass

    core = ControllerCore()
    for job_id, subs in jobs.items():
        core.register_job(JobRegistration(job_id, QosClass.STRICT, 0.0,
                          tuple((i, node, 750.0) for i, node in subs), 100.0, 100.0))
    ingest = core.ingest

    def apply(reports: list[ProgressReport]) -> None:
        for rep in reports:
            if not ingest(rep):
                raise RuntimeError(f"the core refused {rep}")

    return apply


def load_apply(spec: str) -> Apply | None:
    """The controller ingest hook named by ``spec`` (see the module docstring), or None
    with a message when there is none."""
    if spec == "none":
        print("  (c) skipped: --apply none")
        return None
    try:
        if spec == "core":
            return core_apply(job_layout())
        module_name, _, attr = spec.partition(":")
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        print(f"  (c) skipped: no controller ingest hook {spec!r} ({exc})")
        return None
    apply: Apply = factory(job_layout())
    return apply


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure_round_trip(
    iterations: int,
    between: Callable[[ProgressReport], list[ReweightCommand]] | None = None,
    ctx: zmq.Context[Any] | None = None,
) -> list[float]:
    """Report -> command round trips through the transport, seconds each. ``between``
    turns the received report into the commands to send (default: one command for the
    reporting subtask); the round trip ends when the first command is received."""
    ctx = ctx or zmq.Context.instance()
    node = "node-000"
    with (
        ReportReceiver(context=ctx) as rx,
        CommandPublisher(context=ctx) as pub,
        ReportSender(rx.endpoint, context=ctx) as tx,
        CommandSubscriber(pub.endpoint, node, context=ctx) as sub,
    ):
        _wait_connected(tx, rx, pub, node)
        sub.poll(0.2)
        samples = []
        for seq in range(1, iterations + 1):
            report = ProgressReport("job-1", 0, node, 7, seq, 1.0 * seq, 1.0 * seq,
                                    100.0, 99.0)
            t0 = time.perf_counter()
            if not tx.send(report):
                raise RuntimeError("report dropped during the latency run")
            reports = rx.poll(1.0)
            if not reports:
                raise RuntimeError("report lost during the latency run")
            cmds = (between(reports[0]) if between is not None
                    else [ReweightCommand("job-1", 0, node, seq, 100.0, 1.0)])
            for cmd in cmds:
                pub.publish(cmd)
            if not sub.poll(1.0):
                raise RuntimeError("command lost during the latency run")
            samples.append(time.perf_counter() - t0)
        return samples


def _wait_connected(tx: ReportSender, rx: ReportReceiver, pub: CommandPublisher,
                    node: str) -> None:
    deadline = time.monotonic() + 10.0
    probe = ProgressReport("job-0", 0, node, 7, 0, 0.0, 0.0, 1.0, 1.0)
    while not tx.send(probe):
        if time.monotonic() > deadline:
            raise RuntimeError("report channel did not connect")
        time.sleep(0.01)
    rx.poll(1.0)
    while not pub.publish(ReweightCommand("job-0", 0, node, 0, 1.0, 0.0)):
        if time.monotonic() > deadline:
            raise RuntimeError("command channel did not connect")
        time.sleep(0.01)


def measure_raw_round_trip(iterations: int, ctx: zmq.Context[Any] | None = None) -> list[float]:
    """The reference: the same round trip over raw PUSH/PULL and ROUTER/DEALER sockets
    with msgpack tuples, blocking receives, no validation."""
    ctx = ctx or zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    router = ctx.socket(zmq.ROUTER)
    push = ctx.socket(zmq.PUSH)
    dealer = ctx.socket(zmq.DEALER)
    for s in (pull, router, push, dealer):
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, 1000)
    dealer.setsockopt(zmq.ROUTING_ID, b"node-000")
    p1 = pull.bind_to_random_port("tcp://127.0.0.1")
    p2 = router.bind_to_random_port("tcp://127.0.0.1")
    push.connect(f"tcp://127.0.0.1:{p1}")
    dealer.connect(f"tcp://127.0.0.1:{p2}")
    dealer.send(b"hello")  # let the ROUTER learn the routing id
    router.recv_multipart()
    samples = []
    try:
        for seq in range(1, iterations + 1):
            t0 = time.perf_counter()
            push.send(msgpack.packb((1, "progress", "job-1", 0, "node-000", 7, seq, 1.0 * seq,
                                     1.0 * seq, 100.0, 99.0, False)))
            msgpack.unpackb(pull.recv())
            router.send_multipart((b"node-000", msgpack.packb(
                (1, "reweight", "job-1", 0, "node-000", seq, 100.0, 1.0))))
            msgpack.unpackb(dealer.recv())
            samples.append(time.perf_counter() - t0)
    finally:
        for s in (pull, router, push, dealer):
            s.close(linger=0)
    return samples


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=200_000, help="frames per ingest run")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved runs per variant")
    ap.add_argument("--latency", type=int, default=2000, help="round trips (0: skip)")
    ap.add_argument("--apply", default="core",
                    help="controller ingest hook: core, none or MODULE:FACTORY")
    args = ap.parse_args(argv)
    if args.reports < 1 or args.rounds < 1 or args.latency < 0:
        print("bench_ingest: --reports and --rounds must be >= 1, --latency >= 0",
              file=sys.stderr)
        return 2

    ctx: zmq.Context[Any] = zmq.Context()
    frames = make_frames(args.reports)
    print(f"ingest: {len(frames)} frames of {min(map(len, frames))}-{max(map(len, frames))} "
          f"bytes over tcp://127.0.0.1, best of {args.rounds} rounds")
    apply = load_apply(args.apply)
    variants: list[tuple[str, str, Callable[[], Timing]]] = [
        ("a", "raw pyzmq recv + msgpack.unpackb", lambda: run_raw(ctx, frames)),
        ("a2", "raw + ProgressReport(*fields), no checks",
         lambda: run_raw(ctx, frames, build=True)),
        ("b", "ReportReceiver (checks, dedupe, records)", lambda: run_receiver(ctx, frames)),
    ]
    if apply is not None:
        variants.append(("c", "ReportReceiver + controller ingest",
                         lambda: run_receiver(ctx, frames, apply)))
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for _ in range(args.rounds):
        for key, _, run in variants:
            t = run()
            wall[key] = min(wall.get(key, math.inf), t.wall)
            cpu[key] = min(cpu.get(key, math.inf), t.cpu)
    n = len(frames)
    for key, label, _ in variants:
        shown = "a'" if key == "a2" else key
        line = f"  ({shown}){' ' * (3 - len(shown))}{label:42s} {n / wall[key]:12,.0f} reports/s"
        if key != "a":
            line += (f"   ratio {n / wall[key] / (n / wall['a']):.3f}"
                     f" (CPU time: {cpu['a'] / cpu[key]:.3f})")
        print(line)
    print(f"  target for (b): ratio >= 0.5; "
          f"(b) spends {1e9 * (wall['b'] - wall['a']) / n:.0f} ns/report more than (a), "
          f"(a') {1e9 * (wall['a2'] - wall['a']) / n:.0f} ns of it on building records")

    if args.latency:
        ours = measure_round_trip(args.latency, ctx=ctx)
        raw = measure_raw_round_trip(args.latency, ctx=ctx)
        p50, p99 = _pct(ours, 0.50) * 1e6, _pct(ours, 0.99) * 1e6
        r50, r99 = _pct(raw, 0.50) * 1e6, _pct(raw, 0.99) * 1e6
        print(f"report-to-reweight round trip, {args.latency} samples (transport only):")
        print(f"  coalloc transport: p50 {p50:8.1f} us   p99 {p99:8.1f} us   "
              f"mean {statistics.fmean(ours) * 1e6:8.1f} us")
        print(f"  raw pyzmq+msgpack: p50 {r50:8.1f} us   p99 {r99:8.1f} us")
        print(f"  ratio coalloc/raw: p50 {p50 / r50:.2f}   p99 {p99 / r99:.2f}")
    ctx.term()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
