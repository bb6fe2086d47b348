"""Asset fairness and CEEI: the papers' example, the property each breaks, and CEEI against a
general-purpose optimiser."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairness.alternatives import CEEI_MAX_RESOURCES, asset_fairness, ceei
from fairness.drf import drf

PAPER_CAPACITY = [9, 18]
PAPER_DEMANDS = [[1, 4], [3, 1]]


def test_asset_fairness_paper_example() -> None:
    # One CPU is worth 2 GB: a task of A costs $6, of B $7; 6x = 7y and the CPU binds:
    # x + 3y = 9 -> x = 2.52, y = 2.16.
    r = asset_fairness(PAPER_CAPACITY, PAPER_DEMANDS)
    assert r.tasks == pytest.approx((2.52, 2.16), rel=1e-12)
    assert r.usage[0] == pytest.approx(9.0)


def test_ceei_paper_example() -> None:
    # max x*y s.t. x + 3y <= 9, 4x + y <= 18: both bind at x = 45/11, y = 18/11.
    r = ceei(PAPER_CAPACITY, PAPER_DEMANDS)
    assert r.tasks == pytest.approx((45 / 11, 18 / 11), rel=1e-12)
    assert r.utilization == pytest.approx((1.0, 1.0), rel=1e-12)


def test_asset_fairness_breaks_sharing_incentive() -> None:
    """30 CPU, 30 GB; A <1, 3>, B <1, 1>. Equal aggregate shares 4x = 2y, memory binds
    (3x + y = 30): x = 6, y = 12. In its own half (15 CPU, 15 GB) B could run 15 tasks."""
    r = asset_fairness([30, 30], [[1, 3], [1, 1]])
    assert r.tasks == pytest.approx((6, 12))
    own_half = min(15 / 1, 15 / 1)
    assert r.tasks[1] < own_half
    # DRF on the same instance keeps the incentive: B gets at least its 15.
    assert drf([30, 30], [[1, 3], [1, 1]], divisible=True).tasks[1] >= own_half


def test_ceei_breaks_strategy_proofness() -> None:
    """The papers' example: B claims <3 CPU, 2 GB> (more of the resource it uses little).
    CEEI then gives x = 3.6, y = 1.8 (both constraints bind), and with the bundle
    <5.4 CPU, 3.6 GB> B really runs min(5.4 / 3, 3.6 / 1) = 1.8 > 18/11 tasks."""
    truthful = ceei(PAPER_CAPACITY, PAPER_DEMANDS).tasks[1]
    lied = ceei(PAPER_CAPACITY, [[1, 4], [3, 2]])
    assert lied.tasks == pytest.approx((3.6, 1.8))
    bundle = lied.allocations[1]
    really = min(bundle[0] / 3, bundle[1] / 1)
    assert really == pytest.approx(1.8)
    assert really > truthful + 0.1
    # DRF on the same lie gives B nothing extra.
    honest = drf(PAPER_CAPACITY, PAPER_DEMANDS, divisible=True).tasks[1]
    lied_drf = drf(PAPER_CAPACITY, [[1, 4], [3, 2]], divisible=True).allocations[1]
    assert min(lied_drf[0] / 3, lied_drf[1] / 1) <= honest + 1e-12


def test_bad_input() -> None:
    with pytest.raises(ValueError, match=r"^demands\[1\]: demand is zero on every resource"):
        ceei([1, 1], [[1, 1], [0, 0]])
    with pytest.raises(ValueError, match=r"^capacity\[0\]: must be > 0"):
        asset_fairness([0, 1], [[1, 1]])
    with pytest.raises(ValueError, match=r"^weights\[0\]: must be > 0"):
        ceei([1, 1], [[1, 1]], weights=[-1])
    with pytest.raises(ValueError, match=r"^capacity: ceei supports at most"):
        ceei([1.0] * (CEEI_MAX_RESOURCES + 1), [[1.0] * (CEEI_MAX_RESOURCES + 1)])


@st.composite
def instances(draw: st.DrawFn, zeros: bool = True):
    m = draw(st.integers(1, 4))
    n = draw(st.integers(1, 6))
    capacity = [float(draw(st.integers(1, 30))) for _ in range(m)]
    positive = st.floats(0.1, 8).map(lambda v: round(v, 2))
    entry = st.one_of(st.just(0.0), positive) if zeros else positive
    demands = []
    for _ in range(n):
        row = [draw(entry) for _ in range(m)]
        if not any(row):
            row[0] = draw(positive)
        demands.append(row)
    weights = [draw(st.sampled_from([0.5, 1.0, 2.0])) for _ in range(n)]
    return capacity, demands, weights


@pytest.mark.integration
@settings(max_examples=80, deadline=None)
@given(inst=instances())
def test_ceei_is_the_nash_bargaining_optimum(inst) -> None:
    """No feasible point found by scipy's SLSQP has a higher sum w_i log x_i."""
    np = pytest.importorskip("numpy")
    optimize = pytest.importorskip("scipy.optimize")
    capacity, demands, weights = inst
    r = ceei(capacity, demands, weights)
    a = np.array(demands).T
    for used, c in zip(r.usage, capacity):
        assert used <= c * (1 + 1e-9)

    def neg(x):
        return -float(np.dot(weights, np.log(np.maximum(x, 1e-300))))

    ref = optimize.minimize(
        neg, np.array(r.tasks) * 0.5, method="SLSQP", bounds=[(1e-12, None)] * len(demands),
        constraints=[{"type": "ineq", "fun": lambda x: np.array(capacity) - a @ x}],
        options={"ftol": 1e-14, "maxiter": 1000})
    # SLSQP may stop at a point that breaks the capacities ("Inequality constraints
    # incompatible"): only a feasible point it found is a bound to beat.
    feasible = bool(np.all(a @ ref.x <= np.array(capacity) * (1 + 1e-9) + 1e-12))
    if feasible:
        assert neg(np.array(r.tasks)) <= neg(ref.x) + 1e-7


@settings(max_examples=100, deadline=None)
@given(inst=instances())
def test_ceei_is_envy_free_and_pareto_efficient(inst) -> None:
    """The properties CEEI does have (equal incomes: no weights)."""
    capacity, demands, _ = inst
    r = ceei(capacity, demands)
    for i, row in enumerate(demands):
        assert any(v > 0 and r.utilization[j] >= 1 - 1e-9 for j, v in enumerate(row))
        for k, bundle in enumerate(r.allocations):
            if k != i:
                other = min(b / v for b, v in zip(bundle, row) if v > 0)
                assert other <= r.tasks[i] * (1 + 1e-9)


@settings(max_examples=100, deadline=None)
@given(inst=instances(zeros=False))
def test_asset_fairness_equalises_aggregate_shares(inst) -> None:
    """Users demanding every resource all freeze at the first saturation, with equal
    (weighted) aggregate shares."""
    capacity, demands, weights = inst
    r = asset_fairness(capacity, demands, weights)
    assert max(r.utilization) == pytest.approx(1.0)
    levels = [x * math.fsum(v / c for v, c in zip(row, capacity)) / w
              for x, row, w in zip(r.tasks, demands, weights)]
    assert levels == pytest.approx([levels[0]] * len(levels), rel=1e-9)


def test_asset_fairness_caps() -> None:
    r = asset_fairness(PAPER_CAPACITY, PAPER_DEMANDS, max_tasks=[1, None])
    assert r.tasks == pytest.approx((1, 8 / 3))  # CPU: 1 + 3y = 9
