"""Atomic file writes: old or new content, never torn; no temporary file left behind."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import wait_until

from workloads import atomic
from workloads.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text


def test_write_creates_and_replaces_with_private_mode(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    assert atomic_write_json(target, {"b": 1, "a": [1.5, "x"]}) == target
    assert target.read_text() == '{"a": [1.5, "x"], "b": 1}\n'
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    atomic_write_text(target, "second\n", mode=0o644)
    assert target.read_text() == "second\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_missing_directory_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no-such-dir/x\.json: parent directory does not exist"):
        atomic_write_bytes(tmp_path / "no-such-dir" / "x.json", b"{}")


def test_unserialisable_json_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old\n")
    with pytest.raises(TypeError):
        atomic_write_json(target, {"x": object()})
    with pytest.raises(ValueError):
        atomic_write_json(target, {"x": float("nan")})
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_failed_rename_keeps_the_old_content_and_removes_the_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "r.json"
    target.write_text("old\n")

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.integration
def test_a_writer_killed_at_any_moment_never_leaves_a_torn_file(tmp_path: Path) -> None:
    # A real process rewrites a 1 MB record in a loop, alternating two contents, and is
    # SIGKILLed while doing so: the file always holds one complete content.
    target = tmp_path / "state.json"
    writer = textwrap.dedent(
        """
        import sys
        from workloads.atomic import atomic_write_json
        target, n = sys.argv[1], 0
        while True:
            n += 1
            atomic_write_json(target, {"n": n, "pad": str(n % 2) * 1_000_000})
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", writer, str(target)])
    try:
        # Let it complete a few rewrites (the record numbers them).
        wait_until(lambda: target.exists() and json.loads(target.read_text())["n"] >= 3,
                   timeout=30.0, interval=0.01, message="three rewrites by the writer")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    record = json.loads(target.read_text())
    assert record["pad"] == str(record["n"] % 2) * 1_000_000
    # A temporary file may be left by the kill (that is the point of writing it aside),
    # but the target itself is whole.
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "state.json"]
    assert all(name.startswith(".state.json.") and name.endswith(".tmp") for name in leftovers)
