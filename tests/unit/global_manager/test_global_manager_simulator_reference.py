"""The simulator's default (lean) mode against its reference mode
(``SimConfig.step_every_cycle``: every node and the controller through their public
per-cycle path, as the live runtime drives them): the same job results, utilisation and
phase-log records, to the bit, on random small workloads."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from global_manager.policies import get_policy, policies
from global_manager.simulator import RunResult, SimConfig, simulate
from workloads.generator import Calibration, PaperWorkloadParams, generate


def run_both(
    seed: int, nodes: int, jobs: int, lam: float, calibration: str, policy: str,
    config: dict[str, object],
) -> tuple[RunResult, RunResult]:
    workload = generate(
        PaperWorkloadParams(nodes=nodes, mean_interarrival=lam, jobs=jobs,
                            subtask_time_range=(60.0, 400.0),
                            calibration=Calibration(calibration)),
        seed=seed,
    )
    runs = [
        simulate(workload, get_policy(policy), seed=seed, keep_records=True,
                 config=SimConfig(step_every_cycle=ref, **config))  # type: ignore[arg-type]
        for ref in (False, True)
    ]
    return runs[0], runs[1]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    nodes=st.integers(1, 4),
    jobs=st.integers(1, 12),
    lam=st.sampled_from([5.0, 30.0, 120.0]),
    calibration=st.sampled_from(["expected", "literal"]),
    policy=st.sampled_from(sorted(policies.names())),
    cycle=st.sampled_from([10.0, 30.0]),
    control_every=st.integers(1, 3),
    work_conserving=st.booleans(),
    queue=st.sampled_from(["reject", "wait"]),
)
def test_random_small_workloads_give_the_same_results_as_stepping(
    seed: int, nodes: int, jobs: int, lam: float, calibration: str, policy: str,
    cycle: float, control_every: int, work_conserving: bool, queue: str,
) -> None:
    lean, ref = run_both(seed, nodes, jobs, lam, calibration, policy, {
        "cycle": cycle, "control_every": control_every, "work_conserving": work_conserving,
        "queue": queue, "rate_per_weight": 12.5,
    })
    assert ref.cycles > 0 or not ref.jobs
    assert lean.to_json() == ref.to_json()
    assert lean.records == ref.records


def test_the_reference_mode_is_not_the_lean_path() -> None:
    # The two modes must really take different paths, or the property above compares a
    # mode with itself: the reference builds a progress record per grid QoS subtask and
    # cycle, the lean mode none.
    from workloads import messages

    built = []
    real = messages.ProgressReport.__init__

    def counting(self: messages.ProgressReport, *a: object, **k: object) -> None:
        built.append(1)
        real(self, *a, **k)  # type: ignore[arg-type]

    messages.ProgressReport.__init__ = counting  # type: ignore[method-assign]
    try:
        counts = []
        for ref in (False, True):
            built.clear()
            workload = generate(PaperWorkloadParams(nodes=2, mean_interarrival=50.0, jobs=4,
                                                    subtask_time_range=(60.0, 200.0)), seed=1)
            simulate(workload, "sq", seed=1, config=SimConfig(step_every_cycle=ref))
            counts.append(len(built))
    finally:
        messages.ProgressReport.__init__ = real  # type: ignore[method-assign]
    assert counts[0] == 0 < counts[1]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    nodes=st.integers(1, 4),
    jobs=st.integers(1, 14),
    lam=st.sampled_from([5.0, 30.0, 120.0]),
    calibration=st.sampled_from(["expected", "literal"]),
    policy=st.sampled_from(sorted(policies.names())),
    control_every=st.integers(1, 2),
    queue=st.sampled_from(["reject", "wait"]),
)
def test_the_near_end_replay_gives_the_results_of_fresh_splits(
    seed: int, nodes: int, jobs: int, lam: float, calibration: str, policy: str,
    control_every: int, queue: str,
) -> None:
    # Queues that are not work-conserving (the paper's): where the replay applies.
    workload = generate(
        PaperWorkloadParams(nodes=nodes, mean_interarrival=lam, jobs=jobs,
                            subtask_time_range=(60.0, 400.0),
                            calibration=Calibration(calibration)),
        seed=seed,
    )
    on, off = (
        simulate(workload, get_policy(policy), seed=seed, keep_records=True,
                 config=SimConfig(replay_near_end=replay, work_conserving=False,
                                  control_every=control_every, queue=queue,  # type: ignore[arg-type]
                                  rate_per_weight=12.5))
        for replay in (True, False)
    )
    assert off.cycles > 0 or not off.jobs
    assert on.to_json() == off.to_json()
    assert on.records == off.records
