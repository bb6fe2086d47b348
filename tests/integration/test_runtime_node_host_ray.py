"""Emulated nodes hosted several to a local-manager process (``--nodes-per-process``) on
the session Ray cluster: each node keeps its own manager (incarnation, sockets, keys,
checkpoint), jobs run across hosts, and a kill -9 of a host process restarts every node
it hosts, which resume their subtasks. Every wait polls a state with a deadline."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from support import cli_status as status
from support import deployed, wait_for

from runtime.status import to_json

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def deployment(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    log = tmp_path_factory.mktemp("hosts") / "phase.jsonl"
    with deployed(ray_cluster.address, log, "--nodes", "300,450,600,350,500",
                  "--nodes-per-process", "2", "--time-scale", "100"):
        yield ray_cluster


def ready_of(host: str, node: str) -> dict[str, Any] | None:
    """Node ``node``'s ``ready`` answer from host actor ``host`` (None: not answering)."""
    import ray

    from runtime.config import NAMESPACE

    try:
        actor = ray.get_actor(host, namespace=NAMESPACE)
        return dict(ray.get(actor.ready.remote(node), timeout=5.0))
    except (ValueError, ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return None


def test_nodes_share_processes_but_not_their_identity(deployment: Any, capsys: Any) -> None:
    import coalloc
    from runtime.node_host import host_name

    client = coalloc.connect(deployment.address)
    info = client.deployment()
    # Five nodes, at most two to a process, only nodes of the same Ray node together.
    hosts = info["node_hosts"]
    members: dict[str, list[str]] = {}
    for node, host in hosts.items():
        members.setdefault(host, []).append(node)
    assert host_name(0) in members and all(1 <= len(m) <= 2 for m in members.values())
    assert any(len(m) == 2 for m in members.values())
    st = status(capsys, deployment.address)
    nodes = {n["name"]: n for n in st["nodes"]}
    assert set(nodes) == {"n0", "n1", "n2", "n3", "n4"}
    assert all(n["ready"] for n in nodes.values())
    for host, names in members.items():
        answers = [ready_of(host, name) for name in names]
        assert all(a is not None for a in answers)
        assert len({a["pid"] for a in answers if a}) == 1  # one process
        assert len({nodes[name]["ray_node_id"] for name in names}) == 1
    assert len({n["incarnation"] for n in nodes.values()}) == 5  # each its own

    job = client.submit({"name": "wide", "qos": "strict", "overall_deviation": 100,
                         "asynchrony": 50, "subtasks": [{"work": 60}] * 5})
    final = to_json(client.wait(job, timeout=120))
    assert final["state"] == "completed"
    assert sorted(s["node"] for s in final["subtasks"]) == ["n0", "n1", "n2", "n3", "n4"]
    # Every node's reports were applied with its own keys: none dropped as spoofed.
    st = status(capsys, deployment.address)
    assert st["security"]["spoofed_node"] == 0 and st["security"]["auth_failures"] == 0


def test_a_killed_host_restarts_every_node_it_hosts(deployment: Any, capsys: Any) -> None:
    import coalloc
    from runtime.node_host import host_name

    client = coalloc.connect(deployment.address)
    job = client.submit({"name": "span", "qos": "strict", "overall_deviation": 100,
                         "asynchrony": 50, "subtasks": [{"work": 600}] * 5})

    def progressed() -> bool:
        (j,) = status(capsys, deployment.address, job)["jobs"]
        return all(float(s.get("progress") or 0.0) > 0.05 for s in j["subtasks"])

    wait_for(progressed)
    before = {n["name"]: n["incarnation"] for n in status(capsys, deployment.address)["nodes"]}
    hosts = client.deployment()["node_hosts"]
    victims = sorted(n for n, h in hosts.items() if h == host_name(0))
    info = ready_of(host_name(0), victims[0])
    assert info is not None
    os.kill(int(info["pid"]), signal.SIGKILL)
    again = {n: wait_for(lambda n=n: (r := ready_of(host_name(0), n)) is not None
                         and r["pid"] != info["pid"] and r) for n in victims}
    assert all(a["restored"] >= 1 for a in again.values())
    final = to_json(client.wait(job, timeout=120))
    assert final["state"] == "completed", final
    after = {n["name"]: n["incarnation"] for n in status(capsys, deployment.address)["nodes"]}
    # Every node of host 0 came back as a new incarnation; the others did not change.
    assert all(after[n] != before[n] for n in victims)
    assert all(after[n] == before[n] for n in before if n not in victims)
