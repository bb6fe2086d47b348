"""Dominant Resource Fairness (Ghodsi et al., NSDI 2011; the thesis' chapter 3).

Model (``docs/model.md`` §4, "DRF"): a pool with capacity ``C_j`` of each resource ``j``;
user ``i`` runs identical tasks, each needing ``d_ij`` of resource ``j`` (same unit as
``C_j``). With ``x_i`` tasks, user ``i``'s share of resource ``j`` is
``u_ij = x_i d_ij / C_j`` and its dominant share is ``max_j u_ij``. Weighted DRF divides
by a weight first: ``s_i = max_j u_ij / w_ij`` (a scalar weight ``w_i`` means
``w_ij = w_i`` for every ``j``).
DRF is max-min fairness on the ``s_i``: raise the lowest first, then the next, and so on.

* :func:`drf` with ``divisible=False``: the papers' Algorithm 1, progressive filling on a
  binary heap: repeatedly launch one task of the user with the lowest ``s_i`` whose next
  task fits; a user whose next task does not fit is dropped (in a one-shot allocation
  resources are never released, so it would never fit again) and the others carry on, so
  users that need none of a saturated resource keep receiving tasks. ``O(log n)`` per
  decision, ``O((T + n) log n)`` in all for ``T`` launched tasks.
* :func:`drf` with ``divisible=True``: the exact fluid DRF, the lexicographic max-min of
  the ``s_i``: all unfrozen users' ``s_i`` rise together; a user freezes when it reaches its
  ``max_tasks`` or when a resource it uses saturates. ``O(n m (m + 1) + n log n)``.
* :class:`DrfAllocator`: the online form (users come and go, tasks are launched and
  finish); for the same sequence it gives the same result as :func:`drf`. The local
  queues do not use it: each cycle they call :func:`drf` (divisible, for entries with
  memory or IO demands) or :func:`fairness.single.water_fill` (CPU-only entries), in
  ``local_manager/scheduler.py``.

Deterministic tie-breaking: among users with equal ``s_i`` the one given (added) first
wins. A task fits when ``used_j + d_ij <= C_j (1 + 1e-9)`` for every resource: the slack
absorbs float rounding in sums of fractional demands.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np

from fairness._validate import (
    check_finite,
    check_length,
    nonneg_matrix,
    positive_scalar,
    positive_vector,
    rows_not_all_zero,
)

__all__ = ["DrfAllocator", "DrfResult", "Weights", "drf"]

#: Per user, a scalar weight or a weight vector (one weight per resource).
Weights: TypeAlias = Sequence[float | Sequence[float]]

#: Relative slack in the "task fits" test (see the module docstring).
FIT_SLACK = 1e-9

# Relative tolerance for resources saturating "at the same level" in the fluid form.
_SAME_LEVEL = 1e-12
# Fluid form: a fill rate kept by subtraction is summed afresh once it falls below this
# fraction of its last exact value (bounds the cancellation error to ~n * 1e-13).
_RECOMPUTE = 1e-3


@dataclass(frozen=True, slots=True)
class DrfResult:
    """The result of a multi-resource allocation (DRF and the alternatives in
    :mod:`fairness.alternatives`), all tuples in input order.

    Attributes:
        tasks: ``x_i``, tasks given to user ``i`` (whole numbers, as ``int``, for indivisible
            DRF; real numbers for the divisible forms).
        dominant_shares: ``max_j x_i d_ij / C_j``, user ``i``'s dominant share (fraction of
            the pool, dimensionless, in ``[0, 1]``), without weights.
        weighted_shares: ``s_i = max_j (x_i d_ij / C_j) / w_ij``, the quantity weighted DRF
            equalises (equal to ``dominant_shares`` without weights); dimensionless.
        usage: ``sum_i x_i d_ij`` per resource ``j``, in the capacity's units.
        utilization: ``usage_j / C_j`` per resource (fraction, dimensionless).
        capacity: ``C_j`` as given (resource units).
        demands: ``d_ij`` as given (resource units per task).
    """

    tasks: tuple[float, ...]
    dominant_shares: tuple[float, ...]
    weighted_shares: tuple[float, ...]
    usage: tuple[float, ...]
    utilization: tuple[float, ...]
    capacity: tuple[float, ...]
    demands: tuple[tuple[float, ...], ...] = field(repr=False)

    @property
    def allocations(self) -> tuple[tuple[float, ...], ...]:
        """``x_i d_ij``: what user ``i`` holds of resource ``j`` (resource units)."""
        return tuple(tuple(x * v for v in row) for x, row in zip(self.tasks, self.demands))


# ---------------------------------------------------------------------------------------
# Input preparation, shared with fairness.alternatives
# ---------------------------------------------------------------------------------------


def _prepare(
    capacity: Sequence[float], demands: Sequence[Sequence[float]]
) -> tuple[tuple[float, ...], tuple[tuple[float, ...], ...]]:
    cap = positive_vector("capacity", capacity)
    dem = nonneg_matrix("demands", demands, None, len(cap), "", "one per resource in capacity")
    rows_not_all_zero("demands", dem)
    return cap, dem


def _weight_matrix(weights: Weights | None, n: int, m: int) -> tuple[tuple[float, ...], ...]:
    """``w_ij`` (> 0) for every user and resource; each user's entry is a scalar weight
    (the same for every resource) or a vector with one weight per resource."""
    if weights is None:
        return ((1.0,) * m,) * n
    seq = check_length("weights", weights, n, "one per user in demands")
    rows: list[tuple[float, ...]] = []
    for i, w in enumerate(seq):
        if hasattr(w, "__len__") and not isinstance(w, (str, bytes)):
            rows.append(positive_vector(f"weights[{i}]", w, m, "one per resource in capacity"))
        else:
            rows.append((positive_scalar(f"weights[{i}]", w),) * m)
    return tuple(rows)


def _caps(max_tasks: Sequence[float | None] | None, n: int) -> tuple[float, ...]:
    """Per-user task caps; ``None`` (or ``inf``) means unbounded."""
    if max_tasks is None:
        return (math.inf,) * n
    seq = check_length("max_tasks", max_tasks, n, "one per user in demands")
    out: list[float] = []
    for i, v in enumerate(seq):
        if v is None or (isinstance(v, float) and v == math.inf):
            out.append(math.inf)
            continue
        x = check_finite(f"max_tasks[{i}]", v)
        if x < 0.0:
            raise ValueError(f"max_tasks[{i}]: must be >= 0, got {x!r}")
        out.append(x)
    return tuple(out)


def _per_task_share(
    cap: tuple[float, ...], row: tuple[float, ...], wrow: tuple[float, ...]
) -> float:
    """``delta_i = max_j d_ij / (C_j w_ij)``: the weighted dominant share of one task."""
    return max(v / (c * w) for v, c, w in zip(row, cap, wrow))


def _result(
    cap: tuple[float, ...],
    dem: tuple[tuple[float, ...], ...],
    tasks: Sequence[float],
    wmat: tuple[tuple[float, ...], ...],
) -> DrfResult:
    m = len(cap)
    usage = tuple(math.fsum(x * row[j] for x, row in zip(tasks, dem)) for j in range(m))
    return DrfResult(
        tasks=tuple(tasks),
        dominant_shares=tuple(
            max(x * v / c for v, c in zip(row, cap)) for x, row in zip(tasks, dem)),
        weighted_shares=tuple(
            max(x * v / (c * w) for v, c, w in zip(row, cap, wrow))
            for x, row, wrow in zip(tasks, dem, wmat)),
        usage=usage,
        utilization=tuple(u / c for u, c in zip(usage, cap)),
        capacity=cap,
        demands=dem,
    )


# ---------------------------------------------------------------------------------------
# The two allocation cores (validated input)
# ---------------------------------------------------------------------------------------


def _progressive_filling(
    cap: tuple[float, ...],
    dem: tuple[tuple[float, ...], ...],
    delta: Sequence[float],
    caps: Sequence[float],
    min_users: int | None = None,
    min_launches: int | None = None,
) -> list[int]:
    """Algorithm 1; returns the task counts.

    With at least ``min_users`` users (default :data:`_BATCH_MIN_USERS`), the stretches
    in which at least ``min_launches`` (default :data:`_BATCH_MIN_LAUNCHES`) launches come
    before any resource may refuse one go through :func:`_batch_launches` (numpy); the heap
    (:func:`_heap_launches`) takes the rest. Both make the same decisions in the same order
    with the same float sums, so the counts are those of the heap alone.
    """
    min_users = _BATCH_MIN_USERS if min_users is None else min_users
    min_launches = _BATCH_MIN_LAUNCHES if min_launches is None else min_launches
    n = len(dem)
    tasks = [0] * n
    used = [0.0] * len(cap)
    alive = [caps[i] >= 1.0 for i in range(n)]
    if n < min_users:
        _heap_launches(cap, dem, delta, caps, tasks, used, alive, None)
        return tasks
    arrays = _BatchArrays(cap, dem, delta, caps)
    while any(alive):
        if not _batch_launches(arrays, tasks, used, alive, min_launches):
            # A refusal, or too few launches ahead before a resource may refuse one: a
            # round of heap decisions (every alive user gets a turn or two) goes on.
            if _heap_launches(cap, dem, delta, caps, tasks, used, alive,
                              2 * sum(alive) + min_launches):
                break
    return tasks


#: Users from which :func:`_progressive_filling` takes launches in numpy batches.
_BATCH_MIN_USERS = 64
#: Fewest predicted launches for which a batch is worth its numpy overhead.
_BATCH_MIN_LAUNCHES = 2048
#: Most launches generated in one batch (bounds its memory: about 60 bytes per launch).
_BATCH_MAX_LAUNCHES = 1 << 21


def _heap_launches(
    cap: tuple[float, ...],
    dem: tuple[tuple[float, ...], ...],
    delta: Sequence[float],
    caps: Sequence[float],
    tasks: list[int],
    used: list[float],
    alive: list[bool],
    max_decisions: int | None,
) -> bool:
    """Algorithm 1 on a heap of ``(s_i, i)`` from the state ``tasks``, ``used`` (resource
    units), ``alive`` (users still in the heap), updated in place; stops after
    ``max_decisions`` decisions (``None``: no bound). Returns whether the heap emptied."""
    limit = [c * (1.0 + FIT_SLACK) for c in cap]
    # Only the resources a user needs are checked and charged.
    needs = [[(j, v) for j, v in enumerate(row) if v > 0.0] for row in dem]
    heap = [(tasks[i] * delta[i], i) for i in range(len(dem)) if alive[i]]
    heapq.heapify(heap)
    heapreplace, heappop = heapq.heapreplace, heapq.heappop
    budget = -1 if max_decisions is None else max_decisions
    while heap and budget != 0:
        budget -= 1
        i = heap[0][1]
        need = needs[i]
        for j, v in need:
            if used[j] + v > limit[j]:
                heappop(heap)  # never fits again: nothing is released in a one-shot round
                alive[i] = False
                break
        else:
            for j, v in need:
                used[j] += v
            x = tasks[i] = tasks[i] + 1
            if x + 1 <= caps[i]:
                heapreplace(heap, (x * delta[i], i))
            else:
                heappop(heap)
                alive[i] = False
    return not heap


class _BatchArrays:
    """The per-user figures :func:`_batch_launches` reads, as numpy arrays (private)."""

    __slots__ = ("dem_t", "delta", "last_k", "limit", "positive")

    def __init__(self, cap: tuple[float, ...], dem: tuple[tuple[float, ...], ...],
                 delta: Sequence[float], caps: Sequence[float]) -> None:
        self.dem_t = np.array(dem, dtype=np.float64).T.copy()  # (m, n): d_ij by resource
        self.positive = self.dem_t > 0.0
        self.delta = np.array(delta, dtype=np.float64)
        # The last task count k from which a user may launch: k + 1 <= cap_i.
        self.last_k = np.floor(np.minimum(np.array(caps, dtype=np.float64) - 1.0, 2.0**53))
        self.limit = np.array([c * (1.0 + FIT_SLACK) for c in cap], dtype=np.float64)


def _batch_launches(
    arrays: _BatchArrays, tasks: list[int], used: list[float], alive: list[bool],
    min_launches: int,
) -> bool:
    """Take, in numpy, the heap's decisions up to the first refusal or a share level ``L``
    ahead, from the state ``tasks``, ``used``, ``alive`` (updated in place, as
    :func:`_heap_launches` would leave it after the same decisions).

    The heap launches user ``i``'s next tasks at keys ``(k delta_i, i)`` for ``k = x_i,
    x_i + 1, ...`` in increasing order of key, until a launch does not fit. So the launches
    with keys below ``L`` are those keys, sorted (a stable sort of keys listed by user gives
    the heap's tie-break); the resources' running sums ``used_j + d_ij`` are a sequential
    ``add.accumulate`` (the heap's additions in its order), and the first launch whose sum
    passes ``C_j (1 + FIT_SLACK)`` on a resource it needs is the heap's first refusal: the
    launches before it are taken and its user is dropped. ``L`` is where the first resource
    would fill if every alive user rose at its current rate. Returns whether the batch
    reached ``L`` without a refusal; ``False`` also, with the state untouched, when fewer
    than ``min_launches`` launches are predicted.
    """
    live = np.flatnonzero(np.array(alive, dtype=bool))
    x = np.array(tasks, dtype=np.float64)[live]
    delta = arrays.delta[live]
    level = float(np.min(x * delta))
    room = arrays.limit - np.array(used, dtype=np.float64)
    rate = arrays.dem_t[:, live] @ (1.0 / delta)  # resource j per unit of share level
    with np.errstate(divide="ignore"):
        ahead = np.where(rate > 0.0, room / rate, np.inf)
    span = float(np.min(ahead))
    if not span > 0.0:
        return False
    inv_delta = 1.0 / delta
    if math.isinf(span):  # every alive user is capped before any resource fills
        span = float(np.max((arrays.last_k[live] + 1.0) * delta)) - level
    predicted = span * float(inv_delta.sum())
    if predicted < min_launches:
        return False
    if predicted > _BATCH_MAX_LAUNCHES:
        span *= _BATCH_MAX_LAUNCHES / predicted
    top = level + span
    # Candidates k = x_i .. min(last_k_i, floor(top / delta_i) + 1), then keys < top.
    upper = np.minimum(arrays.last_k[live], np.floor(top * inv_delta) + 1.0)
    count = np.maximum(upper - x + 1.0, 0.0).astype(np.int64)
    total = int(count.sum())
    if total == 0:
        return False
    owner = np.repeat(np.arange(len(live)), count)
    start = np.cumsum(count) - count
    k = np.arange(total, dtype=np.float64) - np.repeat(start - x, count)
    keys = k * delta[owner]
    keep = keys < top
    owner, keys = owner[keep], keys[keep]
    order = np.argsort(keys, kind="stable")
    user = live[owner[order]]
    steps = arrays.dem_t[:, user]  # (m, T): each launch's demand by resource
    sums = np.empty((steps.shape[0], steps.shape[1] + 1))
    sums[:, 0] = used
    sums[:, 1:] = steps
    np.add.accumulate(sums, axis=1, out=sums)
    refused = ((sums[:, 1:] > arrays.limit[:, None]) & arrays.positive[:, user]).any(axis=0)
    first = int(np.argmax(refused)) if refused.any() else len(user)
    launched = np.bincount(user[:first], minlength=len(tasks))
    last_k = arrays.last_k
    for i in np.flatnonzero(launched).tolist():
        tasks[i] += int(launched[i])
        if tasks[i] > last_k[i]:  # at its cap: x + 1 > cap_i
            alive[i] = False
    used[:] = sums[:, first].tolist()
    if first < len(user):
        alive[int(user[first])] = False
        return False
    return True


def _fluid_filling(
    cap: tuple[float, ...],
    dem: tuple[tuple[float, ...], ...],
    delta: Sequence[float],
    caps: Sequence[float],
) -> list[float]:
    """Progressive filling in continuous form; returns the (real) task counts.

    All active users share the level ``t`` (their weighted dominant share), so user ``i``
    runs ``t / delta_i`` tasks and resource ``j`` fills at rate ``sum_i d_ij / delta_i``.
    The level jumps from event to event: a user reaching its cap (level ``cap_i delta_i``)
    or a resource saturating; then the affected users freeze.
    """
    n, m = len(dem), len(cap)
    x = [0.0] * n
    active = [i for i in range(n) if caps[i] > 0.0]
    is_active = [False] * n
    for i in active:
        is_active[i] = True
    by_cap = sorted((caps[i] * delta[i], i) for i in active if caps[i] != math.inf)
    next_cap = 0
    frozen_use = [0.0] * m
    saturated = [False] * m

    def rate_of(j: int) -> float:
        return math.fsum(dem[i][j] / delta[i] for i in active if dem[i][j] > 0.0)

    rate = [rate_of(j) for j in range(m)]
    # A rate is kept up to date by subtraction on cap events; when it has shrunk to a
    # small fraction of the last exact value, the difference has lost digits (a tiny
    # weight left after large ones), so it is summed afresh.
    exact = list(rate)
    while active:
        t_res = math.inf
        for j in range(m):
            if rate[j] > 0.0 and not saturated[j]:
                t_res = min(t_res, max(cap[j] - frozen_use[j], 0.0) / rate[j])
        while next_cap < len(by_cap) and not is_active[by_cap[next_cap][1]]:
            next_cap += 1
        t_cap = by_cap[next_cap][0] if next_cap < len(by_cap) else math.inf
        if t_cap <= t_res:
            # Freeze every active user whose cap is reached at this level.
            touched: set[int] = set()
            while next_cap < len(by_cap) and by_cap[next_cap][0] <= t_cap:
                i = by_cap[next_cap][1]
                next_cap += 1
                if not is_active[i]:
                    continue
                is_active[i] = False
                x[i] = caps[i]
                for j, v in enumerate(dem[i]):
                    if v > 0.0:
                        frozen_use[j] += v * caps[i]
                        rate[j] = max(rate[j] - v / delta[i], 0.0)
                        touched.add(j)
            active = [i for i in active if is_active[i]]
            for j in touched:
                if rate[j] < exact[j] * _RECOMPUTE:
                    rate[j] = exact[j] = rate_of(j)
        else:
            if t_res == math.inf:  # pragma: no cover - every active user needs something
                raise AssertionError("fluid DRF: no event ahead with active users")
            full = [
                j for j in range(m)
                if rate[j] > 0.0 and not saturated[j]
                and max(cap[j] - frozen_use[j], 0.0) / rate[j] <= t_res * (1.0 + _SAME_LEVEL)
            ]
            for j in full:
                saturated[j] = True
            for i in active:
                if any(dem[i][j] > 0.0 for j in full):
                    is_active[i] = False
                    x[i] = t_res / delta[i]
            # Recompute from scratch after a saturation (at most m times) so that the
            # incremental updates of cap events do not accumulate rounding.
            active = [i for i in active if is_active[i]]
            frozen_use = [math.fsum(x[i] * dem[i][j] for i in range(n) if not is_active[i])
                          for j in range(m)]
            rate = [rate_of(j) for j in range(m)]
            exact = list(rate)
    return x


def drf(
    capacity: Sequence[float],
    demands: Sequence[Sequence[float]],
    weights: Weights | None = None,
    max_tasks: Sequence[float | None] | None = None,
    divisible: bool = False,
) -> DrfResult:
    """Dominant Resource Fairness, plain or weighted, indivisible or divisible.

    Args:
        capacity: ``C_j`` per resource (resource units, > 0 each).
        demands: ``d_ij``, user ``i``'s per-task demand vector (resource units per task,
            >= 0; zeros allowed on some resources, not on all).
        weights: ``None`` (all 1), a scalar weight per user (> 0, any unit: only ratios
            matter, e.g. Mcycles/s), or a weight vector per user with one weight per
            resource (> 0). Weighted dominant share: ``s_i = max_j (x_i d_ij / C_j) / w_ij``.
        max_tasks: per-user cap on ``x_i`` (tasks; ``None`` entries or ``inf`` unbounded);
            ``None`` means no caps. Indivisible: a user launches while ``x_i + 1 <= cap``.
            Divisible: ``x_i <= cap`` (a real number), e.g. the SQ local queues pass
            per-unit demand vectors with caps equal to the amounts wanted.
        divisible: ``False``: whole tasks, progressive filling (Algorithm 1) on a heap.
            ``True``: the fluid DRF (lexicographic max-min of the ``s_i``), exact up to
            float rounding (relative 1e-12).

    Returns:
        A :class:`DrfResult`. Paper example: ``drf([9, 18], [[1, 4], [3, 1]]).tasks ==
        (3, 2)``, both dominant shares 2/3.

    Raises:
        ValueError: naming argument and index: NaN, infinite or negative values, zero
            capacity, a user whose demand is zero on every resource, lengths that do not
            match, non-positive weights.
    """
    cap, dem = _prepare(capacity, demands)
    n, m = len(dem), len(cap)
    wmat = _weight_matrix(weights, n, m)
    caps = _caps(max_tasks, n)
    delta = [_per_task_share(cap, row, wrow) for row, wrow in zip(dem, wmat)]
    if divisible:
        tasks: Sequence[float] = _fluid_filling(cap, dem, delta, caps)
    else:
        tasks = _progressive_filling(cap, dem, delta, caps)
    return _result(cap, dem, tasks, wmat)


# ---------------------------------------------------------------------------------------
# Online form
# ---------------------------------------------------------------------------------------


class _User:
    """Book-keeping of one user in :class:`DrfAllocator` (mutable, private)."""

    __slots__ = ("key", "demand", "weights", "needs", "delta", "cap", "seq", "tasks",
                 "version", "blocked")

    def __init__(self, key: Hashable, demand: tuple[float, ...], weights: tuple[float, ...],
                 delta: float, cap: float, seq: int) -> None:
        self.key = key
        self.demand = demand
        self.weights = weights
        self.needs = [(j, v) for j, v in enumerate(demand) if v > 0.0]
        self.delta = delta
        self.cap = cap
        self.seq = seq
        self.tasks = 0
        self.version = 0
        self.blocked = False


class DrfAllocator:
    """Online indivisible (weighted) DRF: users come and go, tasks launch and finish.

    The local queues call :meth:`next_user` to pick whose task to start, :meth:`launch`
    when they start it and :meth:`release` when it finishes. Adding every user and then
    repeating ``launch(next_user())`` until :meth:`next_user` returns ``None`` gives
    exactly :func:`drf` of those users (same tie-breaking: the user added first wins).

    Cost: :meth:`next_user` and :meth:`launch` are ``O(log n)`` amortised (a heap of
    ``(s_i, insertion order)`` with lazy deletion). Users whose next task does not fit, or
    who reached ``max_tasks``, are parked; a :meth:`release` or :meth:`remove_user` frees
    resources and puts the parked users back (``O(b log n)`` for ``b`` parked users).

    Units: capacity and demands in resource units (demands per task); weights as in
    :func:`drf`; shares are fractions of the pool.
    """

    def __init__(self, capacity: Sequence[float]) -> None:
        self._cap = positive_vector("capacity", capacity)
        self._limit = [c * (1.0 + FIT_SLACK) for c in self._cap]
        self._used = [0.0] * len(self._cap)
        self._users: dict[Hashable, _User] = {}
        self._by_seq: dict[int, _User] = {}
        self._heap: list[tuple[float, int, int]] = []  # (s_i, seq, version)
        self._parked: list[_User] = []
        self._seq = 0
        self._running = 0  # tasks running in all

    # -- users -----------------------------------------------------------------------

    def add_user(
        self,
        user: Hashable,
        demand: Sequence[float],
        weight: float | Sequence[float] = 1.0,
        max_tasks: float | None = None,
    ) -> None:
        """Add ``user`` with per-task ``demand`` (resource units), a scalar or per-resource
        ``weight`` (> 0) and an optional cap on its running tasks.

        Raises:
            ValueError: ``user`` already present, or bad values (named as in :func:`drf`).
        """
        if user in self._users:
            raise ValueError(f"user: {user!r} is already present")
        m = len(self._cap)
        row = nonneg_matrix("demand", [demand], 1, m, "", "one per resource in capacity")[0]
        rows_not_all_zero("demand", [row])
        if isinstance(weight, (int, float)) and not isinstance(weight, bool):
            wrow = (positive_scalar("weight", weight),) * m
        else:
            wrow = positive_vector("weight", weight, m, "one per resource in capacity")
        cap = _caps([max_tasks], 1)[0]
        u = _User(user, row, wrow, _per_task_share(self._cap, row, wrow), cap, self._seq)
        self._seq += 1
        self._users[user] = u
        self._by_seq[u.seq] = u
        heapq.heappush(self._heap, (0.0, u.seq, 0))

    def remove_user(self, user: Hashable) -> None:
        """Remove ``user``, releasing all its running tasks."""
        u = self._get(user)
        for j, v in u.needs:
            self._used[j] -= v * u.tasks
        self._running -= u.tasks
        del self._users[user]
        del self._by_seq[u.seq]
        if u.blocked:
            self._parked.remove(u)
        self._freed()

    # -- decisions -------------------------------------------------------------------

    def next_user(self) -> Hashable | None:
        """The user with the lowest weighted dominant share whose next task fits (and who
        is below its cap), ties to the earliest added; ``None`` if nobody's task fits."""
        heap = self._heap
        while heap:
            _, seq, version = heap[0]
            u = self._by_seq.get(seq)
            if u is None or u.version != version:
                heapq.heappop(heap)  # stale entry: the user was removed or changed since
                continue
            if u.tasks + 1 > u.cap or not self._fits(u):
                heapq.heappop(heap)
                u.blocked = True
                self._parked.append(u)
                continue
            return u.key
        return None

    def launch(self, user: Hashable) -> None:
        """Start one task of ``user`` (normally the one :meth:`next_user` returned).

        Raises:
            ValueError: the task does not fit in what is free, or the user is at its cap.
        """
        u = self._get(user)
        if u.tasks + 1 > u.cap:
            raise ValueError(f"user: {user!r} is at max_tasks={u.cap}")
        if not self._fits(u):
            raise ValueError(f"user: {user!r}: next task does not fit in the free capacity")
        if u.blocked:
            u.blocked = False
            self._parked.remove(u)
        for j, v in u.needs:
            self._used[j] += v
        u.tasks += 1
        self._running += 1
        u.version += 1
        heapq.heappush(self._heap, (u.tasks * u.delta, u.seq, u.version))

    def release(self, user: Hashable) -> None:
        """One task of ``user`` finished: give its resources back.

        Raises:
            ValueError: the user has no running task.
        """
        u = self._get(user)
        if u.tasks == 0:
            raise ValueError(f"user: {user!r} has no running task to release")
        for j, v in u.needs:
            self._used[j] -= v
        u.tasks -= 1
        self._running -= 1
        u.version += 1
        if not u.blocked:
            heapq.heappush(self._heap, (u.tasks * u.delta, u.seq, u.version))
        self._freed()

    def fill(self) -> list[Hashable]:
        """Launch tasks in DRF order until nothing fits; return whose tasks were launched,
        in order."""
        launched: list[Hashable] = []
        while (user := self.next_user()) is not None:
            self.launch(user)
            launched.append(user)
        return launched

    # -- state -----------------------------------------------------------------------

    @property
    def users(self) -> tuple[Hashable, ...]:
        """Present users, in insertion order."""
        return tuple(self._users)

    @property
    def capacity(self) -> tuple[float, ...]:
        """``C_j`` (resource units)."""
        return self._cap

    @property
    def usage(self) -> tuple[float, ...]:
        """Resources held by running tasks, per resource (resource units)."""
        return tuple(self._used)

    def tasks(self, user: Hashable) -> int:
        """Running tasks of ``user``."""
        return self._get(user).tasks

    def dominant_share(self, user: Hashable) -> float:
        """Weighted dominant share ``s_i`` of ``user`` (dimensionless)."""
        u = self._get(user)
        return u.tasks * u.delta

    def result(self) -> DrfResult:
        """The current allocation as a :class:`DrfResult`, users in insertion order."""
        us = list(self._users.values())
        return _result(self._cap, tuple(u.demand for u in us), [u.tasks for u in us],
                       tuple(u.weights for u in us))

    # -- internals -------------------------------------------------------------------

    def _get(self, user: Hashable) -> _User:
        try:
            return self._users[user]
        except KeyError:
            raise ValueError(f"user: {user!r} is not present") from None

    def _fits(self, u: _User) -> bool:
        used, limit = self._used, self._limit
        return all(used[j] + v <= limit[j] for j, v in u.needs)

    def _freed(self) -> None:
        """Resources were freed: parked users may fit again."""
        if self._running == 0:
            # Nothing runs: clear the rounding left by many launches and releases.
            self._used = [0.0] * len(self._cap)
        for u in self._parked:
            u.blocked = False
            u.version += 1
            heapq.heappush(self._heap, (u.tasks * u.delta, u.seq, u.version))
        self._parked.clear()
