"""The DRF paper's properties, checked by hypothesis on random instances.

Precise forms tested (``TOL`` is float rounding, relative 1e-9):

Divisible (fluid DRF), exactly:
* sharing incentive: ``x_i >= min(cap_i, min_j (w_i / sum w) C_j / d_ij)`` -- at least what
  user ``i`` could run in its own weighted partition of the pool (scalar weights, caps,
  zero demands allowed);
* envy-freeness (no weights): no user could run more of its tasks (up to its cap) with
  another user's bundle than with its own;
* Pareto efficiency: every user below its cap needs some saturated resource;
* strategy-proofness: for sampled misreported demand vectors, the tasks a user can really
  run with what it gets are never more than when truthful (scalar weights, no caps);
* single-resource fairness: with one resource DRF is weighted max-min (``max_min_fair``);
* bottleneck fairness: when all users have the same dominant resource, DRF is weighted
  max-min on it;
* population monotonicity: when a user leaves, nobody else loses -- for users that demand
  every resource (weights and caps allowed). With zero entries in demand vectors the
  fluid DRF is *not* population monotone: a pinned counterexample shows it;
* resource monotonicity: the paper shows no policy with sharing incentive and Pareto
  efficiency has it in general (a pinned counterexample: adding one resource type lowers
  a user); we test the form that holds: growing every capacity by the same factor never
  lowers anybody (users demanding every resource, caps allowed; without caps the
  allocation scales exactly).

Indivisible (progressive filling), with a slack of one task:
* Pareto efficiency exactly: no user below its cap has a next task that fits;
* sharing incentive up to one task: a user below its cap has dominant share
  ``s_i > 1/n - max_k delta_k`` (``delta_k`` the dominant share of one task of user
  ``k``). Proof: when ``i`` was dropped, every other user's share was at most
  ``s_i + delta_k`` (it launched its last task while at or below ``s_i``), so the resource
  ``j`` that blocked ``i`` was filled to at most ``n s_i + (n - 1) max delta``; were
  ``s_i <= 1/n - max delta``, that leaves ``delta_max >= d_ij / C_j`` free and ``i`` fits;
* envy-freeness up to one task: no user could run more tasks with another user's bundle
  minus one of that user's tasks;
* single-resource and bottleneck fairness up to one task: nobody gets less of the
  (bottleneck) resource than its max-min amount minus the largest task;
* strategy-proofness, population and resource monotonicity do not hold even up to one task
  with whole tasks (packing: one task can block another user's task altogether); pinned
  counterexamples show by how much.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairness.drf import drf
from fairness.single import max_min_fair

TOL = 1e-9
SETTINGS = settings(max_examples=100, deadline=None)


@st.composite
def instances(draw: st.DrawFn, weighted: bool = False, capped: bool = False,
              zeros: bool = True, resources: tuple[int, int] = (1, 4), max_users: int = 6):
    m = draw(st.integers(*resources))
    n = draw(st.integers(1, max_users))
    capacity = [float(draw(st.integers(1, 30))) for _ in range(m)]
    positive = st.one_of(st.integers(1, 8).map(float),
                         st.floats(0.1, 8).map(lambda v: round(v, 2)))
    entry = st.one_of(st.just(0.0), positive) if zeros else positive
    demands = []
    for _ in range(n):
        row = [draw(entry) for _ in range(m)]
        if not any(row):
            row[draw(st.integers(0, m - 1))] = draw(positive)
        demands.append(row)
    weights = None
    if weighted and draw(st.booleans()):
        weights = [draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])) for _ in range(n)]
    caps = None
    if capped and draw(st.booleans()):
        caps = [draw(st.one_of(st.none(), st.integers(0, 6).map(float),
                               st.floats(0, 6).map(lambda v: round(v, 2)))) for _ in range(n)]
    return capacity, demands, weights, caps


def _cap(caps, i: int) -> float:
    return math.inf if caps is None or caps[i] is None else caps[i]


def _w(weights, i: int) -> float:
    return 1.0 if weights is None else weights[i]


def _task_share(capacity, row) -> float:
    """delta_i: dominant share of one task (unweighted)."""
    return max(v / c for v, c in zip(row, capacity))


def _tasks_from_bundle(bundle, row) -> float:
    """How many tasks of demand ``row`` a bundle (resource amounts) can run (real)."""
    return min(b / v for b, v in zip(bundle, row) if v > 0)


# =========================== divisible: exact ==============================================

@SETTINGS
@given(inst=instances(weighted=True, capped=True))
def test_sharing_incentive_divisible(inst) -> None:
    capacity, demands, weights, caps = inst
    x = drf(capacity, demands, weights, caps, divisible=True).tasks
    total_w = sum(_w(weights, i) for i in range(len(demands)))
    for i, row in enumerate(demands):
        partition = [c * _w(weights, i) / total_w for c in capacity]
        own = min(_cap(caps, i), _tasks_from_bundle(partition, row))
        assert x[i] >= own * (1 - TOL)


@SETTINGS
@given(inst=instances(capped=True))
def test_envy_free_divisible(inst) -> None:
    capacity, demands, _, caps = inst
    r = drf(capacity, demands, None, caps, divisible=True)
    for i, row in enumerate(demands):
        for k, bundle in enumerate(r.allocations):
            if k != i:
                other = min(_cap(caps, i), _tasks_from_bundle(bundle, row))
                assert other <= r.tasks[i] * (1 + TOL) + TOL


@SETTINGS
@given(inst=instances(weighted=True, capped=True))
def test_pareto_efficient_divisible(inst) -> None:
    capacity, demands, weights, caps = inst
    r = drf(capacity, demands, weights, caps, divisible=True)
    for i, row in enumerate(demands):
        if r.tasks[i] < _cap(caps, i) * (1 - TOL):
            assert any(v > 0 and r.utilization[j] >= 1 - TOL for j, v in enumerate(row))


@SETTINGS
@given(inst=instances(weighted=True), data=st.data())
def test_strategy_proof_divisible(inst, data: st.DataObject) -> None:
    capacity, demands, weights, _ = inst
    x = drf(capacity, demands, weights, divisible=True).tasks
    i = data.draw(st.integers(0, len(demands) - 1))
    for _ in range(5):
        lie = data.draw(st.lists(st.floats(0, 10).map(lambda v: round(v, 2)),
                                 min_size=len(capacity), max_size=len(capacity)))
        if not any(lie):
            continue
        reported = [list(r) for r in demands]
        reported[i] = lie
        got = drf(capacity, reported, weights, divisible=True).allocations[i]
        assert _tasks_from_bundle(got, demands[i]) <= x[i] * (1 + TOL) + TOL


@SETTINGS
@given(inst=instances(weighted=True, capped=True, resources=(1, 1)))
def test_single_resource_fairness_divisible(inst) -> None:
    capacity, demands, weights, caps = inst
    r = drf(capacity, demands, weights, caps, divisible=True)
    wanted = [min(row[0] * _cap(caps, i), capacity[0]) for i, row in enumerate(demands)]
    expected = max_min_fair(capacity[0], wanted, weights)
    got = [a[0] for a in r.allocations]
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)


@st.composite
def bottleneck_instances(draw: st.DrawFn, weighted: bool = True):
    """Instances in which resource ``b`` is every user's dominant resource."""
    capacity, demands, weights, caps = draw(instances(weighted=weighted, capped=True))
    b = draw(st.integers(0, len(capacity) - 1))
    for row in demands:
        top = _task_share(capacity, row)
        row[b] = capacity[b] * top * draw(st.sampled_from([1.0, 1.25, 2.0]))
    return capacity, demands, weights, caps, b


@SETTINGS
@given(inst=bottleneck_instances())
def test_bottleneck_fairness_divisible(inst) -> None:
    capacity, demands, weights, caps, b = inst
    r = drf(capacity, demands, weights, caps, divisible=True)
    wanted = [min(row[b] * _cap(caps, i), capacity[b]) for i, row in enumerate(demands)]
    expected = max_min_fair(capacity[b], wanted, weights)
    assert [a[b] for a in r.allocations] == pytest.approx(expected, rel=1e-9, abs=1e-9)


@SETTINGS
@given(inst=instances(weighted=True, capped=True, zeros=False, max_users=7),
       data=st.data())
def test_population_monotonicity_divisible(inst, data: st.DataObject) -> None:
    capacity, demands, weights, caps = inst
    if len(demands) < 2:
        return
    x = drf(capacity, demands, weights, caps, divisible=True).tasks
    k = data.draw(st.integers(0, len(demands) - 1))

    def drop(seq):
        return None if seq is None else seq[:k] + seq[k + 1:]

    after = drf(capacity, drop(demands), drop(weights), drop(caps), divisible=True).tasks
    for new, old in zip(after, drop(list(x))):
        assert new >= old * (1 - TOL)


def test_population_monotonicity_fails_with_zero_demands() -> None:
    """Fluid DRF with zero entries: B leaves, A (no longer held back on CPU) takes more
    memory, and C, which shares memory with A, loses. Hand check: with B the CPU
    saturates at level 0.352 (A 1.01 tasks) and C rises to (19 - 4.33) / 5.49 = 2.67;
    without B the CPU saturates at 0.544 (A 1.56 tasks) and C only reaches 2.24."""
    capacity = [14, 19, 16]
    demands = [[4.88, 4.29, 0], [3.63, 0, 0], [0, 5.49, 1.44], [5.04, 0, 6.86]]
    with_b = drf(capacity, demands, divisible=True).tasks
    without_b = drf(capacity, demands[:1] + demands[2:], divisible=True).tasks
    assert with_b[2] == pytest.approx(2.6714, abs=1e-4)
    assert without_b[1] == pytest.approx(2.2422, abs=1e-4)


@SETTINGS
@given(inst=instances(weighted=True, capped=True, zeros=False),
       factor=st.floats(1.0, 4.0))
def test_resource_monotonicity_proportional_growth_divisible(inst, factor: float) -> None:
    capacity, demands, weights, caps = inst
    x = drf(capacity, demands, weights, caps, divisible=True).tasks
    grown = drf([c * factor for c in capacity], demands, weights, caps, divisible=True).tasks
    for new, old in zip(grown, x):
        assert new >= old * (1 - TOL)


@SETTINGS
@given(inst=instances(weighted=True), factor=st.floats(1.0, 4.0))
def test_uncapped_allocation_scales_with_the_pool(inst, factor: float) -> None:
    capacity, demands, weights, _ = inst
    x = drf(capacity, demands, weights, divisible=True).tasks
    grown = drf([c * factor for c in capacity], demands, weights, divisible=True).tasks
    assert grown == pytest.approx([v * factor for v in x], rel=1e-9)


def test_not_resource_monotone_when_one_resource_grows() -> None:
    """As the paper states, DRF is not resource monotone: 1 CPU and 2 GB, A <1, 3>,
    B <1, 1>: CPU binds at level 0.6 (A 0.4, B 0.6 tasks). With 3 GB, A's dominant share
    per task drops from 1.5 to 1, CPU binds at level 0.5 and B falls to 0.5 tasks."""
    before = drf([1, 2], [[1, 3], [1, 1]], divisible=True).tasks
    after = drf([1, 3], [[1, 3], [1, 1]], divisible=True).tasks
    assert before == pytest.approx((0.4, 0.6))
    assert after == pytest.approx((0.5, 0.5))


# ======================== indivisible: one-task slack ======================================

@SETTINGS
@given(inst=instances(weighted=True, capped=True))
def test_pareto_efficient_indivisible(inst) -> None:
    capacity, demands, weights, caps = inst
    r = drf(capacity, demands, weights, caps)
    for i, row in enumerate(demands):
        if r.tasks[i] + 1 <= _cap(caps, i):
            assert any(u + v > c * (1 + 1e-9) for u, v, c in zip(r.usage, row, capacity))


@SETTINGS
@given(inst=instances(capped=True))
def test_sharing_incentive_up_to_one_task_indivisible(inst) -> None:
    capacity, demands, _, caps = inst
    r = drf(capacity, demands, None, caps)
    n = len(demands)
    largest = max(_task_share(capacity, row) for row in demands)
    for i in range(n):
        if r.tasks[i] + 1 <= _cap(caps, i):
            assert r.dominant_shares[i] > 1 / n - largest - TOL


@SETTINGS
@given(inst=instances(capped=True))
def test_envy_free_up_to_one_task_indivisible(inst) -> None:
    capacity, demands, _, caps = inst
    r = drf(capacity, demands, None, caps)
    for i, row in enumerate(demands):
        for k, other in enumerate(demands):
            if k == i or r.tasks[k] == 0:
                continue
            minus_one = [(r.tasks[k] - 1) * v for v in other]
            could = math.floor(_tasks_from_bundle(minus_one, row) + TOL)
            cap = _cap(caps, i)
            assert min(cap if cap == math.inf else math.floor(cap), could) <= r.tasks[i]


@SETTINGS
@given(inst=instances(capped=True, resources=(1, 1)))
def test_single_resource_fairness_up_to_one_task_indivisible(inst) -> None:
    capacity, demands, _, caps = inst
    r = drf(capacity, demands, None, caps)
    wanted = [min(row[0] * _cap(caps, i), capacity[0]) for i, row in enumerate(demands)]
    fair = max_min_fair(capacity[0], wanted)
    largest = max(row[0] for row in demands)
    for a, got in zip(fair, r.allocations):
        assert got[0] > a - largest - TOL


@SETTINGS
@given(inst=bottleneck_instances(weighted=False))
def test_bottleneck_fairness_up_to_one_task_indivisible(inst) -> None:
    capacity, demands, _, caps, b = inst
    r = drf(capacity, demands, None, caps)
    wanted = [min(row[b] * _cap(caps, i), capacity[b]) for i, row in enumerate(demands)]
    fair = max_min_fair(capacity[b], wanted)
    largest = max(row[b] for row in demands)
    for a, got in zip(fair, r.allocations):
        assert got[b] > a - largest - TOL


def test_indivisible_is_not_strategy_proof_packing() -> None:
    """5 CPU, 4 GB; A <1, 1>, B <3, 3>. Truthful: A 1 task (B's task then leaves too
    little for A's second). A claims <5, 4> (the whole pool), gets 1 such 'task' first,
    which blocks B entirely, and can really run 4 tasks: +3 tasks from lying."""
    capacity = [5, 4]
    truthful = drf(capacity, [[1, 1], [3, 3]]).tasks[0]
    lying = drf(capacity, [[5, 4], [3, 3]]).allocations[0]
    assert truthful == 1
    assert math.floor(_tasks_from_bundle(lying, [1, 1])) == 4


def test_indivisible_is_not_population_monotone_packing() -> None:
    """6 CPU, 4 GB; A <1, 1>, B <6, 3>, C <1, 1>: DRF gives C 2 tasks. When A leaves, B
    (tie, added first) takes all 6 CPUs and C gets nothing: -2 tasks."""
    capacity = [6, 4]
    before = drf(capacity, [[1, 1], [6, 3], [1, 1]]).tasks
    after = drf(capacity, [[6, 3], [1, 1]]).tasks
    assert before == (2, 0, 2)
    assert after == (1, 0)


def test_indivisible_is_not_resource_monotone_packing() -> None:
    """2 CPU, 3 GB; A <4, 2> does not fit, B <1, 1> runs 2 tasks. Doubling the pool lets
    A's one task in first (tie, added first), after which B's task no longer fits."""
    assert drf([2, 3], [[4, 2], [1, 1]]).tasks == (0, 2)
    assert drf([4, 6], [[4, 2], [1, 1]]).tasks == (1, 0)
