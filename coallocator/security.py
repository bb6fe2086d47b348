"""CURVE keys and the ZAP authenticator of the controller's two sockets (edge adapter).

The runtime authenticates both ZeroMQ channels with CURVE (the ZeroMQ guide's CurveZMQ +
ZAP): the controller's sockets are CURVE servers holding one server key pair; each local
manager holds its own client key pair and the server's public key. ``coalloc up``
generates all of them (:func:`generate_curve`) and hands them to the actors as
constructor arguments through Ray; they are never written to disk by coalloc.

The controller runs one :class:`NodeAuthenticator` (pyzmq's
:class:`zmq.auth.thread.ThreadAuthenticator`, a ZAP handler in a thread) on a ZeroMQ
context of its own. It admits exactly the runtime's local-manager public keys and gives
each connection the ZAP User-Id of the node that key belongs to, so that every message
carries, as ZeroMQ metadata (``zmq.Frame.get("User-Id")``), the node it really comes
from. The transport compares that with the node a report or hello names
(:mod:`coallocator.transport`): one node's key cannot speak for another node.

Keys are Z85 text (40 bytes); secret keys never appear in ``repr``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

#: ZAP domain the controller's sockets ask the authenticator about.
ZAP_DOMAIN = "coalloc"


@dataclass(frozen=True, slots=True)
class CurveKeyPair:
    """A CURVE key pair, Z85-encoded (40 bytes each)."""

    public: bytes
    secret: bytes = field(repr=False)

    @classmethod
    def generate(cls) -> CurveKeyPair:
        public, secret = zmq.curve_keypair()
        return cls(public, secret)


@dataclass(frozen=True, slots=True)
class ServerCurve:
    """The controller's CURVE material: its key pair and the public key of every local
    manager it admits (``clients``: node name -> Z85 public key)."""

    server: CurveKeyPair
    clients: Mapping[str, bytes]

    def __post_init__(self) -> None:
        if len(set(self.clients.values())) != len(self.clients):
            raise ValueError("clients: two nodes share a public key")


@dataclass(frozen=True, slots=True)
class ClientCurve:
    """One local manager's CURVE material: its node, its key pair and the controller's
    public key (the local manager refuses a server without the matching secret)."""

    node: str
    client: CurveKeyPair
    server_public: bytes


def generate_curve(nodes: Iterable[str]) -> tuple[ServerCurve, dict[str, ClientCurve]]:
    """Fresh keys for one runtime: the controller's, and one pair per node (a node's key
    is admitted as that node only)."""
    server = CurveKeyPair.generate()
    clients = {node: CurveKeyPair.generate() for node in nodes}
    return (
        ServerCurve(server, {node: pair.public for node, pair in clients.items()}),
        {node: ClientCurve(node, pair, server.public) for node, pair in clients.items()},
    )


def server_options(curve: ServerCurve) -> list[tuple[int, int | bytes]]:
    """Socket options of a CURVE server socket that asks ZAP (domain :data:`ZAP_DOMAIN`)."""
    return [
        (zmq.CURVE_SERVER, 1),
        (zmq.CURVE_SECRETKEY, curve.server.secret),
        (zmq.CURVE_PUBLICKEY, curve.server.public),
        (zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode()),
    ]


def client_options(curve: ClientCurve) -> list[tuple[int, int | bytes]]:
    """Socket options of a CURVE client socket of ``curve.node``'s local manager."""
    return [
        (zmq.CURVE_SERVERKEY, curve.server_public),
        (zmq.CURVE_PUBLICKEY, curve.client.public),
        (zmq.CURVE_SECRETKEY, curve.client.secret),
    ]


class _NodeZap(ThreadAuthenticator):
    """ZAP handler: a key is admitted if it is one of the nodes'; its User-Id is the node."""

    def __init__(self, context: zmq.Context[Any], nodes_by_key: Mapping[bytes, str]) -> None:
        super().__init__(context)
        self._nodes_by_key = dict(nodes_by_key)
        self.admitted = 0
        self.denied = 0

    def callback(self, domain: str, key: bytes) -> bool:
        """The credentials provider's check (``key`` in Z85)."""
        ok = key in self._nodes_by_key
        if ok:
            self.admitted += 1
        else:
            self.denied += 1
        return ok

    def curve_user_id(self, client_public_key: bytes) -> str:
        return self._nodes_by_key[z85.encode(client_public_key)]


class NodeAuthenticator:
    """The controller's ZAP authenticator and the ZeroMQ context it serves.

    Sockets that use it must be created on :attr:`context` (the transport's receivers do
    so when given an authenticator). ``close()`` stops the ZAP thread and destroys the
    context (closing any socket still open on it); call it after closing the sockets.
    Counters (``counters()``): ``admitted`` and ``denied`` ZAP requests (an unknown key is
    denied by ZAP; a plaintext peer or a wrong server key fails earlier, in the
    handshake, and is counted by the sockets' monitors instead)."""

    def __init__(self, curve: ServerCurve) -> None:
        self.curve = curve
        self.context: zmq.Context[Any] = zmq.Context()
        self._zap = _NodeZap(self.context, {key: node for node, key in curve.clients.items()})
        self._closed = False
        try:
            self._zap.start()
            self._zap.configure_curve_callback(ZAP_DOMAIN, credentials_provider=self._zap)
        except Exception:
            self.context.destroy(linger=0)
            raise

    def counters(self) -> dict[str, int]:
        return {"admitted": self._zap.admitted, "denied": self._zap.denied}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._zap.stop()
        self.context.destroy(linger=0)

    def __enter__(self) -> NodeAuthenticator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
