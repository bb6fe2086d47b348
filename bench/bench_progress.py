"""What one ``coalloc.progress.report(t)`` call costs the application, inside coalloc (a
reporter installed, its thread sending to a local UDP socket) and outside (no reporter:
the call does nothing), against a plain attribute store measured in the same run.

Run: ``python3 bench/bench_progress.py [--calls 1000000] [--rounds 5]``.

Prints ns per call, best of ``--rounds``, for (a) the reference, ``obj.t = t``; (b)
``report(t)`` outside coalloc; (c) ``report(t, t_end)`` inside coalloc; and the ratios
(b)/(a), (c)/(a). The target: (c) <= 2000 ns. Also the datagrams the thread sent in
(c) (capped at one per ``MIN_INTERVAL_S``), showing the calls were not each sent.
"""

from __future__ import annotations

import argparse
import socket
import time
from collections.abc import Callable

from coalloc import progress


class _Holder:
    __slots__ = ("t",)

    def __init__(self) -> None:
        self.t = 0.0


def _best_ns(body: Callable[[int], None], calls: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        began = time.perf_counter_ns()
        body(calls)
        best = min(best, (time.perf_counter_ns() - began) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    holder = _Holder()

    def reference(n: int) -> None:
        h = holder
        for i in range(n):
            h.t = float(i)

    report = progress.report

    def calls(n: int) -> None:
        for i in range(n):
            report(float(i), 1e9)

    progress._install(None)
    ref = _best_ns(reference, args.calls, args.rounds)
    off = _best_ns(calls, args.calls, args.rounds)

    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    reporter = progress.Reporter(sink.getsockname(), "0" * 32)
    progress._install(reporter)
    began = time.monotonic()
    on = _best_ns(calls, args.calls, args.rounds)
    elapsed = time.monotonic() - began
    progress._install(None)
    sink.close()

    print(f"reference (attribute store)     {ref:8.1f} ns/call")
    print(f"report() outside coalloc        {off:8.1f} ns/call   {off / ref:5.1f}x reference")
    print(f"report() inside coalloc         {on:8.1f} ns/call   {on / ref:5.1f}x reference"
          f"   target <= 2000 ns: {'met' if on <= 2000 else 'MISSED'}")
    print(f"datagrams sent inside coalloc   {reporter.sent} in {elapsed:.2f} s "
          f"({args.calls * args.rounds} calls; cap one per {progress.MIN_INTERVAL_S} s)")


if __name__ == "__main__":
    main()
