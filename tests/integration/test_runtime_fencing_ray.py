"""Through the real runtime on the session Ray cluster: a node cut off from the global
manager fences itself within its lease, and a requeued gang's new attempt never runs
beside the old one (issue 26, section 2; ``runtime.lease``).

The cut: the global manager's fault hook ``isolate([node])`` acts as one side of a
partition: that node's lease renewals fail, its reports and outcomes are not heard and
no call is made to it; the node's own processes and its report channel to the controller
are left alone, so only the lease can stop its member. The node cannot renew, fences its
subtask (its member's process group is killed: checked through psutil), says so in its
log and counts it; the global manager declares it lost after ``--node-timeout`` cycles
and requeues the gang (``on_node_loss: requeue``) on the other nodes, which completes.
When the cut heals, the node's renewal under its old incarnation is refused (counted
``stale_renewals``) and it rejoins under a new one.

Each member writes its own start and stop records (it handles SIGTERM), from which the
test checks that no member of attempt 2 started before the member of attempt 1 stopped.
The test prints the cut-to-stop and cut-to-loss times against their targets (lease + 1 s,
loss window + 2 s); it asserts none (a loaded machine). Every wait is on a state.

A global manager SIGSTOPped until every node's lease is older than the node-loss window
(the nodes say so themselves): a gang running meanwhile is fenced and requeued, and after
SIGCONT no node is declared lost for the global manager's own downtime.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from fenced_member import member, records_of
from support import cli_status as status
from support import deployed, pid_alive, wait_for, wait_until

from tests.integration.test_runtime_restarts import actor, ready_of

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def deployment(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    log = tmp_path_factory.mktemp("fencing") / "phase.jsonl"
    with deployed(ray_cluster.address, log, "--nodes", "300,300,300", "--time-scale", "100"):
        yield ray_cluster


def node_of(capsys: Any, address: str, name: str) -> dict[str, Any]:
    return next(n for n in status(capsys, address)["nodes"] if n["name"] == name)


def worker_log_lines(pid: int, needle: str) -> list[str]:
    """Lines with ``needle`` in the Ray worker log files of process ``pid`` (the local
    manager's stderr, where its log goes)."""
    import ray

    logs = Path(ray._private.worker._global_node.get_session_dir_path()) / "logs"
    lines: list[str] = []
    for path in logs.glob(f"worker-*-{pid}.*"):
        lines += [x for x in path.read_text(errors="replace").splitlines() if needle in x]
    return lines


def test_a_cut_off_node_fences_its_member_within_its_lease_and_rejoins_as_a_new_incarnation(
    deployment: Any, capsys: Any, tmp_path: Path
) -> None:
    import ray

    import coalloc
    from runtime.config import GLOBAL_NAME, RuntimeConfig, local_manager_name

    address = deployment.address
    records, go = tmp_path / "records", tmp_path / "go"
    records.mkdir()
    client = coalloc.connect(address)
    job = client.submit({
        "name": "fence", "qos": "strict", "overall_deviation": 100, "asynchrony": 50,
        "on_node_loss": "requeue", "max_attempts": 2,
        "subtasks": [{"work": 5, "command": member(records, go)} for _ in range(2)],
    })

    def running(run: str) -> Any:
        rec = status(capsys, address, job)["jobs"][0]
        subs = rec["subtasks"]
        return rec["run_id"] == run and all(
            s.get("state") == "running" and s.get("pid") for s in subs) and rec

    rec = wait_for(lambda: running(f"{job}"))
    cut, pid = rec["subtasks"][0]["node"], int(rec["subtasks"][0]["pid"])
    lm = ready_of(local_manager_name(cut))
    assert lm is not None
    lease, lm_pid = float(lm["lease"]["lease_s"]), int(lm["pid"])
    window = RuntimeConfig(time_scale=100.0).loss_window_s  # --node-timeout's default
    incarnation = node_of(capsys, address, cut)["incarnation"]
    gm = actor(GLOBAL_NAME)

    cut_at = time.monotonic()
    ray.get(gm.isolate.remote([cut]))
    try:
        wait_until(lambda: not pid_alive(pid), timeout=lease + 60, interval=0.02,
                   message=f"the member on {cut} (pid {pid}) to be stopped by its fence")
        stopped_s = time.monotonic() - cut_at
        wait_until(lambda: node_of(capsys, address, cut)["health"] == "lost", timeout=120,
                   interval=0.05, message=f"node {cut} to be declared lost")
        lost_s = time.monotonic() - cut_at
        # The node says so: its own view (the global manager hears nothing of it now).
        view = ray.get(actor(local_manager_name(cut)).status.remote(), timeout=30)
        assert view["counters"]["fenced"] >= 1
        (fenced,) = [s for s in view["subtasks"] if s["job_id"] == job]
        assert fenced["state"] == "fenced" and fenced["reason"].startswith("fenced: no lease")
    finally:
        ray.get(gm.isolate.remote([]))

    # The gang was requeued whole and runs again on the two other nodes.
    again = wait_for(lambda: running(f"{job}.2"), timeout=120)
    assert cut not in [s["node"] for s in again["subtasks"]]
    assert f"node {cut} lost" in again["history"][0]
    go.touch()
    final = client.wait(job, timeout=120)
    assert final.state == "completed", final
    # Attempt 2 never ran beside attempt 1: its members started after the member of
    # attempt 1 stopped (their own records).
    first, second = records_of(records, job), records_of(records, f"{job}.2")
    assert "stop" in first[0], first  # it handled the fence's SIGTERM
    assert len(second) == 2 and all(
        r["start"] > first[0]["stop"] for r in second.values()), (first, second)

    # Back: refused under its old incarnation (counted), rejoined under a new one, and
    # its fence shows in status.
    def rejoined() -> Any:
        node = node_of(capsys, address, cut)
        return node["health"] == "up" and node["incarnation"] != incarnation and node
    back = wait_for(rejoined, timeout=120)
    assert back["counters"]["fenced"] >= 1
    counters = status(capsys, address)["global_counters"]
    assert counters["stale_renewals"] >= 1 and counters["rejoined"] >= 1, counters
    lines = worker_log_lines(lm_pid, "fenced subtask")
    assert any(f"{job}[0]" in x and f"pid {pid}" in x for x in lines), lines
    with capsys.disabled():
        print(f"\nfencing: member stopped {stopped_s:.2f} s after the cut (lease {lease:g} s; "
              f"target <= {lease + 1:g} s); node declared lost {lost_s:.2f} s after the cut "
              f"(loss window {window:g} s; target <= {window + 2:g} s); stale reports "
              f"{counters['stale_reports']}, stale renewals {counters['stale_renewals']}, "
              f"stale outcomes {counters['stale_outcomes']}; load {os.getloadavg()[0]:.1f}")


def test_a_global_manager_stopped_past_the_loss_window_declares_no_node_lost_for_it(
    deployment: Any, capsys: Any
) -> None:
    """SIGSTOP of the global manager until every node's lease is older than the node-loss
    window (read from the nodes themselves, which keep running): the nodes hold no lease
    (a synthetic gang running meanwhile is fenced, then requeued by its policy and
    completes); after SIGCONT no node is declared lost for the global manager's own
    downtime, and every node holds its lease again."""
    import signal

    import ray

    import coalloc
    from runtime.config import GLOBAL_NAME, RuntimeConfig, local_manager_name

    address = deployment.address
    client = coalloc.connect(address)
    window = RuntimeConfig(time_scale=100.0).loss_window_s
    nodes = [n["name"] for n in status(capsys, address)["nodes"]]
    before = status(capsys, address)["global_counters"]["nodes_lost"]
    job = client.submit({"name": "stall", "qos": "strict", "overall_deviation": 100,
                         "asynchrony": 50, "subtasks": [{"work": 1000}, {"work": 1000}]})
    wait_for(lambda: status(capsys, address, job)["jobs"][0]["state"] == "running")
    gm = ready_of(GLOBAL_NAME)
    assert gm is not None
    lms = [actor(local_manager_name(n)) for n in nodes]

    def ages() -> list[float]:
        return [float(r["lease"]["age_s"]) for r in ray.get([a.ready.remote() for a in lms],
                                                             timeout=30)]

    os.kill(int(gm["pid"]), signal.SIGSTOP)
    try:
        wait_for(lambda: min(ages()) > window + 1, timeout=120)
    finally:
        os.kill(int(gm["pid"]), signal.SIGCONT)
    # Every node renews again; none was declared lost for the stall.
    wait_for(lambda: max(ages()) < 1.0, timeout=60)
    wait_for(lambda: all(n["answering"] for n in status(capsys, address)["nodes"]))
    st = status(capsys, address)
    assert st["global_counters"]["nodes_lost"] == before, st["global_counters"]
    assert all(n["health"] == "up" for n in st["nodes"]), st["nodes"]
    final = client.wait(job, timeout=180)
    assert final.state == "completed" and final.attempt == 2, final
    assert "fenced" in final.history[0], final.history


def test_a_global_manager_whose_threads_are_all_held_still_renews_every_lease(
    deployment: Any, capsys: Any
) -> None:
    """Every thread of the global manager's default concurrency group held (its fault
    hook ``hold``, as calls slow to answer hold them) for longer than a lease: the nodes'
    renewals, in a concurrency group of their own, are answered meanwhile, so no node
    fences the gang running on it, and the gang completes in its first attempt."""
    import ray

    import coalloc
    from runtime.config import GLOBAL_NAME, GLOBAL_THREADS, local_manager_name

    address = deployment.address
    client = coalloc.connect(address)
    nodes = [n["name"] for n in status(capsys, address)["nodes"]]
    lms = [actor(local_manager_name(n)) for n in nodes]

    def leases() -> list[dict[str, Any]]:
        return [r["lease"] for r in ray.get([a.ready.remote() for a in lms], timeout=60)]

    lease = float(leases()[0]["lease_s"])
    fenced_before = sum(int(n["counters"]["fenced"]) for n in status(capsys, address)["nodes"])
    job = client.submit({"name": "held", "qos": "strict", "overall_deviation": 100,
                         "asynchrony": 50, "subtasks": [{"work": 3000}, {"work": 3000}]})
    wait_for(lambda: status(capsys, address, job)["jobs"][0]["state"] == "running")
    gm = actor(GLOBAL_NAME)
    # More holds than threads: the default group is full until the last one returns.
    holds = [gm.hold.remote(lease * 1.5) for _ in range(GLOBAL_THREADS + 2)]
    seen = 0
    oldest = 0.0
    while ray.wait(holds, num_returns=len(holds), timeout=0)[1]:
        # The nodes' own view: every lease held, renewed well within its length.
        views = leases()
        assert all(v["held"] for v in views), views
        oldest = max(oldest, *(float(v["age_s"]) for v in views))
        seen += 1
    assert seen >= 1  # looked while holds were out, not only after
    ray.get(holds)
    final = client.wait(job, timeout=240)
    assert final.state == "completed" and final.attempt == 1, final
    fenced = sum(int(n["counters"]["fenced"]) for n in status(capsys, address)["nodes"])
    assert fenced == fenced_before
    with capsys.disabled():
        print(f"\nheld global manager: oldest lease {oldest:.2f} s of {lease:g} s over "
              f"{seen} looks; load {os.getloadavg()[0]:.1f}")
