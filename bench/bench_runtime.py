"""Benchmark: the live runtime's start-up time and report-to-reweight latency.

1. **Start-up.** ``coalloc up --nodes N`` in a fresh process (embedded Ray head, a
   controller, N local managers, the global manager): wall time until the command returns
   (every local manager has answered ``ready``), and the part of it spent creating the
   actors. Reference, same run, same cluster: the time to create N + 2 trivial Ray actors
   (``num_cpus=0``) and get an answer from each.
2. **Report-to-reweight latency** through a live controller actor (the runtime's
   ``ControllerActor``: its ZeroMQ PULL and ROUTER sockets, its control loop, phase log
   and metrics) on loopback. The benchmark plays two local managers: it pushes an
   in-step pair of progress reports (nothing to do), waits, then a pair out of step by
   more than the asynchrony window, and times from that send until the first re-weight
   command arrives on its DEALER sockets. The controller evaluates a control period every
   cycle, so the latency is about half a control period plus the processing; the control
   period is printed with it. Reference, same run: the round trip of one frame through
   the same transport classes with no controller (PUSH -> PULL -> decode -> encode ->
   ROUTER -> DEALER, a thread echoing).

Run: ``python3 bench/bench_runtime.py`` (about a minute on two cores; ``--samples`` and
``--nodes`` change the sizes). Uses a private ``COALLOC_HOME`` and stops what it starts.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def coalloc(home: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COALLOC_HOME=home)
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-m", "coalloc.cli", *argv], capture_output=True, text=True, env=env,
        timeout=300,
    )


def bench_startup(home: str, nodes: int) -> tuple[float, float, str]:
    """(wall s of `coalloc up`, s spent on the actors, cluster address)."""
    t0 = time.monotonic()
    proc = coalloc(home, "up", "--nodes", str(nodes))
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"coalloc up failed: {proc.stderr.strip()}")
    m = re.search(r"local managers ready ([0-9.]+) s", proc.stdout)
    addr = re.search(r"coalloc is up on (\S+)", proc.stdout)
    assert m is not None and addr is not None, proc.stdout
    return wall, float(m.group(1)), addr.group(1)


def bench_trivial_actors(count: int) -> float:
    import ray

    class Trivial:
        def ready(self) -> int:
            return os.getpid()

    remote_cls: Any = ray.remote(num_cpus=0)(Trivial)
    t0 = time.monotonic()
    actors = [remote_cls.remote() for _ in range(count)]
    ray.get([a.ready.remote() for a in actors])
    took = time.monotonic() - t0
    for a in actors:
        ray.kill(a)
    return took


def bench_controller_latency(samples: int, time_scale: float, cycle: float) -> list[float]:
    """Real seconds from an out-of-step report pair to the first re-weight command."""
    import ray

    from coallocator.messages import ProgressReport
    from coallocator.transport import CommandSubscriber, ReportSender
    from runtime.actors import ControllerActor
    from runtime.config import RuntimeConfig, runtime_core
    from runtime.timebase import TimeBase

    cfg = RuntimeConfig(runtime_core(cycle=cycle), time_scale=time_scale)
    base = TimeBase(time.time(), time_scale)
    log = Path(tempfile.mkdtemp(prefix="coalloc-bench-")) / "phase.jsonl"
    actor: Any = ray.remote(ControllerActor).options(num_cpus=0, max_concurrency=8).remote(
        cfg, base, {"a": 1e9, "b": 1e9}, str(log)
    )
    try:
        ends: dict[str, Any] = ray.get(actor.ready.remote())
        # Overall window out of reach; asynchrony window 10 model s.
        ray.get(actor.register_job.remote("bench", "strict", 0.0, [(0, "a", 100.0),
                                                                   (1, "b", 100.0)], 1e12, 10.0))
        sender = ReportSender(ends["report_endpoint"])
        subs = [CommandSubscriber(ends["command_endpoint"], n) for n in ("a", "b")]
        seq = 0

        def push(spread: float) -> float:
            nonlocal seq
            t_r = (time.time() - base.epoch) * time_scale
            sent = time.perf_counter()
            for i, node in enumerate(("a", "b")):
                seq += 1
                tv = t_r + (spread if i == 0 else -spread) + 1000.0
                sender.send(ProgressReport("bench", i, node, 1, seq, t_r + 1000.0, tv, 1.0,
                                           1.0))
            return sent

        def drain(quiet_s: float) -> None:
            """Discard commands until none has come for ``quiet_s`` real seconds."""
            last = time.perf_counter()
            while time.perf_counter() - last < quiet_s:
                for s in subs:
                    if s.poll(0.002):
                        last = time.perf_counter()

        period_s = cfg.real_cycle
        time.sleep(0.5)  # sockets connected, job registered at the first period
        out: list[float] = []
        for _ in range(samples):
            push(0.0)
            drain(3 * period_s)
            sent = push(50.0)
            got = None
            deadline = sent + 50 * period_s
            while got is None and time.perf_counter() < deadline:
                for s in subs:
                    if s.poll(0.0005):
                        got = time.perf_counter()
                        break
            if got is not None:
                out.append(got - sent)
        sender.close()
        for s in subs:
            s.close()
        return out
    finally:
        ray.get(actor.shutdown.remote())
        ray.kill(actor)


def bench_raw_round_trip(samples: int) -> list[float]:
    """The same transport with no controller: report in, command out, one thread echoing."""
    from coallocator.messages import ProgressReport, ReweightCommand
    from coallocator.transport import (
        CommandPublisher,
        CommandSubscriber,
        ReportReceiver,
        ReportSender,
    )

    receiver = ReportReceiver("127.0.0.1")
    publisher = CommandPublisher("127.0.0.1")
    sender = ReportSender(receiver.endpoint)
    sub = CommandSubscriber(publisher.endpoint, "a")
    stop = threading.Event()

    def echo() -> None:
        while not stop.is_set():
            for rep in receiver.poll(0.05):
                publisher.publish(ReweightCommand(rep.job_id, rep.subtask, "a", rep.seq, 1.0,
                                                  0.0))

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    time.sleep(0.3)
    out = []
    for seq in range(1, samples + 1):
        sent = time.perf_counter()
        sender.send(ProgressReport("raw", 0, "a", 1, seq, 1.0, 1.0, 1.0, 1.0))
        while not sub.poll(0.0005):
            if time.perf_counter() - sent > 2.0:
                break
        else:
            out.append(time.perf_counter() - sent)
    stop.set()
    thread.join()
    for s in (receiver, publisher, sender, sub):
        s.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4, help="emulated nodes for coalloc up")
    ap.add_argument("--samples", type=int, default=200, help="latency samples")
    ap.add_argument("--time-scale", type=float, default=1000.0,
                    help="model s per real s for the latency run (default 1000)")
    ap.add_argument("--cycle", type=float, default=10.0,
                    help="cycle (= control period) in model s for the latency run")
    args = ap.parse_args()

    from importlib.metadata import version

    home = tempfile.mkdtemp(prefix="coalloc-bench-home-")
    os.environ["COALLOC_HOME"] = home  # this process reads the state file `up` writes
    print(f"python {sys.version.split()[0]}, ray {version('ray')}, {os.cpu_count()} CPUs")
    wall, actors_s, address = bench_startup(home, args.nodes)
    ray: Any = None
    try:
        from runtime.deploy import connect_ray

        connect_ray(address)  # before importing Ray: it sets Ray's auth mode
        import ray
        trivial = bench_trivial_actors(args.nodes + 2)
        print(f"\ncoalloc up --nodes {args.nodes} (embedded Ray head): {wall:.2f} s to all "
              f"local managers ready; actors {actors_s:.2f} s of it")
        print(f"reference: {args.nodes + 2} trivial Ray actors created and ready: "
              f"{trivial:.2f} s; ratio actors/reference {actors_s / trivial:.2f}")

        lat = bench_controller_latency(args.samples, args.time_scale, args.cycle)
        raw = bench_raw_round_trip(args.samples)
        period_ms = 1000.0 * args.cycle / args.time_scale
        p50, p99 = percentile(lat, 0.5) * 1e3, percentile(lat, 0.99) * 1e3
        r50, r99 = percentile(raw, 0.5) * 1e3, percentile(raw, 0.99) * 1e3
        print(f"\nreport-to-reweight latency through the live controller, loopback "
              f"({len(lat)}/{args.samples} samples, control period {period_ms:.1f} ms real):")
        print(f"  p50 {p50:.2f} ms   p99 {p99:.2f} ms   mean {statistics.fmean(lat) * 1e3:.2f} ms")
        print(f"reference: transport round trip with no controller ({len(raw)} samples): "
              f"p50 {r50:.3f} ms   p99 {r99:.3f} ms")
        print(f"ratio p50 live/reference {p50 / r50:.1f}; p50 minus half a control period "
              f"{p50 - period_ms / 2:.2f} ms")
    finally:
        if ray is not None and ray.is_initialized():
            ray.shutdown()
        down = coalloc(home, "down")
        print(f"\n{down.stdout.strip().splitlines()[-1] if down.stdout.strip() else down.stderr}")


if __name__ == "__main__":
    main()
