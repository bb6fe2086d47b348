"""The live runtime started with ``--insecure`` (no CURVE) on the session's Ray cluster.

Without CURVE anyone who reaches the controller's ports can send, which is what these
tests need: malformed frames from a foreign PUSH are dropped and counted by reason while
good reports are still applied, and a flood on the command ROUTER is read and discarded
with the controller's memory bounded. ``status`` says INSECURE. A real Prometheus
(Debian's ``prometheus``, started by the test with ``deploy/prometheus.yml``) scrapes the
runtime's metrics from every Ray node meanwhile, and every query of the Grafana dashboard
runs against it. The module takes its deployment down at the end.
"""

from __future__ import annotations

import random
import time
from typing import Any

import msgpack
import pytest
from prometheus_server import PrometheusServer, dashboard_queries, prometheus_binary
from support import cli_status as status
from support import idle_budgets, run_cli, wait_for

from coalloc import cli
from coallocator.messages import ProgressReport
from coallocator.wire import WIRE_VERSION, FrameError, decode_report, encode_report

pytestmark = pytest.mark.ray








@pytest.fixture(scope="module")
def insecure(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from runtime.config import GLOBAL_NAME
    from runtime.deploy import find_actor

    log = tmp_path_factory.mktemp("insecure") / "phase.jsonl"
    code = cli.main(["up", "--address", ray_cluster.address, "--insecure", "--log", str(log)])
    assert code == 0
    yield ray_cluster
    if find_actor(GLOBAL_NAME) is not None:
        cli.main(["down", "--address", ray_cluster.address])


def test_every_status_says_insecure(insecure: Any, capsys: Any) -> None:
    st = status(capsys, insecure.address)
    assert st["security"]["mode"] == "insecure"
    assert st["counters"]["transport"]["secure"] is False
    code, out, _ = run_cli(capsys, "status", "--address", insecure.address)
    assert code == 0 and "INSECURE (--insecure)" in out


def _bad_frames(good: bytes) -> dict[str, list[bytes]]:
    rng = random.Random(7)
    return {
        "truncated": [good[:-3], good[:5]],
        "too_deep": [b"\x91" * 5000 + b"\xc0"],
        "over_limit": [b"\xdd\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff"],
        "bad_schema": [msgpack.packb([WIRE_VERSION, "progress", "j", 0]),
                       msgpack.packb({"a": 1})],
        "bad_version": [msgpack.packb([WIRE_VERSION + 1, "progress"] + [0] * 10)],
        "oversized": [b"\x00" * (70 * 1024)],
        "random": [rng.randbytes(64) for _ in range(5)],
    }


def test_bad_frames_are_counted_and_good_reports_still_applied(
    insecure: Any, capsys: Any
) -> None:
    import zmq

    import coalloc

    client = coalloc.connect(insecure.address)
    job_id = client.submit(
        {"name": "long", "qos": "strict", "overall_deviation": 100, "asynchrony": 50,
         "subtasks": [{"work": 5000, "weight": 1}, {"work": 5000, "weight": 1}]}
    )
    before = status(capsys, insecure.address)
    (job,) = [j for j in before["jobs"] if j["job_id"] == job_id]
    node = job["subtasks"][0]["node"]
    other = next(n["name"] for n in before["nodes"] if n["name"] != node)
    good = encode_report(
        ProgressReport(job_id, 0, node, 2**40, 1, before["model_time"] + 100.0, 123456.0,
                       1.0, 1.0, True)
    )
    # Well-formed, but from the wrong node (subtask 0 is not on it): dropped.
    wrong_node = encode_report(
        ProgressReport(job_id, 0, other, 2**41, 1, before["model_time"] + 100.0, 1e7,
                       1.0, 1.0, True)
    )
    frames = _bad_frames(good)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(before["report_endpoint"])
    try:
        for batch in frames.values():
            for frame in batch:
                sock.send(frame)
        sock.send_multipart([good, good])  # two parts: one message, dropped
        sock.send(wrong_node)
        sock.send(good)
        sock.send(good)  # a duplicate: ignored
    finally:
        sock.close()
        ctx.term()
    sent_bad = sum(len(b) for b in frames.values()) + 2

    def applied() -> Any:
        st = status(capsys, insecure.address, job_id)
        sub = st["jobs"][0]["subtasks"][0]
        return st if sub.get("controller_done") else None

    st = wait_for(applied, timeout=20)
    assert st["jobs"][0]["subtasks"][0]["controller_virtual_time"] == 123456.0
    # Every frame is dropped for the reason the wire decoder gives it (random bytes land
    # wherever they happen to fail).
    expected: dict[str, int] = {"multipart": 1, "wrong_node": 1}
    for batch in frames.values():
        for frame in batch:
            with pytest.raises(FrameError) as exc:
                decode_report(frame)
            expected[exc.value.reason.value] = expected.get(exc.value.reason.value, 0) + 1
    for named in ("truncated", "too_deep", "over_limit", "bad_schema", "bad_version",
                  "oversized"):
        assert expected[named] >= len(frames[named]), named
    # The forged good report (incarnation 1) made its incarnation the node's current one:
    # the node's real reports that follow are dropped as old_incarnation, as many as
    # arrive before this status (more on a loaded machine). Counted apart.
    d0, d1 = before["counters"]["dropped"], dict(st["counters"]["dropped"])
    d1["old_incarnation"] = d0["old_incarnation"]
    assert {r: d1[r] - d0[r] for r in d1 if d1[r] != d0[r]} == expected
    assert sum(d1.values()) - sum(d0.values()) == sent_bad
    assert st["counters"]["transport"]["duplicates"] >= 1
    # The controller kept running and keeps answering.
    assert st["controller"]["running"] is True
    assert client.cancel(job_id).state == "cancelled"


@pytest.fixture(scope="module")
def prometheus(insecure: Any) -> Any:
    """A real Prometheus scraping every Ray node's metrics export port (as Ray's service
    discovery file lists them) every second."""
    import ray

    binary = prometheus_binary()
    if binary is None:
        pytest.skip("prometheus not installed (Debian: apt-get install -y prometheus)")
    targets = [f"{n['NodeManagerAddress']}:{n['MetricsExportPort']}"
               for n in ray.nodes() if n["Alive"]]
    with PrometheusServer(binary, targets, scrape_s=1.0) as server:
        wait_for(lambda: server.targets_up() == len(targets), timeout=60)
        yield server


#: Dashboard queries that have no series in this test: a counter Ray exports only once it
#: has been incremented (no local manager's send queue fills up here, no subtask here
#: reports its own progress, and no node fences one).
EMPTY_IN_TEST = {"ray_coalloc_node_reports_send_dropped_total",
                 "ray_coalloc_progress_reports_total", "ray_coalloc_progress_dropped_total",
                 "ray_coalloc_node_fenced_subtasks_total"}


def test_prometheus_sees_phase_difference_reports_drops_queue_and_nodes(
    insecure: Any, prometheus: PrometheusServer, capsys: Any
) -> None:
    import math

    import zmq

    import coalloc

    prom = prometheus
    client = coalloc.connect(insecure.address)
    spec = {"qos": "strict", "overall_deviation": 100, "asynchrony": 50,
            "subtasks": [{"work": 5000, "weight": 10} for _ in range(3)]}
    # Weight 10 at 25 Mcycles/s per weight fills 250 of the idle 300 MHz node's budget of
    # 315 (sq admits on the measured QoS capacity): the second job waits for the first.
    idle_budgets(capsys, insecure.address)
    running = client.submit(dict(spec, name="in-step"))
    waiting = client.submit(dict(spec, name="waits"))
    assert client.job(running).state == "running"
    assert client.job(waiting).state == "pending"
    before = status(capsys, insecure.address)
    sent = {"truncated": 3, "bad_version": 2}
    good = encode_report(ProgressReport("x", 0, "n", 1, 1, 0.0, 0.0, 1.0, 1.0, False))
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(before["report_endpoint"])
    try:
        for _ in range(sent["truncated"]):
            sock.send(good[:-3])
        for _ in range(sent["bad_version"]):
            sock.send(msgpack.packb([WIRE_VERSION + 1, "progress"] + [0] * 10))
    finally:
        sock.close()
        ctx.term()

    def dropped_in_status() -> Any:
        d0, d1 = before["counters"]["dropped"], status(capsys, insecure.address)[
            "counters"]["dropped"]
        return d1 if all(d1[r] - d0[r] == n for r, n in sent.items()) else None

    dropped = wait_for(dropped_in_status, timeout=30)
    # The reasons sent reach what status counts (Ray exports every 10 s); every reason
    # Prometheus has is one status counts. (Others may still grow meanwhile: the earlier
    # test's forged report made its incarnation current for a node, whose real reports
    # are dropped as old_incarnation since.)
    by_reason = "sum by (reason) (ray_coalloc_reports_dropped_total)"
    seen: dict[str, Any] = {}

    def same_drops() -> bool:
        seen["prometheus"] = got = prom.values(by_reason, "reason")
        return all(got.get(r) == dropped[r] for r in sent)

    try:
        wait_for(same_drops, timeout=90)
    except AssertionError as exc:
        raise AssertionError(f"drops by reason: status {dropped}, then {seen}") from exc
    assert set(seen["prometheus"]) <= set(dropped)
    phi = f'ray_coalloc_phase_difference_seconds{{job_id="{running}"}}'
    (series,) = wait_for(lambda: prom.query(phi), timeout=90)
    assert series["metric"]["job_id"] == running and math.isfinite(float(series["value"][1]))
    assert prom.values(f'max(ray_coalloc_asynchrony_window_seconds{{job_id="{running}"}})') \
        == {"": 50.0}
    # The reports counter rises.
    received = "sum(ray_coalloc_reports_received_total)"
    first = wait_for(lambda: prom.values(received).get(""), timeout=90)
    wait_for(lambda: prom.values(received)[""] > first, timeout=90)
    # The queue and the nodes.
    wait_for(lambda: prom.values("max(ray_coalloc_pending_jobs)") == {"": 1.0}, timeout=90)
    wait_for(lambda: prom.values("max(ray_coalloc_oldest_pending_wait_seconds)")[""] > 0,
             timeout=90)
    assert prom.values("max by (health) (ray_coalloc_nodes)", "health") == {
        "up": 3.0, "stale": 0.0, "lost": 0.0}
    assert prom.values("sum(ray_coalloc_placement_cycle_seconds_count)")[""] >= 1
    # Every query of the Grafana dashboard parses, and has data unless it reads only a
    # metric that has none here (a rate needs two samples in its window: polled).
    queries = dashboard_queries()
    for q in queries:
        prom.query_range(q.expr, seconds=60.0)  # raises on a query Prometheus refuses
        if not any(n in q.raw for n in EMPTY_IN_TEST):
            wait_for(lambda q=q: prom.query(q.expr), timeout=60)
    # A job the controller no longer tracks leaves a gap (NaN), not its last value.
    client.cancel(running)
    client.cancel(waiting)
    wait_for(lambda: all(math.isnan(float(s["value"][1])) for s in prom.query(phi)),
             timeout=90)


#: The flood: this many 1000-byte messages in all, from FLOOD_PEERS DEALERs, plus
#: BIG_FRAMES frames of 1 MiB (above the ROUTER's 1 KiB message cap).
FLOOD_MESSAGES = 200_000
FLOOD_PEERS = 8
BIG_FRAMES = 64
#: The controller's resident memory may grow by at most this much under the flood,
#: while the flood carries 200 MB + 64 MiB.
RSS_BOUND_BYTES = 64 * 1024 * 1024


def test_a_flood_on_the_command_router_is_discarded_with_bounded_memory(
    insecure: Any, capsys: Any
) -> None:
    import psutil
    import ray
    import zmq

    from runtime.config import CONTROLLER_NAME, NAMESPACE

    ready = ray.get(ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE).ready.remote())
    proc = psutil.Process(ready["pid"])
    before = status(capsys, insecure.address)
    endpoint = before["counters"]["command_endpoint"]
    rss0 = proc.memory_info().rss
    ctx = zmq.Context()
    peers = []
    for i in range(FLOOD_PEERS):
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTING_ID, f"flood-{i}".encode())
        sock.connect(endpoint)
        peers.append(sock)
    big = ctx.socket(zmq.DEALER)
    big.setsockopt(zmq.LINGER, 0)
    big.connect(endpoint)
    payload = b"x" * 1000
    sent = 0
    peak = rss0
    deadline = time.monotonic() + 120.0
    try:
        for _ in range(BIG_FRAMES):
            try:
                big.send(b"y" * (1 << 20), zmq.NOBLOCK)
            except zmq.Again:
                pass
        while sent < FLOOD_MESSAGES and time.monotonic() < deadline:
            for sock in peers:
                for _ in range(500):
                    try:
                        sock.send(payload, zmq.NOBLOCK)
                    except zmq.Again:
                        time.sleep(0.001)  # the controller's queue is full: it reads
                        break
                    sent += 1
            peak = max(peak, proc.memory_info().rss)

        def drained() -> Any:
            st = status(capsys, insecure.address)
            got = st["counters"]["commands_transport"]["discarded"]
            return st if got - before["counters"]["commands_transport"]["discarded"] >= sent \
                else None

        st = wait_for(drained, timeout=60, every=0.5)
    finally:
        for sock in [*peers, big]:
            sock.close(linger=0)
        ctx.term()
    peak = max(peak, proc.memory_info().rss)
    print(f"flood: {sent} messages of 1000 B + {BIG_FRAMES} x 1 MiB; controller RSS "
          f"{rss0 / 2**20:.0f} MiB before, peak {peak / 2**20:.0f} MiB")
    assert sent >= FLOOD_MESSAGES // 2
    assert peak - rss0 < RSS_BOUND_BYTES
    # The controller kept running and the flood learned no route.
    assert st["controller"]["running"] is True
    assert st["counters"]["commands_transport"]["routes"] == before["counters"][
        "commands_transport"]["routes"]
