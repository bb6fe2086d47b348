"""Shared input validation for the allocation policies.

Every public policy in :mod:`fairness` checks its arguments with these helpers, so that bad
input always fails the same way: a :class:`ValueError` whose message starts with the
argument name and index (``demands[2][1]``), then the reason, then the offending value.
Example: ``demands[2][1]: must be >= 0, got -1.0``.

The helpers return plain ``float`` tuples (a numpy array, list or tuple of any real
numbers is accepted), so the policies can work on them in plain Python, which is faster
than numpy for the small inputs the local queues pass every scheduling cycle.
Units are whatever the caller's units are; these helpers only check signs and shapes.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

__all__ = [
    "check_finite",
    "check_length",
    "nonneg_matrix",
    "nonneg_scalar",
    "nonneg_vector",
    "positive_matrix",
    "positive_scalar",
    "positive_vector",
    "rows_not_all_zero",
]


_INF = math.inf
_PLAIN = (float, int)


def _plain(seq: Sequence[Any]) -> bool:
    """Only built-in floats and small ints (not bool): the fast path converts them
    directly (an int beyond float range goes to the slow path and its message)."""
    return all(type(v) is float or (type(v) is int and -2**1000 < v < 2**1000) for v in seq)


def check_finite(name: str, value: Any) -> float:
    """Return ``value`` as a float; raise ``ValueError`` naming ``name`` unless it is a
    finite real number (``bool`` and strings are refused: they are always a mistake here)."""
    if type(value) is float and -_INF < value < _INF:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name}: must be a number, got {value!r}")
    try:
        x = float(value)
    except OverflowError:
        raise ValueError(f"{name}: must be finite, got {value!r}") from None
    if math.isnan(x):
        raise ValueError(f"{name}: is NaN")
    if math.isinf(x):
        raise ValueError(f"{name}: must be finite, got {x!r}")
    return x


def nonneg_scalar(name: str, value: Any) -> float:
    """A finite real number ``>= 0``."""
    x = check_finite(name, value)
    if x < 0.0:
        raise ValueError(f"{name}: must be >= 0, got {x!r}")
    return x


def positive_scalar(name: str, value: Any) -> float:
    """A finite real number ``> 0`` (e.g. a capacity or a weight)."""
    x = check_finite(name, value)
    if x <= 0.0:
        raise ValueError(f"{name}: must be > 0, got {x!r}")
    return x


def _as_sequence(name: str, values: Any) -> Sequence[Any]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise ValueError(f"{name}: must be a sequence of numbers, got {values!r}")
    if not hasattr(values, "__getitem__"):
        values = list(values)
    return values  # type: ignore[no-any-return]


def check_length(name: str, values: Any, expected: int, what: str) -> Sequence[Any]:
    """Check that ``values`` has ``expected`` entries; ``what`` says why (e.g. ``"one per
    user"``) and goes into the message."""
    seq = _as_sequence(name, values)
    if len(seq) != expected:
        raise ValueError(f"{name}: has {len(seq)} entries, expected {expected} ({what})")
    return seq


def nonneg_vector(
    name: str, values: Any, length: int | None = None, what: str = ""
) -> tuple[float, ...]:
    """A sequence of finite reals ``>= 0``; with ``length``, exactly that many."""
    seq = _as_sequence(name, values) if length is None else check_length(
        name, values, length, what)
    # Fast path for the every-cycle calls of the local queues; the comparison is False for
    # NaN, negative and infinite values, which then get their precise message below.
    if _plain(seq):
        out = tuple(map(float, seq))
        if all(0.0 <= x < _INF for x in out):
            return out
    return tuple(nonneg_scalar(f"{name}[{i}]", v) for i, v in enumerate(seq))


def positive_vector(
    name: str, values: Any, length: int | None = None, what: str = ""
) -> tuple[float, ...]:
    """A sequence of finite reals ``> 0``; with ``length``, exactly that many. An empty
    sequence is refused when ``length`` is ``None`` (a capacity needs a resource)."""
    seq = _as_sequence(name, values) if length is None else check_length(
        name, values, length, what)
    if length is None and len(seq) == 0:
        raise ValueError(f"{name}: must not be empty")
    if _plain(seq):
        out = tuple(map(float, seq))
        if all(0.0 < x < _INF for x in out):
            return out
    return tuple(positive_scalar(f"{name}[{i}]", v) for i, v in enumerate(seq))


def nonneg_matrix(
    name: str, rows: Any, n_rows: int | None = None, n_cols: int | None = None,
    what_rows: str = "", what_cols: str = "",
) -> tuple[tuple[float, ...], ...]:
    """A sequence of rows of finite reals ``>= 0``; every row has ``n_cols`` entries."""
    seq = _as_sequence(name, rows) if n_rows is None else check_length(
        name, rows, n_rows, what_rows)
    return tuple(nonneg_vector(f"{name}[{i}]", r, n_cols, what_cols) for i, r in enumerate(seq))


def positive_matrix(
    name: str, rows: Any, n_rows: int | None = None, n_cols: int | None = None,
    what_rows: str = "", what_cols: str = "",
) -> tuple[tuple[float, ...], ...]:
    """A sequence of rows of finite reals ``> 0``; every row has ``n_cols`` entries."""
    seq = _as_sequence(name, rows) if n_rows is None else check_length(
        name, rows, n_rows, what_rows)
    return tuple(positive_vector(f"{name}[{i}]", r, n_cols, what_cols) for i, r in enumerate(seq))


def rows_not_all_zero(name: str, rows: Sequence[Sequence[float]]) -> None:
    """Refuse a row whose entries are all zero (a user who demands nothing has no dominant
    share, so the multi-resource policies cannot place it)."""
    for i, row in enumerate(rows):
        if not any(v > 0.0 for v in row):
            raise ValueError(f"{name}[{i}]: demand is zero on every resource")
