"""The status document (:func:`runtime.actors.assemble_status`) merges the global
manager's job table, the local managers' views and the controller's view: a running
job's subtasks carry their node's live fields and progress and the controller's phase
figures; a finished job carries its closing figures; a pending job takes nothing from the
controller (even one it has a view of); nodes are ready only when their manager runs,
answers and is healthy; a job id filters the jobs; an unreachable controller falls back to
what ``up`` recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.actors import assemble_status
from runtime.config import RuntimeConfig, runtime_core
from tests.unit.runtime.test_runtime_wiring import NODES, Loopback, strict

CYCLE = 10.0
INFO = {"address": "10.0.0.1:6379", "phase_log": "/tmp/phase.jsonl",
        "transport_security": "curve"}


def _grid(tmp_path: Path) -> Loopback:
    config = RuntimeConfig(runtime_core(cycle=CYCLE), start_margin_s=0.0)
    return Loopback(NODES, config, tmp_path / "phase.jsonl")


def _step(loop: Loopback, cycles: int, start: int = 0) -> None:
    for k in range(start, start + cycles):
        loop.step(k)


def _status(loop: Loopback, job_id: str | None = None, **lm_over: Any) -> dict[str, Any]:
    # Stepped by hand here: each node's loop counts as running, as in a live manager.
    lm = {n: dict(node.snapshot(), running=True) for n, node in loop.nodes.items()}
    lm.update(lm_over)
    placements = [(n, f"ray-{n.name}", True) for n in NODES]
    return assemble_status(loop.gm.describe(), lm, loop.ctl.status(), placements,
                           loop.gm.config, INFO, job_id)


def test_a_running_job_carries_its_nodes_live_fields_and_the_controllers_figures(
    tmp_path: Path,
) -> None:
    loop = _grid(tmp_path)
    (a,) = loop.gm.submit([strict("a", [150, 200], [1, 2], 150.0, 60.0)])
    _step(loop, 6)
    st = _status(loop)
    (job,) = st["jobs"]
    assert job["job_id"] == a["job_id"] and job["state"] == "running"
    live = {(s["job_id"], s["index"]): s for n in loop.nodes.values()
            for s in n.snapshot()["subtasks"]}
    for s in job["subtasks"]:
        mine = live[(a["job_id"], s["index"])]
        assert s["done_work"] == mine["done_work"] > 0
        assert s["progress"] == min(1.0, mine["done_work"] / s["work"])
        assert s["state"] == "running" and "controller_virtual_time" in s
    view = loop.ctl.status()["jobs"][a["job_id"]]
    assert job["phase_difference"] == view["phase_difference"]
    assert job["window"] == view["window"]
    busy = {s["node"] for s in job["subtasks"]}
    for n in st["nodes"]:
        assert n["running_subtasks"] == (1 if n["name"] in busy else 0)
        assert n["ready"] is True and n["ray_node_id"] == f"ray-{n['name']}"
    assert st["address"] == INFO["address"] and st["cycle"] == CYCLE


def test_a_finished_job_shows_its_closing_figures(tmp_path: Path) -> None:
    loop = _grid(tmp_path)
    (a,) = loop.gm.submit([strict("a", [5, 5], [1, 1], 150.0, 60.0)])
    loop.run()
    (job,) = _status(loop)["jobs"]
    view = loop.ctl.status()["jobs"][a["job_id"]]
    assert job["state"] == "completed" and view["closed"] is True
    assert all(s["progress"] == 1.0 for s in job["subtasks"])
    assert job["mean_phase_difference"] == view["mean_phase_difference"]
    assert job["max_phase_difference"] == view["max_phase_difference"]
    assert "phase_difference" not in job and "window" not in job


def test_a_pending_job_takes_nothing_from_the_controller_and_a_job_id_filters(
    tmp_path: Path,
) -> None:
    loop = _grid(tmp_path)
    # Weight 8 (200 Mcycles/s) fills the 200 MHz node's idle budget (210): one runs.
    big = strict("big", [300, 300, 300, 300], [8, 8, 8, 8], 300.0, 100.0)
    runs, waits = (a["job_id"] for a in loop.gm.submit([big, big]))
    _step(loop, 2)
    lm = {n: dict(node.snapshot(), running=True) for n, node in loop.nodes.items()}
    ctl = loop.ctl.status()
    ctl["jobs"][waits] = {"closed": False, "phase_difference": 9.9, "window": 1.0}
    placements = [(n, f"ray-{n.name}", True) for n in NODES]
    st = assemble_status(loop.gm.describe(), lm, ctl, placements, loop.gm.config, INFO)
    by_id = {j["job_id"]: j for j in st["jobs"]}
    assert by_id[waits]["state"] == "pending" and by_id[waits]["subtasks"] == []
    assert "phase_difference" not in by_id[waits]
    assert by_id[runs]["phase_difference"] == ctl["jobs"][runs]["phase_difference"]
    only = assemble_status(loop.gm.describe(), lm, ctl, placements, loop.gm.config, INFO,
                           runs)
    assert [j["job_id"] for j in only["jobs"]] == [runs]


def test_nodes_not_ready_and_an_unreachable_controller(tmp_path: Path) -> None:
    loop = _grid(tmp_path)
    _step(loop, 1)
    broken = {"error": "unreachable: GetTimeoutError"}
    st = _status(loop, None, n1=broken)
    nodes = {n["name"]: n for n in st["nodes"]}
    assert nodes["n1"]["ready"] is False and nodes["n1"]["error"] == broken["error"]
    assert nodes["n0"]["ready"] is True
    loop.gm.lost["n2"] = "no answer"
    st = _status(loop)
    assert {n["name"]: n["ready"] for n in st["nodes"]}["n2"] is False
    ctl = {"error": "unreachable: RayActorError", "jobs": {}, "counters": {}}
    doc = assemble_status(loop.gm.describe(), {}, ctl, [], loop.gm.config, INFO)
    assert doc["security"] == {"mode": "curve", "auth_failures": None}
    assert doc["controller"]["error"] == ctl["error"] and doc["phase_log"] == INFO["phase_log"]
    assert all(n["ready"] is False for n in doc["nodes"])


def test_a_node_that_does_not_answer_in_time_is_shown_as_not_answering(
    tmp_path: Path,
) -> None:
    """``status`` waits one short deadline for every node at once; a node whose view is
    not back by then (``_view``'s placeholder) says so, in the document and the table."""
    from coalloc.commands.status import render
    from runtime.actors import STATUS_DEADLINE_S, _view

    loop = _grid(tmp_path)
    _step(loop, 1)
    silent = _view(object(), set())  # its reference is not among those that answered
    assert silent["answering"] is False and "not answering" in silent["error"]
    assert STATUS_DEADLINE_S <= 1.0
    st = _status(loop, None, n1=silent)
    nodes = {n["name"]: n for n in st["nodes"]}
    assert nodes["n1"]["answering"] is False and nodes["n1"]["ready"] is False
    assert nodes["n1"]["error"] == silent["error"]
    assert all(nodes[n]["answering"] is True for n in nodes if n != "n1")
    st.update(address="ray://x", time_scale=1.0, cycle=10.0)
    rows = {line.split()[0]: line for line in render(st).splitlines() if line.startswith("n")}
    assert "up, not answering" in rows["n1"] and "not answering" not in rows["n0"]
