"""DMFA-SRQ (fairness.dmfa): worked examples, the seed's properties on random arrival
sequences, and bad input. The comparison with a real LP solver is in
tests/integration/test_fairness_dmfa_lp.py."""

from __future__ import annotations

import math

import pytest
from dmfa_strategies import arrivals
from hypothesis import given, settings
from hypothesis import strategies as st

from fairness.dmfa import (
    DmfaSrq,
    PoolAllocation,
    allocation_metrics,
    dmfa_srq,
    static_weighted_drf,
)

REL = 1e-9  # floating-point slack for the inequalities the seed proves


def normalised(demand: list[float]) -> list[float]:
    top = max(demand)
    return [v / top for v in demand]


def tasks_from(d_i: list[float], held: list[float]) -> float:
    """N_i(A): how many normalised tasks of demand ``d_i`` the resources ``held`` run."""
    return min(h / v for h, v in zip(held, d_i) if v > 0)


# -- worked examples (computed by hand) ---------------------------------------------------


def test_single_user_gets_exactly_its_share() -> None:
    # With one user, x_1 d_1j <= w_1 and d's dominant entry is 1, so M_1 = 1, x_1 = w_1.
    run = dmfa_srq([[0.2, 0.1]], [0.4])
    final = run.final
    assert final.level == 1.0
    assert final.dominant_shares == pytest.approx((0.4,))
    assert final.tasks == pytest.approx((0.4 / 0.2,))          # 2 real tasks of <0.2, 0.1>
    assert final.usage == pytest.approx((0.4, 0.2))


def test_three_arrivals_by_hand() -> None:
    # d_1 = <0.5, 1>, d_2 = <1, 1/3>, d_3 = <1, 1>; w = 0.3, 0.3, 0.4.
    # k=2: user 1 sits at x=0.3 (b=1); for M>=1 CPU use is 0.15M + 0.3M <= 0.6 -> M=4/3.
    # k=3: at M=1 CPU use is 0.2 + 0.4 + 0.4 = 1.0 = W_3, so M_3 = 1 and users 1, 2 keep 0.4.
    run = dmfa_srq([[0.1, 0.2], [0.3, 0.1], [0.05, 0.05]], [0.3, 0.3, 0.4])
    assert run.levels == pytest.approx((1.0, 4 / 3, 1.0), rel=1e-12)
    assert run[1].dominant_shares == pytest.approx((0.4, 0.4), rel=1e-12)
    assert run.final.dominant_shares == pytest.approx((0.4, 0.4, 0.4), rel=1e-12)
    assert run.final.tasks == pytest.approx((2.0, 4 / 3, 8.0), rel=1e-12)
    assert run.final.usage == pytest.approx((1.0, 0.4 + 0.4 / 3 + 0.4), rel=1e-12)


def test_disjoint_resources_leave_room_the_seed_does_not_hand_out() -> None:
    # User 1 uses only CPU, user 2 only memory; w = 0.3, 0.5. M_2 is bounded by memory:
    # 0.5 M <= 0.8 -> M = 1.6, x = (0.48, 0.8). CPU is used 0.48 of 0.8, and user 1 could
    # take more without hurting anyone: Lemma 1's allocation is only weakly Pareto optimal
    # (some resource is saturated), which is what the seed's Theorem 1 proves.
    final = dmfa_srq([[1.0, 0.0], [0.0, 1.0]], [0.3, 0.5]).final
    assert final.level == pytest.approx(1.6)
    assert final.dominant_shares == pytest.approx((0.48, 0.8))
    assert final.usage == pytest.approx((0.48, 0.8))


def test_metrics() -> None:
    run = dmfa_srq([[0.1, 0.2], [0.3, 0.1], [0.05, 0.05]], [0.3, 0.3, 0.4])
    metrics = allocation_metrics(run.final, run.shares)
    assert metrics.min_dominant_share == pytest.approx(0.4)
    assert metrics.sum_dominant_shares == pytest.approx(1.2)
    assert metrics.min_normalised_share == pytest.approx(1.0)
    assert metrics.utilization == run.final.usage


# -- the online form and the batch form agree --------------------------------------------


@settings(max_examples=60, deadline=None)
@given(arrivals())
def test_online_matches_batch(instance: tuple[list[list[float]], list[float]]) -> None:
    demands, shares = instance
    run = dmfa_srq(demands, shares)
    online = DmfaSrq()
    assert len(run) == len(demands)
    for k, (demand, share) in enumerate(zip(demands, shares), start=1):
        now = online.add_user(demand, share)
        assert isinstance(now, PoolAllocation)
        batch = run.after(k)
        assert now.users == batch.users == k
        assert now.level == batch.level
        assert now.dominant_shares == pytest.approx(batch.dominant_shares, rel=1e-12)
        assert now.tasks == pytest.approx(batch.tasks, rel=1e-12)
        assert now.usage == pytest.approx(batch.usage, rel=1e-9, abs=1e-15)
    assert online.levels == run.levels


# -- the seed's properties ------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(arrivals())
def test_feasible_irrevocable_sharing_incentive_weak_pareto(
    instance: tuple[list[list[float]], list[float]],
) -> None:
    demands, shares = instance
    previous: tuple[float, ...] = ()
    for k, alloc in enumerate(dmfa_srq(demands, shares), start=1):
        available = math.fsum(shares[:k])
        assert alloc.available == pytest.approx(available)
        # Feasible: every resource's use within what the present users brought.
        assert max(alloc.usage) <= available * (1 + REL)
        # Lemma 1 and the LP's first constraint: x_i^k = max(M_k w_i, x_i^{k-1}).
        for i in range(k):
            before = previous[i] if i < len(previous) else 0.0
            assert alloc.dominant_shares[i] == pytest.approx(
                max(alloc.level * shares[i], before), rel=1e-12)
        # Allocations never decrease (irrevocable).
        for i, before in enumerate(previous):
            assert alloc.dominant_shares[i] >= before
        # Sharing incentive (Theorem 2): N_i(A_i^k) >= N_i(w_i * 1) = w_i, i.e. M_k >= 1.
        assert alloc.level >= 1.0
        for i in range(k):
            assert alloc.dominant_shares[i] >= shares[i]
        # Weak dynamic Pareto optimality (Theorem 1): some resource is saturated, so no
        # allocation within W_k of each resource gives every present user more.
        assert max(alloc.usage) >= available * (1 - REL)
        # Real tasks and dominant shares are the same allocation.
        for i in range(k):
            assert alloc.tasks[i] * max(demands[i]) == pytest.approx(alloc.dominant_shares[i])
        previous = alloc.dominant_shares


@settings(max_examples=150, deadline=None)
@given(arrivals())
def test_dynamic_envy_freeness(instance: tuple[list[list[float]], list[float]]) -> None:
    """Dynamic envy-freeness (Kash, Procaccia and Shah, the seed's [5]; weighted as in the
    seed): with ``k`` users present, user ``i`` envies ``h`` when ``h``'s resources scaled
    to ``i``'s share run more of ``i``'s tasks than ``i``'s own:
    ``N_i(A_h^k * w_i / w_h) > N_i(A_i^k)``. DEF holds when every such ``h`` arrived before
    ``i`` and has received nothing since ``i`` arrived (``x_h^k == x_h^{i-1}``). Lemmas 2
    and 3 are checked too: ``x_i / w_i`` never increases along the arrival order."""
    demands, shares = instance
    run = dmfa_srq(demands, shares)
    d = [normalised(row) for row in demands]
    for k, alloc in enumerate(run, start=1):
        x = alloc.dominant_shares
        for i in range(k - 1):
            assert x[i] / shares[i] >= x[i + 1] / shares[i + 1] * (1 - REL)
        for i in range(k):
            own = x[i]  # N_i(x_i d_i) = x_i
            for h in range(k):
                if h == i:
                    continue
                scaled = [x[h] * v * shares[i] / shares[h] for v in d[h]]
                if tasks_from(d[i], scaled) > own * (1 + REL):
                    assert h < i
                    before_i = run.after(i).dominant_shares[h] if i >= 1 else 0.0
                    assert x[h] == before_i


@settings(max_examples=100, deadline=None)
@given(arrivals(max_users=8), st.data())
def test_strategy_proofness_sampled_misreport(
    instance: tuple[list[list[float]], list[float]], data: st.DataObject,
) -> None:
    """No sampled misreport lets a user run more of its true tasks at any arrival
    (Theorem 4): with the allocation ``x'_p d'_p`` it gets for the lie, ``N_p`` under the
    true demand is at most its truthful ``x_p^k``."""
    demands, shares = instance
    n, m = len(demands), len(demands[0])
    liar = data.draw(st.integers(0, n - 1))
    lie = data.draw(st.lists(st.floats(0.001, 1.0), min_size=m, max_size=m))
    truthful = dmfa_srq(demands, shares)
    lied = dmfa_srq(demands[:liar] + [lie] + demands[liar + 1:], shares)
    d_true = normalised(demands[liar])
    d_lie = normalised(lie)
    for k in range(liar + 1, n + 1):
        got = lied.after(k).dominant_shares[liar]
        true_tasks = tasks_from(d_true, [got * v for v in d_lie])
        assert true_tasks <= truthful.after(k).dominant_shares[liar] * (1 + REL)


def test_zero_demand_on_a_resource_is_allowed() -> None:
    final = dmfa_srq([[0.0, 0.5], [0.2, 0.0]], [0.5, 0.5]).final
    assert final.usage[0] == pytest.approx(1.0) or final.usage[1] == pytest.approx(1.0)
    assert min(final.dominant_shares) >= 0.5


def test_run_is_a_sequence() -> None:
    run = dmfa_srq([[0.1, 0.2], [0.3, 0.1], [0.05, 0.05]], [0.3, 0.3, 0.4])
    assert [a.users for a in run] == [1, 2, 3]
    assert run[-1] == run.final
    assert [a.users for a in run[1:]] == [2, 3]
    with pytest.raises(IndexError):
        run[3]
    with pytest.raises(ValueError, match=r"^k: "):
        run.after(0)


# -- the static comparator -----------------------------------------------------------------


def test_static_weighted_drf_by_hand() -> None:
    # Disjoint resources, w = 0.3, 0.5, W = 0.8: weighted levels rise together until memory
    # saturates at x_2 = 0.8 (level 1.6); user 1 then carries on alone until CPU saturates.
    static = static_weighted_drf([[1.0, 0.0], [0.0, 1.0]], [0.3, 0.5])
    assert static.dominant_shares == pytest.approx((0.8, 0.8))
    assert static.level == pytest.approx(1.6)
    assert static.available == pytest.approx(0.8)
    # Same dominant resource, equal shares: CPU is split evenly, 0.5 each.
    static = static_weighted_drf([[0.1, 0.05], [0.2, 0.1]], [0.5, 0.5])
    assert static.dominant_shares == pytest.approx((0.5, 0.5))
    assert static.tasks == pytest.approx((5.0, 2.5))
    assert static.usage == pytest.approx((1.0, 0.5))


@settings(max_examples=100, deadline=None)
@given(arrivals())
def test_static_weighted_drf_is_at_least_as_fair_at_the_end(
    instance: tuple[list[list[float]], list[float]],
) -> None:
    """DMFA-SRQ's final allocation is feasible for the static problem, and static weighted
    DRF maximises ``min_i x_i / w_i`` over those, so its level is at least ``M_n``."""
    demands, shares = instance
    static = static_weighted_drf(demands, shares)
    final = dmfa_srq(demands, shares).final
    available = math.fsum(shares)
    assert max(static.usage) <= available * (1 + REL)
    assert max(static.usage) >= available * (1 - REL)
    assert static.level >= final.level * (1 - REL)
    assert static.level == pytest.approx(
        allocation_metrics(static, shares).min_normalised_share)


def test_static_weighted_drf_bad_input() -> None:
    with pytest.raises(ValueError, match=r"^shares: sum to"):
        static_weighted_drf([[0.1, 0.2], [0.2, 0.1]], [0.6, 0.6])
    with pytest.raises(ValueError, match=r"^demands\[1\]\[0\]: must be >= 0"):
        static_weighted_drf([[0.1, 0.2], [-0.2, 0.1]], [0.4, 0.4])


# -- the registry hook -----------------------------------------------------------------------


def test_registry_policy_on_the_drf_paper_example() -> None:
    # 9 CPU, 18 GB; A <1 CPU, 4 GB>, B <3 CPU, 1 GB>; equal shares. Pool fractions: d_A =
    # <1/2, 1>, d_B = <1, 1/6>. A alone gets x = 1/2; with B, CPU binds: 0.25 M + 0.5 M = 1,
    # M = 4/3, x = 2/3 each: 3 and 2 tasks, as DRF.
    from fairness.registry import allocate

    result = allocate("dmfa_srq", [9, 18], [[1, 4], [3, 1]])
    assert result.tasks == pytest.approx((3.0, 2.0))
    assert result.dominant_shares == pytest.approx((2 / 3, 2 / 3))
    assert result.usage == pytest.approx((9.0, 14.0))
    # Weights 1 : 3 -> shares 1/4, 3/4: A gets 1/4; then 0.125 M + 0.75 M = 1, M = 8/7.
    weighted = allocate("dmfa_srq", [9, 18], [[1, 4], [3, 1]], weights=[1, 3])
    assert weighted.dominant_shares == pytest.approx((2 / 7, 6 / 7))
    assert weighted.weighted_shares == pytest.approx((2 / 7, 2 / 7))


def test_registry_policy_refuses_what_it_cannot_do() -> None:
    from fairness.dmfa import dmfa_srq_policy

    with pytest.raises(ValueError, match=r"^max_tasks\[1\]: the policy dmfa_srq"):
        dmfa_srq_policy([9, 18], [[1, 4], [3, 1]], max_tasks=[None, 2])
    with pytest.raises(ValueError, match=r"^weights\[0\]: dmfa_srq takes one scalar"):
        dmfa_srq_policy([9, 18], [[1, 4], [3, 1]], weights=[[1, 2], [1, 1]])  # type: ignore
    with pytest.raises(ValueError, match=r"^demands\[1\]\[0\]: 10\.0 exceeds capacity"):
        dmfa_srq_policy([9, 18], [[1, 4], [10, 1]])
    with pytest.raises(ValueError, match=r"^weights\[1\]: must be > 0"):
        dmfa_srq_policy([9, 18], [[1, 4], [3, 1]], weights=[1, 0])
    with pytest.raises(ValueError, match=r"^capacity\[1\]: must be > 0"):
        dmfa_srq_policy([9, 0], [[1, 4], [3, 1]])


# -- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("demands", "shares", "message"),
    [
        ([[0.1, -0.2]], [0.5], r"^demands\[0\]\[1\]: must be >= 0"),
        ([[0.1, 0.2], [0.1, float("nan")]], [0.5, 0.5], r"^demands\[1\]\[1\]: is NaN"),
        ([[0.1, 0.2], [0.1, 1.5]], [0.5, 0.5], r"^demands\[1\]\[1\]: must be <= 1"),
        ([[0.1, 0.2], [0.0, 0.0]], [0.5, 0.5], r"^demands\[1\]: demand is zero"),
        ([[0.1, 0.2], [0.1]], [0.5, 0.5], r"^demands\[1\]: has 1 entries, expected 2"),
        ([], [], r"^demands: must not be empty"),
        ([[0.1, 0.2]], [0.5, 0.5], r"^shares: has 2 entries, expected 1"),
        ([[0.1, 0.2], [0.2, 0.1]], [0.5, 0.0], r"^shares\[1\]: must be > 0"),
        ([[0.1, 0.2], [0.2, 0.1]], [0.5, -0.1], r"^shares\[1\]: must be > 0"),
        ([[0.1, 0.2], [0.2, 0.1]], [0.6, 0.6], r"^shares: sum to 1\.2"),
        ([[0.1, 0.2], [0.2, 0.1]], [0.5, math.inf], r"^shares\[1\]: must be finite"),
        ("ab", [0.5], r"^demands: must be a sequence"),
    ],
)
def test_bad_input_names_argument_and_index(
    demands: object, shares: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        dmfa_srq(demands, shares)  # type: ignore[arg-type]


def test_online_bad_input() -> None:
    online = DmfaSrq()
    online.add_user([0.1, 0.2], 0.7)
    with pytest.raises(ValueError, match=r"^demand: has 3 entries, expected 2"):
        online.add_user([0.1, 0.2, 0.3], 0.1)
    with pytest.raises(ValueError, match=r"^share: the shares of all users would sum to"):
        online.add_user([0.1, 0.2], 0.4)
    with pytest.raises(ValueError, match=r"^demand\[0\]: must be >= 0"):
        online.add_user([-0.1, 0.2], 0.1)
    # A refused arrival leaves the state alone.
    assert online.users == 1
    assert online.add_user([0.2, 0.1], 0.3).users == 2
    with pytest.raises(ValueError, match=r"^n_resources: must be >= 1"):
        DmfaSrq(0)
    with pytest.raises(ValueError, match=r"^allocation: no user"):
        DmfaSrq(2).allocation()


def _sorted_bisection_level(b, wd, available: float) -> float:
    """The plain form of the solver (without the sums row by row and the breakpoints read
    one at a time): one ``(k, m)`` matrix, ``g`` at each
    visited breakpoint by numpy. The oracle for the bytes of the levels."""
    np = pytest.importorskip("numpy")
    order = np.argsort(b, kind="stable")
    bs, wds = b[order], wd[order]
    prefix = np.cumsum(wds, axis=0)
    suffix = np.cumsum((bs[:, None] * wds)[::-1], axis=0)[::-1]
    rest = np.zeros_like(suffix)
    rest[:-1] = suffix[1:]
    lo, hi = 0, len(bs) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if float(np.max(bs[mid] * prefix[mid] + rest[mid])) <= available:
            lo = mid
        else:
            hi = mid - 1
    slope, room = prefix[lo], available - rest[lo]
    level = float(np.min(room[slope > 0.0] / slope[slope > 0.0]))
    level = max(level, float(bs[lo]))
    if lo + 1 < len(bs):
        level = min(level, float(bs[lo + 1]))
    return max(level, 1.0)


@settings(max_examples=150, deadline=None)
@given(arrivals(max_users=40), st.booleans())
def test_levels_are_the_first_solvers_bit_for_bit(
    instance: tuple[list[list[float]], list[float]], coarse: bool
) -> None:
    """Every ``M_k`` equals, to the last bit, what the one-matrix solver computes from the
    same state; ``coarse`` rounds demands to quarters so that breakpoints tie often."""
    np = pytest.importorskip("numpy")
    demands, shares = instance
    if coarse:
        demands = [[math.ceil(v * 4) / 4 for v in row] for row in demands]
    levels = dmfa_srq(demands, shares).levels
    m = len(demands[0])
    b, wd, available = np.zeros(0), np.zeros((0, m)), 0.0
    for k, (row, w) in enumerate(zip(demands, shares)):
        scale = max(row)
        b = np.append(b, 0.0)
        wd = np.vstack([wd, [w * (v / scale) for v in row]])
        available += w
        level = _sorted_bisection_level(b, wd, available)
        assert level == levels[k]
        b = np.maximum(b, level)
