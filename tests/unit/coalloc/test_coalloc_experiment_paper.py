"""``coalloc experiment paper`` end to end on a tiny matrix, its seeds and its errors."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from coalloc import cli
from coalloc.experiments import paper
from coallocator.phase_log import read_log
from global_manager.simulator import SimConfig, simulate
from workloads.generator import PaperWorkloadParams, generate

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY = ["--nodes", "3,4", "--lam", "10,500", "--policies", "sq,strict", "--jobs", "30",
        "--seed", "5"]


def read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """The tiny matrix written with one worker and with two."""
    out = {}
    for workers in (1, 2):
        d = tmp_path_factory.mktemp(f"paper-w{workers}")
        code = cli.main(["experiment", "paper", *TINY, "--workers", str(workers),
                         "--out", str(d), "--quiet"])
        assert code == 0
        out[workers] = d
    return out


def test_worker_count_does_not_change_results_or_logs(runs: dict[int, Path]) -> None:
    one, two = runs[1], runs[2]
    assert (one / "results.csv").read_bytes() == (two / "results.csv").read_bytes()
    logs = sorted(p.name for p in (one / "logs").iterdir())
    assert logs == sorted(p.name for p in (two / "logs").iterdir())
    for name in logs:
        assert (one / "logs" / name).read_bytes() == (two / "logs" / name).read_bytes()


def test_files_columns_and_rows(runs: dict[int, Path]) -> None:
    out = runs[2]
    columns, rows = read_rows(out / "results.csv")
    assert tuple(columns) == paper.CSV_COLUMNS
    # One row per nodes x lambda x policy, in that order.
    assert [(r["nodes"], r["lam"], r["policy"]) for r in rows] == [
        (n, lam, p) for n in ("3", "4") for lam in ("10.0", "500.0") for p in ("sq", "strict")]
    for r in rows:
        assert int(r["submitted"]) >= int(r["admitted"]) >= int(r["completed"])
        assert float(r["acceptance_ratio"]) == int(r["admitted"]) / int(r["submitted"])
        assert 0.0 <= float(r["utilization"]) <= 1.0
    assert sorted(p.name for p in (out / "logs").iterdir()) == sorted(
        f"n{n}-lam{lam}-{p}.jsonl" for n in (3, 4) for lam in (10, 500) for p in ("sq", "strict"))
    for png in ("phase_difference.png", "acceptance.png"):
        data = (out / png).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 1000
    payload = json.loads((out / "results.json").read_text())
    assert payload["config"]["workers"] == 2
    assert payload["config"]["work_conserving"] is False
    assert payload["config"]["cell_seeds"]["n3-lam10"] == paper.cell_seed(5, 3, 10.0)
    assert len(payload["rows"]) == len(rows)
    assert all(row["wall_seconds"] > 0 for row in payload["rows"])


def test_a_cell_equals_a_direct_simulation(runs: dict[int, Path]) -> None:
    """The row and the log of (4 nodes, lambda 500, sq) match simulate() called by hand."""
    _, rows = read_rows(runs[2] / "results.csv")
    row = next(r for r in rows if (r["nodes"], r["lam"], r["policy"]) == ("4", "500.0", "sq"))
    seed = paper.cell_seed(5, 4, 500.0)
    workload = generate(PaperWorkloadParams(nodes=4, mean_interarrival=500.0, jobs=30,
                                            rate_per_weight=paper.DEFAULT_RATE_PER_WEIGHT), seed)
    result = simulate(workload, "sq", seed=seed,
                      config=SimConfig(cycle=30.0, work_conserving=False, log_every=10,
                                       rate_per_weight=paper.DEFAULT_RATE_PER_WEIGHT),
                      keep_records=True)
    strict = [j for j in result.jobs if j.qos == "strict"]
    phase = [j for j in strict if j.completed and j.subtasks >= 2]
    assert phase, "the cell should complete some multi-subtask strict jobs"
    assert int(row["submitted"]) == len(strict) == 30
    assert int(row["admitted"]) == sum(j.admitted for j in strict)
    assert int(row["completed"]) == sum(j.completed for j in strict)
    assert int(row["phase_jobs"]) == len(phase)
    mean_phi = math.fsum(j.mean_phase_difference or 0.0 for j in phase) / len(phase)
    assert float(row["mean_phase_difference"]) == pytest.approx(mean_phi, rel=1e-12)
    assert float(row["max_phase_difference"]) == max(j.max_phase_difference or 0.0
                                                      for j in phase)
    util = result.utilization
    assert float(row["utilization"]) == pytest.approx(sum(util.values()) / len(util))
    assert int(row["cycles"]) == result.cycles
    # The log file holds exactly the records the run produced.
    logged = list(read_log(runs[2] / "logs" / "n4-lam500-sq.jsonl"))
    assert len(logged) == len(result.records)
    summaries = {r["job"]: r for r in logged if r["type"] == "summary"}
    for j in phase:
        assert summaries[j.job_id]["mean_phase_difference"] == j.mean_phase_difference


def test_the_same_workload_for_every_policy_of_a_cell() -> None:
    cells = paper.make_cells([3, 6], [10.0, 500.0], ["sq", "strict", "none"], seed=1)
    by_cell: dict[tuple[int, float], set[int]] = {}
    for c in cells:
        by_cell.setdefault((c.nodes, c.lam), set()).add(c.seed)
    assert all(len(seeds) == 1 for seeds in by_cell.values())
    assert len({next(iter(s)) for s in by_cell.values()}) == 4  # cells differ
    assert paper.cell_seed(1, 3, 10) == paper.cell_seed(1, 3, 10.0)
    assert paper.cell_seed(1, 3, 10.0) != paper.cell_seed(2, 3, 10.0)
    assert 0 <= paper.cell_seed(123, 12, 500.0) < 2**63


def test_no_logs_with_log_every_zero(tmp_path: Path) -> None:
    code = cli.main(["experiment", "paper", "--nodes", "3", "--lam", "500", "--jobs", "5",
                     "--workers", "1", "--log-every", "0", "--out", str(tmp_path), "--quiet"])
    assert code == 0
    assert not (tmp_path / "logs").exists()
    assert (tmp_path / "results.csv").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--nodes", "0"], "--nodes: must be >= 1, got 0"),
        (["--nodes", "3,x"], "--nodes: 'x' is not an integer"),
        (["--lam", "abc"], "--lam: 'abc' is not a number"),
        (["--lam", "-5"], "--lam: must be a finite number of seconds > 0"),
        (["--lam", "10,10"], "--lam: 10.0 is given twice"),
        (["--policies", "sq,fifo"], "--policies: unknown policy 'fifo'"),
        (["--policies", "stric"], "did you mean 'strict'?"),
        (["--jobs", "0"], "--jobs: must be >= 1"),
        (["--workers", "two"], "--workers: 'two' is not an integer"),
        (["--cycle", "0"], "--cycle: must be a finite number of seconds > 0"),
        (["--log-every", "-1"], "--log-every: must be >= 0"),
    ],
)
def test_bad_flags_are_one_line_errors(tmp_path: Path, capsys, flags: list[str],
                                       message: str) -> None:
    code = cli.main(["experiment", "paper", *flags, "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # nothing written before the flags are checked


def test_price_columns_agree_with_the_run(runs: dict[int, Path]) -> None:
    """The price-of-co-allocation columns of (4 nodes, lambda 500, strict) recomputed from
    simulate(): violation fractions over the admitted strict jobs' control periods, p95
    turnaround, QoS utilisation and idle virtual CPU; tradeoff.png is written."""
    _, rows = read_rows(runs[2] / "results.csv")
    row = next(r for r in rows if (r["nodes"], r["lam"], r["policy"]) == ("4", "500.0", "strict"))
    seed = paper.cell_seed(5, 4, 500.0)
    workload = generate(PaperWorkloadParams(nodes=4, mean_interarrival=500.0, jobs=30,
                                            rate_per_weight=paper.DEFAULT_RATE_PER_WEIGHT), seed)
    result = simulate(workload, "strict", seed=seed,
                      config=SimConfig(cycle=30.0, work_conserving=False,
                                       rate_per_weight=paper.DEFAULT_RATE_PER_WEIGHT))
    admitted = [j for j in result.jobs if j.qos == "strict" and j.admitted]
    periods = sum(j.control_periods for j in admitted)
    assert periods > 0
    # strict runs no controller: its subtasks drift apart, so some periods exceed A_t
    viol = sum(j.window_violations for j in admitted) / periods
    assert float(row["window_violation_fraction"]) == pytest.approx(viol)
    assert 0.0 < viol <= 1.0
    overall = sum(j.overall_violations for j in admitted) / periods
    assert float(row["overall_violation_fraction"]) == pytest.approx(overall)
    turnarounds = sorted(j.turnaround for j in admitted if j.turnaround is not None)
    assert turnarounds[0] <= float(row["p95_turnaround"]) <= turnarounds[-1]
    assert float(row["qos_utilization"]) == pytest.approx(result.qos_utilization)
    assert float(row["idle_virtual_fraction"]) == 0.0  # strict has no virtual subtasks
    assert row["overbooking"] == ""
    sq_row = next(r for r in rows if (r["nodes"], r["lam"], r["policy"]) == ("4", "500.0", "sq"))
    assert float(sq_row["overbooking"]) == 0.05
    data = (runs[2] / "tradeoff.png").read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000


def test_overbooking_flag_runs_each_overbooking_policy_per_ratio(tmp_path: Path) -> None:
    code = cli.main(["experiment", "paper", "--nodes", "3", "--lam", "500", "--policies",
                     "sq,strict", "--jobs", "10", "--overbooking", "0,20", "--out",
                     str(tmp_path), "--quiet", "--workers", "1"])
    assert code == 0
    _, rows = read_rows(tmp_path / "results.csv")
    assert [(r["policy"], r["overbooking"]) for r in rows] == [
        ("sq", "0.0"), ("sq", "0.2"), ("strict", "")]
    names = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert names == ["n3-lam500-sq-ob0.jsonl", "n3-lam500-sq-ob20.jsonl",
                     "n3-lam500-strict.jsonl"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--overbooking", "-5"], "--overbooking: must be a finite percentage >= 0"),
        (["--overbooking", "x"], "--overbooking: 'x' is not a percentage"),
        (["--rate-per-weight", "0"], "--rate-per-weight"),
    ],
)
def test_bad_price_flags_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    code = cli.main(["experiment", "paper", "--out", str(tmp_path), "--quiet", *flags])
    assert code == 2
    assert message in capsys.readouterr().err
