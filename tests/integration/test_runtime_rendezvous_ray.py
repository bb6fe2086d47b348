"""The rendezvous through real components: a deployment on the shared 3-node Ray
cluster, real member processes on distinct nodes, real sockets. Members find each other
through their environment and the run's key-value store; a requeued gang is a new
attempt with a fresh store."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.rendezvous import MPI_WAIT_ENV
from runtime.status import to_json
from tests.support import deployed

pytestmark = pytest.mark.ray

MEMBER = Path(__file__).with_name("rendezvous_member.py")


@pytest.fixture(scope="module")
def deployment(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("rendezvous") / "phase.jsonl"
    with deployed(ray_cluster.address, log, "--time-scale", "100"):
        yield ray_cluster


def _members(mode: str, out: Path) -> list[dict[str, Any]]:
    command = [sys.executable, str(MEMBER), str(out), mode]
    return [{"work": 60, "command": command}, {"work": 60, "command": command}]


def _read(out: Path, index: int, attempt: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (out / f"member-{index}-attempt-{attempt}.json").read_text())
    return data


def test_two_members_find_each_other(deployment: Any, tmp_path: Path) -> None:
    import coalloc

    client = coalloc.connect(deployment.address)
    [answer] = [to_json(a) for a in client.submit_all([
        {"name": "pair", "qos": "best_effort", "env": {"FROM_JOB_FILE": "yes"},
         "subtasks": _members("connect", tmp_path)}])]
    assert answer["admitted"], answer
    job_id = answer["job_id"]
    rec = to_json(client.wait(job_id, timeout=180))
    assert rec["state"] == "completed", rec
    zero, one = _read(tmp_path, 0, 1), _read(tmp_path, 1, 1)
    assert zero["received"] == "hello from member 1"
    assert one["addr"] == f"{zero['MASTER_ADDR']}:{zero['MASTER_PORT']}"
    nodes = rec["nodes"]
    assert [zero["COALLOC_NODE"], one["COALLOC_NODE"]] == nodes and nodes[0] != nodes[1]
    for i, m in enumerate((zero, one)):
        assert m["COALLOC_JOB_ID"] == job_id and m["COALLOC_RUN"] == job_id
        assert (m["COALLOC_SUBTASK"], m["RANK"]) == (str(i), str(i))
        assert (m["COALLOC_SUBTASKS"], m["WORLD_SIZE"], m["LOCAL_RANK"]) == ("2", "2", "0")
        assert m["COALLOC_ATTEMPT"] == "1" and m["has_token"]
        assert m["FROM_JOB_FILE"] == "yes"
        assert all(m[name] == value for name, value in MPI_WAIT_ENV)
        assert m["MASTER_ADDR"] == zero["MASTER_ADDR"]
    # The credential is in no document the API serves about the job.
    status = json.dumps(to_json(client.status(job_id)))
    assert "COALLOC_KV_TOKEN" not in status and job_id in status


def test_a_requeued_gang_gets_a_fresh_store_and_attempt(
    deployment: Any, tmp_path: Path
) -> None:
    import coalloc

    client = coalloc.connect(deployment.address)
    [answer] = [to_json(a) for a in client.submit_all([
        {"name": "requeued", "qos": "best_effort", "on_failure": "requeue",
         "max_attempts": 2, "subtasks": _members("requeue", tmp_path)}])]
    job_id = answer["job_id"]
    rec = to_json(client.wait(job_id, timeout=240))
    assert rec["state"] == "completed", rec
    assert rec["attempt"] == 2
    first = _read(tmp_path, 1, 1)
    assert first["stale"] == "from attempt 1" and first["COALLOC_RUN"] == job_id
    zero, one = _read(tmp_path, 0, 2), _read(tmp_path, 1, 2)
    assert one["stale"] is None  # the second run's store started empty
    assert zero["done"] == "yes"
    assert zero["COALLOC_ATTEMPT"] == one["COALLOC_ATTEMPT"] == "2"
    assert zero["COALLOC_RUN"] == one["COALLOC_RUN"] != job_id
    # Attempt 1's member 0 was still waiting when its run ended: stopped, it wrote nothing.
    assert not (tmp_path / "member-0-attempt-1.json").exists()


def test_a_muscle3_model_runs_to_completion(deployment: Any, capsys: Any) -> None:
    """examples/muscle3.yaml: MUSCLE3's manager as subtask 0, a macro and a micro
    component as subtasks 1 and 2, meeting through the rendezvous (paths made absolute:
    the members run in their local manager's directory)."""
    pytest.importorskip("libmuscle")
    import yaml

    import coalloc
    from runtime.state import coalloc_home

    root = Path(__file__).parents[2]
    spec = yaml.safe_load((root / "examples" / "muscle3.yaml").read_text())
    for sub in spec["subtasks"]:
        sub["command"] = [str(root / a) if a.startswith("examples/") else
                          a.replace('"examples/', f'"{root}/examples/') for a in sub["command"]]
    client = coalloc.connect(deployment.address)
    [answer] = [to_json(a) for a in client.submit_all([spec])]
    job_id = answer["job_id"]
    rec = to_json(client.wait(job_id, timeout=240))
    logs = coalloc_home() / "logs" / "subtasks"
    manager = (logs / f"{job_id}-0.log").read_text()
    assert rec["state"] == "completed", (rec, manager)
    assert "Simulation completed successfully." in manager
    assert "macro: 5 steps done, value 1.968750" in (logs / f"{job_id}-1.log").read_text()
    assert "micro: 5 runs" in (logs / f"{job_id}-2.log").read_text()


def test_the_example_runs_with_coalloc_run(deployment: Any, tmp_path: Path, capsys: Any) -> None:
    """``coalloc run examples/rendezvous.yaml`` (on the fixture cluster, after ``down``):
    a Python member and a shell member meet through ``coalloc.job`` and ``coalloc kv``."""
    from support import run_cli

    from runtime.state import coalloc_home

    code, out, err = run_cli(capsys, "down", "--address", deployment.address)
    assert code == 0, err
    example = Path(__file__).parents[2] / "examples" / "rendezvous.yaml"
    code, out, err = run_cli(capsys, "run", str(example), "--address", deployment.address,
                             "--no-progress", "--out", str(tmp_path), "--timeout", "120")
    assert code == 0, (out, err)
    [job] = json.loads((tmp_path / "summary.json").read_text())["jobs"]
    assert job["state"] == "completed", job
    log = coalloc_home() / "logs" / "subtasks" / f"{job['job_id']}-0.log"
    assert "hello from member 1 of 2 (attempt 1)" in log.read_text()
