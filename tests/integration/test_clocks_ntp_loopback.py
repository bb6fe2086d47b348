"""RealClock through real ntplib and real UDP against the loopback NTP responder.

Only loopback addresses are contacted: the responder binds 127.0.0.1, and the
unresolvable name is under the reserved ``.invalid`` TLD, which the resolver refuses
without asking a DNS server (RFC 6761).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from ntp_responder import NtpResponder

from clocks.real_clock import ClockQuality, RealClock

pytestmark = pytest.mark.integration

#: Offset measured over loopback must be this close to the responder's offset, seconds.
TOLERANCE_S = 0.05
TIMEOUT_S = 0.3


@pytest.fixture
def responder() -> Iterator[NtpResponder]:
    with NtpResponder(offset_s=7.25) as r:
        yield r


def disciplined_offset(clock: RealClock) -> float:
    """T_R minus the local wall clock, seconds."""
    return clock.now() - time.time()


def test_measured_offset_matches_configured(responder: NtpResponder) -> None:
    clock = RealClock([responder.address], timeout_s=TIMEOUT_S)
    status = clock.sync()
    assert status.quality is ClockQuality.SYNCED, status.error
    assert status.offset_s == pytest.approx(7.25, abs=TOLERANCE_S)
    assert status.server == responder.address and status.stratum == 2
    assert disciplined_offset(clock) == pytest.approx(7.25, abs=TOLERANCE_S)
    # The responder counts a reply after sendto returns, which may be after the client
    # has it: wait (bounded) for the count rather than race it.
    deadline = time.monotonic() + 5.0
    while responder.served < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert responder.served == 1


def test_resync_picks_up_changed_offset(responder: NtpResponder) -> None:
    clock = RealClock([responder.address], timeout_s=TIMEOUT_S)
    clock.sync()
    clock.now()
    responder.offset_s = 9.5  # forward by 2.25 s: above the step threshold, stepped
    status = clock.sync()
    assert status.offset_s == pytest.approx(9.5, abs=TOLERANCE_S)
    assert status.sync_count == 2
    assert disciplined_offset(clock) == pytest.approx(9.5, abs=TOLERANCE_S)


def test_backward_offset_step_keeps_now_monotonic(responder: NtpResponder) -> None:
    clock = RealClock([responder.address], timeout_s=TIMEOUT_S)
    clock.sync()
    readings = [clock.now()]
    responder.offset_s = 1.0  # 6.25 s backwards
    status = clock.sync()
    assert status.offset_s == pytest.approx(1.0, abs=TOLERANCE_S)
    assert status.slew_remaining_s == pytest.approx(-6.25, abs=TOLERANCE_S)
    readings += [clock.now() for _ in range(1000)]
    assert all(b >= a for a, b in zip(readings, readings[1:]))
    # Still close to the old offset: the step back is slewed in, not applied at once.
    assert disciplined_offset(clock) == pytest.approx(7.25, abs=TOLERANCE_S)


def test_timeout_degrades_and_keeps_last_good_offset(responder: NtpResponder) -> None:
    clock = RealClock([responder.address], timeout_s=TIMEOUT_S)
    clock.sync()
    responder.drop = True
    status = clock.sync()
    assert status.quality is ClockQuality.DEGRADED
    assert status.error is not None and "timeout" in status.error
    assert status.offset_s == pytest.approx(7.25, abs=TOLERANCE_S)
    assert disciplined_offset(clock) == pytest.approx(7.25, abs=TOLERANCE_S)
    assert responder.dropped >= 1


def test_reply_slower_than_timeout_degrades(responder: NtpResponder) -> None:
    responder.delay_s = 1.0
    clock = RealClock([responder.address], timeout_s=0.1)
    status = clock.sync()
    assert status.quality is ClockQuality.DEGRADED
    assert status.error is not None and "timeout" in status.error


@pytest.mark.parametrize(
    ("stratum", "leap", "reason"),
    [(0, 0, "kiss-of-death"), (16, 0, "bad stratum: 16"), (2, 3, "leap indicator alarm")],
)
def test_bad_server_state_degrades(
    responder: NtpResponder, stratum: int, leap: int, reason: str
) -> None:
    clock = RealClock([responder.address], timeout_s=TIMEOUT_S)
    clock.sync()
    responder.stratum, responder.leap = stratum, leap
    status = clock.sync()
    assert status.quality is ClockQuality.DEGRADED
    assert status.error is not None and reason in status.error
    assert status.offset_s == pytest.approx(7.25, abs=TOLERANCE_S)


def test_unresolvable_host_degrades_with_dns_reason() -> None:
    clock = RealClock(["nonexistent.invalid"], timeout_s=TIMEOUT_S)
    status = clock.sync()
    assert status.quality is ClockQuality.DEGRADED
    assert status.error is not None and "dns: cannot resolve 'nonexistent.invalid'" in status.error
    assert status.offset_s == 0.0


def test_no_servers_is_local_quality() -> None:
    with RealClock([]) as clock:
        assert clock.sync().quality is ClockQuality.LOCAL
        assert disciplined_offset(clock) == pytest.approx(0.0, abs=TOLERANCE_S)


def test_background_thread_syncs_against_responder(responder: NtpResponder) -> None:
    with RealClock([responder.address], interval_s=0.01, timeout_s=TIMEOUT_S) as clock:
        deadline = time.monotonic() + 30.0
        while clock.status().sync_count < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        status = clock.status()
    assert status.sync_count >= 3 and status.quality is ClockQuality.SYNCED
    assert status.offset_s == pytest.approx(7.25, abs=TOLERANCE_S)
