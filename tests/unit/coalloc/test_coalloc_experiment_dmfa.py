"""``coalloc experiment dmfa`` end to end (small sizes) and its trace reader."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from coalloc import cli
from coalloc.experiments import dmfa as experiment
from fairness.dmfa import allocation_metrics, dmfa_srq, static_weighted_drf

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def check_against_library(rows: list[dict[str, str]], seed: int,
                          trace: np.ndarray | None = None) -> None:
    """Every CSV figure equals what the library gives on the rebuilt instance."""
    for row in rows:
        users, run = int(row["users"]), int(row["run"])
        demands, shares = experiment.make_instance(users, run, seed, trace)
        if row["algorithm"] == "dmfa_srq":
            allocation = dmfa_srq(demands, shares).final
        else:
            assert row["algorithm"] == "static_weighted_drf"
            allocation = static_weighted_drf(demands, shares)
        metrics = allocation_metrics(allocation, shares)
        assert float(row["min_dominant_share"]) == metrics.min_dominant_share
        assert float(row["sum_dominant_shares"]) == metrics.sum_dominant_shares
        assert float(row["min_normalised_share"]) == metrics.min_normalised_share
        assert float(row["cpu_utilization"]) == metrics.utilization[0]
        assert float(row["memory_utilization"]) == metrics.utilization[1]


def test_end_to_end_with_the_builtin_model(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code = cli.main(["experiment", "dmfa", "--users", "5,12", "--runs", "3", "--seed", "7",
                     "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0
    assert "100%" in captured.err  # the progress bar goes to stderr
    assert "dmfa_srq" in captured.out and "static_weighted_drf" in captured.out

    columns, rows = read_rows(out / "results.csv")
    assert tuple(columns) == experiment.CSV_COLUMNS
    assert len(rows) == 2 * 3 * 2  # users x runs x algorithms
    assert {(r["users"], r["run"], r["algorithm"]) for r in rows} == {
        (u, r, a) for u in ("5", "12") for r in ("0", "1", "2")
        for a in ("dmfa_srq", "static_weighted_drf")}
    check_against_library(rows, seed=7)

    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["users"] == [5, 12]
    assert summary["config"]["runs"] == 3
    mine = [float(r["sum_dominant_shares"]) for r in rows
            if r["users"] == "12" and r["algorithm"] == "dmfa_srq"]
    figures = summary["results"]["12"]["dmfa_srq"]["sum_dominant_shares"]
    assert figures["mean"] == pytest.approx(np.mean(mine))
    assert figures["std"] == pytest.approx(np.std(mine))

    png = (out / "dmfa.png").read_bytes()
    assert png.startswith(PNG_MAGIC)
    import matplotlib.pyplot as plt

    image = plt.imread(out / "dmfa.png")
    assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 300


def test_same_seed_same_results_other_seed_differs(tmp_path: Path) -> None:
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        assert cli.main(["experiment", "dmfa", "--users", "6", "--runs", "2", "--seed", seed,
                         "--out", str(tmp_path / name), "--quiet"]) == 0
    text = {n: (tmp_path / n / "results.csv").read_text() for n in "abc"}
    assert text["a"] == text["b"]
    assert text["a"] != text["c"]


def test_end_to_end_with_a_trace(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "trace.csv"
    values = [(0.01 * (i + 1), 0.02 * ((i * 7) % 10 + 1)) for i in range(10)]
    trace.write_text("job, cpu ,memory\n" + "".join(
        f"j{i},{c},{m}\n" for i, (c, m) in enumerate(values)))
    out = tmp_path / "out"
    code = cli.main(["experiment", "dmfa", "--users", "4,10", "--runs", "2", "--seed", "1",
                     "--trace", str(trace), "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    loaded = experiment.load_trace(trace)
    assert loaded.tolist() == [list(v) for v in values]
    _, rows = read_rows(out / "results.csv")
    check_against_library(rows, seed=1, trace=loaded)
    demands, _ = experiment.make_instance(10, 0, 1, loaded)
    # With as many users as rows, every row is used exactly once.
    assert sorted(map(tuple, demands.tolist())) == sorted(values)
    assert json.loads((out / "summary.json").read_text())["config"]["demands"] == str(trace)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("cpu,mem\n0.1,0.2\n", "line 1: memory: missing column"),
        ("cpu,memory\n0.1,0.2\n0.1,abc\n", "line 3: memory: not a number: 'abc'"),
        ("cpu,memory\n0.1,0.2\n1.5,0.2\n", "line 3: cpu: must be in [0, 1]"),
        ("cpu,memory\n-0.1,0.2\n", "line 2: cpu: must be in [0, 1]"),
        ("cpu,memory\nnan,0.2\n", "line 2: cpu: must be in [0, 1]"),
        ("cpu,memory\n0.1,0.2\n0,0\n", "line 3: cpu, memory: both zero"),
        ("cpu,memory\n0.1\n", "line 2: memory: not a number: ''"),
        ("cpu,memory\n", "no data rows"),
        ("cpu,memory\n0.1,0.2\n0.2,0.1\n", "has 2 data rows, need at least 3"),
    ],
)
def test_bad_trace_is_one_line_naming_file_line_field(
    tmp_path: Path, capsys, content: str, message: str
) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text(content)
    code = cli.main(["experiment", "dmfa", "--users", "3", "--runs", "1", "--trace",
                     str(trace), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"coalloc: error: {trace}: ")
    assert message in err
    assert not (tmp_path / "out" / "results.csv").exists()


def test_missing_trace_file_and_bad_flags(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nope.csv"
    assert cli.main(["experiment", "dmfa", "--trace", str(missing), "--quiet",
                     "--out", str(tmp_path)]) == 2
    assert f"{missing}: cannot read" in capsys.readouterr().err
    assert cli.main(["experiment", "dmfa", "--users", "10,x", "--quiet"]) == 2
    assert "--users: not a comma-separated list" in capsys.readouterr().err
    assert cli.main(["experiment", "dmfa", "--users", "0", "--quiet"]) == 2
    assert "--users: must be >= 1" in capsys.readouterr().err
    assert cli.main(["experiment", "dmfa", "--runs", "0", "--quiet"]) == 2
    assert "--runs: must be >= 1" in capsys.readouterr().err


def test_builtin_demand_model_matches_its_documented_parameters() -> None:
    demands = experiment.google_like_demands(np.random.default_rng(0), 20_000)
    assert demands.shape == (20_000, 2)
    assert demands.min() >= experiment.DEMAND_FLOOR and demands.max() <= 1.0
    medians = np.median(demands, axis=0)
    assert medians[0] == pytest.approx(experiment.CPU_MEDIAN, rel=0.05)
    assert medians[1] == pytest.approx(experiment.MEMORY_MEDIAN, rel=0.05)
    logs = np.log(demands)
    assert np.corrcoef(logs.T)[0, 1] == pytest.approx(experiment.LOG_CORRELATION, abs=0.05)
    shares = experiment.random_shares(np.random.default_rng(0), 50)
    assert shares.sum() == pytest.approx(1.0)
    assert shares.max() / shares.min() <= 1 / experiment.SHARE_LOW
