"""DMFA-SRQ against the seed's LP solved by a real LP solver (scipy's HiGHS).

At every arrival ``k`` the LP is: maximise ``M`` over ``(x_1..x_k, M)`` subject to
``M w_i - x_i <= 0``, ``x_i >= x_i^{k-1}`` (bounds) and ``sum_i x_i d_ij <= W_k`` for every
resource ``j`` (``d`` normalised so its largest entry is 1)."""

from __future__ import annotations

import numpy as np
import pytest
from dmfa_strategies import arrivals
from hypothesis import given, settings

from fairness.dmfa import dmfa_srq

scipy_optimize = pytest.importorskip("scipy.optimize")

pytestmark = pytest.mark.integration

# Tighter than HiGHS' default 1e-7 (absolute), which is coarse against small shares.
HIGHS_OPTIONS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


def lp_level(d: np.ndarray, w: np.ndarray, before: np.ndarray) -> tuple[float, np.ndarray]:
    """Solve the seed's LP for ``k = len(w)`` users with previous allocation ``before``.

    Returns the optimum ``M_k`` and, from a second LP that keeps ``M >= M_k`` and minimises
    ``sum x``, the least allocation reaching it (Lemma 1 says it is
    ``max(M_k w_i, x_i^{k-1})``)."""
    k, m = d.shape
    # Variables: x_1..x_k, M.
    a_fair = np.hstack([-np.eye(k), w[:, None]])            # M w_i - x_i <= 0
    a_pool = np.hstack([d.T, np.zeros((m, 1))])             # sum_i x_i d_ij <= W_k
    a_ub = np.vstack([a_fair, a_pool])
    b_ub = np.concatenate([np.zeros(k), np.full(m, w.sum())])
    bounds = [(float(lo), None) for lo in before] + [(0.0, None)]
    first = scipy_optimize.linprog(
        c=np.concatenate([np.zeros(k), [-1.0]]), A_ub=a_ub, b_ub=b_ub, bounds=bounds,
        method="highs", options=HIGHS_OPTIONS)
    assert first.status == 0, first.message
    level = float(first.x[-1])
    # Slack so that the second LP stays feasible within the solver's tolerances.
    bounds[-1] = (level * (1 - 1e-9), None)
    second = scipy_optimize.linprog(
        c=np.concatenate([np.ones(k), [0.0]]), A_ub=a_ub, b_ub=b_ub, bounds=bounds,
        method="highs", options=HIGHS_OPTIONS)
    assert second.status == 0, second.message
    return level, second.x[:k]


@settings(max_examples=80, deadline=None)
@given(arrivals(max_users=10))
def test_same_level_as_the_lp_at_every_arrival(
    instance: tuple[list[list[float]], list[float]],
) -> None:
    """Given DMFA-SRQ's own history, HiGHS finds the same ``M_k`` (1e-7 relative), and the
    least allocation that reaches it is DMFA-SRQ's."""
    demands, shares = instance
    run = dmfa_srq(demands, shares)
    d = np.array([[v / max(row) for v in row] for row in demands])
    w = np.array(shares)
    before = np.zeros(0)
    for k, alloc in enumerate(run, start=1):
        level, least = lp_level(d[:k], w[:k], np.concatenate([before, [0.0]]))
        assert alloc.level == pytest.approx(level, rel=1e-7)
        assert np.asarray(alloc.dominant_shares) == pytest.approx(least, rel=1e-6, abs=1e-9)
        before = np.asarray(alloc.dominant_shares)


@settings(max_examples=40, deadline=None)
@given(arrivals(max_users=10))
def test_chain_of_lps_matches_dmfa(instance: tuple[list[list[float]], list[float]]) -> None:
    """An independent chain: each LP starts from the previous LP's least allocation, never
    from DMFA-SRQ's. Levels agree at every arrival and allocations never decrease. The
    tolerance is looser than above: the solver's error in one allocation frees (or takes)
    capacity that the next arrival's level magnifies by up to ``W_k / w_k``, along the
    chain."""
    demands, shares = instance
    run = dmfa_srq(demands, shares)
    d = np.array([[v / max(row) for v in row] for row in demands])
    w = np.array(shares)
    before = np.zeros(0)
    for k in range(1, len(shares) + 1):
        level, least = lp_level(d[:k], w[:k], np.concatenate([before, [0.0]]))
        assert run[k - 1].level == pytest.approx(level, rel=1e-6)
        assert np.all(least[:-1] >= before * (1 - 1e-9))
        before = least
