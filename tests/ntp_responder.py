"""A small NTP server (mode 4 replies to v3/v4 mode 3 requests) on a loopback UDP socket.

It exists for tests and demos of ``RealClock`` and lives with the tests (not in the
``clocks`` package, which does not use it); tests import it as ``ntp_responder``
(``tests/`` is on ``sys.path`` under pytest, as for ``dmfa_strategies``), and
``python3 tests/ntp_responder.py --offset 5`` runs it by hand.

Its time is the local wall clock plus a configurable ``offset_s``, and switches make it
misbehave on purpose (``drop`` requests, ``delay_s`` before replying, any ``stratum``
including 0 = kiss-of-death, any ``leap`` indicator). Those attributes may be changed
while it runs.

Packet (RFC 5905, 48-byte header, all fields big-endian)::

    byte 0      LI (2 bits) | VN (3 bits) | mode (3 bits)
    byte 1      stratum          byte 2  poll (log2 s)     byte 3  precision (log2 s)
    4..7        root delay       8..11   root dispersion   (16.16 fixed point, seconds)
    12..15      reference id (ASCII kiss code when stratum is 0)
    16..23      reference timestamp      24..31  originate timestamp (client's transmit)
    32..39      receive timestamp        40..47  transmit timestamp

Timestamps are 32.32 fixed-point seconds since 1900-01-01 (the NTP era 0 epoch).
"""

from __future__ import annotations

import ipaddress
import math
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from types import TracebackType

__all__ = ["NtpResponder", "from_ntp_timestamp", "to_ntp_timestamp"]

#: Seconds from the NTP epoch (1900-01-01) to the Unix epoch (1970-01-01).
NTP_UNIX_DELTA = 2_208_988_800

HEADER = struct.Struct("!BBbbII4sQQQQ")  # 48 bytes
MODE_CLIENT = 3
MODE_SERVER = 4


def to_ntp_timestamp(unix_s: float) -> int:
    """Unix seconds -> 64-bit NTP timestamp (32.32 fixed point since 1900)."""
    return int(round((unix_s + NTP_UNIX_DELTA) * 2**32)) & 0xFFFF_FFFF_FFFF_FFFF


def from_ntp_timestamp(stamp: int) -> float:
    """64-bit NTP timestamp -> Unix seconds."""
    return stamp / 2**32 - NTP_UNIX_DELTA


def _short(seconds: float) -> int:
    """Seconds -> NTP 16.16 short format."""
    return max(0, min(0xFFFF_FFFF, int(round(seconds * 2**16))))


class NtpResponder:
    """An NTP server thread on ``host`` (loopback) and an ephemeral UDP port.

    Attributes that may be changed while running:
      offset_s: seconds added to the wall clock in replies (the offset a client measures).
      stratum: 0 (kiss-of-death, reference id = ``kiss_code``) .. 16 (unsynchronised).
      leap: leap indicator 0..3 (3 = alarm, clock not synchronised).
      drop: when True, requests are read and silently ignored (client times out).
      delay_s: seconds to wait between receiving a request and replying.
    Counters: ``served`` replies sent, ``dropped`` requests ignored (drop switch or
    malformed / non-client packets).
    """

    def __init__(
        self,
        *,
        offset_s: float = 0.0,
        stratum: int = 2,
        leap: int = 0,
        drop: bool = False,
        delay_s: float = 0.0,
        kiss_code: str = "DENY",
        host: str = "127.0.0.1",
        port: int = 0,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if not math.isfinite(offset_s):
            raise ValueError(f"offset_s: must be a finite number of seconds, got {offset_s!r}")
        if not 0 <= stratum <= 255:
            raise ValueError(f"stratum: must be 0..255, got {stratum!r}")
        if leap not in (0, 1, 2, 3):
            raise ValueError(f"leap: leap indicator must be 0..3, got {leap!r}")
        if not (math.isfinite(delay_s) and delay_s >= 0):
            raise ValueError(f"delay_s: must be a finite number of seconds >= 0, got {delay_s!r}")
        if len(kiss_code.encode("ascii")) > 4:
            raise ValueError(f"kiss_code: at most 4 ASCII characters, got {kiss_code!r}")
        if not _is_loopback(host):
            raise ValueError(f"host: must be a loopback address, got {host!r}")
        self.offset_s = float(offset_s)
        self.stratum = stratum
        self.leap = leap
        self.drop = drop
        self.delay_s = float(delay_s)
        self.kiss_code = kiss_code
        self.served = 0
        self.dropped = 0
        self._wall = wall
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_DGRAM)
        self._sock.bind((host, port))
        self.host: str = host
        self.port: int = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        """``host:port`` as ``RealClock`` takes it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def start(self) -> NtpResponder:
        """Serve requests in a daemon thread; returns ``self``."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="ntp-responder", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and close the socket."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._sock.close()

    def __enter__(self) -> NtpResponder:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _now(self) -> float:
        return self._wall() + self.offset_s

    def _serve(self) -> None:
        while not self._stop.is_set():
            # Poll so that close() is noticed within 0.05 s.
            ready, _, _ = select.select([self._sock], [], [], 0.05)
            if not ready:
                continue
            try:
                data, peer = self._sock.recvfrom(512)
            except OSError:
                continue
            received = self._now()
            reply = self.reply_to(data, received)
            if reply is None:
                self.dropped += 1
                continue
            if self.delay_s > 0 and self._stop.wait(self.delay_s):
                return
            # The transmit time is taken last, as late as possible before sending.
            reply = reply[:40] + struct.pack("!Q", to_ntp_timestamp(self._now()))
            try:
                self._sock.sendto(reply, peer)
                self.served += 1
            except OSError:
                self.dropped += 1

    def reply_to(self, request: bytes, received_unix_s: float) -> bytes | None:
        """Build the 48-byte reply to ``request`` received at ``received_unix_s``.

        Returns None (drop) when the drop switch is on, the packet is shorter than 48
        bytes, is not a client request (mode 3) or has a version other than 3 or 4.
        The transmit timestamp is filled with the receive time; ``_serve`` overwrites it
        just before sending.
        """
        if self.drop or len(request) < HEADER.size:
            return None
        first = request[0]
        version, mode = (first >> 3) & 0x7, first & 0x7
        if mode != MODE_CLIENT or version not in (3, 4):
            return None
        client_transmit = request[40:48]  # echoed verbatim as our originate timestamp
        stratum = self.stratum
        if stratum == 0:
            ref_id = self.kiss_code.encode("ascii").ljust(4, b"\x00")
        else:
            ref_id = b"LOCL"
        received = to_ntp_timestamp(received_unix_s)
        header = HEADER.pack(
            (self.leap << 6) | (version << 3) | MODE_SERVER,
            stratum,
            6,  # poll: 64 s
            -20,  # precision: about 1 microsecond
            _short(0.0),  # root delay
            _short(0.001),  # root dispersion
            ref_id,
            received,  # reference timestamp: "last set" = now, for a test server
            0,
            received,
            received,
        )
        return header[:24] + client_transmit + header[32:]


def _is_loopback(host: str) -> bool:
    """True when ``host`` is a literal loopback address (127.0.0.0/8 or ::1)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    """Demo: ``python3 tests/ntp_responder.py --offset 5`` serves until interrupted."""
    import argparse

    parser = argparse.ArgumentParser(description="loopback NTP responder for demos and tests")
    parser.add_argument("--offset", type=float, default=0.0, help="seconds added to wall time")
    parser.add_argument("--stratum", type=int, default=2)
    parser.add_argument("--leap", type=int, default=0)
    parser.add_argument("--port", type=int, default=0, help="UDP port (default: ephemeral)")
    args = parser.parse_args(argv)
    try:
        responder = NtpResponder(
            offset_s=args.offset, stratum=args.stratum, leap=args.leap, port=args.port
        )
    except (ValueError, OSError) as exc:
        print(f"ntp_responder: {exc}")
        return 2
    with responder:
        print(f"serving NTP on {responder.address} (offset {args.offset:+g} s); Ctrl-C stops",
              flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
