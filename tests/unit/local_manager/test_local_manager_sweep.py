"""The sweep for subtask processes whose owner is gone (:mod:`local_manager.sweep`): what
it leaves alone (re-attached elsewhere, held for a restarting owner, kept) and the exit
status files it removes. No process is started: the process table is a fake."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import local_manager.sweep as sweep
from local_manager.proc_tree import OWNER_ENV, RESTART_FILE_ENV, TAG_ENV, stale_subtasks
from local_manager.sweep import REATTACH_WAIT_S
from tests.unit.local_manager.test_local_manager_process_executor import FakeTable


def test_stale_status_files_are_swept_but_kept_and_live_ones_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    table = FakeTable()
    table.put(30)
    table.envs[30] = {TAG_ENV: "live"}  # its recorder still runs
    monkeypatch.setattr(sweep, "PSUTIL", table)
    hours_ago = sweep.time.time() - 2 * sweep.STALE_STATUS_S
    files = {}
    for tag in ("live", "kept", "killed", "fresh", "old"):
        files[tag] = tmp_path / f"{tag}.exit"
        files[tag].write_text("{}")
        if tag != "fresh":
            os.utime(files[tag], (hours_ago, hours_ago))
    (tmp_path / "old.exit.owner").write_text("1")
    sweep._remove_stale_status_files(tmp_path, keep={"kept"}, killed={"killed"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.exit", "kept.exit", "live.exit"]


def test_a_subtask_reattached_by_a_live_owner_is_not_stale_to_others(tmp_path: Path) -> None:
    from local_manager.exit_recorder import status_path, write_owner

    table = FakeTable()
    table.put(10, created=555.0)  # the live owner that re-attached "adopted"
    for pid, tag in ((40, "adopted"), (41, "adopted"), (42, "orphan"), (43, "gone")):
        table.put(pid)
        table.envs[pid] = {OWNER_ENV: "9:100.000", TAG_ENV: tag}  # started by dead 9
    table.put(44)
    table.envs[44] = {OWNER_ENV: "9:100.000"}  # no tag: stale
    write_owner(status_path(tmp_path, "adopted"), "10:555.000")
    write_owner(status_path(tmp_path, "gone"), "11:100.000")  # that owner died too
    stale = stale_subtasks(table)
    assert stale == [40, 41, 42, 43, 44]
    assert sweep.adopted_elsewhere_removed(stale, tmp_path, table) == [42, 43, 44]
    assert sweep.adopted_elsewhere_removed(stale, None, table) == stale


def test_a_subtask_whose_owner_is_restarting_is_left_to_it_by_other_sweeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subtask's owner was SIGKILLed and Ray restarts it: until the restarted owner
    re-attaches it, a sweep by any other owner on the machine (another node's manager
    starting or closing, another deployment's) must not kill it. Its restart file holds
    it while that file exists, names its tag and was written within REATTACH_WAIT_S; the
    owner of that file decides alone (by ``keep_tags``)."""

    table = FakeTable()
    now = sweep.time.time()
    files = {}
    for name, names in (("held", "t-held"), ("old", "t-old"), ("dropped", "t-other"),
                        ("own", "t-own")):
        files[name] = tmp_path / f"lm-{name}.json"
        files[name].write_text(json.dumps({"subtasks": [{"executor": {"tag": names}}]}))
    long_ago = now - 2 * REATTACH_WAIT_S
    os.utime(files["old"], (long_ago, long_ago))  # its owner is not coming back
    started = {
        50: ("t-held", files["held"]),  # held for its restarting owner
        51: ("t-old", files["old"]),  # the file was not written for too long
        52: ("t-dropped", files["dropped"]),  # the file no longer names it
        53: ("t-gone", tmp_path / "lm-gone.json"),  # down removed the file
        54: ("t-own", files["own"]),  # the sweeping owner's own: keep_tags decide
    }
    for pid, (tag, path) in started.items():
        table.put(pid)
        table.envs[pid] = {OWNER_ENV: "9:100.000", TAG_ENV: tag, RESTART_FILE_ENV: str(path)}
    table.put(55)
    table.envs[55] = {OWNER_ENV: "9:100.000", TAG_ENV: "t-plain"}  # no restart file
    stale = stale_subtasks(table)
    assert stale == [50, 51, 52, 53, 54, 55]
    assert sweep.awaiting_reattach_removed(stale, files["own"], table, now) == [51, 52, 53, 54, 55]
    assert sweep.awaiting_reattach_removed(stale, None, table, now) == [51, 52, 53, 55]

    # The sweep itself (as a local manager's start or close runs it) spares it.
    reaped: list[list[int]] = []
    monkeypatch.setattr(sweep, "PSUTIL", table)
    monkeypatch.setattr(sweep, "_reap", lambda pids, root: reaped.append(sorted(pids)) or pids)
    sweep.reap_stale_subtasks(status_dir=tmp_path / "exit")
    assert reaped == [[51, 52, 53, 55]]
    files["held"].unlink()  # `coalloc down` removed it: nothing holds it any more
    sweep.reap_stale_subtasks(status_dir=tmp_path / "exit")
    assert reaped[-1] == [50, 51, 52, 53, 55]
