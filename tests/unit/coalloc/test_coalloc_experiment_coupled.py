"""coalloc experiment coupled: a tiny matrix (a row per policy and cell, the same for any
worker count and run), its columns' sense, and its flags."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from coalloc.cli import main
from coalloc.experiments.coupled import CSV_COLUMNS, Cell, make_workload

EXPERIMENT = "coupled"  # for the ``runs`` fixture (conftest.py)
TINY = ["--nodes", "3", "--lam", "80,300", "--jobs", "15", "--seed", "2", "--quiet"]


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames or ()) == CSV_COLUMNS
        return list(reader)


def test_a_row_per_policy_and_cell(runs: dict[int, Path]) -> None:
    rows = read_csv(runs[1] / "results.csv")
    assert [(r["lam"], r["policy"]) for r in rows] == [
        (lam, pol) for lam in ("80.0", "300.0") for pol in ("strict", "sq", "sq_lead")]
    for r in rows:
        assert r["wait"] == "spin" and r["coupling"] == "60.0" and r["background"] == "True"
        assert int(r["admitted"]) <= int(r["submitted"])
        assert int(r["completed"]) <= int(r["admitted"])
        for col in ("spin_cpu_s", "local_cpu_s", "best_effort_cpu_s"):
            assert float(r[col]) >= 0.0
        assert float(r["blocked_cpu_s"]) == 0.0  # nobody blocks when members spin
        assert 0.0 < float(r["utilization"]) <= 1.0 + 1e-9
    # Strict members on unequal nodes wait at their exchanges, and spin there.
    assert any(float(r["spin_cpu_s"]) > 0 for r in rows if r["policy"] == "strict")
    assert (runs[1] / "coupled.png").stat().st_size > 0


def test_the_same_rows_for_any_worker_count_and_run(runs: dict[int, Path]) -> None:
    assert (runs[1] / "results.csv").read_bytes() == (runs[2] / "results.csv").read_bytes()


def test_blocking_members_spin_nothing(tmp_path: Path) -> None:
    assert main(["experiment", "coupled", *TINY, "--lam", "300", "--wait", "block",
                 "--no-background", "--coupling", "30", "--policies", "strict",
                 "--workers", "1", "--out", str(tmp_path)]) == 0
    (row,) = read_csv(tmp_path / "results.csv")
    assert row["wait"] == "block" and row["background"] == "False"
    assert row["coupling"] == "30.0"
    assert float(row["spin_cpu_s"]) == 0.0


def test_background_jobs_are_pinned_and_outlast_the_flow() -> None:
    w = make_workload(Cell(3, 100.0, "sq", 10, 1))
    bg = [j for j in w.jobs if j.name.startswith("background-")]
    assert sorted(j.node for j in bg) == ["n0", "n1", "n2"]
    plain = make_workload(Cell(3, 100.0, "sq", 10, 1, background=False))
    assert len(w.jobs) == len(plain.jobs) + 3


@pytest.mark.parametrize(("flags", "message"), [
    (["--wait", "poll"], "--wait: 'poll' is not one of spin, block"),
    (["--coupling", "-5"], "--coupling"),
    (["--jobs", "0"], "--jobs"),
])
def test_bad_flags_get_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     flags: list[str], message: str) -> None:
    rc = main(["experiment", "coupled", "--out", str(tmp_path / "o"), "--quiet", *flags])
    assert rc != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
