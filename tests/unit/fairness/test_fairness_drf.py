"""DRF: the papers' worked example, input errors, the fluid form against an LP reference,
and the online DrfAllocator against drf() and against a brute-force oracle."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairness.drf import DrfAllocator, drf

PAPER_CAPACITY = [9, 18]  # 9 CPUs, 18 GB
PAPER_DEMANDS = [[1, 4], [3, 1]]  # A <1 CPU, 4 GB>, B <3 CPU, 1 GB> per task


# --- the papers' example ----------------------------------------------------------------

@pytest.mark.parametrize("divisible", [False, True])
def test_paper_example_three_and_two_tasks(divisible: bool) -> None:
    r = drf(PAPER_CAPACITY, PAPER_DEMANDS, divisible=divisible)
    assert r.tasks == (3, 2)
    assert r.dominant_shares == pytest.approx((2 / 3, 2 / 3))
    assert r.usage == pytest.approx((9, 14))  # A <3 CPU, 12 GB> + B <6 CPU, 2 GB>
    assert r.utilization == pytest.approx((1.0, 14 / 18))
    assert r.allocations == ((3, 12), (6, 2))


def test_indivisible_tasks_are_ints() -> None:
    assert all(type(x) is int for x in drf(PAPER_CAPACITY, PAPER_DEMANDS).tasks)


def test_paper_example_launch_order_table_1() -> None:
    """Table 1 of the paper: B, A, A, B, A; our tie-breaking (first added wins at equal
    shares) starts with A instead, and the allocation is the same."""
    alloc = DrfAllocator(PAPER_CAPACITY)
    alloc.add_user("B", [3, 1])
    alloc.add_user("A", [1, 4])
    assert alloc.fill() == ["B", "A", "A", "B", "A"]
    assert (alloc.tasks("A"), alloc.tasks("B")) == (3, 2)


def test_weighted_drf_scalar_and_vector_weights_agree() -> None:
    # A weight vector with equal entries is the scalar weight.
    a = drf(PAPER_CAPACITY, PAPER_DEMANDS, weights=[2, 1], divisible=True)
    b = drf(PAPER_CAPACITY, PAPER_DEMANDS, weights=[[2, 2], [1, 1]], divisible=True)
    assert a.tasks == pytest.approx(b.tasks)
    # Weight 2 for A: s_A = (4x/18)/2 = s_B = 3y/9 and memory 4x + y = 18 saturates:
    # x = 54/13, y = 18/13.
    assert a.tasks == pytest.approx((54 / 13, 18 / 13))
    assert a.weighted_shares[0] == pytest.approx(a.weighted_shares[1])


def test_weight_vector_per_resource() -> None:
    # w_A = (1, 3): memory counts a third for A: s_A = max(x/9, (4x/18)/3) = x/9;
    # s_B = y/3; equal shares x = 3y; CPU: x + 3y = 9 -> x = 4.5, y = 1.5 (mem 19.5 > 18,
    # so memory binds first: 4x + y = 18 with x = 3y -> y = 18/13, x = 54/13).
    r = drf(PAPER_CAPACITY, PAPER_DEMANDS, weights=[[1, 3], [1, 1]], divisible=True)
    assert r.tasks == pytest.approx((54 / 13, 18 / 13))


def test_zero_demand_users_continue_after_saturation() -> None:
    # CPU saturates; the disk-only user C keeps receiving tasks (papers: "users that do not
    # need the saturated resource continue").
    r = drf([9, 18, 4], [[1, 4, 0], [3, 1, 0], [0, 0, 1]])
    assert r.tasks == (3, 2, 4)
    r = drf([9, 18, 4], [[1, 4, 0], [3, 1, 0], [0, 0, 1]], divisible=True)
    assert r.tasks == pytest.approx((3, 2, 4))


def test_max_tasks_caps_and_redistributes() -> None:
    r = drf(PAPER_CAPACITY, PAPER_DEMANDS, max_tasks=[1, None])
    assert r.tasks == (1, 2)  # B's third task needs 9 CPU: 1 + 9 > 9
    r = drf(PAPER_CAPACITY, PAPER_DEMANDS, max_tasks=[1.5, None], divisible=True)
    assert r.tasks == pytest.approx((1.5, 2.5))  # CPU: 1.5 + 3 * 2.5 = 9
    r = drf(PAPER_CAPACITY, PAPER_DEMANDS, max_tasks=[0, 0])
    assert r.tasks == (0, 0) and r.usage == (0.0, 0.0)


def test_sq_local_queue_form() -> None:
    """What the SQ local queues call: per-unit demand vectors, weights in Mcycles/s,
    caps equal to the amount wanted (divisible)."""
    capacity = [2000.0, 8.0]  # Mcycles/s of CPU, GB of memory
    per_unit = [[1.0, 0.002], [1.0, 0.001], [1.0, 0.0]]
    weights = [600.0, 1000.0, 400.0]  # Mcycles/s
    caps = [500.0, 1500.0, 2000.0]  # Mcycles/s wanted
    r = drf(capacity, per_unit, weights, max_tasks=caps, divisible=True)
    assert sum(r.tasks) == pytest.approx(2000.0)
    assert r.tasks[0] == pytest.approx(500.0)  # below its weighted share: fully served
    # The other two split the rest in proportion to their weights (1000 : 400).
    assert r.tasks[1] / r.tasks[2] == pytest.approx(1000 / 400)


def test_empty_user_list() -> None:
    r = drf([1, 2], [])
    assert r.tasks == () and r.usage == (0.0, 0.0) and r.utilization == (0.0, 0.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity": [9, 0]}, r"^capacity\[1\]: must be > 0"),
        ({"capacity": [9, math.nan]}, r"^capacity\[1\]: is NaN"),
        ({"capacity": []}, r"^capacity: must not be empty"),
        ({"demands": [[1, 4], [3, -1]]}, r"^demands\[1\]\[1\]: must be >= 0"),
        ({"demands": [[1, 4], [3]]}, r"^demands\[1\]: has 1 entries, expected 2"),
        ({"demands": [[1, 4], [0, 0]]}, r"^demands\[1\]: demand is zero on every resource"),
        ({"demands": [[1, math.inf], [3, 1]]}, r"^demands\[0\]\[1\]: must be finite"),
        ({"weights": [1]}, r"^weights: has 1 entries, expected 2"),
        ({"weights": [1, 0]}, r"^weights\[1\]: must be > 0"),
        ({"weights": [[1, 1], [1]]}, r"^weights\[1\]: has 1 entries, expected 2"),
        ({"max_tasks": [1, -2]}, r"^max_tasks\[1\]: must be >= 0"),
        ({"max_tasks": [1, math.nan]}, r"^max_tasks\[1\]: is NaN"),
        ({"max_tasks": [1]}, r"^max_tasks: has 1 entries, expected 2"),
    ],
)
@pytest.mark.parametrize("divisible", [False, True])
def test_bad_input_names_argument_and_index(kwargs, message, divisible) -> None:
    args = {"capacity": PAPER_CAPACITY, "demands": PAPER_DEMANDS, **kwargs}
    with pytest.raises(ValueError, match=message):
        drf(**args, divisible=divisible)


# --- instances -----------------------------------------------------------------------------

@st.composite
def instances(draw: st.DrawFn, weighted: bool = True, capped: bool = True,
              vector_weights: bool = False, max_users: int = 6):
    m = draw(st.integers(1, 4))
    n = draw(st.integers(1, max_users))
    capacity = [float(draw(st.integers(1, 30))) for _ in range(m)]
    entry = st.one_of(st.just(0.0), st.integers(1, 8).map(float),
                      st.floats(0.1, 8).map(lambda v: round(v, 2)))
    demands = []
    for _ in range(n):
        row = [draw(entry) for _ in range(m)]
        if not any(row):
            row[draw(st.integers(0, m - 1))] = float(draw(st.integers(1, 8)))
        demands.append(row)
    weights = None
    if weighted and draw(st.booleans()):
        if vector_weights and draw(st.booleans()):
            weights = [[draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])) for _ in range(m)]
                       for _ in range(n)]
        else:
            weights = [draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])) for _ in range(n)]
    caps = None
    if capped and draw(st.booleans()):
        caps = [draw(st.one_of(st.none(), st.integers(0, 6).map(float),
                               st.floats(0, 6).map(lambda v: round(v, 2)))) for _ in range(n)]
    return capacity, demands, weights, caps


def _weighted_task_share(capacity, row, wrow) -> float:
    return max(v / (c * w) for v, c, w in zip(row, capacity, wrow))


def _wrows(weights, n, m):
    if weights is None:
        return [[1.0] * m for _ in range(n)]
    return [list(w) if isinstance(w, list) else [w] * m for w in weights]


@pytest.mark.integration
@settings(max_examples=80, deadline=None)
@given(inst=instances(vector_weights=True))
def test_fluid_drf_is_lexicographic_max_min_lp(inst) -> None:
    """The fluid DRF equals the lexicographic max-min of weighted dominant shares computed
    independently by a sequence of LPs (scipy HiGHS)."""
    np = pytest.importorskip("numpy")
    optimize = pytest.importorskip("scipy.optimize")
    capacity, demands, weights, caps = inst
    n, m = len(demands), len(capacity)
    delta = [_weighted_task_share(capacity, row, w)
             for row, w in zip(demands, _wrows(weights, n, m))]
    cap = [math.inf if c is None else c for c in (caps or [None] * n)]
    ours = drf(capacity, demands, weights, caps, divisible=True).tasks

    a = np.array(demands).T
    fixed: dict[int, float] = {}
    while len(fixed) < n:
        active = [i for i in range(n) if i not in fixed]
        bounds = [(fixed[i], fixed[i]) if i in fixed else (0, None if cap[i] == math.inf
                  else cap[i]) for i in range(n)]
        a_ub = [list(a[j]) + [0.0] for j in range(m)]
        b_ub = list(capacity)
        for i in active:
            row = [0.0] * (n + 1)
            row[i], row[n] = -delta[i], 1.0
            a_ub.append(row)
            b_ub.append(0.0)
        c = [0.0] * n + [-1.0]
        res = optimize.linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=bounds + [(None, None)],
                               method="highs")
        level = res.x[-1]
        blocked = []
        for i in active:  # can user i rise above the level while the others keep it?
            a2, b2 = list(a_ub[:m]), list(b_ub[:m])
            for k in active:
                if k != i:
                    row = [0.0] * (n + 1)
                    row[k] = -delta[k]
                    a2.append(row)
                    b2.append(-level * (1 - 1e-12))
            c2 = [0.0] * (n + 1)
            c2[i] = -delta[i]
            r2 = optimize.linprog(c2, A_ub=a2, b_ub=b2, bounds=bounds + [(0, 0)],
                                  method="highs")
            if -r2.fun <= level * (1 + 1e-9) + 1e-12:
                blocked.append(i)
        assert blocked
        for i in blocked:
            fixed[i] = min(level / delta[i], cap[i])
    reference = [fixed[i] for i in range(n)]
    assert ours == pytest.approx(reference, rel=1e-6, abs=1e-9)


# --- the online allocator ------------------------------------------------------------------

def _allocator_for(capacity, demands, weights, caps) -> DrfAllocator:
    alloc = DrfAllocator(capacity)
    for i, row in enumerate(demands):
        w = 1.0 if weights is None else weights[i]
        alloc.add_user(f"u{i}", row, w, None if caps is None else caps[i])
    return alloc


@settings(max_examples=150, deadline=None)
@given(inst=instances(vector_weights=True))
def test_allocator_fill_equals_drf(inst) -> None:
    capacity, demands, weights, caps = inst
    alloc = _allocator_for(capacity, demands, weights, caps)
    alloc.fill()
    expected = drf(capacity, demands, weights, caps)
    got = alloc.result()
    assert got.tasks == expected.tasks
    assert got.usage == pytest.approx(expected.usage)
    assert got.weighted_shares == pytest.approx(expected.weighted_shares)


def _oracle_next(alloc: DrfAllocator, order: list[str], spec: dict) -> str | None:
    """Brute force: the present user with the lowest (s_i, insertion order) whose next
    task fits and who is below its cap."""
    best = None
    for seq, user in enumerate(order):
        if user not in spec:
            continue
        row, w, cap = spec[user]
        x = alloc.tasks(user)
        if x + 1 > (math.inf if cap is None else cap):
            continue
        if any(u + v > c * (1 + 1e-9) for u, v, c in zip(alloc.usage, row, alloc.capacity)):
            continue
        share = x * _weighted_task_share(alloc.capacity, row, [w] * len(row))
        if best is None or (share, seq) < best[0]:
            best = ((share, seq), user)
    return None if best is None else best[1]


@settings(max_examples=100, deadline=None)
@given(inst=instances(), seed=st.integers(0, 2**32 - 1))
def test_allocator_random_event_sequences_match_oracle(inst, seed: int) -> None:
    """Random add / remove / launch / release sequences: next_user() always equals the
    brute-force choice, and the usage equals the sum of the running tasks' demands."""
    capacity, demands, weights, caps = inst
    rng = random.Random(seed)
    alloc = DrfAllocator(capacity)
    order: list[str] = []
    spec: dict[str, tuple] = {}
    pending = list(range(len(demands)))
    for step in range(60):
        op = rng.random()
        if pending and (op < 0.15 or not spec):
            i = pending.pop(0)
            name = f"u{i}"
            w = 1.0 if weights is None else weights[i]
            cap = None if caps is None else caps[i]
            alloc.add_user(name, demands[i], w, cap)
            order.append(name)
            spec[name] = (demands[i], w, cap)
        elif op < 0.2 and spec:
            name = rng.choice(sorted(spec))
            alloc.remove_user(name)
            del spec[name]
        elif op < 0.45:
            running = [u for u in spec if alloc.tasks(u) > 0]
            if running:
                alloc.release(rng.choice(sorted(running)))
        else:
            expected = _oracle_next(alloc, order, spec)
            assert alloc.next_user() == expected, f"step {step}"
            if expected is not None:
                alloc.launch(expected)
        for j, c in enumerate(capacity):
            held = math.fsum(alloc.tasks(u) * spec[u][0][j] for u in spec)
            assert alloc.usage[j] == pytest.approx(held, abs=1e-9 * c)
    # Release everything: filling again gives drf() of the users present, in order.
    for user in list(spec):
        while alloc.tasks(user):
            alloc.release(user)
    alloc.fill()
    present = [u for u in order if u in spec]
    expected = drf(capacity, [spec[u][0] for u in present],
                   [spec[u][1] for u in present] if present else None,
                   [spec[u][2] for u in present] if present else None)
    assert tuple(alloc.tasks(u) for u in present) == expected.tasks


def test_allocator_release_lets_parked_users_back() -> None:
    alloc = DrfAllocator([4])
    alloc.add_user("big", [3])
    alloc.add_user("small", [1])
    assert alloc.fill() == ["big", "small"]
    assert alloc.next_user() is None
    alloc.release("small")  # 1 unit free: big (3/4) is parked, small (0) fits again
    assert alloc.next_user() == "small"
    alloc.release("big")  # 3 more units free: big's share is 0 again and it was added first
    assert alloc.next_user() == "big"
    assert alloc.fill() == ["big", "small"]
    alloc.remove_user("big")  # frees 3 units: only small is left
    assert alloc.fill() == ["small", "small", "small"]


def test_allocator_errors() -> None:
    alloc = DrfAllocator([4, 4])
    alloc.add_user("a", [3, 1], max_tasks=1)
    with pytest.raises(ValueError, match=r"^user: 'a' is already present"):
        alloc.add_user("a", [1, 1])
    with pytest.raises(ValueError, match=r"^user: 'zz' is not present"):
        alloc.launch("zz")
    with pytest.raises(ValueError, match=r"^user: 'a' has no running task"):
        alloc.release("a")
    alloc.launch("a")
    with pytest.raises(ValueError, match=r"^user: 'a' is at max_tasks"):
        alloc.launch("a")
    alloc.add_user("b", [2, 1])
    with pytest.raises(ValueError, match=r"^user: 'b': next task does not fit"):
        alloc.launch("b")
    with pytest.raises(ValueError, match=r"^demand\[0\]: demand is zero on every resource"):
        alloc.add_user("c", [0, 0])
    with pytest.raises(ValueError, match=r"^weight: must be > 0"):
        alloc.add_user("c", [1, 0], weight=0)
    with pytest.raises(ValueError, match=r"^demand\[0\]: has 1 entries, expected 2"):
        alloc.add_user("c", [1])
    assert alloc.users == ("a", "b")
    assert alloc.dominant_share("a") == pytest.approx(3 / 4)


# --- precision: weights many orders of magnitude apart ------------------------------------

def test_fluid_tiny_weight_after_a_large_capped_one_gets_exactly_the_rest() -> None:
    # The local queues give a "zero" weight of 1e-9 next to weights of tens of Mcycles/s.
    r = drf([99.0], [[1.0], [1.0]], [32.0, 1e-9], [1, 100], divisible=True)
    assert r.tasks[0] == 1.0
    assert r.tasks[1] == pytest.approx(98.0, rel=1e-12)
    assert r.usage[0] <= 99.0 * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), m=st.integers(1, 3), n=st.integers(1, 8))
def test_fluid_never_exceeds_capacity_with_extreme_weight_ratios(
    data: st.DataObject, m: int, n: int
) -> None:
    capacity = data.draw(st.lists(st.floats(1.0, 1e4), min_size=m, max_size=m))
    demands = [data.draw(st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 100)),
                                  min_size=m, max_size=m)) for _ in range(n)]
    for row in demands:
        if not any(row):
            row[0] = 1.0
    weights = data.draw(st.lists(st.one_of(st.floats(1e-9, 1e-6), st.floats(1.0, 1e3)),
                                 min_size=n, max_size=n))
    caps = data.draw(st.lists(st.one_of(st.none(), st.floats(0, 200)), min_size=n, max_size=n))
    r = drf(capacity, demands, weights, caps, divisible=True)
    for used, c in zip(r.usage, capacity):
        assert used <= c * (1 + 1e-12)
    for x, cap in zip(r.tasks, caps):
        assert 0.0 <= x <= (math.inf if cap is None else cap)


# --- the batched progressive filling against the heap alone --------------------------------

@settings(max_examples=200, deadline=None)
@given(inst=instances(vector_weights=True, max_users=12),
       scale=st.sampled_from([1.0, 7.0, 100.0, 1000.0]),
       min_launches=st.sampled_from([1, 4, 64]))
def test_batched_filling_makes_the_heaps_decisions(inst, scale: float,
                                                   min_launches: int) -> None:
    """numpy batches (forced on every stretch of at least ``min_launches`` launches) give
    the task counts and the resource sums of the heap alone, bit for bit: ties, caps,
    zero demands and refusals included."""
    from fairness.drf import (
        _caps,
        _heap_launches,
        _per_task_share,
        _prepare,
        _progressive_filling,
        _weight_matrix,
    )

    capacity, demands, weights, caps = inst
    cap, dem = _prepare([c * scale for c in capacity], demands)
    n, m = len(dem), len(cap)
    wmat = _weight_matrix(weights, n, m)
    limits = _caps(caps, n)
    delta = [_per_task_share(cap, row, w) for row, w in zip(dem, wmat)]
    tasks, used, alive = [0] * n, [0.0] * m, [c >= 1.0 for c in limits]
    assert _heap_launches(cap, dem, delta, limits, tasks, used, alive, None)
    batched = _progressive_filling(cap, dem, delta, limits, min_users=1,
                                   min_launches=min_launches)
    assert batched == tasks
    assert drf(cap, dem, weights, caps).tasks == tuple(tasks)


def test_batched_filling_on_a_pool_of_thousands_of_tasks() -> None:
    """A round large enough for the default thresholds: 300 users, about 34 tasks each,
    the first resource saturating; batches and heap agree on every count."""
    from fairness.drf import _heap_launches, _per_task_share, _progressive_filling

    rng = random.Random(17)
    dem = tuple((rng.choice([0.5, 1.0, 2.0, 4.0]), rng.choice([1.0, 2.0, 4.0, 8.0]),
                 rng.choice([0.0, 0.1, 0.5])) for _ in range(300))
    cap = (12000.0, 80000.0, 8000.0)
    delta = [_per_task_share(cap, row, (1.0,) * 3) for row in dem]
    limits = [math.inf] * 300
    tasks, used, alive = [0] * 300, [0.0] * 3, [True] * 300
    _heap_launches(cap, dem, delta, limits, tasks, used, alive, None)
    assert sum(tasks) > 2 * 2048  # at least one default-sized batch
    assert _progressive_filling(cap, dem, delta, limits) == tasks
