"""The product's claim on a small calibrated matrix, through the whole simulated core:
``sq`` (pace control) keeps the subtasks of strict jobs closer in phase than both strict
admission control and the paper's scheme (``sq_paper``), while admitting at least as
many jobs as strict admission and using the nodes at least as well.

Matrix: 3 and 6 nodes, lambda = 100 s (loaded) and 500 s (light), 120 QoS jobs (all
strict) of the calibrated paper workload (subtask times 1500-2500 s at the expected rate,
12.5 Mcycles/s per weight unit, as ``coalloc experiment paper``), plus the generator's
local and best-effort flows; queues not work-conserving (the paper's mode).
"""

from __future__ import annotations

import pytest

from coalloc.experiments.paper import DEFAULT_RATE_PER_WEIGHT
from global_manager.simulator import RunResult, SimConfig, simulate
from workloads.generator import PaperWorkloadParams, generate

pytestmark = pytest.mark.integration

MATRIX = [(3, 100.0), (3, 500.0), (6, 100.0), (6, 500.0)]
POLICIES = ("sq", "sq_paper", "strict")
SEED = 1


def _run(nodes: int, lam: float, policy: str) -> RunResult:
    w = generate(
        PaperWorkloadParams(
            nodes=nodes, mean_interarrival=lam, jobs=120, rate_per_weight=DEFAULT_RATE_PER_WEIGHT
        ),
        seed=SEED,
    )
    config = SimConfig(work_conserving=False, rate_per_weight=DEFAULT_RATE_PER_WEIGHT)
    return simulate(w, policy, seed=SEED, config=config)


def _mean_phase(r: RunResult) -> float:
    jobs = r.strict_completed(min_subtasks=2)
    assert len(jobs) >= 10, f"{r.policy}: only {len(jobs)} completed strict jobs"
    return sum(j.mean_phase_difference or 0.0 for j in jobs) / len(jobs)


def _admitted(r: RunResult) -> int:
    return sum(1 for j in r.jobs if j.qos == "strict" and j.admitted)


def _utilization(r: RunResult) -> float:
    return sum(r.utilization.values()) / len(r.utilization)


@pytest.fixture(scope="module")
def runs() -> dict[tuple[int, float, str], RunResult]:
    return {(n, lam, p): _run(n, lam, p) for n, lam in MATRIX for p in POLICIES}


def _known_gap(nodes: int, lam: float, reason: str) -> object:
    """A cell where the claim does not hold yet: xfail(strict) with the measured figures,
    so the test fails loudly once it holds (docs/decisions.md, "Admission by
    measured QoS capacity")."""
    return pytest.param(nodes, lam, marks=pytest.mark.xfail(strict=True, reason=reason))


@pytest.mark.parametrize(("nodes", "lam"), MATRIX)
def test_sq_keeps_subtasks_closer_in_phase_than_the_paper(
    runs: dict[tuple[int, float, str], RunResult], nodes: int, lam: float
) -> None:
    sq, paper = runs[(nodes, lam, "sq")], runs[(nodes, lam, "sq_paper")]
    assert _mean_phase(sq) <= 0.5 * _mean_phase(paper)


@pytest.mark.parametrize(
    ("nodes", "lam"),
    [
        (3, 100.0),
        (3, 500.0),
        (6, 100.0),
        (6, 500.0),
    ],
)
def test_sq_keeps_subtasks_within_a_tenth_of_strict_phase_difference(
    runs: dict[tuple[int, float, str], RunResult], nodes: int, lam: float
) -> None:
    sq, strict = runs[(nodes, lam, "sq")], runs[(nodes, lam, "strict")]
    assert _mean_phase(sq) <= 0.1 * _mean_phase(strict)


@pytest.mark.parametrize(
    ("nodes", "lam"),
    [
        (3, 100.0),
        (3, 500.0),
        _known_gap(6, 100.0, "measured 69 admitted against strict's 73 (seed 1): "
                   "early admissions differ and the later stream follows them"),
        (6, 500.0),
    ],
)
def test_sq_admits_at_least_as_many_jobs_as_strict(
    runs: dict[tuple[int, float, str], RunResult], nodes: int, lam: float
) -> None:
    sq, strict = runs[(nodes, lam, "sq")], runs[(nodes, lam, "strict")]
    assert _admitted(sq) >= _admitted(strict), (_admitted(sq), _admitted(strict))


@pytest.mark.parametrize(
    ("nodes", "lam"),
    [
        (3, 100.0),
        (3, 500.0),
        (6, 100.0),
        (6, 500.0),
    ],
)
def test_sq_uses_the_nodes_at_least_as_well_as_strict(
    runs: dict[tuple[int, float, str], RunResult], nodes: int, lam: float
) -> None:
    sq, strict = runs[(nodes, lam, "sq")], runs[(nodes, lam, "strict")]
    assert _utilization(sq) >= _utilization(strict)
