"""The generator's ``coupling`` and ``wait``: coupled QoS jobs of two or more members with
one span of nominal time, every other job and every draw unchanged, bad values refused."""

from __future__ import annotations

import dataclasses

import pytest

from workloads.generator import PaperWorkloadParams, generate
from workloads.model import QosClass, WaitMode


def test_defaults_leave_the_workload_unchanged() -> None:
    p = PaperWorkloadParams(nodes=4, jobs=30, mean_interarrival=50.0)
    w = generate(p, seed=2)
    assert all(j.coupling is None and j.wait is WaitMode.SPIN for j in w.jobs)


@pytest.mark.parametrize("wait", ["spin", "block", WaitMode.BLOCK])
def test_coupled_jobs_carry_coupling_and_wait(wait: str | WaitMode) -> None:
    base = PaperWorkloadParams(nodes=4, jobs=40, mean_interarrival=50.0, rate_per_weight=12.5)
    plain = generate(base, seed=5)
    coupled = generate(dataclasses.replace(base, coupling=45.0, wait=wait), seed=5)
    assert len(plain.jobs) == len(coupled.jobs)
    assert plain.nodes == coupled.nodes
    n_coupled = 0
    for a, b in zip(plain.jobs, coupled.jobs):
        grid = a.qos in (QosClass.STRICT, QosClass.LOOSE)
        if grid and len(a.subtasks) >= 2:
            n_coupled += 1
            assert b.coupling == 45.0 and b.wait is WaitMode(wait)
            # One span of nominal time: work per weight is the first member's.
            per = {round(s.work / s.weight, 6) for s in b.subtasks}
            assert per == {round(a.subtasks[0].work / a.subtasks[0].weight, 6)}
            assert [s.weight for s in a.subtasks] == [s.weight for s in b.subtasks]
            assert dataclasses.replace(b, subtasks=a.subtasks, coupling=None,
                                       wait=WaitMode.SPIN) == a
        else:
            assert b == a
    assert n_coupled > 0


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("coupling", 0.0, "coupling: must be a finite number > 0"),
    ("coupling", float("inf"), "coupling: must be a finite number > 0"),
    ("wait", "poll", "wait: must be one of spin, block"),
])
def test_bad_values_are_refused(field: str, value: object, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        PaperWorkloadParams(**{field: value})  # type: ignore[arg-type]
