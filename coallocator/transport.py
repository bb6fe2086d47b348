"""ZeroMQ transport of progress reports and re-weight commands (edge adapter).

Two channels, both bound by the controller, so that the only addresses anybody needs
are the controller's two endpoints (the GlobalManager holds them):

* **Reports**, local managers -> controller: the controller binds a PULL socket
  (:class:`ReportReceiver`); every local manager connects a PUSH socket
  (:class:`ReportSender`). PULL fair-queues the managers, one frame per message.
* **Commands**, controller -> local managers: the controller binds a ROUTER socket
  (:class:`CommandPublisher`); every local manager connects a DEALER whose routing id is
  its node name (:class:`CommandSubscriber`). ROUTER addresses a command to exactly one
  node by that id, with no prefix-matching pitfalls (PUB/SUB topics are prefixes: a
  subscription to ``node1`` also receives ``node10``'s commands) and with feedback:
  ``ROUTER_MANDATORY`` turns a command for a node that is not connected into a counted
  ``unroutable`` instead of a silent loss, and ``ROUTER_HANDOVER`` lets a restarted local
  manager take its name over from its dead predecessor. Losing a command is harmless
  (the next control period re-sends absolute weights), so full queues drop, never block.

Nothing here blocks a subtask or the control loop: every send is non-blocking with a
bounded high-water mark and counts what it drops; receivers wait at most the timeout
they are given. Receivers never raise on bad input: a message that is not exactly one
valid frame is dropped and counted by :class:`~coallocator.wire.DropReason`.

Thread safety: ZeroMQ sockets are not thread-safe. Each object must be used by one
thread at a time (a Ray actor with the default ``max_concurrency=1`` is fine; a threaded
actor must serialise calls). ``counters()`` only reads ints and may be called from any
thread; its snapshot may mix values from before and after a concurrent ``poll``.

All sockets have ``LINGER`` 0: closing never waits for unsent messages. Every class is a
context manager; ``close()`` is idempotent. The default ZeroMQ context is the process's
shared ``zmq.Context.instance()``, which is never terminated here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import zmq

from coallocator.messages import ProgressReport, ReweightCommand
from coallocator.wire import (
    DEFAULT_LIMITS,
    DropReason,
    FrameError,
    WireLimits,
    decode_command,
    decode_report,
    encode_command,
    encode_report,
)

log = logging.getLogger(__name__)

#: Messages a single ``poll`` takes off a socket at most (bounds its latency and memory).
DEFAULT_MAX_MESSAGES = 10_000

#: Duplicate window: per (node, incarnation), sequence numbers this far below the highest
#: one seen are still told apart (bits of the sliding window).
DEFAULT_DEDUPE_WINDOW = 256

#: (node, incarnation) streams remembered at most; beyond, the least recently updated
#: half is forgotten.
DEFAULT_MAX_STREAMS = 4096


def _timeout_ms(timeout_s: float) -> int:
    if not isinstance(timeout_s, (int, float)) or not 0.0 <= timeout_s < math.inf:
        raise ValueError(f"timeout_s: must be a finite number of seconds >= 0, got {timeout_s!r}")
    return math.ceil(timeout_s * 1000.0)


def _check_positive(name: str, value: int, low: int = 1) -> int:
    if type(value) is not int or value < low:
        raise ValueError(f"{name}: must be an int >= {low}, got {value!r}")
    return value


def _check_endpoint(endpoint: str) -> str:
    if not isinstance(endpoint, str) or "://" not in endpoint:
        raise ValueError(f"endpoint: must be a ZeroMQ endpoint such as tcp://host:port, "
                         f"got {endpoint!r}")
    return endpoint


def _tcp_endpoint(host: str, port: int) -> str:
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


def _bind(sock: zmq.Socket[Any], host: str, port: int | None) -> int:
    """Bind ``sock`` on host:port (port None: an ephemeral port); returns the port."""
    if not isinstance(host, str) or not host:
        raise ValueError(f"host: must be a non-empty str, got {host!r}")
    if port is not None and (type(port) is not int or not 0 < port < 65536):
        raise ValueError(f"port: must be an int in 1..65535 or None, got {port!r}")
    if ":" in host:
        sock.setsockopt(zmq.IPV6, 1)
    base = f"tcp://[{host}]" if ":" in host else f"tcp://{host}"
    try:
        if port is None:
            return int(sock.bind_to_random_port(base))
        sock.bind(f"{base}:{port}")
    except zmq.ZMQError as exc:
        where = f"{base}:{port}" if port is not None else f"{base} (ephemeral port)"
        raise OSError(exc.errno, f"cannot bind {where}: {exc.strerror}") from exc
    return port


_T = TypeVar("_T")


def _open_socket(
    context: zmq.Context[Any] | None,
    kind: int,
    options: Sequence[tuple[int, int | bytes]],
    attach: Callable[[zmq.Socket[Any]], _T],
) -> tuple[zmq.Socket[Any], _T]:
    """A new socket of ``kind`` (context None: the process's shared one) with ``LINGER``
    0, then ``options`` set in order, then ``attach(socket)`` (bind or connect); returns
    the socket and what ``attach`` returned (e.g. :func:`_bind`'s port). If any step
    fails the socket is closed and the error raised."""
    ctx = context if context is not None else zmq.Context.instance()
    sock: zmq.Socket[Any] = ctx.socket(kind)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        for option, value in options:
            sock.setsockopt(option, value)
        return sock, attach(sock)
    except Exception:
        sock.close(linger=0)
        raise


def _connect(sock: zmq.Socket[Any], endpoint: str) -> None:
    if endpoint.startswith("tcp://["):
        sock.setsockopt(zmq.IPV6, 1)
    sock.connect(endpoint)


_S = TypeVar("_S", bound="_SocketOwner")


class _SocketOwner:
    """Owns one ZeroMQ socket: ``close()`` is idempotent (the socket closes with LINGER
    0), and the owner is a context manager that closes it on exit."""

    _sock: zmq.Socket[Any]
    _closed: bool

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._sock.close(linger=0)

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ReportDeduplicator:
    """Ignores duplicate progress reports with bounded memory.

    A report is identified by (node, incarnation, seq). Per (node, incarnation) stream the
    filter keeps the highest ``seq`` seen and a ``window``-bit mask of which of the
    ``window`` sequence numbers at and below it have been seen (a sliding window as in
    IPsec anti-replay). A report is

    * ``new`` if its seq is above the highest (the window slides up) or inside the window
      and not seen yet (it arrived out of order);
    * ``duplicate`` if inside the window and already seen;
    * ``stale`` if ``window`` or more below the highest: it cannot be told from a
      duplicate any more, and something newer from the same stream has been applied.

    At most ``max_streams`` streams are remembered; past that, the least recently
    updated half is forgotten (a forgotten stream starts afresh, so one of its old
    reports replayed later would be taken as new). Memory: O(max_streams * window bits).
    """

    __slots__ = ("window", "max_streams", "_streams", "_full", "_tick")

    def __init__(
        self, window: int = DEFAULT_DEDUPE_WINDOW, max_streams: int = DEFAULT_MAX_STREAMS
    ) -> None:
        self.window = _check_positive("window", window)
        self.max_streams = _check_positive("max_streams", max_streams)
        self._full = (1 << window) - 1
        # (node, incarnation) -> [highest seq, mask, last-update tick]; mask bit i set
        # means seq (highest - i) has been seen
        self._streams: dict[tuple[str, int], list[int]] = {}
        self._tick = 0

    def __len__(self) -> int:
        return len(self._streams)

    def check(self, node: str, incarnation: int, seq: int) -> str:
        """Record (node, incarnation, seq); returns ``"new"``, ``"duplicate"`` or
        ``"stale"`` (see the class docstring)."""
        self._tick += 1
        key = (node, incarnation)
        st = self._streams.get(key)
        if st is None:
            if len(self._streams) >= self.max_streams:
                self._forget_half()
            self._streams[key] = [seq, 1, self._tick]
            return "new"
        st[2] = self._tick
        top = st[0]
        if seq > top:
            shift = seq - top
            st[1] = ((st[1] << shift) | 1) & self._full if shift < self.window else 1
            st[0] = seq
            return "new"
        back = top - seq
        if back >= self.window:
            return "stale"
        bit = 1 << back
        if st[1] & bit:
            return "duplicate"
        st[1] |= bit
        return "new"

    def _forget_half(self) -> None:
        by_age = sorted(self._streams.items(), key=lambda kv: kv[1][2])
        for key, _ in by_age[: max(1, len(by_age) // 2)]:
            del self._streams[key]


class _Receiver(_SocketOwner):
    """What the two receivers share: the ``received``/``accepted``/``dropped`` counters
    (a plain dict snapshot for ``status``) and the start of a ``poll``."""

    _received: int
    _accepted: int
    _dropped: dict[DropReason, int]
    _rcvtimeo: int  # the socket's RCVTIMEO, ms (-1: ZeroMQ's default, none)

    def _init_counters(self) -> None:
        self._received = 0
        self._accepted = 0
        self._dropped = {reason: 0 for reason in DropReason}

    def _count_drop(self, reason: DropReason) -> None:
        self._dropped[reason] += 1

    def _base_counters(self) -> dict[str, Any]:
        dropped = {reason.value: n for reason, n in self._dropped.items()}
        return {
            "received": self._received,
            "accepted": self._accepted,
            "dropped_total": sum(dropped.values()),
            "dropped": dropped,
        }

    def _first_flags(self, timeout_s: float, max_messages: int) -> int:
        """Check ``poll``'s arguments (ValueError) and that the receiver is open
        (RuntimeError); returns the receive flags for the first message of the poll:
        NOBLOCK for a zero timeout, else a blocking receive bounded by RCVTIMEO (set only
        when the timeout changes). A blocking receive waits inside libzmq, as a
        zmq.Poller would, without the Poller's Python overhead on every call."""
        timeout_ms = _timeout_ms(timeout_s)
        _check_positive("max_messages", max_messages)
        if self._closed:
            raise RuntimeError(f"{type(self).__name__}: poll after close")
        if timeout_ms == 0:
            return int(zmq.NOBLOCK)
        if self._rcvtimeo != timeout_ms:
            self._sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
            self._rcvtimeo = timeout_ms
        return 0


def _drain_rest(sock: zmq.Socket[Any]) -> int:
    """Discard the remaining parts of a multipart message; returns how many. The parts
    of a message arrive together, so NOBLOCK receives cannot miss any."""
    parts = 0
    while sock.get(zmq.RCVMORE):
        sock.recv(zmq.NOBLOCK)
        parts += 1
    return parts


class ReportReceiver(_Receiver):
    """The controller's end of the report channel: a bound PULL socket.

    ``host``/``port``: where to bind (port None: an ephemeral port); ``endpoint`` is then
    ``tcp://host:port`` (with a wildcard host such as ``0.0.0.0`` peers must use the
    node's address and :attr:`port`). ``limits``: frame limits (:class:`WireLimits`).
    ``rcvhwm``: messages queued in ZeroMQ before senders' own queues fill and their sends
    start dropping (0 = unbounded). ``max_msg_bytes``: hard cap given to libzmq
    (``MAXMSGSIZE``); a frame above ``limits.max_frame_bytes`` but within the cap is
    counted ``oversized``, one above the cap makes libzmq drop that peer's connection
    before allocating it (not counted: libzmq does not report it; the peer reconnects).
    Default: 16 x ``max_frame_bytes``. Memory held by ZeroMQ for unread messages is at
    most about ``rcvhwm`` x ``max_msg_bytes`` (valid frames are under 600 bytes; lower
    both where hostile peers can connect). ``dedupe_window``/``max_streams``: see
    :class:`ReportDeduplicator`.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = None,
        *,
        limits: WireLimits = DEFAULT_LIMITS,
        rcvhwm: int = 10_000,
        max_msg_bytes: int | None = None,
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
        max_streams: int = DEFAULT_MAX_STREAMS,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        _check_positive("rcvhwm", rcvhwm, 0)
        cap = 16 * limits.max_frame_bytes if max_msg_bytes is None else max_msg_bytes
        _check_positive("max_msg_bytes", cap, limits.max_frame_bytes)
        self.limits = limits
        self.dedupe = ReportDeduplicator(dedupe_window, max_streams)
        self._init_counters()
        self._duplicates = 0
        self._stale = 0
        self._internal_errors = 0
        self._sock, self.port = _open_socket(
            context, zmq.PULL, ((zmq.RCVHWM, rcvhwm), (zmq.MAXMSGSIZE, cap)),
            lambda sock: _bind(sock, host, port),
        )
        self.host = host
        self.endpoint = _tcp_endpoint(host, self.port)
        self._rcvtimeo = -1
        self._closed = False

    @property
    def socket(self) -> zmq.Socket[Any]:
        """The PULL socket, to register in a caller's ``zmq.Poller`` (read it only
        through :meth:`poll`)."""
        return self._sock

    def poll(
        self, timeout_s: float = 0.0, max_messages: int = DEFAULT_MAX_MESSAGES
    ) -> list[ProgressReport]:
        """Take the messages that have arrived (at most ``max_messages``); if there were
        none, wait up to ``timeout_s`` seconds for one and take what has arrived then.
        Returns the valid, new reports in arrival order; everything else is counted.
        Never raises on bad input; raises ValueError on bad arguments and RuntimeError
        once closed."""
        flags = self._first_flags(timeout_s, max_messages)
        out: list[ProgressReport] = []
        self._drain(out, max_messages, flags)
        return out

    def _drain(self, out: list[ProgressReport], max_messages: int, flags: int) -> int:
        """Take up to ``max_messages`` messages, the first one with ``flags`` (0: wait up
        to RCVTIMEO), the others only if already there; append the new valid reports to
        ``out``; returns how many messages were taken."""
        sock = self._sock
        recv = sock.recv
        decode = decode_report
        limits = self.limits
        check = self.dedupe.check
        append = out.append
        noblock = zmq.NOBLOCK
        received = accepted = duplicates = stale = 0
        try:
            for _ in range(max_messages):
                # copy=False: a zmq.Frame carries its MORE flag, which costs less than
                # asking the socket for RCVMORE; msgpack decodes the Frame's buffer
                try:
                    frame = recv(flags, copy=False)
                except zmq.Again:
                    break
                flags = noblock
                received += 1
                if frame.more:
                    _drain_rest(sock)
                    self._count_drop(DropReason.MULTIPART)
                    continue
                try:
                    report = decode(frame, limits)
                except FrameError as exc:
                    self._count_drop(exc.reason)
                    continue
                verdict = check(report.node, report.incarnation, report.seq)
                if verdict == "new":
                    accepted += 1
                    append(report)
                elif verdict == "duplicate":
                    duplicates += 1
                else:
                    stale += 1
        except zmq.ZMQError:  # the socket or context failed: not bad input
            raise
        except Exception:  # a bug must not stop the controller; count it and say so once
            self._internal_errors += 1
            self._count_drop(DropReason.UNDECODABLE)
            if self._internal_errors == 1:
                log.exception("ReportReceiver: unexpected error while receiving")
        finally:
            self._received += received
            self._accepted += accepted
            self._duplicates += duplicates
            self._stale += stale
        return received

    def counters(self) -> dict[str, Any]:
        """Snapshot: ``received`` messages = ``accepted`` + ``duplicates`` + ``stale`` +
        ``dropped_total``; ``dropped`` maps every DropReason value to its count;
        ``streams``: (node, incarnation) streams remembered by the duplicate filter."""
        snap = self._base_counters()
        snap["duplicates"] = self._duplicates
        snap["stale"] = self._stale
        snap["internal_errors"] = self._internal_errors
        snap["streams"] = len(self.dedupe)
        return snap


class ReportSender(_SocketOwner):
    """A local manager's end of the report channel: a PUSH socket connected to the
    controller's ``endpoint``.

    :meth:`send` never blocks: it sends with ``NOBLOCK`` into a queue bounded by
    ``sndhwm`` messages and, when ZeroMQ would block (queue full, or with ``immediate``
    no controller connected), drops the report, counts it and returns False. With
    ``immediate`` (the default) nothing is queued while the controller is unreachable:
    reports queued then would be stale when it comes back, and the next cycle's report
    supersedes them anyway.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        sndhwm: int = 1000,
        immediate: bool = True,
        limits: WireLimits = DEFAULT_LIMITS,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        _check_endpoint(endpoint)
        _check_positive("sndhwm", sndhwm)
        self.endpoint = endpoint
        self.limits = limits
        self._sent = 0
        self._dropped = 0
        self._sock, _ = _open_socket(
            context, zmq.PUSH, ((zmq.SNDHWM, sndhwm), (zmq.IMMEDIATE, 1 if immediate else 0)),
            lambda sock: _connect(sock, endpoint),
        )
        self._closed = False

    def send(self, report: ProgressReport) -> bool:
        """Queue one report; True if ZeroMQ took it, False if it was dropped (counted).
        Raises ValueError for a report that cannot be encoded (a caller's bug) and
        RuntimeError once closed; never blocks."""
        if self._closed:
            raise RuntimeError("ReportSender: send after close")
        frame = encode_report(report, self.limits)
        try:
            self._sock.send(frame, zmq.NOBLOCK)
        except zmq.Again:
            self._dropped += 1
            return False
        self._sent += 1
        return True

    def counters(self) -> dict[str, int]:
        """Snapshot: ``sent`` (taken by ZeroMQ) and ``dropped`` (queue full or no peer)."""
        return {"sent": self._sent, "dropped": self._dropped}


def _routing_id(node: str) -> bytes:
    """A node name as a ZeroMQ routing id: 1..255 bytes, not starting with a zero byte
    (ids starting with 0 are reserved by ZeroMQ)."""
    if not isinstance(node, str) or not node:
        raise ValueError(f"node: must be a non-empty str, got {node!r}")
    rid = node.encode("utf-8")
    if len(rid) > 255:
        raise ValueError(f"node: {len(rid)} UTF-8 bytes, a routing id holds at most 255")
    if rid[0] == 0:
        raise ValueError("node: must not start with a NUL character (reserved by ZeroMQ)")
    return rid


class CommandPublisher(_SocketOwner):
    """The controller's end of the command channel: a bound ROUTER socket.

    :meth:`publish` addresses a :class:`ReweightCommand` to the DEALER whose routing id
    is ``command.node``. Never blocks: a node that is not connected (yet, or any more)
    counts ``unroutable``, a node whose queue (``sndhwm`` messages) is full counts
    ``dropped``; both return False.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = None,
        *,
        sndhwm: int = 1000,
        limits: WireLimits = DEFAULT_LIMITS,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        _check_positive("sndhwm", sndhwm)
        self.limits = limits
        self._sent = 0
        self._dropped = 0
        self._unroutable = 0
        options = (
            (zmq.SNDHWM, sndhwm),
            (zmq.ROUTER_MANDATORY, 1),
            (zmq.ROUTER_HANDOVER, 1),
            # nothing is ever read from the local managers on this socket
            (zmq.MAXMSGSIZE, 1024),
        )
        self._sock, self.port = _open_socket(
            context, zmq.ROUTER, options, lambda sock: _bind(sock, host, port)
        )
        self.host = host
        self.endpoint = _tcp_endpoint(host, self.port)
        self._closed = False

    def publish(self, command: ReweightCommand) -> bool:
        """Send one command to ``command.node``'s local manager; True if queued, False if
        dropped (counted). Raises ValueError for a command that cannot be encoded and
        RuntimeError once closed; never blocks."""
        if self._closed:
            raise RuntimeError("CommandPublisher: publish after close")
        frame = encode_command(command, self.limits)
        rid = _routing_id(command.node)
        try:
            # with ROUTER_MANDATORY a missing peer or a full queue fails on the first
            # part, so nothing half-sent is left behind
            self._sock.send_multipart((rid, frame), zmq.NOBLOCK)
        except zmq.Again:
            self._dropped += 1
            return False
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            self._unroutable += 1
            return False
        self._sent += 1
        return True

    def publish_all(self, commands: Iterable[ReweightCommand]) -> int:
        """Publish each command; returns how many were queued."""
        return sum(1 for command in commands if self.publish(command))

    def counters(self) -> dict[str, int]:
        """Snapshot: ``sent``, ``dropped`` (queue full), ``unroutable`` (node not
        connected)."""
        return {"sent": self._sent, "dropped": self._dropped, "unroutable": self._unroutable}


class CommandSubscriber(_Receiver):
    """A local manager's end of the command channel: a DEALER connected to the
    controller's command ``endpoint`` with routing id ``node``.

    :meth:`poll` returns valid commands for this node in arrival order. Commands are not
    de-duplicated: each carries absolute weights, so a repeat is harmless, and a
    restarted controller starts its sequence numbers afresh (the command has no
    incarnation to tell the two apart). Commands whose ``node`` is not this node are
    dropped as ``wrong_node``. ``rcvhwm`` bounds the queue (messages).
    """

    def __init__(
        self,
        endpoint: str,
        node: str,
        *,
        rcvhwm: int = 1000,
        limits: WireLimits = DEFAULT_LIMITS,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        _check_endpoint(endpoint)
        rid = _routing_id(node)
        _check_positive("rcvhwm", rcvhwm, 0)
        self.endpoint = endpoint
        self.node = node
        self.limits = limits
        self._init_counters()
        options = (
            (zmq.ROUTING_ID, rid),
            (zmq.RCVHWM, rcvhwm),
            (zmq.MAXMSGSIZE, 16 * limits.max_frame_bytes),
        )
        self._sock, _ = _open_socket(
            context, zmq.DEALER, options, lambda sock: _connect(sock, endpoint)
        )
        self._rcvtimeo = -1
        self._closed = False

    def poll(
        self, timeout_s: float = 0.0, max_messages: int = DEFAULT_MAX_MESSAGES
    ) -> list[ReweightCommand]:
        """Take the commands that have arrived (at most ``max_messages``); if there were
        none, wait up to ``timeout_s`` seconds for one. Never raises on bad input."""
        flags = self._first_flags(timeout_s, max_messages)
        out: list[ReweightCommand] = []
        self._drain(out, max_messages, flags)
        return out

    def _drain(self, out: list[ReweightCommand], max_messages: int, flags: int) -> int:
        sock = self._sock
        taken = 0
        for _ in range(max_messages):
            try:
                frame = sock.recv(flags, copy=False)
            except zmq.Again:
                break
            flags = zmq.NOBLOCK
            taken += 1
            self._received += 1
            try:
                if frame.more:
                    _drain_rest(sock)
                    self._count_drop(DropReason.MULTIPART)
                    continue
                command = decode_command(frame, self.limits)
            except FrameError as exc:
                self._count_drop(exc.reason)
                continue
            except zmq.ZMQError:  # the socket or context failed: not bad input
                raise
            except Exception:  # a bug must not stop the local manager
                log.exception("CommandSubscriber: unexpected error while receiving")
                self._count_drop(DropReason.UNDECODABLE)
                continue
            if command.node != self.node:
                self._count_drop(DropReason.WRONG_NODE)
                continue
            self._accepted += 1
            out.append(command)
        return taken

    def counters(self) -> dict[str, Any]:
        """Snapshot: ``received`` = ``accepted`` + ``dropped_total``; ``dropped`` by
        reason."""
        return self._base_counters()
