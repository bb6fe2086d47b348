"""The alternatives to DRF that the papers compare it with (section 5 of the DRF paper,
section 3.5 of the thesis); both divisible.

* :func:`asset_fairness`: max-min fairness on aggregate shares ``a_i = sum_j x_i d_ij / C_j``
  (1% of every resource is worth the same). Paper example (9 CPU, 18 GB; A <1, 4>,
  B <3, 1>): ``x = 2.52``, ``y = 2.16``. Breaks sharing incentive.
* :func:`ceei`: Competitive Equilibrium from Equal Incomes, computed as the Nash
  bargaining solution over dominant shares: maximise ``sum_i w_i log x_i`` (equivalently
  the product of the dominant shares, which are proportional to ``x_i``) subject to
  ``sum_i x_i d_ij <= C_j``. Paper example: ``x = 45/11``, ``y = 18/11``. Breaks
  strategy-proofness.

Units as in :mod:`fairness.drf`: capacity in resource units, demands in resource units per
task, allocations in tasks (real numbers); results are :class:`fairness.drf.DrfResult`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from fairness._validate import positive_vector
from fairness.drf import DrfResult, _caps, _fluid_filling, _prepare, _result, _weight_matrix

__all__ = ["CEEI_MAX_RESOURCES", "asset_fairness", "ceei"]

#: :func:`ceei` enumerates the sets of saturated resources: at most ``2**m - 1`` of them.
CEEI_MAX_RESOURCES = 16


def asset_fairness(
    capacity: Sequence[float],
    demands: Sequence[Sequence[float]],
    weights: Sequence[float] | None = None,
    max_tasks: Sequence[float | None] | None = None,
) -> DrfResult:
    """Asset fairness: lexicographic max-min of aggregate shares, divisible tasks.

    User ``i`` with ``x_i`` tasks holds the aggregate share ``a_i = x_i sum_j d_ij / C_j``
    (dimensionless; with weights, ``a_i / w_i`` is equalised). All users' aggregate shares
    rise together (continuous progressive filling, as in :func:`fairness.drf.drf` with
    ``divisible=True``); a user freezes when it reaches ``max_tasks`` or a resource it
    needs saturates.

    Args:
        capacity: ``C_j`` (resource units, > 0).
        demands: ``d_ij`` (resource units per task, >= 0, not all zero for a user).
        weights: scalar weight per user (> 0); ``None`` means all equal.
        max_tasks: per-user cap on tasks (``None`` entries unbounded).

    Returns:
        A :class:`~fairness.drf.DrfResult` with real task counts (exact up to float
        rounding, relative 1e-12).

    Raises:
        ValueError: naming argument and index, as :func:`fairness.drf.drf`.
    """
    cap, dem = _prepare(capacity, demands)
    n, m = len(dem), len(cap)
    w = (1.0,) * n if weights is None else positive_vector(
        "weights", weights, n, "one per user in demands")
    caps = _caps(max_tasks, n)
    per_task = [math.fsum(v / c for v, c in zip(row, cap)) / wi for row, wi in zip(dem, w)]
    tasks = _fluid_filling(cap, dem, per_task, caps)
    return _result(cap, dem, tasks, _weight_matrix(None, n, m))


# --- CEEI: Nash bargaining by exact KKT enumeration ------------------------------------

# Damped Newton iterations per candidate set (a bounded restricted dual converges in a
# few dozen; an unbounded one is given up on at the cap).
_NEWTON_STEPS = 300
# The dual gradient on a priced resource is its relative slack 1 - usage_j / C_j.
_SLACK_DONE = 1e-15  # stop: as tight as float sums get
_SLACK_OK = 1e-10  # accept a stagnated iteration only this close to saturation
# A saturated-set candidate is accepted when the resources outside it are used at most
# this much above capacity (relative), and every price in it is positive.
_FEASIBLE_TOL = 1e-9


def _cholesky_solve(h: list[list[float]], g: list[float]) -> list[float] | None:
    """Solve ``h z = g`` for a symmetric positive definite ``h``; ``None`` when ``h`` is
    (numerically) singular."""
    k = len(g)
    low = [[0.0] * k for _ in range(k)]
    scale = max((h[i][i] for i in range(k)), default=0.0)
    for i in range(k):
        for j in range(i + 1):
            s = h[i][j] - math.fsum(low[i][t] * low[j][t] for t in range(j))
            if i == j:
                if s <= 1e-13 * scale:
                    return None
                low[i][i] = math.sqrt(s)
            else:
                low[i][j] = s / low[j][j]
    y = [0.0] * k
    for i in range(k):
        y[i] = (g[i] - math.fsum(low[i][t] * y[t] for t in range(i))) / low[i][i]
    z = [0.0] * k
    for i in reversed(range(k)):
        z[i] = (y[i] - math.fsum(low[t][i] * z[t] for t in range(i + 1, k))) / low[i][i]
    return z


def _dual_on(
    shares: list[list[float]], weights: Sequence[float], subset: tuple[int, ...]
) -> list[float] | None:
    """Minimise ``h(p) = sum_{j in S} p_j - sum_i w_i log(sum_{j in S} a_ij p_j)`` by damped
    Newton; return the prices ``p`` (one per resource in ``subset``) or ``None`` when the
    restricted problem has no interior minimum (singular, unbounded or not converged).

    The weights are scaled so that the smallest is 1: then ``h`` is self-concordant, and the
    damped step ``1 / (1 + lambda)`` (``lambda`` the Newton decrement) stays inside the
    domain and decreases ``h`` without a line search; full steps once ``lambda < 1/4``
    converge quadratically. Scaling the weights scales the prices and leaves ``x`` as is.
    """
    k = len(subset)
    a = [[row[j] for j in subset] for row in shares]
    w_min = min(weights)
    w = [wi / w_min for wi in weights]
    total_w = math.fsum(w)
    p = [total_w / k] * k  # sum_j p_j equals the total weight at the optimum
    best, stale = math.inf, 0
    for _ in range(_NEWTON_STEPS):
        q = [math.fsum(v * pj for v, pj in zip(row, p)) for row in a]
        if any(qi <= 0.0 for qi in q):  # pragma: no cover - the damped step prevents it
            return None
        grad = [1.0 - math.fsum(wi * row[j] / qi for row, wi, qi in zip(a, w, q))
                for j in range(k)]
        slack = max(abs(g) for g in grad)
        if slack <= _SLACK_DONE:
            return [pj * w_min for pj in p]
        if slack < best:
            best, stale = slack, 0
        else:
            stale += 1
            if stale >= 3:  # float arithmetic cannot do better
                return [pj * w_min for pj in p] if best <= _SLACK_OK else None
        hess = [[math.fsum(wi * row[r] * row[c] / (qi * qi) for row, wi, qi in zip(a, w, q))
                 for c in range(k)] for r in range(k)]
        step = _cholesky_solve(hess, grad)
        if step is None:
            return None
        lam = math.sqrt(max(math.fsum(g * z for g, z in zip(grad, step)), 0.0))
        t = 1.0 if lam < 0.25 else 1.0 / (1.0 + lam)
        p = [pj - t * z for pj, z in zip(p, step)]
        if max(abs(pj) for pj in p) > 1e9 * total_w:
            return None  # running away: a valid optimum has 0 < p_j <= total weight
    return None


def ceei(
    capacity: Sequence[float],
    demands: Sequence[Sequence[float]],
    weights: Sequence[float] | None = None,
) -> DrfResult:
    """CEEI as the Nash bargaining solution over dominant shares, divisible tasks.

    Maximises ``sum_i w_i log x_i`` subject to ``sum_i x_i d_ij <= C_j`` for every
    resource ``j`` (``x_i`` in tasks). The optimum is unique; its KKT conditions give
    ``x_i = w_i / sum_j p_j d_ij / C_j`` with prices ``p_j >= 0`` positive only on saturated
    resources. The solver enumerates the candidate sets ``S`` of saturated resources
    (smallest first), minimises the convex dual ``sum_{j in S} p_j - sum_i w_i log(...)``
    on ``S`` by damped Newton to float precision, and returns the first ``S`` whose prices
    are all positive and whose other resources are not over-used: that is the exact KKT
    point. Accuracy: task counts to about 1e-12 relative; resources may be used up to
    1e-9 relative above capacity. Cost: at most ``2**m - 1`` small Newton solves of
    ``O(n m^2)`` each, hence the limit :data:`CEEI_MAX_RESOURCES` on ``m``. Per-user caps
    are not part of the paper's CEEI and are not supported.

    Args:
        capacity: ``C_j`` (resource units, > 0).
        demands: ``d_ij`` (resource units per task, >= 0, not all zero for a user).
        weights: ``w_i`` (> 0; unequal incomes); ``None`` means equal incomes.

    Returns:
        A :class:`~fairness.drf.DrfResult` with real task counts.

    Raises:
        ValueError: naming argument and index, as :func:`fairness.drf.drf`, or more than
            :data:`CEEI_MAX_RESOURCES` resources.
    """
    cap, dem = _prepare(capacity, demands)
    n, m = len(dem), len(cap)
    if m > CEEI_MAX_RESOURCES:
        raise ValueError(f"capacity: ceei supports at most {CEEI_MAX_RESOURCES} resources, "
                         f"got {m}")
    w = (1.0,) * n if weights is None else positive_vector(
        "weights", weights, n, "one per user in demands")
    wmat = _weight_matrix(None, n, m)
    if n == 0:
        return _result(cap, dem, [], wmat)
    shares = [[v / c for v, c in zip(row, cap)] for row in dem]  # a_ij: pool fraction/task
    for size in range(1, m + 1):
        for subset in itertools.combinations(range(m), size):
            # Every user must need a priced resource, or it would grow without bound.
            if any(all(row[j] == 0.0 for j in subset) for row in shares):
                continue
            p = _dual_on(shares, w, subset)
            if p is None or any(pj <= 0.0 for pj in p):
                continue
            x = [wi / math.fsum(row[j] * pj for j, pj in zip(subset, p))
                 for row, wi in zip(shares, w)]
            if all(math.fsum(xi * row[j] for xi, row in zip(x, shares)) <= 1.0 + _FEASIBLE_TOL
                   for j in range(m) if j not in subset):
                return _result(cap, dem, x, wmat)
    raise ArithmeticError("ceei: no saturated-resource set satisfied the KKT conditions "
                          "(numerically degenerate input)")  # pragma: no cover
