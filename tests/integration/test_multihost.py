"""coalloc across hosts that talk over real interfaces: network namespaces, each with its
own address on a bridge and its own raylet, the head (global manager, controller, API)
in the root namespace (``deploy/netns-cluster.sh``, ``tests/multihost.py``).

Everything runs in subprocesses (``coalloc`` on the head or inside a namespace), so these
tests never touch the Ray instance other tests hold in the pytest process. Each test has
its own ``coalloc up`` (and ``down``) on the module's cluster.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from multihost import Deployment, NetnsCluster, node_of_host
from support import wait_until

pytestmark = [pytest.mark.multihost, pytest.mark.integration]


@pytest.fixture
def deployment(netns_cluster: NetnsCluster, tmp_path: Path) -> Iterator[Deployment]:
    for host in netns_cluster.hosts:  # a host an earlier test cut off may need a raylet
        if not netns_cluster.host_alive(host):
            netns_cluster.rejoin(host)
    dep = Deployment(netns_cluster, tmp_path / "head-home")
    try:
        yield dep
    finally:
        for host in netns_cluster.hosts:
            netns_cluster.restore(host)
            netns_cluster.clear_netem(host)
        if dep.state:
            dep.down()


def write_job(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_a_job_runs_across_three_hosts_with_curve_on_their_interfaces(
    deployment: Deployment, tmp_path: Path
) -> None:
    cluster = deployment.cluster
    deployment.up()
    hosts = cluster.hosts[:3]
    job = write_job(tmp_path / "across.json", {
        "name": "across", "qos": "strict", "overall_deviation": 300, "asynchrony": 120,
        "subtasks": [{"work": 600, "labels": [h.ns]} for h in hosts],
    })
    submitted = deployment.cli("submit", str(job))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[0]

    def finished() -> Any:
        st = deployment.status()
        rec = next(j for j in st["jobs"] if j["job_id"] == job_id)
        return st if rec["state"] in ("completed", "failed") else None

    st = wait_until(finished, timeout=240, interval=1.0, message=f"{job_id} to end")
    rec = next(j for j in st["jobs"] if j["job_id"] == job_id)
    assert rec["state"] == "completed", rec
    nodes = {h.ns: node_of_host(st, h) for h in hosts}
    assert sorted(rec["nodes"]) == sorted(nodes.values())

    # CURVE, and every host's local manager reported over it.
    security = st["counters"]["security"] if "security" in st["counters"] else st["security"]
    assert security["mode"] == "curve" and security["auth_failures"] == 0
    lms = st["counters"]["local_managers"]
    assert all(lms[nodes[h.ns]]["reports_sent"] > 0 for h in hosts), lms
    assert st["counters"]["controller"]["reports_applied"] > 0

    # The sockets: each host's local manager talks to the controller's report and command
    # ports from the host's own bridge address, over its veth.
    head = cluster.head_ip
    ports = {st["report_endpoint"].rsplit(":", 1)[1],
             st["counters"]["command_endpoint"].rsplit(":", 1)[1]}
    for h in hosts:
        conns = cluster.connections(h)
        to_controller = {peer.rsplit(":", 1)[1] for local, peer, proc in conns
                         if peer.rsplit(":", 1)[0] == head and local.rsplit(":", 1)[0] == h.ip
                         and "LocalManag" in proc}
        assert ports <= to_controller, (h, conns)


def test_the_api_answers_another_hosts_namespace_with_a_credential_and_refuses_without(
    deployment: Deployment, tmp_path: Path
) -> None:
    cluster = deployment.cluster
    deployment.up()
    cred = tmp_path / "alice.cred"
    added = deployment.cli("user", "add", "alice", "--out", str(cred))
    assert added.returncode == 0, added.stderr
    assert json.loads(cred.read_text())["api"].startswith(f"http://{cluster.head_ip}:")
    # Alice's machine: another host's namespace, a home with only her credentials file.
    elsewhere = cluster.hosts[-1]
    home = tmp_path / "alice-home"
    home.mkdir()
    (home / "credentials").write_bytes(cred.read_bytes())
    os.chmod(home / "credentials", 0o600)
    who = cluster.coalloc(home, "status", "--json", host=elsewhere)
    assert who.returncode == 0, who.stderr
    st = json.loads(who.stdout[who.stdout.index("{"):])
    assert len(st["nodes"]) == len(cluster.hosts) + 1

    # A wrong token: refused in one line; no token at all: 401.
    bad = cluster.coalloc(home, "status", host=elsewhere,
                          env={"COALLOC_TOKEN": "not-" + json.loads(cred.read_text())["token"]})
    assert bad.returncode == 2 and "refused the credential" in bad.stderr, (bad.stdout, bad.stderr)
    assert len(bad.stderr.strip().splitlines()) == 1
    probe = ("import sys, urllib.request, urllib.error\n"
             "try:\n"
             "    urllib.request.urlopen(sys.argv[1] + '/api/v1/status', timeout=20)\n"
             "except urllib.error.HTTPError as e:\n"
             "    print(e.code)\n"
             "else:\n"
             "    print('answered')\n")
    anonymous = cluster.run_in(elsewhere, sys.executable, "-c", probe, deployment.api_url)
    assert anonymous.stdout.strip() == "401", (anonymous.stdout, anonymous.stderr)
