"""Report and command channels over real ZeroMQ sockets on 127.0.0.1.

Every wait is a bounded loop with a deadline, so a broken transport fails instead of
hanging the suite.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import pytest
import zmq

from coallocator.messages import ProgressReport, ReweightCommand
from coallocator.transport import (
    CommandPublisher,
    CommandSubscriber,
    ReportReceiver,
    ReportSender,
)
from coallocator.wire import (
    WIRE_VERSION,
    DropReason,
    WireLimits,
    encode_command,
    encode_report,
)

pytestmark = pytest.mark.integration

DEADLINE_S = 10.0


def report(seq: int, node: str = "node-a", incarnation: int = 1, job: str = "job-1"):
    return ProgressReport(job, 0, node, incarnation, seq, 10.0 * seq, 9.5 * seq, 100.0, 95.0)


def until(predicate: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def collect(rx: ReportReceiver, received: int) -> list[ProgressReport]:
    """Poll until the receiver has taken ``received`` messages in total."""
    got: list[ProgressReport] = []
    deadline = time.monotonic() + DEADLINE_S
    while rx.counters()["received"] < received:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {rx.counters()} of {received} messages arrived")
        got.extend(rx.poll(0.05))
    got.extend(rx.poll(0.0))
    return got


@pytest.fixture
def ctx() -> Iterator[zmq.Context[Any]]:
    context: zmq.Context[Any] = zmq.Context()
    yield context
    context.destroy(linger=0)


@pytest.fixture
def receiver(ctx: zmq.Context[Any]) -> Iterator[ReportReceiver]:
    with ReportReceiver(context=ctx, limits=WireLimits(max_frame_bytes=4096)) as rx:
        yield rx


@pytest.fixture
def raw_push(ctx: zmq.Context[Any], receiver: ReportReceiver) -> Iterator[zmq.Socket[Any]]:
    """A plain PUSH socket that can send anything, connected to the receiver."""
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(receiver.endpoint)
    yield sock
    sock.close(linger=0)


def bad_frames() -> list[tuple[str, bytes | list[bytes], DropReason]]:
    rng = random.Random(4)
    good = encode_report(report(1))
    env = msgpack.unpackb(good)
    frames: list[tuple[str, bytes | list[bytes], DropReason]] = []
    # random bytes: what they are counted as depends on the bytes; checked by total
    for i in range(20):
        noise = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80)))
        frames.append((f"random {i}", noise, DropReason.UNDECODABLE))
    frames += [
        ("empty", b"", DropReason.TRUNCATED),
        ("truncated", good[:-5], DropReason.TRUNCATED),
        ("deep nesting", b"\x91" * 3000 + b"\x00", DropReason.TOO_DEEP),
        ("array of 2**31", b"\xdd" + struct.pack(">I", 2**31), DropReason.OVER_LIMIT),
        ("map of 2**32-1", b"\xdf\xff\xff\xff\xff", DropReason.OVER_LIMIT),
        ("str of 2 GiB", b"\xdb\x80\x00\x00\x00abc", DropReason.TRUNCATED),
        ("trailing", good + b"\x01", DropReason.TRAILING_BYTES),
        ("version 9", msgpack.packb([9, *env[1:]]), DropReason.BAD_VERSION),
        ("command kind", encode_command(ReweightCommand("j", 0, "n", 0, 1.0, 0.0)),
         DropReason.BAD_KIND),
        ("wrong schema", msgpack.packb({"job": "j", "seq": 1}), DropReason.BAD_SCHEMA),
        ("missing field", msgpack.packb(env[:-1]), DropReason.BAD_SCHEMA),
        ("negative seq", msgpack.packb([*env[:6], -4, *env[7:]]), DropReason.BAD_VALUE),
        ("oversized", b"\x00" * 5000, DropReason.OVERSIZED),
        ("multipart of good frames", [good, good], DropReason.MULTIPART),
        ("multipart of three", [b"a", b"b", b"c"], DropReason.MULTIPART),
    ]
    return frames


def test_bad_frames_are_counted_and_good_reports_still_get_through(
    receiver: ReportReceiver, raw_push: zmq.Socket[Any]
) -> None:
    frames = bad_frames()
    good = [report(s) for s in range(1, 6)]
    for _, frame, _ in frames:
        if isinstance(frame, list):
            raw_push.send_multipart(frame)
        else:
            raw_push.send(frame)
    for rep in good:
        raw_push.send(encode_report(rep))

    got = collect(receiver, len(frames) + len(good))
    assert got == good  # in order, nothing else
    c = receiver.counters()
    assert c["received"] == len(frames) + len(good)
    assert c["accepted"] == len(good)
    assert c["dropped_total"] == len(frames)
    assert c["received"] == c["accepted"] + c["duplicates"] + c["stale"] + c["dropped_total"]
    expected: dict[str, int] = {}
    for name, _, reason in frames:
        if not name.startswith("random"):
            expected[reason.value] = expected.get(reason.value, 0) + 1
    randoms = sum(1 for name, _, _ in frames if name.startswith("random"))
    extra = {k: c["dropped"][k] - expected.get(k, 0) for k in c["dropped"]}
    assert all(v >= 0 for v in extra.values()), extra
    assert sum(extra.values()) == randoms  # every random frame counted under some reason
    assert c["internal_errors"] == 0


def test_receiver_keeps_answering_after_a_frame_above_the_hard_cap(
    ctx: zmq.Context[Any],
) -> None:
    limits = WireLimits(max_frame_bytes=1024)
    with ReportReceiver(context=ctx, limits=limits, max_msg_bytes=4096) as rx:
        bully = ctx.socket(zmq.PUSH)
        bully.setsockopt(zmq.LINGER, 0)
        bully.connect(rx.endpoint)
        bully.send(b"\x00" * 100_000)  # libzmq cuts this connection, nothing allocated
        assert rx.poll(0.2) == []
        bully.close(linger=0)
        with ReportSender(rx.endpoint, context=ctx) as tx:
            until(lambda: tx.send(report(1)), "the sender to connect")
            got = collect(rx, 1)
        assert got == [report(1)]
        assert rx.counters()["accepted"] == 1


def test_duplicates_and_stale_reports_are_ignored(
    ctx: zmq.Context[Any],
) -> None:
    with ReportReceiver(context=ctx, dedupe_window=4) as rx, ReportSender(
        rx.endpoint, context=ctx
    ) as tx:
        until(lambda: tx.send(report(10)), "the sender to connect")
        sequence = [10, 11, 11, 9, 9, 12, 5, 12]  # 10 was sent by the probe loop above
        for s in sequence:
            assert tx.send(report(s))
        got = collect(rx, tx.counters()["sent"])
        assert [r.seq for r in got] == [10, 11, 9, 12]
        c = rx.counters()
        # every probe that went through was seq 10: all but the first are duplicates
        probes = tx.counters()["sent"] - len(sequence)
        assert c["duplicates"] == (probes - 1) + 1 + 1 + 1 + 1  # 10, 11, 9, 12 repeated
        assert c["stale"] == 1  # 5 is 7 below 12, beyond a window of 4
        # another incarnation of the same node is a separate stream
        assert tx.send(report(11, incarnation=2))
        assert collect(rx, c["received"] + 1) == [report(11, incarnation=2)]


def test_many_senders_fair_queued(ctx: zmq.Context[Any], receiver: ReportReceiver) -> None:
    senders = [ReportSender(receiver.endpoint, context=ctx) for _ in range(3)]
    try:
        for i, tx in enumerate(senders):
            until(lambda tx=tx, i=i: tx.send(report(0, node=f"n{i}")), "senders to connect")
        for seq in range(1, 51):
            for i, tx in enumerate(senders):
                assert tx.send(report(seq, node=f"n{i}"))
        total = sum(tx.counters()["sent"] for tx in senders)
        got = collect(receiver, total)
        for i in range(3):
            seqs = [r.seq for r in got if r.node == f"n{i}"]
            assert seqs == sorted(seqs) and seqs[-50:] == list(range(1, 51))
    finally:
        for tx in senders:
            tx.close()


def run_bounded(fn: Callable[[], None], timeout_s: float = DEADLINE_S) -> None:
    """Run ``fn`` in a thread; fail (instead of hanging) if it does not return."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            errors.append(exc)

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(timeout_s)
    assert not th.is_alive(), "send blocked"
    if errors:
        raise errors[0]


def test_sender_never_blocks_without_a_receiver(ctx: zmq.Context[Any]) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"  # nobody listens there
    with ReportSender(endpoint, context=ctx, sndhwm=10) as tx:
        results: list[bool] = []
        run_bounded(lambda: results.extend(tx.send(report(s)) for s in range(5000)))
        assert not any(results)  # IMMEDIATE: nothing queued for an absent controller
        assert tx.counters() == {"sent": 0, "dropped": 5000}


def test_sender_drops_when_its_queue_is_full(ctx: zmq.Context[Any]) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    # immediate=False queues while disconnected, up to SNDHWM, then drops
    with ReportSender(endpoint, context=ctx, sndhwm=10, immediate=False) as tx:
        results: list[bool] = []
        run_bounded(lambda: results.extend(tx.send(report(s)) for s in range(1000)))
        c = tx.counters()
        assert 0 < c["sent"] <= 20 and c["sent"] + c["dropped"] == 1000
        assert results[: c["sent"]] == [True] * c["sent"]


def test_sender_drops_when_the_receiver_stops_reading(ctx: zmq.Context[Any]) -> None:
    with ReportReceiver(context=ctx, rcvhwm=1) as rx, ReportSender(
        rx.endpoint, context=ctx, sndhwm=1
    ) as tx:
        until(lambda: tx.send(report(0)), "the sender to connect")
        big = ProgressReport("j" * 255, 0, "n" * 255, 1, 0, 0.0, 0.0, 0.0, 0.0)
        state = {"sent": 0}

        def flood() -> None:
            # the TCP buffers absorb some megabytes first; bounded by a count
            for s in range(400_000):
                if not tx.send(ProgressReport(big.job_id, 0, big.node, 1, s, 0.0, 0.0, 0.0, 0.0)):
                    return
                state["sent"] += 1

        run_bounded(flood, timeout_s=60.0)
        assert tx.counters()["dropped"] >= 1


def test_receiver_binds_a_given_port_and_reports_its_endpoint(ctx: zmq.Context[Any]) -> None:
    port = free_port()
    with ReportReceiver(port=port, context=ctx) as rx:
        assert rx.endpoint == f"tcp://127.0.0.1:{port}" and rx.port == port
        with pytest.raises(OSError, match=f"cannot bind tcp://127.0.0.1:{port}"):
            ReportReceiver(port=port, context=ctx)
    with ReportReceiver(context=ctx) as rx:
        assert rx.endpoint.startswith("tcp://127.0.0.1:") and rx.port > 0


def test_close_is_idempotent_and_poll_after_close_fails(ctx: zmq.Context[Any]) -> None:
    rx = ReportReceiver(context=ctx)
    tx = ReportSender(rx.endpoint, context=ctx)
    rx.close()
    rx.close()
    tx.close()
    tx.close()
    with pytest.raises(RuntimeError):
        rx.poll()
    with pytest.raises(RuntimeError):
        tx.send(report(1))


def test_poll_waits_at_most_its_timeout(receiver: ReportReceiver) -> None:
    # bounded: an empty poll returns (the value of the wait is not asserted)
    assert receiver.poll(0.05) == []
    assert receiver.poll(0.0) == []


def test_poll_takes_at_most_max_messages(
    receiver: ReportReceiver, raw_push: zmq.Socket[Any]
) -> None:
    for s in range(10):
        raw_push.send(encode_report(report(s)))
    until(lambda: receiver.socket.poll(0) != 0, "reports to arrive")
    time.sleep(0.05)
    first = receiver.poll(0.0, max_messages=4)
    assert len(first) <= 4
    rest = collect(receiver, 10)
    assert [r.seq for r in first + rest] == list(range(10))


# ----------------------------------------------------------------------------- commands


def connect_nodes(pub: CommandPublisher, subs: list[CommandSubscriber]) -> None:
    """Wait until the ROUTER knows every node, then discard the probes."""
    for sub in subs:
        probe = ReweightCommand("probe", 0, sub.node, 0, 1.0, 0.0)
        until(lambda p=probe: pub.publish(p), f"{sub.node} to connect")
    for sub in subs:
        until(lambda s=sub: s.counters()["accepted"] >= 1 or bool(s.poll(0.01)),
              "probes to arrive")
        sub.poll(0.05)


def test_commands_reach_exactly_their_node(ctx: zmq.Context[Any]) -> None:
    names = ["node1", "node10", "node2"]  # node1 is a prefix of node10
    with CommandPublisher(context=ctx) as pub:
        subs = [CommandSubscriber(pub.endpoint, n, context=ctx) for n in names]
        try:
            connect_nodes(pub, subs)
            sent: dict[str, list[ReweightCommand]] = {n: [] for n in names}
            for seq in range(1, 21):
                node = names[seq % 3]
                cmd = ReweightCommand(f"job-{seq}", seq % 4, node, seq, 10.0 * seq, 1.0)
                assert pub.publish(cmd)
                sent[node].append(cmd)
            for sub in subs:
                got: list[ReweightCommand] = []
                until(lambda s=sub, g=got: bool(g.extend(s.poll(0.01))) or
                      len(g) >= len(sent[s.node]), f"{sub.node}'s commands")
                got.extend(sub.poll(0.05))
                assert got == sent[sub.node]
                assert sub.counters()["dropped_total"] == 0
        finally:
            for sub in subs:
                sub.close()


def test_command_for_an_unknown_node_is_unroutable(ctx: zmq.Context[Any]) -> None:
    with CommandPublisher(context=ctx) as pub:
        assert not pub.publish(ReweightCommand("j", 0, "nobody", 1, 1.0, 0.0))
        c = pub.counters()
        assert (c["sent"], c["dropped"], c["unroutable"], c["routes"]) == (0, 0, 1, 0)


def test_publisher_never_blocks_when_a_node_stops_reading(ctx: zmq.Context[Any]) -> None:
    with CommandPublisher(context=ctx, sndhwm=1) as pub, CommandSubscriber(
        pub.endpoint, "slow", context=ctx, rcvhwm=1
    ) as sub:
        connect_nodes(pub, [sub])

        def flood() -> None:
            for s in range(400_000):
                if not pub.publish(ReweightCommand("j" * 255, 0, "slow", s, 1.0, 0.0)):
                    return

        run_bounded(flood, timeout_s=60.0)
        assert pub.counters()["dropped"] >= 1


def test_a_restarted_local_manager_takes_its_name_over(ctx: zmq.Context[Any]) -> None:
    with CommandPublisher(context=ctx) as pub:
        old = CommandSubscriber(pub.endpoint, "n1", context=ctx)
        connect_nodes(pub, [old])
        new = CommandSubscriber(pub.endpoint, "n1", context=ctx)
        try:
            cmd = ReweightCommand("j", 0, "n1", 5, 3.0, 0.0)
            got: list[ReweightCommand] = []

            def arrived() -> bool:
                pub.poll_incoming()  # the new subscriber's hello rebinds n1
                pub.publish(cmd)
                got.extend(new.poll(0.02))
                return bool(got)

            until(arrived, "the new subscriber to receive")
            assert got[0] == cmd
            assert pub.counters()["hellos"] >= 2
        finally:
            old.close()
            new.close()


def test_subscriber_counts_bad_commands_and_keeps_going(ctx: zmq.Context[Any]) -> None:
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    try:
        with CommandSubscriber(f"tcp://127.0.0.1:{port}", "n1", context=ctx) as sub:
            # the ROUTER learns the subscriber's routing id from its hello
            assert router.poll(int(DEADLINE_S * 1000))
            rid, hello = router.recv_multipart()
            assert msgpack.unpackb(hello) == [WIRE_VERSION, "hello", "n1"]
            router.send_multipart([rid, b"\xc1"], zmq.NOBLOCK)
            good = ReweightCommand("j", 1, "n1", 2, 5.0, 0.5)
            bad = [
                [rid, b"\xdd\xff\xff\xff\xff"],  # huge declared size
                [rid, b"\x91" * 3000],  # deep nesting (truncated as well)
                [rid, encode_report(report(1))],  # a report on the command channel
                [rid, encode_command(ReweightCommand("j", 1, "n2", 2, 5.0, 0.5))],
                [rid, encode_command(good), b"extra"],  # multipart
                [rid, msgpack.packb([WIRE_VERSION + 1, "reweight"])],
            ]
            for parts in bad:
                router.send_multipart(parts)
            router.send_multipart([rid, encode_command(good)])
            got: list[ReweightCommand] = []
            until(lambda: bool(got.extend(sub.poll(0.02))) or sub.counters()["received"] >= 8,
                  "commands to arrive")
            got.extend(sub.poll(0.05))
            assert got == [good]
            c = sub.counters()
            assert c["received"] == 8 and c["accepted"] == 1 and c["dropped_total"] == 7
            d = c["dropped"]
            assert d["undecodable"] == 1 and d["over_limit"] == 1 and d["bad_kind"] == 1
            assert d["wrong_node"] == 1 and d["multipart"] == 1 and d["bad_version"] == 1
            assert d["too_deep"] + d["truncated"] == 1
    finally:
        router.close(linger=0)
