"""The NTP responder's packet format, checked with ntplib's own parser (no traffic)."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import ntplib
import pytest
from ntp_responder import (
    NtpResponder,
    from_ntp_timestamp,
    to_ntp_timestamp,
)

T0 = 1_700_000_000.25


def request(version: int = 4, mode: int = 3, transmit: int = 0x1234_5678_9ABC_DEF0) -> bytes:
    return struct.pack("!B47x", (version << 3) | mode)[:40] + struct.pack("!Q", transmit)


@pytest.fixture
def responder() -> Iterator[NtpResponder]:
    r = NtpResponder(offset_s=2.0, stratum=3, leap=1, wall=lambda: T0)
    yield r
    r.close()


def test_timestamp_round_trip() -> None:
    stamp = to_ntp_timestamp(T0)
    assert stamp >> 32 == int(T0) + 2_208_988_800  # seconds since 1900
    assert (stamp & 0xFFFF_FFFF) == 2**30  # .25 s as a 32-bit fraction
    assert from_ntp_timestamp(stamp) == T0


def test_reply_is_a_valid_server_packet(responder: NtpResponder) -> None:
    reply = responder.reply_to(request(version=3), T0 + 2.0)
    assert reply is not None and len(reply) == 48
    stats = ntplib.NTPStats()
    stats.from_data(reply)
    assert (stats.leap, stats.version, stats.mode, stats.stratum) == (1, 3, 4, 3)
    assert stats.recv_timestamp == pytest.approx(T0 + 2.0 + 2_208_988_800)
    # The client's transmit timestamp comes back verbatim as the originate timestamp.
    assert reply[24:32] == struct.pack("!Q", 0x1234_5678_9ABC_DEF0)


def test_kiss_of_death_carries_the_code(responder: NtpResponder) -> None:
    responder.stratum = 0
    responder.kiss_code = "RATE"
    reply = responder.reply_to(request(), T0)
    assert reply is not None
    assert reply[1] == 0 and reply[12:16] == b"RATE"


@pytest.mark.parametrize(
    "packet",
    [request(mode=4), request(mode=1), request(version=2), request(version=5), b"\x23" * 47],
)
def test_non_client_or_short_packets_are_dropped(
    responder: NtpResponder, packet: bytes
) -> None:
    assert responder.reply_to(packet, T0) is None


def test_drop_switch(responder: NtpResponder) -> None:
    responder.drop = True
    assert responder.reply_to(request(), T0) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"host": "0.0.0.0"}, "host: must be a loopback"),
        ({"host": "localhost"}, "host: must be a loopback"),
        ({"leap": 4}, "leap"),
        ({"stratum": 256}, "stratum"),
        ({"delay_s": -1.0}, "delay_s"),
        ({"offset_s": float("nan")}, "offset_s"),
        ({"kiss_code": "TOOLONG"}, "kiss_code"),
    ],
)
def test_bad_settings(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NtpResponder(**kwargs)  # type: ignore[arg-type]
