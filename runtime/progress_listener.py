"""The local manager's progress socket: one UDP socket per node, on the loopback
interface (a subtask runs on its local manager's machine), that subtasks' processes send
their progress datagrams to (:mod:`local_manager.progress_wire`). Non-blocking: the node's
loop drains it once per cycle boundary, so no thread and no lock; what arrives between two
boundaries waits in the kernel's buffer (about 200 KiB: thousands of datagrams).

Which subtask a datagram is from is its key (128 random bits, in that subtask's
environment only); the loop looks it up. The socket neither trusts nor checks the
sender's address: any local process may send, only a subtask's own (and its children,
which inherit its environment) know its key.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

from local_manager.progress_wire import (
    MAX_DATAGRAM,
    DatagramError,
    ProgressDatagram,
    parse,
)

#: Most datagrams read per drain (bounded work per cycle under a flood; the rest wait).
MAX_PER_DRAIN = 10_000


class ProgressListener:
    """A bound, non-blocking UDP socket (``host``, ``port``; 0: any free port)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._sock.bind((host, port))
            self._sock.setblocking(False)
        except OSError:
            self._sock.close()
            raise
        bound = self._sock.getsockname()
        self.address = f"{bound[0]}:{bound[1]}"

    def drain(self, limit: int = MAX_PER_DRAIN) -> Iterator[ProgressDatagram | DatagramError]:
        """The datagrams waiting now (at most ``limit``), each parsed or its error."""
        for _ in range(limit):
            try:
                # One byte more than allowed: a longer datagram is cut to it, and dropped.
                data = self._sock.recv(MAX_DATAGRAM + 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # closed meanwhile
                return
            try:
                yield parse(data)
            except DatagramError as exc:
                yield exc

    def close(self) -> None:
        self._sock.close()
