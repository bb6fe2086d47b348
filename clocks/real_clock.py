"""The real clock ``T_R`` of the live runtime: NTP-disciplined, monotonic locally.

Every node of the grid reads one global real time ``T_R`` (seconds since the Unix
epoch). Each node keeps its own ``RealClock``; they agree because each one is
disciplined by ``ntplib`` against the same configured NTP servers. With no servers
configured the clock is the local wall clock (quality ``local``).

How ``now()`` is built
----------------------
``now() = monotonic() + base + slewed`` where ``base`` maps the local monotonic clock to
the disciplined wall time, and ``slewed`` is the part of the latest correction applied
so far. A sync measures the NTP offset ``theta`` (server time minus local wall time) and
computes the target ``base* = wall() + theta - monotonic()``. The correction
``d = base* - base`` is applied by this rule:

* first sync before anyone has read ``now()``: step at once, in either direction
  (nobody has seen the old value, so nothing can go backwards);
* ``d > step_threshold_s`` (the clock is well behind): step forward at once;
* otherwise (small forward corrections, and EVERY backward correction): slew, that is,
  run the clock at rate ``1 ± slew_rate`` until ``d`` has been absorbed.

A backward correction is never stepped, so ``now()`` never decreases (a final clamp
to the last value returned also absorbs float rounding). A new sync first folds the
already-slewed part into ``base``, so the value is continuous at the sync.

Failures (timeout, DNS error, kiss-of-death / bad stratum, leap indicator alarm,
malformed reply) mark the clock ``degraded`` with the reason; the last good correction
stays in force (and keeps slewing in), so ``T_R`` keeps running on the last good offset.

Time sources (``monotonic``, ``wall``), the ntplib client and the host resolver are
injected so that unit tests can drive every path without a network.
"""

from __future__ import annotations

import ipaddress
import math
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from types import TracebackType
from typing import Any, Protocol

import ntplib

__all__ = [
    "ClockQuality",
    "ClockStatus",
    "NtpServer",
    "RealClock",
    "parse_server",
    "resolve_host",
]

#: Default NTP port.
NTP_PORT = 123

#: Largest stratum of a synchronised server (RFC 5905: 16 means unsynchronised).
MAX_STRATUM = 15

#: Leap indicator value meaning "clock not synchronised" (alarm).
LEAP_ALARM = 3

#: NTP mode of a server reply.
MODE_SERVER = 4


class ClockQuality(str, Enum):
    """How much ``T_R`` can be trusted."""

    LOCAL = "local"  # local wall clock: no servers configured, or none tried yet
    SYNCED = "synced"  # the last sync succeeded
    DEGRADED = "degraded"  # the last sync failed; running on the last good offset


@dataclass(frozen=True, slots=True)
class ClockStatus:
    """A snapshot of a ``RealClock``.

    ``offset_s``: last good NTP offset (server minus local wall clock), seconds; 0.0
    before any good sync. ``quality``: see ``ClockQuality``. ``server``: ``host:port``
    of the last good sync (None before). ``stratum``: that server's stratum.
    ``last_sync``: monotonic time (seconds, the clock's ``monotonic`` source) of the
    last good sync, None before. ``error``: reason of the last failed sync, None when
    the last sync succeeded. ``sync_count`` / ``failure_count``: good / failed syncs so
    far. ``delay_s``: round-trip delay of the last good sync, seconds.
    ``slew_remaining_s``: correction still being slewed in, seconds (signed).
    """

    offset_s: float
    quality: ClockQuality
    server: str | None
    stratum: int | None
    last_sync: float | None
    error: str | None
    sync_count: int
    failure_count: int
    delay_s: float | None = None
    slew_remaining_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (quality as its string value)."""
        out = asdict(self)
        out["quality"] = self.quality.value
        return out


@dataclass(frozen=True, slots=True)
class NtpServer:
    """One configured NTP server: host name or address, and UDP port."""

    host: str
    port: int = NTP_PORT

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_server(spec: str | NtpServer, index: int = 0) -> NtpServer:
    """Parse ``host``, ``host:port``, ``[v6addr]`` or ``[v6addr]:port``.

    ``index`` is the position in the ``servers`` list, used in error messages.
    Raises ValueError naming ``servers[index]`` and the reason.
    """
    if isinstance(spec, NtpServer):
        return spec
    where = f"servers[{index}]"
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{where}: must be a non-empty 'host' or 'host:port', got {spec!r}")
    text = spec.strip()
    port_text: str | None = None
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ValueError(f"{where}: missing ']' in {spec!r}")
        host, rest = text[1:close], text[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"{where}: expected ':port' after ']' in {spec!r}")
            port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif text.count(":") > 1:
        host = text  # a bare IPv6 address: no port
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(
                f"{where}: {spec!r} is neither 'host:port' nor an IPv6 address; "
                "write IPv6 with a port as '[addr]:port'"
            ) from None
    else:
        host = text
    if not host:
        raise ValueError(f"{where}: empty host in {spec!r}")
    port = NTP_PORT
    if port_text is not None:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"{where}: port {port_text!r} is not an integer 1-65535")
        port = int(port_text)
    return NtpServer(host, port)


def resolve_host(host: str, port: int) -> str:
    """Resolve ``host`` to one numeric address for ``port``; raise ``socket.gaierror``.

    Names under the special-use TLD ``.invalid`` (RFC 6761 section 6.4) are refused at
    once without asking any DNS server, as that RFC asks name-resolution libraries
    to do.
    """
    name = host.rstrip(".").lower()
    if name == "invalid" or name.endswith(".invalid"):
        raise socket.gaierror(socket.EAI_NONAME, f"{host!r} is a reserved .invalid name")
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    if not infos:
        raise socket.gaierror(socket.EAI_NONAME, f"no address for {host!r}")
    return str(infos[0][4][0])


class NtpClientLike(Protocol):
    """The part of ``ntplib.NTPClient`` the clock uses."""

    def request(self, host: str, version: int = ..., port: Any = ..., timeout: float = ...) -> Any:
        """Query one server; return an ``ntplib.NTPStats``-like reply."""
        ...


class _SyncFailure(Exception):
    """One server failed; the message is the reason recorded in the status."""


@dataclass(frozen=True, slots=True)
class _Sample:
    server: NtpServer
    offset_s: float
    delay_s: float
    stratum: int


def _ref_id_text(ref_id: int) -> str:
    """The 4-byte reference id as ASCII (kiss codes are ASCII), unprintables as '?'."""
    raw = int(ref_id).to_bytes(4, "big", signed=False)
    return "".join(chr(b) if 32 <= b < 127 else "?" for b in raw).rstrip("\x00 ?") or "?"


class RealClock:
    """One global real time ``T_R``, seconds since the Unix epoch, NTP-disciplined.

    Parameters (all times in seconds):
      servers: NTP servers as ``host`` or ``host:port``; empty -> local wall clock.
      interval_s: re-sync period of the background thread started by ``start()``.
      timeout_s: per-server request timeout.
      slew_rate: fraction of a second absorbed per second while slewing (0 < r < 1);
        the default 0.0005 (500 ppm) is the largest slew of the reference NTP daemon.
      step_threshold_s: a forward correction larger than this is stepped at once.
      version: NTP version sent (3 or 4).
      monotonic, wall: time sources (default ``time.monotonic`` / ``time.time``).
      client: an ``ntplib.NTPClient``-like object; resolver: host -> address.

    ``now()`` is thread-safe and never decreases. ``sync()`` queries every server and
    adopts the reply with the smallest round-trip delay; it returns the new status.
    """

    def __init__(
        self,
        servers: Sequence[str | NtpServer] = (),
        *,
        interval_s: float = 64.0,
        timeout_s: float = 2.0,
        slew_rate: float = 0.0005,
        step_threshold_s: float = 0.128,
        version: int = 4,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        client: NtpClientLike | None = None,
        resolver: Callable[[str, int], str] = resolve_host,
    ) -> None:
        if isinstance(servers, str):
            raise ValueError("servers: must be a list of 'host[:port]' strings, not one string")
        self.servers: tuple[NtpServer, ...] = tuple(
            parse_server(s, i) for i, s in enumerate(servers)
        )
        _check_positive("interval_s", interval_s)
        _check_positive("timeout_s", timeout_s)
        if not (isinstance(slew_rate, (int, float)) and 0 < slew_rate < 1):
            raise ValueError(f"slew_rate: must be in (0, 1) seconds per second, got {slew_rate!r}")
        if not (math.isfinite(step_threshold_s) and step_threshold_s >= 0):
            raise ValueError(
                f"step_threshold_s: must be a finite number of seconds >= 0, "
                f"got {step_threshold_s!r}"
            )
        if version not in (3, 4):
            raise ValueError(f"version: NTP version must be 3 or 4, got {version!r}")
        self.interval_s = float(interval_s)
        self.timeout_s = float(timeout_s)
        self.slew_rate = float(slew_rate)
        self.step_threshold_s = float(step_threshold_s)
        self.version = version
        self._monotonic = monotonic
        self._wall = wall
        self._client: NtpClientLike = client if client is not None else ntplib.NTPClient()
        self._resolver = resolver

        self._lock = threading.Lock()  # guards the mapping and the status fields
        self._sync_lock = threading.Lock()  # one sync at a time
        m = monotonic()
        self._base = wall() - m  # now() = monotonic() + base + slewed part
        self._pending = 0.0  # correction to slew in, seconds (signed)
        self._slew_start = m  # monotonic time the pending slew started
        self._last_value = -math.inf  # last value now() returned
        self._served = False  # has now() been read yet?

        self._offset_s = 0.0
        self._quality = ClockQuality.LOCAL
        self._server: str | None = None
        self._stratum: int | None = None
        self._last_sync: float | None = None
        self._error: str | None = None
        self._sync_count = 0
        self._failure_count = 0
        self._delay_s: float | None = None

        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- reading the clock ---------------------------------------------------------

    def _slewed(self, m: float) -> float:
        """Part of the pending correction applied by monotonic time ``m`` (lock held)."""
        done = self.slew_rate * max(0.0, m - self._slew_start)
        return math.copysign(min(abs(self._pending), done), self._pending)

    def now(self) -> float:
        """Current ``T_R``: seconds since the Unix epoch; never decreases."""
        with self._lock:
            m = self._monotonic()
            value = m + self._base + self._slewed(m)
            # Clamp: a fold at sync time may round differently by one ulp.
            if value < self._last_value:
                value = self._last_value
            self._last_value = value
            self._served = True
            return value

    def status(self) -> ClockStatus:
        """A snapshot of offset, quality, last server and counters."""
        with self._lock:
            remaining = self._pending - self._slewed(self._monotonic())
            return ClockStatus(
                offset_s=self._offset_s,
                quality=self._quality,
                server=self._server,
                stratum=self._stratum,
                last_sync=self._last_sync,
                error=self._error,
                sync_count=self._sync_count,
                failure_count=self._failure_count,
                delay_s=self._delay_s,
                slew_remaining_s=remaining,
            )

    # --- synchronising -------------------------------------------------------------

    def sync(self) -> ClockStatus:
        """Query all servers now and adopt the best good reply; return the status.

        With no servers this does nothing (quality stays ``local``). If every server
        fails, the clock becomes ``degraded``, keeps its last good offset and records
        the reasons (``host:port: reason``, joined by ``; ``).
        """
        if not self.servers:
            return self.status()
        with self._sync_lock:
            samples: list[_Sample] = []
            reasons: list[str] = []
            for server in self.servers:
                try:
                    samples.append(self._query(server))
                except _SyncFailure as failure:
                    reasons.append(f"{server}: {failure}")
            if not samples:
                with self._lock:
                    self._quality = ClockQuality.DEGRADED
                    self._error = "; ".join(reasons)
                    self._failure_count += 1
                return self.status()
            best = min(samples, key=lambda s: s.delay_s)
            self._adopt(best)
            return self.status()

    def _query(self, server: NtpServer) -> _Sample:
        """Ask one server; return a checked sample or raise ``_SyncFailure(reason)``."""
        try:
            address = self._resolver(server.host, server.port)
        except (socket.gaierror, UnicodeError) as exc:
            raise _SyncFailure(f"dns: cannot resolve {server.host!r}: {exc}") from None
        try:
            reply = self._client.request(
                address, version=self.version, port=server.port, timeout=self.timeout_s
            )
        except ntplib.NTPException as exc:
            text = str(exc)
            if text.startswith("No response"):
                raise _SyncFailure(f"timeout: no reply within {self.timeout_s:g} s") from None
            raise _SyncFailure(f"bad reply: {text}") from None
        except TimeoutError:
            raise _SyncFailure(f"timeout: no reply within {self.timeout_s:g} s") from None
        except socket.gaierror as exc:
            raise _SyncFailure(f"dns: cannot resolve {server.host!r}: {exc}") from None
        except OSError as exc:
            raise _SyncFailure(f"network: {exc}") from None
        return self._check(reply, server)

    def _check(self, reply: Any, server: NtpServer) -> _Sample:
        """Reject replies that must not discipline the clock (RFC 5905 sanity checks)."""
        stratum = int(reply.stratum)
        if int(reply.mode) != MODE_SERVER:
            raise _SyncFailure(f"bad reply: mode {int(reply.mode)}, expected {MODE_SERVER}")
        if stratum == 0:
            code = _ref_id_text(reply.ref_id)
            raise _SyncFailure(f"kiss-of-death: stratum 0, code {code!r}")
        if stratum > MAX_STRATUM:
            raise _SyncFailure(f"bad stratum: {stratum} (unsynchronised, > {MAX_STRATUM})")
        if int(reply.leap) == LEAP_ALARM:
            raise _SyncFailure("leap indicator alarm (3): server clock not synchronised")
        if not reply.tx_timestamp:
            raise _SyncFailure("bad reply: zero transmit timestamp")
        offset, delay = float(reply.offset), float(reply.delay)
        if not (math.isfinite(offset) and math.isfinite(delay)):
            raise _SyncFailure(f"bad reply: offset {offset!r} / delay {delay!r} not finite")
        return _Sample(server, offset, max(delay, 0.0), stratum)

    def _adopt(self, sample: _Sample) -> None:
        """Apply a good sample by the step/slew rule of the module docstring."""
        with self._lock:
            m = self._monotonic()
            target_base = self._wall() + sample.offset_s - m
            # Fold what has been slewed so far into base: the value is unchanged.
            done = self._slewed(m)
            self._base += done
            self._pending -= done
            self._slew_start = m
            correction = target_base - self._base
            if not self._served or correction > self.step_threshold_s:
                self._base = target_base
                self._pending = 0.0
            else:
                self._pending = correction
            self._offset_s = sample.offset_s
            self._quality = ClockQuality.SYNCED
            self._server = str(sample.server)
            self._stratum = sample.stratum
            self._last_sync = m
            self._error = None
            self._sync_count += 1
            self._delay_s = sample.delay_s

    # --- background re-sync --------------------------------------------------------

    def start(self) -> RealClock:
        """Start the background thread: sync now, then every ``interval_s``.

        With no servers there is nothing to discipline and no thread is started.
        Calling ``start()`` twice is harmless. Returns ``self``.
        """
        if not self.servers or (self._thread is not None and self._thread.is_alive()):
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="coalloc-realclock", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sync()
            self._stop.wait(self.interval_s)

    def close(self) -> None:
        """Stop the background thread (waits for a sync in progress to end)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def __enter__(self) -> RealClock:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        servers = ",".join(str(s) for s in self.servers) or "local"
        return f"RealClock(servers={servers}, quality={self._quality.value})"


def _check_positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: must be a finite number of seconds > 0, got {value!r}")
