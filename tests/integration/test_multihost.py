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
        for client in netns_cluster.clients:
            netns_cluster.restore(client)
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


def job_record(dep: Deployment, job_id: str) -> Any:
    st = dep.status()
    return st, next(j for j in st["jobs"] if j["job_id"] == job_id)


def test_a_host_cut_off_mid_job_is_lost_and_its_gang_requeued_without_overlap(
    deployment: Deployment, tmp_path: Path
) -> None:
    """The link of a host under a running gang goes down (its processes run on): the
    global manager declares the host lost after its stall window and requeues the gang
    (``on_node_loss: requeue``) onto the other hosts. From the members' own records: no
    member of attempt 1 runs once attempt 2 has started (the cut-off host fences itself).
    With its link back the host rejoins under a new incarnation."""
    from multihost import MEMBER, overlaps, records

    cluster = deployment.cluster
    deployment.up()
    recs = tmp_path / "records"
    recs.mkdir()
    member = [sys.executable, str(MEMBER), str(recs), "40"]
    job = write_job(tmp_path / "cut.json", {
        "name": "cut", "qos": "best_effort", "on_node_loss": "requeue",
        "subtasks": [{"work": 10, "labels": ["nshost"], "command": member}] * 3,
    })
    submitted = deployment.cli("submit", str(job))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[0]
    wait_until(lambda: len({r["subtask"] for r in records(recs) if r["kind"] == "start"}) == 3,
               timeout=120, interval=0.5, message="the three members to start")
    st, rec = job_record(deployment, job_id)
    by_node = {node_of_host(st, h): h for h in cluster.hosts}
    victim_node = rec["nodes"][0]
    victim = by_node[victim_node]

    cluster.cut(victim)

    def lost() -> Any:
        st, rec = job_record(deployment, job_id)
        node = next(n for n in st["nodes"] if n["name"] == victim_node)
        return (st, rec) if node["health"] == "lost" else None

    st, rec = wait_until(lost, timeout=180, interval=0.5, message=f"{victim.ns} to be lost")
    assert st["global_counters"]["nodes_lost"] == 1  # only the host that was cut off
    incarnation = next(n["incarnation"] for n in st["nodes"] if n["name"] == victim_node)

    def requeued_and_running() -> Any:
        st, rec = job_record(deployment, job_id)
        return rec if rec["attempt"] >= 2 and rec["state"] in ("running", "completed") else None

    rec = wait_until(requeued_and_running, timeout=180, interval=0.5,
                     message="the gang's second attempt")
    assert victim_node not in rec["nodes"]
    assert "lost" in json.dumps(rec["history"])
    cluster.restore(victim)

    # Its link back, the host is refused under its old incarnation (counted) and rejoins
    # under a new one; it fenced its member meanwhile.
    def rejoined() -> Any:
        st = deployment.status()
        node = next(n for n in st["nodes"] if n["name"] == victim_node)
        return st if node["health"] == "up" and node["incarnation"] != incarnation else None

    st = wait_until(rejoined, timeout=180, interval=0.5, message=f"{victim.ns} to rejoin")
    counters = st["global_counters"]
    assert counters["stale_renewals"] >= 1 and counters["rejoined"] >= 1, counters
    assert next(n for n in st["nodes"] if n["name"] == victim_node)["counters"]["fenced"] >= 1

    def ended() -> Any:
        st, rec = job_record(deployment, job_id)
        return rec if rec["state"] in ("completed", "failed") else None

    rec = wait_until(ended, timeout=240, interval=1.0, message=f"{job_id} to end")
    assert rec["state"] == "completed", rec
    mine = [r for r in records(recs) if r["job"] == job_id]
    assert {r["attempt"] for r in mine if r["kind"] == "start"} == {1, 2}
    # The cut-off host fenced itself: its member of attempt 1 made its last record before
    # any member of attempt 2 started.
    assert overlaps(mine) == []
    cut_off = [r for r in mine if r["attempt"] == 1 and r["node"] == victim_node]
    assert cut_off and all(r["t"] < min(s["t"] for s in mine if s["attempt"] == 2)
                           for r in cut_off)


def test_delay_and_loss_between_hosts_lose_no_node_and_the_job_ends_in_step(
    deployment: Deployment, tmp_path: Path
) -> None:
    """``tc netem delay 100ms 20ms loss 1%`` on every host's link (both ways): a strict
    job across three hosts completes in its first attempt with its members in step, the
    report counters (dropped included) are kept, and no node is declared lost."""
    cluster = deployment.cluster
    deployment.up()
    for h in cluster.hosts:
        cluster.netem(h, "delay", "100ms", "20ms", "loss", "1%")
    hosts = cluster.hosts[:3]
    job = write_job(tmp_path / "slow.json", {
        "name": "slow-links", "qos": "strict", "overall_deviation": 300, "asynchrony": 120,
        "subtasks": [{"work": 1200, "labels": [h.ns]} for h in hosts],
    })
    submitted = deployment.cli("submit", str(job))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[0]

    def ended() -> Any:
        st, rec = job_record(deployment, job_id)
        return (st, rec) if rec["state"] in ("completed", "failed") else None

    st, rec = wait_until(ended, timeout=300, interval=1.0, message=f"{job_id} to end")
    assert rec["state"] == "completed" and rec["attempt"] == 1, rec
    assert st["global_counters"]["nodes_lost"] == 0
    assert all(n["health"] != "lost" for n in st["nodes"])
    counters = st["counters"]
    assert counters["controller"]["reports_applied"] > 0
    assert isinstance(counters["transport"]["dropped_total"], int)
    summary = wait_until(lambda: phase_summary(deployment, job_id), timeout=60,
                         interval=0.5, message=f"{job_id}'s phase-log summary")
    # Its members ended in step: within its asynchrony window of each other. (The
    # controller's view lags by the delay and by TCP's retransmissions: a control period
    # may see a member's clock cycles behind and count an A_t violation; the soak,
    # bench/bench_partitions.py, prints them and mean phi against clean links.)
    assert summary["completed"] and summary["completion_skew"] <= 120.0, summary


def phase_summary(dep: Deployment, run_id: str) -> Any:
    """The phase log's summary record of ``run_id`` (None until it is written)."""
    path = Path(dep.state["phase_log"])
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("type") == "summary" and rec.get("job") == run_id:
            return rec
    return None


def test_a_submission_cut_off_from_the_head_may_be_applied_and_is_never_made_twice(
    deployment: Deployment, tmp_path: Path
) -> None:
    """A user's machine (a namespace with only a credentials file) submits while cut off
    from the head: once when the request arrives but its answer is lost, once when the
    link is down from the start. Either way ``submit`` exits 2 saying the submission may
    still be applied; with the link back the same ``submit`` again makes no second job."""
    cluster = deployment.cluster
    deployment.up()
    client = cluster.clients[0]
    cred = tmp_path / "bob.cred"
    assert deployment.cli("user", "add", "bob", "--out", str(cred)).returncode == 0
    home = tmp_path / "bob-home"
    home.mkdir()
    (home / "credentials").write_bytes(cred.read_bytes())
    os.chmod(home / "credentials", 0o600)
    api_port = int(deployment.api_url.rsplit(":", 1)[1])
    fast = {"COALLOC_API_TIMEOUT": "5"}

    def jobs_named(name: str) -> list[Any]:
        return [j for j in deployment.status()["jobs"] if j["name"] == name]

    for name, partition in (
        ("answer-lost", lambda: cluster.answers_lost(client, api_port)),
        ("link-down", lambda: cluster.link_down(client)),
    ):
        job = write_job(tmp_path / f"{name}.json", {
            "name": name, "qos": "best_effort",
            "subtasks": [{"work": 5, "labels": ["nshost"]}],
        })
        with partition():
            cut = cluster.coalloc(home, "submit", str(job), host=client, env=fast)
        assert cut.returncode == 2, (cut.stdout, cut.stderr)
        assert "may still be applied" in cut.stderr
        if name == "answer-lost":
            assert len(jobs_named(name)) == 1  # the request arrived: the job exists
        again = cluster.coalloc(home, "submit", str(job), host=client, env=fast)
        assert again.returncode == 0, (again.stdout, again.stderr)
        assert "sending it again with its token" in again.stderr
        made = jobs_named(name)
        assert len(made) == 1 and again.stdout.split()[0] == made[0]["job_id"], (again, made)
