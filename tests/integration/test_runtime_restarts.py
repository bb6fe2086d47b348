"""The live runtime survives the death of its own actors: ``kill -9`` of an actor's
process mid-job on the session Ray cluster (real actors, sockets and clocks), then the
job runs to its end with nothing lost and ``status`` works.

One deployment (``coalloc up --address`` of the session fixture) serves the tests of this
file; it is taken down at the end. No timing assertions: every wait polls with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import cli_status as status
from support import deployed, pid_alive, run_cli, wait_for

from runtime.status import to_json

pytestmark = pytest.mark.ray

TIME_SCALE = 100.0








def actor(name: str) -> Any:
    import ray

    from runtime.config import NAMESPACE

    return ray.get_actor(name, namespace=NAMESPACE)


def ready_of(name: str) -> dict[str, Any] | None:
    """The actor's ``ready`` answer, or None while it is dead or restarting."""
    import ray

    try:
        return dict(ray.get(actor(name).ready.remote(), timeout=5.0))
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return None


def kill9(name: str) -> int:
    """SIGKILL the actor's process (as an operator's ``kill -9``); return the old pid."""
    info = ready_of(name)
    assert info is not None
    os.kill(int(info["pid"]), signal.SIGKILL)
    return int(info["pid"])


def restarted(name: str, old_pid: int) -> dict[str, Any]:
    return wait_for(lambda: (r := ready_of(name)) is not None and r["pid"] != old_pid and r)


def strict_job(name: str, work: float = 1000.0) -> dict[str, Any]:
    """Two synthetic subtasks (work in Gcycles); the default runs for about 15 real s on
    the fixture's idle nodes (work 30 takes about 2 s), long enough to span a restart."""
    return {"name": name, "qos": "strict", "overall_deviation": 60, "asynchrony": 30,
            "subtasks": [{"work": work, "weight": 1}, {"work": work, "weight": 1}]}


@pytest.fixture(scope="module")
def deployment(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    log = tmp_path_factory.mktemp("restarts") / "phase.jsonl"
    with deployed(ray_cluster.address, log, "--time-scale", str(TIME_SCALE)):
        yield ray_cluster


def test_the_global_manager_restarts_and_recovers_its_job_table(
    deployment: Any, capsys: Any
) -> None:
    import coalloc
    from runtime.config import GLOBAL_NAME

    client = coalloc.connect(deployment.address)
    assert client.api is not None  # through the API: the restarted manager binds its port
    before = [to_json(a) for a in client.submit_all([strict_job("gm-a"), strict_job("gm-b", 5.0)])]
    assert all(a["admitted"] for a in before)
    a, b = (x["job_id"] for x in before)
    journal = Path(client.deployment()["gm_journal"])
    assert journal.exists() and journal.stat().st_mode & 0o077 == 0
    committed = {n["name"]: n["committed"] for n in status(capsys, deployment.address)["nodes"]}
    assert sum(committed.values()) > 0

    old = kill9(GLOBAL_NAME)
    # At once, through the same client (a handle from before the crash): the call is
    # retried while Ray restarts the actor, and answered from the recovered table.
    states = client.job_states([a, b])
    assert states.keys() == {a, b} and states[a] == "running"
    # Notifications of subtasks that ended while it was down went nowhere; the restarted
    # global manager takes them from the local managers' views.
    info = restarted(GLOBAL_NAME, old)
    assert info["recovered"] is True
    st = status(capsys, deployment.address)
    assert {j["job_id"] for j in st["jobs"]} >= {a, b}
    assert st["global_manager"]["recovered"] is True and st["global_manager"]["pid"] != old
    # A submission right after the restart gets a fresh id (the id counter was recovered).
    after = client.submit(strict_job("gm-c", 5.0))
    assert after not in (a, b)

    for job in (a, b, after):
        assert client.wait(job, timeout=120).state == "completed"
    # Every budget is released: nothing committed twice or left behind.
    nodes = status(capsys, deployment.address)["nodes"]
    assert all(n["committed"] == pytest.approx(0.0, abs=1e-9) for n in nodes)
    code, out, err = run_cli(capsys, "status", "--address", deployment.address)
    assert code == 0 and a in out, err


def test_a_stopped_global_manager_is_reported_as_not_answering(
    deployment: Any, capsys: Any
) -> None:
    """SIGSTOP of the global manager: its API port still accepts connections (the
    kernel's backlog) and nothing answers. The client says it is not answering, in one
    line that does not send the user to ``coalloc up`` (which would refuse); after
    SIGCONT it answers again."""
    import coalloc
    from coalloc.errors import UserError
    from runtime.config import GLOBAL_NAME

    info = ready_of(GLOBAL_NAME)
    assert info is not None and info["api"]
    client = coalloc.connect(deployment.address, timeout=2.0)
    assert client.api is not None
    client.queue()
    os.kill(int(info["pid"]), signal.SIGSTOP)
    try:
        with pytest.raises(UserError) as err:
            client.queue()
    finally:
        os.kill(int(info["pid"]), signal.SIGCONT)
    msg = str(err.value)
    assert "not answering" in msg and "coalloc up" not in msg and "\n" not in msg
    assert isinstance(client.queue(), list)  # answered again


def test_the_controller_restarts_on_its_ports_and_tracks_running_jobs_again(
    deployment: Any, capsys: Any
) -> None:
    import coalloc
    from runtime.config import CONTROLLER_NAME

    client = coalloc.connect(deployment.address)
    before = ready_of(CONTROLLER_NAME)
    assert before is not None
    # A job that ends before the restart: its summary must survive it (the restarted
    # controller appends to the phase log), whichever tests ran before this one.
    earlier = client.submit(strict_job("ctl-0", 30.0))
    assert client.wait(earlier, timeout=120).state == "completed"
    job = client.submit(strict_job("ctl-a"))
    # Wait until the controller tracks the job (it has started and reports arrive).
    wait_for(lambda: status(capsys, deployment.address, job)["jobs"][0].get(
        "phase_difference") is not None)

    old = kill9(CONTROLLER_NAME)
    info = restarted(CONTROLLER_NAME, old)
    assert info["recovered"] is True
    # The same endpoints: the local managers reconnect by themselves.
    assert (info["report_endpoint"], info["command_endpoint"]) == (
        before["report_endpoint"], before["command_endpoint"])
    # The job is tracked again (from the global manager) and reports are applied again.
    wait_for(lambda: (ready_of(CONTROLLER_NAME) or {}).get("resumed", 0) >= 1)
    # (its counters started again at 0: applied reports are the new process's)
    st = wait_for(lambda: (s := status(capsys, deployment.address))["counters"][
        "controller"].get("reports_applied", 0) > 0 and s)
    assert st["controller"]["running"] is True and st["controller"]["error"] is None
    assert client.wait(job, timeout=120).state == "completed"
    # The controller closes the job (its summary is appended to the same phase log).
    log = Path(st["phase_log"])
    wait_for(lambda: any(
        r.get("job") == job and r["type"] == "summary"
        for r in map(json.loads, log.read_text().splitlines())))
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    # kept, not truncated
    assert any(r["type"] == "summary" and r["job"] == earlier for r in recs)
    code, out, err = run_cli(capsys, "status", "--address", deployment.address)
    assert code == 0 and job in out, err



def _running_process(capsys: Any, address: str, job: str) -> Any:
    """Subtask 0 of ``job`` once its command runs (status has its pid), else None."""
    proc = status(capsys, address, job)["jobs"][0]["subtasks"][0]
    return proc if proc.get("pid") and proc.get("state") == "running" else None


def _wait_running(capsys: Any, address: str, job: str) -> Any:
    """:func:`_running_process` once it is there; else fail with the job's state."""
    try:
        return wait_for(lambda: _running_process(capsys, address, job))
    except AssertionError:
        raise AssertionError(_why(status(capsys, address, job)["jobs"][0])) from None


def spin_until(go: Path) -> list[str]:
    """A command that uses the CPU it is given until the file ``go`` exists, then exits 0
    (it ends on the test's word, not after a guessed time)."""
    return ["python3", "-c",
            f"import os, time\nwhile not os.path.exists({str(go)!r}):\n"
            "    t = time.time()\n    while time.time() - t < 0.05: pass\n"]


def test_a_local_manager_restarts_resumes_its_node_and_keeps_its_processes(
    deployment: Any, capsys: Any, tmp_path: Path
) -> None:
    import coalloc
    from runtime.config import local_manager_name

    go = tmp_path / "go"
    client = coalloc.connect(deployment.address)
    job = client.submit(
        {"name": "lm-a", "qos": "strict", "overall_deviation": 100, "asynchrony": 50,
         "subtasks": [{"work": 5, "command": spin_until(go)}, {"work": 1000}]}
    )

    proc = _wait_running(capsys, deployment.address, job)
    pid, node = int(proc["pid"]), proc["node"]
    # Let them checkpoint a few boundaries, then kill -9 both managers of the gang: the
    # process subtask's and the synthetic sibling's.
    synthetic = wait_for(lambda: (s := status(capsys, deployment.address, job)["jobs"][0][
        "subtasks"][1]).get("done_work", 0) > 0 and s)
    # Both managers have checkpointed their subtask with some work done.
    wait_for(lambda: _checkpointed_pid(pid) and _checkpointed_work(job, 1) > 0)
    names = {local_manager_name(node): node, local_manager_name(synthetic["node"]): None}
    before = {name: ready_of(name) for name in names}
    done_before = status(capsys, deployment.address, job)["jobs"][0]["subtasks"][1][
        "done_work"]
    old = {name: kill9(name) for name in names}
    info = {name: restarted(name, old[name]) for name in names}
    for name in names:
        assert info[name]["restored"] >= 1
        assert info[name]["incarnation"] != before[name]["incarnation"]  # type: ignore[index]
    assert pid_alive(pid)  # re-attached, not killed, not started again
    sub = _wait_running(capsys, deployment.address, job)
    assert int(sub["pid"]) == pid
    # The synthetic sibling resumed from its checkpointed work, not from 0.
    after = status(capsys, deployment.address, job)["jobs"][0]["subtasks"][1]
    assert after["done_work"] >= 0.5 * done_before > 0

    go.touch()  # the command ends now, under its new manager
    final = to_json(client.wait(job, timeout=120))
    assert final["state"] == "completed", _why(final)
    assert all(s["state"] == "finished" for s in final["subtasks"])
    assert not pid_alive(pid)
    st = status(capsys, deployment.address)
    assert all(n["ready"] for n in st["nodes"])
    (n,) = [n for n in st["nodes"] if n["name"] == node]
    assert n["incarnation"] == info[local_manager_name(node)]["incarnation"]
    code, out, err = run_cli(capsys, "status", "--address", deployment.address, job)
    assert code == 0 and "completed" in out, err


def test_a_stalled_local_manager_resynchronises_instead_of_replaying(
    deployment: Any, capsys: Any
) -> None:
    """SIGSTOP of a running job's local manager for longer than ``stall_cycles`` (10
    cycles, 3 real s at the fixture's time scale), then SIGCONT: the manager counts a
    stall and resynchronises; it does not replay the missed cycles with the controller's
    weights of the moment (the paper's lagging subtask jumped from 4 % to 100 % so), and
    the job completes."""
    import coalloc
    from runtime.config import LOCAL_PREFIX

    client = coalloc.connect(deployment.address)
    job = client.submit(strict_job("stall-a"))

    def progress() -> dict[str, float]:
        (j,) = status(capsys, deployment.address, job)["jobs"]
        return {s["node"]: float(s.get("progress") or 0.0) for s in j["subtasks"]}

    wait_for(lambda: min(progress().values()) > 0.05)
    node = sorted(progress())[0]
    name = LOCAL_PREFIX + node
    info = ready_of(name)
    assert info is not None
    pid = int(info["pid"])
    before = progress()[node]
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(6.0)  # the fault itself lasts 6 real s (20 cycles); nothing is timed
    finally:
        os.kill(pid, signal.SIGCONT)
    counters = wait_for(lambda: status(capsys, deployment.address)["counters"][
        "local_managers"][node].get("stalls", 0) >= 1 and status(
            capsys, deployment.address)["counters"]["local_managers"][node])
    assert counters["skipped_cycles"] >= 10
    # Right after the stall the node has booked at most a few cycles more, not the
    # twenty it missed (each cycle is about 2 % of this job on an idle node).
    after = progress()[node]
    assert after - before < 0.5 * (20 * 0.02), (before, after)
    assert client.wait(job, timeout=120).state == "completed"


def test_a_reattached_command_that_fails_fails_its_job_with_its_exit_status(
    deployment: Any, capsys: Any, tmp_path: Path
) -> None:
    """kill -9 of the manager of a running command that then exits with status 3: the
    restarted manager re-attaches it (it is not the command's parent), reads the status
    its exit recorder wrote, and the subtask fails with it; policy on_failure ends the
    job ``failed`` (before, it ended ``finished``, "exit status unknown")."""
    import coalloc
    from runtime.config import local_manager_name

    go = tmp_path / "go"
    wait_then_fail = [
        "python3", "-c",
        f"import os, sys, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
        "sys.exit(3)",
    ]
    client = coalloc.connect(deployment.address)
    job = client.submit(
        {"name": "lm-fail", "qos": "strict", "overall_deviation": 100, "asynchrony": 50,
         "subtasks": [{"work": 5, "command": wait_then_fail}, {"work": 1000}]}
    )

    proc = _wait_running(capsys, deployment.address, job)
    pid, node = int(proc["pid"]), proc["node"]
    name = local_manager_name(node)
    # It is checkpointed at every boundary; wait for the record to name it.
    wait_for(lambda: _checkpointed_pid(pid))
    old = kill9(name)
    go.touch()  # it ends now: while its manager is down, or just after the restart
    info = restarted(name, old)
    assert info["restored"] >= 1
    final = to_json(client.wait(job, timeout=120))
    assert final["state"] == "failed", _why(final)
    assert [s.get("exit_code") for s in final["subtasks"]].count(3) == 1, final
    text = json.dumps(final)
    assert "exit status 3" in text and "re-attached" in text, final
    assert "exit status unknown" not in text
    assert not pid_alive(pid)


def _why(job: dict[str, Any]) -> str:
    """A job's state and reasons, and its subtasks', for an assertion message."""
    subs = [(s.get("state"), s.get("exit_code"), s.get("reason")) for s in job["subtasks"]]
    return f"{job.get('state')}: {job.get('reason')!r}; subtasks {subs}"


def _checkpoint_entries() -> Iterator[dict[str, Any]]:
    """The subtask entries of every local-manager checkpoint of this machine (files
    being rewritten or unreadable are skipped)."""
    from runtime.config import coalloc_home

    for path in (coalloc_home() / "runtime").glob("lm-*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        yield from data.get("subtasks", [])


def _checkpointed_work(run_id: str, index: int) -> float:
    """The work done (Mcycles) some local-manager checkpoint of this machine records for
    subtask ``index`` of ``run_id`` (0: none records it)."""
    for d in _checkpoint_entries():
        sub = d.get("subtask") or {}
        if sub.get("job_id") == run_id and sub.get("index") == index:
            return float(sub.get("done_work") or 0.0)
    return 0.0


def _checkpointed_pid(pid: int) -> bool:
    """Some local-manager checkpoint of this machine names ``pid`` as an executor's."""
    return any((d.get("executor") or {}).get("pid") == pid for d in _checkpoint_entries())
