"""coalloc.flags: command-line values parsed, bad ones refused with the flag named."""

from __future__ import annotations

import pytest

from coalloc.errors import UserError
from coalloc.flags import int_flag, seconds_flag


def test_int_flag_parses_and_bounds() -> None:
    assert int_flag("--jobs", "7", 1) == 7
    assert int_flag("--seed", "-3", None) == -3
    with pytest.raises(UserError, match=r"^--jobs: must be >= 1, got 0$"):
        int_flag("--jobs", "0", 1)
    with pytest.raises(UserError, match=r"^--jobs: 'x' is not an integer$"):
        int_flag("--jobs", "x", 1)
    with pytest.raises(UserError, match=r"^--nodes: '2.5' is not a count$"):
        int_flag("--nodes", "2.5", 1, "a count")


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf"])
def test_seconds_flag_refuses_non_positive_or_non_finite(text: str) -> None:
    with pytest.raises(UserError, match=rf"^--cycle: must be a finite number of seconds > 0, "
                                        rf"got {text}$"):
        seconds_flag("--cycle", text)


def test_seconds_flag_parses_and_names_the_expected_form() -> None:
    assert seconds_flag("--cycle", "2.5") == 2.5
    with pytest.raises(UserError, match=r"^--cycle: 'abc' is not a number of seconds$"):
        seconds_flag("--cycle", "abc")
    with pytest.raises(UserError, match=r"^--lam: 'abc' is not a number \(e\.g\. 10\)$"):
        seconds_flag("--lam", "abc", "a number (e.g. 10)")
