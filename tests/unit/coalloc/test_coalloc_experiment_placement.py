"""coalloc experiment placement: a tiny matrix (a row per policy x placement x cell, the
same for any worker count), the new columns' arithmetic by hand, Jain's index, flags."""

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
    mean_run_over_nominal,
    nominal_durations,
    run_cell,
    summarize,
)
from global_manager.simulator import JobResult, RunResult
from workloads.model import JobSpec, Node, QosClass, SubtaskSpec, Workload

# The ``runs`` fixture (conftest.py): the tiny matrix (2 x 2 cells, sq and strict, flow
# and least_loaded) written with one worker and, again, with two.
EXPERIMENT = "placement"
TINY = ["--nodes", "3,4", "--lam", "20,200", "--jobs", "12", "--users", "2", "--seed", "3",
        "--placements", "flow,least_loaded", "--quiet"]


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def _f(value: str) -> float:
    return float(value)


def test_a_row_per_policy_placement_and_cell_with_sane_columns(runs: dict[int, Path]) -> None:
    header, rows = read_csv(runs[1] / "results.csv")
    assert tuple(header) == CSV_COLUMNS
    keys = [(r["nodes"], r["lam"], r["policy"], r["placement"]) for r in rows]
    assert keys == [(n, lam, pol, pl) for n in ("3", "4") for lam in ("20.0", "200.0")
                    for pol in ("sq", "strict") for pl in ("flow", "least_loaded")]
    for r in rows:
        assert r["submitted"] == r["completed"] == "12"  # queue=wait: every job completes
        assert r["users"] == "2"
        assert 0.0 < _f(r["utilization"]) <= 1.0
        assert _f(r["qos_utilization"]) > 0.0  # may pass 1: work-conserving queues
        assert 0.0 <= _f(r["mean_wait"]) <= _f(r["max_wait"])
        assert _f(r["p95_wait"]) <= _f(r["max_wait"])
        assert _f(r["mean_wait"]) < _f(r["mean_turnaround"])
        assert _f(r["mean_turnaround"]) <= _f(r["end_time"])
        assert _f(r["p95_turnaround"]) <= _f(r["end_time"])
        assert _f(r["mean_run_over_nominal"]) > 0.0
        assert 0.0 <= _f(r["window_violation_fraction"]) <= 1.0
        assert 0.0 < _f(r["solver_ms_per_cycle"])
    by = {(r["nodes"], r["lam"], r["policy"], r["placement"]): r for r in rows}
    for n in ("3", "4"):
        for lam in ("20.0", "200.0"):
            # The controller keeps sq's gangs in step; strict runs none.
            sq, st = by[(n, lam, "sq", "flow")], by[(n, lam, "strict", "flow")]
            assert _f(sq["mean_phase_difference"]) < _f(st["mean_phase_difference"])
            assert _f(sq["window_violation_fraction"]) <= _f(st["window_violation_fraction"])
    data = json.loads((runs[1] / "results.json").read_text())
    assert data["config"]["queue"] == "wait" and data["config"]["work_conserving"] is True
    assert data["config"]["policies"] == ["sq", "strict"] and len(data["rows"]) == 16
    assert (runs[1] / "placement.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_same_seed_same_results_for_any_worker_count(runs: dict[int, Path]) -> None:
    """results.csv is the same whatever the worker count, but for the one measured
    column (the solver's wall time)."""
    header, one = read_csv(runs[1] / "results.csv")
    _, two = read_csv(runs[2] / "results.csv")
    strip = {"solver_ms_per_cycle": ""}
    assert [r | strip for r in one] == [r | strip for r in two]
    assert "solver_ms_per_cycle" in header


def test_the_runs_use_the_live_runtime_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell is simulated under runtime_core() with only q, u_t and max_time changed."""
    import global_manager.simulator as simulator
    from runtime.config import runtime_core

    seen = []
    real = simulator.simulate

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(kwargs["config"])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(simulator, "simulate", spy)
    run_cell(Cell(3, 20.0, "flow", 2, 6, seed=1, cycle=15.0, policy="strict"))
    assert seen == [runtime_core(cycle=15.0, rate_per_weight=12.5)]


def test_run_cell_is_deterministic_apart_from_solver_time() -> None:
    cell = Cell(3, 20.0, "flow", 2, 12, seed=5)
    a, b = run_cell(cell), run_cell(cell)
    strip = {"solver_ms_per_cycle": None}
    assert asdict(a) | strip == asdict(b) | strip
    assert a.placement_cycles > 0 and a.policy == "sq"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--placements", "flwo"], "--placements: unknown placement 'flwo'; did you mean 'flow'?"),
        (["--policies", "sq,strcit"], "--policies: unknown policy 'strcit'; did you mean "
                                      "'strict'?"),
        (["--policies", "sq,fifo"], "--policies: unknown policy 'fifo'; known: "),
        (["--policies", " , "], "--policies: must name at least one policy"),
        (["--policies", "sq,sq"], "--policies: sq is given twice"),
        (["--users", "0"], "--users: must be >= 1, got 0"),
    ],
)
def test_bad_flags_are_one_line_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                       flags: list[str], message: str) -> None:
    rc = main(["experiment", "placement", "--out", str(tmp_path / "o"), *flags])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_policies_default_and_any_registered_name() -> None:
    from coalloc.experiments.paper import _policy_list
    from coalloc.experiments.placement import DEFAULT_POLICIES

    assert DEFAULT_POLICIES == ("sq", "strict")
    assert _policy_list("sq_paper, none") == ["sq_paper", "none"]


def _job(job_id: str, wait: float | None, turnaround: float | None, state: str = "completed",
         periods: int = 0, violations: int = 0, admitted: bool = True) -> JobResult:
    return JobResult(job_id, job_id, "strict", 2, 0.0, admitted, "", state == "completed",
                     1.0, 2.0, 0.5, turnaround, control_periods=periods,
                     window_violations=violations, wait=wait, state=state, user="u0")


def test_nominal_duration_is_the_slowest_subtask_at_its_expected_rate() -> None:
    jobs = [JobSpec("a", QosClass.STRICT, (SubtaskSpec(1000.0, 2.0), SubtaskSpec(600.0, 1.0)),
                    1.0, 1.0, job_id="a"),
            JobSpec("b", QosClass.STRICT, parallelism=2, total_work=10.0, total_weight=2.0,
                    job_id="b")]
    # a: 1000 / (2 * 10) = 50 s and 600 / (1 * 10) = 60 s: the slower one.
    assert nominal_durations(jobs, 10.0) == {"a": pytest.approx(60.0)}


def test_mean_run_over_nominal_by_hand() -> None:
    done = [_job("a", 10.0, 110.0), _job("b", 0.0, 30.0), _job("c", None, 40.0)]
    nominal = {"a": 50.0, "b": 60.0, "c": 80.0}
    # a: (110 - 10) / 50 = 2; b: 30 / 60 = 0.5; c (no wait recorded): 40 / 80 = 0.5
    assert mean_run_over_nominal(done, nominal) == pytest.approx(1.0)
    assert mean_run_over_nominal(done, {"a": 50.0}) == pytest.approx(2.0)  # others unknown
    assert mean_run_over_nominal([], nominal) is None


def test_summarize_by_hand() -> None:
    """Every new column of a hand-built run: p95 and max of the waits and turnarounds, run
    time over nominal, window violations over the admitted jobs' periods, the two
    utilisations (the paper experiment's definitions)."""
    jobs = (
        _job("a", 0.0, 100.0, periods=8, violations=1),
        _job("b", 20.0, 220.0, periods=2, violations=1),
        _job("c", 40.0, None, state="running", periods=10, violations=0),
        _job("d", None, None, state="pending", admitted=False),
    )
    specs = tuple(JobSpec(j, QosClass.STRICT, (SubtaskSpec(1000.0, 1.0),), 1.0, 1.0, job_id=j)
                  for j in "abcd")
    workload = Workload((Node("n0", 100.0), Node("n1", 200.0)), specs)
    result = RunResult("sq", 0, jobs, {"n0": 0.25, "n1": 0.75}, 500.0, 17,
                       qos_utilization=1.2, placement_cycles=4, placement_seconds=0.002)
    row = summarize(Cell(2, 50.0, "flow", 1, 4, seed=0, rate_per_weight=10.0), workload,
                    result, capacity=100.0)
    assert (row.submitted, row.completed) == (4, 2)
    assert row.mean_wait == pytest.approx(20.0) and row.max_wait == pytest.approx(40.0)
    assert row.p95_wait == pytest.approx(38.0)  # 20 + 0.9 * 20, numpy's linear rule
    assert row.mean_turnaround == pytest.approx(160.0)
    assert row.p95_turnaround == pytest.approx(214.0)  # 100 + 0.95 * 120
    # nominal 1000 / (1 * 10) = 100 s: a runs 100 s (1.0), b 200 s (2.0)
    assert row.mean_run_over_nominal == pytest.approx(1.5)
    assert row.window_violation_fraction == pytest.approx(2 / 20)
    assert row.utilization == pytest.approx(0.5) and row.qos_utilization == 1.2
    assert row.solver_ms_per_cycle == pytest.approx(0.5)
    assert (row.policy, row.placement, row.end_time) == ("sq", "flow", 500.0)


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
    row = run_cell(Cell(3, 10.0, "least_loaded", 2, 16, 0))
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
