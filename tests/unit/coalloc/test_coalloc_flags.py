"""coalloc.flags: command-line values parsed, bad ones refused with the flag named."""

from __future__ import annotations

import re

import pytest

from coalloc.errors import UserError
from coalloc.flags import duration_flag, int_flag, seconds_flag
from tests.support import run_cli


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


@pytest.mark.parametrize(("text", "seconds"), [
    ("1d", 86400.0), ("6h", 21600.0), ("30m", 1800.0), ("90s", 90.0), ("3600", 3600.0),
    (" 1.5H ", 5400.0),
])
def test_duration_flag_reads_a_number_with_a_unit(text: str, seconds: float) -> None:
    assert duration_flag("--keep-finished", text) == seconds


@pytest.mark.parametrize(("text", "why"), [
    ("2x", "is not a duration"), ("d", "is not a duration"), ("", "is not a duration"),
    ("0m", "must be a duration > 0"), ("-1h", "must be a duration > 0"),
    ("infd", "must be a duration > 0"), ("nan", "must be a duration > 0"),
])
def test_duration_flag_refuses_what_is_not_a_positive_duration(text: str, why: str) -> None:
    with pytest.raises(UserError, match=rf"^--keep-finished: .*{why}"):
        duration_flag("--keep-finished", text)


def test_up_refuses_a_bad_keep_finished_in_one_line_before_starting_anything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(capsys, "up", "--keep-finished", "2x")
    assert code == 2 and not out
    assert err.strip().count("\n") == 0 and "--keep-finished: '2x' is not a duration" in err


@pytest.mark.parametrize("argv,why", [
    (["--lease", "20"], r"--lease: must be shorter than the node-loss window \(50 cycles x "
                        r"0\.3 s = 15 s, --node-timeout at time scale 100\), got 20 s"),
    (["--lease", "5", "--node-timeout", "15"], r"--lease: must be shorter .* = 4\.5 s.*got 5 s"),
    (["--lease", "-1"], r"--lease: must be a finite number of seconds > 0, got -1"),
    (["--lease", "ten"], r"--lease: 'ten' is not a number of seconds"),
])
def test_up_refuses_a_lease_not_shorter_than_the_loss_window_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], why: str,
) -> None:
    code, out, err = run_cli(capsys, "up", *argv)
    assert code == 2 and not out
    assert err.strip().count("\n") == 0 and re.search(why, err), err
