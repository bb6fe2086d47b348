"""ZeroMQ transport of progress reports and re-weight commands (edge adapter).

Two channels, both bound by the controller, so that the only addresses anybody needs
are the controller's two endpoints (the GlobalManager holds them):

* **Reports**, local managers -> controller: the controller binds a PULL socket
  (:class:`ReportReceiver`); every local manager connects a PUSH socket
  (:class:`ReportSender`). PULL fair-queues the managers, one frame per message.
* **Commands**, controller -> local managers: the controller binds a ROUTER socket
  (:class:`CommandPublisher`); every local manager connects a DEALER
  (:class:`CommandSubscriber`) that names its node in ``hello`` frames. The ROUTER
  gives each connection its own routing id and binds a node to the connection its
  latest valid hello came on, so a command reaches exactly one node, with no
  prefix-matching pitfalls (PUB/SUB topics are prefixes: a subscription to ``node1``
  also receives ``node10``'s commands) and with feedback: ``ROUTER_MANDATORY`` turns a
  command for a node with no connection into a counted ``unroutable`` instead of a
  silent loss. A restarted local manager takes its node back with its first hello; a
  peer can no longer pick a node's name as its routing id (no ``ROUTER_HANDOVER``).
  Losing a command is harmless (the next control period re-sends absolute weights), so
  full queues drop, never block. The controller reads everything peers send on the
  ROUTER (:meth:`CommandPublisher.poll_incoming`) and discards all but hellos.

Security. Given the runtime's keys (:mod:`coallocator.security`), both channels run
CURVE: the controller's sockets are CURVE servers whose ZAP handler admits only the
local managers' keys and names each connection by its node (ZAP User-Id); a report or
hello naming another node than its key's is dropped as ``spoofed_node``; refused
connections (plaintext peers, unknown keys, wrong server key) are counted from the
sockets' monitors (``auth_failures``). Without keys (``--insecure``) everything is
plaintext and anyone who reaches the ports may send.

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
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import zmq
from zmq.utils.monitor import parse_monitor_message

from coallocator.messages import ProgressReport, ReweightCommand
from coallocator.security import (
    ClientCurve,
    NodeAuthenticator,
    client_options,
    server_options,
)
from coallocator.wire import (
    DEFAULT_LIMITS,
    DropReason,
    FrameError,
    WireLimits,
    decode_command,
    decode_hello,
    decode_report,
    encode_command,
    encode_hello,
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


def _auth_context(
    context: zmq.Context[Any] | None, auth: NodeAuthenticator | None
) -> zmq.Context[Any] | None:
    """The context a server socket is made on: the authenticator's when there is one
    (its ZAP handler serves only that context)."""
    if auth is None:
        return context
    if context is not None and context is not auth.context:
        raise ValueError("context: a CURVE socket lives on its authenticator's context")
    return auth.context


def _start_monitor(sock: zmq.Socket[Any]) -> HandshakeMonitor:
    try:
        return HandshakeMonitor(sock)
    except Exception:
        sock.close(linger=0)
        raise


#: Handshake failures a server socket's monitor reports (ZeroMQ >= 4.3).
_HANDSHAKE_EVENTS = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
#: ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH: the peer speaks another security mechanism
#: (a plaintext peer at a CURVE server).
_MECHANISM_MISMATCH = 0x11000002


class HandshakeMonitor:
    """Counts the connections a CURVE server socket refused, from its ZeroMQ monitor:
    ``plaintext`` (the peer does not speak CURVE), ``unknown_key`` (ZAP refused the
    peer's key), ``bad_handshake`` (anything else: a peer that does not know the server
    key, a broken handshake, and a plaintext peer that noticed the mismatch first and hung
    up). Each refused connection counts once (libzmq peers retry after a refused key but
    give up after a protocol error).
    :meth:`drain` reads the events without blocking (from the socket's thread); events
    beyond the monitor's queue (1000) between two drains are lost."""

    def __init__(self, sock: zmq.Socket[Any]) -> None:
        self._owner = sock
        self._mon: zmq.Socket[Any] = sock.get_monitor_socket(_HANDSHAKE_EVENTS)
        self._mon.setsockopt(zmq.LINGER, 0)
        self.refused = {"plaintext": 0, "unknown_key": 0, "bad_handshake": 0}

    def drain(self, max_events: int = 10_000) -> int:
        """Count the events that have arrived; returns how many."""
        n = 0
        for _ in range(max_events):
            try:
                parts = self._mon.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            n += 1
            try:
                event = parse_monitor_message(parts)
            except Exception:  # noqa: BLE001 - a malformed event is still a failure
                self.refused["bad_handshake"] += 1
                continue
            if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                self.refused["unknown_key"] += 1
            elif event["value"] == _MECHANISM_MISMATCH:
                self.refused["plaintext"] += 1
            else:
                self.refused["bad_handshake"] += 1
        return n

    @property
    def failures(self) -> int:
        return sum(self.refused.values())

    def counters(self) -> dict[str, Any]:
        return {"auth_failures": self.failures, "refused": dict(self.refused)}

    def close(self) -> None:
        try:
            self._owner.disable_monitor()
        except zmq.ZMQError:
            pass
        self._mon.close(linger=0)


def _no_auth_counters() -> dict[str, Any]:
    return {"auth_failures": 0, "refused": {"plaintext": 0, "unknown_key": 0,
                                            "bad_handshake": 0}}


_S = TypeVar("_S", bound="_SocketOwner")


class _SocketOwner:
    """Owns one ZeroMQ socket (and, on a CURVE server, its handshake monitor):
    ``close()`` is idempotent (the socket closes with LINGER 0), and the owner is a
    context manager that closes it on exit."""

    _sock: zmq.Socket[Any]
    _closed: bool
    _monitor: HandshakeMonitor | None = None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._monitor is not None:
                self._monitor.close()
            self._sock.close(linger=0)

    #: Whether the socket speaks CURVE (set at construction).
    secure: bool = False

    def auth_counters(self) -> dict[str, Any]:
        """``auth_failures`` (connections refused in the handshake) and ``refused`` by
        kind (see :class:`HandshakeMonitor`), as of the last ``poll``; zeros on a
        plaintext socket. Safe from any thread (reads ints only)."""
        if self._monitor is None:
            return _no_auth_counters()
        return self._monitor.counters()

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

    ``auth``: a :class:`~coallocator.security.NodeAuthenticator` makes the socket a CURVE
    server on the authenticator's context (``context`` must then be None): only the
    runtime's local-manager keys connect, refused connections are counted
    (:meth:`counters`' ``auth_failures``), and a report whose ``node`` is not the node
    of the key that sent it is dropped as ``spoofed_node``. Without ``auth`` the socket
    is plaintext (``--insecure``): anyone who reaches the port may send.
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
        auth: NodeAuthenticator | None = None,
    ) -> None:
        _check_positive("rcvhwm", rcvhwm, 0)
        context = _auth_context(context, auth)
        cap = 16 * limits.max_frame_bytes if max_msg_bytes is None else max_msg_bytes
        _check_positive("max_msg_bytes", cap, limits.max_frame_bytes)
        self.limits = limits
        self.dedupe = ReportDeduplicator(dedupe_window, max_streams)
        self._init_counters()
        self._duplicates = 0
        self._stale = 0
        self._internal_errors = 0
        options: list[tuple[int, int | bytes]] = [(zmq.RCVHWM, rcvhwm), (zmq.MAXMSGSIZE, cap)]
        if auth is not None:
            options += server_options(auth.curve)
        self._sock, self.port = _open_socket(
            context, zmq.PULL, options, lambda sock: _bind(sock, host, port)
        )
        self.secure = auth is not None
        if self.secure:
            self._monitor = _start_monitor(self._sock)
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
        if self._monitor is not None:
            self._monitor.drain()
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
        secure = self.secure
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
                if secure and frame.get("User-Id") != report.node:
                    # ZAP's User-Id is the node whose key sent the frame
                    self._count_drop(DropReason.SPOOFED_NODE)
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
        ``streams``: (node, incarnation) streams remembered by the duplicate filter;
        ``secure``, ``auth_failures`` and ``refused`` (see :meth:`auth_counters`)."""
        snap = self._base_counters()
        snap["duplicates"] = self._duplicates
        snap["stale"] = self._stale
        snap["internal_errors"] = self._internal_errors
        snap["streams"] = len(self.dedupe)
        snap["secure"] = self.secure
        snap.update(self.auth_counters())
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

    ``curve``: the local manager's CURVE keys (:class:`~coallocator.security.ClientCurve`);
    the socket then talks only to a server holding the matching secret key, and the
    controller admits it as ``curve.node``. None: plaintext (``--insecure``).
    """

    def __init__(
        self,
        endpoint: str,
        *,
        sndhwm: int = 1000,
        immediate: bool = True,
        limits: WireLimits = DEFAULT_LIMITS,
        context: zmq.Context[Any] | None = None,
        curve: ClientCurve | None = None,
    ) -> None:
        _check_endpoint(endpoint)
        _check_positive("sndhwm", sndhwm)
        self.endpoint = endpoint
        self.limits = limits
        self._sent = 0
        self._dropped = 0
        options: list[tuple[int, int | bytes]] = [
            (zmq.SNDHWM, sndhwm), (zmq.IMMEDIATE, 1 if immediate else 0)
        ]
        if curve is not None:
            options += client_options(curve)
        self._sock, _ = _open_socket(
            context, zmq.PUSH, options, lambda sock: _connect(sock, endpoint)
        )
        self.secure = curve is not None
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
    """A node name as bytes, checked as a ZeroMQ routing id would be: 1..255 bytes, not
    starting with a zero byte (the hello frame carries it; names stay valid routing ids
    for peers that use them)."""
    if not isinstance(node, str) or not node:
        raise ValueError(f"node: must be a non-empty str, got {node!r}")
    rid = node.encode("utf-8")
    if len(rid) > 255:
        raise ValueError(f"node: {len(rid)} UTF-8 bytes, a routing id holds at most 255")
    if rid[0] == 0:
        raise ValueError("node: must not start with a NUL character (reserved by ZeroMQ)")
    return rid


#: Nodes the command publisher remembers a route to at most (insecure peers may name any).
MAX_ROUTES = 4096


class CommandPublisher(_SocketOwner):
    """The controller's end of the command channel: a bound ROUTER socket.

    Routes. The ROUTER gives every connection a routing id of its own (peers do not
    choose it); a local manager's DEALER names its node with a ``hello`` frame, which
    binds the node to that connection. With CURVE (``auth``) a hello counts only if its
    node is the node of the key that sent it (the ZAP User-Id); otherwise it is dropped
    as ``spoofed_node``, so one node's key cannot take another node's commands, and a
    peer without a runtime key cannot connect at all. The latest valid hello of a node
    wins (a restarted local manager takes its node back on its first hello).

    :meth:`publish` sends a :class:`ReweightCommand` to the connection bound to
    ``command.node``. Never blocks: a node with no route (no hello yet, or the connection
    is gone) counts ``unroutable``, a node whose queue (``sndhwm`` messages) is full
    counts ``dropped``; both return False.

    :meth:`poll_incoming` reads everything peers sent: valid hellos update the routes,
    anything else is discarded and counted (``discarded``). The controller calls it
    continuously, so peers cannot make it hold unread messages: at most ``rcvhwm``
    messages of at most ``max_msg_bytes`` (a larger message makes libzmq drop that peer's
    connection) queue per connection between two calls.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = None,
        *,
        sndhwm: int = 1000,
        rcvhwm: int = 100,
        max_msg_bytes: int = 1024,
        limits: WireLimits = DEFAULT_LIMITS,
        context: zmq.Context[Any] | None = None,
        auth: NodeAuthenticator | None = None,
    ) -> None:
        _check_positive("sndhwm", sndhwm)
        _check_positive("rcvhwm", rcvhwm)
        _check_positive("max_msg_bytes", max_msg_bytes, 64)
        context = _auth_context(context, auth)
        self.limits = limits
        self._sent = 0
        self._dropped = 0
        self._unroutable = 0
        self._hellos = 0
        self._discarded = 0
        self._spoofed = 0
        self._routes: dict[str, bytes] = {}
        options: list[tuple[int, int | bytes]] = [
            (zmq.SNDHWM, sndhwm),
            (zmq.RCVHWM, rcvhwm),
            (zmq.ROUTER_MANDATORY, 1),
            # hellos are under 300 bytes; nothing else is ever read on this socket
            (zmq.MAXMSGSIZE, max_msg_bytes),
        ]
        if auth is not None:
            options += server_options(auth.curve)
        self._sock, self.port = _open_socket(
            context, zmq.ROUTER, options, lambda sock: _bind(sock, host, port)
        )
        self.secure = auth is not None
        if self.secure:
            self._monitor = _start_monitor(self._sock)
        self.host = host
        self.endpoint = _tcp_endpoint(host, self.port)
        self._closed = False

    def poll_incoming(self, max_messages: int = DEFAULT_MAX_MESSAGES) -> int:
        """Read (without blocking) at most ``max_messages`` messages peers sent: learn
        the routes from valid hellos, discard and count the rest; returns how many
        messages were read. Never raises on bad input; RuntimeError once closed."""
        _check_positive("max_messages", max_messages)
        if self._closed:
            raise RuntimeError("CommandPublisher: poll_incoming after close")
        sock = self._sock
        taken = 0
        for _ in range(max_messages):
            try:
                rid = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            taken += 1
            if not sock.get(zmq.RCVMORE):  # cannot happen on a ROUTER; be safe
                self._discarded += 1
                continue
            frame = sock.recv(zmq.NOBLOCK, copy=False)
            if frame.more:
                _drain_rest(sock)
                self._discarded += 1
                continue
            try:
                node = decode_hello(frame, self.limits)
            except FrameError:
                self._discarded += 1
                continue
            if self.secure and frame.get("User-Id") != node:
                self._spoofed += 1
                continue
            self._hellos += 1
            if node not in self._routes and len(self._routes) >= MAX_ROUTES:
                self._routes.pop(next(iter(self._routes)))
            self._routes[node] = rid
        if self._monitor is not None:
            self._monitor.drain()
        return taken

    def publish(self, command: ReweightCommand) -> bool:
        """Send one command to ``command.node``'s local manager; True if queued, False if
        dropped (counted). A node with no route yet reads the hellos that have arrived
        first. Raises ValueError for a command that cannot be encoded and RuntimeError
        once closed; never blocks."""
        if self._closed:
            raise RuntimeError("CommandPublisher: publish after close")
        frame = encode_command(command, self.limits)
        rid = self._routes.get(command.node)
        if rid is None:
            self.poll_incoming()
            rid = self._routes.get(command.node)
            if rid is None:
                self._unroutable += 1
                return False
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
            # that connection is gone; the node's next hello brings a new route
            if self._routes.get(command.node) == rid:
                del self._routes[command.node]
            self._unroutable += 1
            return False
        self._sent += 1
        return True

    def counters(self) -> dict[str, Any]:
        """Snapshot: ``sent``, ``dropped`` (queue full), ``unroutable`` (no connection
        for the node), ``hellos`` (valid hellos read), ``spoofed_node`` (hellos naming a
        node their key is not), ``discarded`` (anything else peers sent), ``routes``
        (nodes with a connection), ``secure``, ``auth_failures`` and ``refused``."""
        snap: dict[str, Any] = {
            "sent": self._sent,
            "dropped": self._dropped,
            "unroutable": self._unroutable,
            "hellos": self._hellos,
            "spoofed_node": self._spoofed,
            "discarded": self._discarded,
            "routes": len(self._routes),
            "secure": self.secure,
        }
        snap.update(self.auth_counters())
        return snap


#: Real seconds between two hellos of a command subscriber.
HELLO_EVERY_S = 1.0


class CommandSubscriber(_Receiver):
    """A local manager's end of the command channel: a DEALER connected to the
    controller's command ``endpoint``, naming its ``node`` with ``hello`` frames.

    The subscriber sends a hello when it connects and then at most every
    ``hello_every_s`` real seconds from :meth:`poll` (so that a restarted controller
    learns the route within that time; a hello queued while the controller is away is
    delivered when it is back). :meth:`poll` returns valid commands for this node in
    arrival order. Commands are not de-duplicated: each carries absolute weights, so a
    repeat is harmless, and a restarted controller starts its sequence numbers afresh
    (the command has no incarnation to tell the two apart). Commands whose ``node`` is
    not this node are dropped as ``wrong_node``. ``rcvhwm`` bounds the queue (messages).
    ``curve``: as :class:`ReportSender`'s.
    """

    def __init__(
        self,
        endpoint: str,
        node: str,
        *,
        rcvhwm: int = 1000,
        limits: WireLimits = DEFAULT_LIMITS,
        context: zmq.Context[Any] | None = None,
        curve: ClientCurve | None = None,
        hello_every_s: float = HELLO_EVERY_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        _check_endpoint(endpoint)
        _routing_id(node)
        _check_positive("rcvhwm", rcvhwm, 0)
        _timeout_ms(hello_every_s)
        if curve is not None and curve.node != node:
            raise ValueError(f"curve: keys of node {curve.node!r}, not {node!r}")
        self.endpoint = endpoint
        self.node = node
        self.limits = limits
        self.hello_every_s = hello_every_s
        self._monotonic = monotonic
        self._hello = encode_hello(node, limits)
        self._hellos_sent = 0
        self._init_counters()
        options: list[tuple[int, int | bytes]] = [
            (zmq.RCVHWM, rcvhwm),
            # a few hellos wait for a controller that is away, no more
            (zmq.SNDHWM, 4),
            (zmq.MAXMSGSIZE, 16 * limits.max_frame_bytes),
        ]
        if curve is not None:
            options += client_options(curve)
        self._sock, _ = _open_socket(
            context, zmq.DEALER, options, lambda sock: _connect(sock, endpoint)
        )
        self.secure = curve is not None
        self._rcvtimeo = -1
        self._closed = False
        self._last_hello = -math.inf
        self._say_hello()

    def _say_hello(self) -> None:
        self._last_hello = self._monotonic()
        try:
            self._sock.send(self._hello, zmq.NOBLOCK)
        except zmq.Again:  # the queue holds hellos already
            return
        self._hellos_sent += 1

    def poll(
        self, timeout_s: float = 0.0, max_messages: int = DEFAULT_MAX_MESSAGES
    ) -> list[ReweightCommand]:
        """Take the commands that have arrived (at most ``max_messages``); if there were
        none, wait up to ``timeout_s`` seconds for one. Sends a hello when one is due.
        Never raises on bad input."""
        flags = self._first_flags(timeout_s, max_messages)
        if self._monotonic() - self._last_hello >= self.hello_every_s:
            self._say_hello()
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
        reason; ``hellos_sent``."""
        snap = self._base_counters()
        snap["hellos_sent"] = self._hellos_sent
        return snap
