"""Transport pieces that need no socket: the duplicate filter and argument checks.
(Real sockets: tests/integration/test_coallocator_transport.py.)"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coallocator.transport import (
    CommandSubscriber,
    ReportDeduplicator,
    ReportReceiver,
    _routing_id,
    _timeout_ms,
)


def test_in_order_reports_are_new_and_repeats_are_duplicates() -> None:
    d = ReportDeduplicator(window=8)
    assert [d.check("n1", 1, s) for s in range(5)] == ["new"] * 5
    assert d.check("n1", 1, 4) == "duplicate"
    assert d.check("n1", 1, 0) == "duplicate"


def test_out_of_order_inside_the_window_is_accepted_once() -> None:
    d = ReportDeduplicator(window=8)
    assert d.check("n1", 1, 10) == "new"
    assert d.check("n1", 1, 7) == "new"  # late, never seen
    assert d.check("n1", 1, 7) == "duplicate"
    assert d.check("n1", 1, 3) == "new"  # 10 - 3 = 7 < 8: still inside
    assert d.check("n1", 1, 2) == "stale"  # 10 - 2 = 8: beyond the window


def test_a_jump_beyond_the_window_forgets_the_old_bits() -> None:
    d = ReportDeduplicator(window=4)
    for s in range(4):
        d.check("n1", 1, s)
    assert d.check("n1", 1, 100) == "new"
    assert d.check("n1", 1, 99) == "new"
    assert d.check("n1", 1, 3) == "stale"


def test_streams_are_independent() -> None:
    d = ReportDeduplicator(window=8)
    assert d.check("n1", 1, 5) == "new"
    assert d.check("n1", 2, 5) == "new"  # a restarted manager: new incarnation
    assert d.check("n2", 1, 5) == "new"
    assert d.check("n1", 1, 5) == "duplicate"
    assert len(d) == 3


def test_stream_table_is_bounded_and_forgets_the_least_recently_updated() -> None:
    d = ReportDeduplicator(window=8, max_streams=4)
    for node in ("a", "b", "c", "d"):
        d.check(node, 1, 0)
    d.check("a", 1, 1)  # a and c are the recent ones
    d.check("c", 1, 1)
    d.check("e", 1, 0)  # over the cap: the older half (b, d) goes
    assert len(d) <= 4
    assert d.check("a", 1, 1) == "duplicate"
    assert d.check("c", 1, 1) == "duplicate"
    assert d.check("b", 1, 0) == "new"  # forgotten: taken as new again
    for i in range(1000):
        d.check(f"x{i}", 1, 0)
        assert len(d) <= 4


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=1, max_value=16),
    st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 1), st.integers(0, 60)),
        max_size=200,
    ),
)
def test_filter_matches_a_reference_model(
    window: int, reports: list[tuple[str, int, int]]
) -> None:
    """Against an unbounded model: stale below (highest - window), else duplicate iff
    seen before."""
    d = ReportDeduplicator(window=window)
    seen: dict[tuple[str, int], set[int]] = {}
    for node, inc, seq in reports:
        got = seen.setdefault((node, inc), set())
        top = max(got, default=None)
        if top is not None and seq <= top - window:
            expected = "stale"
        elif seq in got:
            expected = "duplicate"
        else:
            expected = "new"
            got.add(seq)
        assert d.check(node, inc, seq) == expected, (node, inc, seq)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"window": 0}, "window"), ({"max_streams": 0}, "max_streams"), ({"window": 2.0}, "window")],
)
def test_filter_arguments_are_checked(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=f"{name}:"):
        ReportDeduplicator(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "1", None])
def test_timeout_must_be_finite_and_non_negative(bad: object) -> None:
    with pytest.raises(ValueError, match="timeout_s:"):
        _timeout_ms(bad)  # type: ignore[arg-type]
    assert _timeout_ms(0.0) == 0 and _timeout_ms(0.0001) == 1 and _timeout_ms(2) == 2000


@pytest.mark.parametrize(
    ("node", "match"), [("", "non-empty"), ("x" * 256, "255"), ("\x00abc", "NUL"), (3, "str")]
)
def test_node_names_must_be_valid_routing_ids(node: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _routing_id(node)  # type: ignore[arg-type]
    assert _routing_id("node-ü") == "node-ü".encode()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"port": 0}, "port:"),
        ({"port": 70000}, "port:"),
        ({"host": ""}, "host:"),
        ({"rcvhwm": -1}, "rcvhwm:"),
        ({"max_msg_bytes": 10}, "max_msg_bytes:"),
        ({"dedupe_window": 0}, "window:"),
    ],
)
def test_receiver_arguments_are_checked(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ReportReceiver(**kwargs)  # type: ignore[arg-type]


def test_subscriber_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="endpoint:"):
        CommandSubscriber("localhost:5555", "n1")
    with pytest.raises(ValueError, match="node:"):
        CommandSubscriber("tcp://127.0.0.1:5555", "")
