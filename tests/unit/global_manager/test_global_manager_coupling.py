"""Coupled members in the simulator: the exchanges of one job (properties: no member
passes an exchange before its partners, waiting is never progress), and whole runs
(spinning CPU is counted, never booked as work; blocking leaves nothing spun; the same
seed gives the same bytes; an uncoupled workload keeps its lean path)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from global_manager.config import SimConfig
from global_manager.coupling import CoupledJob, Member
from global_manager.simulator import simulate
from workloads.generator import PaperWorkloadParams, generate
from workloads.model import JobSpec, Node, QosClass, SubtaskSpec, WaitMode, Workload

_REACHED = 1e-6  # s of nominal time: float slack of "has reached"


@st.composite
def coupled_jobs(draw: st.DrawFn) -> tuple[CoupledJob, list[list[float]], float]:
    n = draw(st.integers(2, 4))
    delta = draw(st.floats(5.0, 200.0))
    members = [
        Member("j", i, f"n{i}", draw(st.floats(1.0, 5000.0)), draw(st.floats(0.5, 50.0)))
        for i in range(n)
    ]
    cycle = draw(st.floats(1.0, 60.0))
    grants = draw(st.lists(
        st.lists(st.floats(0.0, 2000.0), min_size=n, max_size=n), min_size=1, max_size=30))
    wait = draw(st.sampled_from(list(WaitMode)))
    return CoupledJob(members, delta, wait), grants, cycle


@settings(max_examples=200, deadline=None)
@given(coupled_jobs())
def test_no_member_passes_an_exchange_before_its_partners(
    case: tuple[CoupledJob, list[list[float]], float],
) -> None:
    job, cycles, cycle = case
    ends = [m.duration for m in job.members]
    for grants in cycles:
        before = list(job.done)
        useful = job.advance(grants, cycle)
        tau = job.nominal()
        for i, (w, g) in enumerate(zip(useful, grants)):
            # Waiting is never progress: the work booked is at most the grant, and it is
            # exactly the move of the member's nominal time.
            assert 0.0 <= w <= g
            assert job.done[i] == pytest.approx(min(before[i] + w, job.members[i].work),
                                                rel=1e-12, abs=1e-6)
        # No member is past an exchange that a partner taking part in it has not reached.
        for i, t in enumerate(tau):
            k = math.floor((t - _REACHED) / job.delta)  # exchanges member i has passed
            for m in range(1, k + 1):
                point = m * job.delta
                for j, end in enumerate(ends):
                    if end > point + _REACHED:
                        assert tau[j] >= point - _REACHED * max(1.0, point), (i, j, m)


def test_a_fast_member_waits_and_its_grant_is_spun() -> None:
    # Two members with x = 1 Mcycle/s: the fast one could do 100 s of nominal time in a
    # cycle of 10 s, its partner 10 s; with an exchange every 20 s the fast one stops at
    # 20 s until its partner gets there.
    job = CoupledJob([Member("j", 0, "a", 1000.0, 1.0), Member("j", 1, "b", 1000.0, 1.0)],
                     20.0, WaitMode.SPIN)
    assert job.advance([100.0, 10.0], 10.0) == [20.0, 10.0]
    assert job.advance([100.0, 10.0], 10.0) == [0.0, 10.0]  # spins the whole cycle
    # The partner reaches 20 s half-way through the next cycle: from then the fast one
    # runs on to the next exchange at 40 s, where it waits again.
    w = job.advance([100.0, 20.0], 10.0)
    assert w[1] == pytest.approx(20.0)
    assert w[0] == pytest.approx(20.0)
    assert job.nominal() == pytest.approx([40.0, 40.0])


def test_members_run_free_after_their_last_exchange() -> None:
    job = CoupledJob([Member("j", 0, "a", 30.0, 1.0), Member("j", 1, "b", 100.0, 1.0)],
                     20.0, WaitMode.SPIN)
    job.advance([30.0, 30.0], 30.0)
    assert job.nominal() == pytest.approx([30.0, 30.0])
    # Member 0 is done; member 1 no longer waits for it.
    assert job.advance([0.0, 70.0], 30.0) == pytest.approx([0.0, 70.0])
    assert job.finished()


def test_bad_coupling_is_refused() -> None:
    with pytest.raises(ValueError, match="coupling"):
        CoupledJob([Member("j", 0, "a", 1.0, 1.0)], 0.0, WaitMode.SPIN)
    with pytest.raises(ValueError, match="coupling"):
        JobSpec("x", QosClass.STRICT, (SubtaskSpec(1.0),), coupling=math.nan)


def _two_node_workload(wait: WaitMode) -> Workload:
    """One strict job of two coupled members, one on a fast idle node and one on a slow
    node, and best-effort work that wants the CPU."""
    nodes = (Node("fast", 400.0), Node("slow", 100.0))
    job = JobSpec("coupled", QosClass.STRICT,
                  (SubtaskSpec(work=40_000.0, weight=1.0), SubtaskSpec(work=40_000.0, weight=1.0)),
                  overall_deviation=300.0, asynchrony=300.0, arrival=0.0, job_id="j1",
                  coupling=60.0, wait=wait)
    return Workload(nodes, (job,))


@pytest.mark.parametrize("wait", list(WaitMode))
def test_a_coupled_run_counts_what_it_spins_and_finishes(wait: WaitMode) -> None:
    cfg = SimConfig(cycle=10.0, rate_per_weight=20.0)
    r = simulate(_two_node_workload(wait), "strict", seed=1, config=cfg)
    assert r.coupling is not None
    (job,) = r.jobs
    assert job.completed
    # The members end together (at most a cycle apart): the fast one was held back.
    assert job.completion_skew is not None and job.completion_skew <= cfg.cycle
    if wait is WaitMode.SPIN:
        assert r.coupling.spin_cpu > 0
        # Work done is exactly the work: what was spun is on top of it, in the utilisation.
        used = sum(r.utilization[n] * rate * r.end_time
                   for n, rate in (("fast", 400.0), ("slow", 100.0)))
        assert used == pytest.approx(80_000.0 + r.coupling.spin_cpu, rel=1e-9)
    else:
        assert r.coupling.spin_cpu == 0.0


def test_a_run_without_coupled_jobs_reports_no_coupling() -> None:
    w = generate(PaperWorkloadParams(nodes=3, jobs=20, mean_interarrival=100.0), seed=4)
    r = simulate(w, "sq", seed=4)
    assert r.coupling is None
    assert '"coupling"' not in r.to_json()


@pytest.mark.parametrize("wait", ["spin", "block"])
def test_the_same_seed_gives_the_same_bytes(wait: str) -> None:
    p = PaperWorkloadParams(nodes=4, jobs=25, mean_interarrival=60.0, rate_per_weight=12.5,
                            coupling=60.0, wait=wait)
    cfg = SimConfig(rate_per_weight=12.5, queue="wait")
    runs = [simulate(generate(p, seed=9), "sq", seed=9, config=cfg).to_json()
            for _ in range(2)]
    assert runs[0] == runs[1]
    assert '"coupling"' in runs[0]


def _node_with_work() -> list:
    from local_manager.scheduler import LocalScheduler
    from workloads.model import Subtask

    twins = []
    for _ in range(2):
        sched = LocalScheduler(Node("n", 300.0))
        sched.add(Subtask("a", 0, "n", QosClass.STRICT, 1e6, 1.0, 50.0, 50.0), 0.0)
        sched.add(Subtask("b", 0, "n", QosClass.STRICT, 1e6, 1.0, 50.0, 50.0), 0.0)
        sched.add(Subtask("c", 0, "n", QosClass.BEST_EFFORT, 1e6, 1.0, 25.0, 25.0), 0.0)
        twins.append(sched)
    return twins


def test_plan_then_commit_is_a_step() -> None:
    one, two = _node_with_work()
    for k in range(1, 4):
        assert one.step(10.0 * k, 10.0) == two.commit(10.0 * k, 10.0, two.plan(10.0 * k, 10.0))


def test_a_limited_demand_hands_its_share_to_the_others() -> None:
    free, limited = _node_with_work()
    before = free.plan(10.0, 10.0).granted
    limited.limit_demand({("a", 0): 100.0})
    after = limited.plan(10.0, 10.0).granted
    limited.limit_demand(None)
    assert after[("a", 0)] == pytest.approx(100.0)
    assert after[("b", 0)] + after[("c", 0)] > before[("b", 0)] + before[("c", 0)]
    assert limited.plan(10.0, 10.0).granted == before  # lifted again
