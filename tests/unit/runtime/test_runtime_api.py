"""The global manager's HTTP/JSON API (:mod:`runtime.api`) and its client
(:mod:`coalloc.api_client`), without Ray: a real server on loopback over a fake backend.

Every request without the right token is 401; a malformed body is 400 with one line;
the routes return the backend's documents as they are (NaN as null); the server keeps
serving after every refusal and after a backend failure."""

from __future__ import annotations

import http.client
import json
import math
import socket
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from coalloc.api_client import HttpApi
from coalloc.client import Client
from coalloc.errors import UserError
from runtime.api import MAX_BODY_BYTES, ApiServer, BadRequest, strict_json
from runtime.identity import Identity, Refusal, Role
from runtime.status import (
    ControllerSummary,
    JobRecord,
    QueueRow,
    SecurityStatus,
    StatusCounters,
    StatusDocument,
)
from workloads.errors import UserError as CoreUserError
from workloads.model import JobPhase, QosClass

TOKEN = "s3cret-token"


class FakeBackend:
    """Records calls; answers like the global manager actor; ``token`` is an admin's
    credential, the only one it knows."""

    def __init__(self, token: str = TOKEN) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.fail = False
        self.token = token

    def authenticate(self, token: str | None) -> Identity | Refusal:
        if not token:
            return Refusal.MISSING
        return Identity("admin", Role.ADMIN) if token == self.token else Refusal.UNKNOWN

    def job_owners(self, job_ids: list[str]) -> dict[str, str]:
        return {}

    def deployment(self) -> dict[str, Any]:
        self.calls.append(("deployment", ()))
        return {"n_nodes": 3, "nodes": ["n0", "n1", "n2"]}

    def status(self, job_id: str | None = None, all_jobs: bool = False) -> dict[str, Any]:
        self.calls.append(("status", (job_id, all_jobs)))
        if self.fail:
            raise RuntimeError("boom")
        jobs = [{"job_id": "j00001", "phase_difference": math.nan}]
        return {"jobs": [j for j in jobs if job_id in (None, j["job_id"])], "model_time": 1.5}

    def queue(self) -> list[dict[str, Any]]:
        self.calls.append(("queue", ()))
        return [{"job_id": "j00001", "state": "pending", "wait": math.inf}]

    def job(self, job_id: str) -> dict[str, Any] | None:
        self.calls.append(("job", (job_id,)))
        return {"job_id": job_id, "state": "running"} if job_id == "j00001" else None

    def job_states(self, job_ids: list[str] | None = None) -> dict[str, str]:
        self.calls.append(("job_states", (job_ids,)))
        states = {"j00001": "running", "j00002": "pending"}
        return {j: s for j, s in states.items() if job_ids is None or j in job_ids}

    def submit_documents(
        self, jobs: list[Mapping[str, Any]], token: str | None, who: Identity
    ) -> list[dict[str, Any]]:
        self.calls.append(("submit", (jobs, token)))
        if jobs[0].get("name") == "bad":
            raise CoreUserError("request: jobs[0].subtasks[0].work: must be >= 0")
        return [{"job_id": f"j{i:05d}", "admitted": True, "pending": False, "reason": ""}
                for i, _ in enumerate(jobs, start=1)]

    def submit_file(
        self, text: str, source: str, token: str | None, who: Identity
    ) -> list[dict[str, Any]]:
        """As the global manager: the text checked as the file ``source``."""
        from workloads.spec import load_jobs_text

        self.calls.append(("submit_file", (text, source, who.name, token)))
        specs = load_jobs_text(text, source, 3, default_user=who.name)
        return [{"job_id": f"j{i:05d}", "admitted": True, "pending": False, "reason": "",
                 "user": s.user} for i, s in enumerate(specs, start=1)]

    def cancel_jobs(
        self, job_ids: list[str] | None, user: str | None, state: str | None
    ) -> list[dict[str, Any]]:
        self.calls.append(("cancel_jobs", (job_ids, user, state)))
        return [{"job_id": j, "result": "cancelled" if j == "j00001" else "unknown job id",
                 "was": "running", "state": "cancelled"} for j in job_ids or ["j00001"]]


def _job(job_id: str, state: str) -> JobRecord:
    return JobRecord(job_id=job_id, name="a", qos=QosClass.BEST_EFFORT, user="u", priority=0,
                     state=JobPhase(state), reason="", submitted_at=0.0, run_id=job_id)


class TypedBackend(FakeBackend):
    """:class:`FakeBackend`'s answers as the global manager's documents
    (:mod:`runtime.status`), every field a client parses set."""

    def status(self, job_id: str | None = None, all_jobs: bool = False) -> Any:
        doc = super().status(job_id, all_jobs)
        counters = StatusCounters(report_endpoint=None, command_endpoint=None, controller={},
                                  transport={}, commands_transport={}, dropped={},
                                  auth_failures=None, local_managers={})
        return StatusDocument(
            address=None, policy="sq", queue="wait", journal_error=None, global_counters={},
            time_scale=1.0, cycle=10.0, control_period=1.0, model_time=doc["model_time"],
            phase_log=None, report_endpoint=None, security=SecurityStatus(mode="curve"),
            clock=None, controller=ControllerSummary(running=True, error=None,
                                                     period_time=None),
            counters=counters, nodes=[],
            jobs=[_job(j["job_id"], "running").model_copy(update=j) for j in doc["jobs"]])

    def queue(self) -> Any:
        return [QueueRow.model_validate(dict(
            _job(r["job_id"], r["state"]).model_dump(), nodes=[], attempt=1,
            pending_reasons=None, estimated_start=None, estimated_start_time=None, **r))
            for r in super().queue()]

    def job(self, job_id: str) -> Any:
        rec = super().job(job_id)
        return None if rec is None else _job(rec["job_id"], rec["state"])

    def submit_documents(self, jobs: list[Mapping[str, Any]], token: str | None,
                         who: Identity) -> Any:
        return [dict(a, name="a") for a in super().submit_documents(jobs, token, who)]

    def submit_file(self, text: str, source: str, token: str | None, who: Identity) -> Any:
        return [dict(a, name="a") for a in super().submit_file(text, source, token, who)]


@pytest.fixture
def served() -> Iterator[tuple[ApiServer, FakeBackend]]:
    backend = FakeBackend()
    server = ApiServer(backend, "127.0.0.1", 0)
    try:
        yield server, backend
    finally:
        server.close()


def raw(server: ApiServer, method: str, path: str, body: bytes | None = None,
        token: str | None = TOKEN, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if data else None
    finally:
        conn.close()


@pytest.fixture
def typed() -> Iterator[tuple[ApiServer, FakeBackend]]:
    backend = TypedBackend()
    server = ApiServer(backend, "127.0.0.1", 0)
    try:
        yield server, backend
    finally:
        server.close()


def api(server: ApiServer, **kw: Any) -> HttpApi:
    return HttpApi(server.url, TOKEN, "127.0.0.1:1", **kw)


@pytest.mark.parametrize("token", [None, "", "wrong", TOKEN + "x", TOKEN[:-1]])
def test_requests_without_the_right_token_are_refused(
    served: tuple[ApiServer, FakeBackend], token: str | None
) -> None:
    server, backend = served
    for method, path, body in (("GET", "/api/v1/status", None),
                               ("POST", "/api/v1/cancel", b'{"job_ids": ["j00001"]}')):
        status, doc = raw(server, method, path, body, token=token)
        assert status == 401 and doc["error"].split(":")[0] in (
            "no credential", "unknown credential")
    assert backend.calls == []  # nothing reached the global manager
    # ... and the server still serves the right token.
    assert raw(server, "GET", "/api/v1/queue")[0] == 200


def test_the_token_may_come_as_a_query_parameter(served: tuple[ApiServer, FakeBackend]) -> None:
    server, _ = served
    assert raw(server, "GET", f"/api/v1/queue?token={TOKEN}", token=None)[0] == 200
    assert raw(server, "GET", "/api/v1/queue?token=nope", token=None)[0] == 401


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"", "body: empty"),
        (b"{not json", "body: not JSON"),
        (b"\xff\xfe", "body: not JSON"),
        (b"[1, 2]", "body: expected a JSON object"),
        (b'{"jobs": []}', "jobs: expected a non-empty list"),
        (b'{"jobs": [1]}', "jobs: expected a non-empty list"),
        (b'{"jobs": [{"name": "a"}], "token": 7}', "token: expected a string"),
        (b'{"jobs": [{"name": "bad"}]}', "jobs[0].subtasks[0].work: must be >= 0"),
    ],
)
def test_a_malformed_submission_is_400_with_one_line(
    served: tuple[ApiServer, FakeBackend], body: bytes, needle: str
) -> None:
    server, _ = served
    status, doc = raw(server, "POST", "/api/v1/jobs", body)
    assert status == 400
    assert needle in doc["error"] and "\n" not in doc["error"]
    assert raw(server, "GET", "/api/v1/queue")[0] == 200  # still serving


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"{}", "give job_ids, user or state"),
        (b'{"job_ids": "j00001"}', "job_ids: expected a list of strings"),
        (b'{"job_ids": [1]}', "job_ids: expected a list of strings"),
        (b'{"state": "completed"}', "state: expected one of pending, running"),
        (b'{"user": ["a"]}', "user: expected a string"),
    ],
)
def test_a_malformed_cancel_is_400_with_one_line(
    served: tuple[ApiServer, FakeBackend], body: bytes, needle: str
) -> None:
    server, backend = served
    status, doc = raw(server, "POST", "/api/v1/cancel", body)
    assert status == 400 and needle in doc["error"]
    assert not [c for c in backend.calls if c[0] == "cancel_jobs"]


def test_an_oversized_body_is_refused_before_it_is_read(
    served: tuple[ApiServer, FakeBackend],
) -> None:
    server, _ = served
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.putrequest("POST", "/api/v1/jobs")
    conn.putheader("Authorization", f"Bearer {TOKEN}")
    conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 413 and "byte limit" in json.loads(resp.read())["error"]
    conn.close()
    assert raw(server, "GET", "/api/v1/queue")[0] == 200


def test_routes_return_the_backends_documents(served: tuple[ApiServer, FakeBackend]) -> None:
    server, backend = served
    assert raw(server, "GET", "/api/v1/deployment")[1]["n_nodes"] == 3
    # JSON has no NaN or infinity: null.
    assert raw(server, "GET", "/api/v1/status") == (
        200, {"jobs": [{"job_id": "j00001", "phase_difference": None}], "model_time": 1.5})
    assert raw(server, "GET", "/api/v1/status?job=j00009")[1]["jobs"] == []
    assert ("status", ("j00009", False)) in backend.calls
    assert raw(server, "GET", "/api/v1/status?all=1")[0] == 200
    assert backend.calls[-1] == ("status", (None, True))  # status --all
    assert raw(server, "GET", "/api/v1/queue")[1][0]["wait"] is None
    assert raw(server, "GET", "/api/v1/jobs")[1] == {"j00001": "running", "j00002": "pending"}
    assert raw(server, "GET", "/api/v1/jobs?id=j00002&id=j00009")[1] == {"j00002": "pending"}
    assert raw(server, "GET", "/api/v1/jobs/j00001") == (
        200, {"job_id": "j00001", "state": "running"})
    assert raw(server, "GET", "/api/v1/jobs/j00009") == (
        404, {"error": "j00009: unknown job id"})
    status, doc = raw(server, "POST", "/api/v1/jobs",
                      b'{"jobs": [{"name": "a"}, {"name": "b"}], "token": "t1"}')
    assert status == 200 and [a["job_id"] for a in doc] == ["j00001", "j00002"]
    assert backend.calls[-1] == ("submit", ([{"name": "a"}, {"name": "b"}], "t1"))
    status, doc = raw(server, "POST", "/api/v1/cancel",
                      b'{"job_ids": null, "user": "alice", "state": "pending"}')
    assert status == 200 and backend.calls[-1] == ("cancel_jobs", (None, "alice", "pending"))
    assert raw(server, "GET", "/api/v1/nothing")[0] == 404
    assert raw(server, "GET", "/elsewhere")[0] == 404
    assert raw(server, "DELETE", "/api/v1/jobs/j00001")[0] == 405


def test_a_backend_failure_is_one_line_500_and_the_server_goes_on(
    served: tuple[ApiServer, FakeBackend],
) -> None:
    server, backend = served
    backend.fail = True
    status, doc = raw(server, "GET", "/api/v1/status")
    assert status == 500 and doc == {"error": "internal error in the global manager: RuntimeError"}
    backend.fail = False
    assert raw(server, "GET", "/api/v1/status")[0] == 200


def test_strict_json_replaces_nan_and_infinity_everywhere() -> None:
    doc = {"a": [1.0, math.nan, {"b": -math.inf}], "c": (math.inf,), 1: "x"}
    assert strict_json(doc) == {"a": [1.0, None, {"b": None}], "c": [None], "1": "x"}


def test_a_key_value_store_needs_a_secret() -> None:
    with pytest.raises(ValueError, match="kv_secret"):
        ApiServer(FakeBackend(), "127.0.0.1", 0, kv=object(), kv_secret="")  # type: ignore[arg-type]
    assert issubclass(BadRequest, Exception)


# ------------------------------------------------------------------ the client side


def test_the_client_reaches_every_call_through_the_api(
    typed: tuple[ApiServer, FakeBackend],
) -> None:
    server, backend = typed
    client = Client(None, "127.0.0.1:1", api(server))
    assert client.deployment()["n_nodes"] == 3
    assert client.status().jobs[0].job_id == "j00001"
    with pytest.raises(UserError, match="j00009: unknown job id"):
        client.status("j00009")
    assert client.status(all_jobs=True).jobs and backend.calls[-1] == (
        "status", (None, True))
    assert client.queue()[0].state == "pending"
    assert client.job("j00001").state == "running"
    with pytest.raises(UserError, match="j00009: unknown job id"):
        client.job("j00009")
    assert client.job_states(["j00001"]) == {"j00001": "running"}
    job = {"name": "a", "qos": "best_effort", "subtasks": [{"work": 1}, {"work": 1}]}
    assert client.submit(job) == "j00001"
    (name, (docs, token)) = [c for c in backend.calls if c[0] == "submit"][-1]
    assert docs[0]["name"] == "a" and len(docs[0]["subtasks"]) == 2 and len(token) == 32
    assert client.cancel("j00001").job_id == "j00001"
    with pytest.raises(UserError, match="j00009: unknown job id"):
        client.cancel("j00009")
    assert client.cancel_jobs(user="alice")[0].result == "cancelled"
    with pytest.raises(UserError, match="give job ids"):
        client.cancel_jobs()


def test_a_job_file_is_sent_as_text_and_checked_by_the_server_as_a_local_file_is(
    typed: tuple[ApiServer, FakeBackend], tmp_path: Any,
) -> None:
    """The CLI sends the file's text; the server's messages name the file as the local
    parser does (the same function checks both)."""
    from workloads.spec import load_jobs

    server, backend = typed
    client = Client(None, "127.0.0.1:1", api(server))
    good = tmp_path / "jobs.yaml"
    good.write_text("- {name: a, qos: loose, subtasks: [{work: 5}]}\n"
                    "- {name: b, qos: loose, user: bob, subtasks: [{work: 5}]}\n")
    answers = client.submit_file(good)
    assert [a.user for a in answers][1] == "bob"  # a field the answer does not name
    (_, (text, source, user, token)) = backend.calls[-1]
    assert text == good.read_text() and source == str(good) and len(token) == 32
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nqos: strict\nsubtasks: [{work: 5}]\n")
    with pytest.raises(UserError) as remote:
        client.submit_file(bad)
    with pytest.raises(UserError) as local:
        load_jobs(bad, 3)
    assert str(remote.value) == str(local.value) and str(bad) in str(remote.value)
    wide = tmp_path / "wide.json"
    wide.write_text('{"name": "w", "qos": "loose", "parallelism": 4, "work": 1}')
    with pytest.raises(UserError, match="more subtasks than nodes"):
        client.submit_file(wide)
    huge = tmp_path / "huge.json"
    huge.write_text("[" + " " * (2 << 20) + "]")
    with pytest.raises(UserError, match="larger than the 1024 KiB limit"):
        client.submit_file(huge)
    missing = tmp_path / "none.yaml"
    with pytest.raises(UserError, match="no such file"):
        client.submit_file(missing)  # parsed here: the local parser names it
    status, doc = raw(server, "POST", "/api/v1/jobs", b'{"file": 3, "source": "x.yaml"}')
    assert status == 400 and "file, source" in doc["error"]


def test_the_client_says_a_refused_request_in_one_line(
    served: tuple[ApiServer, FakeBackend],
) -> None:
    server, _ = served
    wrong = HttpApi(server.url, "not-the-token", "127.0.0.1:1")
    with pytest.raises(UserError, match="refused the credential from the state file: unknown") \
            as err:
        wrong.call("queue")
    assert "\n" not in str(err.value)
    bad = {"name": "bad", "qos": "best_effort", "subtasks": [{"work": 1}]}
    with pytest.raises(UserError, match=r"jobs\[0\]\.subtasks\[0\]\.work"):
        Client(None, "127.0.0.1:1", api(server)).submit(bad)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_gone_cluster_is_named_at_once() -> None:
    """The API port refuses and no Ray GCS answers at the address either."""
    gone = f"127.0.0.1:{closed_port()}"
    client = HttpApi(f"http://127.0.0.1:{closed_port()}", TOKEN, gone, restart_wait=60)
    with pytest.raises(UserError, match="no Ray cluster reachable there") as err:
        client.call("status")
    assert str(err.value).startswith(gone)


def test_a_global_manager_that_does_not_answer_is_reported_as_not_answering() -> None:
    """A stopped (SIGSTOPped) global manager: the kernel accepts the connection, nothing
    answers. The message says so, and does not send the user to coalloc up."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        client = HttpApi(url, TOKEN, "10.0.0.1:6379", timeout=0.3)
        with pytest.raises(UserError) as err:
            client.call("queue")
    msg = str(err.value)
    assert "not answering" in msg and "coalloc up" not in msg and "\n" not in msg


def test_a_bad_recorded_url_is_one_line() -> None:
    with pytest.raises(UserError, match="not an API address"):
        HttpApi("ftp://x", TOKEN, "h:1")


def test_no_token_reaches_the_log(served: tuple[ApiServer, FakeBackend],
                                  caplog: pytest.LogCaptureFixture) -> None:
    """The request lines the server logs (debug) have every token blanked: a refused
    browser's ``?token=`` too."""
    import logging

    server, _ = served
    secret = "never-log-" + "x" * 20
    with caplog.at_level(logging.DEBUG, logger="coalloc.runtime.api"):
        assert raw(server, "GET", f"/api/v1/status?token={secret}&job=a", token=None)[0] == 401
        assert raw(server, "GET", f"/?token={secret}", token=None)[0] == 401
        assert raw(server, "GET", "/api/v1/queue", token=secret)[0] == 401
        assert raw(server, "GET", f"/api/v1/queue?token={TOKEN}", token=None)[0] == 200
    assert "token=***" in caplog.text
    assert secret not in caplog.text and TOKEN not in caplog.text
