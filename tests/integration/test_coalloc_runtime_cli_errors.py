"""The live runtime's commands fail with one clear line and a non-zero exit, no traceback,
when there is no cluster, nothing to stop, or a bad job file (fresh ``coalloc``
processes, no Ray cluster anywhere)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from coalloc.client import resolve_address
from coalloc.errors import UserError

pytestmark = pytest.mark.integration


def coalloc(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["COALLOC_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "coalloc.cli", *argv],
        capture_output=True, text=True, env=env, timeout=120,
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("coalloc: error: ")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in proc.stderr


def test_no_cluster_reachable(tmp_path: Path) -> None:
    one_line_error(coalloc(tmp_path, "status"), "no coalloc cluster", "coalloc up")
    address = f"127.0.0.1:{closed_port()}"
    one_line_error(coalloc(tmp_path, "status", "--address", address), address, "no Ray cluster")
    one_line_error(coalloc(tmp_path, "cancel", "j00001", "--address", address), address)


def test_nothing_to_stop_and_bad_job_files(tmp_path: Path) -> None:
    one_line_error(coalloc(tmp_path, "down"), "nothing to stop")
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "qos": "strict", "subtasks": [{"work": 5}]}')
    # The file is checked before any cluster is contacted.
    one_line_error(coalloc(tmp_path, "submit", str(bad)), "overall_deviation", str(bad))
    one_line_error(coalloc(tmp_path, "run", str(bad)), "overall_deviation")
    one_line_error(coalloc(tmp_path, "run", str(tmp_path / "none.yaml")), "no such file")
    one_line_error(coalloc(tmp_path, "up", "--nodes", "300,x"), "--nodes: item 1")


def test_resolve_address_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.state import DeploymentState, save_state

    monkeypatch.setenv("COALLOC_HOME", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(UserError, match="no coalloc cluster"):
        resolve_address(None)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
    assert resolve_address(None) == "10.0.0.9:6379"
    save_state(DeploymentState(address="10.0.0.1:6379", embedded=False))
    assert resolve_address(None) == "10.0.0.1:6379"
    assert resolve_address("auto") == "auto"
