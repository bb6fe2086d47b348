"""Helpers shared by the tests (``tests/`` is on ``sys.path``: ``from support import ...``).

Tests do not sleep to synchronise: a fixed sleep assumes how long something takes, which
is slow when the guess is generous and flaky when it is not (two shared cores). Wait for
the condition itself instead: an event, or :func:`wait_until` polling a predicate with a
deadline. ``tests/unit/test_no_sleeps.py`` keeps ``time.sleep`` and ``asyncio.sleep`` out
of the unit tests; this module is outside ``tests/unit`` and is the one place that waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.005,
    message: str = "",
) -> T:
    """Poll ``predicate`` until it returns something truthy and return that; raise
    ``AssertionError`` (naming ``message``) if ``timeout`` seconds pass first. The
    predicate is tried once more at the deadline, so a slow machine is not failed by the
    granularity of the polling."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            value = predicate()
            if value:
                return value
            raise AssertionError(f"timed out after {timeout} s waiting for "
                                 f"{message or getattr(predicate, '__name__', 'a condition')}")
        time.sleep(min(interval, remaining))


@contextmanager
def deployed(address: str, log: Path, *up_args: str) -> Iterator[None]:
    """``coalloc up`` on the Ray cluster at ``address`` with its phase log at ``log`` and
    ``up_args``, for the body; ``coalloc down`` after it (if the runtime is still up)."""
    from coalloc import cli
    from runtime.config import GLOBAL_NAME
    from runtime.deploy import find_actor

    code = cli.main(["up", "--address", address, "--log", str(log), *up_args])
    assert code == 0, f"coalloc up {' '.join(up_args)} exited {code}"
    try:
        yield
    finally:
        if find_actor(GLOBAL_NAME) is not None:
            cli.main(["down", "--address", address])


def run_cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    """Run ``coalloc ARGV`` in this process; its exit code, stdout and stderr
    (``capsys``: pytest's capture fixture)."""
    from coalloc import cli

    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli_status(capsys: Any, address: str, job: str | None = None) -> Any:
    """``coalloc status --json [JOB]`` as data. A test process that created the actors
    gets Ray's notices of killed workers on its stdout too: the JSON is found after them."""
    import json

    argv = ["status", "--json", "--address", address] + ([job] if job else [])
    code, out, err = run_cli(capsys, *argv)
    assert code == 0 and out, (code, out, err)
    return json.loads(out[out.index("{\n"):])


def wait_for(predicate: Callable[[], T], timeout: float = 60.0, every: float = 0.2) -> T:
    """:func:`wait_until` with the integration tests' defaults (real actors: seconds)."""
    return wait_until(predicate, timeout, every, "condition not reached in time")


def idle_budgets(capsys: Any, address: str, timeout: float = 60.0) -> Any:
    """Wait until the global manager budgets every node of the deployment at ``address``
    as an idle node, and return that ``status --json``. The default policy (``sq``)
    admits on the QoS capacity each node measures, which the global manager hears once a
    second: an idle node's budget is (1 + 0.05) x its whole rate, its QoS share's before
    the first status. Tests that size a job to fill a node wait for this first."""
    from runtime.config import RuntimeConfig

    cfg = RuntimeConfig()
    admission = cfg.get_policy().admission_policy()

    def idle() -> Any:
        st = cli_status(capsys, address)
        rates = [n["speed_mhz"] * n["cores"] for n in st["nodes"]]
        full = all(
            abs(n["budget"] - admission.budget(r, cfg.qos_share, r)) <= 1e-6 * r
            for n, r in zip(st["nodes"], rates)
        )
        return st if full else None

    return wait_for(idle, timeout=timeout)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (psutil reads /proc)."""
    import psutil

    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False
