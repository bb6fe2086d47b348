"""max_min_fair with weights many orders of magnitude apart (the local scheduler gives a
zero weight 1e-9 next to weights of tens of Mcycles/s): the shares must never add up to
more than the capacity."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairness.single import max_min_fair, proportional_fair


def test_tiny_weight_after_a_large_satisfied_one_gets_exactly_the_rest() -> None:
    # The weight-32 user wants 1; the 1e-9 user gets the other 98, not 98.0003.
    alloc = max_min_fair(99.0, [1.0, 100.0], [32.0, 1e-9])
    assert alloc[0] == 1.0
    assert alloc[1] == pytest.approx(98.0, rel=1e-12)
    assert sum(alloc) <= 99.0 * (1 + 1e-12)


@settings(deadline=None, max_examples=150)
@given(
    capacity=st.floats(1.0, 1e4),
    rows=st.lists(
        st.tuples(
            st.floats(0.0, 1e4),
            st.one_of(st.floats(1e-9, 1e-6), st.floats(1.0, 1e3)),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_shares_never_exceed_capacity_with_extreme_weight_ratios(
    capacity: float, rows: list[tuple[float, float]]
) -> None:
    demands = [d for d, _ in rows]
    weights = [w for _, w in rows]
    for fn in (max_min_fair, proportional_fair):
        alloc = fn(capacity, demands, weights)
        assert sum(alloc) <= capacity * (1 + 1e-12)
        assert sum(alloc) == pytest.approx(min(capacity, sum(demands)), rel=1e-9)
        for a, d in zip(alloc, demands):
            assert 0.0 <= a <= d
