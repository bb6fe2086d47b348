"""Hypothesis strategies shared by the DMFA-SRQ tests (the unit tests and the comparison
with a real LP solver). Importable by name because pytest puts this folder on sys.path
for the rootdir conftest.py beside it."""

from __future__ import annotations

import math

from hypothesis import strategies as st


@st.composite
def arrivals(draw: st.DrawFn, max_users: int = 12) -> tuple[list[list[float]], list[float]]:
    """A random arrival sequence of 1..``max_users`` users: per-task demands over 1..3
    resources (fractions of the pool, some zero, each row with a positive entry) and
    shares summing to a random total in (0.2, 1]."""
    m = draw(st.integers(1, 3))
    n = draw(st.integers(1, max_users))
    entry = st.one_of(st.just(0.0), st.floats(0.001, 1.0))
    demands = []
    for _ in range(n):
        row = draw(st.lists(entry, min_size=m, max_size=m))
        if not any(v > 0 for v in row):
            row[draw(st.integers(0, m - 1))] = draw(st.floats(0.001, 1.0))
        demands.append(row)
    raw = draw(st.lists(st.floats(0.01, 1.0), min_size=n, max_size=n))
    total = draw(st.floats(0.2, 1.0))
    shares = [r * total / math.fsum(raw) for r in raw]
    return demands, shares
