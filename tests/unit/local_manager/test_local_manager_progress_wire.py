"""The progress datagram (local_manager.progress_wire): what parses, what is dropped and
why, and that no input makes the parser fail any other way."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local_manager.progress_wire import (
    MAX_DATAGRAM,
    DatagramError,
    DropReason,
    ProgressDatagram,
    encode,
    parse,
    parse_addr,
)

KEY = "0123456789abcdef" * 2
finite = st.floats(min_value=0.0, max_value=1e300, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-300, max_value=1e300, allow_nan=False, allow_infinity=False)


@given(finite, st.none() | positive, finite, st.booleans())
def test_a_report_round_trips_exactly(t: float, end: float | None, wait: float,
                                      waiting: bool) -> None:
    assert parse(encode(KEY, t, end, wait, waiting)) == ProgressDatagram(KEY, t, end, wait,
                                                                         waiting)


@given(st.binary(max_size=2 * MAX_DATAGRAM))
def test_any_bytes_parse_or_name_their_reason(data: bytes) -> None:
    try:
        d = parse(data)
    except DatagramError as exc:
        assert isinstance(exc.reason, DropReason)
    else:
        assert math.isfinite(d.t) and d.t >= 0 and d.wait_s >= 0


@pytest.mark.parametrize(("text", "reason"), [
    (f"CPR1 {KEY} nan - 0 0", DropReason.NOT_FINITE),
    (f"CPR1 {KEY} 1 inf 0 0", DropReason.NOT_FINITE),
    (f"CPR1 {KEY} 1e999 - 0 0", DropReason.NOT_FINITE),
    (f"CPR1 {KEY} -1 - 0 0", DropReason.OUT_OF_RANGE),
    (f"CPR1 {KEY} 1 0 0 0", DropReason.OUT_OF_RANGE),
    (f"CPR2 {KEY} 1 - 0 0", DropReason.MALFORMED),
    (f"CPR1 {KEY.upper()} 1 - 0 0", DropReason.MALFORMED),
    (f"CPR1 {KEY} 1_000 - 0 0", DropReason.MALFORMED),
    (f"CPR1 {KEY} 0x10 - 0 0", DropReason.MALFORMED),
    (f"CPR1 {KEY} 1 - 0 2", DropReason.MALFORMED),
    (f"CPR1 {KEY} 1 - 0", DropReason.MALFORMED),
    (f"CPR1  {KEY} 1 - 0 0", DropReason.MALFORMED),
    ("CPR1 " + KEY + " 1 - 0 0 " + "x" * MAX_DATAGRAM, DropReason.OVERSIZE),
])
def test_bad_datagrams_are_refused_with_their_reason(text: str, reason: DropReason) -> None:
    with pytest.raises(DatagramError) as exc:
        parse(text.encode())
    assert exc.value.reason is reason


def test_what_c_printf_writes_parses() -> None:
    # snprintf("%.17g") output, with and without a trailing newline
    assert parse(f"CPR1 {KEY} 42 1000 0.25 1\n".encode()) == ProgressDatagram(
        KEY, 42.0, 1000.0, 0.25, True)
    assert parse(f"CPR1 {KEY} 1.0000000000000001e-05 - 0 0".encode()).t == 1e-05


def test_addresses() -> None:
    assert parse_addr("127.0.0.1:5000") == ("127.0.0.1", 5000)
    for bad in ("127.0.0.1", ":5", "h:0", "h:x", "h:70000"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_addr(bad)
