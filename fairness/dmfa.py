"""DMFA-SRQ: dynamic multi-resource fair allocation based on shared resource quantity.

The seed (``dmfa-srq-dynamic-fair-allocation.txt``; ``docs/model.md`` §4, "DMFA-SRQ") and
its conventions as this module reads them:

* There are ``m`` resources; each resource's **pool is 1** (all quantities below are
  fractions of a pool). User ``i`` states a per-task demand vector ``D_i``: ``D_ij`` is the
  fraction of resource ``j``'s pool that one task of user ``i`` needs (``0 <= D_ij <= 1``,
  not all zero). The seed normalises it to ``d_i = D_i / max_j D_ij``, so the dominant
  resource has ``d = 1``.
* User ``i`` brings a **share** ``w_i > 0`` (the seed's shared resource quantity): the
  fraction of *every* resource's pool it contributes. Shares of all users sum to at most 1.
  With ``k`` users present only ``W_k = sum_{i<=k} w_i`` of each resource may be handed out.
* ``x_i^k`` is what the seed calls user ``i``'s "number of dominant shares, i.e. the number
  of tasks it can run": a number of *normalised* tasks, each using ``d_i``. User ``i``
  therefore holds ``x_i^k d_ij`` of resource ``j``, and since ``max_j d_ij = 1`` that makes
  ``x_i^k`` exactly user ``i``'s **dominant share** (a fraction of its dominant resource's
  pool). The number of real tasks, each of demand ``D_i``, is ``x_i^k / max_j D_ij``
  (divisible, so usually not an integer). Both are reported.
* Users arrive one by one (user ``k`` after user ``k-1``), never leave, and an allocation
  is irrevocable. With ``k`` users present the allocation solves the LP::

      maximise M_k  subject to
          x_i^k >= M_k w_i                         for i <= k   (weighted fairness level)
          x_i^k >= x_i^{k-1}                       for i <= k   (irrevocable; x_k^{k-1} = 0)
          sum_{i<=k} x_i^k d_ij <= sum_{i<=k} w_i  for every resource j

  Lemma 1 of the seed: ``x_i^k = max(M_k w_i, x_i^{k-1})``. So every resource's use is a
  non-decreasing, piecewise-linear function of ``M`` with breakpoints ``x_i^{k-1} / w_i``;
  :class:`DmfaSrq` sorts the breakpoints, finds the segment holding the optimum by bisection
  and solves the linear equation on it exactly: ``O(k log k + k m)`` per arrival.

Because ``x_i^i = M_i w_i`` and then ``x_i^k = max(M_k w_i, x_i^{k-1})``, the whole history
follows from the levels: ``x_i^k = w_i * max(M_i, ..., M_k)`` (exactly, also in floating
point, since multiplying by ``w_i > 0`` preserves order). :func:`dmfa_srq` stores only the
levels and rebuilds any arrival's allocation on demand, so a run of ``n`` arrivals takes
``O(n m)`` memory, not ``O(n^2)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, overload

import numpy as np

from fairness._validate import (
    check_length,
    nonneg_vector,
    positive_scalar,
    positive_vector,
)

if TYPE_CHECKING:
    from fairness.drf import DrfResult

__all__ = [
    "SHARE_SUM_TOLERANCE",
    "AllocationMetrics",
    "DmfaSrq",
    "DmfaSrqRun",
    "PoolAllocation",
    "allocation_metrics",
    "dmfa_srq",
    "dmfa_srq_policy",
    "static_weighted_drf",
]

#: Demand matrices and share vectors: sequences of numbers or numpy arrays.
Matrix: TypeAlias = "Sequence[Sequence[float]] | np.ndarray"
Vector: TypeAlias = "Sequence[float] | np.ndarray"

#: Shares may sum to at most ``1 + SHARE_SUM_TOLERANCE``: shares drawn at random and
#: normalised to sum to 1 can land an ulp or two above 1.
SHARE_SUM_TOLERANCE = 1e-9

_INITIAL_CAPACITY = 64


@dataclass(frozen=True, slots=True)
class PoolAllocation:
    """The allocation of every present user of a shared pool (each resource's pool = 1).

    ``users``: how many users are present (``k``).
    ``level``: ``M_k``, the weighted fairness level: every user holds a dominant share of at
        least ``level * w_i`` (for DMFA-SRQ the LP optimum; for a static policy
        ``min_i x_i / w_i``). Dimensionless.
    ``available``: ``W_k = sum_{i<=k} w_i``, the fraction of each pool the present users may
        use.
    ``dominant_shares``: ``x_i`` per user, a fraction of the user's dominant resource's pool.
    ``tasks``: per user, the number of real tasks (each of demand ``D_i``) the allocation
        holds: ``x_i / max_j D_ij``; divisible, so fractional.
    ``usage``: per resource ``j``, the fraction of the pool allocated, ``sum_i x_i d_ij``.
    """

    users: int
    level: float
    available: float
    dominant_shares: tuple[float, ...]
    tasks: tuple[float, ...]
    usage: tuple[float, ...]

    @property
    def utilization(self) -> tuple[float, ...]:
        """Per resource, the fraction of the pool allocated (the pool is 1, so this is
        ``usage``)."""
        return self.usage


@dataclass(frozen=True, slots=True)
class AllocationMetrics:
    """The figures the seed's evaluation compares (all dimensionless fractions).

    ``min_dominant_share``: ``min_i x_i``. ``sum_dominant_shares``: ``sum_i x_i``.
    ``min_normalised_share``: ``min_i x_i / w_i`` (DMFA-SRQ's objective ``M``).
    ``utilization``: per resource, fraction of the pool allocated (CPU is resource 0 and
    memory resource 1 in the experiment).
    """

    min_dominant_share: float
    sum_dominant_shares: float
    min_normalised_share: float
    utilization: tuple[float, ...]


def allocation_metrics(allocation: PoolAllocation, shares: Vector) -> AllocationMetrics:
    """The seed's evaluation figures for ``allocation``; ``shares`` are the users' ``w_i`` in
    arrival order (at least ``allocation.users`` of them; extra ones are ignored)."""
    k = allocation.users
    if len(shares) < k:
        raise ValueError(f"shares: has {len(shares)} entries, expected at least {k} "
                         "(one per present user)")
    x = allocation.dominant_shares
    return AllocationMetrics(
        min_dominant_share=min(x),
        sum_dominant_shares=math.fsum(x),
        min_normalised_share=min(x[i] / float(shares[i]) for i in range(k)),
        utilization=allocation.usage,
    )


def _check_demand(name: str, demand: Any, n_resources: int | None) -> tuple[float, ...]:
    """A per-task demand vector: fractions of each pool in ``[0, 1]``, not all zero."""
    d = nonneg_vector(name, demand, n_resources, "one per resource")
    if not d:
        raise ValueError(f"{name}: must not be empty (one entry per resource)")
    for j, v in enumerate(d):
        if v > 1.0:
            raise ValueError(f"{name}[{j}]: must be <= 1 (a fraction of the pool), got {v!r}")
    if not any(v > 0.0 for v in d):
        raise ValueError(f"{name}: demand is zero on every resource")
    return d


class DmfaSrq:
    """Online DMFA-SRQ: users arrive one at a time with :meth:`add_user`.

    State is ``O(n m)``. Each arrival costs ``O(k log k + k m)`` for ``k`` present users and
    ``m`` resources (sort the breakpoints, prefix sums, bisection, exact solve).
    """

    __slots__ = ("_b", "_levels", "_m", "_n", "_scale", "_w", "_wd", "_wd_t", "_total_share")

    def __init__(self, n_resources: int | None = None) -> None:
        """``n_resources``: number of resources ``m``; if ``None``, taken from the first
        user's demand."""
        if n_resources is not None:
            if isinstance(n_resources, bool) or not isinstance(n_resources, int):
                raise ValueError(f"n_resources: must be an int, got {n_resources!r}")
            if n_resources < 1:
                raise ValueError(f"n_resources: must be >= 1, got {n_resources}")
        self._m: int | None = n_resources
        self._n = 0
        self._total_share = 0.0
        # Per user, in arrival order (buffers grow by doubling):
        self._w = np.empty(0)          # share w_i
        self._scale = np.empty(0)      # max_j D_ij (real tasks = x_i / scale_i)
        self._wd = np.empty((0, 0))    # w_i * d_ij, the slope user i adds to resource j
        self._wd_t = np.empty((0, 0))  # the same by resource (row j), for _solve_level
        self._b = np.empty(0)          # x_i / w_i, the user's normalised share (breakpoint)
        self._levels: list[float] = []  # M_1..M_k

    # -- queries -----------------------------------------------------------------------

    @property
    def users(self) -> int:
        """Number of users present (``k``)."""
        return self._n

    @property
    def n_resources(self) -> int | None:
        """Number of resources ``m`` (``None`` until known)."""
        return self._m

    @property
    def levels(self) -> tuple[float, ...]:
        """``M_1, ..., M_k``: the LP optimum after each arrival so far."""
        return tuple(self._levels)

    def allocation(self) -> PoolAllocation:
        """The current allocation of every present user (``O(k m)``)."""
        k = self._n
        if k == 0:
            raise ValueError("allocation: no user has arrived yet")
        m = self._m
        assert m is not None
        x = self._b[:k] * self._w[:k]
        usage = self._b[:k] @ self._wd[:k]  # sum_i (x_i / w_i) * w_i d_ij
        return PoolAllocation(
            users=k,
            level=self._levels[-1],
            available=self._total_share,
            dominant_shares=tuple(x.tolist()),
            tasks=tuple((x / self._scale[:k]).tolist()),
            usage=tuple(usage.tolist()),
        )

    # -- arrivals ----------------------------------------------------------------------

    def add_user(self, demand: Vector, share: float) -> PoolAllocation:
        """User ``k+1`` arrives with per-task ``demand`` (fractions of each pool, in
        ``[0, 1]``, not all zero) and ``share`` (``w > 0``, fraction of every pool it
        brings). Returns the allocation of every present user after the arrival.

        Raises ``ValueError`` naming ``demand[j]`` or ``share`` for bad input, or if the
        shares of all users so far would sum to more than 1.
        """
        d = _check_demand("demand", demand, self._m)
        w = positive_scalar("share", share)
        if self._total_share + w > 1.0 + SHARE_SUM_TOLERANCE:
            raise ValueError(
                f"share: the shares of all users would sum to {self._total_share + w!r}, "
                "must be <= 1 (each user brings a fraction of every pool)")
        self._arrive(d, w)
        return self.allocation()

    def _arrive(self, demand: tuple[float, ...], share: float) -> float:
        """Add a validated user and solve for ``M_k``; returns ``M_k``."""
        if self._m is None:
            self._m = len(demand)
        m = self._m
        k = self._n + 1
        self._ensure_capacity(k, m)
        scale = max(demand)
        i = k - 1
        self._w[i] = share
        self._scale[i] = scale
        self._wd[i, :] = [share * (v / scale) for v in demand]
        self._wd_t[:, i] = self._wd[i, :]
        self._b[i] = 0.0  # x_k^{k-1} = 0
        self._total_share += share
        level = _solve_level(self._b[:k], self._wd_t[:, :k], self._total_share)
        # Lemma 1: x_i^k = max(M_k w_i, x_i^{k-1}), i.e. b_i = max(M_k, b_i).
        np.maximum(self._b[:k], level, out=self._b[:k])
        self._n = k
        self._levels.append(level)
        return level

    def _ensure_capacity(self, k: int, m: int) -> None:
        if k <= len(self._w) and self._wd.shape[1] == m:
            return
        cap = max(_INITIAL_CAPACITY, 2 * len(self._w), k)
        n = self._n
        w, scale, b = np.zeros(cap), np.ones(cap), np.zeros(cap)
        wd = np.zeros((cap, m))
        if n:
            w[:n], scale[:n], b[:n] = self._w[:n], self._scale[:n], self._b[:n]
            wd[:n] = self._wd[:n]
        self._w, self._scale, self._b, self._wd = w, scale, b, wd
        self._wd_t = wd.T.copy()


def _solve_level(b: np.ndarray, wd_t: np.ndarray, available: float) -> float:
    """Largest ``M`` with ``g(M) = max_j sum_i max(M, b_i) * wd_ij <= available``.

    ``b_i = x_i^{k-1} / w_i`` (the new user has ``b = 0``), ``wd_t[j, i] = w_i d_ij`` (one
    row per resource). Each resource's use ``f_j(M) = sum_i max(M w_i, x_i^{k-1}) d_ij`` is
    piecewise linear with breakpoints ``b``. After sorting them (stably), on the segment
    ``[b_(t), b_(t+1)]`` the users ``(1)..(t)`` sit at ``M w_i`` and the others keep
    ``x_i^{k-1}``: ``f_j(M) = M * P_j(t) + Q_j(t)`` with ``P_j(t) = sum_{s<=t} wd_(s)j``
    and ``Q_j(t) = sum_{s>t} b_(s) wd_(s)j`` (sequential sums, from the left and from the
    right). Bisection finds the last breakpoint with ``g(b_(t)) <= available`` (``g`` is
    non-decreasing); the optimum is then the exact root ``min_j (available - Q_j(t)) /
    P_j(t)`` on that segment. The sums are numpy's (one row per resource); the products,
    sums and comparisons at the bisection's breakpoints are float arithmetic, the same
    IEEE operations one resource at a time as numpy's on a row.
    """
    order = np.argsort(b, kind="stable")
    backward = order[::-1]
    bs = b.take(order)
    bs_backward = b.take(backward)
    k = len(bs)
    # Per resource row: P_j(t) by a sequential sum from the left, and the sequential sums
    # from the right of x_(s) d_(s)j = b_(s) wd_(s)j, kept in right-to-left order so that
    # Q_j(t) = backward_sums_j[k - 2 - t].
    accumulate = np.add.accumulate
    prefix: list[np.ndarray] = []
    suffix: list[np.ndarray] = []
    for row in wd_t:
        prefix.append(accumulate(row.take(order)))
        suffix.append(accumulate(row.take(backward) * bs_backward))

    def usage(t: int) -> list[tuple[float, float]]:
        """``(P_j(t), Q_j(t))`` per resource, as floats."""
        return [(float(p[t]), float(q[k - 2 - t]) if t + 1 < k else 0.0)
                for p, q in zip(prefix, suffix)]

    def fits(t: int) -> bool:
        bt = float(bs[t])
        return max(bt * p + q for p, q in usage(t)) <= available

    # fits(0) holds: b_(0) = 0 is the new user and the others use at most W_{k-1} < W_k.
    lo, hi = 0, k - 1
    while lo < hi:  # invariant: fits(lo); answer in [lo, hi]
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    # The exact root on that segment; the new user has a nonzero demand, so some slope
    # P_j(lo) is > 0.
    level = min((available - q) / p for p, q in usage(lo) if p > 0.0)
    # The exact root lies in [b_(lo), b_(lo+1)); clamp away rounding at the ends.
    level = max(level, float(bs[lo]))
    if lo + 1 < k:
        level = min(level, float(bs[lo + 1]))
    # The seed's Theorem 2 (sharing incentive): M_k >= 1, since ``x_i = max(w_i, x_i^{k-1})``
    # is always feasible. When it holds with equality the division above can land an ulp
    # below 1; keep the guarantee exact (the cost is at most an ulp of over-use).
    return max(level, 1.0)


@dataclass(frozen=True, slots=True)
class DmfaSrqRun(Sequence[PoolAllocation]):
    """A whole DMFA-SRQ arrival sequence: ``run[k-1]`` is the allocation after user ``k``
    arrived (``len(run)`` arrivals). Allocations are rebuilt on demand from the levels
    (``x_i^k = w_i max(M_i..M_k)``), ``O(k m)`` each.

    ``demands``: the per-task demands ``D_i`` as given (fractions of each pool).
    ``shares``: the users' ``w_i``. ``levels``: ``M_1..M_n``.
    """

    demands: tuple[tuple[float, ...], ...]
    shares: tuple[float, ...]
    levels: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.levels)

    @overload
    def __getitem__(self, index: int) -> PoolAllocation: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[PoolAllocation]: ...

    def __getitem__(self, index: int | slice) -> PoolAllocation | Sequence[PoolAllocation]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self.levels)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"arrival index {index} out of range for {n} arrivals")
        return self.after(index + 1)

    def __iter__(self) -> Iterator[PoolAllocation]:
        for k in range(1, len(self.levels) + 1):
            yield self.after(k)

    @property
    def final(self) -> PoolAllocation:
        """The allocation once every user has arrived."""
        return self.after(len(self.levels))

    def after(self, k: int) -> PoolAllocation:
        """The allocation with users ``1..k`` present (``1 <= k <= len(self)``)."""
        if not 1 <= k <= len(self.levels):
            raise ValueError(f"k: must be in [1, {len(self.levels)}], got {k}")
        levels = np.asarray(self.levels[:k])
        # b_i = max(M_i, ..., M_k): a running maximum from the right.
        b = np.maximum.accumulate(levels[::-1])[::-1]
        w = np.asarray(self.shares[:k])
        demand = np.asarray(self.demands[:k], dtype=float)
        scale = demand.max(axis=1)
        x = b * w
        usage = (x / scale) @ demand
        return PoolAllocation(
            users=k,
            level=self.levels[k - 1],
            available=math.fsum(self.shares[:k]),
            dominant_shares=tuple(x.tolist()),
            tasks=tuple((x / scale).tolist()),
            usage=tuple(usage.tolist()),
        )


def _check_instance(
    demands: Any, shares: Any
) -> tuple[tuple[tuple[float, ...], ...], tuple[float, ...]]:
    """Validate a whole arrival sequence; see :func:`dmfa_srq` for the contract."""
    if isinstance(demands, (str, bytes)) or not hasattr(demands, "__len__") \
            or not hasattr(demands, "__getitem__"):
        raise ValueError(f"demands: must be a sequence of demand vectors, got {demands!r}")
    if len(demands) == 0:
        raise ValueError("demands: must not be empty (one demand vector per user)")
    first = _check_demand("demands[0]", demands[0], None)
    m = len(first)
    d = (first,) + tuple(
        _check_demand(f"demands[{i}]", demands[i], m) for i in range(1, len(demands)))
    w = positive_vector("shares", shares, len(d), "one per user")
    total = math.fsum(w)
    if total > 1.0 + SHARE_SUM_TOLERANCE:
        raise ValueError(f"shares: sum to {total!r}, must be <= 1 (each user brings a "
                         "fraction of every pool)")
    return d, w


def dmfa_srq(demands: Matrix, shares: Vector) -> DmfaSrqRun:
    """DMFA-SRQ over a whole arrival sequence: user ``i`` (0-based) arrives ``i``-th.

    ``demands[i]``: per-task demand of user ``i``, fractions of each resource's pool, in
    ``[0, 1]``, not all zero; every row has the same length ``m``. ``shares[i]``: ``w_i > 0``,
    the fraction of every pool user ``i`` brings; ``sum(shares) <= 1``.

    Returns a :class:`DmfaSrqRun`, one :class:`PoolAllocation` per arrival. ``O(n^2 log n)``
    time in all, ``O(n m)`` memory. Bad input raises ``ValueError`` naming the argument and
    index (``demands[3][1]: must be >= 0, got -0.5``).
    """
    d, w = _check_instance(demands, shares)
    online = DmfaSrq(len(d[0]))
    for row, share in zip(d, w):
        online._arrive(row, share)
    return DmfaSrqRun(demands=d, shares=w, levels=online.levels)


def static_weighted_drf(demands: Matrix, shares: Vector) -> PoolAllocation:
    """The comparator of the seed's evaluation: static weighted DRF with every user present.

    Same conventions as :func:`dmfa_srq`. The present users may use ``W = sum(shares)`` of
    each pool (1 when the shares sum to 1), which is what DMFA-SRQ may hand out once all
    have arrived; the allocation is :func:`fairness.drf.drf` with ``capacity = W`` per
    resource, weight ``w_i`` per user and divisible tasks (the fluid, lexicographically
    max-min weighted dominant shares). ``level`` is ``min_i x_i / w_i``.
    """
    from fairness.drf import drf

    d, w = _check_instance(demands, shares)
    m = len(d[0])
    available = math.fsum(w)
    result = drf([available] * m, d, weights=list(w), divisible=True)
    tasks = tuple(float(t) for t in result.tasks)
    x = tuple(t * max(row) for t, row in zip(tasks, d))
    usage = tuple(math.fsum(t * row[j] for t, row in zip(tasks, d)) for j in range(m))
    return PoolAllocation(
        users=len(d),
        level=min(xi / wi for xi, wi in zip(x, w)),
        available=available,
        dominant_shares=x,
        tasks=tasks,
        usage=usage,
    )


def dmfa_srq_policy(
    capacity: Sequence[float],
    demands: Sequence[Sequence[float]],
    weights: Sequence[float] | None = None,
    max_tasks: Sequence[float | None] | None = None,
) -> DrfResult:
    """DMFA-SRQ under the registry's uniform policy signature (``fairness.registry``).

    ``capacity``: ``C_j`` per resource (resource units). ``demands``: per-task demand
    vectors in the same units; a task must fit in the pool (``demands[i][j] <=
    capacity[j]``). Users arrive in list order. ``weights``: one scalar per user (``> 0``,
    only ratios matter): user ``i``'s share is ``w_i = weights[i] / sum(weights)``; ``None``
    means equal shares ``1/n``. ``max_tasks`` is not supported (DMFA-SRQ has no caps): any
    finite entry raises ``ValueError``.

    Returns the allocation once every user has arrived, as a
    :class:`fairness.drf.DrfResult` (real task counts; ``weighted_shares`` use the weights
    as given). On the DRF papers' example (9 CPU, 18 GB; <1, 4> and <3, 1>; equal shares)
    DMFA-SRQ, like DRF, gives 3 and 2 tasks.
    """
    from fairness.drf import _caps, _prepare, _result, _weight_matrix

    cap, dem = _prepare(capacity, demands)
    n, m = len(dem), len(cap)
    if weights is not None:
        seq = check_length("weights", weights, n, "one per user in demands")
        for i, value in enumerate(seq):
            if hasattr(value, "__len__") and not isinstance(value, str):
                raise ValueError(f"weights[{i}]: dmfa_srq takes one scalar weight (share) "
                                 "per user, not a vector per resource")
        raw = positive_vector("weights", seq, n, "one per user")
    else:
        raw = (1.0,) * n
    for i, limit in enumerate(_caps(max_tasks, n)):
        if limit != math.inf:
            raise ValueError(f"max_tasks[{i}]: the policy dmfa_srq does not support caps")
    for i, row in enumerate(dem):
        for j, (v, c) in enumerate(zip(row, cap)):
            if v > c:
                raise ValueError(f"demands[{i}][{j}]: {v!r} exceeds capacity[{j}] = {c!r} "
                                 "(dmfa_srq needs every task to fit in the pool)")
    total = math.fsum(raw)
    shares = [r / total for r in raw]
    pool_demands = [[v / c for v, c in zip(row, cap)] for row in dem]
    final = dmfa_srq(pool_demands, shares).final
    return _result(cap, dem, list(final.tasks), _weight_matrix(weights, n, m))
