"""The exit recorder (local_manager.exit_recorder) run for real as the executor runs it:
it ends as its command did and leaves the command's exit status in its status file,
written atomically."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from local_manager import exit_recorder
from local_manager.exit_recorder import (
    OWNER_ENV,
    SCRIPT,
    describe,
    read_status,
    remove_status,
    status_path,
    write_owner,
    write_status,
)


def recorder(status: Path, *argv: str) -> list[str]:
    return [sys.executable, "-I", "-S", SCRIPT, str(status), "--", *argv]


def env_without_owner() -> dict[str, str]:
    env = dict(os.environ)
    env.pop(OWNER_ENV, None)
    return env


def run(status: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        recorder(status, sys.executable, "-c", code),
        capture_output=True, text=True, timeout=60, env=env_without_owner(),
    )


def only_the_status_file(directory: Path, status: Path) -> None:
    """Written by rename: no temporary file is left next to it."""
    assert sorted(directory.iterdir()) == [status]


@pytest.mark.parametrize("code", [0, 3, 255])
def test_an_exit_status_is_recorded_and_passed_on(tmp_path: Path, code: int) -> None:
    status = tmp_path / "t1.exit"
    done = run(status, f"import sys; print('out'); sys.exit({code})")
    assert done.returncode == code
    assert done.stdout == "out\n"  # the command's stdio is the recorder's
    doc = json.loads(status.read_text())
    assert doc["version"] == 1 and doc["status"] == code and doc["pid"] > 0
    assert doc["pid"] != os.getpid()
    assert read_status(status) == code
    only_the_status_file(tmp_path, status)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_command_killed_by_a_signal_is_recorded_and_the_recorder_dies_of_it(
    tmp_path: Path, sig: signal.Signals
) -> None:
    status = tmp_path / "t2.exit"
    done = run(status, f"import os; os.kill(os.getpid(), {int(sig)})")
    assert done.returncode == -sig  # the same signal, re-raised on itself
    assert read_status(status) == -sig
    assert describe(-sig) == f"killed by signal {int(sig)} ({sig.name})"
    only_the_status_file(tmp_path, status)


def test_the_command_is_its_child_in_its_process_group_and_session(tmp_path: Path) -> None:
    status = tmp_path / "t3.exit"
    code = "import os; print(os.getppid(), os.getpgrp(), os.getsid(0))"
    proc = subprocess.Popen(
        recorder(status, sys.executable, "-c", code),
        stdout=subprocess.PIPE, text=True, start_new_session=True, env=env_without_owner(),
    )
    out, _ = proc.communicate(timeout=60)
    assert [int(x) for x in out.split()] == [proc.pid, proc.pid, proc.pid]
    assert proc.returncode == 0 and read_status(status) == 0


def test_a_signal_sent_to_the_recorder_alone_is_forwarded(tmp_path: Path) -> None:
    status = tmp_path / "t4.exit"
    code = "import sys, time; print('ready', flush=True); time.sleep(60)"
    proc = subprocess.Popen(
        recorder(status, sys.executable, "-c", code),
        stdout=subprocess.PIPE, text=True, start_new_session=True, env=env_without_owner(),
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)  # to the recorder only, not to its group
    assert proc.wait(timeout=60) == -signal.SIGTERM
    assert read_status(status) == -signal.SIGTERM


def test_a_signal_from_the_owner_is_not_forwarded(tmp_path: Path) -> None:
    # The owner signals the whole group: forwarding would give the command a second one.
    # Here the owner (this test, named in the owner file) signals the recorder alone with
    # SIGINT and SIGUSR1: the command must get neither. Then someone else sends SIGTERM,
    # which is forwarded and ends the command with status 4. The recorder takes pending
    # signals lowest number first, so the owner's two (sent before) come before SIGTERM.
    status = tmp_path / "t5.exit"
    write_owner(status, f"{os.getpid()}:0.000")
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(4))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        recorder(status, sys.executable, "-c", code), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True, env=env_without_owner(),
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGINT)  # forwarded, it would be a KeyboardInterrupt (1)
    proc.send_signal(signal.SIGUSR1)  # forwarded, it would kill the command (-10)
    subprocess.run(["kill", "-TERM", str(proc.pid)], check=True, timeout=60)
    assert proc.wait(timeout=60) == 4
    assert read_status(status) == 4


def test_an_executable_that_cannot_be_run_is_exit_status_127(tmp_path: Path) -> None:
    status = tmp_path / "t6.exit"
    done = subprocess.run(
        recorder(status, str(tmp_path / "missing")), capture_output=True, text=True,
        timeout=60, env=env_without_owner(),
    )
    assert done.returncode == 127 and "No such file" in done.stderr
    assert read_status(status) == 127


def test_usage_errors() -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-S", SCRIPT, "status-only"], capture_output=True, text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "usage" in done.stderr


def test_a_status_file_is_replaced_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    status = status_path(tmp_path, "abc")
    assert status == tmp_path / "abc.exit"
    write_status(status, 10, 0)

    def crash(*_: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(exit_recorder.os, "replace", crash)
    with pytest.raises(OSError):
        write_status(status, 10, 3)
    assert read_status(status) == 0  # the old content, whole
    only_the_status_file(tmp_path, status)  # the temporary file was removed


@pytest.mark.parametrize(
    "content",
    ["", "{", "[]", '{"version": 2, "status": 1}', '{"version": 1, "status": true}',
     '{"version": 1}'],
)
def test_an_unreadable_status_file_is_no_status(tmp_path: Path, content: str) -> None:
    status = tmp_path / "x.exit"
    status.write_text(content)
    assert read_status(status) is None
    assert read_status(tmp_path / "missing.exit") is None


def test_remove_status_removes_the_owner_file_too(tmp_path: Path) -> None:
    status = tmp_path / "y.exit"
    write_status(status, 1, 0)
    write_owner(status, "1:0.000")
    remove_status(status)
    remove_status(status)  # idempotent
    assert list(tmp_path.iterdir()) == []


def test_the_default_directory_is_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(exit_recorder.STATUS_DIR_ENV, str(tmp_path / "exit"))
    d = exit_recorder.default_status_dir()
    assert d == tmp_path / "exit" and (d.stat().st_mode & 0o777) == 0o700
    d.chmod(0o777)
    with pytest.raises(OSError, match="writable by others"):
        exit_recorder.default_status_dir()
