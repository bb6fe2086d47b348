"""Single-resource fairness: FMMF (weighted max-min), proportional and utility max-min."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairness.single import max_min_fair, proportional_fair, utility_max_min

TOL = 1e-9


# --- worked examples (the thesis gives FMMF as pseudo-code; these follow it by hand) ----

def test_fmmf_textbook_example() -> None:
    # R = 10, demands 2, 2.6, 4, 5 (the max-min example of Bertsekas and Gallager and of
    # Keshav, the thesis' refs [1, 2]): 10/4 = 2.5 >= 2 -> 2; 8/3 = 2.67 >= 2.6 -> 2.6;
    # the last two share 5.4: 2.7 each.
    assert max_min_fair(10, [2, 2.6, 4, 5]) == pytest.approx((2, 2.6, 2.7, 2.7))


def test_fmmf_weighted_example() -> None:
    # R = 16, d = (2, 2.6, 4, 5, 10), w = (1, 2, 1, 1, 2): normalised demands d/w =
    # (2, 1.3, 4, 5, 5). Level 16/7 = 2.29 >= 1.3 -> 2.6; 13.4/5 = 2.68 >= 2 -> 2;
    # 11.4/4 = 2.85 < 4: the rest get 2.85 per unit of weight.
    got = max_min_fair(16, [2, 2.6, 4, 5, 10], [1, 2, 1, 1, 2])
    assert got == pytest.approx((2, 2.6, 2.85, 2.85, 5.7))


def test_everyone_satisfied_when_capacity_suffices() -> None:
    assert max_min_fair(100, [1, 2, 3]) == (1.0, 2.0, 3.0)
    assert max_min_fair(1, []) == ()


def test_equal_split_when_demands_exceed() -> None:
    assert max_min_fair(9, [10, 10, 10]) == pytest.approx((3, 3, 3))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: max_min_fair(0, [1]), r"^capacity: must be > 0"),
        (lambda: max_min_fair(10, [1, -1]), r"^demands\[1\]: must be >= 0"),
        (lambda: max_min_fair(10, [1, math.nan]), r"^demands\[1\]: is NaN"),
        (lambda: max_min_fair(10, [1, 2], [1]), r"^weights: has 1 entries, expected 2"),
        (lambda: max_min_fair(10, [1, 2], [1, 0]), r"^weights\[1\]: must be > 0"),
        (lambda: proportional_fair(10, [1, 2], [1, -1]), r"^weights\[1\]: must be > 0"),
        (lambda: utility_max_min(10, [1, 2], [abs]), r"^utilities: has 1 entries"),
        (lambda: utility_max_min(10, [1], [3]), r"^utilities\[0\]: must be callable"),
    ],
)
def test_bad_input(call, message) -> None:
    with pytest.raises(ValueError, match=message):
        call()


# --- properties of weighted max-min ---------------------------------------------------

demand_lists = st.lists(st.floats(0, 50, allow_nan=False), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(cap=st.floats(0.1, 100), data=st.data(), d=demand_lists)
def test_max_min_definition(cap: float, data: st.DataObject, d: list[float]) -> None:
    w = data.draw(st.lists(st.floats(0.1, 10), min_size=len(d), max_size=len(d)))
    a = max_min_fair(cap, d, w)
    assert all(-TOL <= ai <= di + TOL for ai, di in zip(a, d))
    assert math.fsum(a) == pytest.approx(min(cap, math.fsum(d)), rel=1e-9, abs=1e-9)
    # Max-min: an unsatisfied user's a_i / w_i is the largest ratio of all users.
    top = max(ai / wi for ai, wi in zip(a, w))
    for ai, di, wi in zip(a, d, w):
        if ai < di - 1e-9:
            assert ai / wi == pytest.approx(top, rel=1e-9)


@pytest.mark.integration
@settings(max_examples=60, deadline=None)
@given(cap=st.floats(1, 100), data=st.data(),
       d=st.lists(st.floats(0.5, 50), min_size=1, max_size=8))
def test_proportional_fair_against_scipy(cap: float, data: st.DataObject, d: list[float]) -> None:
    """Compare the objective sum w_i log a_i with scipy's SLSQP (reference optimiser)."""
    np = pytest.importorskip("numpy")
    optimize = pytest.importorskip("scipy.optimize")
    w = data.draw(st.lists(st.floats(0.2, 5), min_size=len(d), max_size=len(d)))
    a = proportional_fair(cap, d, w)
    assert math.fsum(a) <= cap * (1 + 1e-12) and all(ai <= di + TOL for ai, di in zip(a, d))

    def neg(x):
        return -float(np.dot(w, np.log(np.maximum(x, 1e-300))))

    start = np.array(d) * min(1.0, cap / sum(d)) * 0.5
    ref = optimize.minimize(
        neg, start, method="SLSQP", bounds=[(1e-12, di) for di in d],
        constraints=[{"type": "ineq", "fun": lambda x: cap - np.sum(x)}],
        options={"ftol": 1e-13, "maxiter": 500})
    # Ours is at least as good as the reference (up to its tolerance) and feasible.
    assert neg(np.array(a)) <= ref.fun + 1e-7


# --- utility max-min ---------------------------------------------------------------------

def test_utility_max_min_linear_is_max_min() -> None:
    d, w = [2, 2.6, 4, 5, 10], [1, 2, 1, 1, 2]
    lin = [lambda a: a] * 5
    assert utility_max_min(16, d, lin, w) == pytest.approx(max_min_fair(16, d, w), rel=1e-9)


def test_utility_max_min_equalises_concave_utilities() -> None:
    # U_A(a) = a, U_B(a) = 2a: B needs half as much per utility level; R = 3 ->
    # t + t/2 = 3 -> t = 2: A gets 2, B gets 1, both at utility 2.
    got = utility_max_min(3, [10, 10], [lambda a: a, lambda a: 2 * a])
    assert got == pytest.approx((2, 1), rel=1e-9)


def test_utility_max_min_real_time_step_utility() -> None:
    # Two real-time flows need 3 units to get any utility (step to 1) and an elastic
    # flow log(1 + a). R = 10: the steps fit (3 + 3) and the elastic flow gets the other 4.
    step = lambda a: 1.0 if a >= 3 else 0.0  # noqa: E731
    got = utility_max_min(10, [5, 5, 5], [step, step, math.log1p])
    assert got == pytest.approx((3, 3, 4), rel=1e-9)
    # R = 5: both steps cannot fit; they are held back (deterministic choice) and the
    # elastic flow, which is not the obstacle, gets everything it can use.
    got = utility_max_min(5, [5, 5, 5], [step, step, math.log1p])
    assert got == pytest.approx((0, 0, 5), rel=1e-9, abs=1e-9)


def test_utility_max_min_saturated_user_takes_no_more() -> None:
    # U(a) = min(a, 1): past 1 the utility is saturated, so nobody gets more than 1 even
    # though demands are 5: capacity stays unused (documented choice).
    sat = lambda a: min(a, 1.0)  # noqa: E731
    assert utility_max_min(10, [5, 5, 5], [sat] * 3) == pytest.approx((1, 1, 1))


@settings(max_examples=60, deadline=None)
@given(cap=st.floats(1, 50), d=st.lists(st.floats(0.1, 20), min_size=1, max_size=6),
       data=st.data())
def test_utility_max_min_levels_are_max_min(cap: float, d: list[float],
                                            data: st.DataObject) -> None:
    """Concave increasing utilities c_i * sqrt(a): the utility levels are max-min fair."""
    c = data.draw(st.lists(st.floats(0.2, 5), min_size=len(d), max_size=len(d)))
    utils = [lambda a, ci=ci: ci * math.sqrt(a) for ci in c]
    a = utility_max_min(cap, d, utils)
    assert math.fsum(a) <= cap * (1 + 1e-9)
    levels = [u(ai) for u, ai in zip(utils, a)]
    top = max(levels)
    for ai, di, lv in zip(a, d, levels):
        if ai < di * (1 - 1e-7):
            assert lv == pytest.approx(top, rel=1e-6)
