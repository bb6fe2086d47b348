"""The check before ``ray.init``: does a Ray GCS (a gRPC server) answer at an address?"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from coalloc.errors import UserError
from runtime.deploy import gcs_problem

SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty HTTP/2 SETTINGS frame


@contextmanager
def server(answer: bytes | None) -> Iterator[str]:
    """A listener that answers every connection with ``answer`` (None: never answers,
    b"": closes it at once)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    held: list[socket.socket] = []

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        if answer is None:
            held.append(conn)
            return
        with conn:
            conn.sendall(answer)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for conn in held:
            conn.close()
        t.join(timeout=5)


def closed_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_a_grpc_server_answers() -> None:
    with server(SETTINGS) as address:
        assert gcs_problem(address) is None


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (None, "nothing answered within 0.3 s"),
        (b"", "closed the connection without an answer"),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "not as a gRPC server"),
    ],
)
def test_what_is_not_a_gcs(answer: bytes | None, reason: str) -> None:
    with server(answer) as address:
        problem = gcs_problem(address, answer_timeout=0.3)
    assert problem is not None and reason in problem


def test_nothing_listening_and_a_bad_address() -> None:
    assert gcs_problem(closed_address()) == "connection refused"
    with pytest.raises(UserError, match="not a Ray address"):
        gcs_problem("no-port-here")
