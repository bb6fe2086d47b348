"""deploy/local-cluster.sh for real: a head and one worker on this machine.

Everything runs in subprocesses (the script, and a `python -c` that queries the
cluster), so this test never touches the session-wide Ray instance that other tests
hold in the pytest process. The cluster is stopped in `finally`, also on failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("ray") is None, reason="the ray CLI is not installed"),
]

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "local-cluster.sh"

QUERY = """
import json, logging, sys
import ray
ray.init(address=sys.argv[1], logging_level=logging.ERROR, log_to_driver=False)
print(json.dumps([
    {"alive": n["Alive"], "resources": n["Resources"]} for n in ray.nodes()
]))
"""


def session_members(leader: int) -> list[int]:
    """Live (non-zombie) processes in the session led by ``leader``."""
    out = subprocess.run(
        ["ps", "-eo", "pid=,sid=,stat="], capture_output=True, text=True, check=True
    ).stdout
    return [
        int(pid)
        for pid, sid, stat in (line.split(None, 2) for line in out.splitlines())
        if int(sid) == leader and not stat.startswith("Z")
    ]


@pytest.fixture
def cluster_dir() -> Iterator[Path]:
    # Short path under /tmp: Ray's unix socket paths live below it.
    path = Path(tempfile.mkdtemp(prefix="clx-", dir="/tmp"))
    env = dict(os.environ, COALLOC_CLUSTER_DIR=str(path))
    try:
        yield path
    finally:
        subprocess.run(
            ["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120
        )
        shutil.rmtree(path, ignore_errors=True)


def script(cluster_dir: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COALLOC_CLUSTER_DIR=str(cluster_dir), PYTHON=sys.executable)
    env.pop("RAY_ADDRESS", None)  # another suite's cluster must not leak in
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_local_cluster_start_query_stop(cluster_dir: Path) -> None:
    started = script(cluster_dir, "start", "1", "--mhz", "450,300", timeout=400)
    assert started.returncode == 0, started.stderr[-3000:]
    address = script(cluster_dir, "address").stdout.strip()
    state = (cluster_dir / "cluster.env").read_text()
    assert f"ADDRESS={address}" in state
    leaders = [int(entry.split(":")[1]) for entry in state.split('PIDS="')[1].split('"')[0].split()]
    assert len(leaders) == 2

    # A second start must refuse while the first cluster runs.
    again = script(cluster_dir, "start", "1")
    assert again.returncode == 2 and "already running" in again.stderr

    # Clients take the cluster's authentication mode from `env` (export lines).
    exports = dict(
        line.removeprefix("export ").split("=", 1)
        for line in script(cluster_dir, "env").stdout.splitlines()
    )
    assert exports["RAY_ADDRESS"] == address
    assert exports["RAY_AUTH_MODE"] in ("token", "disabled")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_AUTH_MODE"] = exports["RAY_AUTH_MODE"]
    query = subprocess.run(
        [sys.executable, "-c", QUERY, address],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert query.returncode == 0, query.stderr[-3000:]
    nodes = [n for n in json.loads(query.stdout.strip().splitlines()[-1]) if n["alive"]]
    assert len(nodes) == 2
    by_label = {
        label: (n["resources"]["CPU"], n["resources"]["coalloc_mhz"])
        for n in nodes
        for label in n["resources"]
        if label in ("coalloc_head", "coalloc_node_1")
    }
    assert by_label == {"coalloc_head": (1.0, 450.0), "coalloc_node_1": (2.0, 300.0)}

    status = script(cluster_dir, "status")
    assert status.returncode == 0 and address in status.stdout

    stopped = script(cluster_dir, "stop", timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert all(session_members(pid) == [] for pid in leaders)
    assert script(cluster_dir, "status").returncode == 3
