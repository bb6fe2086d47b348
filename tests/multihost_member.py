"""A gang member for the multi-host tests: it keeps its own record of when it ran.

    python3 multihost_member.py DIR SECONDS

Appends to ``DIR/<COALLOC_NODE>.log`` (a file of its host) one line when it starts, one
every 0.2 s while it runs and one when it stops (its end, or SIGTERM), each
``KIND JOB ATTEMPT SUBTASK PID UNIX_TIME NODE``. A member killed by SIGKILL leaves its
last beat as its end, 0.2 s at most before it. Exits 0 after SECONDS.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def main() -> int:
    directory, seconds = sys.argv[1], float(sys.argv[2])
    env = os.environ
    node = env.get("COALLOC_NODE", "unknown")
    who = (f"{env.get('COALLOC_JOB_ID', '?')} {env.get('COALLOC_ATTEMPT', '0')} "
           f"{env.get('COALLOC_SUBTASK', '0')} {os.getpid()}")
    path = os.path.join(directory, f"{node}.log")

    def record(kind: str) -> None:
        with open(path, "a", encoding="ascii") as f:
            f.write(f"{kind} {who} {time.time():.3f} {node}\n")

    def stopped(signum: int, frame: object) -> None:
        record("stop")
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stopped)
    record("start")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))
        record("beat")
    record("stop")
    return 0


if __name__ == "__main__":
    sys.exit(main())
