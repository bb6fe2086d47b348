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


def test_huge_wide_and_hostile_job_files_are_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as f:  # 200 MiB, sparse
        f.truncate(200 * 2**20)
    one_line_error(coalloc(tmp_path, "submit", str(huge)), str(huge),
                   "larger than the 1024 KiB limit")
    one_line_error(coalloc(tmp_path, "run", str(huge)), "larger than the 1024 KiB limit")
    wide = tmp_path / "wide.json"
    wide.write_text('{"name": "w", "qos": "loose", "subtasks": [{"work": 1}, {"work": 1},'
                    ' {"work": 1}]}')
    one_line_error(coalloc(tmp_path, "run", str(wide), "--nodes", "300,400"),
                   "subtasks: more subtasks than nodes: 3 subtasks, 2 nodes")
    hostile = tmp_path / "hostile.json"
    hostile.write_text('{"name": "\\u001b[2J\\u001b[31mred\\nline\\u0000", "qos": "loose",'
                       ' "subtasks": [{"work": 1}]}')
    proc = coalloc(tmp_path, "submit", str(hostile))
    one_line_error(proc, "name: must not contain control characters (found '\\x1b'")
    assert "\x1b" not in proc.stderr and "\x00" not in proc.stderr
    alloc = tmp_path / "alloc.yaml"
    alloc.write_text('capacity: [9, 18]\nusers:\n  - {name: "A\\e[5m", demand: [1, 4]}\n')
    one_line_error(coalloc(tmp_path, "fair", str(alloc)),
                   "users[0].name: must not contain control characters")


def test_a_closed_stdout_pipe_ends_a_command_quietly(tmp_path: Path) -> None:
    """The reader of stdout is gone before the command writes: no BrokenPipeError
    traceback, nothing on stderr, exit status 141 (as a process killed by SIGPIPE)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "drf-paper.yaml"
    env = dict(os.environ, COALLOC_HOME=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "coalloc.cli", "fair", str(example)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # nobody will ever read
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == ""
    # The same through a shell pipeline (head may or may not exit before the write).
    shell = subprocess.run(
        ["bash", "-o", "pipefail", "-c",
         f"{sys.executable} -m coalloc.cli fair {example} --json | head -1"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert shell.returncode in (0, 141), shell.stderr
    assert shell.stdout.count("\n") == 1
    assert "Traceback" not in shell.stderr and "BrokenPipe" not in shell.stderr


REPO = Path(__file__).resolve().parents[2]
EXAMPLE_JOBS = str(REPO / "examples" / "jobs.json")


def one_stderr_line(proc: subprocess.CompletedProcess[str], address: str) -> str:
    """Exit status non-zero, exactly one non-empty stderr line, naming ``address``, no
    traceback (and none of Ray's own warnings)."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert len(lines) == 1, proc.stderr
    assert address in lines[0]
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.parametrize("how", ["--address", "state file", "RAY_ADDRESS"])
def test_every_runtime_command_with_the_head_gone_says_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A head that is gone (nothing listens at its GCS port), named on the command line,
    recorded by ``up`` in the state file, or in ``$RAY_ADDRESS``."""
    from runtime.state import DeploymentState, save_state, state_path

    monkeypatch.setenv("COALLOC_HOME", str(tmp_path))
    address = f"127.0.0.1:{closed_port()}"
    commands = [["status"], ["queue"], ["submit", EXAMPLE_JOBS], ["cancel", "j00001"]]
    if how != "RAY_ADDRESS":  # down removes only what it is told or what up recorded
        commands.append(["down"])
    for argv in commands:
        env: dict[str, str] = {}
        if how == "--address":
            argv = [*argv, "--address", address]
        elif how == "state file":
            save_state(DeploymentState(address=address, embedded=False))
        else:
            env["RAY_ADDRESS"] = address
        line = one_stderr_line(coalloc_env(tmp_path, env, *argv), address)
        assert "no Ray cluster reachable" in line
    if how == "state file":
        assert not state_path().exists()  # down forgot the deployment whose cluster is gone


def test_a_port_that_accepts_but_is_no_gcs_is_refused_in_bounded_time(tmp_path: Path) -> None:
    """Something accepts TCP connections at the address but no GCS answers (a stopped or
    wedged head, a reused port): ``ray.init`` would retry for minutes; the HTTP/2 probe
    refuses it after its answer timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)  # the kernel completes handshakes; nobody ever answers
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        for argv in (["status"], ["down"]):
            proc = coalloc_env(tmp_path, {}, *argv, "--address", address, timeout=60)
            line = one_stderr_line(proc, address)
            assert "nothing answered" in line


def coalloc_env(home: Path, extra: dict[str, str], *argv: str,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["COALLOC_HOME"] = str(home)
    env.update(extra)
    # cwd: python -m puts the working directory first on sys.path; run this tree's code.
    return subprocess.run([sys.executable, "-m", "coalloc.cli", *argv], cwd=REPO,
                          capture_output=True, text=True, env=env, timeout=timeout)


def test_up_forgets_a_recorded_head_whose_port_no_gcs_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coalloc.commands.up import _check_not_up
    from runtime.state import DeploymentState, save_state, state_path

    monkeypatch.setenv("COALLOC_HOME", str(tmp_path))
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        save_state(DeploymentState(address=address, embedded=False))
        _check_not_up()  # no "already up": the recorded cluster is gone
    assert not state_path().exists()
