"""Through the real runtime on the session Ray cluster: a submission the client gave up on
(the global manager's process SIGSTOPped, so the request sits unanswered) exits 2 saying
it may still be applied and how to check; after SIGCONT, running the same ``coalloc
submit`` again resends the first attempt's token and gets the first attempt's job, so
exactly one job exists, whatever the timing. An answered submission leaves no record: the
same file submitted again afterwards is a new job."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from support import cli_status, deployed, run_cli, wait_for

from tests.integration.test_runtime_restarts import ready_of

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def deployment(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    log = tmp_path_factory.mktemp("retry") / "phase.jsonl"
    with deployed(ray_cluster.address, log, "--nodes", "300,300,300", "--time-scale", "100"):
        yield ray_cluster


def test_a_submission_without_an_answer_is_retried_without_a_duplicate(
    deployment: Any, capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runtime.config import GLOBAL_NAME
    from runtime.state import coalloc_home

    address = deployment.address
    name = f"once-{os.getpid()}"
    path = tmp_path / "once.json"
    path.write_text(json.dumps({"name": name, "qos": "strict", "overall_deviation": 120,
                                "asynchrony": 60, "subtasks": [{"work": 30, "weight": 1}] * 2}))
    info = ready_of(GLOBAL_NAME)
    assert info is not None
    pid = int(info["pid"])
    monkeypatch.setenv("COALLOC_API_TIMEOUT", "2")
    os.kill(pid, signal.SIGSTOP)
    try:
        code, out, err = run_cli(capsys, "submit", str(path), "--address", address)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert code == 2, (out, err)
    assert "not answering" in err and "may still be applied" in err, err
    assert "coalloc queue" in err and "no job is made twice" in err, err
    assert "Traceback" not in err
    ledger = coalloc_home() / "submissions"
    assert len(list(ledger.glob("*.json"))) == 1  # the unanswered submission's token

    monkeypatch.delenv("COALLOC_API_TIMEOUT")
    code, out, err = run_cli(capsys, "submit", str(path), "--address", address)
    assert code == 0, (out, err)
    assert "got no answer; sending it again with its token" in err, err
    job_id = out.split()[0]

    def named() -> list[str]:
        return [j["job_id"] for j in cli_status(capsys, address)["jobs"] if j["name"] == name]

    assert wait_for(named) == [job_id]
    assert not list(ledger.glob("*.json"))

    # Answered, so nothing is kept: the same file again is a second job, on purpose.
    code, out, err = run_cli(capsys, "submit", str(path), "--address", address)
    assert code == 0, (out, err)
    assert out.split()[0] != job_id and "sending it again" not in err
    assert sorted(named()) == sorted([job_id, out.split()[0]])
