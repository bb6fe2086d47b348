"""Through the real runtime on the session Ray cluster: a strict job that does not fit
waits in the pending queue with its reason and its estimated start (``status JOB``,
``queue``) and runs once the job blocking it is cancelled; a node whose local manager
stops answering (SIGSTOP) is lost after ``--node-timeout`` cycles, its gang is requeued
whole on the other nodes and completes, and when the manager answers again the stopped
run is not left running there.

Three emulated nodes of 300 MHz: an idle node's budget under the default ``sq`` is
(1 + 0.05) x 300 Mcycles/s (admission on the measured QoS capacity), so a weight-12
subtask at 25 Mcycles/s per weight fills a node; tests that rely on it wait first until
the global manager budgets the nodes as idle. No timing assertions: every wait polls with
a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from support import cli_status as status
from support import deployed, idle_budgets, run_cli, wait_for

from runtime.status import to_json
from tests.integration.test_runtime_restarts import ready_of

pytestmark = pytest.mark.ray

NODE_TIMEOUT = 15  # cycles: 4.5 real s at the time scale below


def job(name: str, work: float, weight: float, n: int = 3, **extra: Any) -> dict[str, Any]:
    return {"name": name, "qos": "strict", "overall_deviation": 120, "asynchrony": 60,
            "subtasks": [{"work": work, "weight": weight} for _ in range(n)], **extra}


@pytest.fixture(scope="module")
def deployment(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    log = tmp_path_factory.mktemp("queue") / "phase.jsonl"
    with deployed(ray_cluster.address, log, "--nodes", "300,300,300", "--time-scale", "100",
                  "--node-timeout", str(NODE_TIMEOUT)):
        yield ray_cluster, log


def test_a_job_that_does_not_fit_is_pending_with_a_reason_and_runs_after_a_cancel(
    deployment: Any, capsys: Any
) -> None:
    import coalloc

    cluster, _ = deployment
    client = coalloc.connect(cluster.address)
    idle_budgets(capsys, cluster.address)
    blocker = client.submit(job("blocker", 100_000, 12))
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"waiter-{os.getpid()}.json"
    path.write_text(json.dumps(job("waiter", 20, 12)))
    try:
        code, out, err = run_cli(capsys, "submit", str(path), "--address", cluster.address)
    finally:
        path.unlink()
    assert code == 0, (out, err)
    waiter = out.split()[0]
    assert " pending " in out, out
    (rec,) = status(capsys, cluster.address, waiter)["jobs"]
    assert rec["state"] == "pending" and rec["pending_reasons"], rec
    assert "free" in rec["reason"] or "budget" in rec["reason"], rec["reason"]
    # Its estimated start: when the blocker is expected to end (start + work / rate).
    (run,) = status(capsys, cluster.address, blocker)["jobs"]
    ends = run["start_at"] + max(s["work"] / s["expected_rate"] for s in run["subtasks"])
    assert rec["estimated_start"] == pytest.approx(ends) and rec["estimated_start_time"]
    code, out, _ = run_cli(capsys, "queue", "--json", "--address", cluster.address)
    rows = json.loads(out[out.index("["):])
    assert [r["job_id"] for r in rows][:2] == [waiter, blocker]
    assert rows[0]["state"] == "pending" and rows[0]["reason"] == rec["reason"]
    assert rows[0]["estimated_start"] == pytest.approx(ends)
    assert rows[0]["estimated_start_time"] == rec["estimated_start_time"]
    code, text, _ = run_cli(capsys, "queue", "--address", cluster.address)
    assert code == 0 and waiter in text and "pending" in text and "EST. START" in text
    code, text, _ = run_cli(capsys, "status", waiter, "--address", cluster.address)
    assert code == 0 and "estimated start: " in text and "N/A" not in text
    client.cancel(blocker)
    assert client.wait(waiter, timeout=120).state == "completed"


def test_the_dashboard_shows_what_status_shows_in_a_real_browser(
    deployment: Any, capsys: Any, tmp_path: Path
) -> None:
    """``coalloc dashboard``'s URL opened in headless Chromium: the nodes and jobs the
    page shows are those of ``status --json`` and ``queue --json`` (in the queue's
    order), a pending job's reason is shown, the chart of the running job gains points
    while it runs, the browser logs no error, and the page without the token is refused.
    Screenshots go to ``$COALLOC_SCREENSHOTS`` (else the test's tmp dir)."""
    import urllib.error
    import urllib.request

    from browser import chromium

    import coalloc

    cluster, _ = deployment
    shots = Path(os.environ.get("COALLOC_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    client = coalloc.connect(cluster.address)
    idle_budgets(capsys, cluster.address)
    runner = client.submit(job("dash-run", 100_000, 12))
    waiter = client.submit(job("dash-wait", 20, 12))
    try:
        code, out, err = run_cli(capsys, "dashboard", "--address", cluster.address)
        assert code == 0, err
        url = out.strip().splitlines()[-1]
        assert url.startswith("http://") and "/?token=" in url
        base = url.split("/?", 1)[0]
        # Without the token: refused, the page and its script alike.
        for path in ("/", "/dashboard/dashboard.js", "/?token=wrong"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(base + path, timeout=10)
            assert refused.value.code == 401, path

        with chromium() as browser:
            page = browser.new_page()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
            response = page.goto(url)
            assert response is not None and response.status == 200

            last: dict[str, Any] = {}

            def settle(predicate: Any, what: str, timeout: float = 60) -> None:
                try:
                    wait_for(predicate, timeout=timeout)
                except AssertionError:
                    raise AssertionError(f"{what}: last seen {last.get(what)!r}") from None

            def cells(selector: str) -> list[list[str]]:
                return page.eval_on_selector_all(
                    selector, "rows => rows.map(r => [r.dataset.node || r.dataset.job,"
                    " ...Array.from(r.cells, c => c.textContent)])")

            # Nodes: names, health, labels, speed and subtasks as status --json has them.
            def nodes_match() -> bool:
                st = status(capsys, cluster.address)
                want = [[n["name"], n["name"], n.get("health", "up") + (
                         "" if n["ready"] or n.get("health", "up") != "up" else " (not ready)"),
                         ", ".join(n.get("labels") or []) or "\u2013",
                         f"{n['speed_mhz']:.0f}", f"{n['cores']:g}",
                         str(n["running_subtasks"])] for n in st["nodes"]]
                got = [r[:6] + [r[7]] for r in cells("#nodes tbody tr")]
                last["nodes"] = (got, want)
                return got == want
            settle(nodes_match, "nodes")

            # Jobs: the queue in the queue's order, the finished ones as status has them.
            def jobs_match() -> bool:
                code, out, _ = run_cli(capsys, "queue", "--json", "--address", cluster.address)
                rows = json.loads(out[out.index("["):])
                st = status(capsys, cluster.address)
                over = {j["job_id"] for j in st["jobs"] if j["state"] not in ("pending", "running")}
                queue = [(r[0], r[4].split(" ")[0]) for r in cells("#queue tbody tr")]
                done = {r[0] for r in cells("#finished tbody tr")}
                last["jobs"] = (queue, rows, done, over)
                return queue == [(r["job_id"], r["state"]) for r in rows] and done == over
            settle(jobs_match, "jobs")

            # The pending job's reason, as status gives it.
            (rec,) = status(capsys, cluster.address, waiter)["jobs"]
            assert rec["state"] == "pending" and rec["reason"]
            row = page.locator(f'#queue tr[data-job="{waiter}"]')
            assert row.locator("td.reason").text_content() == rec["reason"]

            # The running job's chart gains points while it runs: one line per subtask.
            page.locator(f'#queue tr[data-job="{runner}"]').click()
            chart = page.locator("#chart-virtual")
            settle(lambda: page.locator("#job-detail").get_attribute("data-job") == runner,
                   "selected")
            first = int(chart.get_attribute("data-points") or 0)

            def points() -> bool:
                last["points"] = (first, chart.get_attribute("data-points"), errors)
                return int(chart.get_attribute("data-points") or 0) >= first + 3
            settle(points, "points")
            assert chart.locator("polyline.subtask").count() == 3
            assert page.locator("#job-facts").text_content().count("A_t") == 1
            page.screenshot(path=str(shots / "dashboard.png"), full_page=True)
            assert not page.locator("#problem").is_visible()
            assert errors == [], errors
    finally:
        client.cancel_jobs([runner, waiter])
        wait_for(lambda: set(client.job_states([runner, waiter]).values()) <= {"cancelled"})


def test_a_silent_node_is_lost_and_its_gang_requeued_whole_on_the_others(
    deployment: Any, capsys: Any
) -> None:
    import coalloc
    from runtime.config import LOCAL_PREFIX

    cluster, log = deployment
    client = coalloc.connect(cluster.address)
    # Two subtasks on three nodes; long enough to be mid-run when its node goes silent.
    jid = client.submit(job("loss", 400, 2, n=2))
    (rec,) = status(capsys, cluster.address, jid)["jobs"]
    lost = rec["nodes"][0]
    wait_for(lambda: min(float(s.get("progress") or 0) for s in
                         status(capsys, cluster.address, jid)["jobs"][0]["subtasks"]) > 0.05)
    info = ready_of(LOCAL_PREFIX + lost)
    assert info is not None
    pid = int(info["pid"])
    os.kill(pid, signal.SIGSTOP)
    try:
        again = to_json(wait_for(lambda: (j := client.job(jid)).attempt >= 2 and j, timeout=120))
        assert f"node {lost} lost" in again["history"][0]
        nodes = {n["name"]: n for n in status(capsys, cluster.address)["nodes"]}
        assert nodes[lost]["health"] == "lost"
        done = to_json(client.wait(jid, timeout=180))
        assert done["state"] == "completed", done
        assert lost not in done["nodes"] and done["run_id"] == f"{jid}.2"
    finally:
        os.kill(pid, signal.SIGCONT)
    # Back: healthy again, and the first run is stopped there (not left running).
    def back() -> bool:
        st = status(capsys, cluster.address)
        node = next(n for n in st["nodes"] if n["name"] == lost)
        return node["health"] == "up" and node["running_subtasks"] == 0
    wait_for(back, timeout=120)
    records = [json.loads(line) for line in Path(log).read_text().splitlines() if line.strip()]
    first = [r for r in records if r.get("type") == "summary" and r["job"] == jid]
    assert first and first[0]["reason"].startswith("requeued") and not first[0]["completed"]
    assert any(r.get("type") == "summary" and r["job"] == f"{jid}.2" and r["completed"]
               for r in records)


def test_status_queue_and_submit_answer_while_a_dispatch_waits_on_a_stopped_node(
    deployment: Any, capsys: Any
) -> None:
    """A job is dispatched to a node whose local manager is SIGSTOPped: its ``place``
    call waits (up to the Ray call's timeout) outside the global manager's lock, so
    ``status``, ``queue`` and another ``submit`` answer meanwhile (asserted by order:
    before the dispatching submission returns). After SIGCONT the job runs."""
    import coalloc
    from runtime.config import LOCAL_PREFIX

    cluster, _ = deployment
    client = coalloc.connect(cluster.address)
    idle_budgets(capsys, cluster.address)
    info = ready_of(LOCAL_PREFIX + "n2")
    assert info is not None
    pid = int(info["pid"])
    answers: list[str] = []
    submitting = threading.Thread(
        target=lambda: answers.append(client.submit(job("held", 200, 12))), daemon=True)
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"other-{os.getpid()}.json"
    path.write_text(json.dumps(job("other", 20, 12, n=1)))  # no room left: it waits
    os.kill(pid, signal.SIGSTOP)
    try:
        submitting.start()  # fills every node, n2 too (not stale yet: silent < 3 s)
        held = wait_for(lambda: next((j.job_id for j in client.queue()
                                      if j.name == "held"), None))
        assert client.job(held).dispatching is True
        code, out, err = run_cli(capsys, "queue", "--address", cluster.address)
        assert code == 0 and held in out, (code, out, err)
        code, out, err = run_cli(capsys, "submit", str(path), "--address", cluster.address)
        assert code == 0, (code, out, err)
        st = status(capsys, cluster.address)
        assert held in [j["job_id"] for j in st["jobs"]]
        assert submitting.is_alive() and not answers  # all answered while it waited
    finally:
        os.kill(pid, signal.SIGCONT)
    submitting.join(120)
    assert not submitting.is_alive() and answers == [held]
    other = next(j.job_id for j in client.queue() if j.name == "other")
    client.cancel_jobs([other])
    done = to_json(client.wait(held, timeout=180))
    assert done["state"] == "completed", done
    wait_for(lambda: client.job_states([other])[other] == "cancelled")


def test_status_marks_a_stopped_node_as_not_answering_and_it_answers_again(
    deployment: Any, capsys: Any
) -> None:
    """``status`` answers from the nodes' last reports (it asks no node): a SIGSTOPped
    local manager's report grows old and it is shown as not answering, with its last
    figures (the other nodes' reports stay fresh: the monitor does not wait on it), in
    ``--json`` and in the table; after SIGCONT it answers again."""
    from runtime.config import LOCAL_PREFIX

    cluster, _ = deployment
    info = ready_of(LOCAL_PREFIX + "n0")
    assert info is not None
    pid = int(info["pid"])

    def node(name: str) -> dict[str, Any]:
        return next(n for n in status(capsys, cluster.address)["nodes"] if n["name"] == name)

    os.kill(pid, signal.SIGSTOP)
    try:
        silent = wait_for(lambda: (n := node("n0"))["answering"] is False and n)
        assert "not answering" in silent["error"] and silent["ready"] is False
        others = [n for n in status(capsys, cluster.address)["nodes"] if n["name"] != "n0"]
        assert all(n["answering"] and n["model_time"] is not None for n in others)
        code, out, err = run_cli(capsys, "status", "--address", cluster.address)
        assert code == 0, (code, out, err)
        (row,) = [line for line in out.splitlines() if line.startswith("n0 ")]
        assert "not answering" in row
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: (n := node("n0"))["answering"] and n["health"] == "up", timeout=120)


def test_down_removes_the_restart_files_of_a_node_that_does_not_answer(
    deployment: Any, capsys: Any
) -> None:
    """Last in this module (it takes the deployment down): a local manager that cannot
    answer ``shutdown`` (SIGSTOPped) cannot remove its own checkpoint; ``down`` does,
    with every other restart file of the deployment."""
    import coalloc
    from runtime.config import LOCAL_PREFIX
    from runtime.state import coalloc_home

    cluster, _ = deployment
    epoch = coalloc.connect(cluster.address).deployment()["epoch"]
    # A checkpoint being written at this moment has a hidden temporary beside it
    # (workloads/atomic.py: written, then renamed over its target): not a restart file.
    files = sorted(f for f in (coalloc_home() / "runtime").glob(f"*-{int(epoch * 1000)}.*")
                   if not f.name.startswith("."))
    assert {f.name.split("-", 1)[0] for f in files} == {"gm", "ctl", "lm"}, files
    info = ready_of(LOCAL_PREFIX + "n1")
    assert info is not None
    os.kill(int(info["pid"]), signal.SIGSTOP)
    try:
        code, out, err = run_cli(capsys, "down", "--address", cluster.address)
    finally:
        try:
            os.kill(int(info["pid"]), signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert code == 0, err
    assert not [f for f in files if f.exists()]
