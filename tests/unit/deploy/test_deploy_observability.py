"""deploy/prometheus.yml and deploy/grafana/coalloc.json against the metrics the runtime
defines (``runtime.metrics.METRICS``): every panel query reads only exported metrics, the
dashboard shows every metric, its layout and variables are sound (nothing is started
here; tests/integration/test_runtime_insecure_ray.py runs every query against a real
Prometheus)."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest
import yaml
from prometheus_server import DASHBOARD, PROMETHEUS_YML, VARIABLES, dashboard_queries, metric_names

from runtime.metrics import METRICS, MetricKind, exported_names

#: Grafana 11.x writes classic dashboards at schema 39 and later.
MIN_SCHEMA = 39


def dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_every_panel_query_reads_only_metrics_the_runtime_exports() -> None:
    queries = dashboard_queries()
    assert queries
    exported = exported_names()
    for q in queries:
        names = metric_names(q.raw)
        assert names, f"{q.panel}/{q.ref}: reads no coalloc metric: {q.raw}"
        assert names <= exported, f"{q.panel}/{q.ref}: not exported: {names - exported}"


def test_the_dashboard_shows_every_metric() -> None:
    shown = {n for q in dashboard_queries() for n in metric_names(q.raw)}
    for m in METRICS:
        assert set(m.prometheus_names()) & shown, f"no panel shows {m.name}"


def test_metric_names_reads_names_not_labels_or_strings() -> None:
    expr = 'sum by (reason) (rate(ray_a_total{x="ray_b"}[1m])) / ray_c'
    assert metric_names(expr) == {"ray_a_total", "ray_c"}


def test_layout_ids_datasource_and_variables() -> None:
    d = dashboard()
    assert d["schemaVersion"] >= MIN_SCHEMA
    assert d["uid"] and d["title"]
    panels = d["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
            assert p["targets"] and p["description"], p["title"]
    names = {v["name"] for v in d["templating"]["list"]}
    assert {"datasource", "SessionName", "job_id"} <= names
    used = {var for q in dashboard_queries() for var in VARIABLES if var in q.raw}
    assert used - {"$__rate_interval"} <= {f"${n}" for n in names}
    for q in dashboard_queries():
        assert "$" not in q.expr, f"{q.panel}/{q.ref}: unknown variable in {q.raw}"


def test_prometheus_yml_scrapes_rays_service_discovery_file() -> None:
    cfg = yaml.safe_load(PROMETHEUS_YML.read_text(encoding="utf-8"))
    (job,) = cfg["scrape_configs"]
    assert job["job_name"] == "ray"
    (sd,) = job["file_sd_configs"]
    assert sd["files"] == ["/tmp/ray/prom_metrics_service_discovery.json"]


def test_prometheus_yml_passes_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    run = subprocess.run([promtool, "check", "config", str(PROMETHEUS_YML)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def test_observability_doc_lists_every_metric_with_its_labels_and_unit() -> None:
    doc = (DASHBOARD.parents[2] / "docs" / "observability.md").read_text(encoding="utf-8")
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`ray_"):
            rows[cells[0].strip("`")] = cells
    for m in METRICS:
        # A counter under its series name, a histogram under its base name.
        name = m.exported + ("_total" if m.kind is MetricKind.COUNTER else "")
        assert name in rows, f"docs/observability.md does not list {name}"
        kind, labels, unit = rows[name][1:4]
        assert kind == m.kind.value, name
        assert [t.strip() for t in labels.split(",") if t.strip()] == list(m.tags), name
        assert unit == m.unit, name
    assert len(rows) == len(METRICS)
