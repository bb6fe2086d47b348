"""``up`` and ``down`` at their edges: Ray's "N PYTHON worker processes have been
started" notice does not reach the user of ``coalloc up`` (every coalloc actor is a
worker process on purpose; other raylet messages still do), and ``down`` removes the
restart files an actor that did not answer left behind."""

from __future__ import annotations

import pytest

from runtime import deploy

ray = pytest.importorskip("ray")


def test_the_worker_pool_notice_is_dropped_and_other_messages_kept(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ray._private import worker as ray_worker

    monkeypatch.setattr(ray_worker, "print_to_stdstream", ray_worker.print_to_stdstream)
    deploy._quiet_worker_pool_warning()
    deploy._quiet_worker_pool_warning()  # idempotent: wrapped once
    assert ray_worker.print_to_stdstream.coalloc_filtered is True
    notice = ("WARNING: 66 PYTHON worker processes have been started on node: abc with "
              "address: 127.0.0.1. This could be a result of using a large number of actors")
    ray_worker.print_to_stdstream({"lines": [notice], "pid": "raylet", "is_err": False},
                                  ignore_prefix=False)
    assert notice not in capsys.readouterr().out
    other = "a node died: it is gone"
    ray_worker.print_to_stdstream(
        {"lines": [notice, other], "pid": "raylet", "is_err": False}, ignore_prefix=False)
    out = capsys.readouterr().out
    assert other in out and "worker processes have been started" not in out


def test_down_removes_the_restart_files_of_its_deployment_only(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a lost node's local manager could not remove itself goes too; another
    deployment's files (another epoch) and other files stay."""
    monkeypatch.setenv("COALLOC_HOME", str(tmp_path))
    mine = [deploy.runtime_file(k, 1700000000.25) for k in ("gm", "ctl", "lm-n0", "lm-n1")]
    other = deploy.runtime_file("lm-n0", 1700000999.0)
    aside = mine[0].with_name(mine[0].name + ".corrupt-1")
    for path in (*mine, other, aside):
        path.write_text("{}")
    removed = deploy.remove_restart_files(1700000000.25)
    assert sorted(removed) == sorted(mine)
    assert not any(p.exists() for p in mine) and other.exists() and aside.exists()
    assert deploy.remove_restart_files(1700000000.25) == []
