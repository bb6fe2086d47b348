"""A real Prometheus server for the tests, and the queries of coalloc's Grafana dashboard.

It lives with the tests (imported by name, as ``ntp_responder``): :class:`PrometheusServer`
runs Debian's ``prometheus`` binary on a free loopback port with a temporary storage
directory and ``deploy/prometheus.yml`` rewritten for the test (its file-based service
discovery file replaced by one listing the given targets, a short scrape interval), and
answers PromQL through Prometheus's HTTP API. :func:`dashboard_queries` reads
``deploy/grafana/coalloc.json``'s panel queries with Grafana's variables replaced by what
selects everything.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS_YML = ROOT / "deploy" / "prometheus.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "coalloc.json"

#: What the dashboard's variables stand for when a test runs its queries: every session,
#: every job, and a rate window holding a few scrapes at the tests' scrape interval.
VARIABLES = {"$SessionName": ".+", "$job_id": ".+", "$__rate_interval": "1m"}


def prometheus_binary() -> str | None:
    """The ``prometheus`` executable (PATH, then Debian's /usr/bin), or None."""
    found = shutil.which("prometheus")
    if found:
        return found
    return "/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None


@dataclass(frozen=True, slots=True)
class PanelQuery:
    """One target of a dashboard panel: its panel's title, its ``refId``, its PromQL as
    written (``raw``) and with the variables replaced (``expr``)."""

    panel: str
    ref: str
    raw: str
    expr: str


def dashboard_queries(path: Path = DASHBOARD) -> list[PanelQuery]:
    """Every panel target's query, rows' nested panels included."""
    data = json.loads(path.read_text(encoding="utf-8"))
    out = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                expr = raw = str(t["expr"])
                for var, value in VARIABLES.items():
                    expr = expr.replace(var, value)
                out.append(PanelQuery(str(p.get("title")), str(t.get("refId")), raw, expr))

    walk(data["panels"])
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (``ray_*`` identifiers outside label
    matchers and strings)."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    bare = re.sub(r"\{[^}]*\}", "", bare)
    return set(re.findall(r"\bray_[a-zA-Z0-9_:]*", bare))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusServer:
    """``prometheus`` scraping ``targets`` (``host:port``) every ``scrape_s`` seconds;
    a context manager (the process is stopped and its directory removed on exit)."""

    def __init__(self, binary: str, targets: list[str], scrape_s: float = 1.0) -> None:
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="coalloc-prometheus-"))
        self.targets_file = self.dir / "targets.json"
        self.set_targets(targets)
        config = yaml.safe_load(PROMETHEUS_YML.read_text(encoding="utf-8"))
        config["global"]["scrape_interval"] = f"{scrape_s:g}s"
        config["global"]["evaluation_interval"] = f"{scrape_s:g}s"
        (job,) = config["scrape_configs"]
        (sd,) = job["file_sd_configs"]
        sd["files"] = [str(self.targets_file)]
        sd["refresh_interval"] = "1s"
        self.config = self.dir / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def set_targets(self, targets: list[str]) -> None:
        """Write the discovery file as Ray's head does (one group, label ``job: ray``)."""
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": targets}]))
        tmp.replace(self.targets_file)

    def __enter__(self) -> PrometheusServer:
        for _ in range(3):  # a free port may be taken before Prometheus binds it
            port = free_port()
            log = (self.dir / "prometheus.log").open("wb")
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={self.config}",
                 f"--storage.tsdb.path={self.dir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
            log.close()
            self.url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60.0
            while self.proc.poll() is None and time.monotonic() < deadline:
                if self._ready():
                    return self
                time.sleep(0.1)
            self._stop()
        self.__exit__()
        raise RuntimeError(f"prometheus did not start: {self.log_tail()}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def log_tail(self) -> str:
        path = self.dir / "prometheus.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def _stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def __exit__(self, *exc: object) -> None:
        self._stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ the API
    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/<path>``'s ``data``; raises ``AssertionError`` with Prometheus's
        error for a query it refuses."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as err:
            body = json.loads(err.read() or b"{}")
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (each ``{"metric": labels, "value": [t, v]}``)."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def query_range(self, expr: str, seconds: float = 120.0, step: float = 1.0) -> list[Any]:
        """A range query over the last ``seconds``: its matrix."""
        end = time.time()
        data = self.api("query_range", query=expr, start=f"{end - seconds:.3f}",
                        end=f"{end:.3f}", step=f"{step:g}")
        return list(data["result"])

    def values(self, expr: str, label: str | None = None) -> dict[str, float]:
        """An instant query's values by ``label`` (``""`` for a series without it)."""
        return {s["metric"].get(label, "") if label else "": float(s["value"][1])
                for s in self.query(expr)}

    def targets_up(self) -> int:
        """Targets whose last scrape succeeded."""
        return sum(1 for t in self.api("targets")["activeTargets"] if t.get("health") == "up")
