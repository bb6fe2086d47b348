"""Benchmark: the web dashboard at 64 nodes and 1,000 queued jobs (targets: first
render at most 1 s, and updates that do not re-download everything).

The page is served by the real API server (``runtime.api.ApiServer``) over a synthetic
backend whose status and queue documents have the shape of the live runtime's: 64 nodes,
1,000 pending jobs (each with a reason and an estimated start), 50 running jobs of 3
subtasks each, 200 finished ones. Headless Chromium (the system's, driven by Playwright)
opens the page a few times; printed per load: the real ms from navigation start to the
first whole view drawn (the page's own ``performance.now()``), and, as the reference
measured in the same run and the same browser, the ms the page's two first requests
(status and queue: fetch and JSON parse) took alone; then the bytes of a whole update
(status + queue) and of the shown job's update (``status?job=ID``), the one the page
makes every control period.

Run: ``python3 bench/bench_dashboard.py`` (``--loads N``; needs ``chromium`` and the
``playwright`` package, as the browser test does).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from playwright.sync_api import ConsoleMessage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

TARGET_MS = 1000.0
N_NODES, N_PENDING, N_RUNNING, N_DONE, WIDTH = 64, 1000, 50, 200, 3


def _subtask(i: int, node: str, tv: float) -> dict[str, Any]:
    return {"index": i, "node": node, "executor": "synthetic", "state": "running",
            "work": 1000.0, "done_work": 400.0, "progress": 0.4, "weight": 50.0,
            "virtual_weight": 0.0, "virtual_time": tv, "controller_virtual_time": tv,
            "expected_rate": 50.0, "pid": None, "exit_code": None}


class SyntheticBackend:
    """A live runtime's documents at the sizes above (model time advances per call)."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.nodes = [{"name": f"n{k}", "speed_mhz": 300.0, "cores": 4.0,
                       "labels": ["rack-a" if k % 2 else "rack-b"], "budget": 600.0,
                       "committed": 450.0, "load": 0.75, "health": "up", "ready": True,
                       "running_subtasks": 3, "ray_node_id": f"{k:040x}"}
                      for k in range(N_NODES)]

    def _jobs(self) -> list[dict[str, Any]]:
        jobs = []
        for k in range(N_PENDING):
            jobs.append({"job_id": f"p{k:05d}", "name": f"pending-{k}", "qos": "strict",
                         "user": f"u{k % 7}", "priority": k % 3, "state": "pending",
                         "reason": "subtask 0: no node with 150 Mcycles/s of free budget",
                         "attempt": 1, "history": [], "nodes": [], "run_id": f"p{k:05d}",
                         "asynchrony": 60.0, "overall_deviation": 120.0, "wait": 30.0 + k,
                         "estimated_start": self.t + 100 + k, "start_at": None,
                         "estimated_start_time": "2026-01-01T00:00:00+00:00",
                         "subtasks": [], "finished_at": None})
        for k in range(N_RUNNING):
            tvs = [self.t - 5.0 + j for j in range(WIDTH)]
            jobs.append({"job_id": f"r{k:05d}", "name": f"running-{k}", "qos": "strict",
                         "user": "u0", "priority": 0, "state": "running", "reason": "",
                         "attempt": 1, "history": [], "run_id": f"r{k:05d}",
                         "nodes": [f"n{(k * WIDTH + j) % N_NODES}" for j in range(WIDTH)],
                         "asynchrony": 60.0, "overall_deviation": 120.0, "start_at": 500.0,
                         "phase_difference": 2.0, "max_phase_difference": 4.0,
                         "window": "none", "mean_virtual": self.t - 4.0,
                         "rate_caps": [0.0] * WIDTH, "finished_at": None,
                         "subtasks": [_subtask(j, f"n{(k * WIDTH + j) % N_NODES}", tv)
                                      for j, tv in enumerate(tvs)]})
        for k in range(N_DONE):
            jobs.append({"job_id": f"d{k:05d}", "name": f"done-{k}", "qos": "strict",
                         "user": "u1", "priority": 0, "state": "completed", "reason": "",
                         "attempt": 1, "history": [], "nodes": [], "run_id": f"d{k:05d}",
                         "finished_at": float(k), "mean_phase_difference": 1.0,
                         "max_phase_difference": 3.0, "window_violation_fraction": 0.0,
                         "completion_skew": 0.5, "turnaround": 300.0, "subtasks": []})
        return jobs

    def status(self, job_id: str | None = None, all_jobs: bool = False) -> dict[str, Any]:
        # The API's backend interface (runtime.api); nothing here is archived.
        self.t += 3.0
        jobs = [j for j in self._jobs() if job_id in (None, j["job_id"])]
        return {"address": "synthetic:6379", "policy": "sq", "time_scale": 100.0,
                "cycle": 1.0, "control_period": 30.0, "model_time": self.t,
                "nodes": self.nodes, "jobs": jobs}

    def queue(self) -> list[dict[str, Any]]:
        keys = ("job_id", "name", "qos", "user", "priority", "state", "wait", "reason",
                "nodes", "attempt", "start_at", "estimated_start", "estimated_start_time")
        live = [j for j in self._jobs() if j["state"] in ("pending", "running")]
        return [{k: j.get(k) for k in keys} for j in live]

    def authenticate(self, token: str | None) -> Any:
        from runtime.identity import Identity, Refusal, Role

        return Identity("bench", Role.ADMIN) if token == "bench-token" else Refusal.UNKNOWN

    def deployment(self) -> dict[str, Any]:
        return {}

    def job(self, job_id: str) -> None:
        return None

    def job_states(self, job_ids: Any = None) -> dict[str, str]:
        return {}

    def submit_documents(self, *args: Any) -> list[Any]:
        return []

    def submit_file(self, *args: Any) -> list[Any]:
        return []

    def cancel_jobs(self, *args: Any) -> list[Any]:
        return []


def _error_collector(errors: list[str]) -> Callable[[ConsoleMessage], None]:
    """A page's console listener that appends each error message's text to ``errors``."""

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    return on_console


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=5, help="page loads measured")
    args = parser.parse_args()
    from browser import CHROMIUM_FLAGS, chromium_binary
    from playwright.sync_api import sync_playwright

    from runtime.api import ApiBackend, ApiServer

    binary = chromium_binary()
    if binary is None:
        print("chromium not installed (Debian: apt-get install -y chromium)")
        return 2
    backend = SyntheticBackend()
    # Its documents are plain JSON of the live shape: the API serves them as they are.
    server = ApiServer(cast("ApiBackend", backend), "127.0.0.1", 0)
    status_bytes = len(json.dumps(backend.status()))
    queue_bytes = len(json.dumps(backend.queue()))
    one = len(json.dumps(backend.status("r00000")))
    render, fetch = [], []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=binary, headless=True,
                                         args=list(CHROMIUM_FLAGS))
            for _ in range(args.loads):
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                errors: list[str] = []
                page.on("console", _error_collector(errors))
                page.goto(f"{server.url}/?token=bench-token")
                page.wait_for_selector("body[data-first-render-ms]", state="attached")
                render.append(float(page.evaluate("document.body.dataset.firstRenderMs")))
                rows = page.eval_on_selector_all("#queue tbody tr", "r => r.length")
                nodes = page.eval_on_selector_all("#nodes tbody tr", "r => r.length")
                if rows != N_PENDING + N_RUNNING or nodes != N_NODES or errors:
                    print(f"wrong page: {rows} queue rows, {nodes} nodes, errors {errors}")
                    return 1
                fetch.append(float(page.evaluate("""async () => {
                    const t = performance.now();
                    const h = {headers: {Authorization: 'Bearer bench-token'}};
                    await Promise.all([fetch('/api/v1/status', h).then(r => r.json()),
                                       fetch('/api/v1/queue', h).then(r => r.json())]);
                    return performance.now() - t; }""")))
                page.close()
            browser.close()
    finally:
        server.close()
    r, f = statistics.median(render), statistics.median(fetch)
    print(f"{N_NODES} nodes, {N_PENDING} pending + {N_RUNNING} running + {N_DONE} finished "
          f"jobs, {args.loads} loads")
    print(f"first render: median {r:.0f} ms (max {max(render):.0f}; target {TARGET_MS:.0f} ms: "
          f"{'met' if r <= TARGET_MS else 'NOT met'})")
    print(f"reference, status + queue fetched and parsed alone: median {f:.0f} ms; "
          f"render / fetch = {r / f:.1f}")
    # The page's rule (dashboard.js, every()): min(15, max(2 s, control period, bytes / 50 kB/s)).
    def every(n: int) -> float:
        return min(15.0, max(2.0, 0.3, n / 50_000))
    rate = status_bytes / every(status_bytes) + queue_bytes / every(queue_bytes) + one / 0.5
    print(f"bytes: whole status {status_bytes / 1e3:.0f} kB every {every(status_bytes):.1f} s, "
          f"queue {queue_bytes / 1e3:.0f} kB every {every(queue_bytes):.1f} s; the shown job's "
          f"status {one / 1e3:.1f} kB every control period (at least every 0.5 s): "
          f"{rate / 1e3:.0f} kB/s in all, against "
          f"{(status_bytes + queue_bytes) / 0.5 / 1e3:.0f} kB/s if everything were fetched "
          "every 0.5 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
