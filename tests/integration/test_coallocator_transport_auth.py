"""CURVE + ZAP on the report and command channels, over real sockets with real keys.

The controller's side runs pyzmq's ZAP authenticator in a thread; peers are local-manager
senders with the runtime's keys, plaintext peers, peers with keys of their own, and one
node's key speaking for another node. Every wait is bounded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from coallocator.messages import ProgressReport, ReweightCommand
from coallocator.security import (
    ClientCurve,
    CurveKeyPair,
    NodeAuthenticator,
    ServerCurve,
    generate_curve,
)
from coallocator.transport import (
    CommandPublisher,
    CommandSubscriber,
    ReportReceiver,
    ReportSender,
)
from coallocator.wire import encode_hello, encode_report

pytestmark = pytest.mark.integration

DEADLINE_S = 10.0
NODES = ("n1", "n2", "n3")


def until(predicate: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def report(node: str, seq: int = 1, job: str = "job-1", done: bool = False) -> ProgressReport:
    return ProgressReport(job, 0, node, 7, seq, 10.0 * seq, 1e7, 100.0, 95.0, done)


@pytest.fixture
def keys() -> tuple[ServerCurve, dict[str, ClientCurve]]:
    return generate_curve(NODES)


@pytest.fixture
def auth(keys: tuple[ServerCurve, dict[str, ClientCurve]]) -> Iterator[NodeAuthenticator]:
    with NodeAuthenticator(keys[0]) as a:
        yield a


@pytest.fixture
def ctx() -> Iterator[zmq.Context[Any]]:
    """The peers' context (never the authenticator's)."""
    context: zmq.Context[Any] = zmq.Context()
    yield context
    context.destroy(linger=0)


def foreign_curve(node: str, server_public: bytes) -> ClientCurve:
    """Keys the runtime never generated, but the right server key."""
    return ClientCurve(node, CurveKeyPair.generate(), server_public)


def test_keys_are_distinct_and_secrets_stay_out_of_repr(
    keys: tuple[ServerCurve, dict[str, ClientCurve]],
) -> None:
    server, clients = keys
    publics = {c.client.public for c in clients.values()} | {server.server.public}
    assert len(publics) == len(NODES) + 1
    assert all(len(k) == 40 for k in publics)
    assert dict(server.clients) == {n: c.client.public for n, c in clients.items()}
    for c in clients.values():
        assert c.server_public == server.server.public
        assert c.client.secret.decode() not in repr(c)
    assert server.server.secret.decode() not in repr(server)


def test_an_authenticated_sender_is_accepted(
    auth: NodeAuthenticator, keys: Any, ctx: zmq.Context[Any]
) -> None:
    with ReportReceiver(auth=auth) as rx, ReportSender(
        rx.endpoint, context=ctx, curve=keys[1]["n1"]
    ) as tx:
        got: list[ProgressReport] = []

        def arrived() -> bool:
            tx.send(report("n1", seq=len(got) + 1))
            got.extend(rx.poll(0.02))
            return bool(got)

        until(arrived, "an authenticated report")
        c = rx.counters()
        assert got[0].node == "n1" and c["secure"] is True and tx.secure
        assert c["auth_failures"] == 0 and c["dropped_total"] == 0
        assert auth.counters()["admitted"] >= 1 and auth.counters()["denied"] == 0


def _refused(rx: ReportReceiver, push: zmq.Socket[Any], frame: bytes) -> None:
    """Send ``frame`` from ``push`` until ``rx`` has counted a refused connection; then
    nothing has been received. (A plaintext peer is counted ``plaintext``, or
    ``bad_handshake`` when it notices the mismatch first and hangs up.)"""

    def counted() -> bool:
        try:
            push.send(frame, zmq.NOBLOCK)
        except zmq.Again:
            pass
        rx.poll(0.02)
        return rx.counters()["auth_failures"] >= 1

    until(counted, "a refusal")
    c = rx.counters()
    assert c["refused"]["plaintext"] + c["refused"]["bad_handshake"] == c["auth_failures"]
    assert c["received"] == 0 and c["accepted"] == 0


def test_a_plaintext_sender_is_refused_and_counted(
    auth: NodeAuthenticator, ctx: zmq.Context[Any]
) -> None:
    with ReportReceiver(auth=auth) as rx:
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(rx.endpoint)
        try:
            _refused(rx, push, encode_report(report("n1", done=True)))
        finally:
            push.close()


def test_an_unknown_key_is_refused_and_counted(
    auth: NodeAuthenticator, keys: Any, ctx: zmq.Context[Any]
) -> None:
    server = keys[0]
    with ReportReceiver(auth=auth) as rx, ReportSender(
        rx.endpoint, context=ctx, curve=foreign_curve("n1", server.server.public),
        immediate=False,
    ) as tx:
        def counted() -> bool:
            tx.send(report("n1"))
            rx.poll(0.02)
            return rx.counters()["refused"]["unknown_key"] >= 1

        until(counted, "an unknown-key refusal")
        assert rx.counters()["received"] == 0
        assert auth.counters()["denied"] >= 1


def test_a_sender_that_does_not_know_the_server_key_is_refused(
    auth: NodeAuthenticator, keys: Any, ctx: zmq.Context[Any]
) -> None:
    own = keys[1]["n1"]
    wrong_server = ClientCurve("n1", own.client, CurveKeyPair.generate().public)
    with ReportReceiver(auth=auth) as rx, ReportSender(
        rx.endpoint, context=ctx, curve=wrong_server, immediate=False
    ) as tx:
        def counted() -> bool:
            tx.send(report("n1"))
            rx.poll(0.02)
            return rx.counters()["refused"]["bad_handshake"] >= 1

        until(counted, "a failed handshake")
        assert rx.counters()["received"] == 0


def test_a_report_naming_another_node_is_dropped_as_spoofed(
    auth: NodeAuthenticator, keys: Any, ctx: zmq.Context[Any]
) -> None:
    with ReportReceiver(auth=auth) as rx, ReportSender(
        rx.endpoint, context=ctx, curve=keys[1]["n1"]
    ) as tx:
        got: list[ProgressReport] = []

        def forged_dropped() -> bool:
            tx.send(report("n2", seq=1, done=True))  # n1's key, n2's name
            got.extend(rx.poll(0.02))
            return rx.counters()["dropped"]["spoofed_node"] >= 1

        until(forged_dropped, "the forged report to be dropped")
        tx.send(report("n1", seq=2))
        until(lambda: bool(got.extend(rx.poll(0.02))) or any(r.node == "n1" for r in got),
              "n1's own report")
        assert all(r.node == "n1" for r in got)
        assert rx.counters()["accepted"] == len(got)


def test_commands_over_curve_reach_their_node(
    auth: NodeAuthenticator, keys: Any, ctx: zmq.Context[Any]
) -> None:
    with CommandPublisher(auth=auth) as pub:
        subs = [CommandSubscriber(pub.endpoint, n, context=ctx, curve=keys[1][n])
                for n in NODES]
        try:
            for sub in subs:
                cmd = ReweightCommand("j", 0, sub.node, 1, 5.0, 0.5)
                got: list[ReweightCommand] = []

                def arrived(s: CommandSubscriber = sub, c: ReweightCommand = cmd,
                            g: list[ReweightCommand] = got) -> bool:
                    pub.publish(c)
                    g.extend(s.poll(0.02))
                    return bool(g)

                until(arrived, f"{sub.node}'s command")
                assert set(got) == {cmd}
            c = pub.counters()
            assert c["secure"] and c["routes"] == len(NODES) and c["auth_failures"] == 0
        finally:
            for sub in subs:
                sub.close()


def _dealer(ctx: zmq.Context[Any], endpoint: str, rid: bytes | None,
            curve: ClientCurve | None) -> zmq.Socket[Any]:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if rid is not None:
        sock.setsockopt(zmq.ROUTING_ID, rid)
    if curve is not None:
        sock.curve_serverkey = curve.server_public
        sock.curve_publickey = curve.client.public
        sock.curve_secretkey = curve.client.secret
    sock.connect(endpoint)
    return sock


def test_a_foreign_dealer_claiming_a_node_receives_nothing(
    auth: NodeAuthenticator, keys: Any, ctx: zmq.Context[Any]
) -> None:
    """Plaintext and unknown-key DEALERs that take n2's name as routing id and say hello
    as n2, and n1's own key saying hello as n2: none of them gets n2's commands; the
    real n2 gets every one."""
    server, clients = keys
    with CommandPublisher(auth=auth) as pub:
        plain = _dealer(ctx, pub.endpoint, b"n2", None)
        stranger = _dealer(ctx, pub.endpoint, b"n2", foreign_curve("n2", server.server.public))
        n1_as_n2 = _dealer(ctx, pub.endpoint, b"n2", clients["n1"])
        foreign = (plain, stranger, n1_as_n2)
        try:
            for sock in foreign:
                sock.send(encode_hello("n2"))

            def refused_and_spoofed() -> bool:
                pub.poll_incoming()
                c = pub.counters()
                plaintext = c["refused"]["plaintext"] + c["refused"]["bad_handshake"]
                return plaintext >= 1 and c["refused"]["unknown_key"] >= 1 and (
                    c["spoofed_node"] >= 1)

            until(refused_and_spoofed, "the foreign peers to be refused or caught")
            # No real n2 yet: n2 has no route, whoever claims its name.
            assert not pub.publish(ReweightCommand("j", 0, "n2", 1, 1.0, 0.0))
            real = CommandSubscriber(pub.endpoint, "n2", context=ctx, curve=clients["n2"])
            try:
                got: list[ReweightCommand] = []
                sent: list[ReweightCommand] = []

                def delivered() -> bool:
                    for sock in foreign:  # they keep claiming
                        try:
                            sock.send(encode_hello("n2"), zmq.NOBLOCK)
                        except zmq.Again:
                            pass
                    cmd = ReweightCommand("j", 0, "n2", len(sent) + 2, 1.0, 0.0)
                    pub.poll_incoming()
                    if pub.publish(cmd):
                        sent.append(cmd)
                    got.extend(real.poll(0.02))
                    return len(got) >= 5

                until(delivered, "the real n2 to receive its commands")
                got.extend(real.poll(0.1))
                assert got == sent
                for sock in foreign:
                    assert sock.poll(100) == 0  # nothing ever reached them
            finally:
                real.close()
        finally:
            for sock in foreign:
                sock.close(linger=0)


def test_the_command_router_discards_what_peers_send(
    auth: NodeAuthenticator, keys: Any, ctx: zmq.Context[Any]
) -> None:
    with CommandPublisher(auth=auth, rcvhwm=10) as pub:
        peer = _dealer(ctx, pub.endpoint, None, keys[1]["n3"])
        try:
            for i in range(50):
                peer.send(b"x" * (100 + i))
            peer.send_multipart([b"a", b"b"])

            def discarded() -> bool:
                pub.poll_incoming()
                return pub.counters()["discarded"] >= 51

            until(discarded, "the junk to be read and discarded")
            assert pub.counters()["routes"] == 0
        finally:
            peer.close(linger=0)


def test_a_curve_socket_refuses_a_foreign_context(auth: NodeAuthenticator,
                                                  ctx: zmq.Context[Any]) -> None:
    with pytest.raises(ValueError, match="authenticator's context"):
        ReportReceiver(auth=auth, context=ctx)
    with pytest.raises(ValueError, match="keys of node"):
        CommandSubscriber("tcp://127.0.0.1:5555", "n2",
                          curve=ClientCurve("n1", CurveKeyPair.generate(), b"x" * 40))
