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
    mine += [mine[0].with_name(mine[0].name + s) for s in ("-wal", "-shm")]  # the journal's
    other = deploy.runtime_file("lm-n0", 1700000999.0)
    aside = mine[0].with_name(mine[0].name + ".corrupt-1")
    for path in (*mine, other, aside):
        path.write_text("{}")
    removed = deploy.remove_restart_files(1700000000.25)
    assert sorted(removed) == sorted(mine)
    assert not any(p.exists() for p in mine) and other.exists() and aside.exists()
    assert deploy.remove_restart_files(1700000000.25) == []


class _GcsTimeout(Exception):
    """Stands for the GCS client's RpcError, the cause Ray wraps twice."""


def _ray_init_failure(message: str) -> ConnectionError:
    try:
        try:
            raise _GcsTimeout(message)
        except _GcsTimeout as rpc:
            raise RuntimeError("Failed to get node info for possible node ids") from rpc
    except RuntimeError as runtime:
        failure = ConnectionError("Failed to connect to Ray cluster at 192.0.2.2:52295")
        failure.__cause__ = runtime
        return failure


@pytest.mark.parametrize("fails, succeeds", [(1, True), (2, True), (3, False)])
def test_connect_ray_asks_again_when_ray_init_times_out_on_a_loaded_machine(
    monkeypatch: pytest.MonkeyPatch, fails: int, succeeds: bool
) -> None:
    """The GCS answered the probe; ray.init missed its own RPC deadline (what CI met on a
    loaded machine). Up to CONNECT_ATTEMPTS calls are made; after that the user gets one
    line naming the address."""
    assert deploy.CONNECT_ATTEMPTS == 3
    calls: list[str] = []

    def init(**kwargs: object) -> None:
        calls.append(str(kwargs["address"]))
        if len(calls) <= fails:
            raise _ray_init_failure("Timed out while waiting for GCS to become available.")

    class Context:
        gcs_address = "10.0.0.1:6379"

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # connect_ray leaves an explicit one
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: Context())
    monkeypatch.setattr(deploy, "gcs_problem", lambda address: None)
    if succeeds:
        assert deploy.connect_ray("10.0.0.1:6379", auth_mode="disabled") == "10.0.0.1:6379"
        assert calls == ["10.0.0.1:6379"] * (fails + 1)
    else:
        with pytest.raises(deploy.UserError, match=r"10\.0\.0\.1:6379: cannot connect"):
            deploy.connect_ray("10.0.0.1:6379", auth_mode="disabled")
        assert len(calls) == deploy.CONNECT_ATTEMPTS


def test_connect_ray_does_not_retry_a_failure_that_is_no_timeout(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def init(**kwargs: object) -> None:
        calls.append(str(kwargs["address"]))
        raise ConnectionError("version mismatch: the cluster runs Ray 2.0")

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # connect_ray leaves an explicit one
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(deploy, "gcs_problem", lambda address: None)
    with pytest.raises(deploy.UserError, match="version mismatch"):
        deploy.connect_ray("10.0.0.1:6379", auth_mode="disabled")
    assert len(calls) == 1
