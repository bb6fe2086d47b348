"""The typed status document (:mod:`runtime.status`): the models describe exactly the
JSON the API serves, the API publishes their JSON Schema, and the served documents
validate against it.

A document parsed from the served JSON and written again is the same JSON (no key lost,
none added, nothing renamed); no field of a live document is an untyped extra; every
field of the job table's record is a field of :class:`~runtime.status.JobRecord`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runtime.api import ApiServer, strict_json
from runtime.global_service import JobInfo
from runtime.status import (
    DOCUMENTS,
    Document,
    JobRecord,
    StatusDocument,
    SubtaskRecord,
    document_schema,
    parse_answers,
    parse_queue,
    to_json,
)
from tests.unit.runtime.test_runtime_api import TOKEN, FakeBackend, raw
from tests.unit.runtime.test_runtime_status_assembly import _grid, _status, _step
from tests.unit.runtime.test_runtime_wiring import strict


def _extras(doc: Document, where: str = "") -> list[str]:
    """Every field of ``doc`` (and the documents in it) that no model declares."""
    out = [f"{where}.{k}" for k in doc.model_extra or {}]
    for name in type(doc).model_fields:
        value = getattr(doc, name)
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            if isinstance(item, Document):
                out += _extras(item, f"{where}.{name}[{i}]")
    return out


def _live(tmp_path: Path) -> tuple[dict[str, Any], Any]:
    """A status document (JSON) of a grid with a running, a pending and a finished job,
    and its loopback grid."""
    loop = _grid(tmp_path)
    big = strict("big", [300, 300, 300, 300], [8, 8, 8, 8], 300.0, 100.0)
    small = strict("small", [5, 5], [1, 1], 150.0, 60.0)
    loop.gm.submit([big, big, small])
    _step(loop, 8)
    return _status(loop), loop


def test_a_served_document_parses_and_writes_back_the_same_json(tmp_path: Path) -> None:
    doc, loop = _live(tmp_path)
    states = {j["state"] for j in doc["jobs"]}
    assert {"running", "pending", "completed"} <= states
    served = json.loads(json.dumps(strict_json(doc)))
    parsed = StatusDocument.model_validate(served)
    assert to_json(parsed) == served
    assert _extras(parsed) == []
    rows = json.loads(json.dumps(strict_json(loop.gm.queue())))
    assert [to_json(r) for r in parse_queue(rows)] == rows
    (job,) = [j for j in served["jobs"] if j["state"] == "pending"]
    one = loop.gm.job(job["job_id"])
    assert one is not None and _extras(one) == []


def test_every_field_of_the_job_tables_record_is_typed(tmp_path: Path) -> None:
    _, loop = _live(tmp_path)
    info: JobInfo = next(i for i in loop.gm.jobs.values() if i.subtasks)
    rec = info.to_dict()
    assert set(rec) <= set(JobRecord.model_fields)
    assert set(rec["subtasks"][0]) <= set(SubtaskRecord.model_fields)


def test_the_served_documents_validate_against_the_published_schemas(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    doc, loop = _live(tmp_path)
    jsonschema.validate(json.loads(json.dumps(strict_json(doc))), document_schema("status"))
    queue = json.loads(json.dumps(strict_json(loop.gm.queue())))
    jsonschema.validate(queue, document_schema("queue"))
    answers = parse_answers(loop.gm.submit([strict("x", [5], [1], 150.0, 60.0)]))
    jsonschema.validate([to_json(a) for a in answers], document_schema("submit"))
    job = loop.gm.job(answers[0].job_id)
    assert job is not None
    jsonschema.validate(to_json(job), document_schema("job"))
    with pytest.raises(jsonschema.ValidationError):  # the schema does say something
        jsonschema.validate({"jobs": "none"}, document_schema("status"))


def test_the_api_serves_the_schemas() -> None:
    server = ApiServer(FakeBackend(TOKEN), "127.0.0.1", 0)
    try:
        assert raw(server, "GET", "/api/v1/schema") == (200, {"documents": list(DOCUMENTS)})
        status, schema = raw(server, "GET", "/api/v1/schema/status")
        assert status == 200 and schema == document_schema("status")
        assert {"jobs", "nodes", "counters", "model_time"} <= set(schema["required"])
        assert schema["title"] == "StatusDocument" and "JobRecord" in schema["$defs"]
        for name in DOCUMENTS:
            assert raw(server, "GET", f"/api/v1/schema/{name}")[0] == 200
        status, doc = raw(server, "GET", "/api/v1/schema/nothing")
        assert status == 404 and "no such document" in doc["error"]
        assert raw(server, "GET", "/api/v1/schema/status", token=None)[0] == 401
    finally:
        server.close()


def test_a_field_a_situation_does_not_have_is_absent_not_null(tmp_path: Path) -> None:
    doc, _ = _live(tmp_path)
    by_state = {j["state"]: j for j in doc["jobs"]}
    assert "wait" in by_state["pending"] and "wait" not in by_state["running"]
    assert "dispatching" in by_state["running"] and "dispatching" not in by_state["pending"]
    assert "phase_difference" in by_state["running"]
    assert "phase_difference" not in by_state["completed"]
    assert "global_manager" not in doc  # set by the actor, not by the assembly
