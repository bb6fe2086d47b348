"""Pace at the gang's true speed, through the pure scheduling core
(local schedulers, controller and global manager under the simulator's manual clock):
a strict gang under ``sq`` on work-conserving nodes finishes within one cycle of the time
its slowest member takes uncoordinated (``strict``), whatever local and best-effort load
sits beside it, while staying in step."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from global_manager.config import SimConfig
from global_manager.policies import get_policy
from global_manager.simulator import RunResult, simulate
from workloads.model import JobSpec, Node, QosClass, SubtaskSpec, Workload

U = 12.5  # Mcycles/s per weight unit, the calibrated experiment's
CYCLE = 30.0


def _gang(weights: tuple[int, ...], seconds: float) -> JobSpec:
    subs = tuple(SubtaskSpec(work=seconds * w * U, weight=w) for w in weights)
    return JobSpec(name="g", qos=QosClass.STRICT, subtasks=subs, overall_deviation=300,
                   asynchrony=120, arrival=0.0, job_id="g")


def _background(job_id: str, qos: QosClass, node: str, work: float) -> JobSpec:
    return JobSpec(name=job_id, qos=qos, subtasks=(SubtaskSpec(work=work, weight=1),),
                   arrival=0.0, job_id=job_id, node=node)


def _run(policy: str, workload: Workload) -> RunResult:
    cfg = SimConfig(cycle=CYCLE, rate_per_weight=U, work_conserving=True, queue="wait",
                    max_time=200_000)
    return simulate(workload, get_policy(policy), seed=1, config=cfg, keep_records=True)


def _gang_result(r: RunResult):  # noqa: ANN202 - a JobResult
    (g,) = [j for j in r.jobs if j.job_id == "g"]
    assert g.completed, g
    return g


@settings(max_examples=25, deadline=None)
@given(
    speeds=st.lists(st.sampled_from([150.0, 300.0, 450.0, 600.0]), min_size=3, max_size=3),
    weights=st.lists(st.integers(1, 4), min_size=3, max_size=3),
    seconds=st.sampled_from([600.0, 1800.0]),
    local=st.lists(st.sampled_from([0.0, 1e5, 3e5]), min_size=3, max_size=3),
    best_effort=st.lists(st.sampled_from([0.0, 1e5, 3e5]), min_size=3, max_size=3),
)
def test_a_gang_in_step_finishes_within_one_cycle_of_strict(
    speeds: list[float], weights: list[int], seconds: float, local: list[float],
    best_effort: list[float],
) -> None:
    nodes = tuple(Node(f"n{k}", s) for k, s in enumerate(speeds))
    jobs: list[JobSpec] = [_gang(tuple(weights), seconds)]
    for k in range(3):
        if local[k]:
            jobs.append(_background(f"l{k}", QosClass.LOCAL, f"n{k}", local[k]))
        if best_effort[k]:
            jobs.append(_background(f"b{k}", QosClass.BEST_EFFORT, f"n{k}", best_effort[k]))
    workload = Workload(nodes, tuple(jobs))
    sq, strict = _gang_result(_run("sq", workload)), _gang_result(_run("strict", workload))
    assert sq.turnaround is not None and strict.turnaround is not None
    assert sq.turnaround <= strict.turnaround + CYCLE, (sq.turnaround, strict.turnaround)
    # ... and in step: the phase difference stays a small part of one cycle's progress.
    assert sq.max_phase_difference is not None and sq.max_phase_difference <= 60.0


def test_an_idle_grid_loses_no_cycle_to_the_first_period() -> None:
    # 3 nodes of 300/450/600 MHz, weights 1/2/1: strict takes 90 s; sq capped at the
    # expected rate for its first period would take 120 s.
    nodes = (Node("n0", 300.0), Node("n1", 450.0), Node("n2", 600.0))
    workload = Workload(nodes, (_gang((1, 2, 1), 1800.0),))
    sq, strict = _gang_result(_run("sq", workload)), _gang_result(_run("strict", workload))
    assert sq.turnaround == strict.turnaround
