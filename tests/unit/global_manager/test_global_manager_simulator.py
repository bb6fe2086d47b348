"""The deterministic simulator: hand-timed small runs, determinism (same seed, same bytes;
another seed differs), fast forward equal to stepping, and the run's bookkeeping."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from coallocator.phase_log import read_log, summarize
from global_manager.policies import get_policy
from global_manager.simulator import RunResult, SimConfig, simulate
from workloads.generator import PaperWorkloadParams, generate
from workloads.model import JobSpec, Node, QosClass, SubtaskSpec, Workload


def strict_job(
    job_id: str, arrival: float, *works: float, weight: float = 2.0, e_t: float = 100.0
) -> JobSpec:
    return JobSpec(
        name=job_id,
        qos=QosClass.STRICT,
        subtasks=tuple(SubtaskSpec(work=w, weight=weight) for w in works),
        overall_deviation=e_t,
        asynchrony=e_t,
        arrival=arrival,
        job_id=job_id,
    )


#: A 10 s scheduling cycle for the hand-timed runs.
TEN = SimConfig(cycle=10.0)


def small_workload(seed: int, nodes: int = 3, jobs: int = 30) -> Workload:
    w = generate(
        PaperWorkloadParams(
            nodes=nodes, mean_interarrival=200.0, jobs=jobs, subtask_time_range=(50.0, 150.0)
        ),
        seed=seed,
    )
    return Workload(w.nodes, w.jobs)


# ------------------------------------------------------------------- hand-timed


def test_one_subtask_alone_runs_at_full_speed_when_work_conserving() -> None:
    # 1000 MHz, cycle 10 s: the QoS queue alone gets the whole 10,000 Mcycles.
    w = Workload((Node("a", 1000.0),), (strict_job("j1", 0.0, 10_000.0),))
    r = simulate(w, "strict", seed=0, config=TEN)
    (j,) = r.jobs
    assert (j.admitted, j.completed, j.turnaround, j.nodes) == (True, True, 10.0, ("a",))
    assert (r.end_time, r.cycles) == (10.0, 1)
    assert r.utilization == {"a": 1.0}


def test_a_subnormal_arrival_is_reached() -> None:
    # 5e-324 s / 10 s underflows to 0: the jump must still reach the boundary after it,
    # not set the clock to 0 again and again.
    w = Workload((Node("a", 1000.0),), (strict_job("j1", 5e-324, 10_000.0),))
    r = simulate(w, "strict", seed=0, config=TEN)
    assert r.jobs[0].admitted and r.jobs[0].completed
    assert (r.end_time, r.cycles) == (20.0, 1)  # admitted at 10 s, done at 20 s


def test_non_work_conserving_queue_gets_only_its_share() -> None:
    w = Workload((Node("a", 1000.0),), (strict_job("j1", 0.0, 10_000.0),))
    r = simulate(w, "strict", seed=0, config=replace(TEN, work_conserving=False))
    assert r.jobs[0].turnaround == 20.0  # 500 Mcycles/s
    assert r.utilization["a"] == pytest.approx(0.5)


def test_idle_grid_jumps_to_the_cycle_boundary_after_the_next_arrival() -> None:
    w = Workload((Node("a", 1000.0),), (strict_job("j1", 35.0, 10_000.0),))
    r = simulate(w, "strict", seed=0, config=TEN)
    # Admitted at 40 s (boundary at or after 35), done at 50 s.
    assert r.jobs[0].turnaround == pytest.approx(15.0)
    assert (r.end_time, r.cycles) == (50.0, 1)
    assert r.utilization["a"] == pytest.approx(10_000.0 / (1000.0 * 50.0))


def test_subtasks_in_step_have_zero_phase_difference_and_skew() -> None:
    nodes = (Node("a", 500.0), Node("b", 500.0))
    w = Workload(nodes, (strict_job("j1", 0.0, 20_000.0, 20_000.0),))
    for policy in ("strict", "sq"):
        r = simulate(w, policy, seed=0)
        (j,) = r.jobs
        assert j.completed and sorted(j.nodes) == ["a", "b"]
        assert (j.mean_phase_difference, j.max_phase_difference, j.completion_skew) == (
            0.0,
            0.0,
            0.0,
        )
        assert r.strict_completed() == [j]


def test_rejected_jobs_are_reported_with_their_reason() -> None:
    nodes = (Node("a", 400.0), Node("b", 400.0))
    jobs = (
        strict_job("j1", 0.0, 1e6, weight=8.0),  # 200 Mcycles/s: a's whole strict budget
        strict_job("j2", 0.0, 1e6, 1e6, weight=8.0),  # needs both nodes, only b has room
        strict_job("j3", 0.0, 1e3, 1e3, 1e3),  # 3 subtasks, 2 nodes
    )
    r = simulate(Workload(nodes, jobs), "strict", seed=0, config=SimConfig(max_time=100.0))
    by_id = {j.job_id: j for j in r.jobs}
    assert by_id["j1"].admitted
    assert not by_id["j2"].admitted
    assert by_id["j2"].reason == "no free node can take subtask 1 (expected rate 200 Mcycles/s)"
    assert (by_id["j3"].admitted, by_id["j3"].reason) == (False, "3 subtasks but only 2 nodes")
    assert by_id["j2"].nodes == () and by_id["j2"].turnaround is None


def test_max_time_stops_the_run_with_jobs_unfinished() -> None:
    w = Workload((Node("a", 100.0),), (strict_job("j1", 0.0, 1e9),))
    r = simulate(w, "sq", seed=0, config=replace(TEN, max_time=200.0))
    assert r.end_time == 200.0
    assert not r.jobs[0].completed and r.jobs[0].turnaround is None
    assert r.strict_completed() == []


def test_progress_is_reported_up_to_one() -> None:
    seen: list[float] = []
    simulate(small_workload(1), "sq", seed=1, progress=seen.append)
    assert seen[-1] == 1.0
    assert seen == sorted(seen) and all(0.0 <= f <= 1.0 for f in seen)


def test_sim_config_validation() -> None:
    with pytest.raises(ValueError, match="cycle"):
        SimConfig(cycle=0.0)
    with pytest.raises(ValueError, match="control_every"):
        SimConfig(control_every=0)


# ------------------------------------------------------------------ determinism


def test_same_seed_gives_byte_identical_results_and_logs(tmp_path: Path) -> None:
    work = small_workload(7)
    runs = []
    for k in (1, 2):
        log = tmp_path / f"run{k}" / "phase.jsonl"
        r = simulate(work, "sq", seed=7, log_path=log, keep_records=True)
        runs.append((r, log.read_bytes()))
    (a, log_a), (b, log_b) = runs
    assert a.to_json() == b.to_json()
    assert log_a == log_b and len(log_a) > 0
    assert a.records == b.records
    # The log holds what the result says: one summary per tracked QoS job.
    rows, run = summarize(read_log(tmp_path / "run1" / "phase.jsonl"))
    assert run.completed == len(a.strict_completed(min_subtasks=2))
    json.loads(a.to_json())  # valid JSON


def test_another_seed_gives_another_run(tmp_path: Path) -> None:
    a = simulate(small_workload(7), "sq", seed=7, log_path=tmp_path / "a.jsonl")
    b = simulate(small_workload(8), "sq", seed=8, log_path=tmp_path / "b.jsonl")
    assert a.to_json() != b.to_json()
    assert [j.arrival for j in a.jobs] != [j.arrival for j in b.jobs]
    assert (tmp_path / "a.jsonl").read_bytes() != (tmp_path / "b.jsonl").read_bytes()


def test_seed_drives_random_placement_on_the_same_workload() -> None:
    work = small_workload(7, nodes=4)
    policy = get_policy("sq", placement="random")
    a1 = simulate(work, policy, seed=1)
    a2 = simulate(work, policy, seed=1)
    b = simulate(work, policy, seed=2)
    assert a1.to_json() == a2.to_json()
    assert [j.nodes for j in a1.jobs] != [j.nodes for j in b.jobs]


def test_fast_forward_makes_the_same_decisions_as_stepping_every_cycle() -> None:
    work = small_workload(3, nodes=4, jobs=25)
    for policy in ("strict", "sq", "sq_paper", "sq_work_conserving", "sq_let_ahead"):
        fast = simulate(work, policy, seed=3, config=SimConfig(fast_forward=True))
        slow = simulate(work, policy, seed=3, config=SimConfig(fast_forward=False))
        assert (fast.end_time, fast.cycles) == (slow.end_time, slow.cycles)
        for f, s in zip(fast.jobs, slow.jobs, strict=True):
            assert replace(f, mean_phase_difference=None, max_phase_difference=None) == replace(
                s, mean_phase_difference=None, max_phase_difference=None
            )
            if f.mean_phase_difference is not None:
                assert f.mean_phase_difference == pytest.approx(s.mean_phase_difference, rel=1e-6)
                assert f.max_phase_difference == pytest.approx(s.max_phase_difference, rel=1e-6)
        assert fast.utilization == pytest.approx(slow.utilization, rel=1e-9)
        # Exactly, in fact: fast forward sums every clock as stepping does.
        assert fast.to_json() == slow.to_json()


def test_run_result_json_leaves_out_the_records() -> None:
    r = simulate(small_workload(1, jobs=5), "sq", seed=1, keep_records=True)
    assert isinstance(r, RunResult) and r.records
    d = json.loads(r.to_json())
    assert "records" not in d
    assert d["policy"] == "sq" and d["seed"] == 1
    assert len(d["jobs"]) == len(r.jobs)


@pytest.mark.parametrize("control_every", [1, 3])
def test_fast_forward_writes_the_same_log_records_up_to_rounding(
    tmp_path: Path, control_every: int
) -> None:
    work = small_workload(3, nodes=4, jobs=25)
    logs = []
    for ff in (True, False):
        path = tmp_path / f"ff{ff}.jsonl"
        cfg = SimConfig(control_every=control_every, fast_forward=ff)
        simulate(work, "sq", seed=3, config=cfg, log_path=path)
        logs.append(list(read_log(path)))
    fast, slow = logs
    assert len(fast) == len(slow) > 0

    def shape(r: dict) -> tuple:
        return (r["type"], r["job"], r.get("period"), r.get("window"), sorted(r.get("weights", {})))

    assert [shape(r) for r in fast] == [shape(r) for r in slow]
    for f, s in zip(fast, slow):
        for key in ("phase_difference", "mean_virtual", "mean_phase_difference"):
            if key in f:
                assert f[key] == pytest.approx(s[key], rel=1e-6, abs=1e-6)
        for w in f.get("weights", {}):
            assert f["weights"][w] == pytest.approx(s["weights"][w], rel=1e-6)
