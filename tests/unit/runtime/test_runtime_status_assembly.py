"""The status document (:func:`runtime.status.assemble_status`) is assembled from typed
records the global manager already holds, without asking any node: its job table, each
node's last :class:`~workloads.messages.NodeReport` (the monitor's, once a second) and
each subtask's last :class:`~workloads.messages.SubtaskReport`, plus the controller's
view. A running job's subtasks carry their node's live fields (the same values as the
node's full status document) and progress and the controller's phase figures; a finished
job carries its closing figures and its subtasks their last reported fields; a pending
job takes nothing from the controller (even one it has a view of); nodes are ready only
when their loop runs, their report is fresh and they are healthy; a node whose last
report is older than ``REPORT_FRESH_S``, or that never reported, is shown as not
answering with its last figures; a job id filters the jobs; an unreachable controller
falls back to what ``up`` recorded."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from runtime.config import RuntimeConfig, runtime_core
from runtime.node_health import REPORT_FRESH_S, HeardReport
from runtime.status import (
    LIVE_FIELDS,
    ControllerView,
    StatusDocument,
    assemble_status,
    to_json,
)
from tests.unit.runtime.test_runtime_wiring import NODES, Loopback, strict
from workloads.messages import NodeReport, SubtaskPhase, SubtaskReport

CYCLE = 10.0
INFO = {"address": "10.0.0.1:6379", "phase_log": "/tmp/phase.jsonl",
        "transport_security": "curve"}
PLACEMENTS = [(n, f"ray-{n.name}", True) for n in NODES]


def _grid(tmp_path: Path) -> Loopback:
    config = RuntimeConfig(runtime_core(cycle=CYCLE), start_margin_s=0.0)
    return Loopback(NODES, config, tmp_path / "phase.jsonl")


def _hear(loop: Loopback, *silent: str) -> None:
    """What the monitor does once a second: every node but ``silent`` reports (asked
    about what the job table has running there) and the global manager applies it.
    Stepped by hand here: each node's loop counts as running, as in a live manager."""
    asked = loop.gm.running_subtasks()
    for name, node in loop.nodes.items():
        if name not in silent:
            report = node.report(asked.get(name, []))
            loop.gm.apply_report(replace(report, loop_running=True))


def _step(loop: Loopback, cycles: int, start: int = 0) -> None:
    for k in range(start, start + cycles):
        loop.step(k)
        _hear(loop)


def _status(loop: Loopback, job_id: str | None = None, ctl: dict[str, Any] | None = None,
            errors: dict[str, str] | None = None) -> dict[str, Any]:
    """The status document as the API serves it (JSON)."""
    heard, subtasks = loop.gm.heard()
    view = ControllerView.model_validate(loop.ctl.status() if ctl is None else ctl)
    return to_json(assemble_status(
        loop.gm.describe(), heard, subtasks, view, PLACEMENTS, loop.gm.config,
        address=INFO["address"], phase_log=INFO["phase_log"],
        security_mode=INFO["transport_security"], job_id=job_id, errors=errors))


def test_a_running_job_carries_its_nodes_live_fields_and_the_controllers_figures(
    tmp_path: Path,
) -> None:
    loop = _grid(tmp_path)
    (a,) = loop.gm.submit([strict("a", [150, 200], [1, 2], 150.0, 60.0)])
    _step(loop, 6)
    st = _status(loop)
    (job,) = st["jobs"]
    assert job["job_id"] == a["job_id"] and job["state"] == "running"
    # The node's full status document (what status asked every node for before) has
    # the same values as the typed reports status is assembled from now.
    full = {(s["job_id"], s["index"]): s for n in loop.nodes.values()
            for s in n.snapshot()["subtasks"]}
    for s in job["subtasks"]:
        mine = full[(a["job_id"], s["index"])]
        assert s["done_work"] == mine["done_work"] > 0
        for key in LIVE_FIELDS:
            assert s.get(key) == mine.get(key), key
        assert s["progress"] == min(1.0, mine["done_work"] / s["work"])
        assert s["state"] == "running" and "controller_virtual_time" in s
    view = loop.ctl.status()["jobs"][a["job_id"]]
    assert job["phase_difference"] == view["phase_difference"]
    assert job["window"] == view["window"]
    busy = {s["node"] for s in job["subtasks"]}
    for n in st["nodes"]:
        snap = loop.nodes[n["name"]].snapshot()
        assert n["running_subtasks"] == (1 if n["name"] in busy else 0)
        assert n["ready"] is True and n["answering"] is True and n["error"] is None
        assert n["ray_node_id"] == f"ray-{n['name']}"
        assert n["model_time"] == snap["model_time"] and n["incarnation"] == snap["incarnation"]
        assert n["counters"] == snap["counters"] and n["report_age_s"] == 0.0
    assert st["address"] == INFO["address"] and st["cycle"] == CYCLE


def test_a_finished_job_shows_its_closing_figures_and_its_subtasks_last_reports(
    tmp_path: Path,
) -> None:
    loop = _grid(tmp_path)
    (a,) = loop.gm.submit([strict("a", [5, 5], [1, 1], 150.0, 60.0)])
    for k in range(100):
        loop.step(k)
        _hear(loop)
        if loop.gm.job_states()[a["job_id"]] != "running":
            break
    loop.step(k + 1)  # the ended subtasks leave the nodes' records, for their history
    _hear(loop)
    assert all(not n.report().subtasks for n in loop.nodes.values())
    (job,) = _status(loop)["jobs"]
    view = loop.ctl.status()["jobs"][a["job_id"]]
    assert job["state"] == "completed" and view["closed"] is True
    assert all(s["progress"] == 1.0 for s in job["subtasks"])
    assert all(s["start_time"] == job["start_at"] and s["weight"] > 0 for s in job["subtasks"])
    assert job["mean_phase_difference"] == view["mean_phase_difference"]
    assert job["max_phase_difference"] == view["max_phase_difference"]
    assert "phase_difference" not in job and "window" not in job
    # Archived: its subtasks' reports are let go with it.
    loop.manual.set(loop.manual.now() + loop.gm.keep_finished + 1.0)
    assert loop.gm.archive_finished() == 1
    assert not [k for k in loop.gm.heard()[1] if k[0] == a["job_id"]]


def test_a_report_of_a_run_whose_job_is_not_in_the_table_is_not_kept(
    tmp_path: Path,
) -> None:
    """A zombie run's subtask (its job archived, or never this manager's) is not kept
    for status: the subtasks' reports stay bounded by the job table."""
    loop = _grid(tmp_path)
    (a,) = loop.gm.submit([strict("a", [150], [1], 150.0, 60.0)])
    _step(loop, 1)
    mine = SubtaskReport(a["job_id"], 0, SubtaskPhase.RUNNING, 1.0)
    zombie = SubtaskReport("gone.2", 0, SubtaskPhase.RUNNING, 1.0)
    report = NodeReport("n0", True, 100.0, (mine, zombie))
    loop.gm.keep_report(report)
    heard, subtasks = loop.gm.heard()
    assert heard["n0"].report is report
    assert subtasks[mine.key] is mine and zombie.key not in subtasks


def test_a_pending_job_takes_nothing_from_the_controller_and_a_job_id_filters(
    tmp_path: Path,
) -> None:
    loop = _grid(tmp_path)
    # Weight 8 (200 Mcycles/s) fills the 200 MHz node's idle budget (210): one runs.
    big = strict("big", [300, 300, 300, 300], [8, 8, 8, 8], 300.0, 100.0)
    runs, waits = (a["job_id"] for a in loop.gm.submit([big, big]))
    _step(loop, 2)
    ctl = loop.ctl.status()
    ctl["jobs"][waits] = {"closed": False, "phase_difference": 9.9, "window": "none"}
    st = _status(loop, ctl=ctl)
    by_id = {j["job_id"]: j for j in st["jobs"]}
    assert by_id[waits]["state"] == "pending" and by_id[waits]["subtasks"] == []
    assert "phase_difference" not in by_id[waits]
    assert by_id[runs]["phase_difference"] == ctl["jobs"][runs]["phase_difference"]
    only = _status(loop, runs, ctl=ctl)
    assert [j["job_id"] for j in only["jobs"]] == [runs]


def test_nodes_not_ready_and_an_unreachable_controller(tmp_path: Path) -> None:
    loop = _grid(tmp_path)
    _step(loop, 1)
    loop.gm.keep_report(replace(loop.nodes["n1"].report(), loop_running=False,
                                error="RuntimeError: boom"))
    nodes = {n["name"]: n for n in _status(loop)["nodes"]}
    assert nodes["n1"]["ready"] is False and nodes["n1"]["error"] == "RuntimeError: boom"
    assert nodes["n1"]["answering"] is True  # it answers; its loop died
    assert nodes["n0"]["ready"] is True
    loop.gm.lost["n2"] = "no answer"
    assert {n["name"]: n["ready"] for n in _status(loop)["nodes"]}["n2"] is False
    ctl = {"error": "unreachable: RayActorError", "jobs": {}, "counters": {}}
    doc = _status(loop, ctl=ctl)
    assert doc["security"] == {"mode": "curve", "auth_failures": None}
    assert doc["controller"]["error"] == ctl["error"] and doc["phase_log"] == INFO["phase_log"]
    assert doc["nodes"] and all(n["answering"] for n in doc["nodes"])


def test_a_node_whose_last_report_is_old_is_shown_as_not_answering_with_its_last_figures(
    tmp_path: Path,
) -> None:
    """A stopped local manager sends no report: once its last one is older than
    ``REPORT_FRESH_S`` it is not answering (in the document and the table) and shows
    its last figures; the other nodes, which keep reporting, answer; when it reports
    again it answers again. Nothing waits on it: the document is built from records."""
    from coalloc.commands.status import render

    loop = _grid(tmp_path)
    (a,) = loop.gm.submit([strict("a", [150, 200, 100, 100], [1, 1, 1, 1], 150.0, 60.0)])
    _step(loop, 3)
    before = {n["name"]: n for n in _status(loop)["nodes"]}
    scale = loop.clock.base.scale
    loop.manual.set(loop.manual.now() + REPORT_FRESH_S * scale / 2)
    _hear(loop, "n1")
    assert all(n["answering"] for n in _status(loop)["nodes"])  # still fresh
    loop.manual.set(loop.manual.now() + REPORT_FRESH_S * scale)
    _hear(loop, "n1")
    st = _status(loop, errors={"n1": "no answer"})
    nodes = {n["name"]: n for n in st["nodes"]}
    silent = nodes["n1"]
    assert silent["answering"] is False and silent["ready"] is False
    assert silent["error"] == f"not answering (no report for {silent['report_age_s']:.0f} s)"
    assert silent["report_age_s"] > REPORT_FRESH_S
    assert silent["model_time"] == before["n1"]["model_time"] is not None
    assert silent["running_subtasks"] == before["n1"]["running_subtasks"] == 1
    assert all(nodes[n]["answering"] and nodes[n]["ready"] for n in nodes if n != "n1")
    (job,) = st["jobs"]
    assert all(s["done_work"] > 0 for s in job["subtasks"])  # n1's: its last report
    st.update(address="ray://x", time_scale=1.0, cycle=10.0)
    rows = {line.split()[0]: line
            for line in render(StatusDocument.model_validate(st)).splitlines()
            if line.startswith("n")}
    assert "up, not answering" in rows["n1"] and "not answering" not in rows["n0"]
    # A failed call says how it failed.
    st = _status(loop, errors={"n1": "ActorDiedError"})
    assert st["nodes"][1]["error"].endswith("; last call: ActorDiedError")
    _hear(loop)
    assert {n["name"]: n["answering"] for n in _status(loop)["nodes"]}["n1"] is True
    assert a["job_id"]


def test_a_node_that_never_reported_is_not_answering(tmp_path: Path) -> None:
    loop = _grid(tmp_path)
    loop.step(0)
    _hear(loop, "n3")
    nodes = {n["name"]: n for n in _status(loop)["nodes"]}
    assert nodes["n3"]["answering"] is False and nodes["n3"]["ready"] is False
    assert "no report since the global manager started" in nodes["n3"]["error"]
    assert nodes["n3"]["model_time"] is None and nodes["n3"]["counters"] == {}
    assert nodes["n3"]["report_age_s"] is None and nodes["n3"]["running_subtasks"] == 0


def test_a_heard_report_is_fresh_up_to_the_freshness_bound() -> None:
    rep = NodeReport("n0", True, 1.0)
    assert HeardReport(rep, REPORT_FRESH_S).fresh
    assert not HeardReport(rep, REPORT_FRESH_S + 0.01).fresh


def test_the_controllers_placeholder_says_it_did_not_answer() -> None:
    """``status`` still asks the controller, with one short deadline: a view not back by
    then is a placeholder that says so."""
    from runtime.actors import STATUS_DEADLINE_S, _view

    silent = _view(object(), set())  # its reference is not among those that answered
    assert silent.answering is False and silent.error and "not answering" in silent.error
    assert STATUS_DEADLINE_S <= 1.0


def test_a_subtask_not_reported_yet_has_the_same_keys_as_a_reported_one(
    tmp_path: Path,
) -> None:
    # Placed less than a monitor round ago: its node has not reported it, so its live
    # fields are not known; the document keeps its shape (None), and its progress is 0.
    loop = _grid(tmp_path)
    (a,) = loop.gm.submit([strict("a", [150, 200], [1, 2], 150.0, 60.0)])
    (before,) = _status(loop)["jobs"]
    _step(loop, 3)
    (after,) = _status(loop)["jobs"]
    for early, late in zip(before["subtasks"], after["subtasks"]):
        assert set(early) - {"controller_virtual_time", "controller_done"} \
            == set(late) - {"controller_virtual_time", "controller_done"}
        assert all(early[key] is None for key in (*LIVE_FIELDS, "state"))
        assert late["state"] == "running" and late["done_work"] > 0
        assert early["progress"] == 0.0
