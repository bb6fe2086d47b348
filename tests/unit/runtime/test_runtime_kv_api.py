"""The key-value store over the global manager's HTTP API, from the members' side
(:mod:`coalloc.job`, ``coalloc kv``): real sockets, a real :class:`GlobalService` behind
the API. Only the run's own credential opens its store; limits, an ended run and a key
not set in time are one clear error; outside a subtask, the CLI says so (exit 2)."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator

import pytest

from coalloc import job
from coalloc.cli import main
from runtime.api import ApiServer
from runtime.rendezvous import KvAccess
from tests.unit.runtime.test_runtime_api import TOKEN, FakeBackend
from tests.unit.runtime.test_runtime_rendezvous import Recorder, _coupled, _service

#: Bound on how long a test waits for a thread (a hang guard, not a timing).
JOIN_S = 60.0


@pytest.fixture
def members() -> Iterator[tuple[dict[str, str], dict[str, str], ApiServer, object]]:
    """A running two-member job behind a real API: each member's environment."""
    gm, rec = _service()
    server = ApiServer(FakeBackend(), "127.0.0.1", 0, kv=gm, kv_secret=TOKEN)
    gm.kv_access = KvAccess(server.url, TOKEN)
    try:
        gm.submit([_coupled()])
        gm.place_pending()
        assert isinstance(rec, Recorder)
        envs = {s.index: dict(s.env) for s in rec.placed}
        yield envs[0], envs[1], server, gm
    finally:
        server.close()


def test_members_find_each_other(members: tuple) -> None:
    zero, one, _, _ = members
    got: list[str] = []
    waiter = threading.Thread(target=lambda: got.append(job.get("addr", 30, environ=one)))
    waiter.start()
    job.put("addr", "10.0.0.10:5000", environ=zero)
    waiter.join(JOIN_S)
    assert got == ["10.0.0.10:5000"]
    assert job.rank(one) == 1 and job.size(one) == 2 and job.attempt(one) == 1


def test_get_of_a_key_never_set_is_key_not_set(members: tuple) -> None:
    _, one, _, _ = members
    with pytest.raises(job.KeyNotSet, match="never: not set within 0 s"):
        job.get("never", timeout=0, environ=one)


def test_another_credential_is_refused(members: tuple) -> None:
    zero, _, server, _ = members
    wrong = {**zero, "COALLOC_KV_TOKEN": "0" * 64}
    with pytest.raises(job.KvError, match="refused this subtask's credential"):
        job.put("k", "v", environ=wrong)
    # The API's own token does not open a run's store either.
    with pytest.raises(job.KvError, match="refused"):
        job.put("k", "v", environ={**zero, "COALLOC_KV_TOKEN": TOKEN})
    # Nor does a run's credential open the rest of the API.
    conn = http.client.HTTPConnection(server.host, server.port, timeout=JOIN_S)
    conn.request("GET", "/api/v1/status",
                 headers={"Authorization": f"Bearer {zero['COALLOC_KV_TOKEN']}"})
    assert conn.getresponse().status == 401
    conn.close()


def test_limits_answer_with_a_clear_error(members: tuple) -> None:
    zero, _, _, _ = members
    with pytest.raises(job.KvError, match="only letters, digits"):
        job.put("a b", "v", environ=zero)
    with pytest.raises(job.KvError, match="65537 bytes, more than the 65536 byte limit"):
        job.put("big", "x" * 65537, environ=zero)
    with pytest.raises(job.KvError, match="must be text"):
        job.put("k", b"bytes", environ=zero)  # type: ignore[arg-type]


def test_an_ended_run_is_gone(members: tuple) -> None:
    zero, _, _, gm = members
    gm.cancel(zero["COALLOC_JOB_ID"])
    with pytest.raises(job.KvError, match="not running: its key-value store is gone"):
        job.put("k", "v", environ=zero)


def test_wait_parameter_is_checked(members: tuple) -> None:
    zero, _, server, _ = members
    conn = http.client.HTTPConnection(server.host, server.port, timeout=JOIN_S)
    conn.request("GET", f"/api/v1/kv/{zero['COALLOC_RUN']}/k?wait=soon",
                 headers={"Authorization": f"Bearer {zero['COALLOC_KV_TOKEN']}"})
    resp = conn.getresponse()
    assert resp.status == 400
    assert json.loads(resp.read())["error"] == "wait: expected seconds, got 'soon'"
    conn.close()


def test_outside_a_subtask_the_api_says_so() -> None:
    with pytest.raises(job.KvError, match="not inside a coalloc subtask"):
        job.put("k", "v", environ={})
    with pytest.raises(job.KvError, match="COALLOC_SUBTASK is not set"):
        job.rank({})
    assert not job.inside({})


def test_cli_outside_a_subtask(monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("COALLOC_KV_URL", "COALLOC_KV_TOKEN", "COALLOC_RUN"):
        monkeypatch.delenv(name, raising=False)
    assert main(["kv", "get", "addr", "--timeout", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("coalloc: error: not inside a coalloc subtask")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_put_and_get(members: tuple, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    zero, _, _, _ = members
    for name, value in zero.items():
        monkeypatch.setenv(name, value)
    assert main(["kv", "put", "addr", "node0:5000"]) == 0
    assert main(["kv", "get", "addr", "--timeout", "5"]) == 0
    assert capsys.readouterr().out == "node0:5000\n"
    assert main(["kv", "get", "missing", "--timeout", "0"]) == 1
    assert "missing: not set within 0 s" in capsys.readouterr().err
    assert main(["kv", "put", "bad key", "v"]) == 2
    assert "only letters" in capsys.readouterr().err
