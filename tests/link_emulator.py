"""Delay and loss on a namespaced host's link where the kernel has no ``netem`` qdisc.

    python3 link_emulator.py NS ROOT_DEV NS_DEV DELAY_MS JITTER_MS LOSS_PERCENT SEED

Some kernels (a microVM's, built without ``sch_netem``) refuse ``tc qdisc ... netem``.
This does what ``netem delay DELAY JITTER loss LOSS`` on both ends of the host's link
would: it creates a TUN device ``ROOT_DEV`` in the root namespace and ``NS_DEV`` in the
host's namespace ``NS`` and forwards every IP packet between them, each way, after a delay
drawn uniformly in ``DELAY +- JITTER`` ms (packets may be reordered, as netem's jitter
reorders them), dropping ``LOSS`` percent at random. :meth:`multihost.NetnsCluster.netem`
starts it and routes the host's traffic through the two devices (the veth stays, unused);
SIGTERM stops it and removes the devices. Prints ``ready`` once both devices exist.
"""

from __future__ import annotations

import ctypes
import fcntl
import heapq
import os
import random
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000


def tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


def main() -> int:
    ns, root_dev, ns_dev = sys.argv[1:4]
    delay, jitter, loss = (float(v) for v in sys.argv[4:7])
    rng = random.Random(int(sys.argv[7]))
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    root_fd = tun(root_dev)
    setns(f"/var/run/netns/{ns}")
    ns_fd = tun(ns_dev)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.setns(home, CLONE_NEWNET)
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    try:  # on a loaded machine a delay must not grow by the time this waits for a core
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(10))
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    print("ready", flush=True)
    other = {root_fd: ns_fd, ns_fd: root_fd}
    queue: list[tuple[float, int, int, bytes]] = []
    seq = 0
    while not stop:
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, out, packet = heapq.heappop(queue)
            try:
                os.write(out, packet)
            except OSError:
                pass  # the device is down or full: a lost packet
        timeout = max(0.0, queue[0][0] - now) if queue else 0.5
        try:
            ready, _, _ = select.select([root_fd, ns_fd], [], [], timeout)
        except InterruptedError:
            continue
        for fd in ready:
            for _ in range(64):
                try:
                    packet = os.read(fd, 65536)
                except (BlockingIOError, InterruptedError):
                    break
                if rng.random() * 100.0 < loss:
                    continue
                at = time.monotonic() + max(0.0, delay + rng.uniform(-jitter, jitter)) / 1000.0
                seq += 1
                heapq.heappush(queue, (at, seq, other[fd], packet))
    return 0


if __name__ == "__main__":
    sys.exit(main())
