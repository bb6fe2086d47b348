"""Reported progress on a node (NodeRuntime without Ray, a fake executor, the real UDP
progress socket): the reported time drives the virtual clock under ``progress:
reported``, CPU time does under ``cpu``; bad datagrams are dropped and counted while the
subtask runs on; a silent member shows as stalled; a member that spins in its waits is
held near its useful rate under pace control."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clocks.base import ManualClock
from coallocator.messages import ProgressReport
from local_manager.executor_records import CycleUsage, ExecutorState, LimitMode
from local_manager.progress_wire import ADDR_ENV, KEY_ENV, encode, parse_addr
from local_manager.useful_rate import HEADROOM
from runtime.config import RuntimeConfig, runtime_core
from runtime.node_runtime import NodeRuntime
from runtime.timebase import ModelClock, TimeBase
from workloads.model import Node, ProgressMode, ProgressSpec, QosClass, Subtask

Q = 10.0
RATE = 100.0
WORK = 1e6  # nominal duration WORK / RATE = 10,000 model s


class Burner:
    """A process that uses its whole share every cycle and never exits."""

    pid = 4242
    ncores = 1.0
    exit_code = None

    def __init__(self) -> None:
        self.cpu_s_total = 0.0
        self._share = 0.0

    def start(self) -> None: ...

    def begin_cycle(self, share: float, cycle_s: float) -> None:
        self._share, self._cycle_s = share, cycle_s

    def step(self) -> float | None:
        return None

    def end_cycle(self) -> CycleUsage:
        cpu = self._share * self._cycle_s
        self.cpu_s_total += cpu
        return CycleUsage(self._share, self._cycle_s, self._cycle_s, cpu, 0.0,
                          LimitMode.DUTY_CYCLE, ExecutorState.RUNNING, None)

    def checkpoint(self) -> Any:
        class Record:
            def to_dict(self) -> dict[str, Any]:
                return {"tag": "t1", "pid": 4242}

        return Record()

    def close(self, grace_s: float | None = None) -> None: ...


class Sink:
    def __init__(self) -> None:
        self.reports: list[ProgressReport] = []

    def send(self, report: ProgressReport) -> bool:
        self.reports.append(report)
        return True


def make(envs: list[tuple[tuple[str, str], ...]] | None = None,
         policy: str = "sq") -> NodeRuntime:
    """A node whose process subtasks are burners; ``envs``: each one's environment."""
    clock = ModelClock(ManualClock(0.0), TimeBase(0.0, 100.0))
    config = RuntimeConfig(runtime_core(cycle=Q), time_scale=100.0, policy=policy)

    def factory(argv: tuple[str, ...], speed: float, out: Path | None,
                env: tuple[tuple[str, str], ...] = ()) -> Burner:
        if envs is not None:
            envs.append(env)
        return Burner()

    return NodeRuntime(Node("n0", 400.0), config, clock, Sink(), None, lambda o: None,
                       incarnation=1, process_factory=factory)


@pytest.fixture
def node() -> Iterator[NodeRuntime]:
    rt = make()
    yield rt
    rt._close_all()


def start(rt: NodeRuntime, progress: ProgressSpec | None, job: str = "j") -> dict[str, str]:
    s = Subtask(job, 0, "n0", QosClass.STRICT, WORK, 1.0, RATE, RATE, command=("prog",),
                progress=progress)
    rt.submit([s], start=0.0)
    rt.tick(0.0)
    env = rt.progress_env((job, 0))
    assert set(env) == {ADDR_ENV, KEY_ENV}
    return env


def send(env: dict[str, str], data: bytes) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(data, parse_addr(env[ADDR_ENV]))


def report(env: dict[str, str], t: float, end: float | None = None) -> None:
    send(env, encode(env[KEY_ENV], t, end, 0.0, False))


def described(rt: NodeRuntime, job: str = "j") -> dict[str, object]:
    (d,) = [x for x in rt.snapshot()["subtasks"] if x["job_id"] == job]
    return d


def test_the_reported_time_drives_the_virtual_clock(node: NodeRuntime) -> None:
    env = start(node, ProgressSpec(ProgressMode.REPORTED, end=200.0))
    node.tick(Q)
    assert node.scheduler.virtual_time(("j", 0)) == 0.0  # nothing reported: no progress
    report(env, 50.0)  # a quarter of 200: a quarter of the nominal 10,000 s
    node.tick(2 * Q)
    assert node.scheduler.virtual_time(("j", 0)) == pytest.approx(2500.0)
    report(env, 60.0, end=120.0)  # a total reported overrides the job file's
    node.tick(3 * Q)
    assert node.scheduler.virtual_time(("j", 0)) == pytest.approx(5000.0)
    d = described(node)
    assert d["reported_time"] == 60.0 and d["reported_end"] == 120.0
    assert d["reported_fraction"] == pytest.approx(0.5) and d["progress_reports"] == 2
    assert d["stalled"] is False


def test_under_cpu_reports_are_shown_and_cpu_time_drives_the_clock(node: NodeRuntime) -> None:
    env = start(node, None)
    report(env, 1.0, end=1e9)
    node.tick(Q)
    # The burner used its whole first share, the expected rate: its clock keeps real time.
    assert node.scheduler.virtual_time(("j", 0)) == pytest.approx(Q)
    d = described(node)
    assert d["reported_time"] == 1.0 and d["progress_reports"] == 1


def test_cpu_job_without_reports_shows_no_progress_fields(node: NodeRuntime) -> None:
    start(node, None)
    node.tick(Q)
    assert "reported_time" not in described(node) and "stalled" not in described(node)


def test_bad_datagrams_are_dropped_and_counted_and_the_subtask_runs_on(
    node: NodeRuntime,
) -> None:
    env = start(node, ProgressSpec(ProgressMode.REPORTED, end=100.0))
    report(env, 30.0)
    send(env, b"garbage")
    send(env, b"x" * 4000)
    send(env, f"CPR1 {env[KEY_ENV]} nan - 0 0".encode())
    send(env, encode("f" * 32, 90.0, 100.0, 0.0, False))  # not this subtask's key
    report(env, 10.0)  # backwards
    node.tick(Q)
    c = node.counters
    assert (c["progress_dropped_malformed"], c["progress_dropped_oversize"],
            c["progress_dropped_not_finite"], c["progress_dropped_bad_key"],
            c["progress_dropped_backwards"], c["progress_received"]) == (1, 1, 1, 1, 1, 1)
    d = described(node)
    assert d["state"] == "running" and d["progress_dropped"] == {"backwards": 1}
    assert node.scheduler.virtual_time(("j", 0)) == pytest.approx(3000.0)
    report(env, 40.0)  # still taken after the bad ones
    node.tick(2 * Q)
    assert node.scheduler.virtual_time(("j", 0)) == pytest.approx(4000.0)
    (rep,) = [r for r in node.report().subtasks if r.run_id == "j"]
    assert rep.progress_dropped == {"backwards": 1} and rep.reported_fraction == 0.4


def test_a_silent_member_is_stalled_after_its_window(node: NodeRuntime) -> None:
    env = start(node, ProgressSpec(ProgressMode.REPORTED, end=100.0, stall_after=2 * Q))
    node.tick(Q)
    report(env, 1.0)
    node.tick(2 * Q)
    assert described(node)["stalled"] is False
    for k in range(3, 6):
        node.tick(k * Q)
    assert described(node)["stalled"] is True
    (rep,) = node.report().subtasks
    assert rep.stalled is True
    report(env, 2.0)
    node.tick(6 * Q)
    assert described(node)["stalled"] is False


def test_a_cancelled_subtask_key_no_longer_reports(node: NodeRuntime) -> None:
    env = start(node, ProgressSpec(ProgressMode.REPORTED, end=100.0))
    assert node.cancel_job("j")
    report(env, 5.0)
    node.tick(Q)
    assert node.counters["progress_dropped_bad_key"] == 1


def test_the_process_gets_the_progress_environment() -> None:
    envs: list[tuple[tuple[str, str], ...]] = []
    rt = make(envs)
    try:
        env = start(rt, None)
        assert envs == [tuple(env.items())]
        assert len(env[KEY_ENV]) == 32 and env[ADDR_ENV].startswith("127.0.0.1:")
    finally:
        rt._close_all()


def test_a_restarted_manager_keeps_the_reports_and_the_address(tmp_path: Path) -> None:
    rt = make()
    rt.checkpoint = tmp_path / "lm.json"
    env = start(rt, ProgressSpec(ProgressMode.REPORTED, end=100.0))
    report(env, 20.0)
    rt.tick(Q)
    report(env, 10.0)  # backwards: counted on the subtask, kept across the restart
    rt.tick(2 * Q)
    data = json.loads(rt.checkpoint.read_text())
    rt._close_all()  # the manager dies; its socket is closed with it
    again = make()
    try:
        assert again.restore(data, attach=lambda record: Burner()) == 1
        # The re-attached process still has its old environment: same address, same key.
        assert again.progress_env(("j", 0)) == env
        report(env, 30.0)
        again.tick(3 * Q)
        assert again.scheduler.virtual_time(("j", 0)) == pytest.approx(3000.0)
        d = described(again)
        assert d["progress_reports"] == 2 and d["progress_dropped"] == {"backwards": 1}
    finally:
        again._close_all()


def spin(rt: NodeRuntime, env: dict[str, str], need: float, cycles: int) -> list[float]:
    """Play a member that needs ``need`` of a core and spins the rest of its share in its
    waits, reporting them, for ``cycles`` boundaries; its share in each cycle."""
    run = rt._procs[("j", 0)]
    wall = rt.config.real_cycle
    waited, shares = 0.0, []
    for k in range(1, cycles + 1):
        shares.append(run.share)
        waited += wall * max(0.0, 1.0 - need / run.share)
        send(env, encode(env[KEY_ENV], float(k), 100.0, waited, False))
        rt.tick(k * Q)
    return shares


def test_a_spinning_member_is_held_near_its_useful_rate_under_sq_useful() -> None:
    node = make(policy="sq_useful")
    try:
        _held_near_its_useful_rate(node)
    finally:
        node._close_all()


def _held_near_its_useful_rate(node: NodeRuntime) -> None:
    env = start(node, ProgressSpec(ProgressMode.REPORTED, end=100.0))
    # Alone on the node it is granted the whole core; it needs 0.2 of it.
    shares = spin(node, env, 0.2, 12)
    assert shares[0] == pytest.approx(RATE / 400.0)  # the first cycle: its expected rate
    assert shares[-1] == pytest.approx(0.2 * HEADROOM, rel=0.05)
    d = described(node)
    assert d["useful_rate"] == pytest.approx(0.2 * 400.0, rel=0.05)
    assert d["useful_cap"] == pytest.approx(0.2 * HEADROOM * 400.0, rel=0.05)
    assert d["wait_fraction"] == pytest.approx(1.0 - 1.0 / HEADROOM, abs=0.05)
    (rep,) = node.report().subtasks
    assert rep.useful_cap == d["useful_cap"]
    # It stops waiting (it needs the whole core now): its cap probes up and goes.
    run = node._procs[("j", 0)]
    for k in range(13, 20):
        send(env, encode(env[KEY_ENV], float(k), 100.0, rep.wait_s or 0.0, False))
        node.tick(k * Q)
    assert described(node)["useful_cap"] is None and run.share == pytest.approx(1.0)


@pytest.mark.parametrize("policy", ["strict", "sq"])
def test_elsewhere_the_useful_rate_is_shown_not_applied(policy: str) -> None:
    rt = make(policy=policy)
    try:
        env = start(rt, ProgressSpec(ProgressMode.REPORTED, end=100.0))
        shares = spin(rt, env, 0.2, 6)
        assert shares[-1] == pytest.approx(1.0)
        d = described(rt)
        assert d["useful_rate"] == pytest.approx(0.2 * 400.0, rel=0.05)
        assert d["useful_cap"] is None
    finally:
        rt._close_all()


def test_a_member_that_does_not_wait_is_estimated_and_not_capped(node: NodeRuntime) -> None:
    env = start(node, ProgressSpec(ProgressMode.REPORTED, end=100.0))
    for k in range(1, 4):
        report(env, float(k))
        node.tick(k * Q)
    d = described(node)
    assert d["wait_fraction"] == 0.0 and d["useful_cap"] is None
    assert d["useful_rate"] == pytest.approx(400.0, rel=0.3)  # it uses what it gets
    assert node._procs[("j", 0)].share == pytest.approx(1.0)


def test_a_cpu_member_gets_no_useful_rate(node: NodeRuntime) -> None:
    env = start(node, None)
    for k in range(1, 4):
        send(env, encode(env[KEY_ENV], float(k), 100.0, 0.1 * k, False))
        node.tick(k * Q)
    assert "useful_rate" not in described(node)
