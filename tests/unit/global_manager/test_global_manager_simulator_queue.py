"""The simulator with queue=wait: jobs that do not fit wait and run later, expire after
max_wait, and every job ends in a state; deterministic; queue=reject unchanged."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from global_manager.policies import get_policy
from global_manager.simulator import SimConfig, simulate
from workloads.generator import PaperWorkloadParams, generate
from workloads.model import JobSpec, Node, QosClass, SubtaskSpec, Workload

WAIT = SimConfig(cycle=10.0, queue="wait")  # type: ignore[arg-type]


def job(job_id: str, arrival: float, weight: float, work: float, **kw: object) -> JobSpec:
    return JobSpec(
        name=job_id, qos=QosClass.STRICT,
        subtasks=(SubtaskSpec(work=work, weight=weight),),
        overall_deviation=100.0, asynchrony=100.0, arrival=arrival, job_id=job_id,
        **kw,  # type: ignore[arg-type]
    )


# One node of 200 MHz: QoS budget 100 Mcycles/s (105 under sq's overbooking); weight 4
# at u_t = 25 is 100 Mcycles/s, so two such jobs never run together.
ONE = (Node("n0", 200.0),)


def test_second_job_waits_for_the_first_then_runs() -> None:
    w = Workload(ONE, (job("a", 0.0, 4.0, 10_000.0), job("b", 5.0, 4.0, 10_000.0)))
    r = simulate(w, "strict", config=WAIT)
    a, b = r.jobs
    assert (a.state, b.state) == ("completed", "completed")
    assert a.wait == 0.0
    # b arrives at 5 s, is submitted at the 10 s boundary and placed when a finishes.
    assert a.turnaround is not None and b.wait is not None
    assert b.wait == pytest.approx(a.turnaround + a.arrival - b.arrival, abs=10.0)
    assert b.wait > 30.0
    assert r.placement_cycles >= 1
    # The same run with queue=reject rejects b.
    rr = simulate(w, "strict", config=replace(WAIT, queue="reject"))
    assert [j.state for j in rr.jobs] == ["completed", "rejected"]
    assert rr.jobs[1].wait is None and rr.placement_cycles == 0


def test_a_waiting_job_gets_its_first_start_estimate() -> None:
    # a: 100 Mcycles/s, 10000 Mcycles -> expected to run 100 s from its start at 0.
    # b arrives at 5, pending at the 10 s boundary: estimated to start at 0 + 100 = 100.
    # (sq admitting on its share: on measured capacity, b would run beside a at once.)
    w = Workload(ONE, (job("a", 0.0, 4.0, 10_000.0), job("b", 5.0, 4.0, 10_000.0)))
    r = simulate(w, get_policy("sq", admission="overbooking"), config=WAIT)
    a, b = r.jobs
    assert a.estimated_start is None  # placed in its arrival's cycle: never waited
    assert b.estimated_start == pytest.approx(100.0)
    # Alone on a work-conserving node a gets the node's whole 200 Mcycles/s and ends at
    # 50: the estimate (from expected rates) was late by what it ran ahead.
    assert b.wait is not None and b.arrival + b.wait == pytest.approx(50.0)


def test_max_wait_expires_a_job_and_the_run_ends() -> None:
    w = Workload(
        ONE,
        (job("a", 0.0, 4.0, 100_000.0), job("b", 5.0, 4.0, 1000.0, max_wait=60.0, user="bob")),
    )
    r = simulate(w, "strict", config=WAIT)
    a, b = r.jobs
    assert (a.state, b.state, b.user) == ("completed", "expired", "bob")
    assert b.reason.startswith("expired: pending 60 s, max_wait 60 s")
    assert not b.admitted and b.wait is None


def test_expiry_while_the_grid_is_idle_of_strict_work() -> None:
    # A job larger than what is left, nothing else running long: it expires on time.
    w = Workload(
        (Node("n0", 200.0), Node("n1", 200.0)),
        (job("a", 0.0, 4.0, 400_000.0), job("b", 0.0, 4.0, 400_000.0),
         JobSpec("c", QosClass.STRICT, (SubtaskSpec(10.0, 1.0), SubtaskSpec(10.0, 1.0)),
                 overall_deviation=100.0, asynchrony=100.0, arrival=1.0, job_id="c",
                 max_wait=30.0)),
    )
    r = simulate(w, "strict", config=WAIT)
    assert [j.state for j in r.jobs] == ["completed", "completed", "expired"]


def small(seed: int, users: int = 3) -> Workload:
    w = generate(
        PaperWorkloadParams(nodes=4, mean_interarrival=20.0, jobs=40,
                            subtask_time_range=(50.0, 150.0)),
        seed=seed,
    )
    jobs = tuple(replace(j, user=f"u{i % users}") if j.qos is QosClass.STRICT else j
                 for i, j in enumerate(w.jobs))
    return Workload(w.nodes, jobs)


@pytest.mark.parametrize("placement", ["least_loaded", "random", "flow", "backfill"])
def test_end_to_end_every_job_ends_and_runs_are_deterministic(placement: str) -> None:
    w = small(3)
    pol = get_policy("sq", placement=placement)
    r1 = simulate(w, pol, seed=7, config=SimConfig(queue="wait"))  # type: ignore[arg-type]
    r2 = simulate(w, pol, seed=7, config=SimConfig(queue="wait"))  # type: ignore[arg-type]
    assert r1.to_json() == r2.to_json()
    strict = [j for j in r1.jobs if j.qos == "strict"]
    assert {j.state for j in r1.jobs} <= {"completed", "expired"}
    assert all(j.state == "completed" for j in strict)  # no max_wait: all run in the end
    assert any(j.wait and j.wait > 30.0 for j in strict)  # some waited (overload)
    assert all(j.wait is not None and j.wait >= 0 for j in strict)
    assert {j.user for j in strict} == {"u0", "u1", "u2"}
    rr = simulate(w, pol, seed=7, config=SimConfig())
    assert sum(j.state == "rejected" for j in rr.jobs) > 0


def test_reject_mode_gives_the_same_bytes_as_before_the_queue() -> None:
    """queue=reject: results identical to a run where the fields added by the queue are
    dropped (the run does not depend on them)."""
    w = small(5)
    a = simulate(w, "sq", seed=1, config=SimConfig())
    assert a.placement_cycles == 0
    assert {j.state for j in a.jobs} <= {"completed", "rejected"}
    for j in a.jobs:
        assert (j.state == "rejected") == (not j.admitted)
        assert j.admitted == (j.wait is not None)


_job_st = st.tuples(
    st.integers(0, 600).map(lambda k: k / 2),  # arrival (see the note below)
    st.lists(st.sampled_from([1.0, 2.0, 4.0]), min_size=1, max_size=3),  # weights
    st.sampled_from([2000.0, 8000.0, 30000.0]),  # work per weight unit, Mcycles
    st.integers(0, 2),  # priority
    st.sampled_from([None, 50.0, 500.0]),  # max_wait
)


# Arrivals are half seconds: a subnormal arrival (5e-324 s) is its own case, tested in
# test_global_manager_simulator.py.
@settings(max_examples=25, deadline=None)
@given(jobs=st.lists(_job_st, min_size=1, max_size=8),
       placement=st.sampled_from(["least_loaded", "random", "flow", "backfill"]))
def test_every_job_ends_completed_or_expired(jobs: list, placement: str) -> None:
    nodes = (Node("a", 200.0), Node("b", 300.0), Node("c", 400.0))
    specs = tuple(
        JobSpec(
            name=f"j{k}", qos=QosClass.STRICT,
            subtasks=tuple(SubtaskSpec(work=w * per, weight=w) for w in ws),
            overall_deviation=100.0, asynchrony=100.0, arrival=arr, job_id=f"j{k}",
            priority=prio, max_wait=mw, user=f"u{k % 2}",
        )
        for k, (arr, ws, per, prio, mw) in enumerate(jobs)
    )
    w = Workload(nodes, specs)
    pol = get_policy("sq", placement=placement)
    r = simulate(w, pol, seed=3, config=WAIT)
    assert r.to_json() == simulate(w, pol, seed=3, config=WAIT).to_json()
    for j in r.jobs:
        assert j.state in ("completed", "expired"), (j.job_id, j.state, j.reason)
        if j.state == "completed":
            assert j.wait is not None and j.wait >= 0
        else:
            spec = next(s for s in specs if s.job_id == j.job_id)
            assert spec.max_wait is not None and j.wait is None
