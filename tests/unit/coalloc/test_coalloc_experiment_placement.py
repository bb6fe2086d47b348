"""coalloc experiment placement: a tiny matrix writes its files; Jain's index; flags."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path

import pytest

from coalloc.cli import main
from coalloc.experiments.placement import (
    CSV_COLUMNS,
    Cell,
    assign_users,
    jain,
    jain_over_contention,
    run_cell,
)
from global_manager.simulator import JobResult
from workloads.model import JobSpec, QosClass, SubtaskSpec


def test_tiny_matrix_writes_csv_json_and_png(tmp_path: Path) -> None:
    out = tmp_path / "pl"
    rc = main(["experiment", "placement", "--out", str(out), "--nodes", "3", "--lam", "20",
               "--jobs", "12", "--users", "2", "--workers", "1", "--quiet"])
    assert rc == 0
    with open(out / "results.csv", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [r[2] for r in rows[1:]] == ["flow", "least_loaded", "random"]
    for r in rows[1:]:
        d = dict(zip(CSV_COLUMNS, r))
        assert d["submitted"] == d["completed"] == "12"  # queue=wait: every job ends completed
        assert d["users"] == "2"
    data = json.loads((out / "results.json").read_text())
    assert data["config"]["queue"] == "wait" and len(data["rows"]) == 3
    assert (out / "placement.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_cell_is_deterministic_apart_from_solver_time() -> None:
    cell = Cell(3, 20.0, "flow", 2, 12, seed=5)
    a, b = run_cell(cell), run_cell(cell)
    strip = {"solver_ms_per_cycle": None}
    assert asdict(a) | strip == asdict(b) | strip
    assert a.placement_cycles > 0


def test_bad_flags(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc = main(["experiment", "placement", "--out", str(tmp_path), "--placements", "flwo"])
    assert rc != 0
    assert "--placements: unknown placement 'flwo'; did you mean 'flow'?" in capsys.readouterr().err
    rc = main(["experiment", "placement", "--out", str(tmp_path), "--users", "0"])
    assert rc != 0
    assert "--users: must be >= 1, got 0" in capsys.readouterr().err


def test_jain_index() -> None:
    assert jain([1.0, 1.0, 1.0]) == 1.0
    assert jain([1.0, 0.0]) == pytest.approx(0.5)
    assert jain([0.0, 0.0]) == 1.0


def _jr(job_id: str, user: str, arrival: float, wait: float, turnaround: float) -> JobResult:
    return JobResult(job_id, job_id, "strict", 1, arrival, True, "", True, None, None, None,
                     turnaround, wait=wait, state="completed", user=user)


def test_jain_over_contention_by_hand() -> None:
    # a (user x) runs 0..100 holding 10; b (x) and c (y) wait 0..100, then run.
    jobs = [_jr("a", "x", 0.0, 0.0, 100.0), _jr("b", "x", 0.0, 100.0, 200.0),
            _jr("c", "y", 0.0, 100.0, 200.0)]
    rates = {"a": 10.0, "b": 10.0, "c": 10.0}
    # 0..100: x holds 10, y 0, both waiting: Jain 0.5; after 100 nobody waits.
    assert jain_over_contention(jobs, rates, 100.0, 300.0) == pytest.approx(0.5)
    assert jain_over_contention(jobs[:2], rates, 100.0, 300.0) is None  # one user waits


def test_start_estimate_mae_by_hand() -> None:
    from dataclasses import replace

    from coalloc.experiments.placement import start_estimate_mae

    # a: estimated 50, started 0 + 80 = 80 -> 30; b: estimated 300, started 10 + 250 =
    # 260 -> 40; c: never estimated (placed at once); d: estimated but never started.
    jobs = [replace(_jr("a", "x", 0.0, 80.0, 100.0), estimated_start=50.0),
            replace(_jr("b", "x", 10.0, 250.0, 300.0), estimated_start=300.0),
            _jr("c", "x", 0.0, 0.0, 10.0),
            replace(_jr("d", "x", 0.0, 0.0, 1.0), wait=None, estimated_start=5.0)]
    assert start_estimate_mae(jobs) == pytest.approx(35.0)
    assert start_estimate_mae(jobs[2:]) is None


def test_a_cell_with_waiting_jobs_reports_its_estimate_error() -> None:
    row = run_cell(Cell(3, 20.0, "least_loaded", 2, 12, 0))
    assert row.start_estimate_mae is not None and row.start_estimate_mae >= 0.0


def test_assign_users_is_seeded_and_only_for_strict_jobs() -> None:
    jobs = [JobSpec(f"s{i}", QosClass.STRICT, (SubtaskSpec(1.0),), 1.0, 1.0) for i in range(50)]
    jobs.append(JobSpec("b", QosClass.BEST_EFFORT, (SubtaskSpec(1.0),)))
    a, b = assign_users(jobs, 3, 1), assign_users(jobs, 3, 1)
    assert a == b
    assert {j.user for j in a[:-1]} == {"u0", "u1", "u2"} and a[-1].user == "default"
    counts = [sum(j.user == f"u{k}" for j in a) for k in range(3)]
    assert counts[0] > counts[2]  # weights 1, 1/2, 1/3
    assert assign_users(jobs, 3, 2) != a
