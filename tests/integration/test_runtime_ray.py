"""The live runtime through real components: a 3-node Ray cluster (the session fixture),
ZeroMQ sockets, real processes, the command line.

One deployment (``coalloc up --address`` of the fixture cluster) serves the tests in file
order; the last test takes it down and runs the one-shot ``coalloc run`` on emulated nodes.

Parity tolerance. With the synthetic executor every local manager steps on the same
model-time grid (whole multiples of the cycle), so the live run makes exactly the
simulator's decisions unless a message misses its slot: a report that reaches the
controller after the half cycle it waits, a command that reaches a node after that node's
next boundary. Each miss postpones one control action by one cycle. Admission and
placement must therefore be identical; the mean phase difference of each job may differ
by one cycle's worth of drift at most on average: ``|live - sim| <= 0.25 * sim + 2 s``
(a job's phase difference changes by at most a few seconds per cycle here; the term in
``sim`` absorbs a few late messages on a loaded 2-core machine). On an idle machine the
live figures equal the simulator's to about 1e-12 s.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from ntp_responder import NtpResponder
from support import cli_status as status
from support import idle_budgets, pid_alive, run_cli, wait_for

from coalloc import cli
from coallocator.messages import ProgressReport
from coallocator.wire import encode_report
from runtime.status import to_json

pytestmark = pytest.mark.ray

TIME_SCALE = 100.0
#: The speeds the session fixture gives its three Ray nodes (coalloc_mhz resources).
RAY_NODE_SPEEDS_MHZ = (300.0, 450.0, 600.0)








def write_jobs(path: Path, jobs: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(jobs))
    return path


@pytest.fixture(scope="module")
def deployment(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    import ray

    from runtime.config import GLOBAL_NAME
    from runtime.deploy import find_actor

    log = tmp_path_factory.mktemp("runtime") / "phase.jsonl"
    code = cli.main(
        ["up", "--address", ray_cluster.address, "--time-scale", str(TIME_SCALE),
         "--log", str(log)]
    )
    assert code == 0
    yield ray_cluster
    if find_actor(GLOBAL_NAME) is not None:
        cli.main(["down", "--address", ray_cluster.address])
    assert ray.is_initialized()


def test_one_local_manager_per_ray_node(deployment: Any, capsys: Any) -> None:
    import ray

    st = status(capsys, deployment.address)
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(alive) == 3
    assert {n["ray_node_id"] for n in st["nodes"]} == alive
    assert all(n["ready"] and not n["emulated"] for n in st["nodes"])
    # Speeds come from each Ray node's coalloc_mhz resource.
    assert sorted(n["speed_mhz"] for n in st["nodes"]) == sorted(RAY_NODE_SPEEDS_MHZ)
    # Each local manager really runs on its node (affinity), and all are distinct.
    from runtime.config import NAMESPACE, local_manager_name

    where = [
        ray.get(ray.get_actor(local_manager_name(n["name"]), namespace=NAMESPACE).ready.remote())
        for n in st["nodes"]
    ]
    assert [w["ray_node_id"] for w in where] == [n["ray_node_id"] for n in st["nodes"]]


def test_status_json_content(deployment: Any, capsys: Any) -> None:
    st = status(capsys, deployment.address)
    assert st["report_endpoint"].startswith("tcp://")
    assert st["counters"]["report_endpoint"] == st["report_endpoint"]
    assert st["policy"] == "sq" and st["time_scale"] == TIME_SCALE
    assert st["clock"]["quality"] == "local"
    assert set(st["counters"]["dropped"]) >= {"truncated", "bad_version", "bad_schema"}
    assert st["controller"]["running"] is True
    assert st["phase_log"].endswith("phase.jsonl")
    # Admission on the measured QoS capacity (sq): an idle node's budget is 1.05 x its
    # whole rate once the global manager has its first report (its QoS share's before).
    for n in idle_budgets(capsys, deployment.address)["nodes"]:
        assert n["budget"] == pytest.approx(1.05 * n["speed_mhz"] * n["cores"])
        assert {"reports_sent", "commands_applied", "late_starts"} <= set(n["counters"])
    # Model time advances with real time at the time scale: wait until it has advanced by
    # 0.4 real seconds' worth, then check the rate against the real time that passed
    # (at most ``real``: the first reading was taken before ``real0``, the last after).
    t0, real0 = st["model_time"], time.monotonic()

    def advanced() -> Any:
        real = time.monotonic() - real0
        advance = status(capsys, deployment.address)["model_time"] - t0
        return (advance, real) if advance >= 0.4 * TIME_SCALE else None

    advance, real = wait_for(advanced, timeout=30, every=0.05)
    assert advance >= 0.8 * TIME_SCALE * real


def test_strict_job_end_to_end_through_the_cli(
    deployment: Any, capsys: Any, tmp_path: Path
) -> None:
    job = {
        "name": "e2e", "qos": "strict", "overall_deviation": 40, "asynchrony": 15,
        "subtasks": [{"work": 12, "weight": 1}, {"work": 18, "weight": 2},
                     {"work": 15, "weight": 1.5}],
    }
    code, out, err = run_cli(
        capsys, "submit", str(write_jobs(tmp_path / "e2e.json", [job])),
        "--address", deployment.address,
    )
    assert code == 0, err
    job_id = out.split()[0]
    assert "admitted" in out
    import coalloc

    final = to_json(coalloc.connect(deployment.address).wait(job_id, timeout=90))
    assert final["state"] == "completed"
    assert all(s["state"] == "finished" for s in final["subtasks"])
    # The controller closes the job when its last report arrives (the global manager may
    # hear of the finish a moment earlier).
    st = wait_for(
        lambda: (s := status(capsys, deployment.address, job_id))["jobs"][0].get(
            "completion_skew") is not None and s
    )
    (j,) = st["jobs"]
    assert j["mean_phase_difference"] is not None
    assert all(s["progress"] == 1.0 for s in j["subtasks"])
    # The phase log has the job's period records (with the clock) and its summary.
    recs = [json.loads(x) for x in Path(st["phase_log"]).read_text().splitlines()]
    periods = [r for r in recs if r["job"] == job_id and r["type"] == "period"]
    assert periods and all(r["clock_quality"] == "local" for r in periods)
    assert all("clock_offset" in r for r in periods)
    (summary,) = [r for r in recs if r["job"] == job_id and r["type"] == "summary"]
    assert summary["completed"] is True
    code, out, _ = run_cli(capsys, "status", "--address", deployment.address, job_id)
    assert code == 0 and "completed" in out and job_id in out


def test_unknown_job_id_and_bad_file_are_one_line_errors(
    deployment: Any, capsys: Any, tmp_path: Path
) -> None:
    for argv in (["status", "j99999"], ["cancel", "j99999"]):
        code, out, err = run_cli(capsys, *argv, "--address", deployment.address)
        assert code == 2
        assert err == "coalloc: error: j99999: unknown job id\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nqos: loose\nsubtasks: [{work: -1}]\n")
    code, _, err = run_cli(capsys, "submit", str(bad), "--address", deployment.address)
    assert code == 2 and err.count("\n") == 1 and "subtasks[0].work" in err
    too_many = write_jobs(
        tmp_path / "wide.json",
        [{"name": "wide", "qos": "loose", "work": 10, "parallelism": 5}],
    )
    code, _, err = run_cli(capsys, "submit", str(too_many), "--address", deployment.address)
    assert code == 2 and "more subtasks than nodes" in err


def test_forged_reports_from_outside_the_runtime_are_refused(
    deployment: Any, capsys: Any
) -> None:
    """A foreign PUSH (plaintext, or CURVE with a key of its own) sends well-formed
    progress frames that would finish a running job's subtask with T_V = 1e7: the
    controller never receives them, counts the refused connections, and the job runs on
    untouched (its clock, its phase log)."""
    import zmq

    import coalloc
    from coallocator.security import CurveKeyPair

    client = coalloc.connect(deployment.address)
    job_id = client.submit(
        {"name": "long", "qos": "strict", "overall_deviation": 100, "asynchrony": 50,
         "subtasks": [{"work": 5000, "weight": 1}, {"work": 5000, "weight": 1}]}
    )
    before = status(capsys, deployment.address)
    assert before["security"]["mode"] == "curve"
    (job,) = [j for j in before["jobs"] if j["job_id"] == job_id]
    node = job["subtasks"][0]["node"]
    forged = [
        encode_report(ProgressReport(job_id, 0, node, 2**40, seq, before["model_time"] + 100.0,
                                     1e7, 1.0, 1.0, True))
        for seq in range(1, 50)
    ]
    ctx = zmq.Context()
    plain = ctx.socket(zmq.PUSH)
    stranger = ctx.socket(zmq.PUSH)
    for sock in (plain, stranger):
        sock.setsockopt(zmq.LINGER, 0)
    # The stranger knows the server's public key (it is no secret); its own key pair is
    # not one of the runtime's.
    own = CurveKeyPair.generate()
    stranger.curve_publickey = own.public
    stranger.curve_secretkey = own.secret
    stranger.curve_serverkey = before["security"]["server_public_key"].encode()
    plain.connect(before["report_endpoint"])
    stranger.connect(before["report_endpoint"])

    def refused() -> Any:
        for sock in (plain, stranger):
            for frame in forged[:5]:
                try:
                    sock.send(frame, zmq.NOBLOCK)
                except zmq.Again:
                    pass
        st = status(capsys, deployment.address, job_id)
        return st if st["counters"]["auth_failures"] - before["counters"]["auth_failures"] >= 2 \
            and "periods" in st["counters"].get("controller", {}) else None

    try:
        st = wait_for(refused, timeout=30, every=0.2)
    finally:
        plain.close()
        stranger.close()
        ctx.term()
    # A few control periods later the job is still as it was: nothing forged was applied.
    periods0 = st["counters"]["controller"]["periods"]

    def with_controller_view() -> Any:
        # Wait for two more control periods. On a loaded machine the status call may miss
        # the controller's answer (its view and counters are then absent): ask again,
        # boundedly, rather than read a partial status.
        st = status(capsys, deployment.address, job_id)
        periods = st["counters"].get("controller", {}).get("periods", periods0)
        return st if "controller_done" in st["jobs"][0]["subtasks"][0] \
            and periods - periods0 >= 2 else None

    try:
        st = wait_for(with_controller_view, timeout=30, every=0.5)
    except AssertionError:
        client.cancel(job_id)  # do not leave a long job to the next tests
        raise
    (j,) = st["jobs"]
    assert j["state"] == "running"
    sub0 = j["subtasks"][0]
    assert sub0["controller_done"] is False and sub0["controller_virtual_time"] < 1e6
    assert st["controller"]["running"] is True
    c0, c1 = before["counters"], st["counters"]
    assert c1["transport"]["received"] - c0["transport"]["received"] == (
        c1["controller"]["reports_received"] - c0["controller"]["reports_received"]
    )
    assert c1["dropped"] == c0["dropped"]  # nothing forged even reached the decoder
    assert st["security"]["auth_failures"] > 0
    assert st["security"]["refused"]["unknown_key"] > 0
    recs = [json.loads(x) for x in Path(st["phase_log"]).read_text().splitlines() if x]
    assert not [r for r in recs if r["job"] == job_id and r["type"] == "summary"]
    assert all(r["mean_virtual"] < 1e6 for r in recs
               if r["job"] == job_id and r["type"] == "period" and "mean_virtual" in r)
    code, out, _ = run_cli(capsys, "status", "--address", deployment.address)
    assert code == 0 and "CURVE" in out and "auth failures" in out
    assert client.cancel(job_id).state == "cancelled"


def test_sockets_listen_on_the_controllers_ray_address_only(
    deployment: Any, capsys: Any
) -> None:
    import psutil
    import ray

    from runtime.config import CONTROLLER_NAME, NAMESPACE

    ready = ray.get(ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE).ready.remote())
    ip = next(n["NodeManagerAddress"] for n in ray.nodes()
              if n["NodeID"] == ready["ray_node_id"])
    st = status(capsys, deployment.address)
    ports = {int(st["counters"][k].rsplit(":", 1)[1])
             for k in ("report_endpoint", "command_endpoint")}
    listening = [c for c in psutil.Process(ready["pid"]).net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port in ports]
    assert {c.laddr.port for c in listening} == ports
    assert {c.laddr.ip for c in listening} == {ip}
    assert ready["secure"] is True


def test_status_into_a_closed_pipe_ends_quietly(deployment: Any) -> None:
    """``coalloc status | head -1`` with the reader gone before the status is written:
    exit 141, no traceback."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "coalloc.cli", "status", "--address", deployment.address],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err



def test_process_executor_jobs(deployment: Any, capsys: Any, tmp_path: Path) -> None:
    import coalloc

    client = coalloc.connect(deployment.address)
    submitted = client.submit_all(
        [
            {"name": "short", "qos": "strict", "overall_deviation": 100, "asynchrony": 50,
             "subtasks": [{"work": 5, "weight": 1},
                          {"work": 5, "weight": 1,
                           "command": ["python3", "-c", "sum(i * i for i in range(10**5))"]}]},
            {"name": "fails", "qos": "loose",
             "subtasks": [{"work": 5, "command": ["python3", "-c", "raise SystemExit(3)"]}]},
            {"name": "missing", "qos": "best_effort",
             "subtasks": [{"work": 5, "command": ["coalloc-no-such-program"]}]},
            {"name": "spin", "qos": "strict", "overall_deviation": 100, "asynchrony": 50,
             "subtasks": [{"work": 5000, "weight": 1},
                          {"work": 5000, "weight": 1,
                           "command": ["python3", "-c", "while True: pass"]}]},
        ]
    )
    answers = [to_json(a) for a in submitted]
    assert all(a["admitted"] for a in answers), [(a["name"], a.get("reason")) for a in answers]
    short, fails, missing, spin = (a["job_id"] for a in answers)
    assert client.wait(short, timeout=60).state == "completed"
    rec = to_json(client.wait(fails, timeout=60))
    assert rec["state"] == "failed" and "status 3" in rec["reason"]
    rec = to_json(client.wait(missing, timeout=60))
    assert rec["state"] == "failed" and "coalloc-no-such-program" in rec["reason"]
    st = status(capsys, deployment.address, short)
    proc = st["jobs"][0]["subtasks"][1]
    assert proc["executor"] == "process" and proc["exit_code"] == 0

    def spinning() -> Any:
        sub = status(capsys, deployment.address, spin)["jobs"][0]["subtasks"][1]
        return sub if sub.get("pid") and (sub.get("cpu_s") or 0) > 0.05 else None

    sub = wait_for(spinning, timeout=30)
    pid = sub["pid"]
    assert pid_alive(pid)
    code, out, err = run_cli(capsys, "cancel", spin, "--address", deployment.address)
    assert code == 0 and "cancelled" in out, err
    wait_for(lambda: not pid_alive(pid), timeout=10)
    # Nothing of the subtask's process group is left.
    leftovers = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pid and fields[0] not in (b"Z", b"X"):
                leftovers.append(int(name))
    assert leftovers == []


def test_the_cli_answers_through_the_api_with_the_ray_paths_documents(
    deployment: Any, capsys: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``up`` recorded the API and its token (0600); the client uses it (no Ray call);
    ``status --json``, ``queue --json`` and a job's record are the documents the Ray
    path gives; the real service refuses a wrong token and a bad body and goes on."""
    import http.client
    import stat

    import coalloc
    from runtime.state import load_state, state_path

    state = load_state()
    assert state is not None and state.extra["api_url"].startswith("http://")
    assert stat.S_IMODE(state_path().stat().st_mode) == 0o600
    client = coalloc.connect(deployment.address)
    assert client.api is not None and client.api.url == state.extra["api_url"]
    long = {"name": "api-long", "qos": "strict", "overall_deviation": 100, "asynchrony": 50,
            "subtasks": [{"work": 5000, "weight": 1}, {"work": 5000, "weight": 1}]}
    job_id = client.submit(long)
    try:
        # Status shows a subtask's live fields from its node's reports (once a second):
        # compare the two paths once every subtask has been reported.
        wait_for(lambda: all(s["state"] == "running" for s in
                             status(capsys, deployment.address, job_id)["jobs"][0]["subtasks"]),
                 timeout=120)
        via_api = status(capsys, deployment.address, job_id)
        monkeypatch.setenv("COALLOC_TRANSPORT", "ray")
        assert coalloc.connect(deployment.address).api is None
        via_ray = status(capsys, deployment.address, job_id)
        code, out, _ = run_cli(capsys, "queue", "--json", "--address", deployment.address)
        queue_ray = json.loads(out[out.index("["):])
        monkeypatch.delenv("COALLOC_TRANSPORT")
        code, out, _ = run_cli(capsys, "queue", "--json", "--address", deployment.address)
        queue_api = json.loads(out[out.index("["):])

        def shape(doc: Any) -> Any:  # the keys at every level, and the values that hold
            if isinstance(doc, dict):
                return {k: shape(v) for k, v in doc.items()}
            if isinstance(doc, list):
                return [shape(v) for v in doc]
            return type(doc).__name__ if doc is not None else None

        for key in ("address", "policy", "report_endpoint", "phase_log", "security"):
            assert via_api[key] == via_ray[key], key
        assert via_api["jobs"][0]["job_id"] == job_id and via_api["jobs"][0]["state"] == "running"
        assert set(via_api) == set(via_ray)
        assert shape(via_api["jobs"][0]["subtasks"]) == shape(via_ray["jobs"][0]["subtasks"])
        assert [(q["job_id"], q["state"], q["nodes"]) for q in queue_api] == [
            (q["job_id"], q["state"], q["nodes"]) for q in queue_ray]
        assert set(queue_api[0]) == set(queue_ray[0])

        url = state.extra["api_url"].split("//", 1)[1]
        host, port = url.rsplit(":", 1)
        for headers, body, want in (({}, None, 401),
                                    ({"Authorization": "Bearer nope"}, None, 401),
                                    ({"Authorization": f"Bearer {state.extra['api_token']}"},
                                     b"{oops", 400)):
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            conn.request("POST" if body else "GET",
                         "/api/v1/jobs" if body else "/api/v1/status", body=body,
                         headers=headers)
            resp = conn.getresponse()
            doc = json.loads(resp.read())
            conn.close()
            assert resp.status == want and "\n" not in doc["error"]
        assert client.job(job_id).state == "running"  # still serving
    finally:
        client.cancel(job_id)


def test_bulk_cancel_by_ids_user_and_state(
    deployment: Any, capsys: Any, tmp_path: Path
) -> None:
    """``cancel A B``, ``--user``, ``--state``; an already-cancelled job says so; an
    unknown id is one error line, exit 2, after the others were cancelled."""
    import coalloc

    client = coalloc.connect(deployment.address)
    long = {"qos": "strict", "overall_deviation": 100, "asynchrony": 50,
            "subtasks": [{"work": 50000, "weight": 8}] * 3}
    # The first takes every node's budget (on idle nodes: the whole node); the others wait.
    idle_budgets(capsys, deployment.address)
    jobs = write_jobs(tmp_path / "bulk.json",
                      [dict(long, name=f"bulk{i}", user=u)
                       for i, u in enumerate(["carol", "carol", "dave", "carol"])])
    code, out, err = run_cli(capsys, "submit", str(jobs), "--address", deployment.address)
    assert code == 0, err
    ids = [line.split()[0] for line in out.splitlines() if line.startswith("j")]
    users = dict(zip(ids, ["carol", "carol", "dave", "carol"]))
    states = client.job_states(ids)
    assert sorted(states.values()) == ["pending", "pending", "pending", "running"], out
    try:
        code, out, err = run_cli(capsys, "cancel", "--user", "carol", "--state", "pending",
                                 "--address", deployment.address)
        assert code == 0, err
        assert out.splitlines() == [f"{j}  cancelled (was pending)" for j in ids
                                    if users[j] == "carol" and states[j] == "pending"]
        code, out, err = run_cli(capsys, "cancel", *ids, "j99999",
                                 "--address", deployment.address)
        assert code == 2 and err == "coalloc: error: j99999: unknown job id\n"
        assert out.splitlines() == [
            f"{j}  already cancelled; nothing to cancel"
            if users[j] == "carol" and states[j] == "pending"
            else f"{j}  cancelled (was {states[j]})" for j in ids]
        assert set(client.job_states(ids).values()) == {"cancelled"}
    finally:
        client.cancel_jobs(ids)


PARITY_JOBS: list[dict[str, Any]] = [
    {"name": "pa", "qos": "strict", "overall_deviation": 40, "asynchrony": 20,
     "subtasks": [{"work": 15, "weight": 1}, {"work": 22, "weight": 2},
                  {"work": 19, "weight": 1.5}]},
    {"name": "pb", "qos": "strict", "overall_deviation": 50, "asynchrony": 15,
     "subtasks": [{"work": 20, "weight": 2}, {"work": 10, "weight": 1}]},
    {"name": "pc", "qos": "strict", "overall_deviation": 30, "asynchrony": 10,
     "subtasks": [{"work": 12}, {"work": 12}, {"work": 12}]},
    {"name": "too-big", "qos": "strict", "overall_deviation": 10, "asynchrony": 10,
     "subtasks": [{"work": 100, "weight": 100}]},
]


def test_parity_with_the_simulator(deployment: Any, capsys: Any) -> None:
    import coalloc
    from global_manager.simulator import simulate
    from runtime.config import RuntimeConfig
    from workloads.model import Node, Workload
    from workloads.spec import parse_document

    client = coalloc.connect(deployment.address)
    # Wait for a quiet grid: the earlier tests' jobs are over.
    wait_for(lambda: all(s != "running" for s in client.job_states().values()), timeout=60)
    # ... and the global manager has heard every node's QoS capacity since: the
    # simulator starts from idle nodes.
    st = idle_budgets(capsys, deployment.address)
    assert all(n["committed"] == pytest.approx(0.0, abs=1e-6) for n in st["nodes"])
    nodes = tuple(Node(n["name"], n["speed_mhz"], n["cores"]) for n in st["nodes"])
    specs = parse_document(PARITY_JOBS, "parity")

    answers = [to_json(a) for a in client.submit_all(specs)]
    for a in answers:
        if a["admitted"]:
            assert client.wait(a["job_id"], timeout=120).state == "completed"
    admitted = {a["job_id"] for a in answers if a["admitted"]}

    def summaries() -> Any:
        # The records complete so far (a record ends with its newline), once every
        # admitted job's summary is among them.
        text = Path(st["phase_log"]).read_text()
        recs = [json.loads(x) for x in text.split("\n")[:-1] if x]
        live = {r["job"]: r for r in recs if r["type"] == "summary"}
        return live if admitted <= set(live) else None

    live = wait_for(summaries, timeout=30)  # the last summaries reach the log
    after = status(capsys, deployment.address)

    cfg = RuntimeConfig()
    result = simulate(Workload(nodes, tuple(specs)), cfg.get_policy(), 0, cfg.sim_config())
    assert [a["admitted"] for a in answers] == [j.admitted for j in result.jobs]
    assert [tuple(a["nodes"]) for a in answers] == [j.nodes for j in result.jobs]
    assert not answers[-1]["admitted"]

    assert after["phase_log"] == st["phase_log"]
    late = {n["name"]: (n["counters"]["late_cycles"], n["counters"]["late_starts"])
            for n in after["nodes"]}
    for a, sim in zip(answers, result.jobs):
        if not a["admitted"]:
            continue
        got = live[a["job_id"]]["mean_phase_difference"]
        want = sim.mean_phase_difference
        assert want is not None
        assert abs(got - want) <= 0.25 * want + 2.0, (a["name"], got, want, late)


def test_down_then_one_shot_run_on_emulated_nodes(
    deployment: Any, capsys: Any, tmp_path: Path
) -> None:
    import ray

    from runtime.config import CONTROLLER_NAME, GLOBAL_NAME
    from runtime.deploy import find_actor
    from runtime.state import load_state

    code, out, err = run_cli(capsys, "down")
    assert code == 0, err
    assert "removed 5 actors" in out
    assert find_actor(GLOBAL_NAME) is None and find_actor(CONTROLLER_NAME) is None
    assert load_state() is None
    # The cluster itself is untouched.
    assert sum(1 for n in ray.nodes() if n["Alive"]) == 3

    job = write_jobs(
        tmp_path / "one.json",
        [{"name": "two", "qos": "strict", "overall_deviation": 60, "asynchrony": 20,
          "duration": 300,
          "subtasks": [{"work": 45, "weight": 1, "labels": ["fast"]},
                       {"work": 72, "weight": 1.6}]}],
    )
    out_dir = tmp_path / "out"
    # Every actor's real clock is disciplined by a loopback NTP server 0.25 s ahead.
    with NtpResponder(offset_s=0.25).start() as ntp:
        code, out, err = run_cli(
            capsys, "run", str(job), "--address", deployment.address, "--nodes", "350:fast,500",
            "--no-progress", "--out", str(out_dir), "--timeout", "120",
            "--ntp-server", ntp.address,
        )
    assert code == 0, err
    assert "completed" in out
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["jobs"][0]["state"] == "completed"
    # The label from --nodes reached the global manager's nodes: without it the job would
    # be rejected (no node has the label fast); with it subtask 0 runs on n0.
    assert summary["jobs"][0]["nodes"][0] == "n0"
    st = json.loads((out_dir / "status.json").read_text())
    assert [n["speed_mhz"] for n in st["nodes"]] == [350.0, 500.0]
    assert [n["labels"] for n in st["nodes"]] == [["fast"], []]
    assert all(n["emulated"] for n in st["nodes"])
    assert st["clock"]["quality"] == "synced"
    # NTP's own bound: the offset it measures is within half the round trip of the true
    # one (a loaded machine delays the loopback replies by tens of milliseconds).
    clock = st["clock"]
    assert abs(clock["offset_s"] - 0.25) <= clock["delay_s"] / 2 + 0.01, clock
    recs = [json.loads(x) for x in (out_dir / "phase.jsonl").read_text().splitlines()]
    periods = [r for r in recs if r["type"] == "period"]
    assert periods and all(p["clock_quality"] == "synced" for p in periods)
    # The periods carry the offsets of the same clock: held to the same bound.
    bound = max(0.05, clock["delay_s"] / 2 + 0.01)
    assert all(abs(p["clock_offset"] - 0.25) <= bound for p in periods), (clock, periods[-1])
    assert find_actor(GLOBAL_NAME) is None  # run removed what it started
