"""Shared input validation: every message names the argument, the index and the reason."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fairness import _validate as v


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: v.nonneg_vector("demands", [1.0, math.nan]), r"^demands\[1\]: is NaN$"),
        (lambda: v.nonneg_vector("demands", [1.0, -2.0]), r"^demands\[1\]: must be >= 0"),
        (lambda: v.positive_vector("capacity", [3.0, 0.0]), r"^capacity\[1\]: must be > 0"),
        (lambda: v.positive_vector("capacity", []), r"^capacity: must not be empty"),
        (lambda: v.positive_scalar("capacity", 0), r"^capacity: must be > 0"),
        (lambda: v.nonneg_scalar("capacity", math.inf), r"^capacity: must be finite"),
        (lambda: v.nonneg_vector("weights", [1.0], 2, "one per user"),
         r"^weights: has 1 entries, expected 2 \(one per user\)$"),
        (lambda: v.nonneg_matrix("demands", [[1, 2], [3]], None, 2, "", "one per resource"),
         r"^demands\[1\]: has 1 entries, expected 2"),
        (lambda: v.nonneg_matrix("demands", [[1, 2], [3, -1]], None, 2), r"^demands\[1\]\[1\]"),
        (lambda: v.nonneg_vector("demands", ["1"]), r"^demands\[0\]: must be a number"),
        (lambda: v.nonneg_vector("demands", [True]), r"^demands\[0\]: must be a number"),
        (lambda: v.nonneg_vector("demands", 3.0), r"^demands: must be a sequence"),
        (lambda: v.nonneg_vector("demands", [1, 10**400]), r"^demands\[1\]: must be finite"),
        (lambda: v.positive_vector("capacity", [1.0, math.inf]),
         r"^capacity\[1\]: must be finite"),
        (lambda: v.rows_not_all_zero("demands", [(1.0, 0.0), (0.0, 0.0)]),
         r"^demands\[1\]: demand is zero on every resource$"),
    ],
)
def test_bad_input_names_argument_and_index(call, message) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_good_input_comes_back_as_float_tuples() -> None:
    assert v.nonneg_vector("d", np.array([1, 2])) == (1.0, 2.0)
    assert v.positive_matrix("d", [[1, 2], (3.5, 4)], 2, 2) == ((1.0, 2.0), (3.5, 4.0))
    assert all(type(x) is float for x in v.nonneg_vector("d", np.array([1, 2])))
