"""The local manager's cycle loop without Ray: process subtasks (with a fake executor whose
CPU use is known), commands, late starts, cancel, and the real-time loops of the node and
the controller on a fast time scale."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import wait_until

from clocks.base import ManualClock
from coallocator.messages import ProgressReport, ReweightCommand
from local_manager.executor_records import CycleUsage, ExecutorState, LimitMode
from runtime.config import RuntimeConfig, runtime_core
from runtime.controller_service import ControllerService
from runtime.node_runtime import NodeRuntime
from runtime.timebase import ModelClock, TimeBase
from workloads.messages import JobRegistration, SubtaskOutcome, SubtaskPhase
from workloads.model import Node, QosClass, Subtask

SCALE = 100.0
Q = 10.0  # model s; one cycle is Q / SCALE = 0.1 real s


@dataclass
class FakeExecutor:
    """Uses ``efficiency`` of the share it is given; exits after ``cycles`` cycles."""

    argv: tuple[str, ...]
    cycles: int = 3
    efficiency: float = 0.5
    exit_code_at_end: int = 0
    ncores: float = 2.0
    pid: int = 4242
    started: bool = False
    closed: bool = False
    shares: list[float] | None = None
    cpu_s_total: float = 0.0
    exit_code: int | None = None
    _share: float = 0.0
    _cycle_s: float = 0.0

    def start(self) -> None:
        self.started = True
        self.shares = []

    def begin_cycle(self, share: float, cycle_s: float) -> None:
        assert self.shares is not None
        self.shares.append(share)
        self._share, self._cycle_s = share, cycle_s

    def step(self) -> float | None:
        return None

    def end_cycle(self) -> CycleUsage:
        cpu = self._share * self._cycle_s * self.efficiency
        self.cpu_s_total += cpu
        assert self.shares is not None
        state = ExecutorState.RUNNING
        if len(self.shares) >= self.cycles:
            state, self.exit_code = ExecutorState.FINISHED, self.exit_code_at_end
        return CycleUsage(self._share, self._cycle_s, self._cycle_s, cpu, 0.0,
                          LimitMode.DUTY_CYCLE, state, self.exit_code)

    def close(self, grace_s: float | None = None) -> None:
        self.closed = True


class Sink:
    def __init__(self) -> None:
        self.reports: list[ProgressReport] = []

    def send(self, report: ProgressReport) -> bool:
        self.reports.append(report)
        return True


class Commands:
    def __init__(self) -> None:
        self.items: list[ReweightCommand] = []

    def poll(self) -> list[ReweightCommand]:
        items, self.items = self.items, []
        return items


def subtask(job: str, node: str = "n0", work: float = 1e6, rate: float = 100.0,
            command: tuple[str, ...] | None = None, qos: QosClass = QosClass.STRICT) -> Subtask:
    return Subtask(job, 0, node, qos, work, 1.0, rate, rate, command=command)


def make(node: Node, factory: Any = None) -> tuple[NodeRuntime, Sink, Commands,
                                                   list[SubtaskOutcome]]:
    clock = ModelClock(ManualClock(0.0), TimeBase(0.0, SCALE))
    sink, cmds, ended = Sink(), Commands(), []
    config = RuntimeConfig(runtime_core(cycle=Q), time_scale=SCALE)
    rt = NodeRuntime(node, config, clock, sink, cmds, ended.append, incarnation=1,
                     process_factory=factory)
    return rt, sink, cmds, ended


def test_process_subtask_share_measured_work_and_virtual_clock() -> None:
    made: list[FakeExecutor] = []

    def factory(argv: tuple[str, ...], speed: float, out: Path | None,
                env: tuple[tuple[str, str], ...] = ()) -> FakeExecutor:
        made.append(FakeExecutor(argv))
        return made[-1]

    node = Node("n0", 400.0)
    rt, sink, _, ended = make(node, factory)
    rt.submit([subtask("j1", rate=100.0, command=("prog", "x"))], start=0.0)
    rt.tick(0.0)
    (ex,) = made
    assert ex.started and ex.argv == ("prog", "x")
    # First cycle: no grant yet, so the expected rate: 100 / 400 MHz = 0.25 core.
    assert ex.shares == [pytest.approx(0.25)]
    rt.tick(Q)
    # The scheduler grants the whole idle node (work conserving): one core next cycle.
    assert ex.shares[-1] == pytest.approx(1.0)
    (rep,) = sink.reports
    # x-bar: 0.25 core x 0.1 s x 0.5 efficiency = 0.0125 CPU-s -> x 100 x 400 MHz.
    assert rep.granted_work == pytest.approx(0.0125 * SCALE * 400.0)
    assert rep.expected_work == pytest.approx(100.0 * Q)
    assert rep.virtual_time == pytest.approx(Q * rep.granted_work / rep.expected_work)
    assert not rep.done
    rt.tick(2 * Q)
    rt.tick(3 * Q)  # the third cycle ends with the command's exit
    assert sink.reports[-1].done
    assert ended == [SubtaskOutcome("j1", 0, "n0", SubtaskPhase.FINISHED, 3 * Q, 0, "")]
    assert ex.closed and len(rt.scheduler) == 0
    (desc,) = rt.snapshot()["subtasks"]
    assert desc["state"] == "finished" and desc["exit_code"] == 0
    # Work done is what was measured, in model Mcycles.
    assert desc["done_work"] == pytest.approx(ex.cpu_s_total * SCALE * 400.0)


def test_failed_and_unstartable_commands() -> None:
    def factory(argv: tuple[str, ...], speed: float, out: Path | None,
                env: tuple[tuple[str, str], ...] = ()) -> FakeExecutor:
        if argv[0] == "missing":
            raise ValueError("argv[0]: 'missing': no such executable on PATH")
        return FakeExecutor(argv, cycles=1, exit_code_at_end=3)

    rt, sink, _, ended = make(Node("n0", 300.0), factory)
    a = subtask("bad", command=("prog",))
    b = Subtask("gone", 0, "n0", QosClass.STRICT, 1e6, 1.0, 50.0, 50.0, command=("missing",))
    rt.submit([a, b], 0.0)
    rt.tick(0.0)
    rt.tick(Q)
    states = {o.job_id: o for o in ended}
    assert states["bad"].state is SubtaskPhase.FAILED and states["bad"].exit_code == 3
    assert "status 3" in states["bad"].reason
    assert states["gone"].state is SubtaskPhase.FAILED
    assert "no such executable" in states["gone"].reason
    # The controller hears that both are done (they will never progress).
    assert {r.job_id for r in sink.reports if r.done} == {"bad", "gone"}


def test_commands_late_starts_and_cancel() -> None:
    made: list[FakeExecutor] = []

    def factory(argv: tuple[str, ...], speed: float, out: Path | None,
                env: tuple[tuple[str, str], ...] = ()) -> FakeExecutor:
        made.append(FakeExecutor(argv, cycles=10**6))
        return made[-1]

    rt, sink, cmds, ended = make(Node("n0", 300.0), factory)
    rt.submit([subtask("syn", rate=50.0)], start=0.0)
    rt.tick(0.0)
    # A submission for the boundary that has just passed starts on it (the cycle it
    # missed is stepped with it), counted as a late placement, not a late start.
    rt.submit([subtask("proc", rate=50.0, command=("p",))], start=0.0)
    rt.tick(Q)
    assert (rt.counters["late_placements"], rt.counters["late_starts"]) == (1, 0)
    assert rt.snapshot()["subtasks"][1]["start_time"] == 0.0
    cmds.items = [
        ReweightCommand("syn", 0, "n0", 1, 20.0, 30.0),
        ReweightCommand("nope", 0, "n0", 2, 1.0, 0.0),
        ReweightCommand("syn", 0, "other", 3, 1.0, 0.0),
    ]
    rt.tick(2 * Q)
    assert rt.scheduler.get(("syn", 0)).weight == 20.0  # type: ignore[union-attr]
    assert rt.scheduler.get(("syn", 0)).virtual_weight == 30.0  # type: ignore[union-attr]
    assert (rt.counters["commands_applied"], rt.counters["commands_unknown"],
            rt.counters["commands_other_node"]) == (1, 1, 1)
    assert rt.cancel_job("proc", timeout=1.0)
    assert made[0].closed
    sink.reports.clear()
    rt.tick(3 * Q)
    assert {r.job_id for r in sink.reports} == {"syn"}
    assert ended == []  # cancelled subtasks are not reported as ended
    states = {s["job_id"]: s["state"] for s in rt.snapshot()["subtasks"]}
    assert states == {"syn": "running", "proc": "cancelled"}


def test_submit_for_another_node_is_refused() -> None:
    rt, *_ = make(Node("n0", 300.0))
    with pytest.raises(ValueError, match="is for node 'n1'"):
        rt.submit([subtask("x", node="n1")], 0.0)


class RealTime:
    def now(self) -> float:
        return time.time()


def test_node_and_controller_loops_follow_the_model_time_grid() -> None:
    """The real loops on a fast time scale: a cycle of 10 model s is 10 ms real."""
    scale = 1000.0
    cfg = RuntimeConfig(runtime_core(cycle=Q), time_scale=scale)
    clock = ModelClock(RealTime(), TimeBase(time.time(), scale))
    arrived = threading.Condition()

    class ThreadedSink(Sink):
        def send(self, report: ProgressReport) -> bool:
            with arrived:
                self.reports.append(report)
                arrived.notify_all()
            return True

    sink = ThreadedSink()
    rt = NodeRuntime(Node("n0", 300.0), cfg, clock, sink, Commands(), lambda o: None)

    class Source:
        """Blocks like a socket: until a report arrives or ``timeout_s`` passes."""

        endpoint = "test://"

        def poll(self, timeout_s: float) -> list[ProgressReport]:
            with arrived:
                arrived.wait_for(lambda: bool(sink.reports), timeout=timeout_s)
                out, sink.reports[:] = list(sink.reports), []
            return out

        def counters(self) -> dict[str, Any]:
            return {"dropped": {}}

        def close(self) -> None:
            pass

    class Publisher:
        endpoint = "test://"

        def publish(self, command: ReweightCommand) -> bool:
            return True

        def poll_incoming(self) -> int:
            return 0

        def counters(self) -> dict[str, Any]:
            return {}

        def close(self) -> None:
            pass

    ctl = ControllerService(cfg, clock, {"n0": 157.5}, Source(), Publisher(), None)
    ctl.register_job(JobRegistration("j", QosClass.STRICT, 0.0, ((0, "n0", 50.0),), 100.0, 50.0))
    threads = [threading.Thread(target=rt.run), threading.Thread(target=ctl.run)]
    start = clock.now()
    rt.submit([Subtask("j", 0, "n0", QosClass.STRICT, 1e9, 2.0, 50.0, 50.0)], start + 20 * Q)
    for t in threads:
        t.start()
    try:
        # At least 20 cycles (10 ms real each) on both loops, and the subtask started.
        wait_until(lambda: rt.counters["cycles"] >= 20 and ctl.counters["periods"] >= 20
                   and ctl.counters["reports_applied"] >= 1
                   and rt.snapshot()["subtasks"][0]["state"] == "running",
                   timeout=30.0, message="20 cycles of both loops")
    finally:
        rt.stop()
        ctl.stop()
    for t in threads:
        t.join(timeout=5.0)
    assert not any(t.is_alive() for t in threads)
    snap = rt.snapshot()
    # Every boundary was stepped (late ones too): at least the 20 waited for.
    assert rt.counters["cycles"] >= 20
    assert snap["model_time"] % Q == pytest.approx(0.0, abs=1e-6)
    assert ctl.counters["periods"] >= 20
    assert ctl.period_time is not None and ctl.period_time % Q == pytest.approx(0.0, abs=1e-6)
    assert ctl.counters["reports_applied"] >= 1
    (sub,) = snap["subtasks"]
    assert sub["state"] == "running" and sub["start_time"] >= start + 20 * Q - 1e-6


def test_a_stalled_manager_resynchronises_instead_of_replaying_the_missed_cycles() -> None:
    # A synthetic strict subtask runs two cycles, then the manager is stalled for 20
    # cycles (SIGSTOP); meanwhile the controller raised its weight. After the stall it
    # must not book 20 cycles of work at the new weight: the missed span does no work,
    # its virtual clock stays (it falls behind by the stall), and the next cycle is
    # stepped at the controller's current weights.
    node = Node("n0", 400.0)
    rt, sink, cmds, _ = make(node)
    rt.submit([subtask("j1", rate=100.0, work=1e7)], start=0.0)
    rt.tick(0.0)
    rt.tick(Q)
    rt.tick(2 * Q)
    done_before = rt.scheduler.get(("j1", 0)).done_work  # type: ignore[union-attr]
    tv_before = sink.reports[-1].virtual_time
    per_cycle = sink.reports[-1].granted_work
    cmds.items.append(ReweightCommand("j1", 0, "n0", 1, 300.0, 0.0))
    rt.resync(22 * Q, missed=20)
    assert rt.counters["stalls"] == 1 and rt.counters["skipped_cycles"] == 20
    assert rt.scheduler.get(("j1", 0)).done_work == done_before  # type: ignore[union-attr]
    rt.tick(23 * Q)
    rep = sink.reports[-1]
    assert rep.real_time == 23 * Q
    # one cycle's work, not 21 (the node is idle: one core, whatever the weight)
    assert rep.granted_work == pytest.approx(per_cycle)
    # the clock moved by one cycle's progress only: it is 20 cycles behind where it was
    assert rep.virtual_time == pytest.approx(tv_before + Q * per_cycle / rep.expected_work)
    assert tv_before > 2 * Q and rep.virtual_time < rep.real_time  # ahead before, behind now
    assert rt.scheduler.get(("j1", 0)).weight == 300.0  # type: ignore[union-attr]


def test_a_placement_that_arrives_after_its_boundary_still_starts_on_it() -> None:
    """Two nodes get a member of the same gang for boundary 0; one placement arrives
    after that boundary was stepped, before the next. Both members report the same
    clock for the first cycle, as in the simulator: the late one is not a cycle behind."""
    on_time, sink_a, _, _ = make(Node("n0", 300.0))
    late, sink_b, _, _ = make(Node("n1", 300.0))
    on_time.submit([subtask("g", "n0", rate=100.0)], start=0.0)
    on_time.tick(0.0)
    late.tick(0.0)
    late.submit([subtask("g", "n1", rate=100.0)], start=0.0)
    on_time.tick(Q)
    late.tick(Q)
    (a,), (b,) = sink_a.reports, sink_b.reports
    assert (b.real_time, b.virtual_time, b.granted_work) == (
        a.real_time, a.virtual_time, a.granted_work)
    assert (late.counters["late_placements"], late.counters["late_starts"]) == (1, 0)


def test_a_placement_more_than_a_cycle_late_starts_at_the_last_boundary() -> None:
    rt, sink, _, _ = make(Node("n0", 300.0))
    rt.tick(0.0)
    rt.tick(Q)
    rt.submit([subtask("g", rate=100.0)], start=0.0)
    rt.tick(2 * Q)
    (rep,) = sink.reports
    assert rep.real_time == 2 * Q
    assert rt.snapshot()["subtasks"][0]["start_time"] == Q
    assert (rt.counters["late_placements"], rt.counters["late_starts"]) == (0, 1)
