"""The paper's claim on a small matrix, through the whole simulated core: SQ keeps the
subtasks of strict jobs closer in phase than strict admission control, and (with 5 %
overbooking) admits at least as many jobs.

Matrix: 3 and 6 nodes, lambda = 500 s (light load), 150 QoS jobs (all strict) with
the paper's windows, weights and node speeds, plus the generator's local and
best-effort flows; subtasks of 50-150 reference seconds so a run takes about a second.
"""

from __future__ import annotations

import pytest

from global_manager.simulator import RunResult, simulate
from workloads.generator import PaperWorkloadParams, generate
from workloads.model import Workload

pytestmark = pytest.mark.integration

MATRIX = [(3, 500.0), (6, 500.0)]
SEED = 1


def _run(nodes: int, lam: float, policy: str) -> RunResult:
    w = generate(
        PaperWorkloadParams(
            nodes=nodes, mean_interarrival=lam, jobs=150, subtask_time_range=(50.0, 150.0)
        ),
        seed=SEED,
    )
    return simulate(Workload(w.nodes, w.jobs), policy, seed=SEED)


def _mean_phase(r: RunResult) -> float:
    jobs = r.strict_completed(min_subtasks=2)
    assert len(jobs) >= 20, f"{r.policy}: only {len(jobs)} completed strict jobs"
    return sum(j.mean_phase_difference or 0.0 for j in jobs) / len(jobs)


def _admitted(r: RunResult) -> int:
    return sum(1 for j in r.jobs if j.qos == "strict" and j.admitted)


@pytest.fixture(scope="module")
def runs() -> dict[tuple[int, float, str], RunResult]:
    return {(n, lam, p): _run(n, lam, p) for n, lam in MATRIX for p in ("strict", "sq")}


@pytest.mark.parametrize(("nodes", "lam"), MATRIX)
def test_sq_has_a_lower_mean_phase_difference_than_strict(
    runs: dict[tuple[int, float, str], RunResult], nodes: int, lam: float
) -> None:
    sq, strict = runs[(nodes, lam, "sq")], runs[(nodes, lam, "strict")]
    assert _mean_phase(sq) < _mean_phase(strict)


@pytest.mark.xfail(
    strict=True,
    reason="SQ admits fewer strict jobs than strict admission here (3 nodes: 118 vs 140, "
    "6 nodes: 114 vs 139): synchronised subtasks hold their node's admission budget until "
    "the slowest sibling is done (mean turnaround of completed multi-subtask jobs 2397 s vs "
    "912 s at 3 nodes, 2524 s vs 780 s at 6), and 5 % overbooking does not make up for it; "
    "see docs/decisions.md (the sq_let_ahead ablation narrows the gap to 137 and 132)",
)
@pytest.mark.parametrize(("nodes", "lam"), MATRIX)
def test_sq_admits_at_least_as_many_jobs_as_strict(
    runs: dict[tuple[int, float, str], RunResult], nodes: int, lam: float
) -> None:
    sq, strict = runs[(nodes, lam, "sq")], runs[(nodes, lam, "strict")]
    assert _admitted(sq) >= _admitted(strict), (_admitted(sq), _admitted(strict))
