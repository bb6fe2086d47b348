"""Fair shares of one divisible resource (the thesis' chapter 2).

Three notions, all with per-user demand caps and optional weights:

* :func:`max_min_fair` -- weighted max-min fairness, the thesis' ``FMMF(R, d, w)``
  (water filling: users are served in increasing order of normalised demand ``d_i / w_i``;
  a user whose normalised demand is below the current fair level gets its whole demand,
  the rest share what is left in proportion to their weights).
* :func:`proportional_fair` -- maximises ``sum_i w_i log a_i`` subject to ``a_i <= d_i`` and
  ``sum_i a_i <= R``.
* :func:`utility_max_min` -- max-min fairness on utility levels, for non-decreasing utility
  functions (Cao and Zegura's utility max-min, the thesis' ``FUMMF``).

Units: ``capacity`` and every demand and allocation are in the resource's own unit (CPU
cores, Mcycles/s, GB, ...), the same for all of them; weights are dimensionless relative
entitlements (only their ratios matter); utilities are whatever the utility callables return.
Results are tuples of floats in the order of the input.

These functions run on every scheduling cycle of the local queues with a handful of
entries, so they are plain Python (no numpy) and ``O(n log n)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from fairness._validate import nonneg_vector, positive_scalar, positive_vector

__all__ = ["max_min_fair", "proportional_fair", "utility_max_min", "water_fill"]


def _weights(weights: Sequence[float] | None, n: int) -> tuple[float, ...]:
    if weights is None:
        return (1.0,) * n
    return positive_vector("weights", weights, n, "one per entry of demands")


def _water_fill(capacity: float, d: tuple[float, ...], w: tuple[float, ...]) -> tuple[float, ...]:
    """Weighted water filling on validated input (the core of FMMF)."""
    n = len(d)
    if sum(d) <= capacity:
        return d
    ratio = [a / b for a, b in zip(d, w)]
    order = sorted(range(n), key=ratio.__getitem__)
    # Weight of the users from position k on, summed from the back: subtracting served
    # weights from the total would leave a tiny weight after large ones as a difference of
    # large numbers, and the shares would overshoot the capacity.
    weight_from = [0.0] * (n + 1)
    for k in range(n - 1, -1, -1):
        weight_from[k] = weight_from[k + 1] + w[order[k]]
    alloc = [0.0] * n
    remaining = capacity
    for k, i in enumerate(order):
        weight_left = weight_from[k]
        # d_i / w_i <= remaining / weight_left, multiplied out to avoid a division.
        if d[i] * weight_left <= remaining * w[i]:
            alloc[i] = d[i]
            remaining -= d[i]
        else:
            level = remaining / weight_left  # resource units per unit of weight
            for j in order[k:]:
                alloc[j] = w[j] * level
            break
    return tuple(alloc)


def max_min_fair(
    capacity: float,
    demands: Sequence[float],
    weights: Sequence[float] | None = None,
) -> tuple[float, ...]:
    """Weighted max-min fair shares of one resource (the thesis' FMMF, eq. 2.1).

    Args:
        capacity: ``R``, the amount of the resource to share (resource units, > 0).
        demands: ``d_i``, what user ``i`` asks for (resource units, >= 0). Nobody gets more.
        weights: ``w_i`` (> 0, dimensionless); ``None`` means all equal. Users that are not
            satisfied get allocations proportional to their weights.

    Returns:
        ``a_i`` (resource units) in input order. ``sum a_i = min(R, sum d_i)`` up to rounding;
        the allocation is the unique one in which no user can get more without taking from a
        user whose allocation-to-weight ratio is not larger.

    Raises:
        ValueError: naming the argument and index of a NaN, infinite or negative value, a
            non-positive capacity or weight, or a ``weights`` of the wrong length.
    """
    cap = positive_scalar("capacity", capacity)
    d = nonneg_vector("demands", demands)
    return _water_fill(cap, d, _weights(weights, len(d)))


def proportional_fair(
    capacity: float,
    demands: Sequence[float],
    weights: Sequence[float] | None = None,
) -> tuple[float, ...]:
    """Weighted proportional fairness on one resource (the thesis' FPF, eq. 2.4).

    Maximises ``sum_i w_i log a_i`` subject to ``0 <= a_i <= d_i`` and ``sum_i a_i <= R``
    (users with ``d_i = 0`` get 0 and are left out of the objective).

    On a single resource the KKT conditions of this problem read ``w_i / a_i = mu + nu_i``
    with ``nu_i > 0`` only where ``a_i = d_i``, i.e. ``a_i = min(d_i, w_i / mu)`` with ``mu``
    set so that the resource is used up (or every demand met). That is exactly the weighted
    water-filling level of :func:`max_min_fair`, so the two coincide on one resource (they
    differ on networks of several resources, where proportional fairness favours users that
    cross fewer bottlenecks). The function exists so configurations can name the notion they
    mean; tests check it against a general-purpose optimiser.

    Args:
        capacity: ``R`` (resource units, > 0).
        demands: ``d_i`` (resource units, >= 0).
        weights: ``w_i`` (> 0, dimensionless); ``None`` means all equal.

    Returns:
        ``a_i`` (resource units) in input order.

    Raises:
        ValueError: as :func:`max_min_fair`.
    """
    cap = positive_scalar("capacity", capacity)
    d = nonneg_vector("demands", demands)
    return _water_fill(cap, d, _weights(weights, len(d)))


# Bisection steps: 2**-200 of the initial bracket is far below float resolution, and the
# loops also stop as soon as the midpoint no longer moves.
_BISECTION_STEPS = 200


# Growth over a float-width bracket of the level larger than this fraction of the capacity
# is a jump of the allocation (a discontinuous utility), not continuous filling.
_JUMP = 1e-9


def _least_amount(utility: Callable[[float], float], level: float, cap: float) -> float:
    """Least ``a`` in ``[0, cap]`` with ``utility(a) >= level``; ``cap`` if there is none.

    ``utility`` is non-decreasing, so the set is an interval ``[a*, cap]`` (closed on the
    left when the utility is right-continuous; otherwise the infimum is returned, which is
    the limit the allocation tends to)."""
    if utility(0.0) >= level:
        return 0.0
    if utility(cap) < level:
        return cap
    lo, hi = 0.0, cap  # utility(lo) < level <= utility(hi)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if utility(mid) >= level:
            hi = mid
        else:
            lo = mid
    return hi


def utility_max_min(
    capacity: float,
    demands: Sequence[float],
    utilities: Sequence[Callable[[float], float]],
    weights: Sequence[float] | None = None,
) -> tuple[float, ...]:
    """Utility max-min fairness on one resource (the thesis' FUMMF, eq. 2.2).

    Raises a common utility level ``t`` for all users: user ``i`` gets the least amount
    ``a_i(t)`` in ``[0, d_i]`` whose utility reaches ``min(w_i * t, U_i(d_i))``. The largest
    feasible ``t`` (``sum a_i(t) <= R``) is found by bisection. When a utility has a jump
    (e.g. a real-time flow's step utility) and the jump does not fit, the users whose
    allocation would jump are frozen below the jump and the others keep rising with what is
    left; this repeats until nobody can rise (lexicographic max-min of utility levels, with
    the deterministic choice that jumpers that do not all fit are all held back).
    A user never gets resource that raises nothing: once its utility is saturated
    (``U_i(d_i)`` reached) it stops at the least amount achieving it, so capacity may stay
    unused even when demands exceed it. With the same linear utility for every user this is
    :func:`max_min_fair`.

    Args:
        capacity: ``R`` (resource units, > 0).
        demands: ``d_i`` (resource units, >= 0): nobody gets more.
        utilities: ``U_i``, one non-decreasing callable per user mapping an amount (resource
            units) to a utility (any unit common to all users, e.g. normalised to [0, 1]).
            Monotonicity is assumed, not checked.
        weights: ``w_i`` (> 0); user ``i`` aims at utility ``w_i * t``. ``None``: all 1.

    Returns:
        ``a_i`` (resource units) in input order. Accuracy: the level is located to float
        resolution (bisection to 200 halvings or until the midpoint stops moving); the sum
        of the allocations may exceed ``R`` by at most ``1e-12 * R`` (rounding slack).

    Raises:
        ValueError: as :func:`max_min_fair`, plus ``utilities`` of the wrong length or
            with a non-callable entry, or a utility returning NaN.
    """
    cap = positive_scalar("capacity", capacity)
    d = nonneg_vector("demands", demands)
    n = len(d)
    if len(utilities) != n:
        raise ValueError(
            f"utilities: has {len(utilities)} entries, expected {n} (one per entry of demands)")
    for i, u in enumerate(utilities):
        if not callable(u):
            raise ValueError(f"utilities[{i}]: must be callable, got {u!r}")
    w = _weights(weights, n)
    top = [float(u(di)) for u, di in zip(utilities, d)]  # U_i(d_i): saturation utility
    for i, value in enumerate(top):
        if math.isnan(value):
            raise ValueError(f"utilities[{i}]: returned NaN at the demand {d[i]!r}")

    base = [float(u(0.0)) for u in utilities]  # U_i(0)

    def amount(i: int, level: float) -> float:
        return _least_amount(utilities[i], min(w[i] * level, top[i]), d[i])

    # Rounding in the bisection can leave a frozen user a few ulps above its exact amount;
    # without this slack the next round would see the capacity as a few ulps short and
    # wrongly freeze users at zero. Relative 1e-12 of the capacity.
    slack = cap * 1e-12
    alloc = [0.0] * n
    active = list(range(n))
    remaining = cap
    while active:
        # Level at which every active user is saturated: beyond it nothing changes.
        t_hi = max(top[i] / w[i] for i in active)
        total_hi = math.fsum(amount(i, t_hi) for i in active)
        if total_hi <= remaining + slack:
            for i in active:
                alloc[i] = amount(i, t_hi)
            break
        # At this level every active user's target is at most U_i(0): all amounts are 0.
        t_lo = min(base[i] / w[i] for i in active)
        # Invariant: sum a(t_lo) <= remaining < sum a(t_hi).
        for _ in range(_BISECTION_STEPS):
            mid = 0.5 * (t_lo + t_hi)
            if mid <= t_lo or mid >= t_hi:
                break
            if math.fsum(amount(i, mid) for i in active) <= remaining + slack:
                t_lo = mid
            else:
                t_hi = mid
        low = {i: amount(i, t_lo) for i in active}
        growth = {i: amount(i, t_hi) - low[i] for i in active}
        # Users whose allocation grows just past t_lo block the level. If some of them jump
        # (a utility discontinuity: the growth over the float-width bracket is not
        # negligible), only the jumpers freeze, below their jump, and the others keep
        # rising with what is left; if the capacity was reached continuously, every
        # growing user freezes. Saturated users and users on a flat stretch rise further.
        jumpers = [i for i in active if growth[i] > _JUMP * cap]
        blocking = jumpers or [i for i in active if growth[i] > 0.0]
        for i in blocking:
            alloc[i] = low[i]
            remaining -= low[i]
        blocked = set(blocking)
        active = [i for i in active if i not in blocked]
        remaining = max(remaining, 0.0)
    return tuple(alloc)


def water_fill(
    capacity: float, demands: Sequence[float], weights: Sequence[float]
) -> list[float]:
    """:func:`max_min_fair` without input checks, for hot loops with trusted input.

    The caller guarantees ``capacity >= 0``, finite ``demands >= 0`` and ``weights > 0`` of
    the same length (the local schedulers call this every cycle). Units as in
    :func:`max_min_fair`; returns a new list.
    """
    if capacity <= 0:
        return [0.0] * len(demands)
    return list(_water_fill(capacity, tuple(demands), tuple(weights)))
