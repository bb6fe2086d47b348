"""RealClock with fake time sources and a fake ntplib client (no network)."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from typing import Any

import ntplib
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clocks.base import Clock
from clocks.real_clock import (
    ClockQuality,
    NtpServer,
    RealClock,
    parse_server,
    resolve_host,
)

WALL0 = 1_700_000_000.0  # fake wall clock at fake monotonic 0


@dataclass
class FakeTime:
    """Monotonic and wall clock that move only when the test says so."""

    mono: float = 100.0
    wall_minus_mono: float = WALL0

    def monotonic(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.mono + self.wall_minus_mono


@dataclass
class Reply:
    """What ntplib.NTPStats exposes and RealClock reads."""

    offset: float = 0.0
    delay: float = 0.01
    stratum: int = 2
    leap: int = 0
    mode: int = 4
    ref_id: int = 0
    tx_timestamp: float = 3.9e9


@dataclass
class FakeClient:
    """Per-host scripted replies or exceptions; records every request."""

    answers: dict[str, Reply | BaseException] = field(default_factory=dict)
    calls: list[tuple[str, int, int, float]] = field(default_factory=list)

    def request(self, host: str, version: int = 2, port: Any = 123, timeout: float = 5) -> Any:
        self.calls.append((host, version, port, timeout))
        answer = self.answers[host]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def numeric(host: str, port: int) -> str:
    """Resolver for tests: names are their own address, 'bad.*' fail like DNS."""
    if host.startswith("bad."):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return host


def make(
    servers: list[str], client: FakeClient, t: FakeTime, **kwargs: Any
) -> RealClock:
    return RealClock(
        servers,
        monotonic=t.monotonic,
        wall=t.wall,
        client=client,
        resolver=numeric,
        **kwargs,
    )


# --- local clock -----------------------------------------------------------------------


def test_no_servers_is_the_local_clock() -> None:
    t = FakeTime()
    clock = make([], FakeClient(), t)
    assert isinstance(clock, Clock)
    assert clock.now() == pytest.approx(t.wall())
    t.mono += 2.5
    assert clock.now() == pytest.approx(t.wall())
    status = clock.sync()
    assert status.quality is ClockQuality.LOCAL
    assert status.sync_count == 0 and status.failure_count == 0
    assert status.offset_s == 0.0 and status.error is None
    with clock:  # start() has nothing to discipline: no thread
        assert clock._thread is None


def test_local_clock_ignores_wall_steps_between_syncs() -> None:
    t = FakeTime()
    clock = make([], FakeClient(), t)
    before = clock.now()
    t.wall_minus_mono -= 30.0  # somebody steps the system clock back
    t.mono += 1.0
    assert clock.now() == pytest.approx(before + 1.0)


# --- step / slew rule ----------------------------------------------------------------------


def test_first_sync_before_any_read_steps_even_backwards() -> None:
    t = FakeTime()
    client = FakeClient({"a": Reply(offset=-5.0, delay=0.02)})
    clock = make(["a:1234"], client, t)
    status = clock.sync()
    assert client.calls == [("a", 4, 1234, 2.0)]
    assert status.quality is ClockQuality.SYNCED
    assert status.offset_s == -5.0 and status.server == "a:1234" and status.stratum == 2
    assert status.last_sync == t.mono and status.delay_s == 0.02
    assert status.sync_count == 1 and status.slew_remaining_s == 0.0
    assert clock.now() == pytest.approx(t.wall() - 5.0)


def test_large_forward_correction_is_stepped() -> None:
    t = FakeTime()
    client = FakeClient({"a": Reply(offset=0.0)})
    clock = make(["a"], client, t, step_threshold_s=0.1)
    clock.sync()
    before = clock.now()
    client.answers["a"] = Reply(offset=2.0)
    clock.sync()
    assert clock.now() == pytest.approx(before + 2.0)
    assert clock.status().slew_remaining_s == 0.0


def test_backward_correction_is_slewed_never_stepped() -> None:
    t = FakeTime()
    client = FakeClient({"a": Reply(offset=0.0)})
    clock = make(["a"], client, t, slew_rate=0.1)
    clock.sync()
    before = clock.now()
    client.answers["a"] = Reply(offset=-1.0)
    clock.sync()
    assert clock.now() == pytest.approx(before)  # continuous at the sync
    assert clock.status().slew_remaining_s == pytest.approx(-1.0)
    t.mono += 5.0  # runs at 0.9 s per s while slewing
    assert clock.now() == pytest.approx(before + 4.5)
    assert clock.status().slew_remaining_s == pytest.approx(-0.5)
    t.mono += 5.0  # absorbed after 10 s; then 1 s per s again
    assert clock.now() == pytest.approx(before + 9.0)
    t.mono += 5.0
    assert clock.now() == pytest.approx(before + 14.0)
    assert clock.now() == pytest.approx(t.wall() - 1.0)


def test_small_forward_correction_is_slewed() -> None:
    t = FakeTime()
    client = FakeClient({"a": Reply(offset=0.0)})
    clock = make(["a"], client, t, slew_rate=0.01, step_threshold_s=0.128)
    clock.sync()
    before = clock.now()
    client.answers["a"] = Reply(offset=0.05)
    clock.sync()
    t.mono += 2.0
    assert clock.now() == pytest.approx(before + 2.02)
    t.mono += 10.0
    assert clock.now() == pytest.approx(t.wall() + 0.05)


def test_resync_mid_slew_folds_the_slewed_part() -> None:
    t = FakeTime()
    client = FakeClient({"a": Reply(offset=0.0)})
    clock = make(["a"], client, t, slew_rate=0.1)
    clock.sync()
    clock.now()
    client.answers["a"] = Reply(offset=-1.0)
    clock.sync()
    t.mono += 4.0  # 0.4 s of the 1.0 s absorbed
    mid = clock.now()
    client.answers["a"] = Reply(offset=-2.0)  # the target moves further back
    clock.sync()
    assert clock.now() == pytest.approx(mid)
    assert clock.status().slew_remaining_s == pytest.approx(-1.6)
    t.mono += 16.0
    assert clock.now() == pytest.approx(t.wall() - 2.0)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 50.0),  # monotonic advance before the op, s
            st.floats(-20.0, 20.0),  # measured offset, s
            st.floats(-3.0, 3.0),  # wall-clock step of the host, s
            st.booleans(),  # sync succeeds?
        ),
        min_size=1,
        max_size=30,
    ),
    st.floats(0.001, 0.5),
)
def test_now_never_decreases_and_converges(ops: list[Any], slew_rate: float) -> None:
    t = FakeTime()
    client = FakeClient({"a": Reply()})
    clock = make(["a"], client, t, slew_rate=slew_rate)
    last = clock.now()
    good_target: float | None = None  # wall - mono + offset at the last good sync
    for advance, offset, wall_step, ok in ops:
        t.mono += advance
        t.wall_minus_mono += wall_step
        value = clock.now()
        assert value >= last
        last = value
        client.answers["a"] = Reply(offset=offset) if ok else ntplib.NTPException("No response")
        status = clock.sync()
        assert status.quality is (ClockQuality.SYNCED if ok else ClockQuality.DEGRADED)
        if ok:
            good_target = t.wall_minus_mono + offset
        assert clock.now() >= last
    # Long enough with no further syncs: the last good target is reached exactly (wall
    # steps after that sync are not followed: T_R runs on the monotonic clock).
    t.mono += abs(clock.status().slew_remaining_s) / slew_rate + 1.0
    assert clock.now() >= last
    assert clock.status().slew_remaining_s == 0.0
    if good_target is not None:
        assert clock.now() == pytest.approx(t.mono + good_target, abs=1e-6)


# --- failures --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (ntplib.NTPException("No response received from a."), "timeout: no reply within 2 s"),
        (ntplib.NTPException("Invalid NTP packet."), "bad reply: Invalid NTP packet."),
        (TimeoutError("timed out"), "timeout"),
        (ConnectionRefusedError(111, "Connection refused"), "network: "),
        (
            Reply(stratum=0, ref_id=int.from_bytes(b"RATE", "big")),
            "kiss-of-death: stratum 0, code 'RATE'",
        ),
        (Reply(stratum=16), "bad stratum: 16"),
        (Reply(leap=3), "leap indicator alarm (3)"),
        (Reply(mode=3), "bad reply: mode 3"),
        (Reply(tx_timestamp=0), "zero transmit timestamp"),
        (Reply(offset=float("nan")), "not finite"),
    ],
)
def test_failure_degrades_and_keeps_last_good_offset(answer: Any, reason: str) -> None:
    t = FakeTime()
    client = FakeClient({"a": Reply(offset=3.0)})
    clock = make(["a"], client, t)
    clock.sync()
    first_sync = clock.status().last_sync
    t.mono += 10.0
    client.answers["a"] = answer
    status = clock.sync()
    assert status.quality is ClockQuality.DEGRADED
    assert status.error is not None and status.error.startswith("a:123: ")
    assert reason in status.error
    assert status.offset_s == 3.0 and status.last_sync == first_sync
    assert status.sync_count == 1 and status.failure_count == 1
    assert clock.now() == pytest.approx(t.wall() + 3.0)
    client.answers["a"] = Reply(offset=3.0)  # recovers on the next good sync
    status = clock.sync()
    assert status.quality is ClockQuality.SYNCED and status.error is None


def test_dns_failure_is_reported_as_dns() -> None:
    t = FakeTime()
    client = FakeClient()
    clock = make(["bad.example"], client, t)
    status = clock.sync()
    assert status.quality is ClockQuality.DEGRADED
    assert status.error is not None and "dns: cannot resolve 'bad.example'" in status.error
    assert status.offset_s == 0.0 and status.server is None
    assert client.calls == []  # never asked ntplib


def test_best_server_is_the_one_with_smallest_delay() -> None:
    t = FakeTime()
    client = FakeClient(
        {
            "far": Reply(offset=1.0, delay=0.2, stratum=1),
            "near": Reply(offset=1.5, delay=0.01, stratum=3),
            "dead": ntplib.NTPException("No response received from dead."),
        }
    )
    clock = make(["far", "dead", "near:999"], client, t)
    status = clock.sync()
    assert status.quality is ClockQuality.SYNCED
    assert (status.server, status.offset_s, status.stratum) == ("near:999", 1.5, 3)
    assert [c[0] for c in client.calls] == ["far", "dead", "near"]


def test_all_servers_failing_lists_every_reason() -> None:
    t = FakeTime()
    client = FakeClient({"x": Reply(leap=3)})
    clock = make(["bad.one", "x"], client, t)
    status = clock.sync()
    assert status.quality is ClockQuality.DEGRADED
    assert status.error is not None
    first, second = status.error.split("; ")
    assert first.startswith("bad.one:123: dns")
    assert second.startswith("x:123: leap indicator alarm")


# --- background thread --------------------------------------------------------------------


class CountingClient(FakeClient):
    """Signals after a given number of requests."""

    def __init__(self, target: int) -> None:
        super().__init__({"a": Reply(offset=0.25)})
        self.target = target
        self.reached = threading.Event()

    def request(self, host: str, version: int = 2, port: Any = 123, timeout: float = 5) -> Any:
        reply = super().request(host, version, port, timeout)
        if len(self.calls) >= self.target:
            self.reached.set()
        return reply


def test_background_thread_resyncs_until_closed() -> None:
    t = FakeTime()
    client = CountingClient(target=3)
    with make(["a"], client, t, interval_s=0.001) as clock:
        assert client.reached.wait(timeout=30.0)
    calls_at_close = len(client.calls)
    assert clock._thread is None
    assert clock.status().sync_count == calls_at_close >= 3
    assert len(client.calls) == calls_at_close  # nothing after close()
    clock.close()  # idempotent


# --- configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("pool.ntp.org", NtpServer("pool.ntp.org", 123)),
        (" 127.0.0.1:1234 ", NtpServer("127.0.0.1", 1234)),
        ("[::1]:5000", NtpServer("::1", 5000)),
        ("[::1]", NtpServer("::1", 123)),
        ("fe80::1", NtpServer("fe80::1", 123)),
    ],
)
def test_parse_server(spec: str, expected: NtpServer) -> None:
    assert parse_server(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", r"servers\[2\]: must be a non-empty"),
        ("host:", r"servers\[2\]: port '' is not an integer 1-65535"),
        ("host:70000", r"servers\[2\]: port '70000'"),
        ("host:abc", r"servers\[2\]: port 'abc'"),
        (":123", r"servers\[2\]: empty host"),
        ("[::1", r"servers\[2\]: missing '\]'"),
        ("[::1]x", r"servers\[2\]: expected ':port'"),
        ("a:b:c", r"servers\[2\]: 'a:b:c' is neither"),
    ],
)
def test_parse_server_rejects(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_server(spec, 2)


def test_str_of_server_round_trips() -> None:
    for spec in ["h:1", "[::1]:2"]:
        assert str(parse_server(spec)) == spec


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"interval_s": 0}, "interval_s"),
        ({"timeout_s": float("inf")}, "timeout_s"),
        ({"slew_rate": 1.0}, "slew_rate"),
        ({"step_threshold_s": -1.0}, "step_threshold_s"),
        ({"version": 2}, "version"),
    ],
)
def test_constructor_rejects_bad_settings(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RealClock(["a"], **kwargs)


def test_servers_must_be_a_list_not_a_string() -> None:
    with pytest.raises(ValueError, match="servers: must be a list"):
        RealClock("pool.ntp.org")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"servers\[1\]"):
        RealClock(["ok", "x:0"])


def test_status_to_dict_is_plain() -> None:
    t = FakeTime()
    clock = make(["a"], FakeClient({"a": Reply(offset=0.5)}), t)
    d = clock.sync().to_dict()
    assert d["quality"] == "synced" and d["offset_s"] == 0.5 and d["server"] == "a:123"
    assert set(d) >= {"offset_s", "quality", "server", "stratum", "last_sync", "error",
                      "sync_count", "failure_count"}


def test_resolver_refuses_invalid_tld_without_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_dns(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("getaddrinfo must not be called for .invalid")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    for name in ["nonexistent.invalid", "x.INVALID.", "invalid"]:
        with pytest.raises(socket.gaierror):
            resolve_host(name, 123)


def test_resolver_returns_numeric_address() -> None:
    assert resolve_host("127.0.0.1", 123) == "127.0.0.1"
