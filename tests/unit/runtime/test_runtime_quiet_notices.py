"""Ray's "N PYTHON worker processes have been started" notice does not reach the user of
``coalloc up`` (every coalloc actor is a worker process on purpose); other raylet
messages still do."""

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
